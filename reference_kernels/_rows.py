"""Row planning shared by the row-wise kernels (softmax, layernorm, rmsnorm): host code only.

An input is viewed as ``[M, N]`` rows. A whole row fits one block while it fits the register budget
(``BLOCK_N = next_pow2(N)``, at least :data:`MIN_BLOCK_N`); short rows are stacked into ``[ROWS, BLOCK_N]`` tiles
so each thread still gets a useful amount of work; past the budget, a kernel loops over column chunks. The rules
here pick, for a shape, the path, the tile and the warps, so every shape gets one fixed config and a launch costs
one JIT dispatch (stage 3); the autotuned stage 2 searches the configs of :func:`tile_configs`, pruned by
:func:`per_thread_prune` to a band of fp32 values per thread.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import triton

from reference_kernels._common import cdiv, interpreting, next_power_of_2, sm_count

# Smallest block: tl.arange needs a power of two, and 16 lanes keep 128-bit accesses possible.
MIN_BLOCK_N = 16
# Warps per program: 4 to 16 (a 16-warp program is the largest whose cross-warp reduction stays cheap).
MIN_WARPS, MAX_WARPS = 4, 16


def num_sms(t: torch.Tensor, interpreter_sms: int) -> int:
    """The SMs of t's GPU; under the interpreter (CPU tensors) a small fixed count."""
    return sm_count(t.device.index or 0) if t.is_cuda else interpreter_sms


def block_n(n_cols: int) -> int:
    """The one-block width of a row: the next power of two, at least MIN_BLOCK_N."""
    return max(MIN_BLOCK_N, next_power_of_2(n_cols))


def warps_for_values(values: int, per_thread: int) -> int:
    """Warps that give each thread ``per_thread`` fp32 values of a ``values``-element tile, within 4..16."""
    return max(MIN_WARPS, min(MAX_WARPS, values // (32 * per_thread)))


def row_warps(block: int) -> int:
    """Stage 1's warps for a one-row block: one warp per 512 fp32 values (~16 per thread), 4 to 16."""
    return warps_for_values(block, 16)


def paths(stage: int, n_cols: int, fwd_max_cols: int, bwd_max_cols: int) -> tuple[str, str]:
    """(forward path, backward path) for rows of n_cols columns: stage 1 one program per row ("row"), stage 2
    the autotuned tiles ("tuned"), stage 3 rule-picked tiles ("one_block") while a row fits each direction's
    register budget, else the chunk-looped kernels ("looped")."""
    if stage == 1:
        return "row", "row"
    if stage == 2:
        return "tuned", "tuned"
    fwd = "one_block" if n_cols <= fwd_max_cols else "looped"
    bwd = "one_block" if n_cols <= bwd_max_cols else "looped"
    return fwd, bwd


@functools.lru_cache(maxsize=1024)
def stacked_plan(
    n_rows: int, n_cols: int, n_sms: int, min_tile: int, per_thread: int, min_programs_per_sm: int
) -> tuple[tuple[int], dict[str, int]]:
    """One program per ``[ROWS, BLOCK_N]`` tile: (grid, launch meta). Short rows are stacked up to ``min_tile``
    values per program, halving ROWS while fewer than ``min_programs_per_sm`` programs per SM would result;
    warps give each thread ``per_thread`` fp32 values. Cached: a call costs a dict lookup."""
    block = block_n(n_cols)
    rows = max(1, min_tile // block)
    while rows > 1 and cdiv(n_rows, rows) < min_programs_per_sm * n_sms:
        rows //= 2
    return (cdiv(n_rows, rows),), {
        "BLOCK_N": block,
        "ROWS": rows,
        "num_warps": warps_for_values(rows * block, per_thread),
    }


def even_tiles(n_rows: int, n_cols: int, meta: dict[str, int]) -> bool:
    """Whether a stacked plan's ``[ROWS, BLOCK_N]`` tiles cover the rows exactly, so a kernel may drop its masks."""
    return n_cols == meta["BLOCK_N"] and n_rows % meta["ROWS"] == 0


@functools.lru_cache(maxsize=1024)
def persistent_plan(
    n_rows: int, n_cols: int, n_sms: int, tile: int, per_thread: int, stages: int
) -> tuple[int, dict[str, int]]:
    """Persistent programs walking ``[ROWS, BLOCK_N]`` row tiles of about ``tile`` values (a norm's backward, one
    partial dw row per program): (program count, launch meta). At ~120 registers per thread two 8-warp programs
    fit an SM's 64K registers, one 16-warp program; the grid is as many as fit at once, never more than tiles."""
    block = block_n(n_cols)
    rows = max(1, tile // block)
    warps = warps_for_values(rows * block, per_thread)
    progs_per_sm = 2 if warps <= 8 else 1
    programs = max(1, min(cdiv(n_rows, rows), progs_per_sm * n_sms))
    return programs, {"BLOCK_N": block, "ROWS": rows, "STAGES": stages, "num_warps": warps}


def interpreter_chunk(meta: dict[str, int], chunk: int) -> dict[str, int]:
    """A looped kernel's meta, with CHUNK shrunk to ``chunk`` under the interpreter so small cases loop."""
    return {**meta, "CHUNK": chunk} if interpreting() else meta


def tile_configs(rows: tuple[int, ...], stages: tuple[int, ...] | None = None) -> list[triton.Config]:
    """Stage 2's search space: ROWS × num_warps 4/8/16 (× STAGES of a row-tile loop when given)."""
    if stages is None:
        return [triton.Config({"ROWS": r}, num_warps=w) for r in rows for w in (4, 8, 16)]
    return [triton.Config({"ROWS": r, "STAGES": s}, num_warps=w) for r in rows for w in (4, 8, 16) for s in stages]


def per_thread_prune(lo: int, hi: int, target: float | None = None) -> Any:
    """An autotune pruner keeping configs whose tile gives each thread lo..hi fp32 values; when none does, the
    one closest (in log2) to ``target`` (default the geometric middle). Fewer values idle threads and shorten
    the bytes in flight; more spill."""
    aim = target if target is not None else math.sqrt(lo * hi)

    def prune(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
        width = kwargs.get("BLOCK_N", named_args.get("BLOCK_N"))

        def per_thread(c: triton.Config) -> float:
            return c.kwargs["ROWS"] * width / (32 * c.num_warps)

        kept = [c for c in configs if lo <= per_thread(c) <= hi]
        return kept or [min(configs, key=lambda c: abs(math.log2(per_thread(c) / aim)))]

    return prune
