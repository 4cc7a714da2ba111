"""Host time per call of the row kernels' providers, in a plain process and with bench's launch hooks installed.

    python benchmarks/host_launch.py [--calls 200] [--rounds 5] [--out FILE.json]

Bench reports ``host_launch_ms``, the host's time to enqueue one call inside its timing loop, and a ``launch_bound``
finding where that exceeds the GPU's time. This measures the same quantity outside bench, so that its figures can
be checked: per provider (stage 3, torch.compile of the reference, eager, Liger-Kernel where installed), ``calls``
calls enqueued behind a GPU sleep long enough that the host never waits for the GPU, timed by time.perf_counter;
"call" is the call alone, "loop body" adds what bench's loop enqueues around each call (an L2 flush by a read,
two CUDA events). Then the same after ``recorder.install_launch_hooks()`` (bench's launch counting and
host-read wrappers). Medians over rounds, in µs. RMSNorm forward at 4096×4096 and 4096×8192 bf16, no grad.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing, report_head, rounds_parser, write_report  # noqa: E402
from reference_kernels import _liger  # noqa: E402
from reference_kernels import rmsnorm as rn  # noqa: E402

SHAPES = [(4096, 4096), (4096, 8192)]


def host_us(
    call: Callable[[], object], calls: int, body: bool, cache: torch.Tensor, sink: torch.Tensor
) -> dict[str, float]:
    """Host µs per call, ``calls`` of them queued behind a GPU sleep (``body``: with bench's flush and events), in
    all and by part (flush, start event, call, end event)."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2 * calls)] if body else []
    parts = {"flush": 0.0, "start event": 0.0, "call": 0.0, "end event": 0.0}
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # ~0.1 s at H200 clocks: longer than 200 enqueues of 500 µs
    start = time.perf_counter()
    for i in range(calls):
        t0 = time.perf_counter()
        if body:
            torch.sum(cache, dim=0, dtype=torch.int64, out=sink)
            t1 = time.perf_counter()
            events[2 * i].record()
            t2 = time.perf_counter()
            parts["flush"] += t1 - t0
            parts["start event"] += t2 - t1
            t0 = t2
        call()
        t1 = time.perf_counter()
        parts["call"] += t1 - t0
        if body:
            events[2 * i + 1].record()
            parts["end event"] += time.perf_counter() - t1
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return {"all": elapsed / calls * 1e6, **{k: v / calls * 1e6 for k, v in parts.items() if v}}


def main() -> int:
    parser = rounds_parser(__doc__, rounds=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls take a whole number of at least 1")
    if gpu_missing("host_launch"):
        return 2
    torch.set_grad_enabled(False)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    cache = torch.ones(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device="cuda")
    sink = torch.zeros((), dtype=torch.int64, device="cuda")
    report = report_head(args.rounds, "time.perf_counter around enqueueing, see the module docstring", rows=[])
    compiled = torch.compile(rn.reference_rmsnorm)
    providers: dict[str, Callable[..., object]] = {
        "stage3": rn.rmsnorm_stage3,
        "compile": compiled,
        "eager": rn.reference_rmsnorm,
    }
    if _liger.version() is not None:
        providers["liger"] = _liger.liger_rmsnorm
    for hooks in (False, True):
        if hooks:
            from mcp_server.engine.jobs import recorder

            recorder.install_launch_hooks()
        for m, n in SHAPES:
            x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            for fn in providers.values():
                fn(x, w)  # compile, autotune
            row = {"shape": [m, n], "launch_hooks": hooks, "us": {}}
            for body in (False, True):
                for name, fn in providers.items():
                    rounds = [
                        host_us(lambda fn=fn, x=x, w=w: fn(x, w), args.calls, body, cache, sink)
                        for _ in range(args.rounds)
                    ]
                    key = f"{name} | {'loop body' if body else 'call'}"
                    row["us"][key] = {part: statistics.median(r[part] for r in rounds) for part in rounds[0]}
                    shown = ", ".join(f"{part} {us:.1f}" for part, us in row["us"][key].items())
                    print(f"hooks={hooks} {m}×{n} {key}: {shown} µs", flush=True)
            report["rows"].append(row)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
