"""Round-trip cost of isolation: a warm validate vs a cold process, and the bare cost of one isolated job.

    python benchmarks/runner_roundtrip.py [--json out.json]

- cold: `python -m mcp_server.cli validate …` in a fresh process (interpreter start, torch import, fork
  server start, CUDA init, Triton compile from its cache) — what a one-shot CLI call costs;
- warm: `validate` again through a runner whose fork server is up — what an MCP session pays per call;
- per-job overhead: an empty job (fork, CUDA init, result back) through the warm runner, against the
  same work (CUDA already initialised) done in-process.
Targets on the GPU: warm < 2 s, isolation overhead < 0.5 s per job.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_server.engine.device import probe  # noqa: E402
from mcp_server.engine.runner import Runner  # noqa: E402
from mcp_server.engine.validate import validate  # noqa: E402

FX = ROOT / "tests" / "fixtures" / "validate"
REF = f"{FX / 'add_problem.py'}:reference"
CAND = f"{FX / 'add_good.py'}:candidate"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    cold = []
    for _ in range(3):
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "mcp_server.cli", "validate", REF, CAND, "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        cold.append(time.perf_counter() - started)
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            return 1

    with Runner() as runner:
        device = probe(runner)
        validate(REF, CAND, runner=runner)  # warm-up: fork server up, Triton cache filled
        warm = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            result = validate(REF, CAND, runner=runner)
            warm.append(time.perf_counter() - started)
            assert result.ok
        env = device.job_env()
        jobs = []
        for _ in range(10):
            started = time.perf_counter()
            outcome = runner.run("mcp_server.engine.jobs.probe:run", {}, env=env)
            jobs.append(time.perf_counter() - started)
            outcome.cleanup()

    import torch

    inproc = []
    if torch.cuda.is_available():
        torch.cuda.init()
        for _ in range(10):
            started = time.perf_counter()
            torch.cuda.get_device_properties(0)
            torch.cuda.synchronize()
            inproc.append(time.perf_counter() - started)

    report = {
        "device": device.device,
        "cold_validate_s": statistics.median(cold),
        "warm_validate_s": statistics.median(warm),
        "warm_validate_all_s": warm,
        "job_roundtrip_s": statistics.median(jobs),
        "same_work_in_process_s": statistics.median(inproc) if inproc else None,
        "isolation_overhead_s": statistics.median(jobs) - (statistics.median(inproc) if inproc else 0.0),
        "cases_per_validate": len(result.cases),
    }
    print(json.dumps(report, indent=1))
    print(
        f"\n{device.device}: cold validate {report['cold_validate_s']:.2f} s, warm validate "
        f"{report['warm_validate_s']:.2f} s ({report['cases_per_validate']} cases, target < 2 s), isolated job "
        f"round trip {report['job_roundtrip_s']:.3f} s, overhead {report['isolation_overhead_s']:.3f} s "
        "(target < 0.5 s)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
