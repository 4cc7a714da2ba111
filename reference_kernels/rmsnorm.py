"""RMSNorm over the last dimension with a weight, forward and backward (as in LLaMA).

Math: ``y = x·r·w`` per row with ``r = 1/sqrt(mean(x²) + eps)``. With ``x̂ = x·r`` and ``g = w·dy``:
``dx = r·(g − mean(g·x̂)·x̂)``, ``dw = Σ_rows dy·x̂``. The forward stores r (fp32, one per row).

Programs → data (x viewed as ``[M, N]`` rows):
- stage 2: forward, one program per ``[ROWS, BLOCK_N]`` tile of whole rows, ROWS and num_warps
  autotuned per N. Backward, two programs per SM walking row tiles, each summing its rows' ``dy·x̂``
  into a private fp32 row of a ``[G, N]`` partial buffer; a second kernel adds the G partial rows per
  column: the standard two-phase reduction, deterministic (no atomics). The backward's row loop may be
  software-pipelined (``STAGES``: the next tile's x and dy stream into shared memory while this one is
  reduced).
- stage 3: no autotuner. While rows fit the register budget, stage 2's kernels with tiles picked by
  rule (``_fwd_plan``, ``_bwd_plan``), so every shape gets one fixed config and a launch costs one JIT
  dispatch; the forward drops its masks where the tiles cover the rows exactly (``EVEN``) and from 8192
  columns reads x a second time, from L2, rather than holding it across the reduction (``RELOAD``). Past
  the budget, looped kernels. Forward: persistent programs, per row pass 1 streams chunks summing x²,
  pass 2 writes y. Backward: a looped per-row kernel computes ``mean(g·x̂)``, then a 2-D grid
  of (row group, column chunk) programs writes dx and partial dw. Their loops are pipelined the same way.

Bytes: forward reads x and w and writes y and r (``2·M·N·size + N·size + 4·M``); composed eager
PyTorch (pow, mean, rsqrt, two multiplies) reaches ~11 % of copy bandwidth at 16384×8192 bf16
(H200, torch 2.11). Backward reads x, dy, w, r and writes dx and dw (``3·M·N·size`` plus O(N + M)), plus the
fp32 partials (``G·N·4`` twice, mostly through L2). The looped paths, and stage 3's forward from 8192
columns, read rows twice (the second time mostly from L2).

Limits: float32 / float16 / bfloat16 for x; weight ``[N]`` of x's dtype; stage 2 takes rows up to
``ONE_BLOCK_MAX_COLS`` columns, stage 3 any length.
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
# the most ptxas keeps unspilled in the forward (sm_90). Stage 2 stops there.
ONE_BLOCK_MAX_COLS = 32768
# Stage 3's switch to the looped kernels. The backward keeps four row-sized values (x, dy, w, the dw
# accumulator) live per thread; like LayerNorm's it stays unspilled to 8192 columns at 16 warps.
FWD_ONE_BLOCK_MAX_COLS = 32768
BWD_ONE_BLOCK_MAX_COLS = 8192
MIN_BLOCK_N = rows_plan.MIN_BLOCK_N
# Stage 2 backward programs per SM: two resident programs overlap one's reductions with the other's
# loads; the partial buffer stays 2·132·N·4 B (4.3 MB at N = 4096, L2-resident).
BWD_PROGS_PER_SM = 2
# Stage 3's forward tile: 16 fp32 values per thread, rows stacked up to 4096 values per program; from 8192
# columns x is read twice (the second time from L2) instead of held across the reduction, the choice
# torch.compile makes there too. On the H100 (results/h100/row_kernels_sweep_norms.json, bf16, unmasked tiles):
# 4096×4096 at 8 warps 21.8 µs against 22.7 at 4; 4096×8192 at 16 warps with the second read 43.6 µs against
# 44.4 without it and 43.8 at 8 warps; 16384×8192 175.8 against 177.3 and 176.9.
_FWD_VALUES_PER_THREAD = 16
_FWD_MIN_TILE = 4096
_FWD_RELOAD_MIN_COLS = 8192
# Stage 3's backward tile: one row, 16 fp32 values per thread for each row-sized value. ptxas -v (sm_90,
# bf16, STAGES 2): 4096 columns at 8 warps 122 registers (two programs per SM fit), 8192 at 16 warps 122
# (one fits; two would need ≤ 64), no spills. The persistent grid is as many programs as fit at once.
_BWD_VALUES_PER_THREAD = 16
_BWD_TILE = 1024
# STAGES 3 keeps two rows of x and dy streaming into shared memory while one is reduced: backward alone
# 0.204 ms against 0.298 with STAGES 2 at 16384×8192 bf16, 0.112 against 0.137 at 16384×4096
# (benchmarks/tuning_sweep.py on the H200, results/h200/tuning_sweep.txt); STAGES 4 gained nothing more.
_BWD_STAGES = 3
# Stage 3 stacks short rows only while every SM still gets this many programs.
_MIN_PROGRAMS_PER_SM = 2
# Stage 3's looped kernels (rows past the one-block budgets): 8192-column chunks over 16 warps, two
# pipeline stages, one program per SM so the rows re-read from L2 fit. The tiled backward's column
# chunk: 2048 over 8 warps.
_LOOPED = {"CHUNK": 8192, "STAGES": 2, "num_warps": 16}
_TILED_BWD = {"CHUNK": 2048, "STAGES": 2, "num_warps": 8}
# The dw reduction reads G·N fp32 partials (4.3 MB per tensor at N = 4096) straight from L2:
# [64, 64] tiles (256 B row segments) give N/64 programs, 64 at N = 4096, so more SMs pull from L2.
_REDUCE_BLOCK_P = 64
_REDUCE_BLOCK_C = 64
# The CPU interpreter has no autotuner backend (nothing to time with) and no SM count: fixed small
# configs so masks, multi-row tiles, persistent row loops and chunk loops all run. Interpreted programs
# cost milliseconds each whatever their size, so its reduction blocks are wider.
_INTERPRETER_SMS = 2
_INTERPRETER_ROWS = 2
_INTERPRETER_CHUNK = 4096
_INTERPRETER_REDUCE_BLOCK_C = 1024


def _num_sms(t: torch.Tensor) -> int:
    return rows_plan.num_sms(t, _INTERPRETER_SMS)


# Stage 2's search spaces; the forward aims at 16-32 fp32 values per thread, the backward, which holds ~4
# row-sized values per thread, at 8-16 each. The backward's programs loop over row tiles: STAGES 2 prefetches the
# next tile's x and dy into shared memory while this one is reduced (2 × 16 KB at 4096 bf16 columns).
_ONE_BLOCK_ROWS = (1, 2, 4, 8, 16, 32)


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
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
    # time for the scaling, from L2 (kept there by the first read's hint), instead of staying live in registers
    # across the reduction.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    col_ok = cols < n_cols
    mask = None if EVEN else row_ok[:, None] & col_ok[None, :]
    x_tile = x_ptr + rows[:, None] * x_row_stride + cols[None, :]
    # 0 is neutral for the sum of squares.
    x = tl.load(x_tile, mask=mask, other=None if EVEN else 0.0, eviction_policy="evict_last" if RELOAD else "").to(
        tl.float32
    )
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    if RELOAD:
        x = tl.load(x_tile, mask=mask, other=None if EVEN else 0.0, eviction_policy="evict_first").to(tl.float32)
    w = tl.load(w_ptr + cols, mask=None if EVEN else col_ok, other=None if EVEN else 0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + rows, rstd, mask=None if EVEN else row_ok)


@triton.jit
def _rmsnorm_fwd_looped_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
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
        # Pass 1: per-lane partial sums of x², reduced once per row.
        acc = tl.zeros((CHUNK,), tl.float32)
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
        tl.store(rstd_ptr + r, rstd)
        # Pass 2: scale; the row was read a moment ago and is still in L2.
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + r * y_row_stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_bwd_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    rstd_ptr,
    dx_ptr,
    dw_part_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    STAGES: tl.constexpr,
):
    # Program p walks row tiles p, p + G, ... and sums dy·x̂ over its rows into partial row p.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((BLOCK_N,), tl.float32)
    for tile in tl.range(pid, tl.cdiv(n_rows, ROWS), tl.num_programs(0), num_stages=STAGES):
        rows = tl.cast(tile, tl.int64) * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        # Zeros for padding make x̂ and g vanish there, so no sum below sees them.
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        xhat = x * rstd[:, None]
        g = dy * w[None, :]
        c1 = tl.sum(g * xhat, axis=1) / n_cols
        dx = (g - xhat * c1[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += tl.sum(dy * xhat, axis=0)
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=col_ok)


@triton.jit
def _rmsnorm_bwd_row_stats_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    rstd_ptr,
    c1_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # Long rows, step 1: per row c1 = mean(g·x̂), streamed over chunks.
    offs = tl.arange(0, CHUNK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        rstd = tl.load(rstd_ptr + r)
        acc = tl.zeros((CHUNK,), tl.float32)
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_ptr + r * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + r * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            acc += dy * w * x
        tl.store(c1_ptr + r, tl.sum(acc, axis=0) * rstd / n_cols)


@triton.jit
def _rmsnorm_bwd_tiled_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    rstd_ptr,
    c1_ptr,
    dx_ptr,
    dw_part_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # Long rows, step 2: program (p, j) walks rows p, p + G, ... over column chunk j, writing dx and
    # partial row p of dw for that chunk.
    pid_m = tl.program_id(0)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((CHUNK,), tl.float32)
    for row in tl.range(pid_m, n_rows, tl.num_programs(0), num_stages=STAGES):
        r = tl.cast(row, tl.int64)
        rstd = tl.load(rstd_ptr + r)
        c1 = tl.load(c1_ptr + r)
        x = tl.load(x_ptr + r * x_row_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + r * dy_row_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
        xhat = x * rstd
        dx = (dy * w - xhat * c1) * rstd
        tl.store(dx_ptr + r * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=col_ok)
        dw_acc += dy * xhat
    tl.store(dw_part_ptr + pid_m.to(tl.int64) * n_cols + cols, dw_acc, mask=col_ok)


@triton.jit
def _rmsnorm_dw_kernel(dw_part_ptr, dw_ptr, n_parts, n_cols, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    # Phase two: program j adds the n_parts partial rows of columns [j·BLOCK_C, (j+1)·BLOCK_C) in a fixed
    # order, so dw is bitwise reproducible.
    cols = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < n_cols
    acc = tl.zeros((BLOCK_P, BLOCK_C), tl.float32)
    for start in range(0, n_parts, BLOCK_P):
        parts = start + tl.arange(0, BLOCK_P)
        mask = (parts[:, None] < n_parts) & col_ok[None, :]
        acc += tl.load(dw_part_ptr + parts[:, None].to(tl.int64) * n_cols + cols[None, :], mask=mask, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)


_rmsnorm_fwd_tuned = triton.autotune(
    configs=rows_plan.tile_configs(_ONE_BLOCK_ROWS),
    key=["n_cols"],
    prune_configs_by={"early_config_prune": rows_plan.per_thread_prune(16, 32)},
    do_bench=tuning_bench,
)(_rmsnorm_fwd_kernel)
_rmsnorm_bwd_tuned = triton.autotune(
    configs=rows_plan.tile_configs(_ONE_BLOCK_ROWS, stages=(1, 2)),
    key=["n_cols"],
    prune_configs_by={"early_config_prune": rows_plan.per_thread_prune(8, 16)},
    do_bench=tuning_bench,
)(_rmsnorm_bwd_kernel)


# --------------------------------------------------------------------------------------------- launchers


def _check_inputs(x: Any, weight: Any, max_cols: int | None) -> None:
    for name, t in (("x", x), ("weight", weight)):
        check_float_tensor("rmsnorm", name, t)
    if x.dim() == 0:
        raise ValueError("rmsnorm: x is 0-d; RMSNorm normalises the last dimension of a ≥ 1-d tensor")
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(
            f"rmsnorm: weight has shape {tuple(weight.shape)}, expected ({n},) to match x's last dimension"
        )
    if weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(
            f"rmsnorm: weight is {weight.dtype} on {weight.device} but x is {x.dtype} on {x.device}; "
            "use weight.to(x) so they match"
        )
    if max_cols is not None and n > max_cols:
        raise ValueError(
            f"rmsnorm: rows of {n} columns exceed this stage's one-block limit of {max_cols}; use "
            "rmsnorm_stage3, which loops over column chunks"
        )


def _block_n(n_cols: int) -> int:
    return rows_plan.block_n(n_cols)


@functools.lru_cache(maxsize=1024)
def _fwd_plan(n_rows: int, n_cols: int, n_sms: int) -> tuple[tuple[int], dict[str, int]]:
    """Stage 3's forward tile for a shape: (grid, launch meta). Cached: a call costs a dict lookup."""
    grid, meta = rows_plan.stacked_plan(
        n_rows, n_cols, n_sms, _FWD_MIN_TILE, _FWD_VALUES_PER_THREAD, _MIN_PROGRAMS_PER_SM
    )
    even = rows_plan.even_tiles(n_rows, n_cols, meta)
    return grid, {**meta, "EVEN": even, "RELOAD": meta["BLOCK_N"] >= _FWD_RELOAD_MIN_COLS}


def _bwd_plan(n_rows: int, n_cols: int, n_sms: int) -> tuple[int, dict[str, int]]:
    """Stage 3's backward: (persistent program count = partial rows, launch meta)."""
    return rows_plan.persistent_plan(n_rows, n_cols, n_sms, _BWD_TILE, _BWD_VALUES_PER_THREAD, _BWD_STAGES)


def _looped_meta(meta: dict[str, int]) -> dict[str, int]:
    return rows_plan.interpreter_chunk(meta, _INTERPRETER_CHUNK)


def _fwd(x: torch.Tensor, w: torch.Tensor, eps: float, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    x2 = as_rows(x)
    w = w if w.stride(0) == 1 else w.contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    if y.numel() == 0:
        return y, rstd
    y2 = y if y.dim() == 2 else y.view(n_rows, n_cols)
    args = (x2, w, y2, rstd, n_rows, n_cols, x2.stride(0), n_cols, eps)
    if path == "one_block":
        grid, meta = _fwd_plan(n_rows, n_cols, _num_sms(x))
        _rmsnorm_fwd_kernel[grid](*args, **meta)
    elif path == "looped":
        _rmsnorm_fwd_looped_kernel[(min(n_rows, _num_sms(x)),)](*args, **_looped_meta(_LOOPED))
    else:
        grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)
        launch_tuned(_rmsnorm_fwd_tuned, grid, args, {"ROWS": _INTERPRETER_ROWS}, BLOCK_N=_block_n(n_cols))
    return y, rstd


def _bwd(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor, path: str
) -> tuple[torch.Tensor, torch.Tensor]:
    x2, dy2 = as_rows(x), as_rows(dy)
    w = w if w.stride(0) == 1 else w.contiguous()
    n_rows, n_cols = x2.shape
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = torch.empty(n_cols, dtype=w.dtype, device=w.device)
    if dx.numel() == 0:
        return dx, dw.zero_()
    dx2 = dx if dx.dim() == 2 else dx.view(n_rows, n_cols)
    n_sm = _num_sms(x)
    if path == "looped":
        c1 = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        args = (x2, w, dy2, rstd, c1, n_rows, n_cols, x2.stride(0), dy2.stride(0))
        _rmsnorm_bwd_row_stats_kernel[(min(n_rows, n_sm),)](*args, **_looped_meta(_LOOPED))
        # Row groups: enough (row group × column chunk) programs for ~4 per SM, never more groups than rows.
        tiled = _looped_meta(_TILED_BWD)
        n_parts = max(1, min(n_rows, 4 * n_sm // cdiv(n_cols, tiled["CHUNK"])))
        dw_part = torch.empty((n_parts, n_cols), dtype=torch.float32, device=x.device)
        args = (x2, w, dy2, rstd, c1, dx2, dw_part, n_rows, n_cols, x2.stride(0), dy2.stride(0), n_cols)
        _rmsnorm_bwd_tiled_kernel[(n_parts, cdiv(n_cols, tiled["CHUNK"]))](*args, **tiled)
    else:
        if path == "one_block":
            n_parts, meta = _bwd_plan(n_rows, n_cols, n_sm)
        else:
            n_parts, meta = min(n_rows, BWD_PROGS_PER_SM * n_sm), {}
        dw_part = torch.empty((n_parts, n_cols), dtype=torch.float32, device=x.device)
        args = (x2, w, dy2, rstd, dx2, dw_part, n_rows, n_cols, x2.stride(0), dy2.stride(0), n_cols)
        if path == "one_block":
            _rmsnorm_bwd_kernel[(n_parts,)](*args, **meta)
        else:
            interpreter_meta = {"ROWS": _INTERPRETER_ROWS, "STAGES": 2}
            launch_tuned(_rmsnorm_bwd_tuned, (n_parts,), args, interpreter_meta, BLOCK_N=_block_n(n_cols))
    block_c = _INTERPRETER_REDUCE_BLOCK_C if interpreting() else _REDUCE_BLOCK_C
    _rmsnorm_dw_kernel[(cdiv(n_cols, block_c),)](
        dw_part, dw, dw_part.shape[0], n_cols, BLOCK_P=_REDUCE_BLOCK_P, BLOCK_C=block_c
    )
    return dx, dw


def _paths(stage: int, n_cols: int) -> tuple[str, str]:
    """(forward path, backward path) a stage takes for rows of n_cols columns."""
    return rows_plan.paths(stage, n_cols, FWD_ONE_BLOCK_MAX_COLS, BWD_ONE_BLOCK_MAX_COLS)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, stage: int) -> torch.Tensor:
        fwd_path, ctx.bwd_path = _paths(stage, x.shape[-1])
        y, rstd = _fwd(x, weight, float(eps), fwd_path)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, rstd = ctx.saved_tensors
        dx, dw = _bwd(dy.to(x.dtype), x, weight, rstd, ctx.bwd_path)
        return dx, dw, None, None


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, stage: int) -> torch.Tensor:
    _check_inputs(x, weight, ONE_BLOCK_MAX_COLS if stage < 3 else None)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RMSNorm.apply(x, weight, eps, stage)
    # No graph to record: skip the autograd.Function (~10 µs of host time per call).
    return _fwd(x, weight, float(eps), _paths(stage, x.shape[-1])[0])[0]


# ---------------------------------------------------------------------------------------- public functions


def rmsnorm_stage2(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: autotuned multi-row tiles; two-phase dw (≤ 32768 columns)."""
    return _rmsnorm(x, weight, eps, 2)


def rmsnorm_stage3(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim, any row length: rule-picked one-block tiles, or chunk-looped kernels."""
    return _rmsnorm(x, weight, eps, 3)


def reference_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


# ------------------------------------------------------------------------------------------------- SPEC


def _make_inputs(dims: Dims, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    m, n = dims["M"], dims["N"]
    x = (2.0 * torch.randn(m, n, device=device)).to(dtype)
    # Weight near 1, as trained.
    w = (1.0 + 0.1 * torch.randn(n, device=device)).to(dtype)
    return x, w


def _bytes(d: Dims, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    return 2 * d["M"] * d["N"] * size + d["N"] * size + 4 * d["M"]


SPEC = KernelSpec(
    name="rmsnorm",
    summary="RMSNorm over the last dimension with a weight (forward and backward).",
    make_inputs=_make_inputs,
    reference=reference_rmsnorm,
    stages={2: rmsnorm_stage2, 3: rmsnorm_stage3},
    cases=(
        Case("one row", {"M": 1, "N": 256}),
        Case("non-pow2 tail", {"M": 6, "N": 100}),
        Case("one column", {"M": 5, "N": 1}),
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
    # square, sum, scale, weight: ~4 per element.
    flops=lambda d, dtype: 4 * d["M"] * d["N"],
    dims_of=lambda x, weight, eps=1e-6: {"M": x.numel() // max(1, x.shape[-1]), "N": x.shape[-1]},
    stage_limit=row_limit(ONE_BLOCK_MAX_COLS, 3),
    grad_inputs=(0, 1),
    bar=(
        "forward ≥ 90 % of copy bandwidth; forward + backward ≥ torch.compile"
        "; ≥ Liger-Kernel forward and forward + backward (where installed)"
    ),
)
get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
