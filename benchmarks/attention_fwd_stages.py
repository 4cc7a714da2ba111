"""The Gluon attention forward's K/V ring depth, head to head, against SDPA's own pick (cuDNN) on Hopper.

    python benchmarks/attention_fwd_stages.py [--rounds 5] [--out FILE.json]

At head_dim 64 shared memory holds up to six K/V slots (three at 128). Each depth runs the shipped schedule
(claimed tiles causal, split non-causal) at the shapes of benchmarks/attention_hopper.py plus 8×32×4096×64
causal (bf16), after its output is checked against float64 SDPA (largest error relative to the largest magnitude
under 2e-2). Each round times every entry once, in turn, with triton.testing.do_bench (L2 cleared); the figure is
the median over rounds, and ratios are SDPA's time over the entry's (> 1: faster).
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
    times_line,
    write_report,
)
from reference_kernels import attention_hopper as ah  # noqa: E402  (after the checkout is on the path)
from reference_kernels._common import sm_count  # noqa: E402

SHAPES = [
    (8, 32, 4096, 64, True),
    (4, 16, 8192, 64, True),
    (2, 16, 8192, 64, False),
    (4, 32, 4096, 128, True),
    (2, 32, 4096, 128, False),
]
DEPTHS = {64: [3, 4, 6], 128: [2, 3]}
TOLERANCE = 2e-2


def main() -> int:
    ns = rounds_parser(__doc__).parse_args()
    if gpu_missing("attention_fwd_stages", sm90=True):
        return 2
    report = report_head(ns.rounds, shipped={str(d): ah.STAGES[d] for d in ah.HEAD_DIMS}, rows=[])
    failed = False
    for b, h, s, d, causal in SHAPES:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        expected = F.scaled_dot_product_attention(q[:1].double(), k[:1].double(), v[:1].double(), is_causal=causal)
        calls = {"sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
        errors = {}
        n = min(sm_count(q.device.index or 0), ah.tiles(q))
        for depth in DEPTHS[d]:
            o = torch.empty_like(q)
            lse = torch.empty((b * h, s), device="cuda", dtype=torch.float32)

            def run(depth=depth, o=o, lse=lse):
                args = ah.launch_args(q, k, v, o, lse, causal, None, n, stages=depth)
                ah._attn_fwd_hopper[(n,)](*args, num_warps=4, maxnreg=ah._MAXNREG)

            run()
            errors[depth] = relative_error(o[:1], expected)
            if not errors[depth] < TOLERANCE:
                failed = True
                print(f"WRONG {b}×{h}×{s}×{d} causal={causal} stages {depth}: {errors[depth]}", flush=True)
            calls[f"stages {depth}"] = run
        ms, times = interleaved_medians(calls, ns.rounds)
        row = {"shape": [b, h, s, d], "causal": causal, "errors": errors, "ms": ms, "rounds_ms": times}
        row["vs_sdpa"] = {name: ms["sdpa"] / t for name, t in ms.items()}
        report["rows"].append(row)
        print(f"{b}×{h}×{s}×{d} {'causal' if causal else 'full  '}: {times_line(ms, row['vs_sdpa'])}", flush=True)
    write_report(ns.out, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
