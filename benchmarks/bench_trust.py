"""Can bench's numbers be trusted? The checks of its method, measured on the GPU in one run.

    python benchmarks/bench_trust.py [--out benchmarks/results/<gpu>/bench_trust.json]

1. Repeatability: five benches in a row of the same kernel; their medians must agree within 3 %.
2. Nsight Compute: the median of `gpu__time_duration` for the same kernel (clock control off, caches flushed
   by ncu) vs bench's median: within 10 %.
3. A side stream: a kernel launched on another stream is timed by the host clock (and flagged), and its time
   matches the same kernel on the current stream.
4. Warm vs flushed L2: the same small problem timed both ways shows what flushing removes.
5. Speed of the tool: a 4-size softmax sweep with both baselines, compile included, from a cold runner.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_server.engine.bench import bench, honest_ms  # noqa: E402
from mcp_server.engine.runner import Runner  # noqa: E402

EXAMPLES = ROOT / "mcp_server" / "examples"
KERNEL = f"{EXAMPLES / 'softmax_triton.py'}:softmax"
REFERENCE = f"{EXAMPLES / 'softmax_problem.py'}:reference"
SIDE = ROOT / "tests" / "fixtures" / "bench"


def candidate_ms(result, case_index: int = 0) -> float:
    return honest_ms(next(t for t in result.rows[case_index].timings if t.provider == "candidate"))


def ncu_median_us(shape: str) -> float | None:
    ncu = shutil.which("ncu")
    if ncu is None:
        return None
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--metrics",
        "gpu__time_duration.sum",
        "--csv",
        "-k",
        "regex:softmax_kernel",
        "--launch-skip",
        "10",
        "--launch-count",
        "30",
        sys.executable,
        str(ROOT / "benchmarks" / "ncu_driver.py"),
        shape,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    rows = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    values = []
    for rec in csv.DictReader(io.StringIO("\n".join(rows))):
        if rec.get("Metric Name") == "gpu__time_duration.sum":
            value = float(rec["Metric Value"].replace(",", ""))
            unit = rec.get("Metric Unit", "nsecond")
            values.append(value / 1000.0 if unit.startswith("n") else value * (1000.0 if unit.startswith("m") else 1.0))
    if not values:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return None
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    report: dict = {}

    # 5. The tool's own speed, from a cold runner (fork server start, compile, autotune, torch.compile).
    started = time.perf_counter()
    with Runner() as cold:
        sweep = bench(KERNEL, REFERENCE, inputs="bf16[4096,N]", sizes="1024,2048,4096,8192", runner=cold, reps=50)
    report["sweep_4_sizes_both_baselines_s"] = round(time.perf_counter() - started, 1)
    report["sweep_rows"] = [
        {
            "case": r.case,
            "candidate_ms": candidate_ms(sweep, i),
            "vs_eager": r.speedup_vs_eager,
            "vs_compile": r.speedup_vs_compile,
            "pct_roofline": r.pct_of_roofline,
        }
        for i, r in enumerate(sweep.rows)
    ]
    print(
        f"4-size softmax sweep with eager + compile baselines: {report['sweep_4_sizes_both_baselines_s']} s", flush=True
    )

    with Runner() as runner:
        # 1. Repeatability.
        medians = []
        for _ in range(5):
            result = bench(
                KERNEL,
                REFERENCE,
                inputs="bf16[4096,8192]",
                runner=runner,
                reps=100,
                baselines=False,
                validate_first=False,
            )
            medians.append(candidate_ms(result))
        mean = statistics.mean(medians)
        report["repeat_medians_ms"] = medians
        report["repeat_max_deviation_pct"] = 100 * max(abs(m - mean) for m in medians) / mean
        print(
            f"five benches: {[round(m, 5) for m in medians]} ms, max deviation "
            f"{report['repeat_max_deviation_pct']:.2f} % (target ≤ 3 %)",
            flush=True,
        )

        # 2. Nsight Compute.
        ncu_us = ncu_median_us("4096,8192")
        report["ncu_gpu_time_duration_us"] = ncu_us
        if ncu_us:
            report["bench_vs_ncu_pct"] = 100 * (mean * 1000 - ncu_us) / ncu_us
            print(
                f"ncu gpu__time_duration median {ncu_us:.2f} µs vs bench {mean * 1000:.2f} µs: "
                f"{report['bench_vs_ncu_pct']:+.1f} % (target within ±10 %)",
                flush=True,
            )

        # 3. Side stream.
        hidden = bench(
            f"{SIDE / 'side_stream.py'}:candidate",
            f"{SIDE / 'add_problem.py'}:reference",
            runner=runner,
            reps=50,
            baselines=False,
            validate_first=False,
        )
        plain = bench(
            f"{SIDE / 'side_stream.py'}:same_stream",
            f"{SIDE / 'add_problem.py'}:reference",
            runner=runner,
            reps=50,
            baselines=False,
            validate_first=False,
        )
        side = []
        for i, row in enumerate(hidden.rows):
            t = next(t for t in row.timings if t.provider == "candidate")
            side.append(
                {
                    "case": row.case,
                    "events_ms": t.median_ms,
                    "host_extra_ms": t.outside_stream_ms,
                    "reported_ms": honest_ms(t),
                    "same_stream_ms": candidate_ms(plain, i),
                }
            )
        report["side_stream"] = side
        report["side_stream_flagged"] = any(f.kind.value == "timer_disagreement" for f in hidden.findings)
        for s in side:
            print(
                f"side stream {s['case']}: events {s['events_ms']:.4f} ms, host +{s['host_extra_ms']:.4f} ms, reported "
                f"{s['reported_ms']:.4f} ms; same kernel on the current stream {s['same_stream_ms']:.4f} ms",
                flush=True,
            )
        print(f"side stream flagged: {report['side_stream_flagged']}", flush=True)

        # 4. Warm vs flushed L2 on a problem that fits in L2 (4096×1024 bf16: 8 MB in, 8 MB out).
        flushed = bench(
            KERNEL, REFERENCE, inputs="bf16[4096,1024]", runner=runner, reps=100, validate_first=False, input_sets=1
        )
        warm = bench(
            KERNEL,
            REFERENCE,
            inputs="bf16[4096,1024]",
            runner=runner,
            reps=100,
            validate_first=False,
            input_sets=1,
            l2_flush=False,
        )
        report["l2"] = {
            "flushed_ms": candidate_ms(flushed),
            "warm_ms": candidate_ms(warm),
            "warm_speedup": candidate_ms(flushed) / candidate_ms(warm),
            "flushed_pct_roofline": flushed.rows[0].pct_of_roofline,
            "warm_pct_roofline": warm.rows[0].pct_of_roofline,
        }
        l2 = report["l2"]
        print(
            f"L2: flushed {l2['flushed_ms']:.4f} ms vs warm {l2['warm_ms']:.4f} ms ({l2['warm_speedup']:.2f}× "
            f"faster warm; roofline {l2['flushed_pct_roofline']:.0f} % vs {l2['warm_pct_roofline']:.0f} %)",
            flush=True,
        )
        report["device"] = sweep.device
        report["peaks"] = sweep.peaks.model_dump() if sweep.peaks else None

    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
