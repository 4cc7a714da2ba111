"""The abstract values the kernel analysis tracks for each name in a ``@triton.jit`` function.

A :class:`Val` is what is known about a tensor or scalar without running anything: which ``tl.arange``
lanes it indexes (``sources``), whether it derives from ``tl.program_id`` and was cast to int64, whether it
is a mask and which lanes that mask bounds, what masked-off lanes of a loaded value hold (``pad``), and a
few facts the numerics rules need (max-derived, shifted by a max, strictly positive, may be zero, ...).
Every field defaults to "nothing known", which makes every rule stay silent: a value the analysis does
not understand can cause a missed defect, never a false one.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, fields, replace

from mcp_server.engine.audit.analysis.module import UNKNOWN

# What masked-off lanes of a loaded value hold (the load's ``other=``, carried through elementwise ops).
ZERO, ONE, NEG_INF, POS_INF, NEG_BIG, POS_BIG, CONST, NAN, UNDEF, UNKNOWN_PAD = (
    "0",
    "1",
    "-inf",
    "+inf",
    "large negative",
    "large positive",
    "a constant",
    "nan",
    "undefined",
    "unknown",
)
# A finite value of unknown sign (0 - m), and a strictly positive one (exp of a finite value): the first
# is too vague to report, the second is never neutral for a sum.
FINITE, POSITIVE = "a finite value", "a positive value"
LOW_PRECISION = ("fp16", "bf16")
DTYPES = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint32": "uint32",
    "uint64": "int64",
    "float8e4nv": "fp8",
    "float8e5": "fp8",
}

Dim = int | str | None  # a literal size, a constexpr name, or unknown


@dataclass(frozen=True)
class Val:
    # ---- index facts
    sources: frozenset[int] = frozenset()  # tl.arange calls whose lanes this value spans
    axes: tuple[tuple[int, int], ...] = ()  # (source, axis it lies along)
    shape: tuple[Dim, ...] | None = None
    tiled: frozenset[int] = frozenset()  # sources slid along their dimension by pid/loop (pid*BLOCK + arange)
    bounded: frozenset[int] = frozenset()  # sources wrapped into range (% n, tl.minimum, tl.where(mask, ...))
    pid: bool = False  # derived from tl.program_id
    pid_small: bool = False  # only from program_id(1)/(2): grid axes 1 and 2 stop at 65535
    loopvar: bool = False
    tile_off: bool = False  # a pid/loop value scaled by a compile-time size: a tile's start offset
    elem: bool = False  # element-scale (not a small tile count)
    tilecount: bool = False  # a number of tiles (tl.cdiv): small, not a stride
    int64: bool = False
    runtime: frozenset[str] = frozenset()  # runtime (non-constexpr) parameters it derives from
    ovf_site: ast.AST | None = None  # first int32 pid × size multiplication it contains
    # ---- masks
    is_mask: bool = False
    mask_sources: frozenset[int] | None = None  # lanes bounded; None = unknown (treated as all)
    # ---- pointers
    root: str | None = None  # the parameter a pointer expression starts from (x_ptr in x_ptr + offs)
    advanced: bool = False  # a pointer tile bumped inside a loop (ptrs += BLOCK_K * stride)
    block_ptr: bool = False
    block_runtime_shape: bool = False
    desc: bool = False
    # ---- data
    data: bool = False  # derived from loaded or computed tensor data
    raw: bool = False  # a loaded value through elementwise ops only (no reduction)
    pad: str | None = None  # masked-off lanes' content; None = no masked-off lanes
    pad_site: ast.AST | None = None
    pad_axes: frozenset[int] | None = None  # axes the padding runs along; None = unknown
    dtype: str | None = None
    maxed: bool = False  # a max (or running max) of data
    shifted: bool = False  # data minus its max (≤ 0), safe to exponentiate
    shifted_exp: bool = False  # exp of shifted data: the max lane gives exp(0) = 1, so its sum is ≥ 1
    nonneg: bool = False
    nonpos: bool = False
    positive: bool = False
    can_be_zero: bool = False
    exp_site: ast.AST | None = None  # an exp of unshifted data this value carries
    acc_init: ast.AST | None = None  # the fp16/bf16 tl.zeros/tl.full this accumulator started from
    # ---- value bounds (numbers proven for every real lane; None = unbounded on that side)
    lo: float | None = None
    hi: float | None = None
    # ... and for the masked-off lanes (meaningful only when pad is not None)
    pad_lo: float | None = None
    pad_hi: float | None = None
    # ---- literals
    const: object = UNKNOWN
    constexpr: str | None = None
    dtype_lit: str | None = None
    items: tuple[Val, ...] | None = None


NOTHING = Val()

_MUST = {
    *("int64", "maxed", "shifted", "shifted_exp", "nonneg", "nonpos", "positive"),
    *("block_ptr", "desc", "pid_small"),
}
_MAY = {
    "pid",
    "loopvar",
    "tile_off",
    "elem",
    "tilecount",
    "is_mask",
    "advanced",
    "block_runtime_shape",
    "data",
    "raw",
    "can_be_zero",
}
_FIRST = {"ovf_site", "exp_site", "acc_init"}
_UNION = {"sources", "tiled", "runtime"}


def join(a: Val, b: Val) -> Val:
    """What is known of a name after two paths (if/else branches, loop entry and back edge) meet."""
    if a == b:
        return a
    out: dict[str, object] = {}
    for f in fields(Val):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in _MUST:
            out[f.name] = x and y
        elif f.name in _MAY:
            out[f.name] = x or y
        elif f.name in _FIRST:
            out[f.name] = x if x is not None else y
        elif f.name in _UNION:
            out[f.name] = x | y
        elif f.name == "bounded":
            out[f.name] = x & y
        elif f.name == "mask_sources":
            out[f.name] = y if x is None else x if y is None else (x & y)
        elif f.name == "pad":
            out[f.name] = x if y is None or x == y else y if x is None else UNKNOWN_PAD
        elif f.name == "pad_site":
            out[f.name] = x if x is not None else y
        elif f.name in ("lo", "pad_lo"):
            out[f.name] = min(x, y) if x is not None and y is not None else None
        elif f.name in ("hi", "pad_hi"):
            out[f.name] = max(x, y) if x is not None and y is not None else None
        elif f.name == "const":
            out[f.name] = x if _same(x, y) else UNKNOWN
        else:
            out[f.name] = x if x == y else None
    if a.axes != b.axes:
        out["axes"] = tuple(sorted(set(a.axes) & set(b.axes)))
    return Val(**out)  # type: ignore[arg-type]


def _same(x: object, y: object) -> bool:
    if x is UNKNOWN or y is UNKNOWN:
        return False
    try:
        return bool(x == y) and type(x) is type(y)
    except Exception:
        return False


def pad_of_const(value: object) -> str:
    """The padding an ``other=``/``tl.where`` fill value gives."""
    if value is UNKNOWN or not isinstance(value, (int, float)):
        return UNKNOWN_PAD
    v = float(value)
    if math.isnan(v):
        return NAN
    if v == 0:
        return ZERO
    if v == 1:
        return ONE
    if v == -math.inf:
        return NEG_INF
    if v == math.inf:
        return POS_INF
    if v <= -1e4:
        return NEG_BIG
    if v >= 1e4:
        return POS_BIG
    return CONST


_EXP_PAD = {
    NEG_INF: ZERO,
    NEG_BIG: ZERO,
    ZERO: ONE,
    POS_INF: POS_INF,
    POS_BIG: POS_INF,
    ONE: CONST,
    CONST: CONST,
}
_LOG_PAD = {ZERO: NEG_INF, ONE: ZERO, POS_INF: POS_INF}
_NEG_PAD = {NEG_INF: POS_INF, POS_INF: NEG_INF, NEG_BIG: POS_BIG, POS_BIG: NEG_BIG, ZERO: ZERO, ONE: CONST}
_ABS_PAD = {NEG_INF: POS_INF, POS_INF: POS_INF, NEG_BIG: POS_BIG, POS_BIG: POS_BIG, ZERO: ZERO, ONE: ONE}
_SQRT_PAD = {ZERO: ZERO, ONE: ONE, POS_INF: POS_INF}


def unary_pad(op: str, pad: str | None) -> str | None:
    if pad is None or pad in (UNDEF, UNKNOWN_PAD, NAN):
        return pad
    table = {"exp": _EXP_PAD, "log": _LOG_PAD, "neg": _NEG_PAD, "abs": _ABS_PAD, "sqrt": _SQRT_PAD}.get(op)
    if op == "cast":
        return pad
    return table.get(pad, UNKNOWN_PAD) if table else UNKNOWN_PAD


def binary_pad(op: str, a: Val, b: Val) -> str | None:
    """Padding of ``a op b``, where a padded operand meets a value whose lanes are all real."""
    pa, pb = a.pad, b.pad
    if pa is None and pb is None:
        return None
    if op == "mul" and ZERO in (pa, pb):
        return ZERO  # 0 × anything finite; NaN/inf garbage in undefined lanes is the one case missed
    if UNDEF in (pa, pb):
        return UNDEF
    if pa is not None and pb is not None:
        if op in ("add", "mul") and pa == pb == ZERO:
            return ZERO
        if op == "mul" and ZERO in (pa, pb):
            return ZERO
        if op == "add" and pa == pb and pa in (NEG_INF, POS_INF):
            return pa
        return UNKNOWN_PAD
    pad, other, padded_left = (pa, b, True) if pa is not None else (pb, a, False)
    if pad in (UNKNOWN_PAD, NAN):
        return pad
    infinite = pad in (NEG_INF, POS_INF, NEG_BIG, POS_BIG)
    finite = pad in (ZERO, ONE, CONST, FINITE, POSITIVE)
    if op in ("add", "sub"):
        if finite:
            return FINITE  # 0 - m: some finite value, no longer neutral for anything
        if not infinite:
            return UNKNOWN_PAD
        return pad if op == "add" or padded_left else _NEG_PAD[pad]
    sign = _sign(other)
    if op == "mul":
        if pad == ZERO:
            return ZERO
        if infinite and sign:
            return pad if sign > 0 else _NEG_PAD[pad]
        return FINITE if finite else UNKNOWN_PAD
    if op == "div" and padded_left:
        if pad == ZERO:
            return ZERO
        if infinite and sign:
            return pad if sign > 0 else _NEG_PAD[pad]
    return UNKNOWN_PAD


def _sign(v: Val) -> int:
    if isinstance(v.const, (int, float)) and not isinstance(v.const, bool) and v.const != 0:
        return 1 if v.const > 0 else -1
    return 1 if v.positive else 0


def promote(a: Val, b: Val) -> str | None:
    if a.dtype == b.dtype:
        return a.dtype
    if a.dtype is None and b.const is not UNKNOWN:
        return None
    if {a.dtype, b.dtype} <= {"fp16", "bf16", "fp32", "fp64", None}:
        for d in ("fp64", "fp32"):
            if d in (a.dtype, b.dtype):
                return d
    return None


def broadcast(a: Val, b: Val) -> tuple[tuple[Dim, ...] | None, tuple[tuple[int, int], ...]]:
    """Shape and (source, axis) pairs of ``a op b`` under right-aligned broadcasting."""
    if a.shape is None or b.shape is None:
        known = a if b.shape is None and not b.axes else b if a.shape is None and not a.axes else None
        return (None, known.axes) if known is not None and known.shape is not None else (None, ())
    rank = max(len(a.shape), len(b.shape))
    pa = (1,) * (rank - len(a.shape)) + tuple(a.shape)
    pb = (1,) * (rank - len(b.shape)) + tuple(b.shape)
    shape = tuple(y if x == 1 else x for x, y in zip(pa, pb, strict=True))
    axes = {(s, ax + rank - len(a.shape)) for s, ax in a.axes} | {(s, ax + rank - len(b.shape)) for s, ax in b.axes}
    return shape, tuple(sorted(axes))


def subscript(v: Val, index: ast.expr) -> Val:
    """``x[:, None]``-style indexing: insert/keep axes; anything else forgets the shape."""
    elts = index.elts if isinstance(index, ast.Tuple) else [index]
    if v.shape is None:
        return replace(v, shape=None, axes=())
    new_shape: list[Dim] = []
    mapping: dict[int, int] = {}
    old = 0
    for e in elts:
        if isinstance(e, ast.Constant) and e.value is None:
            new_shape.append(1)
        elif isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None:
            if old >= len(v.shape):
                return replace(v, shape=None, axes=())
            mapping[old] = len(new_shape)
            new_shape.append(v.shape[old])
            old += 1
        else:
            return replace(v, shape=None, axes=())
    while old < len(v.shape):
        mapping[old] = len(new_shape)
        new_shape.append(v.shape[old])
        old += 1
    axes = tuple(sorted((s, mapping[ax]) for s, ax in v.axes if ax in mapping))
    pad_axes = None if v.pad_axes is None else frozenset(mapping[a] for a in v.pad_axes if a in mapping)
    return replace(v, shape=tuple(new_shape), axes=axes, pad_axes=pad_axes)


def fold(op: ast.operator, x: object, y: object) -> object:
    """Constant folding of numeric literals; UNKNOWN when not both numbers or on error."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y)):
        return UNKNOWN
    try:
        if isinstance(op, ast.Add):
            return x + y  # type: ignore[operator]
        if isinstance(op, ast.Sub):
            return x - y  # type: ignore[operator]
        if isinstance(op, ast.Mult):
            return x * y  # type: ignore[operator]
        if isinstance(op, ast.Div):
            return x / y  # type: ignore[operator]
        if isinstance(op, ast.FloorDiv):
            return x // y  # type: ignore[operator]
        if isinstance(op, ast.Mod):
            return x % y  # type: ignore[operator]
    except (ZeroDivisionError, OverflowError, ValueError):
        return UNKNOWN
    return UNKNOWN


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# ---- value bounds: intervals over the real lanes (lo, hi) and over the masked-off lanes (pad_lo, pad_hi)

Bounds = tuple[float | None, float | None]
UNBOUNDED: Bounds = (None, None)


def _num(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x


def bounds(v: Val) -> Bounds:
    """Bounds of the real lanes, the sign facts included (``x * x`` is >= 0, ``exp`` of anything > 0)."""
    lo, hi = v.lo, v.hi
    if v.nonneg or v.positive:
        lo = 0 if lo is None else max(lo, 0)
    if v.nonpos:
        hi = 0 if hi is None else min(hi, 0)
    return lo, hi


def pad_bounds(v: Val) -> Bounds:
    """Bounds of the value in masked-off lanes: the padding's when padded, else the value's own."""
    return (v.pad_lo, v.pad_hi) if v.pad is not None else (v.lo, v.hi)


def exact(c: object) -> Bounds:
    """Bounds of a literal number."""
    if isinstance(c, (int, float)) and not isinstance(c, bool):
        x = _num(c)
        return x, x
    return UNBOUNDED


def interval(op: str, a: Bounds, b: Bounds = UNBOUNDED) -> Bounds:
    """Interval arithmetic for ``op`` (None = unbounded on that side); anything unknown gives UNBOUNDED."""
    (alo, ahi), (blo, bhi) = a, b

    def both(x: float | None, y: float | None, f) -> float | None:
        if x is None or y is None:
            return None
        try:
            return _num(f(x, y))
        except (OverflowError, ZeroDivisionError, ValueError):
            return None

    if op == "add":
        return both(alo, blo, lambda x, y: x + y), both(ahi, bhi, lambda x, y: x + y)
    if op == "sub":
        return both(alo, bhi, lambda x, y: x - y), both(ahi, blo, lambda x, y: x - y)
    if op == "neg":
        return (None if ahi is None else -ahi), (None if alo is None else -alo)
    if op == "mul":
        if None not in (alo, ahi, blo, bhi):
            products = [both(x, y, lambda p, q: p * q) for x in (alo, ahi) for y in (blo, bhi)]
            if None in products:
                return UNBOUNDED
            return min(products), max(products)  # type: ignore[type-var]
        if alo is not None and blo is not None and alo >= 0 and blo >= 0:
            return both(alo, blo, lambda x, y: x * y), both(ahi, bhi, lambda x, y: x * y)
        return UNBOUNDED
    if op == "mod":  # x % d with 0 <= x and 1 <= d <= d_max (C-like: the result keeps x's sign)
        if alo is not None and alo >= 0 and blo is not None and blo >= 1 and bhi is not None:
            return 0, bhi - 1 if ahi is None else min(ahi, bhi - 1)
        return UNBOUNDED
    if op == "floordiv":
        if alo is not None and alo >= 0 and blo is not None and blo >= 1:
            return both(alo, bhi, lambda x, y: x // y) if bhi is not None else 0, both(ahi, blo, lambda x, y: x // y)
        return UNBOUNDED
    if op in ("exp", "exp2"):
        base = math.e if op == "exp" else 2.0

        def power(x: float | None) -> float | None:
            if x is None:
                return None
            try:
                return base**x
            except OverflowError:
                return math.inf

        return (0.0 if alo is None else power(alo)), power(ahi)
    if op == "abs":
        if alo is not None and alo >= 0:
            return alo, ahi
        if ahi is not None and ahi <= 0:
            return -ahi, (None if alo is None else -alo)
        return 0.0, (max(-alo, ahi) if alo is not None and ahi is not None else None)
    if op == "sqrt":
        if alo is not None and alo >= 0:
            return math.sqrt(alo), (None if ahi is None else math.sqrt(ahi))
        return UNBOUNDED
    if op == "maximum":  # max(a, b) >= each operand's lower bound
        los = [x for x in (alo, blo) if x is not None]
        return (max(los) if los else None), both(ahi, bhi, max)
    if op == "minimum":
        his = [x for x in (ahi, bhi) if x is not None]
        return both(alo, blo, min), (min(his) if his else None)
    if op == "hull":  # either operand (tl.where)
        return both(alo, blo, min), both(ahi, bhi, max)
    if op in ("sigmoid",):
        return 0.0, 1.0
    if op in ("tanh", "cos", "sin", "erf"):
        return -1.0, 1.0
    return UNBOUNDED


def with_bounds(v: Val, real: Bounds, pad: Bounds) -> Val:
    """``v`` with new bounds (the padding's only kept while it has masked-off lanes)."""
    if v.pad is None:
        pad = UNBOUNDED
    return replace(v, lo=real[0], hi=real[1], pad_lo=pad[0], pad_hi=pad[1])
