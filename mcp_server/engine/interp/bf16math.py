"""bf16 arithmetic under the Triton interpreter.

The interpreter keeps a bf16 tensor as its raw uint16 bit patterns (numpy has no bfloat16), and Triton 3.6's
interpreter then computes on those bits as integers: ``x * y + x`` of two bf16 loads, ``x < 0``, ``tl.abs``,
``tl.sum``, ``tl.cumsum`` and ``tl.dot`` on bf16 operands all return garbage, and ``x * 0.5`` raises (the
builder has no ``get_bf16``). A right bf16 kernel then fails every run without a GPU. :func:`install` gives
each such operation fp32 operands (a bf16 value widens to fp32 exactly) and rounds a bf16 result back to
nearest even, as the GPU's bf16 instructions round each result:

- elementwise arithmetic, min/max, fma and clamp, the math functions, and comparisons (bool results stay);
- ``tl.dot`` on bf16 operands (fp32 products and sums, as the tensor cores accumulate);
- ``tl.sum`` over bf16 as a pairwise tree with every add rounded to bf16 (the GPU adds in bf16 too, each
  thread's elements in turn and then across threads, so a long bf16 sum loses precision there as it does
  here; the exact order differs), and ``tl.cumsum``/``tl.cumprod`` in order, each step rounded;
- bf16 scalar constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mcp_server.engine.interp.rounding import as_f32, bf16_bits

_installed = False

# Builder operations that compute on their float operands: widened to fp32, the result rounded back to bf16.
ARITHMETIC = (
    "create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_fma", "create_fabs",
    "create_minimumf", "create_maximumf", "create_minnumf", "create_maxnumf", "create_clampf",
    "create_precise_divf", "create_precise_sqrt", "create_sqrt", "create_rsqrt", "create_exp", "create_exp2",
    "create_log", "create_log2", "create_sin", "create_cos", "create_erf", "create_floor", "create_ceil",
)  # fmt: skip


def rounded(x: np.ndarray) -> np.ndarray:
    """fp32 ``x`` rounded to bf16 to nearest even, as fp32."""
    return as_f32(bf16_bits(x))


def tree_sum(x: np.ndarray, axis: int | None, keepdims: bool) -> np.ndarray:
    """bf16 bits of the sum of fp32 ``x`` along ``axis`` (all of it when None) as a pairwise tree, every add
    rounded to bf16."""
    if axis is None:
        v = x.reshape(-1)
        work = v.reshape(v.shape[0], 1)
    else:
        work = np.moveaxis(x, axis, 0)
    while work.shape[0] > 1:
        half = work.shape[0] // 2
        level = rounded(work[:half] + work[half : 2 * half])
        work = np.concatenate([level, work[2 * half :]]) if work.shape[0] % 2 else level
    total = work[0]
    if axis is None:
        total = total.reshape(())
        if keepdims:
            total = total.reshape((1,) * x.ndim)
    elif keepdims:
        total = np.expand_dims(total, axis)
    return bf16_bits(total)


def scan(x: np.ndarray, axis: int, op: Any) -> np.ndarray:
    """bf16 bits of the running ``op`` (np.add or np.multiply) of fp32 ``x`` along ``axis``, each step rounded."""
    work = np.moveaxis(x, axis, 0).copy()
    for i in range(1, work.shape[0]):
        work[i] = rounded(op(work[i - 1], work[i]))
    return bf16_bits(np.moveaxis(work, 0, axis))


def install() -> None:
    """Patch the interpreter once per process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    import triton.language as tl
    from triton.runtime import interpreter as interp

    handle = interp.TensorHandle
    builder = interp.InterpreterBuilder

    def is_bf16(value: Any) -> bool:
        return isinstance(value, handle) and getattr(value.dtype, "scalar", value.dtype) == tl.bfloat16

    def widen(value: Any) -> Any:
        return handle(as_f32(value.data), tl.float32) if is_bf16(value) else value

    def wrap(name: str, narrow: Any) -> None:
        """``narrow(args)``: whether the result, computed in fp32, is a bf16."""
        original = getattr(builder, name)

        def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not any(is_bf16(a) for a in args):
                return original(self, *args, **kwargs)
            out = original(self, *(widen(a) for a in args), **kwargs)
            if narrow(args) and isinstance(out, handle) and out.dtype == tl.float32:
                return handle(bf16_bits(out.data), tl.bfloat16)
            return out

        setattr(builder, name, patched)

    for name in ARITHMETIC:
        if hasattr(builder, name):
            wrap(name, narrow=lambda args: True)
    # A dot's result has its accumulator's type (a, b, d, ...); a comparison's is a bool.
    wrap("create_dot", narrow=lambda args: is_bf16(args[2]))
    for name in (n for n in dir(builder) if n.startswith("create_fcmp")):
        wrap(name, narrow=lambda args: False)
    builder.get_bf16 = lambda self, value: handle(bf16_bits(np.array([value], dtype=np.float32)), tl.bfloat16)

    reduce_ops, scan_ops = interp.ReduceOps, interp.ScanOps
    original_sum, original_cumsum, original_cumprod = reduce_ops.sum, scan_ops.cumsum, scan_ops.cumprod

    def reduce_sum(self: Any, input: Any) -> Any:
        if input.dtype != tl.bfloat16:
            return original_sum(self, input)
        return self.to_tensor(tree_sum(as_f32(input.handle.data), self.axis, self.keep_dims), input.dtype)

    def cumulative(original: Any, op: Any) -> Any:
        def patched(self: Any, input: Any) -> Any:
            if input.dtype != tl.bfloat16:
                return original(self, input)
            return [self.to_tensor(scan(as_f32(input.handle.data), self.axis, op), dtype=input.dtype)]

        return patched

    reduce_ops.sum = reduce_sum
    scan_ops.cumsum = cumulative(original_cumsum, np.add)
    scan_ops.cumprod = cumulative(original_cumprod, np.multiply)
