"""The Gluon attention forward's causal tile schedules against each other and against SDPA's own pick, on Hopper.

    python benchmarks/attention_fwd_schedules.py [--rounds 5] [--out FILE.json]

Two schedules of ``attention_hopper.forward`` for causal tiles (128 query rows each, of very different lengths):
one program per tile, heaviest tile of each head first (``dynamic=False``), and one program per SM claiming the
next tile in that order from an atomic counter (``dynamic=True``), so a program's next Q and K/V loads overlap its
last tile's epilogue. Each is first checked against float64 SDPA at small shapes (bf16 and fp16; the largest error
relative to the output's largest magnitude must stay under 1e-2), and the two must agree bit for bit at every
timed shape. Then each round times every entry once, in turn, with triton.testing.do_bench (L2 cleared): the
forward of each schedule and SDPA's forward (torch's pick: cuDNN on Hopper), bf16 and fp16; the figure is the
median over rounds. Shapes: benchmarks/attention_hopper.py's causal ones and the causal cases of ptt bench's
attention run (benchmarks/reference_kernels.py).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import attention as at  # noqa: E402  (after the checkout is on the path)
from reference_kernels import attention_hopper as ah  # noqa: E402

SCHEDULES = {"one tile per program": False, "claimed tiles": True}
SHAPES = [(4, 32, 4096, 128), (4, 16, 8192, 64), (8, 32, 4096, 64), (2, 16, 16384, 64)]
CHECK_SHAPES = [(1, 1, 128, 64), (2, 3, 777, 64), (3, 5, 1500, 128), (1, 2, 4096, 128)]
TOLERANCE = 1e-2


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got − expected| / max |expected|; NaN if ``got`` holds one (so the ``< TOLERANCE`` gate fails it)."""
    return ((got.double() - expected).abs().max() / expected.abs().max()).item()


def _run(q, k, v, dynamic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, s, _ = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((b * h, s), device=q.device, dtype=torch.float32)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    # Small shapes have fewer tiles than SMs: a claimed-tiles launch then gets a few programs, one per 3 tiles.
    n = None if ah.tiles(q) >= sms or not dynamic else max(1, ah.tiles(q) // 3)
    ah.forward(q, k, v, True, o, lse, n_programs=n, dynamic=dynamic)
    return o, lse


def check() -> list[dict]:
    rows = []
    for b, h, s, d in CHECK_SHAPES:
        for dtype in (torch.bfloat16, torch.float16):
            gen = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
            expected = at.reference_attention(q.double(), k.double(), v.double(), True)
            for name, dynamic in SCHEDULES.items():
                o, _ = _run(q, k, v, dynamic)
                rows.append({"schedule": name, "shape": [b, h, s, d], "dtype": str(dtype),
                             "error": relative_error(o, expected)})  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    ns = parser.parse_args()
    if not torch.cuda.is_available():
        print("attention_fwd_schedules: needs a CUDA GPU (an sm_90 one: H100 or H200)", file=sys.stderr)
        return 2
    if torch.cuda.get_device_capability() != (9, 0):
        print("attention_fwd_schedules: needs a CUDA GPU of compute capability 9.0 (H100, H200)", file=sys.stderr)
        return 2
    from triton.testing import do_bench

    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "timer": "triton.testing.do_bench (L2 cleared), median over interleaved rounds",
        "rounds": ns.rounds,
        "checks": check(),
        "rows": [],
    }
    failed = [r for r in report["checks"] if not r["error"] < TOLERANCE]
    for row in failed:
        print(f"WRONG {row}", flush=True)
    print(f"{report['device']}: {len(report['checks'])} checks, worst error "
          f"{max(r['error'] for r in report['checks']):.2e}", flush=True)  # fmt: skip
    for b, h, s, d in SHAPES:
        for dtype in (torch.bfloat16, torch.float16):
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
            outs = {name: _run(q, k, v, dyn) for name, dyn in SCHEDULES.items()}
            same = all(torch.equal(a, b_) for a, b_ in zip(*outs.values(), strict=True))
            if not same:
                failed.append({"shape": [b, h, s, d], "dtype": str(dtype), "bitwise": False})
                print(f"WRONG {b}×{h}×{s}×{d} {dtype}: the schedules disagree", flush=True)
            calls = {name: (lambda dyn=dyn: _run(q, k, v, dyn)) for name, dyn in SCHEDULES.items()}
            calls["sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            for call in calls.values():
                call()
            torch.cuda.synchronize()
            times: dict[str, list[float]] = {n: [] for n in calls}
            for _ in range(ns.rounds):
                for n, call in calls.items():
                    times[n].append(do_bench(call, warmup=25, rep=200))
            ms = {n: statistics.median(t) for n, t in times.items()}
            row = {"shape": [b, h, s, d], "causal": True, "dtype": str(dtype), "bitwise_equal": same, "ms": ms,
                   "rounds_ms": times, "sdpa_over": {n: ms["sdpa"] / ms[n] for n in SCHEDULES}}  # fmt: skip
            report["rows"].append(row)
            cells = "  ".join(f"{n} {t * 1000:.0f} µs" for n, t in ms.items())
            ratios = "  ".join(f"{n} {r:.3f}" for n, r in row["sdpa_over"].items())
            print(f"{b}×{h}×{s}×{d} {str(dtype)[6:]}: {cells} | sdpa/ours {ratios}", flush=True)
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text(json.dumps(report, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
