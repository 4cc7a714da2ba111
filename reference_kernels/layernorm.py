"""LayerNorm over the last dimension with weight and bias, forward and backward.

Math: ``y = (x − μ)·r·w + b`` per row, ``μ = mean(x)``, ``r = 1/sqrt(mean((x − μ)²) + eps)``. With
``x̂ = (x − μ)·r`` and ``g = w·dy``: ``dx = r·(g − mean(g·x̂)·x̂ − mean(g))``, ``dw = Σ_rows dy·x̂``,
``db = Σ_rows dy``. The forward stores μ and r (fp32, one each per row) for the backward.

Programs → data (x viewed as ``[M, N]`` rows):
- stage 1: forward, one program per row with the whole row in one block; backward, G = 2 programs per
  SM walking rows, each summing its rows' ``dy·x̂`` and ``dy`` into a private fp32 row of a ``[G, N]``
  partial buffer, then a second kernel adds the G partial rows per column: the standard two-phase
  reduction, deterministic (no atomics).
- stage 2: the same kernels on ``[ROWS, BLOCK_N]`` tiles, ROWS and num_warps autotuned per N; the
  backward's row loop may be software-pipelined (``STAGES``: the next tile's x and dy stream into shared
  memory while this one is reduced).
- stage 3: no autotuner. While rows fit the register budget, stage 2's kernels with tiles picked by
  rule (``_fwd_plan``, ``_bwd_plan``), so every shape gets one fixed config and a launch costs one JIT
  dispatch; the forward drops its masks where the tiles cover the rows exactly (``EVEN``), and from 8192
  columns reads x a second time, from L2, rather than holding it across the reductions (``RELOAD``). Past the
  budget, looped kernels. Forward: persistent programs, per row pass 1 streams chunks merging per-chunk
  mean and M2 (Chan et al.), pass 2 writes y. Backward: a looped per-row kernel
  computes ``mean(g·x̂)`` and ``mean(g)``, then a 2-D grid of (row group, column chunk) programs writes
  dx and partial dw/db for its chunk. Their loops are pipelined the same way.

The backward's two row sums ``Σ g·x̂`` and ``Σ g`` are one ``tl.sum`` over a joined pair, so each row pays
one cross-warp shared-memory round trip instead of two (bar.sync per kernel 14 → 11, ptxas, sm_90).

Bytes: forward reads x, w, b and writes y, μ, r (``2·M·N·size + 2·N·size + 8·M``); eager PyTorch is
one kernel too but ~57 % of copy bandwidth at 16384×8192 bf16 (H200, torch 2.11). Backward reads x, dy, w, μ, r
and writes dx, dw, db (``3·M·N·size`` plus O(N + M)), plus the fp32 partials (``2·G·N·4`` twice, mostly
through L2). The looped paths read their rows twice, the second time mostly from L2 in the forward.

Limits: float32 / float16 / bfloat16 for x; weight and bias ``[N]`` of x's dtype; stages 1 and 2 take
rows up to ``ONE_BLOCK_MAX_COLS`` columns, stage 3 any length.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels import _rows as rows_plan
from reference_kernels._autotune import launch_tuned, tuning_bench
from reference_kernels._common import as_rows, cdiv, check_float_tensor, interpreting
from reference_kernels._spec import Case, Dims, KernelSpec, Tolerance, row_limit

# Whole-row kernels hold x as fp32 in registers: 32768 columns over 16 warps is 64 values per thread,
# where ptxas starts spilling the backward (it also holds dy, w and the dw/db accumulators).
ONE_BLOCK_MAX_COLS = 32768
# Stage 3's switch to the looped kernels. Forward: x plus the normalised row at 16 warps stay unspilled
# to 32768. Backward: five row-sized live values (x, dy, w, dw and db accumulators) fit to 8192 at
# 16 warps (ptxas -v, sm_90); past that the tiled two-kernel path reads x and dy twice but never spills.
FWD_ONE_BLOCK_MAX_COLS = 32768
BWD_ONE_BLOCK_MAX_COLS = 8192
MIN_BLOCK_N = rows_plan.MIN_BLOCK_N
# Stages 1-2 backward programs per SM: two resident programs let one's reductions overlap the other's
# loads, while keeping the partial buffer at 2·132·N·4 B per tensor (4.3 MB at N = 4096, L2-resident).
BWD_PROGS_PER_SM = 2
# Stage 3's forward tile: 16 fp32 values per thread, rows stacked up to 4096 values per program; from 8192
# columns 64 values per thread (4 warps at 8192, ptxas -v sm_90 bf16: 95 registers, five programs per SM) with x
# read a second time from L2 (RELOAD) rather than held across the two reductions. On the H200
# (results/h200/row_kernels_sweep.json, bf16, unmasked tiles): 16384×8192 127.4 µs against 143.2 at 16 warps
# holding x and 131.8 at 4 warps holding it; 4096×8192 34.9 against 38.6; 4096×4096 at 8 warps 19.9 µs, 20.0 at
# 4 with RELOAD. On the H100 (results/h100/row_kernels_sweep_norms.json, without RELOAD) the warp counts were
# within 1.6 % of each other at 8192 columns.
_FWD_VALUES_PER_THREAD = 16
_FWD_WIDE_VALUES_PER_THREAD = 64
_FWD_RELOAD_MIN_COLS = 8192
_FWD_MIN_TILE = 4096
# Stage 3's backward tile: one row, 16 fp32 values per thread for each row-sized value. ptxas -v
# (sm_90, bf16, STAGES 2): 4096 columns at 8 warps 121 registers (two programs per SM fit), 8192 at 16
# warps 121 (one fits), no spills. The persistent grid is as many programs as fit at once, so no second
# wave and the fewest partial rows to reduce.
_BWD_VALUES_PER_THREAD = 16
_BWD_TILE = 1024
# STAGES 3 as in rmsnorm.py, whose backward has the same shape and runs 1.2-1.5× faster with it than with
# STAGES 2 (results/h200/tuning_sweep.txt): two rows in flight behind the one being reduced.
_BWD_STAGES = 3
# Stage 3 stacks short rows only while every SM still gets this many programs.
_MIN_PROGRAMS_PER_SM = 2
# Stage 3's looped kernels (rows past the one-block budgets): 8192-column chunks over 16 warps, two
# pipeline stages, one program per SM so the rows re-read from L2 fit (132 rows × 64 KB at 32768 bf16
# columns = 8.4 MB). The tiled backward's column chunk: 2048 over 8 warps, 8 values per thread for each
# row-sized value.
_LOOPED = {"CHUNK": 8192, "STAGES": 2, "num_warps": 16}
_TILED_BWD = {"CHUNK": 2048, "STAGES": 2, "num_warps": 8}
# The dw/db reduction reads G·N fp32 partials (4.3 MB per tensor at N = 4096) straight from L2:
# [64, 64] tiles (256 B row segments) give N/64 programs, 64 at N = 4096, so more SMs pull from L2.
_REDUCE_BLOCK_P = 64
_REDUCE_BLOCK_C = 64
# The CPU interpreter has no autotuner backend (nothing to time with) and no SM count: fixed small
# configs for stage 2, and chunk sizes for stage 3's looped kernels, chosen so masks, multi-row tiles,
# persistent row loops and chunk loops all run.
_INTERPRETER_SMS = 2
_INTERPRETER_ROWS = 2
_INTERPRETER_CHUNK = 4096
# Interpreted programs cost ~ms each whatever their size: fewer, wider reduction programs there.
_INTERPRETER_REDUCE_BLOCK_C = 1024


def _num_sms(t: torch.Tensor) -> int:
    return rows_plan.num_sms(t, _INTERPRETER_SMS)


def _warps_for(block: int) -> int:
    return rows_plan.row_warps(block)


# Stage 2's search spaces; the forward aims at 16-32 fp32 values per thread, the backward, which holds ~5
# row-sized values per thread, at 8-16 each. The backward's programs loop over row tiles: STAGES 2 prefetches the
# next tile's x and dy into shared memory while this one is reduced (2 × 16 KB at 4096 bf16 columns).
_ONE_BLOCK_ROWS = (1, 2, 4, 8, 16, 32)


# ----------------------------------------------------------------------------------------------- kernels


# Overflow guard of the forward statistics: power-of-two scales (exact) and the fp32 maximum. Values scaled by
# 2^-64 sum without overflow over 2^31 columns (≤ 1.8e19 each); deviations scaled by 2^-96 (≤ 8.6e9 for any
# finite pair) square and sum without overflow too, while the deviations that overflow the plain sum of squares
# (≥ 1.8e19 / sqrt(N)) stay far above fp32's smallest normal once scaled and squared.
_SCALE = tl.constexpr(2.0**-64)
_UNSCALE = tl.constexpr(2.0**64)
_SQ_SCALE = tl.constexpr(2.0**-96)
_FP32_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def _rstd(ss, ss_s, n_cols, eps):
    """1/sqrt(var + eps) from the sum of squared deviations ``ss`` and the same sum over deviations scaled by
    2^-96 (``ss_s``); where ``ss`` overflowed, var ≥ fp32 max / N dwarfs eps and 2^-96/sqrt(ss_s/N) is exact."""
    return tl.where(ss < _FP32_MAX, tl.rsqrt(ss / n_cols + eps), _SQ_SCALE * tl.rsqrt(ss_s / n_cols))


@triton.jit
def _layernorm_fwd_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    mean_ptr,
    rstd_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    y_row_stride,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    EVEN: tl.constexpr = False,
    RELOAD: tl.constexpr = False,
):
    # Program i owns rows [i·ROWS, (i+1)·ROWS), whole rows in one [ROWS, BLOCK_N] tile. EVEN: the tiles cover
    # the rows exactly (n_cols == BLOCK_N, ROWS divides n_rows), so nothing is masked. RELOAD: x is read a second
    # time for the output, from L2 (kept there by the first read's hint), instead of staying live in registers.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    col_ok = cols < n_cols
    mask = None if EVEN else row_ok[:, None] & col_ok[None, :]
    # 0 is neutral for the sum; padded columns are zeroed again after centring.
    x_tile = x_ptr + rows[:, None] * x_row_stride + cols[None, :]
    x = tl.load(x_tile, mask=mask, other=None if EVEN else 0.0, eviction_policy="evict_last" if RELOAD else "").to(
        tl.float32
    )
    # Where a plain sum overflows (rows of values near the fp32 maximum), the statistic comes from the same sum
    # over scaled values (exact powers of two). That second reduction runs only in a tile holding such a row.
    # Overflow shows as ±inf, or as NaN where partial sums overflowed both ways: "not below the maximum" takes both.
    sum_x = tl.sum(x, axis=1)
    mean = sum_x / n_cols
    if tl.sum((tl.abs(sum_x) < _FP32_MAX).to(tl.int32), axis=0) < ROWS:
        mean = tl.where(tl.abs(sum_x) < _FP32_MAX, mean, (tl.sum(x * _SCALE, axis=1) / n_cols) * _UNSCALE)
    xc = x - mean[:, None] if EVEN else tl.where(mask, x - mean[:, None], 0.0)
    ss = tl.sum(xc * xc, axis=1)
    rstd = tl.rsqrt(ss / n_cols + eps)
    if tl.sum((ss < _FP32_MAX).to(tl.int32), axis=0) < ROWS:
        xcs = xc * _SQ_SCALE
        rstd = _rstd(ss, tl.sum(xcs * xcs, axis=1), n_cols, eps)
    w = tl.load(w_ptr + cols, mask=None if EVEN else col_ok, other=None if EVEN else 0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=None if EVEN else col_ok, other=None if EVEN else 0.0).to(tl.float32)
    if RELOAD:
        x = tl.load(x_tile, mask=mask, other=None if EVEN else 0.0, eviction_policy="evict_first").to(tl.float32)
        xc = x - mean[:, None]
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + rows, mean, mask=None if EVEN else row_ok)
    tl.store(rstd_ptr + rows, rstd, mask=None if EVEN else row_ok)


@triton.jit
def _layernorm_fwd_looped_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    mean_ptr,
    rstd_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    y_row_stride,
    eps,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    offs = tl.arange(0, CHUNK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        x_row = x_ptr + r * x_row_stride
        # Pass 1: merge each chunk's (count, mean, M2) into the running one (Chan et al.), which keeps
        # the variance exact where sum(x²) − N·μ² would cancel.
        # Each sum also runs over scaled values, as in the one-block kernel, for rows whose plain sums overflow;
        # m2_s is M2 of the deviations scaled by 2^-96.
        count = tl.zeros((), tl.float32)
        mean = tl.zeros((), tl.float32)
        m2 = tl.zeros((), tl.float32)
        m2_s = tl.zeros((), tl.float32)
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            n_c = tl.minimum(n_cols - start, CHUNK).to(tl.float32)
            sum_x, sum_xs = tl.split(tl.sum(tl.join(x, x * _SCALE), axis=0))
            mean_c = tl.where(tl.abs(sum_x) < _FP32_MAX, sum_x / n_c, (sum_xs / n_c) * _UNSCALE)
            xc = tl.where(mask, x - mean_c, 0.0)
            xcs = xc * _SQ_SCALE
            m2_c, m2_cs = tl.split(tl.sum(tl.join(xc * xc, xcs * xcs), axis=0))
            total = count + n_c
            delta = mean_c - mean
            mean += delta * (n_c / total)
            weight = count * n_c / total
            m2 += m2_c + delta * delta * weight
            m2_s += m2_cs + (delta * _SQ_SCALE) * (delta * _SQ_SCALE) * weight
            count = total
        rstd = _rstd(m2, m2_s, n_cols, eps)
        tl.store(mean_ptr + r, mean)
        tl.store(rstd_ptr + r, rstd)
        # Pass 2: normalise; the row was read a moment ago and is still in L2.
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(y_ptr + r * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_bwd_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    mean_ptr,
    rstd_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    STAGES: tl.constexpr,
):
    # Program p walks row tiles p, p + G, ... and sums dy·x̂ and dy over its rows into partial row p.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((BLOCK_N,), tl.float32)
    db_acc = tl.zeros((BLOCK_N,), tl.float32)
    for tile in tl.range(pid, tl.cdiv(n_rows, ROWS), tl.num_programs(0), num_stages=STAGES):
        rows = tl.cast(tile, tl.int64) * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        # Zeros for padding make x̂, g and dy vanish there, so no sum below sees them.
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        # Both row sums in one reduction over a trailing pair axis: one cross-warp round trip through shared
        # memory, not two.
        sum_gx, sum_g = tl.split(tl.sum(tl.join(g * xhat, g), axis=1))
        c1 = sum_gx / n_cols
        c2 = sum_g / n_cols
        dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += tl.sum(dy * xhat, axis=0)
        db_acc += tl.sum(dy, axis=0)
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=col_ok)
    tl.store(db_part_ptr + pid.to(tl.int64) * n_cols + cols, db_acc, mask=col_ok)


@triton.jit
def _layernorm_bwd_row_stats_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    mean_ptr,
    rstd_ptr,
    c1_ptr,
    c2_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # Long rows, step 1: per row c1 = mean(g·x̂) and c2 = mean(g), streamed over chunks.
    offs = tl.arange(0, CHUNK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        mean = tl.load(mean_ptr + r)
        rstd = tl.load(rstd_ptr + r)
        acc1 = tl.zeros((CHUNK,), tl.float32)
        acc2 = tl.zeros((CHUNK,), tl.float32)
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_ptr + r * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + r * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            g = dy * w
            acc1 += g * tl.where(mask, (x - mean) * rstd, 0.0)
            acc2 += g
        tl.store(c1_ptr + r, tl.sum(acc1, axis=0) / n_cols)
        tl.store(c2_ptr + r, tl.sum(acc2, axis=0) / n_cols)


@triton.jit
def _layernorm_bwd_tiled_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    mean_ptr,
    rstd_ptr,
    c1_ptr,
    c2_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # Long rows, step 2: program (p, j) walks rows p, p + G, ... over column chunk j, writing dx and
    # partial row p of dw/db for that chunk.
    pid_m = tl.program_id(0)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((CHUNK,), tl.float32)
    db_acc = tl.zeros((CHUNK,), tl.float32)
    for row in tl.range(pid_m, n_rows, tl.num_programs(0), num_stages=STAGES):
        r = tl.cast(row, tl.int64)
        mean = tl.load(mean_ptr + r)
        rstd = tl.load(rstd_ptr + r)
        c1 = tl.load(c1_ptr + r)
        c2 = tl.load(c2_ptr + r)
        x = tl.load(x_ptr + r * x_row_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r * dy_row_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
        xhat = tl.where(col_ok, (x - mean) * rstd, 0.0)
        dx = (dy * w - xhat * c1 - c2) * rstd
        tl.store(dx_ptr + r * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=col_ok)
        dw_acc += dy * xhat
        db_acc += dy
    tl.store(dw_part_ptr + pid_m.to(tl.int64) * n_cols + cols, dw_acc, mask=col_ok)
    tl.store(db_part_ptr + pid_m.to(tl.int64) * n_cols + cols, db_acc, mask=col_ok)


@triton.jit
def _layernorm_dwdb_kernel(
    dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, n_parts, n_cols, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr
):
    # Phase two: program j adds the n_parts partial rows of columns [j·BLOCK_C, (j+1)·BLOCK_C), in a fixed
    # order, so dw and db are bitwise reproducible.
    cols = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < n_cols
    dw = tl.zeros((BLOCK_P, BLOCK_C), tl.float32)
    db = tl.zeros((BLOCK_P, BLOCK_C), tl.float32)
    for start in range(0, n_parts, BLOCK_P):
        parts = start + tl.arange(0, BLOCK_P)
        mask = (parts[:, None] < n_parts) & col_ok[None, :]
        offs = parts[:, None].to(tl.int64) * n_cols + cols[None, :]
        dw += tl.load(dw_part_ptr + offs, mask=mask, other=0.0)
        db += tl.load(db_part_ptr + offs, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(dw, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)
    tl.store(db_ptr + cols, tl.sum(db, axis=0).to(db_ptr.dtype.element_ty), mask=col_ok)


_layernorm_fwd_tuned = triton.autotune(
    configs=rows_plan.tile_configs(_ONE_BLOCK_ROWS),
    key=["n_cols"],
    prune_configs_by={"early_config_prune": rows_plan.per_thread_prune(16, 32)},
    do_bench=tuning_bench,
)(_layernorm_fwd_kernel)
_layernorm_bwd_tuned = triton.autotune(
    configs=rows_plan.tile_configs(_ONE_BLOCK_ROWS, stages=(1, 2)),
    key=["n_cols"],
    prune_configs_by={"early_config_prune": rows_plan.per_thread_prune(8, 16)},
    do_bench=tuning_bench,
)(_layernorm_bwd_kernel)


# --------------------------------------------------------------------------------------------- launchers


def _check_inputs(x: Any, weight: Any, bias: Any, max_cols: int | None) -> None:
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        check_float_tensor("layernorm", name, t)
    if x.dim() == 0:
        raise ValueError("layernorm: x is 0-d; LayerNorm normalises the last dimension of a ≥ 1-d tensor")
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t.shape != (n,):
            raise ValueError(
                f"layernorm: {name} has shape {tuple(t.shape)}, expected ({n},) to match x's last dimension"
            )
        if t.dtype != x.dtype or t.device != x.device:
            raise ValueError(
                f"layernorm: {name} is {t.dtype} on {t.device} but x is {x.dtype} on {x.device}; "
                f"use {name}.to(x) so they match"
            )
    if max_cols is not None and n > max_cols:
        raise ValueError(
            f"layernorm: rows of {n} columns exceed this stage's one-block limit of {max_cols}; use "
            "layernorm_stage3, which loops over column chunks"
        )


def _block_n(n_cols: int) -> int:
    return rows_plan.block_n(n_cols)


@functools.lru_cache(maxsize=1024)
def _fwd_plan(n_rows: int, n_cols: int, n_sms: int) -> tuple[tuple[int], dict[str, int]]:
    """Stage 3's forward tile for a shape: (grid, launch meta). Cached: a call costs a dict lookup."""
    wide = _block_n(n_cols) >= _FWD_RELOAD_MIN_COLS
    per_thread = _FWD_WIDE_VALUES_PER_THREAD if wide else _FWD_VALUES_PER_THREAD
    grid, meta = rows_plan.stacked_plan(n_rows, n_cols, n_sms, _FWD_MIN_TILE, per_thread, _MIN_PROGRAMS_PER_SM)
    return grid, {**meta, "EVEN": rows_plan.even_tiles(n_rows, n_cols, meta), "RELOAD": wide}


def _bwd_plan(n_rows: int, n_cols: int, n_sms: int) -> tuple[int, dict[str, int]]:
    """Stage 3's backward: (persistent program count = partial rows, launch meta)."""
    return rows_plan.persistent_plan(n_rows, n_cols, n_sms, _BWD_TILE, _BWD_VALUES_PER_THREAD, _BWD_STAGES)


def _looped_meta(meta: dict[str, int]) -> dict[str, int]:
    return rows_plan.interpreter_chunk(meta, _INTERPRETER_CHUNK)


def _fwd(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float, path: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x2 = as_rows(x)
    w = w if w.stride(0) == 1 else w.contiguous()
    b = b if b.stride(0) == 1 else b.contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    if y.numel() == 0:
        return y, mean, rstd
    y2 = y if y.dim() == 2 else y.view(n_rows, n_cols)
    args = (x2, w, b, y2, mean, rstd, n_rows, n_cols, x2.stride(0), n_cols, eps)
    if path == "one_block":
        grid, meta = _fwd_plan(n_rows, n_cols, _num_sms(x))
        _layernorm_fwd_kernel[grid](*args, **meta)
    elif path == "looped":
        _layernorm_fwd_looped_kernel[(min(n_rows, _num_sms(x)),)](*args, **_looped_meta(_LOOPED))
    elif path == "tuned":
        grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)
        launch_tuned(_layernorm_fwd_tuned, grid, args, {"ROWS": _INTERPRETER_ROWS}, BLOCK_N=_block_n(n_cols))
    else:
        block = _block_n(n_cols)
        _layernorm_fwd_kernel[(n_rows,)](*args, BLOCK_N=block, ROWS=1, num_warps=_warps_for(block))
    return y, mean, rstd


def _bwd(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, path: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x2, dy2 = as_rows(x), as_rows(dy)
    w = w if w.stride(0) == 1 else w.contiguous()
    n_rows, n_cols = x2.shape
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = torch.empty(n_cols, dtype=w.dtype, device=w.device)
    db = torch.empty(n_cols, dtype=w.dtype, device=w.device)
    if dx.numel() == 0:
        return dx, dw.zero_(), db.zero_()
    dx2 = dx if dx.dim() == 2 else dx.view(n_rows, n_cols)
    n_sm = _num_sms(x)
    if path == "looped":
        c1 = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        c2 = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        args = (x2, w, dy2, mean, rstd, c1, c2, n_rows, n_cols, x2.stride(0), dy2.stride(0))
        _layernorm_bwd_row_stats_kernel[(min(n_rows, n_sm),)](*args, **_looped_meta(_LOOPED))
        # Row groups: enough (row group × column chunk) programs for ~4 per SM, never more groups than rows.
        tiled = _looped_meta(_TILED_BWD)
        n_parts = max(1, min(n_rows, 4 * n_sm // cdiv(n_cols, tiled["CHUNK"])))
        dw_part = torch.empty((n_parts, n_cols), dtype=torch.float32, device=x.device)
        db_part = torch.empty((n_parts, n_cols), dtype=torch.float32, device=x.device)
        args = (
            x2, w, dy2, mean, rstd, c1, c2, dx2, dw_part, db_part,
            n_rows, n_cols, x2.stride(0), dy2.stride(0), n_cols,
        )  # fmt: skip
        _layernorm_bwd_tiled_kernel[(n_parts, cdiv(n_cols, tiled["CHUNK"]))](*args, **tiled)
    else:
        if path == "one_block":
            n_parts, meta = _bwd_plan(n_rows, n_cols, n_sm)
        else:
            n_parts, meta = min(n_rows, BWD_PROGS_PER_SM * n_sm), {}
        dw_part = torch.empty((n_parts, n_cols), dtype=torch.float32, device=x.device)
        db_part = torch.empty((n_parts, n_cols), dtype=torch.float32, device=x.device)
        args = (x2, w, dy2, mean, rstd, dx2, dw_part, db_part, n_rows, n_cols, x2.stride(0), dy2.stride(0), n_cols)
        block = _block_n(n_cols)
        if path == "one_block":
            _layernorm_bwd_kernel[(n_parts,)](*args, **meta)
        elif path == "tuned":
            launch_tuned(
                _layernorm_bwd_tuned, (n_parts,), args, {"ROWS": _INTERPRETER_ROWS, "STAGES": 2}, BLOCK_N=block
            )
        else:
            _layernorm_bwd_kernel[(n_parts,)](*args, BLOCK_N=block, ROWS=1, STAGES=1, num_warps=_warps_for(block))
    block_c = _INTERPRETER_REDUCE_BLOCK_C if interpreting() else _REDUCE_BLOCK_C
    _layernorm_dwdb_kernel[(cdiv(n_cols, block_c),)](
        dw_part, db_part, dw, db, dw_part.shape[0], n_cols, BLOCK_P=_REDUCE_BLOCK_P, BLOCK_C=block_c
    )
    return dx, dw, db


def _paths(stage: int, n_cols: int) -> tuple[str, str]:
    """(forward path, backward path) a stage takes for rows of n_cols columns."""
    return rows_plan.paths(stage, n_cols, FWD_ONE_BLOCK_MAX_COLS, BWD_ONE_BLOCK_MAX_COLS)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, stage: int
    ) -> torch.Tensor:
        fwd_path, ctx.bwd_path = _paths(stage, x.shape[-1])
        y, mean, rstd = _fwd(x, weight, bias, float(eps), fwd_path)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = _bwd(dy.to(x.dtype), x, weight, mean, rstd, ctx.bwd_path)
        return dx, dw, db, None, None


def _layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, stage: int) -> torch.Tensor:
    _check_inputs(x, weight, bias, ONE_BLOCK_MAX_COLS if stage < 3 else None)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or bias.requires_grad):
        return _LayerNorm.apply(x, weight, bias, eps, stage)
    # No graph to record: skip the autograd.Function (~10 µs of host time per call).
    return _fwd(x, weight, bias, float(eps), _paths(stage, x.shape[-1])[0])[0]


# ---------------------------------------------------------------------------------------- public functions


def layernorm_stage1(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim: one program per row; two-phase dw/db (≤ 32768 columns)."""
    return _layernorm(x, weight, bias, eps, 1)


def layernorm_stage2(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim: autotuned multi-row tiles and warps (≤ 32768 columns)."""
    return _layernorm(x, weight, bias, eps, 2)


def layernorm_stage3(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim, any row length: rule-picked one-block tiles, or chunk-looped kernels."""
    return _layernorm(x, weight, bias, eps, 3)


def reference_layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


# ------------------------------------------------------------------------------------------------- SPEC


def _make_inputs(dims: Dims, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    m, n = dims["M"], dims["N"]
    # Offset and spread so that centring and scaling both matter; weight near 1 and bias near 0, as trained.
    x = (2.0 * torch.randn(m, n, device=device) + 0.5).to(dtype)
    w = (1.0 + 0.1 * torch.randn(n, device=device)).to(dtype)
    b = (0.1 * torch.randn(n, device=device)).to(dtype)
    return x, w, b


def _bytes(d: Dims, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    return 2 * d["M"] * d["N"] * size + 2 * d["N"] * size + 8 * d["M"]


SPEC = KernelSpec(
    name="layernorm",
    summary="LayerNorm over the last dimension with weight and bias (forward and backward).",
    make_inputs=_make_inputs,
    reference=reference_layernorm,
    stages={1: layernorm_stage1, 2: layernorm_stage2, 3: layernorm_stage3},
    cases=(
        Case("one row", {"M": 1, "N": 256}),
        Case("non-pow2 tail", {"M": 6, "N": 100}),
        Case("one column (x̂ = 0)", {"M": 5, "N": 1}),
        Case("multi-row tiles, more rows than backward programs", {"M": 11, "N": 64}),
        Case("one-block forward, looped backward", {"M": 3, "N": 9000}),
        Case("long row → looped path", {"M": 3, "N": 33000}),
        Case("LLaMA-7B hidden, 4096 tokens", {"M": 4096, "N": 4096}, small=False),
        Case("odd hidden at scale", {"M": 1000, "N": 5000}, small=False),
        Case("long rows on the GPU", {"M": 64, "N": 65536}, small=False),
    ),
    bench_cases=(
        Case("4096×4096", {"M": 4096, "N": 4096}, small=False),
        Case("4096×8192", {"M": 4096, "N": 8192}, small=False),
        Case("8192×4096", {"M": 8192, "N": 4096}, small=False),
        Case("8192×8192", {"M": 8192, "N": 8192}, small=False),
        Case("16384×8192", {"M": 16384, "N": 8192}, small=False),
    ),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    # The interpreter sweeps these; bf16 runs one case per kernel (tests/reference_kernels), as the engine's
    # patched interpreter computes bf16 as the GPU does (mcp_server/engine/interp/rounding.py, bf16math.py).
    interpreter_dtypes=(torch.float32, torch.float16),
    tolerances={
        torch.float32: Tolerance(atol=1e-4, rtol=1e-4),
        torch.float16: Tolerance(atol=1e-2, rtol=1e-2),
        torch.bfloat16: Tolerance(atol=5e-2, rtol=3e-2),
    },
    bytes_moved=_bytes,
    # mean, centre, square, sum, scale, weight, bias: ~8 per element.
    flops=lambda d, dtype: 8 * d["M"] * d["N"],
    dims_of=lambda x, weight, bias, eps=1e-5: {"M": x.numel() // max(1, x.shape[-1]), "N": x.shape[-1]},
    stage_limit=row_limit(ONE_BLOCK_MAX_COLS, 3),
    grad_inputs=(0, 1, 2),
    bar=(
        "forward ≥ 90 % of copy bandwidth; forward + backward ≥ torch.compile"
        "; ≥ Liger-Kernel forward and forward + backward (where installed)"
    ),
)
get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
