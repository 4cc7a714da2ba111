"""TF32 arithmetic as NVIDIA tensor cores do it, for ``tl.dot`` under the Triton interpreter.

The interpreter computes every fp32 ``tl.dot`` with numpy in full fp32, whatever ``input_precision`` says.
On the GPU the default for fp32 operands is ``"tf32"``: each operand keeps 10 of its 23 mantissa bits before
the multiply, so a kernel that passes an fp32 tolerance here can fail it there. These functions round the
operands the way the GPU does, so the interpreter shows the same error.

- ``tf32``: both operands cut to TF32 (:data:`ROUNDING`), products accumulated in fp32. Measured on an H100
  (benchmarks/results/h100/fp32_matmul_precision.json): ``tl.dot(A, I)`` returns A with its 13 low mantissa
  bits dropped, bit for bit: the tensor core truncates; Triton inserts no rounding for plain ``tf32``.
- ``tf32x3``: Triton's split ``x = big + small`` with ``big = cvt.rna.tf32(x)`` and ``small`` the remainder
  (itself fed to a TF32 product), then ``big·big + (big·small + small·big)``; the small terms' NaNs are
  dropped as Triton does.
- ``ieee`` (and anything else): unchanged.
"""

from __future__ import annotations

import numpy as np

# How the tensor core treats an fp32 operand of a TF32 product: it ignores the 13 low mantissa bits
# ("trunc"; measured, see above). "rna" is PTX cvt.rna.tf32.f32 (round to nearest, ties away from zero),
# which Triton applies to tf32x3's big part; "rne" rounds ties to even.
ROUNDING = "trunc"
# Set once an fp32 tl.dot of the process ran as TF32 (Triton's default input_precision): validate names it beside
# an fp32 mismatch.
USED = [False]

_LOW = np.uint32(0x1FFF)
_KEEP = np.uint32(0xFFFFE000)
_EXP = np.uint32(0x7F800000)


def round_tf32(x: np.ndarray, mode: str = "rna") -> np.ndarray:
    """fp32 array → fp32 array whose values are representable in TF32 (10 mantissa bits)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    special = (bits & _EXP) == _EXP  # inf and NaN pass through (NaN stays NaN)
    if mode == "trunc":
        out = bits & _KEEP
    elif mode == "rne":
        odd = (bits >> np.uint32(13)) & np.uint32(1)
        out = (bits + np.uint32(0xFFF) + odd) & _KEEP
    elif mode == "rna":
        out = (bits + np.uint32(0x1000)) & _KEEP
    else:
        raise ValueError(f"unknown TF32 rounding {mode!r}")
    out = np.where(special, bits, out).astype(np.uint32)
    return out.view(np.float32)


def _mm(a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.matmul(a, b, dtype=dtype)


def dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray, precision: str, mode: str | None = None) -> np.ndarray:
    """``a @ b + acc`` for fp32 ``a``/``b`` as the GPU computes it for ``input_precision=precision``."""
    mode = mode or ROUNDING
    dtype = acc.dtype
    if precision == "tf32":
        return _mm(round_tf32(a, mode), round_tf32(b, mode), dtype) + acc
    if precision == "tf32x3":
        a_big, b_big = round_tf32(a, "rna"), round_tf32(b, "rna")
        with np.errstate(invalid="ignore", over="ignore"):
            a_small = round_tf32(a.astype(np.float32) - a_big, mode)
            b_small = round_tf32(b.astype(np.float32) - b_big, mode)
            small = _mm(a_small, b_big, dtype) + _mm(a_big, b_small, dtype)
        small = np.where(np.isnan(small), np.zeros_like(small), small)
        return _mm(a_big, b_big, dtype) + (small + acc)
    return _mm(a, b, dtype) + acc
