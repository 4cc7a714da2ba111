"""Where the time of one attention forward + backward goes, kernel by kernel: SDPA's own pick (cuDNN on Hopper)
against stage 3, from torch.profiler's CUDA kernel times.

    python benchmarks/attention_breakdown.py [--iters 5] [--out FILE.json]

bf16, the shapes of benchmarks/attention_hopper.py. Each provider runs its forward and autograd.grad 3 times
untimed, then ITERS times under the profiler; every kernel's total device time is divided by ITERS. Kernels are
also summed by role (forward, backward main loop, the backward's pre-pass, dQ conversion, fills), so the main
loops can be compared apart from the passes around them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing  # noqa: E402
from reference_kernels import attention as at  # noqa: E402

SHAPES = [(2, 32, 4096, 128, False), (4, 32, 4096, 128, True), (2, 16, 8192, 64, False), (4, 16, 8192, 64, True)]
# Substrings of kernel names → role (first match wins).
ROLES = [
    ("dot_do_o", "backward pre-pass"),
    ("preprocess", "backward pre-pass"),
    ("bprop", "backward main"),
    ("_attn_bwd", "backward main"),
    ("fprop", "forward"),
    ("_attn_fwd", "forward"),
    ("convert_dq", "dQ conversion"),
    ("copy_kernel", "dQ conversion"),
    ("Fill", "fills"),
    ("Memset", "fills"),
]


def role(name: str) -> str:
    return next((r for key, r in ROLES if key in name), "other")


def kernel_times(fn, q, k, v, do, iters: int) -> dict[str, float]:
    for _ in range(3):
        torch.autograd.grad(fn(q, k, v), (q, k, v), do)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            torch.autograd.grad(fn(q, k, v), (q, k, v), do)
        torch.cuda.synchronize()
    # µs per forward + backward; CPU-side entries have no device time of their own.
    return {e.key: e.self_device_time_total / iters for e in prof.key_averages() if e.self_device_time_total > 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--out", default=None)
    ns = parser.parse_args()
    if gpu_missing("attention_breakdown"):
        return 2
    providers = {
        "sdpa": lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "stage3": lambda q, k, v, causal: at.attention_stage3(q, k, v, causal=causal),
    }
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "iters": ns.iters, "rows": []}
    for b, h, s, d, causal in SHAPES:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        do = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        row = {"shape": [b, h, s, d], "causal": causal, "kernels_us": {}, "roles_us": {}}
        for name, attn in providers.items():
            times = kernel_times(lambda q, k, v, attn=attn, c=causal: attn(q, k, v, c), q, k, v, do, ns.iters)
            roles: dict[str, float] = defaultdict(float)
            for kernel, us in times.items():
                roles[role(kernel)] += us
            row["kernels_us"][name] = times
            row["roles_us"][name] = dict(roles)
        report["rows"].append(row)
        label = f"{b}x{h}x{s}x{d}{' causal' if causal else ''}"
        for name in providers:
            print(label, name, {r: round(us, 1) for r, us in sorted(row["roles_us"][name].items())}, flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
