"""What ran during a call: Triton launches (hooks on Triton's launch paths) and torch ops (a dispatch mode).

The dispatch mode lives in the child with the user's code, which can switch it off; the trace in
``jobs.trace`` (CUDA) and the static scan in ``engine.trust`` are the evidence it cannot.

Dispatch modes are per thread. So every Python thread started in a job once :func:`install_launch_hooks` has run
(by ``threading``, a thread pool, or ``_thread``) runs its whole life under :class:`_ThreadOps`, which hands the
ops it sees to the recording in progress, if any: torch work a call hands to a worker thread, new or waiting in a
pool since import, counts as the call's, and allocations there are poisoned alike.

A CUDA graph's replay dispatches nothing, so what each graph captured (torch ops and Triton launches) is recorded at
capture, whenever that is, and a replay inside a recorded call counts it again as the call's own.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sys
import sysconfig
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode, _push_mode

from mcp_server.engine.compare import sentinel
from mcp_server.engine.frames import function_of, kernel_label
from mcp_server.engine.jobs.trees import iter_tensors

_tls = threading.local()
# Which autotune config ran, per kernel, when the interpreter could not benchmark (reported as info).
AUTOTUNE_NOTES: list[str] = []
# The CUDA streams Triton kernels were launched on, when a job asks (set to a LaunchStreams() to collect).
LAUNCH_STREAMS: LaunchStreams | None = None
_launches: list[str] = []
_launch_recording = False
_hooks_installed = False
# The recorder of the call being recorded, for the ops of other threads (None between recorded calls).
_active: _Recorder | None = None
_thread_lock = threading.RLock()
# What each CUDA graph captured, and how many captures are under way (their Triton launches are kept too).
_graph_work: weakref.WeakKeyDictionary[Any, Record] = weakref.WeakKeyDictionary()
_captures = 0
# Set while the judge captures its own graph (bench's CUDA-graph mode): that capture is not followed. Cleared
# (``follow_captures``) while a baseline's code runs in bench's child, whose graphs are its own.
_judge_capturing = False
_following_captures = True
# Whose code the process runs now, as bench's state switch sets it ("reference", or a submitted provider's name);
# per thread started while submitted code ran, whose code started it; and per such owner, how many Triton launches
# and torch ops its threads made while the process was someone else's (``interference``).
_owner = "reference"
_thread_owners: dict[int, str] = {}
_interference: dict[str, int] = {}
# Libraries for torch's own namespaces made by code other than torch's (``_watch_registrations``).
_replaced: list[str] = []
# Native code loaded by code other than Triton's or the judge's from outside the installed packages
# (``_follow_native_loads``).
_native: list[str] = []
# The containers above, whose identity never changes: the guard (jobs.integrity) watches this tuple, and
# ``handback_problems`` compares the module's names with it.
_CONTAINERS = (
    ("_tls", _tls),
    ("_launches", _launches),
    ("_thread_lock", _thread_lock),
    ("_graph_work", _graph_work),
    ("_thread_owners", _thread_owners),
    ("_interference", _interference),
    ("_replaced", _replaced),
    ("_native", _native),
)

# Frozen: in bench the candidate shares the process, and the guard (jobs.integrity) watches only what cannot change
# in place.
ALLOC_OPS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"})
# Data movement, views, allocation and initialisation: not the kernel's arithmetic. Lookups by index (gather,
# index_select, index, embedding) are not among them: with a table filled at import they compute any function of a
# 16-bit input (attacks/lookup_table.py).
# Ops whose output is a view of an input: nothing is written.
VIEW_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "as_strided",
        "expand",
        "expand_as",
        "view_as",
        "permute",
        "transpose",
        "t",
        "squeeze",
        "unsqueeze",
        "select",
        "slice",
        "narrow",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "alias",
        "detach",
        "lift_fresh",
        "view_as_real",
        "view_as_complex",
        "_conj",
        "_neg_view",
        "flatten",
        "unflatten",
        "movedim",
        "diagonal",
        "unfold",
        "real",
        "imag",
    }
)
MOVEMENT_OPS = (
    ALLOC_OPS
    | VIEW_OPS
    | {
        "lift_fresh_copy",
        "clone",
        "contiguous",
        "copy_",
        "copy",
        "_to_copy",
        "to",
        "fill_",
        "fill",
        "zero_",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "scalar_tensor",
        "arange",
        "resize_",
        "set_",
        "cat",
        "stack",
        "constant_pad_nd",
        "_local_scalar_dense",
        "item",
        "is_nonzero",
        "randn",
        "rand",
        "randint",
        "randn_like",
        "rand_like",
        "randint_like",
        "normal",
        "normal_",
        "uniform_",
        "random_",
        "bernoulli_",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "_has_compatible_shallow_copy_type",
        "record_stream",
        "resolve_conj",
        "resolve_neg",
        "repeat",
        "empty_permuted",
        "_pin_memory",
        "set_data",
    }
)
# The candidate's counted torch work in one call, as a share of the reference's own: validate's error and warning
# levels (bench allows its timed calls the validation's share plus the warning level, jobs.timed_ops).
TORCH_WORK_ERROR = 0.5
TORCH_WORK_WARNING = 0.1
# The ops a kernel is usually written to replace; their work is counted in FLOPs.
MATMUL_OPS = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "addmv",
        "mv",
        "matmul",
        "baddbmm",
        "addbmm",
        "dot",
        "vdot",
        "linear",
        "_addmm_activation",
        "_scaled_mm",
        "_int_mm",
        "_linear_pointwise",
        "mkldnn_linear",
    }
)
# Convolutions by any name (conv_tbc, _slow_conv2d_forward, mkldnn's), not conversions.
CONVOLUTION = re.compile(r"conv(?!ert)")
# FFTs: about 5 n log2 n operations over n points.
FFT_OPS = frozenset({"_fft_r2c", "_fft_c2r", "_fft_c2c", "fft_fft", "fft_rfft", "fft_irfft", "fft_ifft"})
# linalg_ ops that work element by element (everything else linalg_ is a factorization, solve or product: 2n³).
LINALG_ELEMENTWISE = frozenset({"linalg_vector_norm", "linalg_cross", "linalg_diagonal", "linalg_vecdot"})
# Pairwise distances: three operations per output element per feature.
DISTANCE_OPS = frozenset({"_cdist_forward", "_pdist_forward", "_euclidean_dist", "cdist"})
# Solves, inverses and factorizations of (batches of) n×n matrices: about 2n³ each.
CUBIC_OPS = frozenset(
    {
        "linalg_solve",
        "_linalg_solve_ex",
        "linalg_solve_ex",
        "linalg_inv",
        "linalg_inv_ex",
        "inverse",
        "triangular_solve",
        "linalg_solve_triangular",
        "cholesky",
        "linalg_cholesky_ex",
        "cholesky_solve",
        "cholesky_inverse",
        "linalg_lu",
        "linalg_lu_factor_ex",
        "lu_solve",
        "linalg_lu_solve",
        "linalg_qr",
        "geqrf",
        "_linalg_svd",
        "linalg_eig",
        "_linalg_eigh",
        "linalg_eigvals",
        "linalg_matrix_exp",
        "_linalg_det",
        "linalg_det",
        "_linalg_slogdet",
        "logdet",
        "linalg_pinv",
        "linalg_lstsq",
        "matrix_power",
        "ormqr",
        "lu_unpack",
        "cholesky_ex",
    }
)
# Fused ops count as the elementwise operations they stand for, per element: about the operations PyTorch's own
# decomposition of each runs (torch._decomp, down to prims; a clamp's compares and selects count as one). Counted
# as one, ``torch.softmax`` did a fifth of a reference written as amax, sub, exp, sum and div, and passed with a
# warning while doing all of its work; ``addcmul`` on 95 % of the elements read as 47 %.
FUSED_WORK = {
    "_softmax": 5,
    "_safe_softmax": 5,
    "_masked_softmax": 5,
    "_log_softmax": 5,
    "logaddexp": 5,
    "logaddexp2": 5,
    "log_sigmoid_forward": 4,
    "xlogy": 2,
    "logsumexp": 5,
    "native_layer_norm": 6,
    "native_group_norm": 6,
    "native_batch_norm": 4,
    "_native_batch_norm_legit": 4,
    "_native_batch_norm_legit_no_training": 4,
    "_fused_rms_norm": 4,
    "linalg_vector_norm": 2,
    "norm": 2,
    "var_mean": 2,
    "std_mean": 2,
    "gelu": 5,
    "silu": 5,
    "sigmoid": 4,
    "mish": 6,
    "softplus": 4,
    "elu": 6,
    "selu": 6,
    "celu": 3,
    "hardswish": 4,
    "hardsigmoid": 3,
    "leaky_relu": 3,
    "logit": 3,
    "softshrink": 4,
    "glu": 3,
    "addcmul": 3,
    "addcdiv": 3,
    "lerp": 3,
    "mse_loss": 3,
    "smooth_l1_loss": 6,
    "huber_loss": 6,
    "binary_cross_entropy": 8,
    "binary_cross_entropy_with_logits": 5,
    "cosine_similarity": 6,
    "_softmax_backward_data": 4,
    "_log_softmax_backward_data": 4,
    "native_layer_norm_backward": 10,
    "native_group_norm_backward": 10,
    "native_batch_norm_backward": 8,
    "_fused_rms_norm_backward": 8,
    "gelu_backward": 8,
    "silu_backward": 5,
    "sigmoid_backward": 3,
    "tanh_backward": 3,
    "mse_loss_backward": 3,
    "binary_cross_entropy_backward": 5,
}
# A lookup by index computes any function of its index (a table filled at import: attacks/lookup_table.py), so it
# counts as the most any fused op above stands for.
LOOKUP_OPS = ("gather", "index_select", "index", "take", "take_along_dim", "embedding", "_embedding_bag")
FUSED_WORK.update(dict.fromkeys(LOOKUP_OPS, max(FUSED_WORK.values())))


def _in_triton() -> bool:
    return getattr(_tls, "triton_depth", 0) > 0


# The ops of torch's own namespaces, whose names the lists above hold. An op of any other namespace is a custom op
# (``torch.library``): its Python body would run below the dispatch mode, unseen (``_opaque``).
TORCH_NAMESPACES = frozenset({"aten", "prims"})
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_STDLIB_DIR = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
_HERE = os.path.abspath(__file__)
_triton_dir: str | None = None


def _triton_root() -> str:
    """Triton's package folder (with a trailing separator), imported on first use."""
    global _triton_dir
    if _triton_dir is None:
        import triton

        _triton_dir = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
    return _triton_dir


def _caller_file(past_torch: bool = True) -> str:
    """The file of the innermost Python frame outside torch (unless ``past_torch`` is false), the standard library
    and this module: whose code made the op being dispatched."""
    skipped = (_TORCH_DIR, _STDLIB_DIR, "<frozen") if past_torch else (_STDLIB_DIR, "<frozen")
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(skipped) or name == _HERE):
            return os.path.abspath(name)
        frame = frame.f_back
    return ""


def _triton_own(name: str, args: tuple) -> bool:
    """Whether an op dispatched inside a Triton launch is Triton's own work, not the caller's. Triton's launch paths
    copy, clear and allocate (an autotuner's restore_value and reset_to_zero, the interpreter's host copies,
    do_bench's cache) and, on a GPU, do_bench sums up its timings in CPU tensors; they compute nothing on the caller's
    data. Anything else there is code Triton calls back (a heuristic, a pre- or post-hook, a launch hook, an
    interpreted kernel's body, a C function handed over as one of those) and counts as the call's."""
    caller = _caller_file()
    if not caller.startswith(_triton_root()):
        return False
    if name in MOVEMENT_OPS or name in ALLOC_OPS:
        return True
    return (
        caller == os.path.join(_triton_root(), "testing.py")
        and torch.cuda.is_available()
        and all(t.device.type == "cpu" for t in iter_tensors(args))
    )


def op_label(name: str) -> str:
    """An op as findings name it: ``aten.mul``, or a custom op's ``namespace::name``."""
    return name if "::" in name else f"aten.{name}"


@contextmanager
def _triton_scope() -> Iterator[None]:
    _tls.triton_depth = getattr(_tls, "triton_depth", 0) + 1
    try:
        yield
    finally:
        _tls.triton_depth -= 1


def _raw_stream_reader() -> Any:
    """The function Triton's own launcher reads the current stream's handle with (a C call)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else lambda index: torch.cuda.current_stream(index).cuda_stream


class LaunchStreams(dict):
    """Every CUDA stream a Triton kernel was launched on while this is ``LAUNCH_STREAMS``: (device index, raw stream
    handle) → the stream as a ``torch.cuda.Stream``.

    The launch hook reads the handle as Triton's launcher does; a stream object is built only the first time a handle
    is seen. (Building one on every launch, ``torch.cuda.current_stream()`` under a device guard, and hashing it
    into a set took 8.8 µs a launch on an H200 host; this takes 1.0: benchmarks/host_layers.py.)"""

    _raw = staticmethod(_raw_stream_reader())

    def launched(self) -> None:
        """Note the current stream: a Triton kernel is about to be launched on it."""
        index = torch.cuda.current_device()
        key = (index, self._raw(index))
        if key not in self:
            self[key] = torch.cuda.current_stream(index)
            self.added(key)

    def added(self, key: tuple[int, int]) -> None:
        """Called once per new stream, after it is noted (validate's side-stream delay)."""

    @staticmethod
    def key_of(stream: Any) -> tuple[int, int]:
        return (stream.device_index, stream.cuda_stream)


def _kernel_name(fn_obj: Any) -> str:
    fn = function_of(fn_obj)
    if fn is None:
        return getattr(fn_obj, "__name__", None) or type(fn_obj).__name__
    return kernel_label(fn.__name__, fn.__code__.co_filename, fn.__code__.co_firstlineno)


def install_launch_hooks() -> None:
    """Count launches of @triton.jit kernels and keep Triton's own torch calls out of the op record."""
    global _hooks_installed
    if _hooks_installed:
        return
    _follow_threads()
    _follow_graphs()
    _follow_host_reads()
    _follow_processes()
    _watch_dispatch_switches()
    _follow_below_dispatch()
    _watch_registrations()
    _follow_raw_memory()
    _follow_shared_memory()
    _follow_prints()
    _follow_native_loads()
    from triton.runtime import autotuner, jit

    classes: list[Any] = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover
        pass

    for cls in classes:
        original = cls.run

        def run(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            if not kwargs.get("warmup", False):  # (a compile ahead of time launches nothing)
                _tls.events = getattr(_tls, "events", 0) + 1
                _tls.work = getattr(_tls, "work", 0) + 1
                if _thread_owners:
                    _note_thread_work()
            if (_launch_recording or _captures) and not kwargs.get("warmup", False) and not _in_triton():
                _launches.append(_kernel_name(self))
                if _shared_spans and _active is not None:
                    read = _shared_bytes(iter_tensors((args, kwargs)))
                    if read:
                        with _thread_lock:
                            _active.record.host_read_bytes += read
            with _triton_scope():  # the stream hook's own torch calls are not the candidate's ops
                if LAUNCH_STREAMS is not None and not kwargs.get("warmup", False):
                    LAUNCH_STREAMS.launched()
                return __original(self, *args, **kwargs)

        cls.run = run

    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    for cls in (autotuner.Autotuner, autotuner.Heuristics):
        original = cls.run

        def tuned_run(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            if (_launch_recording or _captures) and not kwargs.get("warmup", False) and not _in_triton():
                _launches.append(_kernel_name(getattr(self, "base_fn", None) or self.fn))
            configs = getattr(self, "configs", None)
            if interpret and configs and len(configs) > 1:
                # Triton's autotuner benchmarks through a GPU driver, which the interpreter does not have:
                # run one config (PTT_AUTOTUNE_CONFIG, default 0) and say so.
                index = int(os.environ.get("PTT_AUTOTUNE_CONFIG", "0")) % len(configs)
                note = f"{_kernel_name(self)}: autotune config {index} of {len(configs)} ({configs[index]})"
                if note not in AUTOTUNE_NOTES:
                    AUTOTUNE_NOTES.append(note)
                self.configs = [configs[index]]
                try:
                    with _triton_scope():
                        return __original(self, *args, **kwargs)
                finally:
                    self.configs = configs
            with _triton_scope():
                return __original(self, *args, **kwargs)

        cls.run = tuned_run
    _hooks_installed = True


def _numel(x: Any) -> int:
    return x.numel() if isinstance(x, torch.Tensor) else 0


def _fused_work(name: str) -> int:
    """The elementwise operations one element of op ``name`` stands for: ``FUSED_WORK``, any other softmax as one,
    a ``_foreach_`` op as its single-tensor op."""
    if name.startswith("_foreach_"):
        name = name[len("_foreach_") :]
    if name in FUSED_WORK:
        return FUSED_WORK[name]
    return FUSED_WORK["_softmax"] if "softmax" in name else 1


def op_work(name: str, args: tuple[Any, ...], out: Any, foreign: bool = False) -> float:
    """A rough measure of an op's work: FLOPs for matrix products, convolutions, attention, linear algebra and
    FFTs, else elements touched (times the elementwise operations a fused op stands for, ``FUSED_WORK``).
    ``foreign``: an op of another namespace (a C++ kernel of mkldnn's, say), whose name says nothing: two matrices
    among its tensors count as their product."""
    tensors_in = [a for a in args if isinstance(a, torch.Tensor)]
    tensors_out = list(iter_tensors(out)) if not isinstance(out, torch.Tensor) else [out]
    # Ops over lists of tensors (``_foreach_``, the fused optimizers; in place, they return none): every element of
    # the largest list, the result's included (a one-element list broadcasts against the others).
    # (``_fused_rms_norm`` takes a list of ints, and is counted as any other op below.)
    lists = [found for a in args if isinstance(a, list | tuple) and (found := list(iter_tensors(a)))]
    if lists and name.startswith(("_foreach_", "_fused_")):
        widest = max(sum(_numel(t) for t in found) for found in [*lists, tensors_out])
        return float(widest) * _fused_work(name)
    matrices = [t for t in tensors_in if t.dim() >= 2]
    if foreign and len(matrices) >= 2:
        a, b = matrices[0], matrices[1]
        return 2.0 * a.numel() * max(b.shape[-1], b.shape[-2])
    if name in FFT_OPS and tensors_in:
        x = tensors_in[0]
        size = max(x.shape[-1] if x.dim() else 1, 2)
        return 5.0 * max([_numel(t) for t in tensors_in + tensors_out]) * math.log2(size)
    if CONVOLUTION.search(name) and len(tensors_in) >= 2 and tensors_in[1].dim() >= 2:
        w = tensors_in[1]  # [out, in, k…] (conv_tbc's: [k, in, out]): what one output element sums
        per_out = w.numel() // max(w.shape[-1] if name == "conv_tbc" else w.shape[0], 1)
        return 2.0 * sum(_numel(t) for t in tensors_out) * per_out
    if name == "_trilinear" and len(tensors_in) == 3:
        return 2.0 * _trilinear_points(args)
    if name in DISTANCE_OPS and len(tensors_in) >= 1:
        depth = tensors_in[0].shape[-1] if tensors_in[0].dim() >= 1 else 1
        return 3.0 * max(sum(_numel(t) for t in tensors_out), 1) * depth
    if (
        (name in CUBIC_OPS or (name.startswith("linalg_") and name not in LINALG_ELEMENTWISE))
        and tensors_in
        and (tensors_in[0].dim() >= 2)
    ):
        a = tensors_in[0]
        n = max(a.shape[-1], a.shape[-2])
        return 2.0 * (a.numel() // max(a.shape[-1] * a.shape[-2], 1)) * n**3 + sum(_numel(t) for t in tensors_in[1:])
    if name in MATMUL_OPS and tensors_in:
        dims = [t.shape for t in tensors_in if t.dim() >= 1]
        out_numel = max(sum(_numel(t) for t in tensors_out), 1)
        inner = max((s[-1] for s in dims if len(s) >= 2), default=0) or max((s[-1] for s in dims), default=1)
        # The product's own operands (past a bias), each multiply-add of them: addbmm sums over a batch its output
        # does not have.
        pair = tensors_in[1:3] if name.startswith(("add", "baddbmm", "_addmm")) else tensors_in[:2]
        if name in ("linear", "_linear_pointwise", "mkldnn_linear") and len(tensors_in) >= 2:
            pair = [tensors_in[0], tensors_in[1].t() if tensors_in[1].dim() == 2 else tensors_in[1]]
        products = 0.0
        if len(pair) == 2 and pair[0].dim() >= 1:
            products = 2.0 * pair[0].numel() * (pair[1].shape[-1] if pair[1].dim() >= 2 else 1)
        return max(2.0 * out_numel * inner, products)
    if "attention" in name and len(tensors_in) >= 3:
        q, k = tensors_in[0], tensors_in[1]
        return 4.0 * q.numel() * (k.shape[-2] if k.dim() >= 2 else 1)
    # Elements touched, a list's tensors together (an op over a list of tensors scales every one of them).
    touched = [_numel(t) for t in tensors_in + tensors_out] + [sum(_numel(t) for t in found) for found in lists]
    return float(max(touched or [0])) * _fused_work(name)


def _trilinear_points(args: tuple[Any, ...]) -> int:
    """The points of ``_trilinear``'s product (``F.bilinear`` decomposes into it): its three inputs, each unsqueezed at
    its ``expand`` dims, broadcast together; a matrix product's multiply-adds when it stands for one."""
    try:
        shapes = []
        for tensor, expand in zip(args[:3], args[3:6], strict=True):
            shape = list(tensor.shape)
            for dim in sorted(expand):
                shape.insert(dim, 1)
            shapes.append(shape)
        full = [max(sizes) for sizes in zip(*shapes, strict=True)]
        return math.prod(full)
    except (TypeError, ValueError, IndexError):
        return max(_numel(t) for t in args[:3] if isinstance(t, torch.Tensor))


@dataclass
class Record:
    launches: list[str] = field(default_factory=list)
    ops: dict[str, list[float]] = field(default_factory=dict)  # name -> [calls, work]
    # Every op the mode saw, counted or not (what the recorder's host cost scales with).
    dispatched: int = 0
    # Bytes of tensor data the call handed to Python (``HOST_READS``, ``.item()``): see ``_follow_host_reads``.
    host_read_bytes: int = 0
    # Host-read points (``owner.name``) whose wrapper was gone at the call's start or end (put back each time).
    host_reads_unhooked: list[str] = field(default_factory=list)
    # Processes the call started (how, and from which file), Triton's own compiler runs aside: see
    # ``_follow_processes``.
    processes: list[str] = field(default_factory=list)
    # The switches of torch's dispatch (``DISPATCH_SWITCHES``) code other than torch's own used during the call.
    dispatch_off: list[str] = field(default_factory=list)
    # ctypes' ways from an address to memory Python can read (``RAW_MEMORY``) used during the call by code other than
    # torch's or Triton's.
    raw_memory: list[str] = field(default_factory=list)

    @property
    def torch_work(self) -> float:
        return sum(v[1] for v in self.ops.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "launches": self.launches,
            "ops": {k: {"calls": int(v[0]), "work": v[1]} for k, v in self.ops.items()},
            "host_read_bytes": self.host_read_bytes,
            "host_reads_unhooked": self.host_reads_unhooked,
            "processes": self.processes,
            "dispatch_off": self.dispatch_off,
            "raw_memory": self.raw_memory,
        }


def poison_value(dtype: torch.dtype, second: bool) -> float | int | complex | None:
    if dtype.is_complex:
        return complex(float("nan"), float("nan")) if not second else complex(1e30, 1e30)
    if dtype.is_floating_point:
        return sentinel(dtype) if second else float("nan")
    if dtype == torch.bool:
        return None
    info = torch.iinfo(dtype)
    return info.max - 3 if second else info.min + 3


class _Recorder(TorchDispatchMode):
    def __init__(self, record: Record, poison: bool, second: bool):
        super().__init__()
        self.record = record
        self.poison = poison
        self.second = second

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        _tls.events = getattr(_tls, "events", 0) + 1
        if getattr(func, "namespace", "aten") not in TORCH_NAMESPACES or _own_handlers(types):
            return _opaque(self, self, func, args, kwargs or {}, types)
        out = _dispatched(func, args, kwargs)
        with _thread_lock:
            self.observe(func, args, out)
        return out

    def observe(self, func: Any, args: tuple, out: Any) -> None:
        """Count one dispatched op (on any thread): compute in the record, fresh allocations poisoned."""
        self.count(func.overloadpacket.__name__, getattr(func, "namespace", "aten"), args, out)

    def count(self, name: str, namespace: str, args: tuple, out: Any) -> None:
        """Count op ``name`` of ``namespace``, run on ``args`` with result ``out`` (see ``observe``)."""
        self.record.dispatched += 1
        if namespace not in TORCH_NAMESPACES:
            # A custom op whose body showed nothing (a C++ kernel): its work counts, whatever its name.
            entry = self.record.ops.setdefault(f"{namespace}::{name}", [0, 0.0])
            entry[0] += 1
            entry[1] += op_work(name, args, out, foreign=True)
            _tls.work = getattr(_tls, "work", 0) + 1
            return
        if _in_triton() and _triton_own(name, args):
            return
        if _shared_spans and name not in VIEW_OPS:
            self.record.host_read_bytes += _shared_bytes(out if isinstance(out, torch.Tensor) else iter_tensors(out))
        base = name[:-1] if name.endswith("_") and name not in MOVEMENT_OPS else name
        if name == "_local_scalar_dense" and not getattr(_tls, "host_read_depth", 0):
            self.record.host_read_bytes += args[0].element_size()  # .item(), float(t), int(t), bool(t)
        if name in ALLOC_OPS:
            if self.poison and isinstance(out, torch.Tensor) and out.numel():
                value = poison_value(out.dtype, self.second)
                if value is not None:
                    out.fill_(value)
            return
        if name in MOVEMENT_OPS or base in MOVEMENT_OPS:
            return
        entry = self.record.ops.setdefault(base, [0, 0.0])
        entry[0] += 1
        entry[1] += op_work(base, args, out)
        _tls.work = getattr(_tls, "work", 0) + 1


_AFTER_PYTHON = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)


def _dispatched(func: Any, args: tuple, kwargs: dict | None) -> Any:
    """Run an op the mode saw, below it: ``_below`` leaves what torch runs inside it uncounted."""
    _tls.dispatch_depth = getattr(_tls, "dispatch_depth", 0) + 1
    try:
        return func(*args, **(kwargs or {}))
    finally:
        _tls.dispatch_depth -= 1


def _own_handlers(types: Any) -> list[Any]:
    """The ``__torch_dispatch__`` handlers of the tensor subclasses among an op's arguments other than torch's own:
    the dispatcher calls them after the modes, with the modes off, so the ops they run would go unseen."""
    found = []
    for cls in types or ():
        handler = getattr(cls, "__torch_dispatch__", None)
        if handler is None or getattr(handler, "__func__", handler) is _NO_HANDLER:
            continue
        if not (getattr(cls, "__module__", "") or "").startswith("torch."):
            found.append(handler)
    return found


_NO_HANDLER = getattr(torch._C, "_disabled_torch_dispatch_impl", None)


def _opaque(
    mode: TorchDispatchMode, recorder: _Recorder | None, func: Any, args: tuple, kwargs: dict, types: Any = ()
) -> Any:
    """Run a custom op (``torch.library``), or an op on a tensor subclass with its own ``__torch_dispatch__``, so that
    what its body does is seen. A dispatch mode's handler runs with the mode off, so a Python body would run unseen:
    here a custom op runs below the Python key, and a subclass's handlers are called as the dispatcher would call
    them, with ``mode`` pushed again: their own ops and Triton launches are seen as any others. The op itself counts
    as work only when its body showed nothing (a C++ kernel, or one with no tensor to dispatch on)."""
    handlers = _own_handlers(types)
    tensor = next(iter_tensors((args, kwargs)), None)
    keys = torch._C._dispatch_keys(tensor) & _AFTER_PYTHON if tensor is not None else None
    if keys is None and not handlers:
        out = func(*args, **kwargs)
        seen = False
    else:
        # Seen: the body ran a Triton kernel or counted torch work (its allocations alone show nothing: a C++
        # kernel's own empty() dispatches too).
        before = getattr(_tls, "work", 0)
        out = NotImplemented
        _push_mode(mode)
        try:
            for handler in handlers:
                out = handler(func, types, args, kwargs)
                if out is not NotImplemented:
                    break
            else:
                if not handlers:
                    out = func.redispatch(keys, *args, **kwargs)
        finally:
            _pop_mode()
        if out is NotImplemented:  # every handler declined: torch's own error, with the mode off as torch raises it
            out = func(*args, **kwargs)
        seen = getattr(_tls, "work", 0) > before
    if not seen:
        recorder = recorder if recorder is not None else _active
        if recorder is not None:
            with _thread_lock:
                recorder.observe(func, args, out)
    return out


def own(who: str) -> None:
    """The process now runs ``who``'s code (bench's state switch): threads started from now on are ``who``'s."""
    global _owner
    _owner = who


def interference() -> dict[str, int]:
    """Per submitted provider, the Triton launches and torch ops (allocations aside) that threads its code started
    made while the process ran another's code: work that lands beside, and slows, whatever is timed then."""
    return {who: n for who, n in _interference.items() if n}


def _note_thread_work() -> None:
    owner = _thread_owners.get(threading.get_ident())
    if owner is not None and owner != _owner:
        _interference[owner] = _interference.get(owner, 0) + 1


class _ThreadOps(TorchDispatchMode):
    """The mode of every Python thread started in a job: its ops go to the recording in progress, if any."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        _tls.events = getattr(_tls, "events", 0) + 1
        if func.overloadpacket.__name__ not in ALLOC_OPS:
            _note_thread_work()
        if getattr(func, "namespace", "aten") not in TORCH_NAMESPACES:
            return _opaque(self, None, func, args, kwargs or {})
        if _own_handlers(types):
            return _opaque(self, None, func, args, kwargs or {}, types)
        out = _dispatched(func, args, kwargs)
        active = _active
        if active is not None:
            with _thread_lock:
                active.observe(func, args, out)
        return out


def _under_thread_ops(function: Any) -> Any:
    owner = _owner  # whose code is starting the thread

    def run(*args: Any, **kwargs: Any) -> Any:
        # Pushed on this thread's mode stack alone: entering the mode with `with` would also set torch's
        # process-wide "in a dispatch mode" flags, for the life of the thread, which the main thread reads too.
        _push_mode(_ThreadOps())
        ident = threading.get_ident()
        if owner != "reference":
            _thread_owners[ident] = owner
        try:
            return function(*args, **kwargs)
        finally:
            _thread_owners.pop(ident, None)
            with contextlib.suppress(Exception):
                _pop_mode()

    return run


# Methods that hand a tensor's or a storage's bytes to Python without dispatching an op, counted as host reads of
# the recorded call. Item access dispatches ``_local_scalar_dense``, counted in ``observe``: ``.item()``,
# ``float(t)``, and a storage's items, ``.tolist()`` and ``bytes()``. On a GPU the CUDA trace sees such reads as
# device→host copies; under the interpreter, where every tensor already lives on the host, these counts are the
# evidence (trust.evidence).
HOST_READS = ("tolist", "numpy", "__array__", "__dlpack__")
# CPU tensors' methods that call a Python function on every element (of the tensor and of the others given).
PYTHON_PER_ELEMENT = ("apply_", "map_", "map2_")
# A storage's bytes as a file: torch.save's old format (also behind a storage's ``__reduce__``, so pickle) writes
# through ``_write_file``; shared memory exposes them as a file or descriptor any code can read.
STORAGE_READS = ("_write_file", "share_memory_", "_share_fd_cpu_", "_share_filename_cpu_")
# The wrapper installed at each point ``(owner, name)``, to tell whether code put the original back, and the
# point's name in findings.
_HOST_READ_WRAPPERS: dict[tuple[Any, str], tuple[Any, str]] = {}
# The classes of a host-read point's MRO with no definition of its own (``_definitions``).
_HOST_READ_ABSENT: list[tuple[Any, str, str]] = []


# A tensor as a DLPack capsule (what numpy.from_dlpack and others read): the functions behind ``__dlpack__``.
DLPACK_EXPORTS = ("_to_dlpack", "_to_dlpack_versioned")
# TorchScript's and torch._C's serializers, which write a module's or an object's tensors as bytes returned or
# as a file: what they hand over is counted by its size.
SCRIPT_TO_BYTES = ("save_to_buffer", "_save_to_buffer_for_mobile")
SCRIPT_TO_FILE = ("save", "_save_for_mobile")
C_TO_BYTES = ("_pickle_save", "_save_jit_module_to_bytes", "_save_mobile_module_to_bytes")
C_TO_FILE = ("_save_jit_module", "_save_mobile_module", "_save_parameters")


def _tensor_bytes(args: tuple, _: Any) -> int:
    return args[0].numel() * args[0].element_size()


def _tensors_bytes(args: tuple, _: Any) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def _storage_bytes(args: tuple, _: Any) -> int:
    return args[0].nbytes()


def _record_bytes(args: tuple, _: Any) -> int:
    """torch.save's zip format: ``write_record(name, data, size)`` with data a storage (or its address); a record
    of str or bytes is Python's already."""
    data = args[2] if len(args) > 2 else None
    size = args[3] if len(args) > 3 else 0
    return 0 if isinstance(data, str | bytes | bytearray) else int(size or 0)


def _returned_bytes(_: tuple, result: Any) -> int:
    return len(result) if isinstance(result, bytes | bytearray) else 0


def _file_bytes(args: tuple, _: Any) -> int:
    """The size of the file a serializer just wrote: its first path argument."""
    for arg in args:
        if isinstance(arg, str) and os.path.isfile(arg):
            return os.path.getsize(arg)
    return 0


def _host_read_points() -> list[tuple[Any, str, str, Any]]:
    """(owner, its name in findings, method, bytes read by a call from its arguments and result) of every point
    there is in this torch."""
    import torch.utils.dlpack as dlpack

    points: list[tuple[Any, str, str, Any]] = [(torch.Tensor, "torch.Tensor", n, _tensor_bytes) for n in HOST_READS]
    points += [(torch.Tensor, "torch.Tensor", n, _tensors_bytes) for n in PYTHON_PER_ELEMENT]
    points += [(torch.UntypedStorage, "torch.UntypedStorage", n, _storage_bytes) for n in STORAGE_READS]
    points += [(torch._C, "torch._C", n, _tensor_bytes) for n in DLPACK_EXPORTS]
    points += [(torch, "torch", "to_dlpack", _tensor_bytes), (dlpack, "torch.utils.dlpack", "to_dlpack", _tensor_bytes)]
    writer = getattr(torch._C, "PyTorchFileWriter", None)
    if writer is not None:
        points.append((writer, "torch._C.PyTorchFileWriter", "write_record", _record_bytes))
    script = getattr(torch._C, "ScriptModule", None)
    if script is not None:
        points += [(script, "torch._C.ScriptModule", n, _returned_bytes) for n in SCRIPT_TO_BYTES]
        points += [(script, "torch._C.ScriptModule", n, _file_bytes) for n in SCRIPT_TO_FILE]
    points += [(torch._C, "torch._C", n, _returned_bytes) for n in C_TO_BYTES]
    points += [(torch._C, "torch._C", n, _file_bytes) for n in C_TO_FILE]
    return [point for point in points if hasattr(point[0], point[2])]


def _follow_host_reads() -> None:
    """Wrap every host-read point to add the bytes read to the recording in progress (on any thread; not inside a
    Triton launch, and once where one read goes through another: ``__array__`` calls ``numpy``, a storage's
    ``__reduce__`` torch.save)."""
    for owner, label, name, count in _host_read_points():
        for holder, original in _definitions(owner, label, name):
            _wrap_host_read(holder, label if holder is owner else _class_label(holder), name, original, count)


def _class_label(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _definitions(owner: Any, label: str, name: str) -> list[tuple[Any, Any]]:
    """(class or module, what it holds under ``name``) for every definition a read of ``owner.name`` can reach: for a
    class, each class of its MRO that defines it (torch.Tensor's ``tolist`` is the C base type's, which
    ``super(type(x), x).tolist()`` reaches past any wrapper on torch.Tensor); the classes that do not are noted, so
    that a definition put there later (the original, shadowing the wrapper) is seen."""
    if not isinstance(owner, type):
        return [(owner, getattr(owner, name))]
    found = []
    for cls in owner.__mro__[:-1]:  # (not object)
        held = cls.__dict__.get(name)
        if held is None:
            _HOST_READ_ABSENT.append((cls, name, f"{label if cls is owner else _class_label(cls)}.{name}"))
        elif not isinstance(held, staticmethod | classmethod):
            found.append((cls, held))
    return found


def _set_class_attr(cls: Any, name: str, value: Any) -> None:
    """``setattr(cls, name, value)``, also for a C type that refuses it (torch._C.TensorBase, StorageBase): its
    dictionary is changed in place and the interpreter's method cache told. Deleting where ``value`` is None."""
    try:
        if value is None:
            delattr(cls, name)
        else:
            setattr(cls, name, value)
        return
    except (TypeError, AttributeError):
        pass
    import ctypes
    import gc

    held = [ref for ref in gc.get_referents(cls.__dict__) if isinstance(ref, dict)]
    if len(held) != 1:
        return
    if value is None:
        held[0].pop(name, None)
    else:
        held[0][name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def _read_counts(depth: int) -> bool:
    """Whether a host read being made counts: not one torch makes inside another (``__array__`` calls ``numpy``),
    where a read made from inside another by user code (a callback of ``apply_``) does; and inside a Triton launch
    only one made by code Triton calls back (a heuristic, a hook), not Triton's own copies."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == _HERE:
        frame = frame.f_back
    immediate = frame.f_code.co_filename if frame is not None else ""
    if depth and immediate.startswith(_TORCH_DIR):
        return False
    return not _in_triton() or not _caller_file().startswith((_triton_root(), _JUDGE_DIR))


def _wrap_host_read(owner: Any, label: str, name: str, original: Any, count: Any) -> None:
    def read(*args: Any, __original: Any = original, __count: Any = count, **kwargs: Any) -> Any:
        depth = getattr(_tls, "host_read_depth", 0)
        _tls.host_read_depth = depth + 1
        try:
            result = __original(*args, **kwargs)
        finally:
            _tls.host_read_depth = depth
        if name in SHARES and args:  # at an import too: its memory can be mapped from its descriptor later
            _note_shared(args[0], shared=True)
        active = _active
        if active is not None and _read_counts(depth):
            with _thread_lock:
                active.record.host_read_bytes += __count(args, result)
        return result

    read.__name__ = read.__qualname__ = name
    if isinstance(owner, type):
        _set_class_attr(owner, name, read)
    else:
        setattr(owner, name, read)
    _HOST_READ_WRAPPERS[(owner, name)] = (read, f"{label}.{name}")


def _rehook_host_reads(record: Record) -> None:
    """Note in ``record`` each host-read wrapper code took off its class, or shadowed with a definition in a class
    that had none, and put it back."""
    for (owner, name), (wrapper, label) in _HOST_READ_WRAPPERS.items():
        if owner.__dict__.get(name) is not wrapper:
            if label not in record.host_reads_unhooked:
                record.host_reads_unhooked.append(label)
            _set_class_attr(owner, name, wrapper) if isinstance(owner, type) else setattr(owner, name, wrapper)
    for cls, name, label in _HOST_READ_ABSENT:
        if name in cls.__dict__:
            if label not in record.host_reads_unhooked:
                record.host_reads_unhooked.append(label)
            _set_class_attr(cls, name, None)


# What turns a dispatch mode off for the code inside, or takes it off the stack: torch._C's guards and mode-stack
# functions, and torch.utils._python_dispatch's helpers around them. Torch's own code uses them (fake tensors,
# custom ops' machinery); any other code doing so during a recorded call hides its torch work from the recorder.
DISPATCH_SWITCHES = {
    "torch._C": (
        "_DisableTorchDispatch",
        "_ExcludeDispatchKeyGuard",
        "_ForceDispatchKeyGuard",
        "_unset_dispatch_mode",
        "_set_dispatch_mode",
        "_pop_torch_dispatch_stack",
        "_dispatch_tls_set_dispatch_key_excluded",
    ),
    "torch.utils._python_dispatch": ("_pop_mode", "_pop_mode_temporarily", "_disable_current_modes"),
}


def _torch_internal_use() -> bool:
    """Whether the switch being used is torch's own business: made by torch's code for torch's code (fake tensors,
    custom ops' machinery, a mode's own enter and exit), not a torch context manager that turns dispatch off and
    hands control back to the code that entered it (``no_dispatch`` of ``torch.sparse``'s helpers)."""
    frame = sys._getframe(2)
    seen_torch = entered = False
    while frame is not None:
        name = frame.f_code.co_filename
        if name == _HERE:
            pass
        elif name.startswith(_STDLIB_DIR):
            # A context manager's __enter__ (contextlib's, around a torch generator): entered by whoever comes next.
            entered = entered or (seen_torch and frame.f_code.co_name == "__enter__")
        elif name.startswith(_TORCH_DIR):
            seen_torch, entered = True, False
        else:
            return seen_torch and not entered
        frame = frame.f_back
    return seen_torch


def _note_switch(label: str) -> None:
    active = _active
    if active is None:
        return
    if _torch_internal_use():
        return
    with _thread_lock:
        if label not in active.record.dispatch_off:
            active.record.dispatch_off.append(label)


def _watch_dispatch_switches() -> None:
    """Put a wrapper in place of each of ``DISPATCH_SWITCHES`` that notes, in the recording in progress, a use by
    code other than torch's: the scan reads these names where it can, the wrapper sees them by whatever name they
    were reached."""
    import importlib

    replaced: dict[int, tuple[Any, Any]] = {}
    for module_name, names in DISPATCH_SWITCHES.items():
        module = importlib.import_module(module_name)
        for name in names:
            original = getattr(module, name, None)
            if original is None:
                continue
            label = f"{module_name}.{name}"
            if isinstance(original, type):

                class Switch:
                    __slots__ = ("_inner",)
                    _original, _label = original, label

                    def __init__(self, *args: Any, **kwargs: Any) -> None:
                        _note_switch(self._label)
                        self._inner = self._original(*args, **kwargs)

                    def __enter__(self) -> Any:
                        _note_switch(self._label)
                        return self._inner.__enter__()

                    def __exit__(self, *exc: Any) -> Any:
                        return self._inner.__exit__(*exc)

                Switch.__name__ = Switch.__qualname__ = name
                setattr(module, name, Switch)
            else:

                def switch(*args: Any, __original: Any = original, __label: str = label, **kwargs: Any) -> Any:
                    _note_switch(__label)
                    return __original(*args, **kwargs)

                switch.__name__ = switch.__qualname__ = name
                setattr(module, name, switch)
            replaced[id(original)] = (original, getattr(module, name))
    # Torch modules that bound a switch by name at import (``no_dispatch = torch._C._DisableTorchDispatch``).
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("torch"):
            continue
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            entry = replaced.get(id(value))
            if entry is not None and entry[0] is value:
                setattr(module, attr, entry[1])


# Ways to run a torch op for a dispatch key, or key set, that skips the Python key, where no dispatch mode sees it:
# an op overload's ``_op_dk`` (behind ``redispatch``; ``torch._C._get_operation_overload`` hands out raw ones), a
# kernel ``torch.library.get_kernel`` returns (``call_boxed``), an operator handle's ``redispatch_boxed``. Each is
# wrapped to count the op in the recording in progress, as the mode would have: the scan names these where it can
# read them, the wrappers see them however they were reached.
_PYTHON_KEY = torch._C.DispatchKey.Python
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _skips_python(keys: Any) -> bool:
    if isinstance(keys, torch._C.DispatchKeySet):
        return not keys.has(_PYTHON_KEY)
    return keys not in (_PYTHON_KEY, "Python")


def _below(qualified: str, keys: Any, args: tuple, kwargs: dict, out: Any) -> None:
    """Count torch op ``qualified`` (``aten::mul``), run for ``keys`` below the dispatch mode, in the recording in
    progress. Left out: a custom op's (``_opaque`` judges those), torch's own runs inside an op the mode saw, and
    runs on tensor subclasses (fake, functional, nested: torch's tracing machinery)."""
    active = _active
    if active is None or getattr(_tls, "dispatch_depth", 0) or not _skips_python(keys):
        return
    namespace, _, rest = qualified.partition("::")
    if namespace not in TORCH_NAMESPACES:
        return
    tensors = list(iter_tensors((args, kwargs)))
    if not tensors or any(type(t) not in _PLAIN_TENSORS for t in tensors):
        return
    _tls.events = getattr(_tls, "events", 0) + 1
    with _thread_lock:
        active.count(rest.split(".")[0], namespace, args, out)


def _counted_op_dk(qualified: str, op_dk: Any) -> Any:
    def op_dk_counted(keys: Any, *args: Any, **kwargs: Any) -> Any:
        out = op_dk(keys, *args, **kwargs)
        _below(qualified, keys, args, kwargs, out)
        return out

    op_dk_counted._ptt_counted = True  # type: ignore[attr-defined]
    return op_dk_counted


def _count_overload(overload: Any) -> None:
    op_dk = overload.__dict__.get("_op_dk")
    if op_dk is not None and not getattr(op_dk, "_ptt_counted", False):
        overload._op_dk = _counted_op_dk(getattr(overload, "_name", "aten::?"), op_dk)


def _follow_below_dispatch() -> None:
    """Wrap every way to run an op below the Python key (above) to count what it runs."""
    from torch import _ops

    init = _ops.OpOverload.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _count_overload(self)

    _ops.OpOverload.__init__ = __init__
    # The overloads made before: torch.ops' namespaces hold their packets, the packets their overloads.
    for namespace in list(vars(torch.ops).values()):
        if not isinstance(namespace, _ops._OpNamespace):
            continue
        for packet in list(vars(namespace).values()):
            if isinstance(packet, _ops.OpOverloadPacket):
                for overload in list(vars(packet).values()):
                    if isinstance(overload, _ops.OpOverload):
                        _count_overload(overload)
    raw = getattr(torch._C, "_get_operation_overload", None)
    if raw is not None:

        def _get_operation_overload(name: str, overload: str) -> Any:
            found = raw(name, overload)
            if found is None:
                return found
            qualified = name if not overload else f"{name}.{overload}"
            return (found[0], _counted_op_dk(qualified, found[1]), *found[2:])

        torch._C._get_operation_overload = _get_operation_overload
    kernel_type = getattr(torch._C, "_SafeKernelFunction", None)
    if kernel_type is not None and hasattr(kernel_type, "call_boxed"):
        call_boxed = kernel_type.call_boxed

        def kernel_call_boxed(self: Any, keys: Any, *args: Any, **kwargs: Any) -> Any:
            out = call_boxed(self, keys, *args, **kwargs)
            _below(self.op_handle.schema().name, keys, args, kwargs, out)
            return out

        kernel_type.call_boxed = kernel_call_boxed
    handle_type = getattr(torch._C, "_DispatchOperatorHandle", None)
    if handle_type is not None and hasattr(handle_type, "redispatch_boxed"):
        redispatch_boxed = handle_type.redispatch_boxed

        def handle_redispatch_boxed(self: Any, keys: Any, *args: Any, **kwargs: Any) -> Any:
            out = redispatch_boxed(self, keys, *args, **kwargs)
            _below(self.schema().name, keys, args, kwargs, out)
            return out

        handle_type.redispatch_boxed = handle_redispatch_boxed


# Kernels of torch's own ops put in place by other code (``torch.library`` on "aten" or "prims"): a fallthrough for
# the Python key takes an op out of every dispatch mode's sight, and a kernel for the CPU or CUDA key runs below
# the mode, where an op that reads as a copy (``clone``) can compute anything. Seen two ways: the creation of a
# library for torch's namespaces (or for every namespace's fallbacks, "_") by code other than a torch module being
# imported, noted whenever it happens; and the dispatcher's table of those ops' kernels against the table taken
# before any user code ran (``snapshot_kernels``), which sees a registration however it was made.
_kernel_table: frozenset[tuple[str, str]] | None = None


def _kernel_lines() -> set[tuple[str, str]]:
    """(op, line of the dispatcher's dump) of every active kernel of an aten or prims op but its meta ones."""
    lines = set()
    for op in torch._C._dispatch_get_registrations_for_dispatch_key(""):
        if op.split("::")[0] not in TORCH_NAMESPACES:
            continue
        for line in torch._C._dispatch_dump(op).splitlines():
            key, found, _ = line.partition(": registered at ")
            if found and "(inactive)" not in key and key not in ("debug", "Meta"):
                lines.add((op, line))
    return lines


def snapshot_kernels() -> None:
    """Take the table ``replaced_kernels`` compares with, once per process (before any user code is imported)."""
    global _kernel_table
    if _kernel_table is None:
        _kernel_table = frozenset(_kernel_lines())


def registrations() -> list[str]:
    """The libraries for torch's namespaces code other than torch's made so far (cheap: ``replaced_kernels`` also
    reads the dispatcher's table)."""
    return list(_replaced)


def replaced_kernels() -> list[str]:
    """Every kernel of a torch op registered since ``snapshot_kernels`` by code other than torch's, and every library
    for torch's namespaces such code made (even one destroyed since)."""
    found = list(_replaced)
    if _kernel_table is None:
        return found
    known = {op for op, _ in _kernel_table}
    for op, line in sorted(_kernel_lines() - _kernel_table):
        key, _, rest = line.partition(": registered at ")
        where = rest.split(" :: ")[0]
        if op not in known and where.startswith(_TORCH_DIR):
            continue  # an op torch itself defined since (torch.compile's prims)
        how = " (a fallthrough)" if "fallthrough" in rest else ""
        label = f"{op}'s {key} kernel{how}, registered at {os.path.basename(where)}"
        if label not in found:
            found.append(label)
    return found


def _torch_import() -> bool:
    """Whether the code calling is a torch module's own import (torch registering its kernels, at any time)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_TORCH_DIR):
            if frame.f_code.co_name == "<module>":
                return True
        elif not (name == _HERE or name.startswith((_STDLIB_DIR, "<frozen"))):
            return False
        frame = frame.f_back
    return False


def _watch_registrations() -> None:
    snapshot_kernels()
    raw = torch._C._dispatch_library

    def _dispatch_library(kind: Any, namespace: Any, *args: Any, **kwargs: Any) -> Any:
        if (namespace in TORCH_NAMESPACES or namespace == "_") and not _torch_import():
            caller = os.path.basename(_caller_file()) or "native code"
            note = f"a torch.library {kind} library for {namespace!r} made in {caller}"
            if note not in _replaced:
                _replaced.append(note)
        return raw(kind, namespace, *args, **kwargs)

    torch._C._dispatch_library = _dispatch_library


# ctypes' ways from an address (a tensor's ``data_ptr()``) to memory Python reads or writes: functions of the module,
# and the ``from_address`` of every ctypes type (``(c_float * n).from_address(p)``), which its metatypes hold.
RAW_MEMORY = ("cast", "string_at", "wstring_at", "memmove", "memset")


def _own_library_use() -> bool:
    """Whether the code calling (past the standard library, ctypes included) is torch's, Triton's or the judge's."""
    return _caller_file(past_torch=False).startswith((_TORCH_DIR, _triton_root(), _JUDGE_DIR))


_JUDGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(_HERE))) + os.sep  # mcp_server/


def _note_raw_memory(label: str) -> None:
    active = _active
    if active is None or _own_library_use():
        return
    entry = f"{label} from {os.path.basename(_caller_file()) or 'native code'}"
    with _thread_lock:
        if entry not in active.record.raw_memory:
            active.record.raw_memory.append(entry)


def _follow_raw_memory() -> None:
    """Wrap ``RAW_MEMORY`` to note, in the recording in progress, a use by code other than torch's or Triton's: under
    the interpreter a tensor's memory read this way is outside every count of what Python reads (the scan names
    ctypes wherever it can read the name; numpy re-exports it)."""
    import ctypes

    _triton_root()
    for name in RAW_MEMORY:
        _noting(ctypes, name, functools.partial(_note_raw_memory, f"ctypes.{name}"))
    for meta in {type(ctypes.c_int), type(ctypes.c_int * 1), type(ctypes.POINTER(ctypes.c_int)),
                 type(ctypes.Structure), type(ctypes.Union)}:  # fmt: skip
        original = meta.__dict__.get("from_address")
        if original is None:
            continue

        def from_address(cls: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            _note_raw_memory("a ctypes type's from_address")
            return __original(cls, *args, **kwargs)

        _set_class_attr(meta, "from_address", from_address)
    # The Triton interpreter's own loads and stores read and write memory at any address they are given.
    try:
        from triton._C.libtriton import interpreter as raw_interpreter
    except ImportError:  # pragma: no cover
        return
    for name in ("load", "store", "atomic_rmw", "atomic_cas"):
        _noting(raw_interpreter, name, functools.partial(_note_raw_memory, f"triton._C.libtriton.interpreter.{name}"))


# Tensors over memory a Python object holds (a numpy array, a buffer, a mapped file), made by code other than torch's
# or the judge's: data torch or a Triton kernel writes there reaches Python with no read the counts see (numpy
# computes in place and torch copies the answer back: attacks/shared_memory_numpy.py). Their storages are held, so their
# memory is never another tensor's; what a recorded call writes there, or hands a Triton kernel there, counts as read.
SHARED_MAKERS = (
    ("torch", "from_numpy"),
    ("torch", "frombuffer"),
    ("torch", "as_tensor"),
    ("torch", "asarray"),
    ("torch", "from_dlpack"),
    ("torch", "from_file"),
    ("torch.utils.dlpack", "from_dlpack"),
)
SHARED_STORAGE_MAKERS = (
    "_new_shared_fd_cpu",
    "_new_shared_filename_cpu",
    "_new_using_fd_cpu",
    "_new_using_filename_cpu",
    "_new_with_file",
)
# Host-read points that put existing memory in shared memory.
SHARES = ("share_memory_", "_share_fd_cpu_", "_share_filename_cpu_")
# (first byte, past the last, the storage held) of each.
_shared_spans: list[tuple[int, int, Any]] = []


def _note_shared(made: Any, shared: bool = False) -> None:
    """Hold the storage of each CPU tensor (or storage) in ``made`` whose memory torch does not own (not
    resizable: a numpy array's, a buffer's, a mapped file's), or, ``shared``, that was put in shared memory (a file
    descriptor any code in the process can map)."""
    storages = [made] if isinstance(made, torch.UntypedStorage) else [t.untyped_storage() for t in iter_tensors(made)]
    for storage in storages:
        if storage.device.type == "cpu" and storage.nbytes() and (shared or not storage.resizable()):
            start = storage.data_ptr()
            if not any(lo == start for lo, _, _ in _shared_spans):
                _shared_spans.append((start, start + storage.nbytes(), storage))


def _shared_bytes(tensors: Any) -> int:
    """Bytes of the CPU tensors among ``tensors`` that lie in memory a Python object holds (``_note_shared``)."""
    total = 0
    for t in [tensors] if isinstance(tensors, torch.Tensor) else tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel():
            start = t.data_ptr()
            if any(lo <= start < hi for lo, hi, _ in _shared_spans):
                total += t.numel() * t.element_size()
    return total


def _shared_maker(original: Any, name: str) -> Any:
    """``original`` noting what it makes over memory a Python object holds, unless Triton's or the judge's code made
    it (torch's own helpers around it, a DataLoader's ``default_convert``, are the caller's)."""

    def make(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        if not _caller_file().startswith((_triton_root(), _JUDGE_DIR)):
            _note_shared(made)
        return made

    make.__name__ = make.__qualname__ = name
    return make


def _follow_shared_memory() -> None:
    """Wrap ``SHARED_MAKERS`` and the storage's own makers (``from_buffer``, ``from_file``) to note what they make
    for code other than torch's or the judge's."""
    import importlib

    for module_name, name in SHARED_MAKERS:
        module = importlib.import_module(module_name)
        original = getattr(module, name, None)
        if original is None:
            continue

        make = _shared_maker(original, name)
        setattr(module, name, make)
        # The class torch's own functions are static methods of (torch._C._VariableFunctions.from_numpy).
        functions = getattr(torch._C, "_VariableFunctionsClass", None)
        if module is torch and functions is not None and isinstance(functions.__dict__.get(name), staticmethod):
            _set_class_attr(functions, name, staticmethod(_shared_maker(functions.__dict__[name].__func__, name)))
    for name in ("from_buffer", "from_file"):
        original = getattr(torch.UntypedStorage, name, None)
        if original is None:
            continue
        setattr(torch.UntypedStorage, name, staticmethod(_shared_maker(original, name)))
    # Storages made in shared memory (``_new_shared`` goes through these): a descriptor any code can map.
    base = torch._C.StorageBase
    for name in SHARED_STORAGE_MAKERS:
        held = base.__dict__.get(name)
        if isinstance(held, staticmethod):
            _set_class_attr(base, name, staticmethod(_shared_maker(held.__func__, name)))


def _installed_roots() -> tuple[str, ...]:
    """The folders of the installed Python and its packages (torch's, Triton's and numpy's included, wherever their
    site folder is)."""
    import site

    roots = {p for p in sysconfig.get_paths().values() if p}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.update([sys.prefix, sys.base_prefix, os.path.dirname(_TORCH_DIR.rstrip(os.sep))])
    roots.add(os.path.dirname(_triton_root().rstrip(os.sep)))
    return tuple(os.path.abspath(r) + os.sep for r in roots)


def native_loads() -> list[str]:
    """Native code loaded so far by code other than Triton's or the judge's from outside the installed packages."""
    return list(_native)


def _note_native(what: str, path: str) -> None:
    note = f"{what} {os.path.basename(path) or path}" + (f" from {os.path.dirname(path)}" if os.sep in path else "")
    if note not in _native:
        _native.append(note)


def _follow_native_loads() -> None:
    """Note every native extension module loaded from outside the installed packages (``_imp.create_dynamic``,
    behind every import of one) and every shared library ctypes loads, by code other than Triton's or the judge's, at
    any time (an import's, or a call's): its code computes on a tensor's memory outside the op recorder and every
    count of what Python reads (a candidate's own ``.so``, C++ compiled through torch._inductor's code cache, libc's
    ``memcpy``)."""
    import _imp
    import ctypes

    roots = _installed_roots()
    create_dynamic = _imp.create_dynamic

    def created(spec: Any, *args: Any, **kwargs: Any) -> Any:
        origin = os.path.abspath(getattr(spec, "origin", None) or "")
        # Torch's code loading it counts as its caller's (C++ compiled through torch._inductor's code cache); Triton's
        # compiled launchers, loaded from its cache, are Triton's.
        if origin and not origin.startswith(roots) and not _caller_file().startswith((_triton_root(), _JUDGE_DIR)):
            _note_native("a native extension module", origin)
        return create_dynamic(spec, *args, **kwargs)

    _imp.create_dynamic = created
    init = ctypes.CDLL.__init__

    def __init__(self: Any, name: Any, *args: Any, **kwargs: Any) -> None:
        # Any library, a system one too (libc's memcpy takes a tensor's address as an int), unless torch, Triton or
        # the judge loads it (torch's CUDA libraries, on first use).
        if not _own_library_use():
            _note_native("a shared library", str(name))
        init(self, name, *args, **kwargs)

    ctypes.CDLL.__init__ = __init__


def _follow_prints() -> None:
    """Under the interpreter ``tl.device_print`` is Python's print of the block's values, which the call can read
    back from its own output: the bytes printed during a recorded call count as read by Python."""
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:  # pragma: no cover
        return
    import numpy as np

    original = InterpreterBuilder.create_print

    def create_print(self: Any, prefix: Any, hex: Any, values: Any, *args: Any, **kwargs: Any) -> Any:
        active = _active
        if active is not None:
            printed = sum(np.asarray(getattr(v, "data", v)).nbytes for v in values)
            with _thread_lock:
                active.record.host_read_bytes += printed
        return original(self, prefix, hex, values, *args, **kwargs)

    InterpreterBuilder.create_print = create_print


def _noting(owner: Any, name: str, note: Any) -> None:
    """Put in place of ``owner.name`` (where there is one) a function that calls ``note()`` and then it."""
    original = getattr(owner, name, None)
    if original is None:
        return

    def noted(*args: Any, **kwargs: Any) -> Any:
        note()
        return original(*args, **kwargs)

    noted.__name__ = noted.__qualname__ = name
    setattr(owner, name, noted)


def _note_process(how: str) -> None:
    active = _active
    if active is None:
        return
    caller = _caller_file()
    if caller.startswith(_triton_root()):
        return  # Triton's compiler running ptxas, or its cache's helpers
    with _thread_lock:
        active.record.processes.append(f"{how} from {os.path.basename(caller) or 'native code'}")


def _follow_processes() -> None:
    """Note in the recording in progress every process a call starts: a fork (``os.fork``, multiprocessing, a
    DataLoader's workers: Python's at-fork hook), a fork and exec (``subprocess``) or a ``posix_spawn``. Torch work
    in another process is outside the dispatch mode and the host-read counts, so a call's process is the
    candidate's way around them; Triton's own (its compiler runs ``ptxas``) are left out. The source scan names the
    same calls where it can read them."""
    _triton_root()  # imported now: a fork's hook must not import
    os.register_at_fork(before=lambda: _note_process("os.fork"))
    import _posixsubprocess
    import subprocess

    original = _posixsubprocess.fork_exec

    def fork_exec(*args: Any, **kwargs: Any) -> Any:
        _note_process("a fork and exec")
        return original(*args, **kwargs)

    _posixsubprocess.fork_exec = fork_exec
    if getattr(subprocess, "_fork_exec", None) is original:
        subprocess._fork_exec = fork_exec
    for name in ("posix_spawn", "posix_spawnp"):
        _noting(os, name, functools.partial(_note_process, f"os.{name}"))


def _follow_threads() -> None:
    """Start every later Python thread under :class:`_ThreadOps`: ``threading`` starts its threads through the
    ``_thread`` function it bound at import, a pool's workers through ``threading``; both names are wrapped, and
    ``_thread``'s old alias ``start_new``."""
    import _thread

    for name in ("start_new_thread", "start_new", "start_joinable_thread"):
        original = getattr(_thread, name, None)
        if original is None:
            continue

        def start(function: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            return __original(_under_thread_ops(function), *args, **kwargs)

        setattr(_thread, name, start)
        bound = f"_{name}"
        if getattr(threading, bound, None) is original:
            setattr(threading, bound, start)


def _follow_graphs(cls: Any = None) -> None:
    """Record what every ``torch.cuda.CUDAGraph`` (or ``cls``, with the same three methods) captures, and count it as
    the work of a recorded call that replays it."""
    if cls is None:
        from torch.cuda import graphs

        cls = graphs.CUDAGraph
    begin, end, replay = cls.capture_begin, cls.capture_end, cls.replay
    capturing: dict[int, tuple[_Recorder, int]] = {}

    def capture_done(graph: Any) -> Record | None:
        global _captures
        entry = capturing.pop(id(graph), None)
        if entry is None:
            return None
        mode, start = entry
        _captures -= 1
        with contextlib.suppress(Exception):
            _pop_mode()
        mode.record.launches = _launches[start:]
        if not _launch_recording:
            del _launches[start:]
        return mode.record

    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _captures
        if _judge_capturing or not _following_captures:
            return begin(self, *args, **kwargs)
        mode = _Recorder(Record(), poison=False, second=False)
        capturing[id(self)] = (mode, len(_launches))
        _captures += 1
        _push_mode(mode)
        try:
            return begin(self, *args, **kwargs)
        except BaseException:
            capture_done(self)
            raise

    def capture_end(self: Any) -> Any:
        try:
            return end(self)
        finally:
            record = capture_done(self)
            if record is not None:
                _graph_work[self] = record

    def graph_replay(self: Any) -> Any:
        out = replay(self)
        active = _active
        captured = _graph_work.get(self)  # every capture after the hooks went in, which is before any user code
        if active is not None and captured is not None:
            with _thread_lock:
                _count_replay(active.record, captured)
        return out

    cls.capture_begin, cls.capture_end, cls.replay = capture_begin, capture_end, graph_replay


def follow_captures(on: bool) -> None:
    """Whether CUDA graph captures begun from now on are recorded (bench turns it off while baselines run)."""
    global _following_captures
    _following_captures = on


def handback_problems() -> list[str]:
    """The recorder's state that is not what the judge leaves when the candidate hands bench's child back, each
    named and put back: captures followed (bench turned that on when it gave the candidate the process), neither the
    judge's own capture nor a recording under way (both end before the handback), and the recorder's containers the
    objects it made. The flags change as the judge runs, so the guard's identities cannot watch them; a candidate
    that turns following off for its timed calls would have its CUDA-graph replays go uncounted."""
    global _following_captures, _judge_capturing, _active, _launch_recording
    found = []
    if not _following_captures:
        found.append("_following_captures")
        _following_captures = True
    if _judge_capturing:
        found.append("_judge_capturing")
        _judge_capturing = False
    if _active is not None:
        found.append("_active")
        _active = None
    if _launch_recording:
        found.append("_launch_recording")
        _launch_recording = False
    space = globals()
    for name, obj in _CONTAINERS:
        if space.get(name) is not obj:
            found.append(name)
            space[name] = obj
    return [f"{__name__}.{name}" for name in found]


@contextmanager
def judge_capture() -> Iterator[None]:
    """The judge's own capture (bench's CUDA-graph mode, which records the candidate's captured calls itself and
    replays outside any recording): left as torch does it."""
    global _judge_capturing
    _judge_capturing = True
    try:
        yield
    finally:
        _judge_capturing = False


def _count_replay(record: Record, captured: Record) -> None:
    """A CUDA graph replayed inside a recorded call: what it captured is the call's work once more."""
    for name, (calls, work) in captured.ops.items():
        entry = record.ops.setdefault(name, [0, 0.0])
        entry[0] += calls
        entry[1] += work
    if _launch_recording:
        _launches.extend(captured.launches)


class _DisableWhenLoaded:
    """What torch's ``_disable_dynamo`` wrapper of ``__torch_dispatch__`` calls in place of importing
    torch._dynamo (seconds) on the first dispatch: the raw handler while dynamo is not loaded, when nothing can
    trace into it; from the first call after some code imported dynamo (a candidate's torch.compile), the handler
    disabled for dynamo exactly as torch would have made it, cached where torch caches it."""

    def __init__(self, raw: Any):
        self.raw = raw

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return self.raw(*args, **kwargs)
        import torch._dynamo

        disabled = torch._dynamo.disable(self.raw, recursive=True, wrapping=False)
        setattr(self.raw, "__dynamo_disable", disabled)  # a string: no name mangling inside this class
        return disabled(*args, **kwargs)


def _defer_dynamo(cls: type) -> None:
    """Seed torch's per-handler cache (``fn.__dynamo_disable``, read by ``torch._compile._disable_dynamo``) so a
    dispatch through ``cls`` does not import torch._dynamo until something else has. A torch whose wrapper is
    different is left as it is (it then imports dynamo on the first dispatch, as before)."""
    raw = getattr(cls.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if raw is not None and callable(raw) and not hasattr(raw, "__dynamo_disable"):
        setattr(raw, "__dynamo_disable", _DisableWhenLoaded(raw))


_defer_dynamo(_Recorder)
_defer_dynamo(_ThreadOps)


@contextmanager
def recording(poison: bool = False, second: bool = False) -> Iterator[Record]:
    """Record Triton launches and torch compute ops; optionally poison fresh allocations."""
    global _launch_recording, _active
    install_launch_hooks()
    record = Record()
    _rehook_host_reads(record)
    start = len(_launches)
    _launch_recording = True
    outer = _active
    try:
        with _Recorder(record, poison, second) as mode:
            _active = mode
            yield record
    finally:
        _active = outer
        _launch_recording = False
        record.launches = _launches[start:]
        del _launches[start:]
        _rehook_host_reads(record)
