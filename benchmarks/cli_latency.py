"""Wall time of `ptt validate` (a small kernel) and `ptt compile` (one config), in-process and through the warm
background engine: its first call (which starts it) and the calls after.

    python benchmarks/cli_latency.py [--repeat 5] [--out benchmarks/results/cpu/cli_latency.json]

Each figure is one `ptt` process, timed from its start to its exit, as a shell would see it. The engine runs in
a private runtime folder, so the first call really starts it, and is stopped at the end. The machine's load
(`uptime`) is recorded before and after: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FX = ROOT / "tests" / "fixtures" / "validate"
COMMANDS = {
    "validate": ["validate", f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate"],
    "compile": [
        "compile",
        f"{ROOT}/tests/fixtures/compile/kernels.py:scale_kernel",
        "--signature",
        "*fp32, *fp32, i32, fp32",
        "--constexpr",
        "BLOCK=1024",
    ],
}


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _time(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_server.cli", *args], capture_output=True, text=True, env=env, check=False
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"`ptt {' '.join(args)}` exited {proc.returncode}:\n{proc.stderr}")
    return round(wall, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm calls per command (default 5)")
    parser.add_argument("--in-process", type=int, default=2, help="in-process calls per command (default 2)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    opts = parser.parse_args()

    runtime = Path(tempfile.mkdtemp(prefix="pttb-"))
    env = {k: v for k, v in os.environ.items() if k != "PTT_NO_DAEMON"}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    here = {**env, "PTT_NO_DAEMON": "1"}

    load_before = _load()
    results: dict[str, dict[str, object]] = {}
    try:
        for name, args in COMMANDS.items():
            in_process = [_time(args, here) for _ in range(opts.in_process)]
            results[name] = {"in_process_s": in_process}
            print(f"{name:9} in-process  {', '.join(f'{s:.2f}' for s in in_process)} s", flush=True)
        for i, (name, args) in enumerate(COMMANDS.items()):
            if i == 0:
                results[name]["daemon_cold_s"] = cold = _time(args, env)  # starts the engine
                print(f"{name:9} daemon cold {cold:.2f} s (starts the engine)", flush=True)
            else:
                results[name]["daemon_cold_s"] = None  # the engine already runs
            warm = [_time(args, env) for _ in range(opts.repeat)]
            results[name]["daemon_warm_s"] = warm
            results[name]["daemon_warm_median_s"] = statistics.median(warm)
            print(
                f"{name:9} daemon warm {', '.join(f'{s:.2f}' for s in warm)} s "
                f"(median {statistics.median(warm):.2f} s)",
                flush=True,
            )
    finally:
        subprocess.run(
            [sys.executable, "-m", "mcp_server.cli", "daemon", "stop"], capture_output=True, env=env, check=False
        )
        shutil.rmtree(runtime, ignore_errors=True)

    import torch
    import triton

    report = {
        "what": "wall seconds of one `ptt` process, from start to exit",
        "commands": {name: " ".join(args).replace(str(ROOT) + "/", "") for name, args in COMMANDS.items()},
        "results": results,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "uptime_before": load_before,
            "uptime_after": _load(),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if opts.out:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
