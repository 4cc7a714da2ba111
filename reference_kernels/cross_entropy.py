"""Cross-entropy loss over large vocabularies, mean reduction with ignore_index, forward and backward.

Math: per row ``ℓ_i = lse(x_i) − x_i[t_i]`` with ``lse(x) = m + log Σ_j e^(x_j − m)``, rows whose target is
``ignore_index`` contributing nothing; ``loss = Σ ℓ_i / n_valid``. Gradient:
``dx_ij = g · (softmax(x_i)_j − [j = t_i]) / n_valid`` on valid rows (g the upstream gradient), 0 on
ignored rows. The softmax is never materialised.

Programs → data: persistent programs (one or two per SM) walk rows; per row the vocabulary is streamed in
CHUNK-wide column chunks with an online logsumexp (running max ``m`` and sum ``s``, rescaled
``s ← s·e^(m−m') + Σ e^(x−m')`` when the max grows). Chunk loops may be software-pipelined (``STAGES``:
the next chunk streams into shared memory while this one is reduced).
- stage 2: the forward kernel stores ``ℓ_i`` and ``lse_i`` (fp32); the backward kernel re-reads the
  logits and writes ``dx = g·(e^(x − lse) − onehot)/n_valid``.
- stage 3: when the logits need a gradient, the forward kernel takes a second pass over each row right
  after the first (the row is still in L2) and writes ``(softmax − onehot)/n_valid`` into a buffer
  (Liger-Kernel's approach); the backward returns that buffer, multiplied in place by g when g ≠ 1. The
  logits are then read from HBM once for forward and backward together.

Bytes: forward reads the logits once (``N·V·size``); forward + backward at least reads them once and
writes the gradient once (``2·N·V·size``), which stage 3 does; stage 2 reads them twice. Eager PyTorch
writes and re-reads the ``[N, V]`` log-softmax and a ``[N, V]`` one-hot gradient. Peak extra memory:
stage 3 holds one ``[N, V]`` buffer (the gradient, handed to autograd without a copy); eager holds three
(log-softmax, its gradient, the logits' gradient).

Limits: logits ``[N, V]`` float32 / float16 / bfloat16 with unit column stride (other layouts are copied
once); targets ``[N]`` int32 / int64 in ``[0, V)`` or ``ignore_index`` (an out-of-range target is not
read; its row's loss is NaN, so the mean is NaN: no host sync to check it); no class weights or label
smoothing. The loss has the logits' dtype, as in PyTorch. Stage 3's backward reads g on the host to skip
the multiply when it is 1 (one sync), and can run once per forward (its gradient buffer is handed over,
not kept). Rows are spread over programs, so a handful of very long rows uses only a handful of SMs.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels._spec import Case, Dims, KernelSpec, Tolerance

IGNORE_INDEX = -100
# The in-place multiply by g: 4096 elements over 8 warps, 16 per thread, one fixed config (an autotuner
# would re-run an in-place kernel while timing it).
_SCALE_BLOCK = 4096
# The CPU interpreter has no autotuner backend (nothing to time with) and no SM count: one fixed config,
# small enough that persistent row loops and multi-chunk rows with tails run on the small cases.
_INTERPRETER_SMS = 2
_INTERPRETER_CHUNK = 4096
_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _interpreting() -> bool:
    return bool(triton.knobs.runtime.interpret)


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _num_sms(t: torch.Tensor) -> int:
    return _sm_count(t.device.index or 0) if t.is_cuda else _INTERPRETER_SMS


def _configs() -> list[triton.Config]:
    # CHUNK / (32·num_warps) = 16-32 values per thread per chunk. PROGS_PER_SM 1 keeps one row per SM in
    # flight (132 rows × 256 KB at a 128k bf16 vocabulary = 33 MB, inside the 50 MB L2, so stage 3's
    # second pass hits); 2 overlaps one program's exps and reductions with the other's loads. STAGES > 1
    # has the compiler prefetch the next chunk into shared memory (cp.async) while this one is reduced.
    return [
        triton.Config({"CHUNK": c, "PROGS_PER_SM": p, "STAGES": s}, num_warps=w)
        for (c, w, p, s) in (
            (4096, 8, 2, 1),
            (8192, 16, 1, 1),
            (8192, 16, 2, 1),
            (16384, 16, 1, 1),
            (4096, 8, 1, 3),
            (8192, 8, 2, 2),
            (8192, 16, 1, 2),
            (16384, 16, 1, 2),
        )
    ]


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _row_logsumexp(row_ptr, n_cols, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    """Online logsumexp of one row, streamed in CHUNK-wide chunks; fp32."""
    offs = tl.arange(0, CHUNK)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
        cols = start + offs
        # -inf is neutral for the max and adds e^-inf = 0 to the sum.
        x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # The first chunk rescales s = 0 by e^(-inf) = 0.
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    return m + tl.log(s)


@triton.jit
def _write_row_grad(row_ptr, grad_row_ptr, n_cols, target, lse, scale, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    """grad = scale · (e^(x − lse) − [col = target]) over one row."""
    offs = tl.arange(0, CHUNK)
    for start in tl.range(0, n_cols, CHUNK, num_stages=STAGES):
        cols = start + offs
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
def _cross_entropy_fwd_kernel(
    logits_ptr,
    targets_ptr,
    loss_ptr,
    lse_ptr,
    grad_ptr,
    inv_n_valid_ptr,
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
        inv_n_valid = tl.load(inv_n_valid_ptr)
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
    scale_ptr,
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
    # Stage 2's backward: recompute e^(x − lse) from the stored lse, scale = g / n_valid read on device.
    scale = tl.load(scale_ptr).to(tl.float32)
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
    # Stage 3's backward when g ≠ 1: x *= g, g read on device.
    scale = tl.load(scale_ptr).to(tl.float32)
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:
        tl.store(x_ptr + offs, (tl.load(x_ptr + offs).to(tl.float32) * scale).to(x_ptr.dtype.element_ty))
    else:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(x_ptr + offs, (x * scale).to(x_ptr.dtype.element_ty), mask=mask)


_cross_entropy_fwd_tuned = triton.autotune(configs=_configs(), key=["n_cols", "WRITE_GRAD"])(_cross_entropy_fwd_kernel)
_cross_entropy_bwd_tuned = triton.autotune(configs=_configs(), key=["n_cols"])(_cross_entropy_bwd_kernel)


# --------------------------------------------------------------------------------------------- launchers


def _check_inputs(logits: Any, targets: Any, ignore_index: Any) -> None:
    if not isinstance(logits, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise ValueError("cross_entropy: logits and targets must be torch.Tensors")
    if logits.dtype not in _SUPPORTED_DTYPES:
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
        if not t.is_cuda and not (_interpreting() and t.device.type == "cpu"):
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


def _launch(tuned: Any, grid: Any, args: tuple, **meta: Any) -> None:
    if _interpreting():
        tuned.fn[grid](*args, **meta, CHUNK=_INTERPRETER_CHUNK, PROGS_PER_SM=1, STAGES=2)
    else:
        tuned[grid](*args, **meta)


def _fwd(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, write_grad: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(loss in the logits' dtype, lse [N] fp32, gradient of the mean loss or None)."""
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    targets = targets.contiguous()
    n_rows, n_cols = logits.shape
    row_loss = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    # Two tiny [N] reductions on the host side of the kernel: the count sets the gradient's scale, which
    # stage 3 needs before its kernel runs.
    n_valid = (targets != ignore_index).sum()
    inv_n_valid = 1.0 / n_valid.clamp_min(1).to(torch.float32)
    grad = torch.empty_like(logits) if write_grad else None
    if n_rows and n_cols:
        n_sm = _num_sms(logits)
        grid = lambda meta: (min(n_rows, n_sm * meta["PROGS_PER_SM"]),)
        grad_arg = grad if grad is not None else row_loss  # never written when WRITE_GRAD is off
        args = (
            logits, targets, row_loss, lse, grad_arg, inv_n_valid, n_rows, n_cols,
            logits.stride(0), grad_arg.stride(0), ignore_index,
        )  # fmt: skip
        _launch(_cross_entropy_fwd_tuned, grid, args, WRITE_GRAD=write_grad)
    else:
        row_loss.zero_()
    # All rows ignored: 0 / 0 = NaN, as PyTorch gives.
    loss = (row_loss.sum() / n_valid).to(logits.dtype)
    return loss, lse, grad


def _bwd(
    logits: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, grad_out: torch.Tensor, ignore_index: int
) -> torch.Tensor:
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    n_rows, n_cols = logits.shape
    grad = torch.empty_like(logits)
    if grad.numel() == 0:
        return grad
    scale = grad_out.to(torch.float32) / (targets != ignore_index).sum().clamp_min(1)
    n_sm = _num_sms(logits)
    grid = lambda meta: (min(n_rows, n_sm * meta["PROGS_PER_SM"]),)
    args = (logits, targets, lse, scale, grad, n_rows, n_cols, logits.stride(0), grad.stride(0), ignore_index)
    _launch(_cross_entropy_bwd_tuned, grid, args)
    return grad


def _scale_inplace(x: torch.Tensor, scale: torch.Tensor) -> None:
    n = x.numel()
    if n:
        _scale_inplace_kernel[(triton.cdiv(n, _SCALE_BLOCK),)](x, scale, n, BLOCK=_SCALE_BLOCK, num_warps=8)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, stage: int) -> torch.Tensor:
        _check_inputs(logits, targets, ignore_index)
        fused = stage >= 3 and ctx.needs_input_grad[0]
        loss, lse, grad = _fwd(logits, targets, ignore_index, write_grad=fused)
        ctx.ignore_index = ignore_index
        ctx.fused = fused
        if fused:
            # Kept off save_for_backward: it is neither an input nor an output, and handing autograd the only
            # reference lets it adopt the buffer as logits.grad without a copy.
            ctx.grad = grad
        else:
            ctx.save_for_backward(logits, targets, lse)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if not ctx.fused:
            logits, targets, lse = ctx.saved_tensors
            return _bwd(logits, targets, lse, grad_out, ctx.ignore_index), None, None, None
        grad = getattr(ctx, "grad", None)
        if grad is None:
            raise RuntimeError(
                "cross_entropy_stage3 computes its gradient in the forward and hands it over on the first "
                "backward; a second backward through the same graph (retain_graph=True) is not supported — "
                "use cross_entropy_stage2 for that"
            )
        del ctx.grad
        # One host sync: the common g = 1 (loss.backward()) skips a full read + write of the gradient.
        if not bool((grad_out == 1).all()):
            _scale_inplace(grad, grad_out.to(device=grad.device, dtype=torch.float32))
        return grad, None, None, None


# ---------------------------------------------------------------------------------------- public functions


def cross_entropy_stage2(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy, vocabulary streamed with an online logsumexp; backward re-reads the logits."""
    return _CrossEntropy.apply(logits, targets, ignore_index, 2)


def cross_entropy_stage3(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean cross-entropy; when the logits need a gradient it is written during the forward pass."""
    return _CrossEntropy.apply(logits, targets, ignore_index, 3)


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
