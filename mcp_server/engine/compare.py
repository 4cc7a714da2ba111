"""Trusted comparison of a candidate's outputs with the reference's, in float64, in the parent process.

The verdict for a floating output has two parts, both required:

1. Elementwise: ``|cand − truth| ≤ atol + rtol·|truth| + k·max|ref − truth|`` where ``truth`` is the
   reference computed in float64 and ``ref`` the reference in the native dtype. The last term is PyTorch's
   own worst error in this dtype: a kernel may be as far off as PyTorch itself is, ``k`` times over.
2. Norm: ``‖cand − truth‖ / ‖truth‖ ≤ max(k·‖ref − truth‖ / ‖truth‖, floor[dtype])``. An all-zero or
   constant output has a relative norm error near 1 and fails here even when values are tiny enough to
   slip under an absolute tolerance. An output of fewer than ``FEW_ELEMENTS`` values is held here only to
   ``GROSS_NORM_ERROR``: the norm of a few rounding errors is too noisy to hold to k times PyTorch's.

NaN and ±Inf positions must agree with the reference's (a NaN is allowed where either reference has one,
and required where both do). Integer (signed or unsigned) and bool outputs must match exactly; complex outputs
are judged as pairs of real and imaginary parts. Tensors are processed in chunks so a 2^28-element output does
not need gigabytes of float64 temporaries.

Only dense strided tensors of plain dtypes hold values to compare: a candidate's sparse, quantized (or other
non-strided) output fails with a finding saying what it returned; a reference's is a usage error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch

from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import Finding, FindingKind, Severity

# (atol, rtol) per dtype when the reference module gives none: a little looser than torch.testing's
# defaults for float32 (kernels reorder reductions and use fast exp/div), the same for 16-bit types.
# Read-only views (here and NORM_FLOOR): in bench the candidate shares the process with the timed-output check.
DEFAULT_TOLERANCES: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "float64": (1e-10, 1e-7),
        "float32": (1e-5, 1e-5),
        "float16": (1e-5, 1e-3),
        "bfloat16": (1e-5, 1.6e-2),
        # One fp8 step anywhere in a binade (and the smallest subnormal): a kernel that sums in another order, or
        # with the reduced-precision accumulation of Hopper's fp8 dots, lands across a rounding point now and then.
        "float8_e4m3fn": (2.0**-9, 2.0**-3),
        "float8_e4m3fnuz": (2.0**-10, 2.0**-3),
        "float8_e5m2": (2.0**-16, 2.0**-2),
        "float8_e5m2fnuz": (2.0**-17, 2.0**-2),
    }
)
# Relative-norm error a correct kernel may always have, about a few units in the last place.
NORM_FLOOR: Mapping[str, float] = MappingProxyType({"float64": 1e-12, "float32": 1e-5, "float16": 1e-3,
                                                   "bfloat16": 8e-3, "float8_e4m3fn": 2.0**-4,
                                                   "float8_e4m3fnuz": 2.0**-4, "float8_e5m2": 2.0**-3,
                                                   "float8_e5m2fnuz": 2.0**-3})  # fmt: skip
# How many times PyTorch's own error a candidate may have.
TORCH_ERROR_FACTOR = 4.0
# Below this many finite elements the norm of the rounding errors is a handful of samples: two right kernels summing
# in different orders land further apart than TORCH_ERROR_FACTOR often (with one element and errors of one spread,
# one time in six; a row sum of 300 fp32 values, blocked by 128, was 9.5× PyTorch's own error on a seed). There the
# elementwise bound judges accuracy and the norm only a gross error (an all-zero or constant output), from
# GROSS_NORM_ERROR on.
FEW_ELEMENTS = 64
GROSS_NORM_ERROR = 0.1
# Past this relative-norm distance between the reference in its own dtype and its more precise run, "as far off
# as PyTorch itself, k times over" admits outputs that are mostly wrong (from 1/k on, an all-zero output passes),
# so such an output gets no verdict. Rounding to fp8 stays well under it (e5m2's half step is 12.5 % at most).
TRUSTED_TORCH_ERROR = 0.2
# A truth that is zero at the tolerance's scale (every element within atol of zero: float64 cancels exactly, as a
# LayerNorm gradient over one column does) has no norm to be mostly wrong against; the reference's own output there
# is rounding noise the problem amplifies (rstd = 1/sqrt(eps) ≈ 316 at one column lifts float32 noise to 3e-5-3e-4,
# past a 1e-4 atol in 2 % of seeds). Up to this many times atol such noise is judged elementwise; beyond it, no
# verdict, as for any reference that far off.
ZERO_TRUTH_NOISE = 16.0
CHUNK = 1 << 22
MAX_BAD_SHOWN = 5


def sentinel(dtype: torch.dtype) -> float:
    """The finite value the repeat call poisons fresh floating allocations with: 12345, or three quarters of
    the largest finite value where that is smaller (448 in float8_e4m3fn, so 336)."""
    largest = torch.finfo(dtype).max
    return 12345.0 if largest > 12345.0 else 0.75 * largest


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def unreadable(t: torch.Tensor) -> str | None:
    """What ``t`` is when it is not a dense strided tensor of plain values (a sparse layout, a quantized dtype),
    else None: its elements cannot be read one by one as numbers."""
    if t.layout is not torch.strided:
        return f"a {_name(t.layout)} tensor"
    if t.is_quantized:
        return f"a quantized {_name(t.dtype)} tensor (integers with a scale and zero point, not values)"
    return None


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    norm_floor: float
    factor: float = TORCH_ERROR_FACTOR


def tolerance_for(dtype: torch.dtype, overrides: dict[str, tuple[float, float]] | None = None) -> Tolerance:
    # A complex output's parts are held to the tolerance of their real dtype (complex64: float32's).
    name = _name(dtype.to_real() if dtype.is_complex else dtype)
    floor = NORM_FLOOR.get(name, 1e-5)
    given = (overrides or {}).get(_name(dtype), (overrides or {}).get(name))
    if given is None:
        atol, rtol = DEFAULT_TOLERANCES.get(name, (1e-5, 1e-5))
        return Tolerance(atol=atol, rtol=rtol, norm_floor=floor)
    # A caller who accepts a relative error of rtol per element accepts it for the whole output too.
    atol, rtol = float(given[0]), float(given[1])
    return Tolerance(atol=atol, rtol=rtol, norm_floor=max(floor, rtol))


@dataclass
class BadElement:
    index: list[int]
    got: float
    expected: float


@dataclass
class TensorComparison:
    ok: bool
    numel: int
    mismatches: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_norm_err: float = 0.0
    torch_rel_norm_err: float = 0.0
    nan_mismatches: int = 0
    uninitialized: int = 0
    nondeterministic: int = 0
    bitwise_diff: int = 0
    first_bad: list[BadElement] | None = None
    problem: FindingKind | None = None
    note: str = ""
    exact: bool = False  # an integer or bool output, judged element for element with no tolerance


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return list(reversed(out))


# The share of the elements whose relative errors the mean leaves out, the largest (at least one): a value the
# exact answer puts near zero by cancellation (a dot product of terms far larger than their sum) is off by a large
# part of itself in any float arithmetic, and one such element in a thousand sets the mean by itself, PyTorch's as
# much as the candidate's (a TF32×3 matmul failed at 4.01 times PyTorch's mean over 1024 outputs). Those elements are
# still held to the elementwise bound; a share this small is no room for a kernel wrong at many small values.
MEAN_TRIM = 0.01


class _TrimmedSum:
    """The sum of values added chunk by chunk, and the same sum less its largest (at most ``k``)."""

    def __init__(self, k: int) -> None:
        self.k, self.total, self.tops = k, 0.0, torch.zeros(0, dtype=torch.float64)

    def add(self, values: torch.Tensor) -> None:
        values = values.double().flatten()
        self.total += float(values.sum())
        merged = torch.cat([self.tops, values])
        self.tops = merged.topk(min(self.k, merged.numel())).values

    def trimmed(self, k: int) -> float:
        """The sum less its ``k`` largest values (``k`` at most the one given at the start)."""
        return self.total - float(self.tops[: min(k, self.k)].sum())


def _chunks(n: int):
    for start in range(0, n, CHUNK):
        yield start, min(n, start + CHUNK)


def compare_tensor(
    cand: torch.Tensor,
    ref: torch.Tensor,
    ref64: torch.Tensor | None,
    tol: Tolerance,
    second: torch.Tensor | None = None,
) -> TensorComparison:
    """Compare one output. ``second`` is the candidate's output from a repeat call with a different poison.

    Raises UsageError where the reference's output (or its float64 run) is not a dense strided tensor of plain
    values: no candidate can be judged against it."""
    n = ref.numel()
    got = unreadable(cand)
    if got is not None:
        quantized = cand.layout is torch.strided
        return TensorComparison(
            ok=False,
            numel=n,
            problem=FindingKind.dtype_mismatch if quantized else FindingKind.shape_mismatch,
            note=f"the candidate returned {got}: return a dense strided {_name(ref.dtype)} tensor, as the reference "
            "does",
        )
    for what, t in (("", ref), (" in float64", ref64)):
        problem = unreadable(t) if t is not None else None
        if problem is not None:
            raise UsageError(
                f"The reference returns{what} {problem}: its values cannot be compared element by element. Make "
                "it return a dense strided tensor of the dtype it means (.to_dense(), .dequantize() or "
                ".int_repr()), and write the candidate to return the same."
            )
    if second is not None and unreadable(second) is not None:
        second = None  # the repeat call's output is read for determinism only; the first call's is judged
    if tuple(cand.shape) != tuple(ref.shape):
        return TensorComparison(
            ok=False,
            numel=n,
            problem=FindingKind.shape_mismatch,
            note=f"shape {tuple(cand.shape)} where the reference has {tuple(ref.shape)}",
        )
    if ref.is_complex() or cand.is_complex():
        return _compare_complex(cand, ref, ref64, tol, second)
    result = TensorComparison(ok=True, numel=n)
    shape = tuple(ref.shape)
    c_all = cand.reshape(-1)
    r_all = ref.reshape(-1)
    g_all = (ref64 if ref64 is not None else ref).reshape(-1)
    s_all = second.reshape(-1) if second is not None and tuple(second.shape) == shape else None
    exact = not (ref.is_floating_point() or ref.is_complex())
    bad: list[BadElement] = []

    if exact:
        result.exact = True
        for lo, hi in _chunks(n):
            c, r = c_all[lo:hi], r_all[lo:hi]
            if c.dtype != r.dtype:
                c = c.to(r.dtype)
            wrong = c != r
            count = int(wrong.sum())
            if count:
                result.mismatches += count
                gap = (c[wrong].double() - r[wrong].double()).abs()
                result.max_abs_err = max(result.max_abs_err, float(gap.max()))
                for idx in torch.nonzero(wrong).flatten()[: MAX_BAD_SHOWN - len(bad)].tolist():
                    bad.append(BadElement(_unravel(lo + idx, shape), float(c[idx]), float(r[idx])))
            if s_all is not None:
                result.bitwise_diff += int((s_all[lo:hi].to(c.dtype) != c).sum())
        result.nondeterministic = result.bitwise_diff
        result.ok = result.mismatches == 0 and result.nondeterministic == 0
        if result.mismatches:
            result.problem = FindingKind.mismatch
        elif result.nondeterministic:
            result.problem = FindingKind.nondeterministic
        result.first_bad = bad or None
        return result

    # Pass 1: PyTorch's own error (max and norm) and the truth's norm. Where the reference in its own dtype lost
    # the answer (non-finite where the truth is finite: an intermediate that overflowed), the truth still counts
    # and PyTorch's own error there is taken as one unit in the last place of the largest such value.
    max_torch_err = lost_peak = truth_max = 0.0
    sq_truth = sq_torch = 0.0
    n_finite = 0
    # PyTorch's own error relative to each element's size, summed over the elements it got within the dtype's
    # tolerance (``clean``): the mean a candidate is held to below.
    trim = max(1, math.ceil(MEAN_TRIM * n))
    torch_rel = _TrimmedSum(trim)
    n_clean = 0
    for lo, hi in _chunks(n):
        r, g = r_all[lo:hi].double(), g_all[lo:hi].double()
        fin = torch.isfinite(r) & torch.isfinite(g)
        lost = torch.isfinite(g) & ~torch.isfinite(r)
        n_finite += int((fin | lost).sum())
        diff = (r - g)[fin].abs()
        if diff.numel():
            max_torch_err = max(max_torch_err, float(diff.max()))
            clean = diff <= tol.atol + tol.rtol * g[fin].abs()
            n_clean += int(clean.sum())
            torch_rel.add((diff / (g[fin].abs() + tol.atol))[clean])
        sq_torch += float((diff * diff).sum())
        gf = g[fin | lost]
        sq_truth += float((gf * gf).sum())
        if gf.numel():
            truth_max = max(truth_max, float(gf.abs().max()))
        if lost.any():
            lost_peak = max(lost_peak, float(g[lost].abs().max()))
    if lost_peak > 0 and ref.is_floating_point():
        max_torch_err = max(max_torch_err, torch.finfo(ref.dtype).eps * lost_peak)
    slack = tol.factor * max_torch_err
    truth_norm = math.sqrt(sq_truth)
    # A truth of zeros (or of values whose squares underflow) that the reference in its own dtype is not: no
    # scale to judge against.
    if truth_norm > 0:
        result.torch_rel_norm_err = math.sqrt(sq_torch) / truth_norm
    else:
        result.torch_rel_norm_err = math.inf if sq_torch > 0 else 0.0
    near_zero = False
    if result.torch_rel_norm_err > TRUSTED_TORCH_ERROR:
        noise = truth_max <= tol.atol and max_torch_err <= ZERO_TRUTH_NOISE * tol.atol
        if max_torch_err > tol.atol and not noise:
            result.ok, result.problem = False, FindingKind.reference_precision
            return result
        # PyTorch's own error is inside the absolute tolerance everywhere, or the truth itself is (a LayerNorm
        # gradient over one column, which cancels exactly) and that error is rounding noise: the elementwise bound
        # judges, and a norm relative to a truth of rounding noise means nothing.
        near_zero = True

    # Pass 2: the candidate.
    sq_err = sq_ulp = 0.0
    cand_rel = _TrimmedSum(trim)
    for lo, hi in _chunks(n):
        c, r, g = c_all[lo:hi].double(), r_all[lo:hi].double(), g_all[lo:hi].double()
        c_nan, r_nan, g_nan = torch.isnan(c), torch.isnan(r), torch.isnan(g)
        # Unwritten elements: NaN poison on the first call and the finite sentinel on the second (a floating output
        # only: an integer one of the wrong dtype has no NaN to hold, and fails on its dtype).
        if s_all is not None and cand.is_floating_point():
            s = s_all[lo:hi].double()
            poison = float(torch.tensor(sentinel(cand.dtype), dtype=cand.dtype).double())
            unwritten = c_nan & (s == poison) & ~(r_nan & g_nan)
            result.uninitialized += int(unwritten.sum())
        else:
            unwritten = torch.zeros_like(c_nan)
        nan_bad = (c_nan & ~(r_nan | g_nan) & ~unwritten) | (~c_nan & r_nan & g_nan)
        # A truth past the output dtype's largest value is that dtype's infinity: overflow is the right rounding.
        g_inf = torch.isinf(g.to(cand.dtype).double() if cand.is_floating_point() else g)
        c_inf, r_inf = torch.isinf(c), torch.isinf(r)
        inf_ok = (r_inf & (torch.sign(r) == torch.sign(c))) | (g_inf & (torch.sign(g) == torch.sign(c)))
        inf_bad = (c_inf & ~inf_ok) | (~c_inf & ~c_nan & r_inf & g_inf)
        result.nan_mismatches += int((nan_bad | inf_bad).sum())
        fin = torch.isfinite(c) & torch.isfinite(g)
        err = torch.where(fin, (c - g).abs(), torch.zeros_like(c))
        bound = tol.atol + tol.rtol * g.abs() + slack
        value_bad = fin & (err > bound)
        result.mismatches += int(value_bad.sum())
        ulp = _ulp(g, cand.dtype) if cand.is_floating_point() else None
        if fin.any():
            result.max_abs_err = max(result.max_abs_err, float(err.max()))
            rel = err / (g.abs() + tol.atol)
            result.max_rel_err = max(result.max_rel_err, float(rel[fin].max()))
            clean = fin & torch.isfinite(r) & ((r - g).abs() <= tol.atol + tol.rtol * g.abs())
            if ulp is not None:  # one unit in the last place of the output is rounding, never an error
                beyond = (err - ulp).clamp_min(0.0) / (g.abs() + tol.atol)
                cand_rel.add(beyond[clean])
            else:
                cand_rel.add(rel[clean])
        sq_err += float((err * err).sum())
        if ulp is not None:
            sq_ulp += float((ulp[fin] * ulp[fin]).sum())
        any_bad = value_bad | nan_bad | inf_bad | unwritten
        if len(bad) < MAX_BAD_SHOWN and any_bad.any():
            for idx in torch.nonzero(any_bad).flatten()[: MAX_BAD_SHOWN - len(bad)].tolist():
                bad.append(BadElement(_unravel(lo + idx, shape), float(c[idx]), float(g[idx])))
        if s_all is not None:
            s = s_all[lo:hi].double()
            both_nan = c_nan & torch.isnan(s)
            differs = ~((c == s) | both_nan) & ~unwritten
            result.bitwise_diff += int(differs.sum())
            far = differs & ((c - s).abs() > bound) | (differs & (torch.isnan(c) != torch.isnan(s)))
            result.nondeterministic += int((far & ~unwritten).sum())
    result.rel_norm_err = math.sqrt(sq_err) / truth_norm if truth_norm > 0 else 0.0
    norm_limit = max(tol.factor * result.torch_rel_norm_err, tol.norm_floor)
    if truth_norm > 0:
        # One unit in the last place of the output dtype at every value is rounding, never a wrong answer: it
        # matters where the values are few units of that dtype's smallest step (subnormal outputs).
        norm_limit = max(norm_limit, math.sqrt(sq_ulp) / truth_norm)
    if n_finite < FEW_ELEMENTS:
        norm_limit = max(norm_limit, GROSS_NORM_ERROR)
    norm_bad = truth_norm > 0 and not near_zero and result.rel_norm_err > norm_limit
    # The mean error relative to each element's size, where PyTorch's own was within the dtype's tolerance: the
    # elementwise bound's allowance for PyTorch's error is its largest, one number, and the norm is its largest
    # elements', so an output spanning a wide range could be wrong at every small value (exp of 6·randn with a
    # sixth of its values zeroed passed both). Held to four times PyTorch's own mean, and never under the dtype's
    # rtol (a correct kernel's few units in the last place). Both means leave out their largest ``MEAN_TRIM``. Only
    # where PyTorch got most values within the tolerance: elsewhere those it did are the ones it was lucky on (a
    # reference this noisy is judged by the elementwise bound its error widens, and by the norm).
    left_out = max(1, math.ceil(MEAN_TRIM * n_clean))  # (at most ``trim``: n_clean ≤ n)
    kept = n_clean - left_out
    mean_rel = cand_rel.trimmed(left_out) / kept if kept > 0 else 0.0
    mean_limit = max(tol.factor * (torch_rel.trimmed(left_out) / kept if kept > 0 else 0.0), tol.rtol)
    most_clean = 2 * n_clean >= n_finite
    mean_bad = n_clean >= FEW_ELEMENTS and most_clean and not near_zero and mean_rel > mean_limit
    norm_bad = norm_bad or mean_bad
    result.first_bad = bad or None
    if result.uninitialized:
        result.problem = FindingKind.uninitialized_output
    elif result.nan_mismatches:
        result.problem = FindingKind.nan_mismatch
    elif result.mismatches or norm_bad:
        result.problem = FindingKind.mismatch
        if mean_bad and not result.mismatches:
            result.note = (
                f"mean error relative to each value {mean_rel:.3g} exceeds {mean_limit:.3g} (every element is within "
                "its bound, which PyTorch's largest error widens, but the values are off for their size: small values "
                "wrong beside large ones)"
            )
        elif norm_bad and not result.mismatches:
            result.note = (
                f"relative norm error {result.rel_norm_err:.3g} exceeds {norm_limit:.3g} "
                "(every element is within its bound, but the output as a whole is off)"
            )
    elif result.nondeterministic:
        result.problem = FindingKind.nondeterministic
    result.ok = result.problem is None
    return result


def _as_real(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as real pairs: one more dimension, of 2 (real, imaginary)."""
    return torch.view_as_real(t.resolve_conj().contiguous())


def _compare_complex(
    cand: torch.Tensor, ref: torch.Tensor, ref64: torch.Tensor | None, tol: Tolerance, second: torch.Tensor | None
) -> TensorComparison:
    """Complex outputs as (real, imaginary) pairs, each part held to the bound; a real output where the reference's
    is complex (or the other way round) fails: reading either as the other drops the imaginary parts."""
    if not (ref.is_complex() and cand.is_complex()):
        return TensorComparison(
            ok=False,
            numel=ref.numel(),
            problem=FindingKind.dtype_mismatch,
            note=f"the candidate returned {_name(cand.dtype)} values where the reference returns {_name(ref.dtype)}: "
            f"return {_name(ref.dtype)}, as the reference does",
        )
    result = compare_tensor(
        _as_real(cand),
        _as_real(ref),
        _as_real(ref64) if ref64 is not None and ref64.is_complex() else None,
        tol,
        _as_real(second) if second is not None and second.is_complex() else None,
    )
    if result.problem is not None and result.first_bad:
        pairs = "complex values are compared as (real, imaginary) pairs: an index's last entry is 0 for the real part"
        result.note = f"{result.note}; {pairs}" if result.note else pairs
    return result


def _ulp(g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at each value of ``g`` (float64): the step between neighbouring
    values of that dtype there, the smallest subnormal step below its smallest normal."""
    info = torch.finfo(dtype)
    return torch.exp2(torch.floor(torch.log2(g.abs().clamp_min(info.tiny)))) * info.eps


def describe(kind: FindingKind, comparison: TensorComparison, label: str) -> str:
    """A one-paragraph message for a failed comparison."""
    c = comparison
    shown = ""
    if c.first_bad:
        shown = "; first bad: " + ", ".join(
            f"{tuple(b.index)} got {b.got:.6g} expected {b.expected:.6g}" for b in c.first_bad[:3]
        )
    if kind is FindingKind.uninitialized_output:
        return (
            f"{label}: {c.uninitialized} of {c.numel} elements were never written (they still hold the "
            "poison placed in fresh allocations) — check the grid covers every block and the store mask"
            f"{shown}"
        )
    if kind is FindingKind.nan_mismatch:
        return f"{label}: {c.nan_mismatches} elements have NaN/Inf where the reference does not, or vice versa{shown}"
    if kind is FindingKind.nondeterministic:
        return (
            f"{label}: a second identical call differs beyond tolerance at {c.nondeterministic} elements "
            "(a race, or reading memory nothing wrote)"
        )
    if kind in (FindingKind.shape_mismatch, FindingKind.dtype_mismatch):
        return f"{label}: {c.note}"
    if kind is FindingKind.reference_precision:
        return (
            f"{label}: no verdict. The reference in its own dtype is {c.torch_rel_norm_err:.3g} of this output's norm "
            "away from its more precise run (float64, or a second run where float64 is out of reach), so a "
            f"tolerance of {TORCH_ERROR_FACTOR:g}× PyTorch's own error would accept an output that is mostly wrong. "
            "Make the reference compute in float32 or float64 and cast only its result, and make it the same "
            "function at every dtype (a .view() between dtypes is not)"
        )
    if c.exact:
        return (
            f"{label}: {c.mismatches} of {c.numel} elements differ (integer and bool outputs must match exactly); "
            f"largest difference {c.max_abs_err:.6g}{shown}"
        )
    text = (
        f"{label}: {c.mismatches} of {c.numel} elements outside tolerance; max abs err {c.max_abs_err:.3g}, "
        f"rel-norm err {c.rel_norm_err:.3g} (PyTorch's own: {c.torch_rel_norm_err:.3g}){shown}"
    )
    if c.note:
        text += f"; {c.note}"
    return text


def finding(kind: FindingKind, message: str, case: str | None, seed: int | None) -> Finding:
    return Finding(kind=kind, severity=Severity.error, message=message, case=case, seed=seed)
