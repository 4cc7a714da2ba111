"""Host time of one call the way bench's ``host_check`` takes it, layer by layer of what bench's child adds.

    python benchmarks/host_layers.py [--calls 100] [--rounds 5] [--profile 300] [--out FILE.json]

Each call is timed by time.perf_counter two ways: started on an idle GPU (a sync before it), as ``host_check`` does,
and enqueued behind a GPU sleep that outlasts it, as a call in a loop is enqueued behind the work before it (a call
that outlasts the sleep is counted and shown). Medians over ``calls`` calls, then
over rounds, in µs. Layers, added in this order in one process:

1. plain: the call alone;
2. launch hooks installed (``recorder.install_launch_hooks``: launch counting, host-read wrappers), no stream record;
3. the stream record as bench keeps it (``recorder.LaunchStreams``: a raw handle read per launch);
4. the stream record as it was kept before: a ``torch.cuda.current_stream()`` object built on every launch and
   added to a set (same run, for the A/B).

Providers: RMSNorm stage 3 forward and forward + backward (bf16, 4096×4096 and 4096×8192), eager PyTorch forward.
Then each stream record's own cost per launch: its ``launched()`` called ``--hook-calls`` times in a loop (no
kernel), µs per call, median over rounds. ``--profile N``: cProfile of N stage-3 forward calls at layer 3, the 15
functions with the most own time.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing, report_head, rounds_parser, write_report  # noqa: E402
from mcp_server.engine.jobs import recorder  # noqa: E402
from reference_kernels import rmsnorm as rn  # noqa: E402

SHAPES = [(4096, 4096), (4096, 8192)]
LAYERS = ("plain", "hooks", "hooks + stream record", "hooks + stream object per launch")


class _StreamObjectPerLaunch(recorder.LaunchStreams):
    """The stream record as it was: every launch builds the current stream's object and adds it to a set."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[object] = set()

    def launched(self) -> None:
        self.seen.add(torch.cuda.current_stream())


def sleep_cycles_per_ms() -> float:
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    torch.cuda.synchronize()
    return 10_000_000 / start.elapsed_time(end)


def host_us(call: Callable[[], object], calls: int, sleep_cycles: int) -> tuple[float, int]:
    """Median host µs of ``calls`` calls, each started after a sync, and behind a GPU sleep of ``sleep_cycles``
    when that is not 0; with how many calls the sleep was over when they returned."""
    times, outlasted = [], 0
    for _ in range(calls):
        torch.cuda.synchronize()
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
            slept = torch.cuda.Event()
            slept.record()
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e6)
        outlasted += bool(sleep_cycles) and slept.query()
    torch.cuda.synchronize()
    return statistics.median(times), outlasted


def providers() -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {}
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        xg = x.clone().requires_grad_(True)
        wg = w.clone().requires_grad_(True)
        dy = torch.randn_like(x)

        def fwd_bwd(xg=xg, wg=wg, dy=dy) -> None:
            rn.rmsnorm_stage3(xg, wg).backward(dy)

        out[f"stage3 fwd {m}×{n}"] = lambda x=x, w=w: rn.rmsnorm_stage3(x, w)
        out[f"stage3 fwd+bwd {m}×{n}"] = fwd_bwd
        out[f"eager fwd {m}×{n}"] = lambda x=x, w=w: rn.reference_rmsnorm(x, w)
    return out


def set_layer(layer: str) -> None:
    if layer != "plain":
        recorder.install_launch_hooks()
    recorder.LAUNCH_STREAMS = {
        "hooks + stream record": recorder.LaunchStreams,
        "hooks + stream object per launch": _StreamObjectPerLaunch,
    }.get(layer, lambda: None)()


def hook_us(record: recorder.LaunchStreams, calls: int) -> float:
    """µs per ``record.launched()``, the stream record's share of the launch hook."""
    t0 = time.perf_counter()
    for _ in range(calls):
        record.launched()
    return (time.perf_counter() - t0) / calls * 1e6


def profile(call: Callable[[], object], calls: int) -> list[str]:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        torch.cuda.synchronize()
        call()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
    return [line for line in text.getvalue().splitlines() if line.strip()]


def main() -> int:
    parser = rounds_parser(__doc__, rounds=5)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--profile", type=int, default=0, help="cProfile this many stage-3 forward calls at layer 3")
    parser.add_argument("--hook-calls", type=int, default=20000)
    args = parser.parse_args()
    if args.rounds < 1 or args.calls < 1 or args.hook_calls < 1 or args.profile < 0:
        parser.error("--rounds, --calls and --hook-calls take a whole number of at least 1, --profile at least 0")
    if gpu_missing("host_layers"):
        return 2
    calls = providers()
    for call in calls.values():
        for _ in range(3):
            call()  # compile, warm the allocator
    report = report_head(
        args.rounds,
        "time.perf_counter per call, a sync before each (and a GPU sleep: busy)",
        us={},
        hook_us_per_launch={},
        profile=[],
    )
    sleep = int(5 * sleep_cycles_per_ms())  # 5 ms: longer than any call here takes the host
    for layer in LAYERS:
        set_layer(layer)
        row: dict[str, dict[str, float]] = {}
        for name, call in calls.items():
            row[name] = {}
            for method, cycles in (("idle", 0), ("busy", sleep)):
                runs = [host_us(call, args.calls, cycles) for _ in range(args.rounds)]
                row[name][method] = statistics.median(us for us, _ in runs)
                if cycles:
                    row[name]["busy calls outlasting the sleep"] = sum(n for _, n in runs)
            shown = "  ".join(f"{k} {v:.1f}" for k, v in row[name].items())
            print(f"{layer:34s} {name:24s} {shown}", flush=True)
        report["us"][layer] = row
    for record in (recorder.LaunchStreams, _StreamObjectPerLaunch):
        us = statistics.median(hook_us(record(), args.hook_calls) for _ in range(args.rounds))
        report["hook_us_per_launch"][record.__name__] = us
        print(f"stream record {record.__name__}: {us:.2f} µs per launch", flush=True)
    if args.profile:
        set_layer("hooks + stream record")
        report["profile"] = profile(calls[f"stage3 fwd {SHAPES[0][0]}×{SHAPES[0][1]}"], args.profile)
        print("\n".join(report["profile"]))
    recorder.LAUNCH_STREAMS = None
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
