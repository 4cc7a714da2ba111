"""Shape rules inside kernels: tile extents Triton rejects, literal tile sizes, tl.dot tiles too small."""

from __future__ import annotations

import ast

from mcp_server.engine.audit.analysis.module import UNKNOWN as UNKNOWN_CONST
from mcp_server.engine.audit.analysis.values import Val, is_pow2
from mcp_server.engine.audit.rules.registry import STATIC
from mcp_server.engine.models import Severity

# Literal arange extents from here up are tile sizes; below, usually structure (pairs, experts, lanes).
_TILE_LITERAL_MIN = 32

ARANGE_NON_POW2 = STATIC.rule(
    "arange-non-pow2",
    "correctness",
    Severity.error,
    "tl.arange extent (or tl.zeros/tl.full shape) that is not a power of 2: does not compile",
)
ARANGE_EXTENT_NOT_CONSTEXPR = STATIC.rule(
    "arange-extent-not-constexpr",
    "correctness",
    Severity.error,
    "tl.arange bound that is a runtime argument instead of a tl.constexpr: does not compile",
)
HARDCODED_TILE_SIZE = STATIC.rule(
    "hardcoded-tile-size",
    "practice",
    Severity.warning,
    "tile size written as a literal in tl.arange instead of a tl.constexpr parameter (untunable)",
)
DOT_SMALL_TILE = STATIC.rule(
    "dot-small-tile",
    "correctness",
    Severity.error,
    "tl.dot with K < 16 (does not compile on NVIDIA) or M/N < 16 (wastes the tensor cores)",
)


def _pow2(k, node: ast.AST, dim: object, what: str) -> None:
    for value, where in k.dims_values(dim):
        if not is_pow2(value):
            origin = f" ({where})" if where else ""
            k.report(
                ARANGE_NON_POW2.id,
                node,
                f"{what} {value}{origin} is not a power of 2; Triton rejects it at compile time",
                f"use {1 << max(0, value - 1).bit_length()} (triton.next_power_of_2) and mask the extra lanes",
            )
            return


@STATIC.check(ARANGE_EXTENT_NOT_CONSTEXPR, on="arange")
def _arange_bounds(k, node: ast.Call, start_node, end_node, start: Val, end: Val, dim) -> None:
    for bound, v in ((start_node, start), (end_node, end)):
        if v.runtime and v.constexpr is None and v.const is UNKNOWN_CONST:
            k.report(
                ARANGE_EXTENT_NOT_CONSTEXPR.id,
                node,
                f"tl.arange bound `{ast.unparse(bound)}` is a runtime argument; Triton only accepts "
                'tl.constexpr bounds ("arange\'s arguments must be of type tl.constexpr")',
                f"annotate it `{ast.unparse(bound)}: tl.constexpr`, or pass a power-of-2 BLOCK constexpr "
                "and mask against the runtime size",
            )


@STATIC.check(ARANGE_NON_POW2, on="arange")
def _arange_pow2(k, node: ast.Call, start_node, end_node, start: Val, end: Val, dim) -> None:
    _pow2(k, node, dim, "tl.arange extent")


@STATIC.check(ARANGE_NON_POW2, on="filled_dim")
def _filled_pow2(k, node: ast.Call, dim: int) -> None:
    _pow2(k, node, dim, "tensor dimension")


@STATIC.check(HARDCODED_TILE_SIZE, on="arange")
def _literal_tile(k, node: ast.Call, start_node, end_node, start: Val, end: Val, dim) -> None:
    literal = isinstance(end_node, ast.Constant) and isinstance(dim, int)
    if literal and isinstance(dim, int) and dim >= _TILE_LITERAL_MIN and is_pow2(dim):
        k.report(
            HARDCODED_TILE_SIZE.id,
            node,
            f"tile size {dim} is a literal in `{ast.unparse(node)}`, so it cannot be tuned per shape or GPU",
            f"take it as a parameter `BLOCK: tl.constexpr` and use `tl.arange(0, BLOCK)`; pass {dim} from the "
            "launcher or list it in @triton.autotune configs",
        )


@STATIC.check(DOT_SMALL_TILE, on="dot")
def _dot_dims(k, node: ast.AST, a: Val, b: Val, acc, out_dtype) -> None:
    if a.shape is None or len(a.shape) < 2:
        return
    k_values = k.dims_values(a.shape[-1])
    small_k = [(v, w) for v, w in k_values if v < 16]
    if small_k:
        v, w = small_k[0]
        k.report(
            DOT_SMALL_TILE.id,
            node,
            f"tl.dot with K = {v}{f' ({w})' if w else ''}: Triton needs K >= 16 on NVIDIA GPUs "
            "(32 for 8-bit inputs) and will not compile it",
            "make the K tile (BLOCK_K) at least 16",
        )
        return
    mn = [*k.dims_values(a.shape[-2])]
    if b.shape is not None and len(b.shape) >= 2:
        mn += k.dims_values(b.shape[-1])
    small = [(v, w) for v, w in mn if v < 16]
    if small:
        v, w = small[0]
        k.report(
            DOT_SMALL_TILE.id,
            node,
            f"tl.dot on a tile dimension of {v}{f' ({w})' if w else ''}: below 16 the tensor-core "
            "instruction is padded and most of it is wasted",
            "use tiles of at least 16 in M and N, or do the product with broadcasting and tl.sum",
            severity=Severity.info,
        )
