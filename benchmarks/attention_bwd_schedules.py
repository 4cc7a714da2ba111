"""The Gluon attention backward's schedules against each other and against SDPA's own backward, on Hopper.

    python benchmarks/attention_bwd_schedules.py [--rounds 5] [--out FILE.json]

A schedule is ``attention_hopper_bwd.schedule``'s (defer, alternate, kv_registers). Every schedule of a head dim is
first checked against float64 autograd at small shapes (bf16; the largest error over dQ, dK and dV relative to
each gradient's largest magnitude must stay under 1e-2). Then, at the shapes of benchmarks/attention_hopper.py
(bf16), each schedule's main kernel is launched alone on kept inputs, next to two whole backwards: stage 3's
(delta pre-pass, dQ buffer fill, main kernel, dQ cast) and SDPA's (autograd.grad over a kept graph). Each round
times every entry once, in turn, with triton.testing.do_bench (L2 cleared); the figure is the median over rounds.
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._attention import TOLERANCE, backward_checks  # noqa: E402
from benchmarks._common import (  # noqa: E402
    gpu_missing,
    interleaved_medians,
    report_head,
    rounds_parser,
    write_report,
    wrong_checks,
)
from reference_kernels import attention as at  # noqa: E402  (after the checkout is on the path)
from reference_kernels import attention_hopper_bwd as hb  # noqa: E402

# (defer, alternate, kv_registers) per head dim; the report's "shipped" names the current choice of each.
SCHEDULES = {
    64: [(True, False, False), (True, True, False), (True, False, True), (True, True, True)],
    128: [(False, False, False), (True, False, False), (False, False, True)],
}
SHAPES = [(2, 32, 4096, 128, False), (4, 32, 4096, 128, True), (2, 16, 8192, 64, False), (4, 16, 8192, 64, True)]


def name(schedule: tuple[bool, bool, bool]) -> str:
    defer, alternate, kv = schedule
    parts = ["deferred" if defer else "in-step", "turns" if alternate else "halves"]
    return "-".join(parts + (["kv-regs"] if kv else []))


def check(d: int) -> list[dict]:
    """Every schedule of head dim ``d`` against float64 autograd (bf16)."""
    versions = {
        name(sched): lambda *args, sched=sched: at._attention_backward_hopper(*args, **_options(sched))
        for sched in SCHEDULES[d]
    }
    return backward_checks(versions, [d], [torch.bfloat16], key="schedule")


def _options(sched: tuple[bool, bool, bool]) -> dict:
    return dict(zip(("defer", "alternate", "kv_registers"), sched, strict=True))


def main() -> int:
    ns = rounds_parser(__doc__).parse_args()
    if gpu_missing("attention_bwd_schedules", sm90=True):
        return 2
    report = report_head(ns.rounds, shipped={str(d): name(hb.schedule(d)) for d in hb.HEAD_DIMS}, checks=[], rows=[])
    for d in hb.HEAD_DIMS:
        report["checks"].extend(check(d))
    failed = bool(wrong_checks(report["device"], report["checks"], TOLERANCE))
    for b, h, s, d, causal in SHAPES:
        q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        o, lse = at._attention_stage3(q, k, v, causal, store_lse=True)
        delta = at._delta(o, do, lse)
        dq_acc = torch.zeros((b * h * s, d), dtype=torch.float32, device="cuda")
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        calls = {}
        for sched in SCHEDULES[d]:
            args = hb.launch_args(q, k, v, do, dq_acc, dk, dv, lse, delta, causal, *sched)
            calls[name(sched)] = lambda args=args: hb._attn_bwd_hopper[(s // hb.BLOCK_N, b * h)](
                *args, num_warps=4, maxnreg=hb._MAXNREG
            )
        calls["stage3 backward"] = lambda: at._attention_backward_hopper(q, k, v, o, lse, do, causal)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        calls["sdpa backward"] = lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)
        ms, times = interleaved_medians(calls, ns.rounds)
        row = {"shape": [b, h, s, d], "causal": causal, "ms": ms, "rounds_ms": times}
        row["sdpa_over_stage3_backward"] = ms["sdpa backward"] / ms["stage3 backward"]
        report["rows"].append(row)
        cells = "  ".join(f"{n} {t * 1000:.0f}" for n, t in ms.items())
        print(f"{b}×{h}×{s}×{d} {'causal' if causal else 'full  '} µs: {cells}", flush=True)
    write_report(ns.out, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
