"""What the Gluon kernels for Hopper share: Triton's Gluon names (all None on a Triton without Gluon, where the
Triton kernels serve everywhere), the input dtypes they take, and their TMA blocks' shared-memory layouts."""

from __future__ import annotations

import functools

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - a Triton without Gluon
    gluon = gl = fence_async_shared = mbarrier = tma = warpgroup_mma = warpgroup_mma_wait = TensorDescriptor = None

# The input dtypes the kernels serve, as Gluon names them.
GL_DTYPES = {} if gluon is None else {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


@functools.cache
def shared_layout(dtype: torch.dtype, *block: int):
    """The NVMMA shared-memory layout of a TMA block of ``dtype`` (fp16, bf16 or fp32) and shape ``block`` ([rows,
    cols], or [n] for a vector), cached: computing one costs about 14 µs of host time per launch."""
    gl_dtype = gl.float32 if dtype == torch.float32 else GL_DTYPES[dtype]
    return gl.NVMMASharedLayout.get_default_for(list(block), gl_dtype)
