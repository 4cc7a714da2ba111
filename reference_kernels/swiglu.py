"""SwiGLU activation of a gate and an up projection, forward and backward (as in LLaMA MLPs).

Math: ``c = silu(a) · b = a·σ(a)·b``; backward ``da = dc·b·σ(a)·(1 + a·(1 − σ(a)))``,
``db = dc·a·σ(a)``. σ(a) is recomputed in the backward from a, so nothing but a and b is saved.

Programs → data (stage 2, the only stage): the tensors are flattened; program i owns BLOCK elements
starting at i·BLOCK, BLOCK and num_warps autotuned per power-of-two size class (sizes within a factor of
two share a tuning, as torch inductor's size hints do). Full blocks take an unmasked branch so their
accesses stay 128-bit whatever the size; only the last block is masked.

Bytes: forward reads a and b and writes c (``3·n·size``); eager PyTorch writes and re-reads silu(a)
(``5·n·size``). Backward reads a, b and dc and writes da and db (``5·n·size``); eager materialises
σ(a), silu(a) and products in between.

Limits: float32 / float16 / bfloat16; a and b of one shape, dtype and device (no broadcasting);
non-contiguous inputs are copied once.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels._autotune import parallel_autotune, tuning_bench
from reference_kernels._common import cdiv, check_float_tensor, check_same_dtype_and_device, interpreting
from reference_kernels._spec import Case, Dims, KernelSpec, Tolerance

# The CPU interpreter cannot autotune (no driver to time with); it runs this block, small enough that the
# small cases have full blocks and a masked tail.
_INTERPRETER_BLOCK = 64
# Sizes below 2^16 elements share one autotune result: the config barely matters there, and every new
# key costs a full search (a compile and a timing per config).
_MIN_SIZE_CLASS = 16


def _configs() -> list[triton.Config]:
    # 8-32 elements per thread: enough bytes in flight per SM to cover HBM latency on Hopper; the
    # backward keeps three inputs live, so its largest block stays at 32 per thread.
    return [
        triton.Config({"BLOCK": b}, num_warps=w)
        for (b, w) in ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16))
    ]


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _silu_mul(a, b):
    return a * tl.sigmoid(a) * b


@triton.jit
def _swiglu_grads(a, b, dc):
    sig = tl.sigmoid(a)
    silu = a * sig
    da = dc * b * sig * (1.0 + a * (1.0 - sig))
    db = dc * silu
    return da, db


# size_class is the autotuner's key only: a runtime argument, never specialized on, so every size class
# shares one set of compiled configs.
@triton.jit(do_not_specialize=["size_class"])
def _swiglu_fwd_kernel(a_ptr, b_ptr, c_ptr, n, size_class, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:
        # Full block: unmasked, so 128-bit accesses whatever n is.
        a = tl.load(a_ptr + offs).to(tl.float32)
        b = tl.load(b_ptr + offs).to(tl.float32)
        tl.store(c_ptr + offs, _silu_mul(a, b).to(c_ptr.dtype.element_ty))
    else:
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(c_ptr + offs, _silu_mul(a, b).to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["size_class"])
def _swiglu_bwd_kernel(a_ptr, b_ptr, dc_ptr, da_ptr, db_ptr, n, size_class, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:
        a = tl.load(a_ptr + offs).to(tl.float32)
        b = tl.load(b_ptr + offs).to(tl.float32)
        dc = tl.load(dc_ptr + offs).to(tl.float32)
        da, db = _swiglu_grads(a, b, dc)
        tl.store(da_ptr + offs, da.to(da_ptr.dtype.element_ty))
        tl.store(db_ptr + offs, db.to(db_ptr.dtype.element_ty))
    else:
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dc = tl.load(dc_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        da, db = _swiglu_grads(a, b, dc)
        tl.store(da_ptr + offs, da.to(da_ptr.dtype.element_ty), mask=mask)
        tl.store(db_ptr + offs, db.to(db_ptr.dtype.element_ty), mask=mask)


# Configs of a new size class compile in parallel before they are timed (5 + 25 ms each).
_swiglu_fwd_tuned = parallel_autotune(_configs(), ["size_class"], do_bench=tuning_bench)(_swiglu_fwd_kernel)
_swiglu_bwd_tuned = parallel_autotune(_configs(), ["size_class"], do_bench=tuning_bench)(_swiglu_bwd_kernel)


# --------------------------------------------------------------------------------------------- launchers


def _check_inputs(a: torch.Tensor, b: torch.Tensor) -> None:
    for name, t in (("a", a), ("b", b)):
        check_float_tensor("swiglu", name, t)
    if a.shape != b.shape:
        raise ValueError(
            f"swiglu: a (gate) has shape {tuple(a.shape)} and b (up) {tuple(b.shape)}; they must match "
            "(split a fused [.., 2·H] projection with .chunk(2, dim=-1) and pass both halves)"
        )
    check_same_dtype_and_device("swiglu", ("a", a), ("b", b))


def _launch(tuned: Any, kernel: Any, n: int, *args: Any) -> None:
    size_class = max(_MIN_SIZE_CLASS, n.bit_length())
    if interpreting():
        kernel[(cdiv(n, _INTERPRETER_BLOCK),)](*args, n, size_class, BLOCK=_INTERPRETER_BLOCK)
    else:
        tuned[lambda meta: (cdiv(n, meta["BLOCK"]),)](*args, n, size_class)


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _swiglu_fwd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = _contiguous(a), _contiguous(b)
    c = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    if c.numel():
        _launch(_swiglu_fwd_tuned, _swiglu_fwd_kernel, c.numel(), a, b, c)
    return c


def _swiglu_bwd(a: torch.Tensor, b: torch.Tensor, dc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = _contiguous(a), _contiguous(b)
    dc = _contiguous(dc.to(a.dtype))
    da = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    db = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    if a.numel():
        _launch(_swiglu_bwd_tuned, _swiglu_bwd_kernel, a.numel(), a, b, dc, da, db)
    return da, db


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = _swiglu_fwd(a, b)
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return _swiglu_bwd(a, b, dc)


# ---------------------------------------------------------------------------------------- public functions


def swiglu_stage2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) · b in one pass; backward recomputes σ(a). Autotuned block size and warps."""
    _check_inputs(a, b)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _SwiGLU.apply(a, b)
    # No graph to record: skip the autograd.Function (~10 µs of host time per call).
    return _swiglu_fwd(a, b)


def reference_swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b


# ------------------------------------------------------------------------------------------------- SPEC


def _make_inputs(dims: Dims, dtype: torch.dtype, device: str) -> tuple[Any, ...]:
    shape = (dims["M"], dims["H"])
    return (torch.randn(shape, dtype=dtype, device=device), torch.randn(shape, dtype=dtype, device=device))


SPEC = KernelSpec(
    name="swiglu",
    summary="SwiGLU activation silu(a) · b of two same-shape tensors (forward and backward).",
    make_inputs=_make_inputs,
    reference=reference_swiglu,
    stages={2: swiglu_stage2},
    cases=(
        Case("one element", {"M": 1, "H": 1}),
        Case("one partial block", {"M": 1, "H": 50}),
        Case("exact multiple of the block", {"M": 16, "H": 64}),
        Case("full blocks + masked tail", {"M": 7, "H": 300}),
        Case("LLaMA-7B MLP, 4096 tokens", {"M": 4096, "H": 11008}, small=False),
        Case("odd hidden size at scale", {"M": 4093, "H": 11007}, small=False),
    ),
    bench_cases=(
        Case("4096×11008 (LLaMA-7B)", {"M": 4096, "H": 11008}, small=False),
        Case("8192×14336 (LLaMA-3-8B)", {"M": 8192, "H": 14336}, small=False),
        Case("16384×8192", {"M": 16384, "H": 8192}, small=False),
    ),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    interpreter_dtypes=(torch.float32, torch.float16),
    tolerances={
        torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
        torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
        torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
    },
    bytes_moved=lambda d, dtype: 3 * d["M"] * d["H"] * (torch.finfo(dtype).bits // 8),
    # σ (exp, add, reciprocal), two multiplies: ~5 per element.
    flops=lambda d, dtype: 5 * d["M"] * d["H"],
    dims_of=lambda a, b: {"M": a.numel() // max(1, a.shape[-1]), "H": a.shape[-1]},
    grad_inputs=(0, 1),
    bar=(
        "≥ 90 % of copy bandwidth forward; forward and backward ≥ torch.compile"
        "; ≥ Liger-Kernel forward and forward + backward (where installed)"
    ),
)
get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
