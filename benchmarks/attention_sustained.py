"""Attention under sustained load, kernel by kernel: where forward + backward spends the time it takes beyond
its forward and backward timed apart.

    python benchmarks/attention_sustained.py [--rounds 3] [--iters 20] [--out FILE.json]

bf16, not causal unless the shape says so. For SDPA's own pick (cuDNN on Hopper) and stage 3, in each of three
modes (forward; backward alone, autograd.grad over a kept graph; forward then backward), the script runs the
mode as do_bench does (L2 cleared by a 256 MiB fill before each call) for 300 ms untimed, then ITERS calls under
torch.profiler, then do_bench itself. From the profiler's kernel records it reports, per call: the span from the
first kernel's start to the last one's end (the fill excluded), the kernels' summed time, the idle gaps between
them, and every kernel's mean time. nvidia-smi samples the SM clock and the board power every 50 ms while each
mode runs, so a mode that slows its kernels by heating the card shows as a lower clock. Each round runs every
(provider, mode) once, the order rotated by one per round.
"""

# ruff: noqa: B023 - each loop iteration builds and uses its closures before the next one rebinds the names
from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing, report_head, rounds_parser, write_report  # noqa: E402
from reference_kernels import attention as at  # noqa: E402

SHAPES = [(2, 32, 4096, 128, False), (1, 16, 8192, 128, False), (2, 16, 8192, 64, False)]
FLUSH_BYTES = 256 * 1024 * 1024


class Sampler:
    """nvidia-smi's SM clock (MHz), board power (W) and whether the software power cap holds the clocks down,
    every 50 ms, each line stamped on arrival."""

    FIELDS = "clocks.sm,power.draw,clocks_event_reasons.sw_power_cap"

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float, float]] = []
        self.proc = None
        try:
            probe = subprocess.run(
                ["nvidia-smi", f"--query-gpu={self.FIELDS}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            fields = self.FIELDS if probe.returncode == 0 else self.FIELDS.rsplit(",", 1)[0]
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=subprocess.PIPE,
                text=True,
            )
        except (OSError, subprocess.TimeoutExpired):
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = [x.strip() for x in line.split(",")]
            try:
                clock, power = float(parts[0]), float(parts[1])
            except (ValueError, IndexError):
                continue
            capped = float(parts[2] == "Active") if len(parts) > 2 else float("nan")
            self.samples.append((time.time(), clock, power, capped))

    def between(self, t0: float, t1: float) -> dict[str, float | None]:
        got = [(c, p, k) for t, c, p, k in self.samples if t0 <= t <= t1]
        if not got:
            return {"sm_mhz": None, "watts": None, "power_capped": None, "samples": 0}
        return {
            "sm_mhz": statistics.mean(c for c, _, _ in got),
            "watts": statistics.mean(p for _, p, _ in got),
            "power_capped": statistics.mean(k for _, _, k in got),
            "samples": len(got),
        }

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()


def _per_call(prof, iters: int) -> dict:
    """Split the profiler's kernel records at the flush fills: per call its span, busy time and gaps (µs), and
    each kernel's mean time."""
    kernels = sorted(
        (e for e in prof.events() if e.device_type == DeviceType.CUDA and e.time_range.elapsed_us() > 0),
        key=lambda e: e.time_range.start,
    )
    calls: list[list] = []
    for e in kernels:
        if "FillFunctor<signed char>" in e.name:  # the flush (an int8 fill): no provider launches one
            calls.append([])
        elif calls:
            calls[-1].append(e)
    calls = [c for c in calls if c][-iters:]
    spans = [c[-1].time_range.end - c[0].time_range.start for c in calls]
    busy = [sum(e.time_range.elapsed_us() for e in c) for c in calls]
    per_kernel: dict[str, list[float]] = defaultdict(list)
    for c in calls:
        for e in c:
            per_kernel[e.name[:90]].append(e.time_range.elapsed_us())
    return {
        "calls": len(calls),
        "span_us": statistics.median(spans),
        "busy_us": statistics.median(busy),
        "gaps_us": statistics.median(s - b for s, b in zip(spans, busy, strict=True)),
        "kernels_us": {k: sum(v) / len(calls) for k, v in per_kernel.items()},
    }


def main() -> int:
    parser = rounds_parser(__doc__, rounds=3)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if gpu_missing("attention_sustained", sm90=True):
        return 2
    from triton.testing import do_bench

    sampler = Sampler()
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    timer = "torch.profiler kernel records (per call, median over ITERS calls) and do_bench (its mean)"
    report = report_head(args.rounds, timer=timer, iters=args.iters, rows=[])
    for b, h, s, d, causal in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(s + d)
        q, k, v = (
            torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_(True)
            for _ in range(3)
        )
        do = torch.randn_like(q)
        providers = {
            "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
            "stage3": lambda q, k, v: at.attention_stage3(q, k, v, causal),
        }
        calls = {}
        for name, fn in providers.items():
            out = fn(q, k, v)
            calls[(name, "fwd")] = lambda fn=fn: fn(q, k, v)
            calls[(name, "bwd")] = lambda out=out: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
            calls[(name, "fwd+bwd")] = lambda fn=fn: torch.autograd.grad(fn(q, k, v), (q, k, v), do)
        keys = list(calls)
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        results: dict = defaultdict(list)
        for r in range(args.rounds):
            order = keys[r % len(keys) :] + keys[: r % len(keys)]
            for key in order:
                call = calls[key]

                def step(call=call) -> None:
                    flush.fill_(1)
                    call()

                t_end = time.time() + 0.3
                while time.time() < t_end:
                    step()
                torch.cuda.synchronize()
                t0 = time.time()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.iters):
                        step()
                    flush.fill_(1)
                    torch.cuda.synchronize()
                t1 = time.time()
                ms = do_bench(call, warmup=25, rep=100)
                t2 = time.time()
                entry = _per_call(prof, args.iters)
                entry.update(do_bench_us=ms * 1e3, profiled=sampler.between(t0, t1), timed=sampler.between(t1, t2))
                results[key].append(entry)
        row = {"shape": [b, h, s, d], "causal": causal, "modes": {}}
        label = f"{b}×{h}×{s}×{d}{' causal' if causal else ''}"
        for (name, mode), entries in results.items():
            med = {
                f: statistics.median(e[f] for e in entries) for f in ("span_us", "busy_us", "gaps_us", "do_bench_us")
            }
            clocks = [e["profiled"]["sm_mhz"] for e in entries if e["profiled"]["sm_mhz"] is not None]
            watts = [e["profiled"]["watts"] for e in entries if e["profiled"]["watts"] is not None]
            med["sm_mhz"] = statistics.mean(clocks) if clocks else None
            med["watts"] = statistics.mean(watts) if watts else None
            capped = [e["profiled"]["power_capped"] for e in entries if e["profiled"]["power_capped"] is not None]
            med["power_capped"] = statistics.mean(capped) if capped else None
            kernels = {
                k: statistics.median(e["kernels_us"].get(k, 0.0) for e in entries) for k in entries[-1]["kernels_us"]
            }
            med["kernels_us"] = kernels
            row["modes"][f"{name} {mode}"] = {"median": med, "rounds": entries}
            print(
                f"{label} {name:6s} {mode:7s} span {med['span_us']:7.1f} busy {med['busy_us']:7.1f} "
                f"gaps {med['gaps_us']:6.1f} do_bench {med['do_bench_us']:7.1f} µs  "
                f"{med['sm_mhz'] or 0:.0f} MHz {med['watts'] or 0:.0f} W",
                flush=True,
            )
            print("    " + "  ".join(f"{k[:48]} {t:.1f}" for k, t in kernels.items()), flush=True)
        report["rows"].append(row)
    sampler.stop()
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
