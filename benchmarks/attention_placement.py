"""Does where dQ's fp32 buffer sits in memory move the attention backward's time on Hopper?

    python benchmarks/attention_placement.py [--rounds 3] [--pools 4] [--offsets 8] [--calls 20] [--out FILE.json]

Under bench's event timer stage 3's forward + backward at head_dim 128 reads one of two levels from one timing to
the next, about 2.4 % apart (benchmarks/attention_timers.py), while the inputs stay where they are: what changes
between timings is where the caching allocator puts the buffers the call makes. The largest, and the one every
program writes into (TMA reduce-adds), is dQ's fp32 accumulator. Here it is carved out of ``--pools`` separate
allocations at ``--offsets`` offsets 2 MiB apart each (the allocator's granule, and the GPU's page), and the
backward is timed with it at each place: the main kernel alone (the buffer zeroed outside the timed interval),
and the whole backward as stage 3 runs it (the delta pass zeroing the buffer, the main kernel, dQ's scale and cast).

bf16, not causal, at 2×32×4096×128 and 1×16×8192×128. Timer: benchmarks/attention_timers.py's events (one GPU
sleep, then per call an L2 flush by a read of twice the L2, CUDA events around the call; the median call). Every
place is timed once a round, the order rotated by one per round. The report gives each place's median over the
rounds and its rounds, and per shape the spread between places beside the spread between rounds of one place.
The dQ of the first place is first checked against stage 3's own backward.
"""

# ruff: noqa: B023 - each shape's closures are built and used before the next shape rebinds the names
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing, interleaved_medians, report_head, rounds_parser, write_report  # noqa: E402
from benchmarks.attention_timers import EventTimer  # noqa: E402
from reference_kernels import attention as at  # noqa: E402
from reference_kernels import attention_hopper_bwd as hb  # noqa: E402

SHAPES = [(2, 32, 4096, 128), (1, 16, 8192, 128)]
GRANULE = 2 << 20


def main() -> int:
    parser = rounds_parser(__doc__, rounds=3)
    parser.add_argument("--pools", type=int, default=4, help="separate allocations to carve the buffer from")
    parser.add_argument("--offsets", type=int, default=8, help="offsets per allocation, 2 MiB apart")
    parser.add_argument("--calls", type=int, default=20, help="calls per timing")
    args = parser.parse_args()
    if min(args.rounds, args.pools, args.offsets, args.calls) < 1:
        parser.error("--rounds, --pools, --offsets and --calls take a whole number of at least 1")
    if gpu_missing("attention_placement", sm90=True):
        return 2
    timer = EventTimer(args.calls)
    report = report_head(args.rounds, "CUDA events, see the module docstring", rows=[])
    wrong = False
    for shape in SHAPES:
        b, h, s, d = shape
        torch.manual_seed(0)
        q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        o, lse = at._attention_stage3(q, k, v, False, store_lse=True)
        delta = at._delta(o, do, lse)
        words = b * h * s * d
        pools = [
            torch.empty(words * 4 + args.offsets * GRANULE, dtype=torch.uint8, device="cuda") for _ in range(args.pools)
        ]
        places = {
            f"pool {p} + {j * 2} MiB": pools[p][j * GRANULE : j * GRANULE + words * 4].view(torch.float32).view(-1, d)
            for p in range(args.pools)
            for j in range(args.offsets)
        }
        first = next(iter(places.values()))
        first.zero_()
        dq, _, _ = hb.backward(q, k, v, do, lse, delta, False, dq_acc=first)
        expected, _, _ = at._attention_backward_hopper(q, k, v, o, lse, do, False)
        error = ((dq.float() - expected.float()).abs().max() / expected.float().abs().max()).item()
        if not error < 1e-2:
            print(f"WRONG dQ at {shape}: relative error {error:.3g}", flush=True)
            wrong = True

        def main_kernel(buf: torch.Tensor) -> float:
            return timer.time(lambda i: hb.backward(q, k, v, do, lse, delta, False, dq_acc=buf), lambda i: buf.zero_())

        def whole(buf: torch.Tensor) -> float:
            def call(i: int) -> None:
                hb.backward(q, k, v, do, lse, at._delta(o, do, lse, buf), False, dq_acc=buf)

            return timer.time(call, None)

        entries = {}
        for name, buf in places.items():
            entries[f"main kernel | {name}"] = lambda buf=buf: main_kernel(buf)
            entries[f"whole backward | {name}"] = lambda buf=buf: whole(buf)
        ms, rounds = interleaved_medians(entries, args.rounds, rotate=True, measure=lambda entry: entry())
        row = {"shape": list(shape), "dq_error": error, "ms": ms, "rounds_ms": rounds, "spread": {}}
        for part in ("main kernel", "whole backward"):
            mine = {name: t for name, t in ms.items() if name.startswith(part)}
            within = [max(rounds[name]) - min(rounds[name]) for name in mine]
            row["spread"][part] = {
                "fastest_place_ms": min(mine.values()),
                "slowest_place_ms": max(mine.values()),
                "median_spread_within_a_place_ms": statistics.median(within),
            }
            print(f"{b}×{h}×{s}×{d} {part}: places {min(mine.values()):.3f}–{max(mine.values()):.3f} ms, "
                  f"rounds of one place spread {statistics.median(within):.3f} ms (median)", flush=True)  # fmt: skip
        report["rows"].append(row)
        del pools, places, first
    write_report(args.out, report)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
