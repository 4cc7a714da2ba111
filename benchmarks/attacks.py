"""Does the trust boundary hold? Every attack fixture run against a live runner, and what held, in one table.

    python benchmarks/attacks.py [--out benchmarks/results/<cpu|gpu>/attacks.json] [--memory-gb 1]

Each attack (tests/fixtures/validate/attacks/) is validated through the engine API with the shared
runner the CLI and MCP server use, beside a correct neighbour for the ones that go after processes. For
each: the verdict and its error kinds, whether a correct neighbour running at the same time still passed,
how long the next call took to answer, whether the fork server survived, and whether any process the
attack started outlived its job. The twins (good, copy_good) must pass. On a GPU the candidate's calls are
also traced at the CUDA level, so the forging attacks must show ``torch_compute`` / ``host_round_trip``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_server.engine.models import Severity  # noqa: E402
from mcp_server.engine.runner import Runner  # noqa: E402
from mcp_server.engine.runner.parent import SandboxPolicy  # noqa: E402
from mcp_server.engine.validate import validate  # noqa: E402

ATTACKS = ROOT / "tests" / "fixtures" / "validate" / "attacks"
PROBLEM = ATTACKS / "problem.py"
MARKER = "ptt-attack-spawn-marker"
# (fixture, reference, what must happen, run beside a slow correct neighbour)
PLAN = [
    ("good.py", PROBLEM, "pass", False),
    ("copy_good.py", ATTACKS / "copy_problem.py", "pass", False),
    ("dispatch_toggle.py", PROBLEM, "fail", False),
    ("numpy_host.py", PROBLEM, "fail", False),
    ("reads_reference.py", PROBLEM, "fail", False),
    ("seeded_table.py", PROBLEM, "fail", False),
    ("python_host.py", PROBLEM, "fail", False),
    ("storage_host.py", PROBLEM, "fail", False),
    ("storage_items.py", PROBLEM, "fail", False),
    ("unhooks_reads.py", PROBLEM, "fail", False),
    ("python_host_small.py", PROBLEM, "pass", False),
    ("serialized_host.py", PROBLEM, "fail", False),
    ("reduce_host.py", PROBLEM, "fail", False),
    ("base_type_host.py", PROBLEM, "fail", False),
    ("own_memory.py", PROBLEM, "fail", False),
    ("dlpack_host.py", PROBLEM, "fail", False),
    ("script_host.py", PROBLEM, "fail", False),
    ("per_element_python.py", PROBLEM, "fail", False),
    ("numpy_in_kernel.py", PROBLEM, "fail", False),
    ("rebinds_helper.py", PROBLEM, "fail", False),
    ("patches_language.py", PROBLEM, "fail", False),
    ("patches_interpreter.py", PROBLEM, "fail", False),
    ("serialized_small.py", PROBLEM, "pass", False),
    ("own_status.py", PROBLEM, "pass", False),
    ("lookup_table.py", ATTACKS / "sigmoid_problem.py", "fail", False),
    ("sigmoid_good.py", ATTACKS / "sigmoid_problem.py", "pass", False),
    ("late_thread.py", PROBLEM, "fail", False),
    ("leaks.py", PROBLEM, "fail", False),
    ("spawns.py", PROBLEM, "fail", True),
    ("kills_parents.py", PROBLEM, "fail", True),
    ("kills_everything.py", PROBLEM, "fail", True),
    ("memory_hog.py", PROBLEM, "fail", True),
]


def _validate(runner: Runner, candidate: Path, reference: Path):
    return validate(
        f"{reference}:reference",
        f"{candidate}:candidate",
        runner=runner,
        seeds=1,
        derive_shapes=False,
        determinism=False,
        timeout_s=120,
    )


def _leftovers() -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    count += MARKER.encode() in fh.read()
            except OSError:
                continue
    return count


def _next_call_s(runner: Runner) -> float:
    started = time.perf_counter()
    _validate(runner, ATTACKS / "good.py", PROBLEM)
    return round(time.perf_counter() - started, 2)


def run_one(runner: Runner, fixture: str, reference: Path, expect: str, neighbour: bool) -> dict:
    servers = {mode: s.proc.pid if s.proc else None for mode, s in runner._servers.items()}
    side: dict = {}
    thread = None
    if neighbour:

        def beside() -> None:
            side["result"] = _validate(runner, ATTACKS / "good_slow.py", PROBLEM)

        thread = threading.Thread(target=beside)
        thread.start()
        time.sleep(1.0)
    started = time.perf_counter()
    result = _validate(runner, ATTACKS / fixture, reference)
    wall = round(time.perf_counter() - started, 2)
    if thread is not None:
        thread.join()
    time.sleep(0.5)
    errors = sorted({f.kind.value for f in result.findings if f.severity is Severity.error})
    after = {mode: s.proc.pid if s.proc else None for mode, s in runner._servers.items()}
    row = {
        "attack": fixture,
        "expected": expect,
        "ok": result.ok,
        "errors": errors,
        "held": (result.ok if expect == "pass" else not result.ok),
        "seconds": wall,
        "neighbour_ok": side["result"].ok if "result" in side else None,
        "fork_server_survived": all(after[m] == servers[m] for m in servers if servers[m] is not None),
        "leftover_processes": _leftovers(),
        "next_call_s": _next_call_s(runner),
    }
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--memory-gb", type=float, default=1.0, help="per-job memory cap for the run")
    args = parser.parse_args()
    policy = SandboxPolicy.from_env()
    policy.memory_limit = int(args.memory_gb * (1 << 30))
    rows = []
    with Runner(sandbox=policy) as runner:
        _validate(runner, ATTACKS / "good.py", PROBLEM)  # start the fork servers before timing anything
        probe = runner.run("probe", {})
        with probe:
            sandbox = probe.sandbox or {}
            device = (probe.result or {}).get("name") or "cpu-interpreter"
        for fixture, reference, expect, neighbour in PLAN:
            row = run_one(runner, fixture, reference, expect, neighbour)
            rows.append(row)
            print(
                f"{row['attack']:<22} {'held' if row['held'] else 'BROKEN':<7} ok={row['ok']!s:<5} "
                f"errors={','.join(row['errors']) or '-':<45} neighbour={row['neighbour_ok']!s:<5} "
                f"server_survived={row['fork_server_survived']!s:<5} leftovers={row['leftover_processes']} "
                f"next_call={row['next_call_s']}s attack={row['seconds']}s",
                flush=True,
            )
    held = all(r["held"] and r["leftover_processes"] == 0 and r["neighbour_ok"] is not False for r in rows)
    summary = {
        "device": device,
        "sandbox": {k: sandbox.get(k) for k in ("pidns", "uid", "subreaper", "memory_limit", "namespace_error")},
        "all_held": held,
        "max_next_call_s": max(r["next_call_s"] for r in rows),
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
