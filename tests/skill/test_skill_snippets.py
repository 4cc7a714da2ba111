"""Every Python block of the skill bundle runs under the Triton interpreter, and its kernels compile.

Each block runs as a script in its own process with ``TRITON_INTERPRET=1`` on CPU tensors, two at a
time (forked from one process that imported torch and triton once); each kernel they launch is then
compiled ahead of time for sm_90 in one more process, with the interpreter off, because the interpreter
accepts code the compiler rejects. One harness process does both, forking those processes from its own
torch import (see ``snippet_harness.py``). A block marked ``<!-- fragment -->`` on the line before its
fence only has to be valid Python.
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


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the harness sets it for each step
    # The blocks are written for CPU tensors under the interpreter: on a GPU host they run as they do in CI.
    env["CUDA_VISIBLE_DEVICES"] = ""
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
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "run-and-compile", str(jobs_file), "2", str(RUN_TIMEOUT_S)],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S * 3,
    )
    assert proc.returncode == 0, f"snippet_harness.py run-and-compile failed:\n{proc.stderr[-4000:]}"
    ran = json.loads(proc.stdout.strip().splitlines()[-1])

    out: dict[str, tuple[str, list[str]]] = {}
    for label, job in jobs.items():
        outcome = ran[job["script"]]
        failure = ""
        if outcome["rc"] != 0:
            log = Path(job["log"]).read_text(encoding="utf-8", errors="replace")
            failure = f"exit status {outcome['rc']}\n{log[-4000:]}"
        out[label] = (failure, outcome["errors"])
    return out


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
