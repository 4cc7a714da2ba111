"""Row softmax over the last dimension, forward and backward.

Math: ``y[i, j] = exp(x[i, j] - m_i) / sum_k exp(x[i, k] - m_i)`` with ``m_i = max_k x[i, k]``;
backward ``dx = y * (dy - sum_j dy[i, j] * y[i, j])``. An N-D input is viewed as ``[M, N]`` rows of its
last dimension.

Programs → data:
- stage 1: one program per row, the whole row in one block (``BLOCK_N = next_pow2(N)``), num_warps from
  the block size.
- stage 2: one program per ``ROWS`` rows (a ``[ROWS, BLOCK_N]`` tile, so short rows still give each thread
  a useful amount of work); ``ROWS`` and ``num_warps`` autotuned per row length.
- stage 3: no autotuner. While a row fits the register budget, stage 2's kernels with the tile picked by
  rule (``_one_block_plan``: 16 fp32 values per thread, ≥ 2 programs per SM), so every shape gets one
  fixed, predictable config and a launch costs one JIT dispatch; the forward drops its masks where the tiles
  cover the rows exactly (``EVEN``), and so does the backward, which gives each thread 32 values from 8192
  columns (``_bwd_one_block_plan``). Past the budget, a looped kernel:
  persistent programs walk rows, as many per SM as keep the rows in flight inside half the L2
  (``_looped_plan``); per row pass 1 streams column chunks keeping a running max and sum *per lane*
  (``s ← s·e^(m−m') + e^(x−m')`` in a one-exp form), so the loop has no cross-warp reduction and the
  loads of successive chunks overlap; the lanes are merged once per row. Pass 2 re-reads the chunks
  newest-first, so the reads hit the L2 lines pass 1 touched last, and writes ``e^(x−m)/s``.
  16-bit rows from ``FWD_PACKED_MIN_COLS`` / ``BWD_PACKED_MIN_COLS`` up to ``FWD_PACKED_MAX_COLS`` /
  ``BWD_PACKED_MAX_COLS`` columns take neither: one program per row holds x (forward) or y and dy (backward) in
  their 16-bit type (two values per register) and reads each once (``_softmax_fwd_row_kernel`` /
  ``_softmax_bwd_row_kernel`` with ``PACKED``).

Bytes: the forward reads x once and writes y once (``2·M·N·size``); eager PyTorch does the same in one
kernel on CUDA but at ~25 % of copy bandwidth at 16384×8192 bf16 (H200, torch 2.11). The backward reads y and dy
and writes dx (``3·M·N·size``). The looped paths read their rows twice, the second time mostly from L2.

Limits: float32 / float16 / bfloat16; the last dimension must have stride 1 after ``reshape`` (other
layouts are copied once); stages 1 and 2 take rows up to ``ONE_BLOCK_MAX_COLS`` columns, stage 3 any
length. Rows of all ``-inf`` give NaN, as in PyTorch.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels import _rows as rows_plan
from reference_kernels._autotune import launch_tuned, tuning_bench
from reference_kernels._common import as_rows, check_float_tensor, interpreting
from reference_kernels._spec import Case, Dims, KernelSpec, Tolerance, row_limit

# Whole-row kernels keep the row in registers as fp32: 32768 columns over 16 warps (512 threads) is 64
# values per thread, the most the forward holds unspilled (ptxas -v, sm_90: 116 registers). Stages 1
# and 2 stop there.
ONE_BLOCK_MAX_COLS = 32768
# Stage 3 switches to the looped kernels past these. The backward holds two rows (y and dy) per thread, so at
# 32768 columns it spills 28 bytes per thread (ptxas -v) — and still beats the looped backward, which reads both
# rows twice: 0.274 against 0.346 ms at 4096×32768 bf16 on an H100 (benchmarks/rows_sweep.py,
# results/h100/rows_sweep.json); at 65536 the one-block backward spills far more and runs 2-5× slower than looped.
FWD_ONE_BLOCK_MAX_COLS = 32768
BWD_ONE_BLOCK_MAX_COLS = 32768
# Past that, 16-bit rows up to 65536 columns take a one-block backward that keeps y and dy in 16 bits (128 of each
# per thread at 16 warps, two to a register: 128 registers, ~20 spilled) and rounds each product y·dy to that type
# before summing the products in fp32. It reads each row once where the looped kernel reads it twice: 0.58 against
# 0.80 ms at 4096×65536 bf16 on an H100, and 1.09× Liger-Kernel's one-block backward (whose sum stays in 16 bits)
# (benchmarks/softmax_bwd_sweep.py, results/h100/softmax_bwd_sweep.json). The fp32 one-block kernel spills 114-410
# registers there and runs 2.7-7× slower. Against float64 the error (relative norm) is 1.8e-3, the looped
# kernel's 1.7e-3, Liger's 3.0e-3 (4096×65536 bf16).
BWD_PACKED_MAX_COLS = 65536
# The packed backward also beats the fp32 one-block kernel from 16384 columns on, at 32 warps while the row fits
# 32768 (16 bf16 values of y and of dy per thread at 16384, 32 at 32768; ptxas -v, sm_90a: 32 and 61 registers,
# no spills); 16 warps at 32768 (104 registers, no spills) run 1.27× slower.
# At 4096 rows on the H200, µs, fp32 one-block (as shipped before) / packed w32 / packed w16 / Liger-Kernel
# (row_kernels_sweep.py --kernels softmax, results/h200/row_kernels_sweep_softmax.json): 16384 cols 97.5 / 93.9 /
# 94.4 / 93.7, 32768 189.7 / 187.8 / 239.8 / 186.6. At 8192 neither wins (packed w8 / fp32: 47.6 / 48.6 at
# 4096 rows, 185.0 / 183.9 at 16384), so the fp32 kernel stays below 16384. Past 32768 (rows padded to 65536) 16
# warps win: packed w16 / w32 246 / 324 at 36864, 434 / 490 at 65536 (results/h200/row_kernels_sweep_softmax_long.json).
BWD_PACKED_MIN_COLS = 16384


def _bwd_packed_warps(block: int) -> int:
    """Warps of the packed backward for a padded row of ``block`` columns."""
    return 32 if block <= 32768 else 16


# The forward likewise: 16-bit rows up to 65536 columns are read once by one program per row that keeps x in 16
# bits (ptxas -v, sm_90, bf16, 65536 columns at 16 warps: 128 registers, 44 bytes spilled; fp32 x spills 180),
# where the looped kernel reads each row twice. At 4096×65536 bf16 on the H200, by bench: 0.385 against the looped
# kernel's 0.490 ms, Liger-Kernel's one-block forward (x in fp32) 0.402 (softmax_before_packed_forward.json and
# softmax.json's history in results/h200). The exponentials are formed in fp32 either way.
# 32 warps (64 bf16 values, 32 registers of x per thread; ptxas caps them at 64 registers and spills 92 bytes)
# beat 16 from 36864 to 65536 columns, 0.369 ms at 4096×65536 by bench (results/h200/softmax.json), and the packed
# tile, padded to 65536, loses to the looped kernel until the row fills about two thirds of it. At 4096 rows on
# the H200, µs, looped / packed at 32 warps / at 16 (row_kernels_sweep.py --kernels softmax_long,
# results/h200/row_kernels_sweep_softmax_long.json): 36864 cols 256 / 281 / 316, 40000 283 / 288 / 317,
# 49152 381 / 306 / 355, 57344 436 / 339 / 371, 65536 486 / 368 / 386.
FWD_PACKED_MIN_COLS = 45056
FWD_PACKED_MAX_COLS = 65536
_FWD_PACKED_WARPS = 32
MIN_BLOCK_N = rows_plan.MIN_BLOCK_N
# Stage 3's one-block tile: 16 fp32 values per thread (two 128-bit bf16 loads), 4 to 16 warps; short
# rows are stacked until a program holds 2048 values. 16 per thread over 16 warps is stage 1's choice at
# 8192 columns, which ran at 98 % of copy bandwidth at 16384×8192 (GPU run 1); 16-32 per thread is the
# range stage 2's pruned autotuner searches.
_VALUES_PER_THREAD = 16
_MIN_TILE = 2048
# The backward's one-block tile drops its masks where the tiles cover the rows exactly, and from 8192 columns
# gives each thread 32 values of y and of dy (8 warps at 8192). At 4096 rows on the H200, bf16, µs (masked 16
# warps as before / unmasked 8 / Liger-Kernel; row_kernels_sweep.py --kernels softmax,
# results/h200/row_kernels_sweep_softmax.json): 8192 cols 48.6 / 47.5 / 47.2; at 4096 cols, 8 warps either way,
# masked / unmasked 25.7 / 25.4, Liger 25.3; at 16384×8192 all within 0.3 %.
_BWD_WIDE_VALUES_PER_THREAD = 32
_BWD_WIDE_MIN_COLS = 8192
# Stage 3 stacks rows only while every SM still gets this many programs: fewer, fatter programs leave
# SMs idle at small row counts.
_MIN_PROGRAMS_PER_SM = 2
# Looped kernels: the rows in flight across the GPU may hold this many bytes, so that pass 2 re-reads
# them from L2 (half the 50 MB L2 of an H100/H200; the output being written streams through the other
# half): one program per SM from 65536 bf16 columns on (128 KB rows), up to three for shorter rows.
_L2_BUDGET_BYTES = 24 * 2**20
_MAX_LOOPED_PROGS_PER_SM = 3
# One program per SM gets 16 warps, several get 8 each; three pipeline stages keep two chunks streaming
# into shared memory while one is folded in. ptxas -v (sm_90, bf16): forward 8192 × 16 warps 86
# registers / 32 KB, 4096 × 8 warps 80 / 16 KB; backward (y and dy) 4096 × 16 warps 40 / 32 KB,
# 4096 × 8 warps 64 / 32 KB; no spills, and three narrow programs fit an SM.
_FWD_WIDE = {"CHUNK": 8192, "STAGES": 3, "num_warps": 16}
_FWD_NARROW = {"CHUNK": 4096, "STAGES": 3, "num_warps": 8}
_BWD_WIDE = {"CHUNK": 4096, "STAGES": 3, "num_warps": 16}
_BWD_NARROW = {"CHUNK": 4096, "STAGES": 3, "num_warps": 8}
# Lowest finite fp32: the per-lane running max starts here rather than at -inf, so a lane that has only
# seen -inf (masked tail, or -inf scores) computes e^(-inf) = 0, never e^(-inf + inf) = NaN.
_FP32_LOWEST = tl.constexpr(-3.4028234663852886e38)
# The CPU interpreter has no autotuner backend (no driver to time with) and no SM count: it runs one
# fixed config per autotuned kernel, chosen small so that masks, multi-row tiles and chunk loops are all
# exercised; stage 3's looped kernels run 2048-column chunks there so the small cases loop.
_INTERPRETER_SMS = 2
_INTERPRETER_ROWS = 2
_INTERPRETER_CHUNK = 2048


def _num_sms(t: torch.Tensor) -> int:
    return rows_plan.num_sms(t, _INTERPRETER_SMS)


def _warps_for(block: int) -> int:
    return rows_plan.row_warps(block)


# Stage 2's search space, pruned to tiles of 16-32 fp32 values per thread (64 at 16 warps already spills in the
# backward, ptxas -v); past the range, the config closest to 24.
_ONE_BLOCK_ROWS = (1, 2, 4, 8, 16, 32, 64)
_prune_one_block = rows_plan.per_thread_prune(16, 32, target=24)


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _softmax_fwd_row_kernel(
    x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr, PACKED: tl.constexpr = False
):
    # Program i owns row i (stage 1). PACKED (stage 3's forward of 16-bit rows past the one-block budget): x stays
    # in its 16-bit type, two values to a register; e^(x - m) is formed in fp32 for the sum, and the output is
    # e^(x - (m + log s)), so no row-sized fp32 value stays live.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    # -inf is neutral for the max, and exp(-inf - m) = 0 for the sum.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf"))
    if PACKED:
        m = tl.max(x, axis=0).to(tl.float32)
        lse = m + tl.log(tl.sum(tl.exp(x.to(tl.float32) - m), axis=0))
        y = tl.exp(x.to(tl.float32) - lse)
    else:
        x = x.to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_row_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_cols,
    y_row_stride,
    dy_row_stride,
    dx_row_stride,
    BLOCK_N: tl.constexpr,
    PACKED: tl.constexpr = False,
):
    # Program i owns row i (stage 1). PACKED (stage 3's backward of 16-bit rows past the one-block budget): y and
    # dy stay in their 16-bit type, each product y·dy is rounded to it once, and the products are summed in fp32.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0)
    if PACKED:
        dot = tl.sum(y * dy, axis=0, dtype=tl.float32)
    else:
        dot = tl.sum(y.to(tl.float32) * dy.to(tl.float32), axis=0)
    dx = y.to(tl.float32) * (dy.to(tl.float32) - dot)
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_fwd_kernel(
    x_ptr,
    y_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    y_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    EVEN: tl.constexpr = False,
    RELOAD: tl.constexpr = False,
):
    # Stages 2 and 3: program i owns rows [i·ROWS, (i+1)·ROWS) as one [ROWS, BLOCK_N] tile. EVEN: the tiles cover
    # the rows exactly, so nothing is masked (stage 3 sets it: 184 against 190 µs at 4096×32768 bf16 on the H100,
    # ties elsewhere). RELOAD: x is read a second time for the output, from L2, instead of holding e across the
    # sum; stage 3 leaves it off: within 1 % at 4096-16384 columns, 15 % slower at 32768 at 16 warps
    # (results/h100/row_kernels_sweep_softmax.json).
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = None if EVEN else (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    other = None if EVEN else float("-inf")
    x_tile = x_ptr + rows[:, None] * x_row_stride + cols[None, :]
    x = tl.load(x_tile, mask=mask, other=other, eviction_policy="evict_last" if RELOAD else "").to(tl.float32)
    # Padding rows are all -inf and turn into NaN here; their stores are masked off.
    m = tl.max(x, axis=1)
    e = tl.exp(x - m[:, None])
    inv_s = 1.0 / tl.sum(e, axis=1)
    if RELOAD:
        x = tl.load(x_tile, mask=mask, other=other, eviction_policy="evict_first").to(tl.float32)
        e = tl.exp(x - m[:, None])
    y = e * inv_s[:, None]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    n_cols,
    y_row_stride,
    dy_row_stride,
    dx_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    EVEN: tl.constexpr = False,
):
    # EVEN: the tiles cover the rows exactly, so nothing is masked (stage 3's, where they do; see _BWD_WIDE_*).
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = None if EVEN else (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    other = None if EVEN else 0.0
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=other).to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=other).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _online_max_sum(m, s, x):
    """Fold x into per-lane running (max m, sum s of e^(x - m)) with one exp: the larger of x and m
    becomes the max and the other contributes e^(-|x - m|), rescaling s when the max moves."""
    e = tl.exp(-tl.abs(x - m))
    s = tl.where(x > m, s * e + 1.0, s + e)
    return tl.maximum(m, x), s


@triton.jit
def _softmax_fwd_looped_kernel(
    x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride, CHUNK: tl.constexpr, STAGES: tl.constexpr
):
    # Stage 3, long rows: persistent programs take rows pid, pid + P, ...
    offs = tl.arange(0, CHUNK)
    n_chunks = tl.cdiv(n_cols, CHUNK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        m = tl.full((CHUNK,), _FP32_LOWEST, tl.float32)
        s = tl.zeros((CHUNK,), tl.float32)
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            # -inf adds e^(-inf) = 0 and never becomes the max.
            x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            m, s = _online_max_sum(m, s, x)
        # Merge the lanes once per row. A row of all -inf keeps m_row = lowest and s = 0: y = 0·inf = NaN,
        # as in PyTorch.
        m_row = tl.max(m, axis=0)
        inv_s = 1.0 / tl.sum(s * tl.exp(m - m_row), axis=0)
        # Newest chunk first: those lines are the likeliest still in L2.
        for i in tl.range(0, n_chunks, num_stages=STAGES):
            cols = (n_chunks - 1 - i) * CHUNK + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - m_row) * inv_s).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_looped_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    n_cols,
    y_row_stride,
    dy_row_stride,
    dx_row_stride,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    offs = tl.arange(0, CHUNK)
    n_chunks = tl.cdiv(n_cols, CHUNK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        # Per-lane partial dot products, reduced once per row.
        acc = tl.zeros((CHUNK,), tl.float32)
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            mask = cols < n_cols
            y = tl.load(y_ptr + r * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + r * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            acc += y * dy
        dot = tl.sum(acc, axis=0)
        for i in tl.range(0, n_chunks, num_stages=STAGES):
            cols = (n_chunks - 1 - i) * CHUNK + offs
            mask = cols < n_cols
            y = tl.load(y_ptr + r * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + r * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(dx_ptr + r * dx_row_stride + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


_softmax_fwd_tuned = triton.autotune(
    configs=rows_plan.tile_configs(_ONE_BLOCK_ROWS),
    key=["n_cols"],
    prune_configs_by={"early_config_prune": _prune_one_block},
    do_bench=tuning_bench,
)(_softmax_fwd_kernel)
_softmax_bwd_tuned = triton.autotune(
    configs=rows_plan.tile_configs(_ONE_BLOCK_ROWS),
    key=["n_cols"],
    prune_configs_by={"early_config_prune": _prune_one_block},
    do_bench=tuning_bench,
)(_softmax_bwd_kernel)


# --------------------------------------------------------------------------------------------- launchers


def _check_input(x: torch.Tensor, name: str, max_cols: int | None) -> None:
    check_float_tensor("softmax", name, x)
    if x.dim() == 0:
        raise ValueError(f"softmax: {name} is a 0-d tensor; softmax runs over the last dimension of ≥ 1-d input")
    if max_cols is not None and x.shape[-1] > max_cols:
        raise ValueError(
            f"softmax: rows of {x.shape[-1]} columns exceed this stage's one-block limit of {max_cols}; "
            "use softmax_stage3, which loops over column chunks"
        )


def _block_n(n_cols: int) -> int:
    return rows_plan.block_n(n_cols)


def _one_block_plan(n_rows: int, n_cols: int, n_sms: int) -> tuple[tuple[int], dict[str, int]]:
    """Stage 3's whole-row tile for a shape: (grid, launch meta)."""
    return rows_plan.stacked_plan(n_rows, n_cols, n_sms, _MIN_TILE, _VALUES_PER_THREAD, _MIN_PROGRAMS_PER_SM)


def _bwd_one_block_plan(n_rows: int, n_cols: int, n_sms: int) -> tuple[tuple[int], dict[str, int]]:
    """The backward's whole-row tile: the forward's, but 32 values per thread from 8192 columns (8 warps there),
    and unmasked where the tiles cover the rows exactly."""
    block = _block_n(n_cols)
    per_thread = _BWD_WIDE_VALUES_PER_THREAD if block >= _BWD_WIDE_MIN_COLS else _VALUES_PER_THREAD
    grid, meta = rows_plan.stacked_plan(n_rows, n_cols, n_sms, _MIN_TILE, per_thread, _MIN_PROGRAMS_PER_SM)
    return grid, {**meta, "EVEN": rows_plan.even_tiles(n_rows, n_cols, meta)}


@functools.lru_cache(maxsize=256)
def _looped_plan(
    n_rows: int, n_cols: int, row_bytes: int, n_sms: int, forward: bool
) -> tuple[tuple[int], dict[str, int]]:
    """Stage 3's persistent grid and launch meta for long rows; row_bytes counts every row-sized input."""
    progs_per_sm = max(1, min(_MAX_LOOPED_PROGS_PER_SM, _L2_BUDGET_BYTES // (n_sms * row_bytes)))
    if forward:
        meta = dict(_FWD_WIDE if progs_per_sm == 1 else _FWD_NARROW)
    else:
        meta = dict(_BWD_WIDE if progs_per_sm == 1 else _BWD_NARROW)
    if interpreting():
        # One program per interpreted SM: the small cases then walk several rows per program.
        meta["CHUNK"], progs_per_sm = _INTERPRETER_CHUNK, 1
    return (min(n_rows, progs_per_sm * n_sms),), meta


def _fwd(x: torch.Tensor, path: str) -> torch.Tensor:
    x2 = as_rows(x)
    n_rows, n_cols = x2.shape
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    y2 = y if y.dim() == 2 else y.view(n_rows, n_cols)
    args = (x2, y2, n_rows, n_cols, x2.stride(0), n_cols)
    if path == "one_block":
        grid, meta = _one_block_plan(n_rows, n_cols, _num_sms(x))
        _softmax_fwd_kernel[grid](*args, **meta, EVEN=rows_plan.even_tiles(n_rows, n_cols, meta))
    elif path == "looped":
        grid, meta = _looped_plan(n_rows, n_cols, n_cols * x.element_size(), _num_sms(x), forward=True)
        _softmax_fwd_looped_kernel[grid](*args, **meta)
    elif path == "tuned":
        grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)
        launch_tuned(_softmax_fwd_tuned, grid, args, {"ROWS": _INTERPRETER_ROWS}, BLOCK_N=_block_n(n_cols))
    else:  # "row" (stage 1) or "packed"
        block = _block_n(n_cols)
        packed = path == "packed"
        _softmax_fwd_row_kernel[(n_rows,)](
            x2,
            y2,
            n_cols,
            x2.stride(0),
            n_cols,
            BLOCK_N=block,
            PACKED=packed,
            num_warps=_FWD_PACKED_WARPS if packed else _warps_for(block),
        )
    return y


def _bwd(y: torch.Tensor, dy: torch.Tensor, path: str) -> torch.Tensor:
    y2, dy2 = as_rows(y), as_rows(dy)
    n_rows, n_cols = y2.shape
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    if dx.numel() == 0:
        return dx
    dx2 = dx if dx.dim() == 2 else dx.view(n_rows, n_cols)
    args = (y2, dy2, dx2, n_rows, n_cols, y2.stride(0), dy2.stride(0), n_cols)
    if path == "one_block":
        grid, meta = _bwd_one_block_plan(n_rows, n_cols, _num_sms(y))
        _softmax_bwd_kernel[grid](*args, **meta)
    elif path == "looped":
        grid, meta = _looped_plan(n_rows, n_cols, 2 * n_cols * y.element_size(), _num_sms(y), forward=False)
        _softmax_bwd_looped_kernel[grid](*args, **meta)
    elif path == "tuned":
        grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)
        launch_tuned(_softmax_bwd_tuned, grid, args, {"ROWS": _INTERPRETER_ROWS}, BLOCK_N=_block_n(n_cols))
    else:  # "row" (stage 1) or "packed"
        block = _block_n(n_cols)
        packed = path == "packed"
        _softmax_bwd_row_kernel[(n_rows,)](
            y2,
            dy2,
            dx2,
            n_cols,
            y2.stride(0),
            dy2.stride(0),
            n_cols,
            BLOCK_N=block,
            PACKED=packed,
            num_warps=_bwd_packed_warps(block) if packed else _warps_for(block),
        )
    return dx


def _paths(stage: int, n_cols: int, dtype: torch.dtype) -> tuple[str, str]:
    """(forward path, backward path) a stage takes for rows of n_cols columns of dtype; stage 3's 16-bit rows take
    the packed kernels from FWD_PACKED_MIN_COLS / BWD_PACKED_MIN_COLS up to FWD_PACKED_MAX_COLS /
    BWD_PACKED_MAX_COLS."""
    fwd, bwd = rows_plan.paths(stage, n_cols, FWD_ONE_BLOCK_MAX_COLS, BWD_ONE_BLOCK_MAX_COLS)
    if fwd == "looped" and dtype.itemsize == 2 and FWD_PACKED_MIN_COLS <= n_cols <= FWD_PACKED_MAX_COLS:
        fwd = "packed"
    if bwd in ("one_block", "looped") and dtype.itemsize == 2 and BWD_PACKED_MIN_COLS <= n_cols <= BWD_PACKED_MAX_COLS:
        bwd = "packed"
    return fwd, bwd


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, stage: int) -> torch.Tensor:
        fwd_path, ctx.bwd_path = _paths(stage, x.shape[-1], x.dtype)
        y = _fwd(x, fwd_path)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        if dy.dtype != y.dtype:
            dy = dy.to(y.dtype)
        return _bwd(y, dy, ctx.bwd_path), None


def _softmax(x: torch.Tensor, stage: int) -> torch.Tensor:
    _check_input(x, "x", ONE_BLOCK_MAX_COLS if stage < 3 else None)
    if x.requires_grad and torch.is_grad_enabled():
        return _Softmax.apply(x, stage)
    # No graph to record: skip the autograd.Function (~10 µs of host time per call).
    return _fwd(x, _paths(stage, x.shape[-1], x.dtype)[0])


# ---------------------------------------------------------------------------------------- public functions


def softmax_stage1(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim: one program per row, whole row in one block (≤ 32768 columns)."""
    return _softmax(x, 1)


def softmax_stage2(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim: autotuned multi-row tiles and num_warps (≤ 32768 columns)."""
    return _softmax(x, 2)


def softmax_stage3(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, any row length: rule-picked one-block tiles, or the looped kernel."""
    return _softmax(x, 3)


def reference_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


# ------------------------------------------------------------------------------------------------- SPEC


def _make_inputs(dims: Dims, dtype: torch.dtype, device: str) -> tuple[torch.Tensor]:
    shape = (dims["B"], dims["M"], dims["N"]) if "B" in dims else (dims["M"], dims["N"])
    # Spread 3: rows with a clear max and a long tail, as attention scores have.
    return ((3.0 * torch.randn(shape, dtype=torch.float32, device=device)).to(dtype),)


def _dims_of(x: torch.Tensor) -> dict[str, int]:
    if x.dim() == 3:
        return {"B": x.shape[0], "M": x.shape[1], "N": x.shape[2]}
    return {"M": x.numel() // max(1, x.shape[-1]), "N": x.shape[-1]}


def _elements(d: Dims) -> int:
    return d.get("B", 1) * d["M"] * d["N"]


def _past_one_block(n: int) -> str:
    """A bench label's note on the path a 16-bit row of n columns takes past the one-block budget."""
    if n <= FWD_ONE_BLOCK_MAX_COLS:
        return ""
    fwd, bwd = _paths(3, n, torch.bfloat16)
    return f" → {fwd}" if fwd == bwd else f" → {fwd} forward, {bwd} backward"


_BENCH_CASES = (
    *(
        Case(
            f"4096×{n}" + _past_one_block(n),
            {"M": 4096, "N": n},
            small=False,
        )
        for n in (1024, 2048, 4096, 8192, 16384, 32768, 40000, 65536, 131072)
    ),
    Case("16384×8192 (bar shape)", {"M": 16384, "N": 8192}, small=False),
)

SPEC = KernelSpec(
    name="softmax",
    summary="Row softmax over the last dimension (forward and backward).",
    make_inputs=_make_inputs,
    reference=reference_softmax,
    stages={1: softmax_stage1, 2: softmax_stage2, 3: softmax_stage3},
    cases=(
        Case("one row", {"M": 1, "N": 256}),
        Case("non-pow2 tail", {"M": 5, "N": 100}),
        Case("one column", {"M": 7, "N": 1}),
        Case("multi-row tile, odd row count", {"M": 9, "N": 64}),
        Case("3-D input flattened to rows", {"B": 2, "M": 3, "N": 200}),
        Case("wide row, one program per row", {"M": 2, "N": 20000}),
        Case("long row → looped path", {"M": 3, "N": 33000}),
        Case("LLM attention scores", {"M": 4096, "N": 4096}, small=False),
        Case("vocab-sized rows → looped path", {"M": 256, "N": 131072}, small=False),
    ),
    bench_cases=_BENCH_CASES,
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    # The interpreter sweeps these; bf16 runs one case per kernel (tests/reference_kernels), as the engine's
    # patched interpreter computes bf16 as the GPU does (mcp_server/engine/interp/rounding.py, bf16math.py).
    interpreter_dtypes=(torch.float32, torch.float16),
    tolerances={
        torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
        torch.float16: Tolerance(atol=1e-3, rtol=1e-3),
        torch.bfloat16: Tolerance(atol=8e-3, rtol=1e-2),
    },
    bytes_moved=lambda d, dtype: 2 * _elements(d) * (torch.finfo(dtype).bits // 8),
    # max, subtract, exp, sum, scale: ~5 per element.
    flops=lambda d, dtype: 5 * _elements(d),
    dims_of=_dims_of,
    stage_limit=row_limit(ONE_BLOCK_MAX_COLS, 3),
    grad_inputs=(0,),
    bar=(
        "≥ 90 % of copy bandwidth at 16384×8192 bf16; ≥ torch.compile on every shape up to 131072 columns"
        "; ≥ Liger-Kernel forward and forward + backward (where installed)"
    ),
)
get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
