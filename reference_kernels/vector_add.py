"""Element-wise addition of two same-shape tensors, forward only.

Math: ``out[i] = x[i] + y[i]`` over the flattened tensors (no broadcasting).

Programs → data:
- stage 1: program i owns the BLOCK = 1024 elements starting at i·BLOCK, every access masked.
- stage 2: the same mapping with BLOCK and num_warps autotuned per power-of-two size class, and full
  blocks taking an unmasked branch: a mask against an arbitrary ``n`` hides alignment from the compiler
  and can split 128-bit accesses into scalar ones; the unmasked branch always vectorises, and only the
  last block pays for the mask. The search also holds persistent configs (``PROGS_PER_SM`` > 0): a grid
  of a few programs per SM striding over the blocks, so no program waits in a launch queue and every SM
  finishes at the same time (no tail wave); the autotuner keeps them where they win.

Bytes: read x and y once, write out once (``3·n·size``): the minimum, and the same as ``torch.add``; the
stage-2 kernel aims at ≥ 90 % of device copy bandwidth from 2^24 elements on.

Limits: float32 / float16 / bfloat16, both inputs the same shape, dtype and device; non-contiguous
inputs are copied once to contiguous memory.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels._autotune import parallel_autotune, tuning_bench
from reference_kernels._common import cdiv, check_float_tensor, check_same_dtype_and_device, interpreting, sm_count
from reference_kernels._spec import Case, Dims, KernelSpec, Tolerance

# Stage 1 block: 1024 elements over 4 warps = 8 per thread, the tutorial default.
STAGE1_BLOCK = 1024
# The CPU interpreter cannot autotune (no driver to time with); it runs this block, small enough that the
# small test cases have both full blocks and a masked tail, and two programs per (interpreted) SM, so
# the persistent loop runs several blocks per program.
_INTERPRETER_BLOCK = 64
_INTERPRETER_SMS = 2
# Sizes below 2^16 elements share one autotune result: the config barely matters there, and every new
# key costs a full search (a compile and a timing per config).
_MIN_SIZE_CLASS = 16


def _num_sms(t: torch.Tensor) -> int:
    return sm_count(t.device.index or 0) if t.is_cuda else _INTERPRETER_SMS


def _configs() -> list[triton.Config]:
    # 8-64 elements per thread: enough bytes in flight per SM to cover HBM latency on Hopper
    # (~32 KB per SM at 3.3 TB/s), few enough programs that launch and tail effects stay small.
    # Persistent: 8 programs of 8 warps or 16 of 4 fill an SM's 2048 threads (≤ 32 registers each).
    # Stage 1's own tile (1024 over 4 warps) is in the search, so the autotuned kernel has it to fall back on
    # where more elements per thread do not pay (from 2^24 elements on the H200, where it ran 0.3-1 % ahead).
    one_per_block = [
        triton.Config({"BLOCK": b, "PROGS_PER_SM": 0}, num_warps=w)
        for (b, w) in ((1024, 4), (2048, 4), (4096, 8), (8192, 8), (16384, 16))
    ]
    persistent = [
        triton.Config({"BLOCK": 4096, "PROGS_PER_SM": 8}, num_warps=8),
        triton.Config({"BLOCK": 2048, "PROGS_PER_SM": 16}, num_warps=4),
    ]
    return one_per_block + persistent


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _vector_add_simple_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    # fp16/bf16 are added in fp32 and rounded once, as torch.add does.
    out = x.to(tl.float32) + y.to(tl.float32)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


# size_class is the autotuner's key only: a runtime argument, never specialized on, so every size class
# shares one set of compiled configs.
@triton.jit(do_not_specialize=["size_class"])
def _vector_add_fwd_kernel(
    x_ptr,
    y_ptr,
    out_ptr,
    n,
    size_class,
    BLOCK: tl.constexpr,
    PROGS_PER_SM: tl.constexpr,  # read by the launch grid only (0: one program per block)
):
    # Program p takes blocks p, p + P, ...: one block each when the grid has a program per block, several
    # on a persistent grid. The loop counts blocks, not elements, so it cannot overflow int32 near 2^31.
    for block in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        start = tl.cast(block, tl.int64) * BLOCK
        offs = start + tl.arange(0, BLOCK)
        if start + BLOCK <= n:
            # Full block: no mask, so loads and stores are 128-bit whatever n is.
            out = tl.load(x_ptr + offs).to(tl.float32) + tl.load(y_ptr + offs).to(tl.float32)
            tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty))
        else:
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


# Configs of a new size class compile in parallel before they are timed (5 + 25 ms each).
_vector_add_fwd_tuned = parallel_autotune(_configs(), ["size_class"], do_bench=tuning_bench)(_vector_add_fwd_kernel)


# --------------------------------------------------------------------------------------------- launchers


def _check_inputs(x: torch.Tensor, y: torch.Tensor) -> None:
    for name, t in (("x", x), ("y", y)):
        check_float_tensor("vector_add", name, t)
    if x.shape != y.shape:
        raise ValueError(
            f"vector_add: x has shape {tuple(x.shape)} and y {tuple(y.shape)}; this kernel does not "
            "broadcast, expand them to one shape first (y.expand_as(x).contiguous())"
        )
    check_same_dtype_and_device("vector_add", ("x", x), ("y", y))


def _add(x: torch.Tensor, y: torch.Tensor, stage: int) -> torch.Tensor:
    _check_inputs(x, y)
    if not x.is_contiguous():
        x = x.contiguous()
    if not y.is_contiguous():
        y = y.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    if n == 0:
        return out
    if stage == 1:
        _vector_add_simple_kernel[(cdiv(n, STAGE1_BLOCK),)](x, y, out, n, BLOCK=STAGE1_BLOCK, num_warps=4)
        return out
    n_sm = _num_sms(x)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        n_blocks = cdiv(n, meta["BLOCK"])
        return (n_blocks if meta["PROGS_PER_SM"] == 0 else min(n_blocks, meta["PROGS_PER_SM"] * n_sm),)

    size_class = max(_MIN_SIZE_CLASS, n.bit_length())
    if interpreting():
        # Two programs per interpreted SM: the persistent loop runs several blocks per program.
        meta = {"BLOCK": _INTERPRETER_BLOCK, "PROGS_PER_SM": 2}
        _vector_add_fwd_kernel[grid(meta)](x, y, out, n, size_class, **meta)
    else:
        _vector_add_fwd_tuned[grid](x, y, out, n, size_class)
    return out


# ---------------------------------------------------------------------------------------- public functions


def vector_add_stage1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y: fixed 1024-element blocks, every access masked."""
    return _add(x, y, 1)


def vector_add_stage2(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y: autotuned block size, warps and grid (one program per block or persistent), unmasked 128-bit
    accesses on full blocks."""
    return _add(x, y, 2)


def reference_vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


# ------------------------------------------------------------------------------------------------- SPEC


def _make_inputs(dims: Dims, dtype: torch.dtype, device: str) -> tuple[Any, ...]:
    n = dims["n"]
    return (torch.randn(n, dtype=dtype, device=device), torch.randn(n, dtype=dtype, device=device))


SPEC = KernelSpec(
    name="vector_add",
    summary="Element-wise x + y over same-shape tensors.",
    make_inputs=_make_inputs,
    reference=reference_vector_add,
    stages={1: vector_add_stage1, 2: vector_add_stage2},
    cases=(
        Case("one element", {"n": 1}),
        Case("one partial block", {"n": 50}),
        Case("exact multiple of the block", {"n": 4096}),
        Case("full blocks + masked tail", {"n": 1000}),
        Case("odd size, unaligned tail", {"n": 12345}),
        Case("2^24 elements (bar size)", {"n": 2**24}, small=False),
        Case("2^24 + 7: masked tail at scale", {"n": 2**24 + 7}, small=False),
    ),
    bench_cases=tuple(Case(f"2^{p}", {"n": 2**p}, small=False) for p in (20, 22, 24, 26, 28)),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    # The interpreter sweeps these; bf16 runs one case per kernel (tests/reference_kernels), as the engine's
    # patched interpreter computes bf16 as the GPU does (mcp_server/engine/interp/rounding.py, bf16math.py).
    interpreter_dtypes=(torch.float32, torch.float16),
    # One rounding of an exact fp32 sum: half an ulp of the output dtype (an ulp allowed).
    tolerances={
        torch.float32: Tolerance(atol=1e-6, rtol=1e-6),
        torch.float16: Tolerance(atol=1e-3, rtol=1e-3),
        torch.bfloat16: Tolerance(atol=1e-2, rtol=8e-3),
    },
    bytes_moved=lambda d, dtype: 3 * d["n"] * (torch.finfo(dtype).bits // 8),
    flops=lambda d, dtype: d["n"],
    dims_of=lambda x, y: {"n": x.numel()},
    bar="≥ 90 % of copy bandwidth from 2^24 elements on",
)
get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
