"""Attention on Hopper against SDPA's own pick (cuDNN), timed alike in one process with triton.testing.do_bench.

    python benchmarks/attention_hopper.py [--rounds 5] [--out FILE.json]

Providers, forward and forward + backward, fp16 and bf16, at the issue's shapes (seq ≥ 4096, head_dim 64 and 128,
causal and not): `sdpa` (torch's scaled_dot_product_attention, backend of its choice), `stage3` (stage 3 as shipped:
the Gluon forward of reference_kernels/attention_hopper.py where it applies, the Triton backward) and
`stage3_triton` (stage 3 with the Gluon forward turned off: the Triton kernels only). Each round times every
provider once, in turn; the figure is the median over rounds of do_bench's median (L2 cleared before each call).
Every provider is checked against SDPA (float64) first. Ratios are SDPA's time over the provider's (> 1: faster).
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import attention as at  # noqa: E402  (after the checkout is on the path)
from reference_kernels import attention_hopper as ah  # noqa: E402

SHAPES = [(2, 32, 4096, 128, False), (4, 32, 4096, 128, True), (2, 16, 8192, 64, False), (4, 16, 8192, 64, True)]


def _flops(b: int, h: int, s: int, d: int, causal: bool, backward: bool) -> float:
    f = 4.0 * b * h * s * s * d * (3.5 if backward else 1.0)  # the backward: five matmuls to the forward's two
    return f / 2 if causal else f


def _providers(causal: bool) -> dict:
    def stage3_triton(q, k, v):
        usable = ah.usable
        ah.usable = lambda *_: False
        try:
            return at.attention_stage3(q, k, v, causal)
        finally:
            ah.usable = usable

    return {
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "stage3": lambda q, k, v: at.attention_stage3(q, k, v, causal),
        "stage3_triton": stage3_triton,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="write every figure to this JSON file")
    args = parser.parse_args()
    device = torch.cuda.get_device_name()
    report = {
        "device": device,
        "torch": torch.__version__,
        "timer": "triton.testing.do_bench (L2 cleared), median over interleaved rounds",
        "rounds": args.rounds,
        "rows": [],
    }
    print(f"{device}; ratio = sdpa time / provider time")
    for b, h, s, d, causal in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            gen = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
            providers = _providers(causal)
            gluon = ah.usable(q, k, v)
            expected = F.scaled_dot_product_attention(q[:1].double(), k[:1].double(), v[:1].double(), is_causal=causal)
            for name, fn in providers.items():
                err = (fn(q[:1], k[:1], v[:1]).double() - expected).abs().max().item()
                assert err < 2e-2, f"{name} {b}×{h}×{s}×{d} causal={causal} {dtype}: max error {err}"
            do = torch.randn_like(q)
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]

            def fwd_bwd(fn):
                for t in leaves:
                    t.grad = None
                fn(*leaves).backward(do)

            for mode in ("fwd", "fwd+bwd"):
                calls = {
                    name: (lambda fn=fn: fn(q, k, v)) if mode == "fwd" else (lambda fn=fn: fwd_bwd(fn))
                    for name, fn in providers.items()
                }
                times = {name: [] for name in calls}
                for call in calls.values():
                    call()
                torch.cuda.synchronize()
                for _ in range(args.rounds):
                    for name, call in calls.items():
                        times[name].append(do_bench(call, warmup=25, rep=100))
                ms = {name: statistics.median(t) for name, t in times.items()}
                flops = _flops(b, h, s, d, causal, mode == "fwd+bwd")
                row = {
                    "shape": [b, h, s, d],
                    "causal": causal,
                    "dtype": str(dtype).removeprefix("torch."),
                    "mode": mode,
                    "gluon_forward": gluon,
                    "ms": ms,
                    "tflops": {n: flops / t / 1e9 for n, t in ms.items()},
                    "vs_sdpa": {n: ms["sdpa"] / t for n, t in ms.items()},
                }
                report["rows"].append(row)
                ratios = "  ".join(f"{n} {r:.3f}" for n, r in row["vs_sdpa"].items() if n != "sdpa")
                print(
                    f"{b}×{h}×{s}×{d} {'causal' if causal else 'full  '} {row['dtype']:8s} {mode:7s} "
                    f"sdpa {row['tflops']['sdpa']:.0f} TFLOP/s  {ratios}",
                    flush=True,
                )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
