"""Cross-entropy loss over large vocabularies, mean reduction with ignore_index, forward and backward.

Math: per row ``ℓ_i = lse(x_i) − x_i[t_i]`` with ``lse(x) = m + log Σ_j e^(x_j − m)``, rows whose target is
``ignore_index`` contributing nothing; ``loss = Σ ℓ_i / n_valid``. Gradient:
``dx_ij = g · (softmax(x_i)_j − [j = t_i]) / n_valid`` on valid rows (g the upstream gradient), 0 on
ignored rows. The softmax is never materialised; the forward keeps one fp32 ``lse`` per row.

Programs → data:
- stage 2: persistent programs walk rows; per row the vocabulary is streamed in CHUNK-wide column
  chunks with an online logsumexp kept *per lane* (running max ``m`` and sum ``s``, ``s ← s·e^(m−m') +
  e^(x−m')`` in a one-exp form), so the chunk loop has no cross-warp reduction and successive chunks'
  loads overlap (``STAGES``: the next chunks stream into shared memory while this one is folded in).
  The backward kernel walks rows the same way, re-reading the logits. Configs autotuned per vocabulary.
- stage 3: rows are split. Forward: program ``(i, b)`` reduces column block b of row i to a partial
  ``(max, Σ e^(x − max))`` pair, with no loop and no dependence on any other block, so every SM holds
  many independent loads in flight (a row-serial program stalls at each row's end, where its reductions
  and the target's load wait on the whole row); a second kernel merges each row's pairs into ``lse_i``
  and ``ℓ_i`` (reading the one logit ``x_i[t_i]``). Backward: program ``(i, b)`` writes block b of row i's
  gradient, an elementwise pass. Block sizes by rule (``_split_plan``), no autotuner.
Both stages end the forward with one program that counts the valid rows and sums the row losses in a
fixed order (bitwise reproducible); the backward reads ``g`` and ``1/n_valid`` on the device, so no
launch waits for the host.

Bytes: forward reads the logits once (``N·V·size``); forward + backward reads them twice and writes the
gradient once (``3·N·V·size``), whatever the upstream gradient. Eager PyTorch writes and re-reads the
``[N, V]`` log-softmax and a ``[N, V]`` one-hot gradient. Peak extra memory: one ``[N, V]`` buffer (the
gradient); eager holds three (log-softmax, its gradient, the logits' gradient).

Limits: logits ``[N, V]`` float32 / float16 / bfloat16 with unit column stride (other layouts are copied
once); targets ``[N]`` int32 / int64 in ``[0, V)`` or ``ignore_index`` (an out-of-range target is not
read; its row's loss is NaN, so the mean is NaN: no host sync to check it); no class weights or label
smoothing. The loss has the logits' dtype, as in PyTorch. The final sum is one program: fine up to a
few hundred thousand rows, a few µs per 10^4.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels._autotune import launch_tuned, tuning_bench
from reference_kernels._common import FLOAT_DTYPES, cdiv, interpreting, next_power_of_2, sm_count
from reference_kernels._spec import Case, Dims, KernelSpec, Tolerance

IGNORE_INDEX = -100
# Lowest finite fp32: the per-lane running max starts here rather than at -inf, so a lane that has only
# seen -inf (masked tail) computes e^(-inf) = 0, never e^(-inf + inf) = NaN.
_FP32_LOWEST = tl.constexpr(-3.4028234663852886e38)
# Stage 3's column block: 4 KB of logits per program (2048 bf16 values over 2 warps, 32 values per thread:
# four 128-bit loads in flight per thread). Best of 4-32 KB × 16-32 values per thread on the H200 on 3 of
# the 4 bench shapes forward and forward + backward, and within 10 % of the best on the 4th
# (benchmarks/tuning_sweep.py, results/h200/tuning_sweep.txt): small programs and many of them keep
# every SM's loads independent.
_BLOCK_BYTES = 4096
_VALUES_PER_THREAD = 32
# Stage 3's merge of the per-block pairs: rows per program such that each holds ~2048 pairs.
_MERGE_PAIRS = 2048
# The final sum over rows: one program, fixed order, 1024-wide blocks.
_SMALL_BLOCK = 1024
# The CPU interpreter has no autotuner backend (nothing to time with) and no SM count: one fixed config,
# small enough that persistent row loops, multi-chunk rows with tails and multi-block rows run on the
# small cases.
_INTERPRETER_SMS = 2
_INTERPRETER_CHUNK = 4096
_INTERPRETER_META = {"CHUNK": _INTERPRETER_CHUNK, "PROGS_PER_SM": 1, "STAGES": 2}


def _num_sms(t: torch.Tensor) -> int:
    return sm_count(t.device.index or 0) if t.is_cuda else _INTERPRETER_SMS


def _configs() -> list[triton.Config]:
    # Stage 2's search: one or two programs per SM, chunks of 16-32 values per thread, with and without
    # software pipelining (STAGES > 1 has the compiler prefetch the next chunk into shared memory).
    return [
        triton.Config({"CHUNK": c, "PROGS_PER_SM": p, "STAGES": s}, num_warps=w)
        for (c, w, p, s) in (
            (4096, 8, 2, 1),
            (8192, 16, 1, 1),
            (4096, 8, 2, 3),
            (8192, 16, 1, 3),
        )
    ]


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _online_max_sum(m, s, x):
    """Fold x into per-lane running (max m, sum s of e^(x - m)) with one exp: the larger of x and m
    becomes the max and the other contributes e^(-|x - m|), rescaling s when the max moves."""
    e = tl.exp(-tl.abs(x - m))
    s = tl.where(x > m, s * e + 1.0, s + e)
    return tl.maximum(m, x), s


@triton.jit
def _row_logsumexp(row_ptr, n_cols, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    """Logsumexp of one row, streamed in CHUNK-wide chunks with per-lane running stats; fp32."""
    offs = tl.arange(0, CHUNK)
    m = tl.full((CHUNK,), _FP32_LOWEST, tl.float32)
    s = tl.zeros((CHUNK,), tl.float32)
    for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
        cols = start + offs
        # -inf adds e^(-inf) = 0 and never becomes the max.
        x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m, s = _online_max_sum(m, s, x)
    m_row = tl.max(m, axis=0)
    return m_row + tl.log(tl.sum(s * tl.exp(m - m_row), axis=0))


@triton.jit
def _softmax_minus_onehot(x, cols, target, lse, scale, valid):
    """scale · (e^(x − lse) − [col = target]) on a valid row, 0 on an ignored one; fp32."""
    p = tl.exp(x - lse)
    return tl.where(valid, tl.where(cols == target, p - 1.0, p) * scale, 0.0)


@triton.jit
def _mean_loss_kernel(row_loss_ptr, targets_ptr, counts_ptr, loss_ptr, n_rows, ignore_index, BLOCK: tl.constexpr):
    # One program, fixed summation order (bitwise reproducible): loss = Σ ℓ_i / n_valid, and
    # counts_ptr = [1 / max(n_valid, 1), n_valid] for the backward. All rows ignored: 0 / 0 = NaN, as
    # PyTorch gives.
    acc = tl.zeros((BLOCK,), tl.float32)
    n_valid = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, n_rows, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < n_rows
        acc += tl.load(row_loss_ptr + offs, mask=ok, other=0.0)
        t = tl.load(targets_ptr + offs, mask=ok, other=ignore_index)
        n_valid += (t != ignore_index).to(tl.int32)
    n = tl.sum(n_valid, axis=0).to(tl.float32)
    tl.store(loss_ptr, (tl.sum(acc, axis=0) / n).to(loss_ptr.dtype.element_ty))
    tl.store(counts_ptr, 1.0 / tl.maximum(n, 1.0))
    tl.store(counts_ptr + 1, n)


@triton.jit
def _cross_entropy_fwd_kernel(
    logits_ptr,
    targets_ptr,
    loss_ptr,
    lse_ptr,
    n_rows,
    n_cols,
    row_stride,
    ignore_index,
    CHUNK: tl.constexpr,
    PROGS_PER_SM: tl.constexpr,  # read by the launch grid only
    STAGES: tl.constexpr,
):
    # Stage 2. Persistent: program p takes rows p, p + P, ... and writes ℓ_i and lse_i (0 for ignored rows).
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        row_ptr = logits_ptr + r * row_stride
        target = tl.load(targets_ptr + r).to(tl.int64)
        if target != ignore_index:
            # A target outside [0, V) is never read: its loss is NaN, visible without a host sync (the
            # assert fires only under TRITON_DEBUG=1).
            in_range = (target >= 0) & (target < n_cols)
            tl.device_assert(in_range, "cross_entropy: target outside [0, V)")
            lse = _row_logsumexp(row_ptr, n_cols, CHUNK, STAGES)
            loss = lse - tl.load(row_ptr + target, mask=in_range, other=float("nan")).to(tl.float32)
        else:
            lse = tl.zeros((), tl.float32)
            loss = tl.zeros((), tl.float32)
        tl.store(loss_ptr + r, loss)
        tl.store(lse_ptr + r, lse)


@triton.jit
def _cross_entropy_bwd_kernel(
    logits_ptr,
    targets_ptr,
    lse_ptr,
    grad_out_ptr,
    counts_ptr,
    grad_ptr,
    n_rows,
    n_cols,
    row_stride,
    grad_row_stride,
    ignore_index,
    CHUNK: tl.constexpr,
    PROGS_PER_SM: tl.constexpr,  # read by the launch grid only
    STAGES: tl.constexpr,
):
    # Stage 2's backward: per row, recompute e^(x − lse) from the stored lse, chunk by chunk; the scale
    # g / n_valid is read on the device.
    scale = tl.load(grad_out_ptr).to(tl.float32) * tl.load(counts_ptr)
    offs = tl.arange(0, CHUNK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        target = tl.load(targets_ptr + r).to(tl.int64)
        valid = target != ignore_index
        lse = tl.load(lse_ptr + r)
        for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
            cols = start + offs
            mask = cols < n_cols
            # An ignored row reads nothing and writes zeros.
            x = tl.load(logits_ptr + r * row_stride + cols, mask=mask & valid, other=0.0).to(tl.float32)
            g = _softmax_minus_onehot(x, cols, target, lse, scale, valid)
            tl.store(grad_ptr + r * grad_row_stride + cols, g.to(grad_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _block_max_sum_kernel(logits_ptr, part_ptr, n_cols, row_stride, n_blocks, BLOCK: tl.constexpr):
    # Stage 3 forward, step 1: program (i, b) (flattened, b fastest, so a row's blocks are neighbours)
    # writes block b of row i as (max, Σ e^(x − max)) to part_ptr[i, b, :].
    pid = tl.program_id(0)
    row = (pid // n_blocks).to(tl.int64)
    cols = (pid % n_blocks) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(logits_ptr + row * row_stride + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    # A block of nothing but -inf (a masked vocabulary range) is the pair (-inf, 0), not e^(-inf + inf).
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(tl.exp(x - m_safe), axis=0)
    out = part_ptr + pid.to(tl.int64) * 2
    tl.store(out, m)
    tl.store(out + 1, s)


@triton.jit
def _merge_rows_kernel(
    part_ptr,
    logits_ptr,
    targets_ptr,
    loss_ptr,
    lse_ptr,
    n_rows,
    n_cols,
    row_stride,
    n_blocks,
    ignore_index,
    ROWS: tl.constexpr,
    NB: tl.constexpr,
):
    # Stage 3 forward, step 2: ROWS rows per program merge their n_blocks (max, sum) pairs into lse_i and
    # write ℓ_i = lse_i − x_i[t_i] (0 and lse 0 on ignored rows).
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    blocks = tl.arange(0, NB)
    pair = (rows[:, None] * n_blocks + blocks[None, :]) * 2
    mask = row_ok[:, None] & (blocks[None, :] < n_blocks)
    # Padding pairs are (-inf, 0): they add nothing and never become the max.
    m = tl.load(part_ptr + pair, mask=mask, other=float("-inf"))
    s = tl.load(part_ptr + pair + 1, mask=mask, other=0.0)
    m_row = tl.max(m, axis=1)
    m_safe = tl.where(m_row == float("-inf"), 0.0, m_row)
    lse = m_safe + tl.log(tl.sum(s * tl.exp(m - m_safe[:, None]), axis=1))
    target = tl.load(targets_ptr + rows, mask=row_ok, other=ignore_index).to(tl.int64)
    valid = row_ok & (target != ignore_index)
    # A target outside [0, V) is never read: its loss is NaN (the assert fires only under TRITON_DEBUG=1).
    in_range = (target >= 0) & (target < n_cols)
    tl.device_assert(in_range | (target == ignore_index), "cross_entropy: target outside [0, V)")
    x_t = tl.load(logits_ptr + rows * row_stride + target, mask=valid & in_range, other=float("nan"))
    tl.store(loss_ptr + rows, tl.where(valid, lse - x_t.to(tl.float32), 0.0), mask=row_ok)
    tl.store(lse_ptr + rows, tl.where(valid, lse, 0.0), mask=row_ok)


@triton.jit
def _block_grad_kernel(
    logits_ptr,
    targets_ptr,
    lse_ptr,
    grad_out_ptr,
    counts_ptr,
    grad_ptr,
    n_cols,
    row_stride,
    grad_row_stride,
    n_blocks,
    ignore_index,
    BLOCK: tl.constexpr,
):
    # Stage 3 backward: program (i, b) writes block b of row i of g · (softmax − onehot) / n_valid.
    pid = tl.program_id(0)
    row = (pid // n_blocks).to(tl.int64)
    cols = (pid % n_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    scale = tl.load(grad_out_ptr).to(tl.float32) * tl.load(counts_ptr)
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    lse = tl.load(lse_ptr + row)
    # An ignored row reads nothing and writes zeros.
    x = tl.load(logits_ptr + row * row_stride + cols, mask=mask & valid, other=0.0).to(tl.float32)
    g = _softmax_minus_onehot(x, cols, target, lse, scale, valid)
    tl.store(grad_ptr + row * grad_row_stride + cols, g.to(grad_ptr.dtype.element_ty), mask=mask)


_cross_entropy_fwd_tuned = triton.autotune(configs=_configs(), key=["n_cols"], do_bench=tuning_bench)(
    _cross_entropy_fwd_kernel
)
_cross_entropy_bwd_tuned = triton.autotune(configs=_configs(), key=["n_cols"], do_bench=tuning_bench)(
    _cross_entropy_bwd_kernel
)


# --------------------------------------------------------------------------------------------- launchers


def _check_inputs(logits: Any, targets: Any, ignore_index: Any) -> None:
    if not isinstance(logits, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise ValueError("cross_entropy: logits and targets must be torch.Tensors")
    if logits.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"cross_entropy: logits have dtype {logits.dtype}; supported are float32, float16 and bfloat16 "
            "(cast with logits.float() first)"
        )
    if targets.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"cross_entropy: targets have dtype {targets.dtype}; pass class indices as int64 or int32 "
            "(probability targets are not supported)"
        )
    for name, t in (("logits", logits), ("targets", targets)):
        if not t.is_cuda and not (interpreting() and t.device.type == "cpu"):
            raise ValueError(
                f"cross_entropy: {name} are on {t.device}; move them to a CUDA device, or set "
                "TRITON_INTERPRET=1 before importing triton to run CPU tensors through the interpreter"
            )
    if logits.dim() != 2 or targets.dim() != 1 or targets.shape[0] != logits.shape[0]:
        raise ValueError(
            f"cross_entropy: expected logits [N, V] and targets [N], got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}; flatten with logits.view(-1, V) and targets.view(-1)"
        )
    if logits.device != targets.device:
        raise ValueError(f"cross_entropy: logits are on {logits.device} and targets on {targets.device}")
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise ValueError(f"cross_entropy: ignore_index must be an int, got {ignore_index!r}")


@functools.lru_cache(maxsize=256)
def _split_plan(n_rows: int, n_cols: int, elem_bytes: int) -> tuple[int, dict[str, int], int, dict[str, int]]:
    """Stage 3's launch for a shape: (column blocks per row, block meta, rows per merge program, merge
    meta). Cached: a call costs a dict lookup."""
    block = min(_BLOCK_BYTES // elem_bytes, next_power_of_2(max(n_cols, 1)))
    if interpreting():
        block = min(block, _INTERPRETER_CHUNK)
    n_blocks = cdiv(n_cols, block)
    warps = max(1, min(16, block // (32 * _VALUES_PER_THREAD)))
    nb = next_power_of_2(n_blocks)
    rows = max(1, min(_MERGE_PAIRS // nb, next_power_of_2(max(n_rows, 1))))
    return n_blocks, {"BLOCK": block, "num_warps": warps}, rows, {"ROWS": rows, "NB": nb, "num_warps": 4}


def _fwd(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, stage: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss in the logits' dtype, lse [N] fp32, counts [1/max(n_valid, 1), n_valid] fp32)."""
    n_rows, n_cols = logits.shape
    device = logits.device
    row_loss = torch.empty(n_rows, dtype=torch.float32, device=device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=device)
    counts = torch.empty(2, dtype=torch.float32, device=device)
    loss = torch.empty((), dtype=logits.dtype, device=device)
    if n_rows and n_cols:
        if stage >= 3:
            n_blocks, block_meta, rows, merge_meta = _split_plan(n_rows, n_cols, logits.element_size())
            parts = torch.empty((n_rows, n_blocks, 2), dtype=torch.float32, device=device)
            _block_max_sum_kernel[(n_rows * n_blocks,)](logits, parts, n_cols, logits.stride(0), n_blocks, **block_meta)
            _merge_rows_kernel[(cdiv(n_rows, rows),)](
                parts, logits, targets, row_loss, lse, n_rows, n_cols, logits.stride(0), n_blocks, ignore_index,
                **merge_meta,
            )  # fmt: skip
        else:
            n_sm = _num_sms(logits)
            grid = lambda meta: (min(n_rows, n_sm * meta["PROGS_PER_SM"]),)
            args = (logits, targets, row_loss, lse, n_rows, n_cols, logits.stride(0), ignore_index)
            launch_tuned(_cross_entropy_fwd_tuned, grid, args, _INTERPRETER_META)
    else:
        row_loss.zero_()
    _mean_loss_kernel[(1,)](row_loss, targets, counts, loss, n_rows, ignore_index, BLOCK=_SMALL_BLOCK)
    return loss, lse, counts


def _bwd(
    logits: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    counts: torch.Tensor,
    grad_out: torch.Tensor,
    ignore_index: int,
    stage: int,
) -> torch.Tensor:
    n_rows, n_cols = logits.shape
    grad = torch.empty_like(logits)
    if grad.numel() == 0:
        return grad
    if stage >= 3:
        n_blocks, block_meta, _, _ = _split_plan(n_rows, n_cols, logits.element_size())
        _block_grad_kernel[(n_rows * n_blocks,)](
            logits, targets, lse, grad_out, counts, grad, n_cols, logits.stride(0), grad.stride(0), n_blocks,
            ignore_index, **block_meta,
        )  # fmt: skip
        return grad
    n_sm = _num_sms(logits)
    grid = lambda meta: (min(n_rows, n_sm * meta["PROGS_PER_SM"]),)
    args = (
        logits, targets, lse, grad_out, counts, grad, n_rows, n_cols, logits.stride(0), grad.stride(0), ignore_index,
    )  # fmt: skip
    launch_tuned(_cross_entropy_bwd_tuned, grid, args, _INTERPRETER_META)
    return grad


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, stage: int) -> torch.Tensor:
        loss, lse, counts = _fwd(logits, targets, ignore_index, stage)
        ctx.ignore_index, ctx.stage = ignore_index, stage
        ctx.save_for_backward(logits, targets, lse, counts)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        logits, targets, lse, counts = ctx.saved_tensors
        return _bwd(logits, targets, lse, counts, grad_out, ctx.ignore_index, ctx.stage), None, None, None


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, stage: int) -> torch.Tensor:
    _check_inputs(logits, targets, ignore_index)
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    if targets.stride(0) != 1:
        targets = targets.contiguous()
    if logits.requires_grad and torch.is_grad_enabled():
        return _CrossEntropy.apply(logits, targets, ignore_index, stage)
    # No graph to record: skip the autograd.Function (~10 µs of host time per call).
    return _fwd(logits, targets, ignore_index, stage)[0]


# ---------------------------------------------------------------------------------------- public functions


def cross_entropy_stage2(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy, each row streamed by one program with an online logsumexp; autotuned."""
    return _cross_entropy(logits, targets, ignore_index, 2)


def cross_entropy_stage3(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy, rows split into column blocks reduced independently and merged; no autotuner."""
    return _cross_entropy(logits, targets, ignore_index, 3)


def reference_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX
) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index)


# ------------------------------------------------------------------------------------------------- SPEC


def _make_inputs(dims: Dims, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    n, v = dims["N"], dims["V"]
    # Spread 2: LM-head logits put a few classes well above the rest.
    logits = (2.0 * torch.randn(n, v, device=device)).to(dtype)
    targets = torch.randint(0, v, (n,), device=device)
    ignored = dims.get("ignored", 0)
    if ignored:
        targets[torch.randperm(n, device=device)[:ignored]] = IGNORE_INDEX
    return logits, targets


def _dims_of(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> dict[str, int]:
    return {"N": logits.shape[0], "V": logits.shape[1], "ignored": int((targets == ignore_index).sum())}


def _bytes(d: Dims, dtype: torch.dtype) -> int:
    # Forward: logits read once, targets read, the scalar loss written. (Forward + backward: add one
    # write of the [N, V] gradient.)
    return d["N"] * d["V"] * (torch.finfo(dtype).bits // 8) + 8 * d["N"] + 4


SPEC = KernelSpec(
    name="cross_entropy",
    summary="Mean cross-entropy over a large vocabulary with ignore_index (forward and backward).",
    make_inputs=_make_inputs,
    reference=reference_cross_entropy,
    stages={2: cross_entropy_stage2, 3: cross_entropy_stage3},
    cases=(
        Case("one row", {"N": 1, "V": 100}),
        Case("non-pow2 vocabulary, one chunk", {"N": 8, "V": 1000}),
        Case("ignore_index rows", {"N": 16, "V": 512, "ignored": 5}),
        Case("all rows ignored (NaN loss, zero gradient)", {"N": 4, "V": 64, "ignored": 4}),
        Case("multi-chunk vocabulary with tail", {"N": 5, "V": 9000, "ignored": 1}),
        Case("LLaMA-2 vocabulary", {"N": 512, "V": 32000, "ignored": 50}, small=False),
        Case("LLaMA-3 vocabulary", {"N": 1024, "V": 128256, "ignored": 100}, small=False),
    ),
    bench_cases=(
        Case("4096×32000", {"N": 4096, "V": 32000}, small=False),
        Case("8192×32000", {"N": 8192, "V": 32000}, small=False),
        Case("4096×128256", {"N": 4096, "V": 128256}, small=False),
        Case("8192×128256", {"N": 8192, "V": 128256}, small=False),
    ),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    # The interpreter sweeps these; bf16 runs one case per kernel (tests/reference_kernels), as the engine's
    # patched interpreter computes bf16 as the GPU does (mcp_server/engine/interp/rounding.py, bf16math.py).
    interpreter_dtypes=(torch.float32, torch.float16),
    tolerances={
        torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
        torch.float16: Tolerance(atol=1e-3, rtol=2e-3),
        torch.bfloat16: Tolerance(atol=1e-2, rtol=1.6e-2),
    },
    bytes_moved=_bytes,
    # max, subtract, exp, sum per logit: ~4 per element.
    flops=lambda d, dtype: 4 * d["N"] * d["V"],
    dims_of=_dims_of,
    grad_inputs=(0,),
    bar=(
        "forward and forward + backward ≥ torch.compile; peak memory ≤ 1/2 of eager at a 128k vocabulary"
        "; ≥ Liger-Kernel forward and forward + backward (where installed)"
    ),
)
get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
