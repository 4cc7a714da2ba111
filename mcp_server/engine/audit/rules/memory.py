"""Memory rules inside kernels: accesses that can run past the tensor, offsets that wrap in int32.

``unmasked-access`` needs more than a missing mask: tile offsets (``tl.arange`` lanes) that no mask,
boundary check, modulo, ``tl.minimum`` or ``tl.where`` clamp bounds, plus evidence that the extent is not
exact:

- the same lanes are compared against a bound elsewhere in the kernel (the author knows they run over);
- a runtime argument that looks like a size is never used;
- the tile slides along a dimension (``pid * BLOCK + arange``, a pointer bumped in a loop) and that
  dimension is walked in tiles of a runtime size (``range(0, K, BLOCK_K)``, ``tl.cdiv(M, BLOCK_M)``) or the
  launch grid rounds up with ``triton.cdiv``.

Without such evidence a constexpr-sized tile is taken as exact (a row of ``N: tl.constexpr`` read whole).
Accesses under ``if start + BLOCK <= n:`` (or after ``if start + BLOCK > n: ...; return``), in a
``if EVEN_K:`` branch whose other branch masks the same pointer or whose flag every launch sets from a
divisibility test (``EVEN=n % BLOCK == 0``), or on a padded scratch buffer (read and written, never
masked) are not reported.

``int32-offset-overflow`` reports a ``program_id`` (int32) multiplied by an element-scale factor before
any int64 cast, unless the interpreter proves the product below 2**31 (see ``analysis.kernel``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from mcp_server.engine.audit.rules.registry import STATIC
from mcp_server.engine.models import Severity

UNMASKED = STATIC.rule(
    "unmasked-access",
    "memory",
    Severity.error,
    "tl.load/tl.store/atomic with tile offsets that can run past the tensor and no mask or boundary_check",
)
INT32_OVERFLOW = STATIC.rule(
    "int32-offset-overflow",
    "memory",
    Severity.warning,
    "program_id (int32) multiplied by a block size or stride before any int64 cast: wraps past 2**31 elements",
)


@dataclass
class _Candidate:
    call: ast.Call
    what: str
    uncovered: frozenset[int]
    tiled: frozenset[int]
    root: str | None
    masked: bool


@dataclass
class _Accesses:
    candidates: dict[int, _Candidate] = field(default_factory=dict)
    root_use: dict[str, set[str]] = field(default_factory=dict)  # pointer parameter → {"load", "store", "masked"}


@STATIC.check(UNMASKED, on="access")
def _collect_access(k, ev) -> None:
    state = k.state(UNMASKED.id, _Accesses)
    ptr = ev.ptr
    if ptr.root is not None:
        use = state.root_use.setdefault(ptr.root, set())
        use.add("load" if ev.what == "tl.load" else "store")
        if ev.has_mask or ev.bc_node is not None:
            use.add("masked")
    if ptr.desc:
        return
    bc_node = ev.bc_node
    has_bc = bc_node is not None and not (isinstance(bc_node, (ast.Tuple, ast.List)) and not bc_node.elts)
    if ptr.block_ptr:
        if not has_bc and ptr.block_runtime_shape:
            k.report(
                UNMASKED.id,
                ev.node,
                f"{ev.what} through a block pointer over a runtime shape has no boundary_check, so edge tiles "
                "read or write past the tensor",
                'add `boundary_check=(0, 1)` (the dims that can run over) and, for loads, `padding_option="zero"`',
            )
        return
    uncovered = ptr.sources - ptr.bounded
    if ev.mask is not None:
        if ev.mask.mask_sources is None:
            return
        uncovered -= ev.mask.mask_sources
    tiled = ptr.tiled | (ptr.sources if ptr.advanced else frozenset())
    if k.fit_guards:
        uncovered -= tiled
    if not uncovered or ev.pointer is None:
        return
    text = ast.unparse(ev.pointer)
    if any(text in spec for spec in k.specialised):
        return
    exact = k.exact_tiles
    if exact:
        # Inside `if EVEN_N:` (every launch sets EVEN_N = n % BLOCK == 0) or `if n % BLOCK == 0:`: the tiles of
        # extent BLOCK are whole.
        uncovered = frozenset(s for s in uncovered if k.source_tile.get(s) not in exact)
        if not uncovered:
            return
    seen = state.candidates.get(id(ev.node))
    if seen is not None:  # second walk of a loop body: facts from the back edge add up
        uncovered, tiled = uncovered | seen.uncovered, tiled | seen.tiled
    state.candidates[id(ev.node)] = _Candidate(ev.node, ev.what, frozenset(uncovered), tiled, ptr.root, ev.has_mask)


@STATIC.check(UNMASKED, on="finish")
def _report_unmasked(k) -> None:
    """Report unmasked accesses whose extent the kernel shows to be dynamic (see the module docstring)."""
    state = k.state(UNMASKED.id, _Accesses)
    for cand in state.candidates.values():
        reason = None
        use = state.root_use.get(cand.root or "", set())
        scratch = {"load", "store"} <= use and "masked" not in use  # padded workspace, read and written
        if cand.uncovered & cand.tiled & k.compared_tiled:
            reason = "the tile's offsets are bounds-checked elsewhere in this kernel, so the last tile runs past"
        elif cand.uncovered & k.compared_sources and cand.root is not None and not scratch:
            reason = "the same lanes are bounds-checked elsewhere in this kernel, so they can run past the end"
        elif k.unused_sizes:
            reason = f"`{k.unused_sizes[0]}` looks like the size it should be masked against, and is unused"
        elif cand.uncovered & cand.tiled and (k.facts.tiled_sizes or k.cdiv_grid):
            bound = (
                f"`{sorted(k.facts.tiled_sizes)[0]}` is walked in tiles"
                if k.facts.tiled_sizes
                else "the launch grid rounds up with triton.cdiv"
            )
            reason = f"the tile slides along a dimension and {bound}, so the last tile runs past the end"
        if reason is None:
            continue
        lanes = ", ".join(f"`{k.source_names.get(s, 'tl.arange')}`" for s in sorted(cand.uncovered))
        what = f"{cand.what} has no mask" if not cand.masked else f"the mask of {cand.what} does not bound {lanes}"
        k.report(
            UNMASKED.id,
            cand.call,
            f"{what}: {reason}",
            "build a mask from the offsets (`mask = offs < n`) and pass `mask=mask` (loads also "
            "`other=` a value neutral for what follows)",
        )


@STATIC.check(INT32_OVERFLOW, on="access")
def _collect_overflow(k, ev) -> None:
    if ev.ptr.ovf_site is not None:
        k.state(INT32_OVERFLOW.id, dict)[id(ev.ptr.ovf_site)] = ev.ptr.ovf_site


@STATIC.check(INT32_OVERFLOW, on="finish")
def _report_overflow(k) -> None:
    found: dict[int, ast.AST] = k.state(INT32_OVERFLOW.id, dict)
    if not found:
        return
    sites = sorted(found.values(), key=lambda n: (n.lineno, n.col_offset))
    first = sites[0]
    n_more = len(sites) - 1
    more = f" (and {n_more} more offset computation{'s' if n_more > 1 else ''})" if n_more else ""
    k.report(
        INT32_OVERFLOW.id,
        first,
        f"`{ast.unparse(first)}` multiplies an int32 program id by a block size or stride{more}; the "
        "offset wraps once a tensor passes 2**31 elements",
        "cast first: `pid = tl.program_id(0).to(tl.int64)` (or `.to(tl.int64)` on the index before "
        "multiplying by the stride)",
    )
