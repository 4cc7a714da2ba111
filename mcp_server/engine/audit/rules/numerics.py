"""Numerics rules inside kernels: exp overflow, half-precision accumulation, division by zero.

``unguarded-division`` stays silent where the divisor cannot be 0: an epsilon added, a clamp, a
``tl.where``/``if`` comparison on it, a proven positive lower bound, or a softmax denominator (a sum of
``exp(x - max(x))``, which is at least 1 because the max lane contributes exp(0) = 1, accumulated in a loop
or not).
"""

from __future__ import annotations

import ast

from mcp_server.engine.audit.analysis.values import LOW_PRECISION, Val
from mcp_server.engine.audit.rules.registry import STATIC
from mcp_server.engine.models import Severity

EXP_WITHOUT_MAX_SHIFT = STATIC.rule(
    "exp-without-max-shift",
    "numerics",
    Severity.error,
    "tl.exp/tl.exp2 of data not shifted by its max flows into a sum (softmax/logsumexp overflow)",
)
LOW_PRECISION_ACCUMULATOR = STATIC.rule(
    "low-precision-accumulator",
    "numerics",
    Severity.error,
    "accumulation in fp16/bf16: fp16 tl.zeros accumulator, tl.dot(out_dtype=fp16), tl.sum of fp16 values",
)
UNGUARDED_DIVISION = STATIC.rule(
    "unguarded-division",
    "numerics",
    Severity.warning,
    "division (or rsqrt) by a loaded value or a reduction that can be 0, with no epsilon or tl.where guard",
)


# ---- exp-without-max-shift


@STATIC.check(EXP_WITHOUT_MAX_SHIFT, on="reduction")
def _exp_summed(k, op, node, x: Val, axis, dtype) -> None:
    if op == "sum" and x.exp_site is not None:
        k.report(
            EXP_WITHOUT_MAX_SHIFT.id,
            x.exp_site,
            f"`{ast.unparse(x.exp_site)}` exponentiates data that is not shifted by its max, and the "
            f"result is summed (line {node.lineno}): exp overflows to inf past 88 (fp32) and the sum "
            "becomes inf or NaN",
            "subtract the row max first: `m = tl.max(x, axis=0)`, `e = tl.exp(x - m)` (load masked lanes "
            "with `other=-float('inf')` so they contribute 0)",
        )


@STATIC.check(EXP_WITHOUT_MAX_SHIFT, on="dot")
def _exp_into_dot(k, node, a: Val, b: Val, acc, out_dtype) -> None:
    for operand in (a, b):
        if operand.exp_site is not None:
            k.report(
                EXP_WITHOUT_MAX_SHIFT.id,
                operand.exp_site,
                f"`{ast.unparse(operand.exp_site)}` exponentiates data not shifted by its max and feeds "
                f"tl.dot (line {node.lineno}), which sums the products: overflow to inf/NaN",
                "subtract the running max before exp (online softmax: `p = tl.exp(s - m_new[:, None])`)",
            )


# ---- low-precision-accumulator


@STATIC.check(LOW_PRECISION_ACCUMULATOR, on="reduction")
def _low_precision_sum(k, op, node, x: Val, axis, dtype) -> None:
    if op != "sum":
        return
    low = dtype if dtype is not None else x.dtype
    if low in LOW_PRECISION:
        k.report(
            LOW_PRECISION_ACCUMULATOR.id,
            node,
            f"`{ast.unparse(node)}` sums {low} values in {low}: rounding error grows with the length "
            "and large sums overflow (fp16 max 65504)",
            "sum in fp32: `tl.sum(x.to(tl.float32), axis=...)`, cast the result at the store",
            severity=Severity.error if dtype is not None else Severity.warning,
        )


@STATIC.check(LOW_PRECISION_ACCUMULATOR, on="accumulate")
def _low_precision_loop_accumulator(k, name: str, op: ast.operator, stmt: ast.AST) -> None:
    old = k.env.get(name)
    if old is None or not k.loop_depth or not isinstance(op, (ast.Add, ast.Sub)):
        return
    if old.acc_init is not None and old.dtype in LOW_PRECISION:
        k.report(
            LOW_PRECISION_ACCUMULATOR.id,
            old.acc_init,
            f"accumulator `{name}` is {old.dtype} and is added to in a loop (line {stmt.lineno}): each "
            "step rounds to 11 (fp16) or 8 (bf16) significant bits",
            "initialise it as fp32 (`tl.zeros(..., dtype=tl.float32)`) and cast once at the store",
        )


@STATIC.check(LOW_PRECISION_ACCUMULATOR, on="dot")
def _low_precision_dot(k, node, a: Val, b: Val, acc: Val | None, out_dtype: str | None) -> None:
    if out_dtype in LOW_PRECISION:
        k.report(
            LOW_PRECISION_ACCUMULATOR.id,
            node,
            f"tl.dot(..., out_dtype={out_dtype}) accumulates the K-loop products in {out_dtype}",
            "drop out_dtype (fp32 is the default) and cast the result once at the store",
        )
    elif acc is not None and acc.dtype in LOW_PRECISION:
        k.report(
            LOW_PRECISION_ACCUMULATOR.id,
            acc.acc_init or node,
            f"tl.dot accumulates into a {acc.dtype} accumulator (line {node.lineno})",
            "initialise the accumulator with `tl.zeros(..., dtype=tl.float32)` and cast at the store",
        )


# ---- unguarded-division


@STATIC.check(UNGUARDED_DIVISION, on="division")
def _division(k, node: ast.AST, divisor_node: ast.AST, d: Val) -> None:
    if not d.can_be_zero or (d.lo is not None and d.lo > 0):
        return
    names = {n.id for n in ast.walk(divisor_node) if isinstance(n, ast.Name)}
    if names & k.guard_names:
        return
    text = ast.unparse(divisor_node)
    k.report(
        UNGUARDED_DIVISION.id,
        node,
        f"divides by `{text}`, loaded data or a reduction of it that can be 0 (an all-zero row or block), "
        "giving inf/NaN",
        f"add an epsilon (`{text} + eps`), clamp (`tl.maximum({text}, 1e-12)`) or guard with `tl.where`; if "
        "0 is impossible by construction, say so in a comment",
    )
