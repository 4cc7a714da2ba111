"""What the attention-backward scripts share: every version of stage 3's backward checked against float64 autograd
at small shapes before anything is timed."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from benchmarks._common import worst_error
from reference_kernels import attention as at

# (batch, heads, seq) of the checks: one block, a tail of query blocks, several key blocks per program.
CHECK_SHAPES = [(1, 1, 128), (2, 3, 384), (1, 2, 1280)]
# The largest error over dQ, dK and dV, relative to each gradient's largest magnitude, a right backward stays under.
TOLERANCE = 1e-2


def backward_checks(
    versions: dict[str, Callable[..., tuple]],
    head_dims: Iterable[int],
    dtypes: Iterable[torch.dtype] = (torch.float16, torch.bfloat16),
    key: str = "version",
) -> list[dict]:
    """One row per version, head dim, check shape, causal flag and dtype: the version's worst error against the
    reference's float64 gradients. A version is called as ``fn(q, k, v, o, lse, do, causal)`` and returns dQ, dK,
    dV; the row names it under ``key``."""
    rows = []
    for d in head_dims:
        for b, h, s in CHECK_SHAPES:
            for causal in (False, True):
                for dtype in dtypes:
                    gen = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
                    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen) for _ in range(4))
                    o, lse = at._attention_stage3(q, k, v, causal, store_lse=True)
                    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
                    expected = torch.autograd.grad(at.reference_attention(*leaves, causal), leaves, do.double())
                    for name, fn in versions.items():
                        rows.append({key: name, "shape": [b, h, s, d], "causal": causal,
                                     "dtype": str(dtype).removeprefix("torch."),
                                     "error": worst_error(fn(q, k, v, o, lse, do, causal), expected)})  # fmt: skip
    return rows
