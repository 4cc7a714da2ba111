"""Every Python block of the skill bundle runs under the Triton interpreter, and its kernels compile.

Each block runs as a script in its own process with ``TRITON_INTERPRET=1`` on CPU tensors, two at a
time (forked from one process that imported torch and triton once); each kernel they launch is then
compiled ahead of time for sm_90 in one more process, because the interpreter accepts code the
compiler rejects (see ``snippet_harness.py``). A block marked
``<!-- fragment -->`` on the line before its fence only has to be valid Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from skill_bundle import Block, python_blocks

HARNESS = Path(__file__).with_name("snippet_harness.py")
BLOCKS = python_blocks()
RUNNABLE = [b for b in BLOCKS if not b.fragment]
FRAGMENTS = [b for b in BLOCKS if b.fragment]
RUN_TIMEOUT_S = 300


def _env(interpret: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1" if interpret else "0"
    env.pop("PYTHONPATH", None)  # a block sees only the installed packages, as a reader's script would
    return env


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, list[str]]]:
    """label -> (run failure text or "", compile errors), for every runnable block."""
    workdir = tmp_path_factory.mktemp("skill_blocks")
    jobs: dict[str, dict[str, str]] = {}
    for i, block in enumerate(RUNNABLE):
        script = workdir / f"block_{i:02d}.py"
        script.write_text(block.code, encoding="utf-8")
        jobs[block.label] = {
            "script": str(script),
            "launches": str(workdir / f"block_{i:02d}.launches.json"),
            "log": str(workdir / f"block_{i:02d}.log"),
        }
    jobs_file = workdir / "jobs.json"
    jobs_file.write_text(json.dumps(list(jobs.values())), encoding="utf-8")
    proc = _harness("run-many", str(jobs_file), "2", str(RUN_TIMEOUT_S), cwd=workdir, interpret=True)
    ran = json.loads(proc.stdout.strip().splitlines()[-1])

    failures: dict[str, str] = {}
    plan: dict[str, list] = {}
    for label, job in jobs.items():
        rc = ran[job["script"]]["rc"]
        if rc != 0:
            log = Path(job["log"]).read_text(encoding="utf-8", errors="replace")
            failures[label] = f"exit status {rc}\n{log[-4000:]}"
        else:
            plan[label] = [job["script"], json.loads(Path(job["launches"]).read_text(encoding="utf-8"))]
    compiled: dict[str, list[str]] = {}
    if plan:
        plan_file = workdir / "plan.json"
        plan_file.write_text(json.dumps(plan), encoding="utf-8")
        proc = _harness("compile", str(plan_file), cwd=workdir, interpret=False)
        compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    return {label: (failures.get(label, ""), compiled.get(label, [])) for label in jobs}


def _harness(*args: str, cwd: Path, interpret: bool) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(HARNESS), *args],
        cwd=cwd,
        env=_env(interpret),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S * 2,
    )
    assert proc.returncode == 0, f"snippet_harness.py {args[0]} failed:\n{proc.stderr[-4000:]}"
    return proc


def test_the_bundle_has_runnable_python_blocks() -> None:
    assert len(RUNNABLE) >= 8, [b.label for b in BLOCKS]


@pytest.mark.slow  # all blocks run once per session, ~25 s on two cores
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.label)
def test_python_block_runs_under_the_interpreter(outcomes: dict, block: Block) -> None:
    failure, _ = outcomes[block.label]
    assert not failure, f"{block.label} failed under TRITON_INTERPRET=1:\n{failure}"


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.label)
def test_kernels_of_python_block_compile_for_sm90(outcomes: dict, block: Block) -> None:
    failure, errors = outcomes[block.label]
    if failure:
        pytest.fail(f"{block.label} did not run, so its kernels were not compiled")
    assert not errors, f"{block.label}:\n" + "\n".join(errors)


@pytest.mark.parametrize("block", FRAGMENTS, ids=lambda b: b.label)
def test_fragment_is_valid_python(block: Block) -> None:
    try:
        compile(block.code, block.label, "exec")
    except SyntaxError as exc:
        pytest.fail(f"{block.label}: {exc}")
