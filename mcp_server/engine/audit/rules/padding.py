"""Padding rules: what masked-off lanes hold when they reach a reduction or the K dimension of tl.dot.

A masked load's ``other=`` (or the ``y`` of ``tl.where(mask, x, y)``) fills the lanes past the tensor; a
reduction over them must not see anything but its neutral value: 0 for a sum (and tl.dot's K), -inf for a
max, +inf for a min. A fill that provably cannot win the reduction is neutral too: ``other=0`` before
``tl.max`` of values known ≥ 0, any ``other`` no larger than a proven lower bound of the real lanes before
``tl.max`` (``other=1.0`` on ``1 + tl.abs(x)``), no smaller than a proven upper bound before ``tl.min``.
"""

from __future__ import annotations

from mcp_server.engine.audit.analysis.values import (
    FINITE,
    NEG_BIG,
    NEG_INF,
    POS_BIG,
    POS_INF,
    UNDEF,
    UNKNOWN_PAD,
    ZERO,
    Val,
)
from mcp_server.engine.audit.rules.registry import STATIC
from mcp_server.engine.models import Severity

NON_NEUTRAL_OTHER = STATIC.rule(
    "non-neutral-other",
    "correctness",
    Severity.error,
    "masked lanes padded with a value that changes the reduction consuming them (other=0 before tl.max, -inf "
    "or no other= before tl.sum/tl.dot)",
)


def _cannot_win(kind: str, x: Val) -> bool:
    """The padded lanes provably lose the max (min) to the real ones: their largest (smallest) possible
    value is at most the real lanes' smallest (at least their largest)."""
    if kind == "max":
        return x.pad_hi is not None and x.lo is not None and x.pad_hi <= x.lo
    return x.pad_lo is not None and x.hi is not None and x.pad_lo >= x.hi


@STATIC.check(NON_NEUTRAL_OTHER, on="reduction")
def _reduction_padding(k, op, node, x: Val, axis: Val | None, dtype) -> None:
    kind = {"sum": "sum", "max": "max", "argmax": "max", "min": "min", "argmin": "min"}.get(op)
    if kind is None:
        return
    pad = x.pad
    if pad is None or pad == UNKNOWN_PAD or x.pad_site is None:
        return
    if axis is not None and axis.const is not None:
        if not isinstance(axis.const, int):
            return
        rank = len(x.shape) if x.shape is not None else None
        if x.pad_axes is None:
            if rank != 1:
                return
        elif rank and (axis.const % rank) not in x.pad_axes:
            return
    if kind == "sum":
        bad = pad not in (ZERO, FINITE)
        neutral, fix_other = "0", "other=0.0"
    elif kind == "max":
        bad = pad not in (NEG_INF, NEG_BIG, FINITE) and not (pad == ZERO and x.nonneg) and not _cannot_win(kind, x)
        neutral, fix_other = "-inf", "other=-float('inf')"
    else:
        bad = pad not in (POS_INF, POS_BIG, FINITE) and not (pad == ZERO and x.nonpos) and not _cannot_win(kind, x)
        neutral, fix_other = "+inf", "other=float('inf')"
    if not bad:
        return
    fn = f"tl.{kind}"
    if pad == UNDEF:
        msg = (
            f"masked load without other= feeds {fn} (line {node.lineno}): masked-off lanes are undefined "
            "and enter the reduction"
        )
    else:
        msg = (
            f"masked-off lanes hold {pad} and reach {fn} (line {node.lineno}), where the neutral value is "
            f"{neutral}: padding changes the result"
        )
    k.report(
        NON_NEUTRAL_OTHER.id,
        x.pad_site,
        msg,
        f"pass `{fix_other}` here (or `tl.where(mask, x, {neutral})` before the reduction)",
    )


@STATIC.check(NON_NEUTRAL_OTHER, on="dot")
def _dot_padding(k, node, a: Val, b: Val, acc, out_dtype) -> None:
    for operand, contraction_from_end in ((a, 1), (b, 2)):
        if operand.pad in (None, UNKNOWN_PAD, ZERO, FINITE) or operand.pad_axes is None or operand.pad_site is None:
            continue
        rank = len(operand.shape) if operand.shape is not None else 2
        if rank - contraction_from_end in operand.pad_axes:
            what = "undefined" if operand.pad == UNDEF else operand.pad
            k.report(
                NON_NEUTRAL_OTHER.id,
                operand.pad_site,
                f"masked-off lanes along the contraction dimension hold {what} and are summed by tl.dot "
                f"(line {node.lineno})",
                "pass `other=0.0` so the K tail contributes nothing",
            )
