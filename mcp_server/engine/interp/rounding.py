"""bf16 downcasts under the Triton interpreter, rounded as the GPU rounds them.

On the GPU ``x.to(tl.bfloat16)`` from fp32 is ``cvt.rn.bf16.f32``: round to nearest, ties to even (Triton's
default ``fp_downcast_rounding``). Triton 3.6's interpreter instead drops the 16 low bits, so every value whose
dropped half is at least 0x8000 comes out one bf16 step too small in magnitude: 34.74 becomes 34.5 where the
GPU gives 34.75, a relative error of up to 2⁻⁸ where the GPU's is at most 2⁻⁹; asking for ``"rtne"`` changes
nothing, a NaN whose payload lies in the dropped bits becomes an infinity, and an fp64 source is cast as an
integer. A bf16 kernel checked here against torch's bf16 (which rounds like the GPU) then fails a tolerance the
GPU meets, or passes one only by luck. An integer → bf16 cast stores the integer's bits as the bf16 (3 becomes
2.8e-40), and a mask → bf16 cast raises. :func:`install` routes fp32, fp64 and integer → bf16 casts through
:func:`bf16_bits`: round to nearest even (or toward zero where the kernel asks for ``"rtz"``), infinities kept,
NaNs kept quiet.
fp64 goes through fp32 first (rounded to nearest even), as torch converts it; on an H100 Triton 3.6's fp64 →
bf16 cast gives torch's bits, and with ``"rtz"`` it does not compile, so here that cast raises
:class:`UnsupportedCast` (the stock interpreter returned the value cast as an integer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_installed = False
_ABS = np.uint32(0x7FFFFFFF)
_INF = np.uint32(0x7F800000)
_QUIET = np.uint32(0x0040)  # a bf16 NaN's top mantissa bit


class UnsupportedCast(ValueError):
    """A cast the GPU compiler refuses, refused here too rather than given a value the GPU never produces."""


def as_f32(bits: np.ndarray) -> np.ndarray:
    """fp32 values of bf16 bit patterns (exact)."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_bits(x: np.ndarray, mode: str = "rtne") -> np.ndarray:
    """The bf16 bit patterns (uint16, same shape) of fp32 or fp64 ``x``: ``"rtne"`` rounds to nearest, ties to
    even; ``"rtz"`` truncates toward zero. NaNs stay NaN (quiet) in both."""
    if mode not in ("rtne", "rtz"):
        raise ValueError(f"unknown bf16 rounding {mode!r}: 'rtne' or 'rtz'")
    x = np.asarray(x)
    with np.errstate(over="ignore"):  # an fp64 beyond fp32's range becomes an infinity, as in torch
        u = np.ascontiguousarray(x.astype(np.float32, copy=False)).view(np.uint32)
    if mode == "rtz":
        out = u >> np.uint32(16)
    else:
        # Adding 0x7FFF plus the kept part's lowest bit carries into bit 16 exactly when the dropped half is
        # above 0x8000, or equal to it with an odd kept part; a carry out of the mantissa steps the exponent
        # (the largest finite values round to infinity, as on the GPU).
        with np.errstate(over="ignore"):
            out = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (u & _ABS) > _INF
    out = np.where(nan, (u >> np.uint32(16)) | _QUIET, out)
    return out.astype(np.uint16).reshape(x.shape)


def install() -> None:
    """Patch the interpreter's builder once per process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original_cast = builder.cast_impl
    original_fp_to_fp = builder.create_fp_to_fp
    sources = (tl.float32, tl.float64)

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if dst_type.scalar == tl.bfloat16:
            if src.dtype.scalar in sources:
                return interp.TensorHandle(bf16_bits(src.data), tl.bfloat16)
            if src.dtype.scalar.is_int() or src.dtype.scalar.is_bool():
                # An integer's value (a mask's 0 or 1), not its bits, rounded to nearest even.
                return interp.TensorHandle(bf16_bits(np.asarray(src.data).astype(np.float64)), tl.bfloat16)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        if dst_type.scalar == tl.bfloat16 and src.dtype.scalar in sources:
            mode = "rtz" if rounding_mode == ir.ROUNDING_MODE.RTZ else "rtne"
            if mode == "rtz" and src.dtype.scalar == tl.float64:
                raise UnsupportedCast(
                    "an fp64 → bf16 cast with fp_downcast_rounding='rtz' does not compile for the GPU (Triton "
                    "fails in ConvertTritonGPUToLLVM); cast to fp32 first: x.to(tl.float32).to(tl.bfloat16, "
                    "fp_downcast_rounding='rtz')"
                )
            return interp.TensorHandle(bf16_bits(src.data, mode), tl.bfloat16)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    builder.cast_impl = cast_impl
    builder.create_fp_to_fp = create_fp_to_fp
