"""fp8 under the Triton interpreter, as Triton 3.6 compiles it for an H100.

The interpreter stores ``tl.float8e4nv`` (torch's ``float8_e4m3fn``) and ``tl.float8e5`` (``float8_e5m2``) as
their uint8 bit patterns, and Triton 3.6's interpreter gets most of what a kernel does with them wrong: its
narrowing casts round ties up, truncate subnormals (1e-3 → 0 in e4m3fn) and do not saturate (500 → 256); its
widening casts and the operands of an fp8 ``tl.dot`` lose e5m2's subnormals and NaNs; ``tl.abs`` leaves the
sign; and fp8 + fp8, ``-x``, comparisons, ``tl.sum``, fp8 → fp8 and fp8 ↔ fp64 casts run on the bits where the
GPU compiler refuses them. :func:`install` makes each of these do what the GPU does.

What the GPU does was recorded on an H100 (Triton 3.6) by ``benchmarks/fp8_cast_tables.py`` for every fp16 and
bf16 input, every bf16 pattern of fp32 with four low halves, and every fp8 pattern, and the rules below give the
same bits for every one of them (``tests/engine/test_interp_fp8.py`` holds the tables):

- fp32, fp16 and bf16 → fp8 round to nearest even and saturate (``cvt.rn.satfinite``): a magnitude past the
  largest finite value, an infinity included, becomes ±448 (e4m3fn) or ±57344 (e5m2); a NaN becomes 0x7F.
- ``fp_downcast_rounding="rtz"`` compiles only from fp32 to e5m2; it truncates, saturates finite values and
  keeps infinities. Every other rtz cast to fp8, every fp64 ↔ fp8 cast and every fp8 ↔ fp8 cast fails to compile
  (the last aborts the compiler on an assertion), so here each raises :class:`UnsupportedCast`.
- fp8 → fp16, bf16 and fp32 are exact; every NaN becomes the positive canonical NaN (0x7FFF, 0x7FFFFFFF). One
  GPU quirk is kept because it is what a kernel gets: e5m2 → bf16 reads the all-ones exponent as an ordinary
  one, so an e5m2 infinity becomes ±65536 and its NaNs ±81920, ±98304, ±114688 in bf16.
- ``tl.abs`` clears the sign bit. ``tl.where`` and loads and stores move bits (unchanged); ``tl.max`` and
  ``tl.min`` widen to fp32 first, as Triton's library does.
- fp8 + fp8, -, *, /, negation, ``tl.maximum``, ``<``, ``==`` and ``tl.sum`` fail to compile (LLVM's float
  instructions refuse i8 operands), and so must scans, products and argmax/argmin, which are built of the same
  adds, multiplies and comparisons; each raises :class:`UnsupportedArithmetic` here, naming the fix: widen to
  fp32 first.
- ``tl.dot`` of fp8 operands widens them exactly and, by default, accumulates as an H100's fp8 tensor cores do
  (:func:`imprecise_dot`): Triton leaves ``max_num_imprecise_acc`` at 2**30 on sm_90, so the products are never
  promoted to fp32 sums, and at each 32-deep step the running sum and the step's products are cut, toward zero,
  to 13 bits below the largest of them. That model reproduces the H100's sums exactly where one large product
  swamps many small ones, in either order, and its largest error on random operands to four digits at K = 256,
  1024 and 16384 (2.5 % off at 4096): ``benchmarks/fp8_dot_accumulation.py``, whose H100 figures the tests hold.
  With ``max_num_imprecise_acc=0``, and for a 3-D (batched) dot, which is not a wgmma, the sums are fp32's, as
  on the GPU (the batched case measured bit for bit at K = 64 and 512). Between 1 and K the GPU promotes every N
  products and keeps an error of about 4e-5 of the result's scale that no simple model here reproduced; those
  dots sum in fp32, and the interpreter's caveats say so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from mcp_server.engine.interp.rounding import UnsupportedCast, as_f32, bf16_bits

_installed = False


class UnsupportedArithmetic(ValueError):
    """An operation on fp8 values the GPU compiler refuses, refused here rather than run on the bit patterns."""


@dataclass(frozen=True)
class Format:
    mantissa: int
    bias: int
    largest: float
    has_inf: bool

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)


# Keyed by Triton's dtype name.
FORMATS = {"fp8e4nv": Format(mantissa=3, bias=7, largest=448.0, has_inf=False),
           "fp8e5": Format(mantissa=2, bias=15, largest=57344.0, has_inf=True)}  # fmt: skip
_NAN = 0x7F


def narrow(x: np.ndarray, fmt: str, mode: str = "rtne") -> np.ndarray:
    """The fp8 bit patterns (uint8) of the values ``x`` (any float dtype numpy holds exactly), rounded as the
    GPU's ``cvt.rn.satfinite`` (``mode="rtne"``) or Triton's rtz conversion (``mode="rtz"``) rounds."""
    f = FORMATS[fmt]
    with np.errstate(invalid="ignore"):  # a NaN widens to a NaN
        x = np.asarray(x).astype(np.float64)
    magnitude = np.abs(x)
    nan, inf = np.isnan(magnitude), np.isinf(magnitude)
    usable = np.where(nan | inf | (magnitude == 0), 1.0, magnitude)
    with np.errstate(divide="ignore"):
        exponent = np.maximum(np.floor(np.log2(usable)), 1 - f.bias)
    step = np.exp2(exponent - f.mantissa)  # the spacing of fp8 values at this magnitude (exact powers of two)
    units = usable / step  # exact: a power-of-two scaling
    rounded = (np.rint(units) if mode == "rtne" else np.trunc(units)) * step  # rint: ties to even
    rounded = np.where(magnitude == 0, 0.0, rounded)
    rounded = np.where((rounded > f.largest) | inf, f.largest, rounded)
    bits = _encode(rounded, f)
    if mode == "rtz" and f.has_inf:
        bits = np.where(inf, 0x7C, bits)  # rtz keeps an infinity an infinity
    bits = bits | (np.signbit(x).astype(np.int64) << 7)
    return np.where(nan, _NAN, bits).astype(np.uint8)


def _encode(magnitude: np.ndarray, f: Format) -> np.ndarray:
    """Bits (int64, sign clear) of non-negative values that are exactly representable in ``f``."""
    subnormal = magnitude < f.smallest_normal
    with np.errstate(divide="ignore"):
        exponent = np.maximum(np.floor(np.log2(np.where(subnormal, 1.0, magnitude))), 1 - f.bias)
    mantissa = np.where(subnormal, magnitude / 2.0 ** (1 - f.bias - f.mantissa),
                        magnitude / np.exp2(exponent - f.mantissa) - 2**f.mantissa)  # fmt: skip
    biased = np.where(subnormal, 0, exponent + f.bias)
    return (biased.astype(np.int64) << f.mantissa) | mantissa.astype(np.int64)


def values(bits: np.ndarray, fmt: str, all_ones_exponent_is_finite: bool = False) -> np.ndarray:
    """The float64 values of fp8 ``bits``: NaNs and (e5m2) infinities as such, unless
    ``all_ones_exponent_is_finite`` (e5m2 → bf16 on the GPU), where that exponent is read as any other."""
    f = FORMATS[fmt]
    b = np.asarray(bits).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    biased = (b >> f.mantissa) & ((1 << (7 - f.mantissa)) - 1)
    fraction = (b & ((1 << f.mantissa) - 1)) / 2.0**f.mantissa
    out = np.where(biased == 0, fraction * f.smallest_normal, (1.0 + fraction) * np.exp2(biased - f.bias)) * sign
    top = (1 << (7 - f.mantissa)) - 1
    if f.has_inf and not all_ones_exponent_is_finite:
        out = np.where(biased == top, np.where(fraction == 0, sign * np.inf, np.nan), out)
    elif not f.has_inf:
        out = np.where((b & 0x7F) == _NAN, np.nan, out)
    return out


def widen(bits: np.ndarray, fmt: str, dst: str) -> np.ndarray:
    """What the GPU's fp8 → ``dst`` ("fp16", "bf16" or "fp32") cast gives, in the interpreter's storage for
    ``dst`` (float16, uint16 bf16 bits, float32)."""
    if dst == "bf16":
        v = values(bits, fmt, all_ones_exponent_is_finite=True)
        return np.where(np.isnan(v), np.uint16(0x7FFF), bf16_bits(v)).astype(np.uint16)
    v = values(bits, fmt)
    if dst == "fp16":
        return np.where(np.isnan(v), np.uint16(0x7FFF), v.astype(np.float16).view(np.uint16)).view(np.float16)
    return np.where(np.isnan(v), np.uint32(0x7FFFFFFF), v.astype(np.float32).view(np.uint32)).view(np.float32)


STEP = 32  # the K depth of one fp8 wgmma
KEPT_BITS = 13  # below the largest term's exponent, at each step


def imprecise_dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """``acc + a @ b`` (float64 values of fp8 operands; an fp32 accumulator) as an H100 sums an fp8 wgmma chain
    that is never promoted: per 32-deep step of K, the running sum and the step's exact
    products are each cut toward zero to a multiple of 2**(e − 13), e the exponent of the largest magnitude among
    them, then added (exactly: the cut terms fit fp32)."""
    total = np.asarray(acc, dtype=np.float64)
    for k in range(0, a.shape[-1], STEP):
        # (..., M, 1, step) × (..., 1, N, step): every product of the step, batch dimensions (3-D dots) kept.
        products = a[..., :, None, k : k + STEP] * np.swapaxes(b[..., k : k + STEP, :], -1, -2)[..., None, :, :]
        terms = np.concatenate([total[..., None], products], axis=-1)
        largest = np.abs(terms).max(axis=-1, keepdims=True)
        _, exponent = np.frexp(np.where(largest > 0, largest, 1.0))  # largest = m * 2**exponent, m in [0.5, 1)
        quantum = np.ldexp(1.0, exponent - 1 - KEPT_BITS)
        total = (np.trunc(terms / quantum) * quantum).sum(axis=-1)
    return total


def _refuse(what: str) -> UnsupportedArithmetic:
    return UnsupportedArithmetic(
        f"{what} on fp8 values does not compile for the GPU (Triton 3.6 has no fp8 arithmetic); widen first and "
        "narrow the result: (x.to(tl.float32) + y.to(tl.float32)).to(tl.float8e4nv)"
    )


def install() -> None:
    """Patch the interpreter once per process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime import interpreter as interp

    from mcp_server.engine.interp.bf16math import ARITHMETIC

    handle = interp.TensorHandle
    builder = interp.InterpreterBuilder
    wide = {tl.float16: "fp16", tl.bfloat16: "bf16", tl.float32: "fp32"}

    def fp8_name(dtype: Any) -> str | None:
        name = getattr(getattr(dtype, "scalar", dtype), "name", None)
        return name if name in FORMATS else None

    def source_values(src: Any) -> np.ndarray:
        data = np.asarray(src.data)
        return as_f32(data) if src.dtype.scalar == tl.bfloat16 else data

    original_fp_to_fp = builder.create_fp_to_fp

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        src_fp8, dst_fp8 = fp8_name(src.dtype), fp8_name(dst_type)
        if src_fp8 is None and dst_fp8 is None:
            return original_fp_to_fp(self, src, dst_type, rounding_mode)
        source, target = src.dtype.scalar, dst_type.scalar
        if src_fp8 is not None and dst_fp8 is not None:
            raise UnsupportedCast(
                f"a cast from {source} to {target} does not compile for the GPU (Triton 3.6's compiler aborts on "
                f"it); go through fp16 or fp32: x.to(tl.float32).to(tl.{target})"
            )
        if dst_fp8 is None:
            if target not in wide:
                raise UnsupportedCast(
                    f"a cast from {source} to {target} does not compile for the GPU; widen to fp32 instead "
                    "(x.to(tl.float32)), which is exact"
                )
            return handle(widen(src.data, src_fp8, wide[target]), target)
        if source not in wide:
            raise UnsupportedCast(
                f"a cast from {source} to {target} does not compile for the GPU; cast to fp32 first: "
                f"x.to(tl.float32).to(tl.{target})"
            )
        rtz = rounding_mode == ir.ROUNDING_MODE.RTZ
        if rtz and not (source == tl.float32 and dst_fp8 == "fp8e5"):
            raise UnsupportedCast(
                f"fp_downcast_rounding='rtz' from {source} to {target} does not compile for the GPU (only fp32 → "
                "float8e5 does); drop it to round to nearest even"
            )
        return handle(narrow(source_values(src), dst_fp8, "rtz" if rtz else "rtne"), target)

    builder.create_fp_to_fp = create_fp_to_fp

    def refusing(name: str) -> None:
        original = getattr(builder, name)

        def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            if any(isinstance(a, handle) and fp8_name(a.dtype) for a in args):
                raise _refuse(name.removeprefix("create_").replace("_", " "))
            return original(self, *args, **kwargs)

        setattr(builder, name, patched)

    compares = [n for n in dir(builder) if n.startswith("create_fcmp")]
    for name in [n for n in ARITHMETIC if n != "create_fabs"] + compares:
        if hasattr(builder, name):
            refusing(name)

    original_fabs = builder.create_fabs

    def create_fabs(self: Any, arg: Any) -> Any:
        if fp8_name(arg.dtype):
            return handle(np.asarray(arg.data) & np.uint8(0x7F), arg.dtype.scalar)
        return original_fabs(self, arg)

    builder.create_fabs = create_fabs

    original_dot = builder.create_dot

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        fa, fb = fp8_name(a.dtype), fp8_name(b.dtype)
        if fa is None and fb is None:
            return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)
        wa = values(a.data, fa) if fa else np.asarray(a.data, dtype=np.float64)
        wb = values(b.data, fb) if fb else np.asarray(b.data, dtype=np.float64)
        if wa.ndim == 2 and max_num_imprecise_acc is not None and max_num_imprecise_acc >= wa.shape[-1]:
            out = imprecise_dot(wa, wb, d.data)
        else:  # 0 (fp32 sums, as on the GPU), a 3-D dot (not a wgmma: an H100 sums it in fp32 whatever the
            # setting, measured at K 64 and 512), or a promotion interval this model does not reproduce. Summed in
            # float64 (fp8 products and their sums are exact there) and rounded once, as the H100 gave bit for bit:
            # a float32 matmul's rounding follows the CPU's BLAS kernel, one unit in the last place apart.
            out = np.matmul(wa, wb) + d.data
        return handle(out.astype(d.data.dtype), d.dtype.scalar)

    builder.create_dot = create_dot

    # sm_90's default for an fp8 dot given no max_num_imprecise_acc (triton/backends/nvidia/compiler.py); the
    # interpreter's own is 0, fp32 sums. Its options are frozen, set per builder.
    def sm90_options(options: Any) -> Any:
        return dataclasses.replace(options, max_num_imprecise_acc_default=2**30)

    original_init = builder.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.options = sm90_options(self.options)

    builder.__init__ = __init__
    if isinstance(getattr(interp, "interpreter_builder", None), builder):
        interp.interpreter_builder.options = sm90_options(interp.interpreter_builder.options)

    # Reductions and scans the interpreter computes with numpy, bypassing the builder (any other combine
    # function calls the builder's operations, refused above).
    std = tl.standard
    listed = [(std._sum_combine, "a sum"), (std._prod_combine, "a product"), (std._elementwise_max, "a max"),
              (std._elementwise_min, "a min"), (std._argmax_combine_tie_break_left, "an argmax"),
              (std._argmin_combine_tie_break_left, "an argmin")]  # fmt: skip
    for ops in (interp.ReduceOps, interp.ScanOps):
        original_apply = ops.apply_impl

        def apply_impl(self: Any, input: Any, _original: Any = original_apply) -> Any:
            what = next((w for fn, w in listed if self.combine_fn == fn), None)
            if what is not None and any(fp8_name(t.dtype) for t in input):
                raise _refuse(what)
            return _original(self, input)

        ops.apply_impl = apply_impl
