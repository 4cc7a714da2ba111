"""Which part of the timing method moves attention's forward + backward ratio to SDPA: the same calls under four
timers, from triton.testing.do_bench to a copy of the project bench's loop, one difference at a time.

    python benchmarks/attention_timers.py [--rounds 5] [--calls 20] [--dtype bfloat16] [--out FILE.json]

bf16 (or --dtype float16), head_dim 128, not causal (where bench's events read 0.986-0.998x SDPA's own pick on the
H200 and do_bench 1.017-1.024x). Each call is forward + backward: the output, then autograd.grad of it against a
fixed upstream gradient. The timers:

- ``do_bench``: triton.testing.do_bench, L2 cleared by a 256 MiB fill before each call, calls back to back, the
  same input values every call (each round's figure is do_bench's default, the mean of its samples);
- ``events``: one GPU sleep, then ``calls`` calls, each after an L2 flush by a read of a buffer twice the L2
  (bench's flush), CUDA events around each call, the median call; the same input values every call;
- ``events, new values``: as ``events`` with new random values drawn into q, k and v before each call's flush
  (bench draws new values into every floating input before each timed call);
- ``events, new values, 3 sets``: as the last, the calls taking turns over three sets of inputs (bench rotates
  its input sets);
- ``bench's call``: as the last, each call made by bench's own forward + backward wrapper
  (``mcp_server.engine.jobs.bench_job._forward_backward``), which clears the inputs' ``.grad`` and backpropagates
  into it with ``torch.autograd.backward`` where the others take ``torch.autograd.grad``.

Every (provider, timer) pair is timed once a round, the order rotated by one per round; right after each timing
the SM clock is read (a GPU sleep of known cycles timed by events; the median over rounds is reported, in MHz);
figures are medians over rounds, ratios SDPA's time over stage 3's (> 1: stage 3 faster). Both providers' output
and gradients are first checked against float64 autograd at a small shape, within benchmarks/_attention.py's
TOLERANCE.
"""

# ruff: noqa: B023 - each loop iteration builds and uses its closures before the next one rebinds the names
from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._attention import TOLERANCE  # noqa: E402
from benchmarks._common import (  # noqa: E402
    gpu_missing,
    interleaved_medians,
    report_head,
    rounds_parser,
    worst_error,
    write_report,
)
from reference_kernels import attention as at  # noqa: E402

SHAPES = [(2, 32, 4096, 128), (1, 16, 8192, 128)]
TIMERS = ("do_bench", "events", "events, new values", "events, new values, 3 sets", "bench's call")
PROVIDERS: dict[str, Callable[..., torch.Tensor]] = {
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "stage3": lambda q, k, v: at.attention_stage3(q, k, v, False),
}


class EventTimer:
    """bench's loop without its checks: one sleep, then per call [new values?, L2 flush by a read, start event,
    call, end event]; the median call (ms)."""

    def __init__(self, calls: int, sleep_cycles: int = 200_000_000) -> None:
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.cache = torch.ones(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device="cuda")
        self.sink = torch.zeros((), dtype=torch.int64, device="cuda")
        self.calls, self.sleep_cycles = calls, sleep_cycles

    def time(self, call: Callable[[int], None], refresh: Callable[[int], None] | None) -> float:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.calls)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.calls)]
        torch.cuda.synchronize()
        torch.cuda._sleep(self.sleep_cycles)
        for i in range(self.calls):
            if refresh is not None:
                refresh(i)
            torch.sum(self.cache, dim=0, dtype=torch.int64, out=self.sink)
            starts[i].record()
            call(i)
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def sm_clock_mhz(cycles: int = 2_000_000) -> float:
    """The SM clock now, roughly: a GPU sleep of ``cycles`` clock cycles timed by CUDA events (MHz)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end) / 1e3


def check_small(dtype: torch.dtype) -> list[dict]:
    """Both providers' output and gradients against float64 autograd at 1×2×256×128."""
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(1, 2, 256, 128, device="cuda", dtype=dtype) for _ in range(4))
    wide = [t.double().requires_grad_(True) for t in (q, k, v)]
    out64 = F.scaled_dot_product_attention(*wide)
    expected = [out64.detach(), *torch.autograd.grad(out64, wide, do.double())]
    rows = []
    for name, fn in PROVIDERS.items():
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = fn(*leaves)
        got = [out.detach(), *torch.autograd.grad(out, leaves, do)]
        rows.append({"provider": name, "error": worst_error(got, expected)})
    return rows


def main() -> int:
    parser = rounds_parser(__doc__, rounds=5)
    parser.add_argument("--calls", type=int, default=20, help="calls per events timing")
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    args = parser.parse_args()
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls take a whole number of at least 1")
    if gpu_missing("attention_timers", sm90=True):
        return 2
    from triton.testing import do_bench

    from mcp_server.engine.jobs.bench_job import _forward_backward

    dtype = getattr(torch, args.dtype)
    checks = check_small(dtype)
    report = report_head(args.rounds, "per timer, see the module docstring", dtype=args.dtype, checks=checks, rows=[])
    wrong = [row for row in checks if not row["error"] < TOLERANCE]
    for row in wrong:
        print(f"WRONG {row}", flush=True)
    timer = EventTimer(args.calls)
    for b, h, s, d in SHAPES:
        sets = [
            [torch.randn(b, h, s, d, device="cuda", dtype=dtype).requires_grad_(True) for _ in range(3)]
            for _ in range(3)
        ]
        upstream = torch.randn(b, h, s, d, device="cuda", dtype=dtype)

        def refresh(i: int, n_sets: int) -> None:
            with torch.no_grad():
                for t in sets[i % n_sets]:
                    t.normal_()

        entries: dict[str, Callable[[], float]] = {}
        for name, fn in PROVIDERS.items():

            def step(i: int, fn=fn, n_sets: int = 1) -> None:
                leaves = sets[i % n_sets]
                torch.autograd.grad(fn(*leaves), leaves, upstream)

            entries[f"{name} | do_bench"] = lambda step=step: do_bench(lambda: step(0), warmup=25, rep=200)
            entries[f"{name} | events"] = lambda step=step: timer.time(step, None)
            entries[f"{name} | events, new values"] = lambda step=step: timer.time(step, lambda i: refresh(i, 1))
            entries[f"{name} | events, new values, 3 sets"] = lambda step=step: timer.time(
                lambda i: step(i, n_sets=3), lambda i: refresh(i, 3)
            )
            bench_call = _forward_backward(fn, None)
            entries[f"{name} | bench's call"] = lambda bench_call=bench_call: timer.time(
                lambda i: bench_call(*sets[i % 3]), lambda i: refresh(i, 3)
            )
        # Each entry times itself; the first call of each compiles, autotunes and warms the caches of its path.
        clocks: dict[str, list[float]] = {key: [] for key in entries}

        def measure(entry: Callable[[], float]) -> float:
            """The entry's figure; the SM clock right after it goes to ``clocks``."""
            figure = entry()
            key = next(k for k, e in entries.items() if e is entry)
            clocks[key].append(sm_clock_mhz())
            return figure

        ms, times = interleaved_medians(entries, args.rounds, rotate=True, measure=measure)
        ratios = {t: ms[f"sdpa | {t}"] / ms[f"stage3 | {t}"] for t in TIMERS}
        clock = {key: statistics.median(c) for key, c in clocks.items()}
        report["rows"].append({
            "shape": [b, h, s, d], "ms": ms, "rounds_ms": times, "sdpa_over_stage3": ratios,
            "sm_clock_after_mhz": clock,
        })  # fmt: skip
        label = f"{b}×{h}×{s}×{d}"
        for t in TIMERS:
            print(f"{label} {t}: sdpa {ms[f'sdpa | {t}']:.3f} ms, stage3 {ms[f'stage3 | {t}']:.3f} ms, "
                  f"ratio {ratios[t]:.3f}; SM clock after: {clock[f'sdpa | {t}']:.0f} / "
                  f"{clock[f'stage3 | {t}']:.0f} MHz",
                  flush=True)  # fmt: skip
    write_report(args.out, report)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
