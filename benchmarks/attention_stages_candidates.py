"""ptt bench candidates for the Gluon attention forward's K/V ring depth at head_dim 64 (causal), so the project's
own timer compares them in one run:

    ptt bench benchmarks/attention_stages_candidates.py:stages6 \
        --reference benchmarks/attention_stages_candidates.py:reference \
        --inputs benchmarks/attention_stages_candidates.py:get_test_cases \
        --baseline benchmarks/attention_stages_candidates.py:stages3 \
        --baseline benchmarks/attention_stages_candidates.py:stages4

Each launches the shipped causal schedule (claimed tiles) with the given depth; fp16 at two bench shapes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_kernels import attention_hopper as ah
from reference_kernels._common import sm_count


def _fwd(q, k, v, depth):
    b, h, s, _ = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((b * h, s), device=q.device, dtype=torch.float32)
    n = min(sm_count(q.device.index or 0), ah.tiles(q))
    args = ah.launch_args(q, k, v, o, lse, True, None, n, stages=depth)
    ah._attn_fwd_hopper[(n,)](*args, num_warps=4, maxnreg=ah._MAXNREG)
    return o


def stages6(q, k, v):
    return _fwd(q, k, v, 6)


def stages4(q, k, v):
    return _fwd(q, k, v, 4)


def stages3(q, k, v):
    return _fwd(q, k, v, 3)


def reference(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_test_cases():
    out = {}
    for b, h, s in ((8, 32, 4096), (4, 16, 8192)):
        out[f"B{b} H{h} S{s} d64 causal"] = [
            torch.randn(b, h, s, 64, device="cuda", dtype=torch.float16) for _ in range(3)
        ]
    return out
