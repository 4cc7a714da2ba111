"""What our children add to the Triton interpreter so it shows what the GPU would do.

:func:`install` (called by the child before a job runs under ``TRITON_INTERPRET=1``) patches the
interpreter's builder: fp32 ``tl.dot`` rounds to TF32 as the tensor cores do (:mod:`.tf32`), casts to bf16
round to nearest even as ``cvt.rn.bf16.f32`` does instead of truncating (:mod:`.rounding`), arithmetic,
comparisons, dots and sums on bf16 compute on the values instead of their bit patterns (:mod:`.bf16math`),
``atomic_add`` on bf16 runs instead of raising (:mod:`.atomics`), fp8 casts round and saturate as an H100's
do and fp8 arithmetic the GPU compiler refuses is refused (:mod:`.fp8`), and every
load, store and atomic is checked against the launch's tensor arguments (:mod:`.bounds`), and calls between
jit functions skip the interpreter's per-call re-patching of ``triton.language`` (:mod:`.nested`), scalar
tensors convert to loop bounds under every NumPy (:mod:`.scalars`), and seven per-operation costs of the
interpreter are cut (:mod:`.fastpaths`): its dtype lookups and tuple names, integer overflow checks whose assert
only fires under ``debug``, result types and shape constants built anew for every op, and broadcasts to the shape
a block already has.
``PTT_INTERPRET_TF32=0`` turns the TF32 emulation off (fp32 dots then run in full fp32, as stock Triton's
interpreter does); ``PTT_INTERPRET_BOUNDS=0`` turns the address checks off.
"""

from __future__ import annotations

import os
from typing import Any

from mcp_server.engine.interp import atomics, bf16math, bounds, fastpaths, fp8, nested, races, rounding, scalars, tf32

_installed = False


def _enum_name(value: Any) -> str:
    """The lower-case name of an enum member Triton passes (an input precision, a memory semantic)."""
    name = getattr(value, "name", None) or str(value)
    return name.rsplit(".", 1)[-1].lower()


def install() -> None:
    """Patch the interpreter once per process (idempotent)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter as interp

    nested.install()
    scalars.install()
    fastpaths.install()
    rounding.install()
    bf16math.install()
    fp8.install()  # after bf16math and rounding, whose casts and dots it passes non-fp8 work on to
    atomics.install()  # before the address checks, which wrap it
    builder = interp.InterpreterBuilder
    if os.environ.get("PTT_INTERPRET_TF32", "1") != "0":
        original_dot = builder.create_dot

        def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
            precision = _enum_name(input_precision)
            import triton.language as tl

            if precision in ("tf32", "tf32x3") and a.dtype == tl.float32 and b.dtype == tl.float32:
                tf32.USED[0] = tf32.USED[0] or precision == "tf32"
                data = tf32.dot(a.data, b.data, d.data, precision)
                return interp.TensorHandle(data.astype(d.data.dtype, copy=False), d.dtype.scalar)
            return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

        builder.create_dot = create_dot

    if os.environ.get("PTT_INTERPRET_BOUNDS", "1") != "0":
        _install_bounds(interp)
    _installed = True


def _install_bounds(interp: Any) -> None:
    import numpy as np

    builder = interp.InterpreterBuilder
    executor = interp.GridExecutor
    original_init = executor._init_args_hst

    def _init_args_hst(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
        bounds.set_launch(list(self.arg_names), list(args_hst), dict(kwargs_hst))
        races.start_launch()
        return args_hst, kwargs_hst

    executor._init_args_hst = _init_args_hst

    def _itemsize(ptrs: Any) -> int:
        return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)

    original_load = builder.create_masked_load
    original_store = builder.create_masked_store
    original_rmw = builder.create_atomic_rmw
    original_cas = builder.create_atomic_cas

    # Tensor descriptors' loads pass cache_modifier and the rest by keyword: every argument is passed through.
    def create_masked_load(self: Any, ptrs: Any, mask: Any, other: Any, *rest: Any, **options: Any) -> Any:
        bounds.check(ptrs.data, mask.data, _itemsize(ptrs), "load")
        out = original_load(self, ptrs, mask, other, *rest, **options)
        races.on_load(ptrs.data, mask.data, _itemsize(ptrs))
        return out

    def _bits(ptrs: Any, mask: Any) -> np.ndarray:
        """The bits at every active lane of ``ptrs`` now (0 elsewhere), for telling a store that changes memory."""
        dtype = interp._get_np_dtype(ptrs.get_element_ty())
        zeros = np.zeros(np.shape(ptrs.data), dtype=dtype)
        data = interp._interpreter.load(ptrs.data, np.broadcast_to(mask.data, np.shape(ptrs.data)), zeros, dtype)
        return np.ascontiguousarray(data).view(f"u{np.dtype(dtype).itemsize}")

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **options: Any) -> Any:
        size = _itemsize(ptrs)
        bounds.check(ptrs.data, mask.data, size, "store")
        tracked = bool(bounds.current_spans())
        before = _bits(ptrs, mask) if tracked else None
        out = original_store(self, ptrs, value, mask, *rest, **options)
        if before is not None:
            races.on_store(ptrs.data, mask.data, size, before, _bits(ptrs, mask))
        return out

    def create_atomic_rmw(self: Any, op: Any, ptr: Any, val: Any, mask: Any, *rest: Any) -> Any:
        bounds.check(ptr.data, mask.data, _itemsize(ptr), "atomic")
        races.on_atomic(ptr.data, mask.data, _itemsize(ptr), _sem(rest[0] if rest else None))
        return original_rmw(self, op, ptr, val, mask, *rest)

    def create_atomic_cas(self: Any, ptr: Any, cmp: Any, val: Any, *rest: Any) -> Any:
        everywhere = np.ones(np.shape(ptr.data), dtype=bool)
        bounds.check(ptr.data, everywhere, _itemsize(ptr), "atomic")
        races.on_atomic(ptr.data, everywhere, _itemsize(ptr), _sem(rest[0] if rest else None))
        return original_cas(self, ptr, cmp, val, *rest)

    original_int_to_ptr = builder.create_int_to_ptr

    def create_int_to_ptr(self: Any, src: Any, dst_type: Any) -> Any:
        bounds.pointers_from_integers()
        return original_int_to_ptr(self, src, dst_type)

    builder.create_int_to_ptr = create_int_to_ptr
    builder.create_masked_load = create_masked_load
    builder.create_masked_store = create_masked_store
    builder.create_atomic_rmw = create_atomic_rmw
    builder.create_atomic_cas = create_atomic_cas


def _sem(value: Any) -> str:
    """An atomic's memory semantic as races.on_atomic names it (Triton's default, acq_rel, when unknown)."""
    name = _enum_name(value) if value is not None else "acq_rel"
    return {"acquire_release": "acq_rel"}.get(name, name)


def failure_of(exc: BaseException) -> tuple[str, Any] | None:
    """(message, where) when ``exc`` was caused by an out-of-bounds access the checks caught."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 16:
        if isinstance(current, bounds.OutOfBoundsAccess):
            return str(current), current.where
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def sanitizer_hint() -> str:
    """How to find the faulting line of a GPU crash: NVIDIA's memory checker, or our interpreter checks."""
    return (
        ". To find the kernel line that faulted, rerun the same command under NVIDIA's memory checker: "
        "`PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --target-processes all "
        "ptt validate <the same arguments>` (it names the kernel, file:line and address of the first bad "
        "access; without PYTORCH_NO_CUDA_MEMORY_CACHING=1 an access that stays inside PyTorch's cached "
        "memory pool goes unseen), or validate under the "
        "interpreter (`PTT_DEVICE=interpreter ptt validate …`), which checks every load and store address"
    )
