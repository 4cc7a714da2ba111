"""Runs stage 3's attention backward and SDPA's (cuDNN on Hopper) twice each, for Nsight Compute to profile.

    ncu --kernel-name regex:"_attn_bwd_hopper|bprop" --launch-count 2 --section SpeedOfLight \\
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \\
        --section Occupancy --section LaunchStats python benchmarks/attention_bwd_profile.py [B,H,S,D[,causal]]

Default shape 2,32,4096,128 (bf16), the head dim where the backward trails cuDNN's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing  # noqa: E402  (after the checkout is on the path)
from reference_kernels import attention as at  # noqa: E402


def main() -> int:
    if gpu_missing("attention_bwd_profile", sm90=True):
        return 2
    fields = (sys.argv[1] if len(sys.argv) > 1 else "2,32,4096,128").split(",")
    try:
        b, h, s, d = (int(v) for v in fields[:4])
    except ValueError:
        print(f"attention_bwd_profile: give the shape as B,H,S,D[,causal], not {sys.argv[1]!r}", file=sys.stderr)
        return 2
    causal = len(fields) > 4 and fields[4] == "causal"
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = at._attention_stage3(q, k, v, causal, store_lse=True)
    for _ in range(2):
        at._attention_backward_hopper(q, k, v, o, lse, do, causal)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    for _ in range(2):
        torch.autograd.grad(out, leaves, do, retain_graph=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
