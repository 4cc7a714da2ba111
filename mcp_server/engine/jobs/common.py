"""Helpers used inside children: argument trees, input cases, derived shapes, and the launch/op recorder."""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mcp_server.engine.inputs import looks_like_type_list, materialise, parse_type_list
from mcp_server.engine.runner.child import UsageProblem, load_module, resolve

# --- argument trees -------------------------------------------------------------------------------


def map_tensors(tree: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, list):
        return [map_tensors(t, fn) for t in tree]
    if isinstance(tree, tuple):
        return tuple(map_tensors(t, fn) for t in tree)
    if isinstance(tree, dict):
        return {k: map_tensors(v, fn) for k, v in tree.items()}
    return tree


def iter_tensors(tree: Any) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, list | tuple):
        for t in tree:
            yield from iter_tensors(t)
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from iter_tensors(v)


def check_plain(tree: Any, what: str) -> None:
    """Arguments travel between processes as tensors and plain Python values only."""
    if isinstance(tree, torch.Tensor) or tree is None or isinstance(tree, bool | int | float | str):
        return
    if isinstance(tree, list | tuple):
        for t in tree:
            check_plain(t, what)
        return
    if isinstance(tree, dict):
        for v in tree.values():
            check_plain(v, what)
        return
    raise UsageProblem(
        f"{what} contains a {type(tree).__name__}; inputs must be tensors, numbers, strings, None, or "
        "lists/tuples/dicts of those. Build other objects inside the function under test."
    )


def to_device(tree: Any, device: str) -> Any:
    return map_tensors(tree, lambda t: t.to(device))


def to_cpu(tree: Any) -> Any:
    return map_tensors(tree, lambda t: t.detach().to("cpu"))


def clone(tree: Any) -> Any:
    return map_tensors(tree, lambda t: t.detach().clone())


def flatten_outputs(out: Any) -> list[Any]:
    """A call's result as a flat list: a tensor, or the leaves of tuples/lists/dicts (dicts by key)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        flat: list[Any] = []
        for item in out:
            flat.extend(flatten_outputs(item))
        return flat
    if isinstance(out, dict):
        flat = []
        for key in sorted(out, key=str):
            flat.extend(flatten_outputs(out[key]))
        return flat
    return [out]


def tensor_digest(t: torch.Tensor) -> str:
    data = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(data + str((t.dtype, tuple(t.shape))).encode()).hexdigest()


def storage_span(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0:
        return None
    try:
        storage = t.untyped_storage()
        start = storage.data_ptr()
        return (start, start + storage.nbytes())
    except (RuntimeError, NotImplementedError):
        return None


def aliases(outputs: list[Any], inputs: list[Any]) -> list[tuple[int, int]]:
    """(output index, input index) pairs whose storages overlap."""
    spans_in = [(i, storage_span(t)) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
    pairs = []
    for o, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            continue
        span = storage_span(out)
        if span is None:
            continue
        for i, other in spans_in:
            if other is not None and span[0] < other[1] and other[0] < span[1]:
                pairs.append((o, i))
    return pairs


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# --- input cases ----------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    args: list[Any]
    derived: str | None = None  # e.g. "1024→1023 (non-pow2 tail)"


def resolve_cases(module: Any, inputs_spec: str | None, user_files: set[str], device: str) -> tuple[list[Case], bool]:
    """The cases to run, and whether they came from a single get_inputs() (so shapes may be derived)."""
    if inputs_spec:
        if looks_like_type_list(inputs_spec):
            return [Case("inputs", materialise(parse_type_list(inputs_spec), device))], True
        path, _, name = inputs_spec.rpartition(":")
        if not path:
            raise UsageProblem(f"--inputs {inputs_spec!r}: write path.py:function or a type list.")
        value = resolve(load_module(path, user_files), name)()
        return _cases_from_value(value, f"{inputs_spec}()")
    if hasattr(module, "get_test_cases"):
        value = module.get_test_cases()
        if not isinstance(value, dict) or not value:
            raise UsageProblem(
                "get_test_cases() must return a non-empty dict mapping a case label to a list of arguments, "
                f"not {type(value).__name__}."
            )
        return _cases_from_value(value, "get_test_cases()")
    if hasattr(module, "get_inputs"):
        return _cases_from_value(module.get_inputs(), "get_inputs()")
    raise UsageProblem(
        f"{getattr(module, '__file__', 'the reference module')} defines neither get_inputs() nor "
        "get_test_cases(), so there is nothing to call the kernels with. Add get_inputs() returning a list of "
        "arguments (KernelBench style) or get_test_cases() returning {label: [args]}, or pass --inputs "
        "'f32[1024,1024], …'."
    )


def _cases_from_value(value: Any, origin: str) -> tuple[list[Case], bool]:
    if isinstance(value, dict):
        cases = []
        for label, args in value.items():
            args = list(args) if isinstance(args, list | tuple) else [args]
            check_plain(args, f"{origin}[{label!r}]")
            cases.append(Case(str(label), args))
        return cases, False
    if isinstance(value, list | tuple):
        args = list(value)
        check_plain(args, origin)
        return [Case("base", args)], True
    if isinstance(value, torch.Tensor):
        return [Case("base", [value])], True
    raise UsageProblem(f"{origin} returned a {type(value).__name__}; return a list of arguments.")


# --- value transforms (the audit's correctness suite) ---------------------------------------------


def _scaled(t: torch.Tensor, magnitude: float) -> torch.Tensor:
    peak = t.float().abs().max().clamp_min(1e-30)
    return (t.float() / peak * magnitude).to(t.dtype)


def _inject(t: torch.Tensor, value: float) -> torch.Tensor:
    out = t.clone()
    flat = out.view(-1)
    if flat.numel():
        picks = torch.randperm(flat.numel(), device=flat.device)[: max(1, flat.numel() // 100)]
        flat[picks] = value if value == value else float("nan")
        if value == float("inf"):
            flat[picks[::2]] = -float("inf")
    return out


def _finfo(t: torch.Tensor) -> torch.finfo:
    return torch.finfo(t.dtype)


TRANSFORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "zeros": torch.zeros_like,
    "ones": torch.ones_like,
    "large": lambda t: _scaled(t, min(1e6, _finfo(t).max / 1e3)),
    "small": lambda t: _scaled(t, max(1e-6, _finfo(t).tiny * 1e4)),
    "negative": lambda t: -t.abs(),
    "alternating": lambda t: (
        (t.abs().reshape(-1) * (1 - 2 * (torch.arange(t.numel(), device=t.device) % 2))).reshape(t.shape).to(t.dtype)
    ),
    "near_overflow": lambda t: _scaled(t, _finfo(t).max / 4),
    "near_underflow": lambda t: _scaled(t, _finfo(t).tiny * 8),
    "inf": lambda t: _inject(t, float("inf")),
    "nan": lambda t: _inject(t, float("nan")),
}


def apply_transform(args: list[Any], name: str) -> list[Any]:
    if name not in TRANSFORMS:
        raise UsageProblem(f"Unknown input transform {name!r}; choose from {', '.join(TRANSFORMS)}.")
    fn = TRANSFORMS[name]
    return map_tensors(args, lambda t: fn(t) if t.is_floating_point() else t)


# --- derived edge shapes --------------------------------------------------------------------------


def _substitutes(size: int) -> list[tuple[int, str]]:
    subs: list[tuple[int, str]] = []
    if size > 2:
        subs.append((size - 1, "size−1: a non-power-of-2 tail"))
    if size > 1:
        subs.append((1, "size 1"))
    odd = (size // 2) | 1
    if size > 6 and odd not in (size - 1, 1, size):
        subs.append((odd, "an odd size"))
    return subs


def _refill(t: torch.Tensor, shape: list[int], old: int, new: int) -> torch.Tensor:
    """A random tensor of a new shape that resembles ``t`` (range, sign, dtype, index-like values)."""
    device, dtype = t.device, t.dtype
    if dtype == torch.bool:
        return torch.rand(shape, device=device) < 0.5
    if dtype.is_floating_point or dtype.is_complex:
        ref = t.float()
        if ref.numel() == 0:
            return torch.randn(shape, device=device).to(dtype)
        finite = ref[torch.isfinite(ref)]
        mean = finite.mean().item() if finite.numel() else 0.0
        std = finite.std().item() if finite.numel() > 1 else 1.0
        std = std if math.isfinite(std) and std > 0 else 1.0
        fresh = torch.randn(shape, device=device) * std + mean
        if finite.numel() and finite.min().item() >= 0:
            fresh = fresh.abs()
        return fresh.to(dtype)
    lo = int(t.min().item()) if t.numel() else 0
    hi = int(t.max().item()) if t.numel() else 1
    if hi < old <= hi + 1 + max(1, old // 8) and lo >= -1:
        hi = min(hi, new - 1)  # values look like indices into the substituted dimension
    hi = max(hi, lo)
    return torch.randint(lo, hi + 1, shape, device=device, dtype=dtype)


@dataclass
class Variant:
    label: str
    old: int
    new: int
    why: str


def plan_variants(args: list[Any], limit: int) -> list[Variant]:
    sizes: list[int] = []
    for t in iter_tensors(args):
        for d in t.shape:
            if d > 1 and d not in sizes:
                sizes.append(d)
    sizes.sort(reverse=True)
    plan: list[Variant] = []
    # Round-robin over sizes so a small limit still touches every dimension once.
    per_size = [_substitutes(s) for s in sizes]
    for rank in range(3):
        for size, subs in zip(sizes, per_size, strict=True):
            if rank < len(subs):
                new, why = subs[rank]
                plan.append(Variant(f"derived {size}→{new}", size, new, why))
    return plan[:limit]


def apply_variant(args: Any, variant: Variant) -> Any:
    def swap(t: torch.Tensor) -> torch.Tensor:
        if variant.old not in t.shape:
            return t.clone()
        shape = [variant.new if d == variant.old else d for d in t.shape]
        return _refill(t, shape, variant.old, variant.new)

    def walk(tree: Any) -> Any:
        if isinstance(tree, torch.Tensor):
            return swap(tree)
        if isinstance(tree, bool):
            return tree
        if isinstance(tree, int) and tree == variant.old:
            return variant.new
        if isinstance(tree, list):
            return [walk(x) for x in tree]
        if isinstance(tree, tuple):
            return tuple(walk(x) for x in tree)
        if isinstance(tree, dict):
            return {k: walk(v) for k, v in tree.items()}
        return tree

    return walk(args)


# --- what ran: Triton launches and torch ops ------------------------------------------------------

_tls = threading.local()
# Which autotune config ran, per kernel, when the interpreter could not benchmark (reported as info).
AUTOTUNE_NOTES: list[str] = []
# The CUDA streams Triton kernels were launched on, when bench asks (set to a set() to collect).
LAUNCH_STREAMS: set[Any] | None = None
_launches: list[str] = []
_launch_recording = False
_hooks_installed = False

ALLOC_OPS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
# Data movement, views, allocation and initialisation: not the kernel's arithmetic.
MOVEMENT_OPS = ALLOC_OPS | {
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "as_strided",
    "expand",
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
    "view_as_real",
    "view_as_complex",
    "_local_scalar_dense",
    "item",
    "is_nonzero",
    "randn",
    "rand",
    "randint",
    "normal_",
    "uniform_",
    "random_",
    "bernoulli_",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "_has_compatible_shallow_copy_type",
    "record_stream",
    "_conj",
    "_neg_view",
    "resolve_conj",
    "resolve_neg",
    "index_select",
    "gather",
    "flatten",
    "unflatten",
    "movedim",
    "repeat",
    "empty_permuted",
    "_pin_memory",
    "set_data",
}
# The ops a kernel is usually written to replace; their work is counted in FLOPs.
MATMUL_OPS = {"mm", "bmm", "addmm", "addmv", "mv", "matmul", "baddbmm", "addbmm", "dot", "vdot", "linear"}


def _in_triton() -> bool:
    return getattr(_tls, "triton_depth", 0) > 0


@contextmanager
def _triton_scope() -> Iterator[None]:
    _tls.triton_depth = getattr(_tls, "triton_depth", 0) + 1
    try:
        yield
    finally:
        _tls.triton_depth -= 1


def _kernel_name(fn_obj: Any) -> str:
    inner = fn_obj
    for _ in range(8):  # Autotuner -> Heuristics -> JITFunction -> python function
        if inspect.isfunction(inner) or not hasattr(inner, "fn"):
            break
        inner = inner.fn
    name = getattr(inner, "__name__", None) or type(fn_obj).__name__
    code = getattr(inner, "__code__", None)
    where = f" ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code else ""
    return f"{name}{where}"


def install_launch_hooks() -> None:
    """Count launches of @triton.jit kernels and keep Triton's own torch calls out of the op record."""
    global _hooks_installed
    if _hooks_installed:
        return
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
            if _launch_recording and not kwargs.get("warmup", False) and not _in_triton():
                _launches.append(_kernel_name(self))
            if LAUNCH_STREAMS is not None and not kwargs.get("warmup", False):
                LAUNCH_STREAMS.add(torch.cuda.current_stream())
            with _triton_scope():
                return __original(self, *args, **kwargs)

        cls.run = run

    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    for cls in (autotuner.Autotuner, autotuner.Heuristics):
        original = cls.run

        def tuned_run(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            if _launch_recording and not kwargs.get("warmup", False) and not _in_triton():
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


def op_work(name: str, args: tuple[Any, ...], out: Any) -> float:
    """A rough measure of an op's work: FLOPs for matrix products, else elements touched."""
    tensors_in = [a for a in args if isinstance(a, torch.Tensor)]
    tensors_out = list(iter_tensors(out)) if not isinstance(out, torch.Tensor) else [out]
    if name in MATMUL_OPS and tensors_in:
        dims = [t.shape for t in tensors_in if t.dim() >= 1]
        out_numel = sum(_numel(t) for t in tensors_out)
        inner = max((s[-1] for s in dims if len(s) >= 2), default=1)
        return 2.0 * out_numel * inner
    if "convolution" in name and len(tensors_in) >= 2:
        w = tensors_in[1]
        per_out = w[0].numel() if w.dim() >= 1 else 1
        return 2.0 * sum(_numel(t) for t in tensors_out) * per_out
    if "attention" in name and len(tensors_in) >= 3:
        q, k = tensors_in[0], tensors_in[1]
        return 4.0 * q.numel() * (k.shape[-2] if k.dim() >= 2 else 1)
    return float(max([_numel(t) for t in tensors_in + tensors_out] or [0]))


@dataclass
class Record:
    launches: list[str] = field(default_factory=list)
    ops: dict[str, list[float]] = field(default_factory=dict)  # name -> [calls, work]

    @property
    def torch_work(self) -> float:
        return sum(v[1] for v in self.ops.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "launches": self.launches,
            "ops": {k: {"calls": int(v[0]), "work": v[1]} for k, v in self.ops.items()},
        }


def poison_value(dtype: torch.dtype, second: bool) -> float | int | None:
    if dtype.is_floating_point:
        return 12345.0 if second else float("nan")
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
        out = func(*args, **(kwargs or {}))
        if _in_triton():
            return out
        name = func.overloadpacket.__name__
        base = name[:-1] if name.endswith("_") and name not in MOVEMENT_OPS else name
        if name in ALLOC_OPS:
            if self.poison and isinstance(out, torch.Tensor) and out.numel():
                value = poison_value(out.dtype, self.second)
                if value is not None:
                    out.fill_(value)
            return out
        if name in MOVEMENT_OPS or base in MOVEMENT_OPS:
            return out
        entry = self.record.ops.setdefault(base, [0, 0.0])
        entry[0] += 1
        entry[1] += op_work(base, args, out)
        return out


@contextmanager
def recording(poison: bool = False, second: bool = False) -> Iterator[Record]:
    """Record Triton launches and torch compute ops; optionally poison fresh allocations."""
    global _launch_recording
    install_launch_hooks()
    record = Record()
    start = len(_launches)
    _launch_recording = True
    try:
        with _Recorder(record, poison, second):
            yield record
    finally:
        _launch_recording = False
        record.launches = _launches[start:]
        del _launches[start:]
