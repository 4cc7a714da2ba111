"""The Gluon attention forward's tile schedules against each other and against SDPA's own pick, on Hopper.

    python benchmarks/attention_fwd_schedules.py [--rounds 5] [--out FILE.json]

The schedules of ``attention_hopper.forward`` (see ``attention_hopper.schedule``). Causal tiles (128 query rows
each) differ in length: one program per tile, heaviest first (``per-tile``), against one program per SM claiming
the next tile from an atomic counter (``claimed``). Non-causal tiles are equal, so the question is the last round:
tile i to program i mod P (``round-robin``) against equal runs of (tile, key block) pairs, a tile two programs
share merged by one of them (``split``). Each schedule is first checked against float64 SDPA at small shapes (bf16
and fp16; the largest error relative to the output's largest magnitude must stay under 1e-2, with few enough
programs that they take several tiles and share some). At every timed shape causal schedules must agree bit for
bit, non-causal ones within the same bound (their log-sum-exps within 1e-3). Then each round times every entry
once, in turn, with triton.testing.do_bench (L2 cleared): each schedule's forward and SDPA's (torch's pick: cuDNN
on Hopper), bf16 and fp16; the figure is the median over rounds. Shapes: benchmarks/attention_hopper.py's and ptt
bench's attention cases (benchmarks/reference_kernels.py) where their tile counts differ.
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    gpu_missing,
    interleaved_medians,
    relative_error,
    report_head,
    rounds_parser,
    write_report,
    wrong_checks,
)
from reference_kernels import attention as at  # noqa: E402  (after the checkout is on the path)
from reference_kernels import attention_hopper as ah  # noqa: E402

SCHEDULES = {True: ("per-tile", "claimed"), False: ("round-robin", "split")}
SHAPES = [
    (4, 32, 4096, 128, True),
    (4, 16, 8192, 64, True),
    (8, 32, 4096, 64, True),
    (2, 16, 16384, 64, True),
    (2, 32, 4096, 128, False),
    (1, 16, 8192, 128, False),
    (2, 16, 8192, 64, False),
    (4, 32, 4096, 64, False),
]
CHECK_SHAPES = [(1, 1, 128, 64), (2, 3, 777, 64), (3, 5, 1500, 128), (1, 2, 4096, 128)]
TOLERANCE = 1e-2
LSE_LIMIT = 1e-3


def schedules_agree(causal: bool, a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> bool:
    """Whether two schedules' (output, log-sum-exp) agree: bit for bit for causal ones (every tile is computed
    alike wherever it runs); for non-causal ones, where split sums a shared tile's two shares in another order,
    the output within TOLERANCE of the first's scale and the log-sum-exp within LSE_LIMIT. A NaN never agrees."""
    (o_a, lse_a), (o_b, lse_b) = a, b
    if causal:
        return torch.equal(o_a, o_b) and torch.equal(lse_a, lse_b)
    return relative_error(o_b, o_a.double()) < TOLERANCE and (lse_b - lse_a).abs().max().item() < LSE_LIMIT


def _run(q, k, v, causal: bool, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, s, _ = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((b * h, s), device=q.device, dtype=torch.float32)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    # Small shapes have fewer tiles than SMs: persistent programs then take about three tiles each (and split
    # some between them).
    n = None if ah.tiles(q) >= sms or name == "per-tile" else ah.tiles(q) // 3 + 1
    ah.forward(q, k, v, causal, o, lse, n_programs=n, name=name)
    return o, lse


def check() -> list[dict]:
    rows = []
    for b, h, s, d in CHECK_SHAPES:
        for dtype in (torch.bfloat16, torch.float16):
            for causal in (True, False):
                gen = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
                expected = at.reference_attention(q.double(), k.double(), v.double(), causal)
                for name in SCHEDULES[causal]:
                    o, _ = _run(q, k, v, causal, name)
                    rows.append({"schedule": name, "shape": [b, h, s, d], "causal": causal, "dtype": str(dtype),
                                 "error": relative_error(o, expected)})  # fmt: skip
    return rows


def main() -> int:
    ns = rounds_parser(__doc__).parse_args()
    if gpu_missing("attention_fwd_schedules", sm90=True):
        return 2
    report = report_head(ns.rounds, checks=check(), rows=[])
    failed = wrong_checks(report["device"], report["checks"], TOLERANCE)
    for b, h, s, d, causal in SHAPES:
        names = SCHEDULES[causal]
        for dtype in (torch.bfloat16, torch.float16):
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
            (o_a, lse_a), (o_b, lse_b) = (_run(q, k, v, causal, name) for name in names)
            agree = schedules_agree(causal, (o_a, lse_a), (o_b, lse_b))
            if not agree:
                failed.append({"shape": [b, h, s, d], "causal": causal, "dtype": str(dtype), "agree": False})
                print(f"WRONG {b}×{h}×{s}×{d} causal={causal} {dtype}: the schedules disagree", flush=True)
            calls = {name: (lambda name=name: _run(q, k, v, causal, name)) for name in names}
            calls["sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            ms, times = interleaved_medians(calls, ns.rounds)
            row = {"shape": [b, h, s, d], "causal": causal, "dtype": str(dtype), "agree": agree,
                   "bitwise": causal, "ms": ms, "rounds_ms": times,
                   "sdpa_over": {n: ms["sdpa"] / ms[n] for n in names}}  # fmt: skip
            report["rows"].append(row)
            cells = "  ".join(f"{n} {t * 1000:.0f} µs" for n, t in ms.items())
            ratios = "  ".join(f"{n} {r:.3f}" for n, r in row["sdpa_over"].items())
            kind = "causal" if causal else "full  "
            print(f"{b}×{h}×{s}×{d} {kind} {str(dtype)[6:]}: {cells} | sdpa/ours {ratios}", flush=True)
    write_report(ns.out, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
