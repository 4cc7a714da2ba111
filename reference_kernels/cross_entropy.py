"""Cross-entropy loss over large vocabularies, mean reduction with ignore_index, forward and backward.

Math: per row ``ℓ_i = lse(x_i) − x_i[t_i]`` with ``lse(x) = m + log Σ_j e^(x_j − m)``, rows whose target is
``ignore_index`` contributing nothing; ``loss = Σ ℓ_i / n_valid``. Gradient:
``dx_ij = g · (softmax(x_i)_j − [j = t_i]) / n_valid`` on valid rows (g the upstream gradient), 0 on
ignored rows. The softmax is never materialised.

Programs → data: persistent programs walk rows; per row the vocabulary is streamed in CHUNK-wide column
chunks with an online logsumexp kept *per lane* (running max ``m`` and sum ``s``, ``s ← s·e^(m−m') +
e^(x−m')`` in a one-exp form), so the chunk loop has no cross-warp reduction and the loads of successive
chunks overlap (``STAGES``: the next chunks stream into shared memory while this one is folded in); the
lanes are merged once per row. Three launches per forward: a one-program kernel counts the valid rows
(the gradient's scale), the row kernel, and a one-program kernel that sums the row losses in a fixed
order and divides.
- stage 2: the forward kernel stores ``ℓ_i`` and ``lse_i`` (fp32); the backward kernel re-reads the
  logits and writes ``dx = g·(e^(x − lse) − onehot)/n_valid``. Configs autotuned per vocabulary size.
- stage 3: no autotuner: programs per SM from an L2 budget (``_plan``). When the logits need a gradient,
  the forward kernel takes a second pass over each row right after the first, newest chunk first so the
  reads hit the L2 lines pass 1 touched last, and writes ``(softmax − onehot)/n_valid`` into a buffer
  (Liger-Kernel's approach); the backward hands that buffer over, scaled in place by g on the device
  (a no-op kernel when g = 1, so no host sync). The logits are then read from HBM once for forward and
  backward together.

Bytes: forward reads the logits once (``N·V·size``); forward + backward at least reads them once and
writes the gradient once (``2·N·V·size``), which stage 3 does while its rows in flight fit in L2;
stage 2 reads them twice. Eager PyTorch writes and re-reads the ``[N, V]`` log-softmax and a ``[N, V]``
one-hot gradient. Peak extra memory: stage 3 holds one ``[N, V]`` buffer (the gradient, handed to
autograd without a copy); eager holds three (log-softmax, its gradient, the logits' gradient).

Limits: logits ``[N, V]`` float32 / float16 / bfloat16 with unit column stride (other layouts are copied
once); targets ``[N]`` int32 / int64 in ``[0, V)`` or ``ignore_index`` (an out-of-range target is not
read; its row's loss is NaN, so the mean is NaN: no host sync to check it); no class weights or label
smoothing. The loss has the logits' dtype, as in PyTorch. Stage 3's backward can run once per forward
(its gradient buffer is handed over, not kept). Rows are spread over programs, so a handful of very
long rows uses only a handful of SMs.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels._autotune import launch_tuned, tuning_bench
from reference_kernels._common import FLOAT_DTYPES, cdiv, interpreting, sm_count
from reference_kernels._spec import Case, Dims, KernelSpec, Tolerance

IGNORE_INDEX = -100
# Lowest finite fp32: the per-lane running max starts here rather than at -inf, so a lane that has only
# seen -inf (masked tail) computes e^(-inf) = 0, never e^(-inf + inf) = NaN.
_FP32_LOWEST = tl.constexpr(-3.4028234663852886e38)
# Stage 3: rows in flight across the GPU may hold this many bytes, so that pass 2 re-reads them from
# L2 (half the 50 MB L2 of an H100/H200: the gradient being written streams through the other half).
# At a 128256 bf16 vocabulary (250 KB rows) that is one program per SM; at 32000 (62.5 KB), two.
_L2_BUDGET_BYTES = 24 * 2**20
# Stage 3's programs per SM without the gradient pass (nothing to keep in L2): three 8-warp programs
# (80 registers, 16 KB of pipeline buffers each, ptxas -v) keep loads in flight while each folds chunks.
_MAX_PROGS_PER_SM = 3
# One program per SM: 8192-column chunks over 16 warps; several: 4096 over 8 warps. 16 values per
# thread per chunk either way; three stages keep two chunks in flight (86 / 80 registers, no spills).
_WIDE = {"CHUNK": 8192, "STAGES": 3, "num_warps": 16}
_NARROW = {"CHUNK": 4096, "STAGES": 3, "num_warps": 8}
# Host-side helpers (valid-row count, mean of the row losses, in-place scale by g): one program sums
# targets / losses in fixed-order 1024-wide blocks; the scale runs a persistent grid of 4 programs per
# SM over 4096-element blocks, 8 warps (16 elements per thread).
_SMALL_BLOCK = 1024
_SCALE_BLOCK = 4096
_SCALE_PROGS_PER_SM = 4
# The CPU interpreter has no autotuner backend (nothing to time with) and no SM count: one fixed config,
# small enough that persistent row loops and multi-chunk rows with tails run on the small cases.
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
def _write_row_grad(row_ptr, grad_row_ptr, n_cols, target, lse, scale, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    """grad = scale · (e^(x − lse) − [col = target]) over one row, newest chunk first (right after
    _row_logsumexp those lines are the likeliest still in L2)."""
    offs = tl.arange(0, CHUNK)
    n_chunks = tl.cdiv(n_cols, CHUNK)
    for i in tl.range(0, n_chunks, num_stages=STAGES):
        cols = (n_chunks - 1 - i) * CHUNK + offs
        mask = cols < n_cols
        x = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)
        g = tl.where(cols == target, p - 1.0, p) * scale
        tl.store(grad_row_ptr + cols, g.to(grad_row_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _zero_row(grad_row_ptr, n_cols, CHUNK: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        tl.store(
            grad_row_ptr + cols,
            tl.zeros((CHUNK,), tl.float32).to(grad_row_ptr.dtype.element_ty),
            mask=cols < n_cols,
        )


@triton.jit
def _count_valid_kernel(targets_ptr, counts_ptr, n_rows, ignore_index, BLOCK: tl.constexpr):
    # One program: counts_ptr[0] = 1 / max(n_valid, 1) (the gradient's scale), counts_ptr[1] = n_valid.
    acc = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, n_rows, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        t = tl.load(targets_ptr + offs, mask=offs < n_rows, other=ignore_index)
        acc += (t != ignore_index).to(tl.int32)
    n_valid = tl.sum(acc, axis=0).to(tl.float32)
    tl.store(counts_ptr, 1.0 / tl.maximum(n_valid, 1.0))
    tl.store(counts_ptr + 1, n_valid)


@triton.jit
def _mean_loss_kernel(row_loss_ptr, counts_ptr, loss_ptr, n_rows, BLOCK: tl.constexpr):
    # One program, fixed summation order (bitwise reproducible). All rows ignored: 0 / 0 = NaN, as
    # PyTorch gives.
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_rows, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(row_loss_ptr + offs, mask=offs < n_rows, other=0.0)
    loss = tl.sum(acc, axis=0) / tl.load(counts_ptr + 1)
    tl.store(loss_ptr, loss.to(loss_ptr.dtype.element_ty))


@triton.jit
def _cross_entropy_fwd_kernel(
    logits_ptr,
    targets_ptr,
    loss_ptr,
    lse_ptr,
    grad_ptr,
    counts_ptr,
    n_rows,
    n_cols,
    row_stride,
    grad_row_stride,
    ignore_index,
    WRITE_GRAD: tl.constexpr,
    CHUNK: tl.constexpr,
    PROGS_PER_SM: tl.constexpr,  # read by the launch grid only
    STAGES: tl.constexpr,
):
    # Persistent: program p takes rows p, p + P, ... and writes ℓ_i and lse_i (0 for ignored rows); with
    # WRITE_GRAD it also writes row i of (softmax − onehot) / n_valid right after its lse.
    if WRITE_GRAD:
        inv_n_valid = tl.load(counts_ptr)
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
            if WRITE_GRAD:
                _write_row_grad(
                    row_ptr, grad_ptr + r * grad_row_stride, n_cols, target, lse, inv_n_valid, CHUNK, STAGES
                )
        else:
            lse = tl.zeros((), tl.float32)
            loss = tl.zeros((), tl.float32)
            if WRITE_GRAD:
                _zero_row(grad_ptr + r * grad_row_stride, n_cols, CHUNK)
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
    # Stage 2's backward: recompute e^(x − lse) from the stored lse; scale g / n_valid read on the device.
    scale = tl.load(grad_out_ptr).to(tl.float32) * tl.load(counts_ptr)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        target = tl.load(targets_ptr + r).to(tl.int64)
        if target != ignore_index:
            lse = tl.load(lse_ptr + r)
            _write_row_grad(
                logits_ptr + r * row_stride, grad_ptr + r * grad_row_stride, n_cols, target, lse, scale, CHUNK, STAGES
            )
        else:
            _zero_row(grad_ptr + r * grad_row_stride, n_cols, CHUNK)


@triton.jit
def _scale_inplace_kernel(x_ptr, scale_ptr, n, BLOCK: tl.constexpr):
    # Stage 3's backward: x *= g with g read on the device, so the host never waits to see whether
    # g = 1 (loss.backward()); then every program returns at once and nothing is read or written.
    scale = tl.load(scale_ptr).to(tl.float32)
    if scale != 1.0:
        for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
            offs = tl.cast(start, tl.int64) + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(x_ptr + offs, (x * scale).to(x_ptr.dtype.element_ty), mask=mask)


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
def _plan(n_rows: int, n_cols: int, elem_bytes: int, write_grad: bool, n_sms: int) -> tuple[int, dict[str, int]]:
    """Stage 3's persistent grid and launch meta for a shape. Cached: a call costs a dict lookup."""
    progs_per_sm = _MAX_PROGS_PER_SM
    if write_grad:
        # Pass 2 re-reads each row from L2: keep the rows in flight inside the budget.
        progs_per_sm = max(1, min(progs_per_sm, _L2_BUDGET_BYTES // (n_sms * n_cols * elem_bytes)))
    meta = dict(_WIDE if progs_per_sm == 1 else _NARROW)
    if interpreting():
        meta["CHUNK"] = _INTERPRETER_CHUNK
    return min(n_rows, progs_per_sm * n_sms), {**meta, "PROGS_PER_SM": progs_per_sm, "WRITE_GRAD": write_grad}


def _fwd(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, stage: int, write_grad: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(loss in the logits' dtype, lse [N] fp32, counts [1/max(n_valid, 1), n_valid] fp32, gradient of
    the mean loss or None)."""
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    if targets.stride(0) != 1:
        targets = targets.contiguous()
    n_rows, n_cols = logits.shape
    device = logits.device
    row_loss = torch.empty(n_rows, dtype=torch.float32, device=device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=device)
    counts = torch.empty(2, dtype=torch.float32, device=device)
    loss = torch.empty((), dtype=logits.dtype, device=device)
    grad = torch.empty_like(logits) if write_grad else None
    _count_valid_kernel[(1,)](targets, counts, n_rows, ignore_index, BLOCK=_SMALL_BLOCK)
    if n_rows and n_cols:
        grad_arg = grad if grad is not None else row_loss  # never written when WRITE_GRAD is off
        args = (
            logits, targets, row_loss, lse, grad_arg, counts, n_rows, n_cols,
            logits.stride(0), grad_arg.stride(0), ignore_index,
        )  # fmt: skip
        if stage >= 3:
            n_programs, meta = _plan(n_rows, n_cols, logits.element_size(), write_grad, _num_sms(logits))
            _cross_entropy_fwd_kernel[(n_programs,)](*args, **meta)
        else:
            n_sm = _num_sms(logits)
            grid = lambda meta: (min(n_rows, n_sm * meta["PROGS_PER_SM"]),)
            launch_tuned(_cross_entropy_fwd_tuned, grid, args, _INTERPRETER_META, WRITE_GRAD=write_grad)
    else:
        row_loss.zero_()
    _mean_loss_kernel[(1,)](row_loss, counts, loss, n_rows, BLOCK=_SMALL_BLOCK)
    return loss, lse, counts, grad


def _bwd(
    logits: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    counts: torch.Tensor,
    grad_out: torch.Tensor,
    ignore_index: int,
) -> torch.Tensor:
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    if targets.stride(0) != 1:
        targets = targets.contiguous()
    n_rows, n_cols = logits.shape
    grad = torch.empty_like(logits)
    if grad.numel() == 0:
        return grad
    n_sm = _num_sms(logits)
    grid = lambda meta: (min(n_rows, n_sm * meta["PROGS_PER_SM"]),)
    args = (
        logits, targets, lse, grad_out, counts, grad, n_rows, n_cols, logits.stride(0), grad.stride(0), ignore_index,
    )  # fmt: skip
    launch_tuned(_cross_entropy_bwd_tuned, grid, args, _INTERPRETER_META)
    return grad


def _scale_inplace(x: torch.Tensor, scale: torch.Tensor) -> None:
    n = x.numel()
    if n:
        n_programs = max(1, min(cdiv(n, _SCALE_BLOCK), _SCALE_PROGS_PER_SM * _num_sms(x)))
        _scale_inplace_kernel[(n_programs,)](x, scale, n, BLOCK=_SCALE_BLOCK, num_warps=8)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, stage: int) -> torch.Tensor:
        fused = stage >= 3 and ctx.needs_input_grad[0]
        loss, lse, counts, grad = _fwd(logits, targets, ignore_index, stage, write_grad=fused)
        ctx.ignore_index = ignore_index
        ctx.fused = fused
        if fused:
            # Kept off save_for_backward: it is neither an input nor an output, and handing autograd the only
            # reference lets it adopt the buffer as logits.grad without a copy.
            ctx.grad = grad
        else:
            ctx.save_for_backward(logits, targets, lse, counts)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if not ctx.fused:
            logits, targets, lse, counts = ctx.saved_tensors
            return _bwd(logits, targets, lse, counts, grad_out, ctx.ignore_index), None, None, None
        grad = getattr(ctx, "grad", None)
        if grad is None:
            raise RuntimeError(
                "cross_entropy_stage3 computes its gradient in the forward and hands it over on the first "
                "backward; a second backward through the same graph (retain_graph=True) is not supported — "
                "use cross_entropy_stage2 for that"
            )
        del ctx.grad
        # Scaled on the device: no host sync, and no traffic when g = 1 (loss.backward()).
        _scale_inplace(grad, grad_out)
        return grad, None, None, None


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, stage: int) -> torch.Tensor:
    _check_inputs(logits, targets, ignore_index)
    if logits.requires_grad and torch.is_grad_enabled():
        return _CrossEntropy.apply(logits, targets, ignore_index, stage)
    # No graph to record: skip the autograd.Function (~10 µs of host time per call).
    return _fwd(logits, targets, ignore_index, stage, write_grad=False)[0]


# ---------------------------------------------------------------------------------------- public functions


def cross_entropy_stage2(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy, vocabulary streamed with an online logsumexp; backward re-reads the logits."""
    return _cross_entropy(logits, targets, ignore_index, 2)


def cross_entropy_stage3(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy; when the logits need a gradient it is written during the forward pass."""
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
    # The interpreter converts fp32 → bf16 by truncation, not round-to-nearest.
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
    bar="forward and forward + backward ≥ torch.compile; peak memory ≤ 1/2 of eager at a 128k vocabulary",
)
get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
