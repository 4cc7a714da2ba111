"""The runner: children are isolated, killed as a group on timeout, and a dead fork server is replaced."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from mcp_server.engine.models import FindingKind
from mcp_server.engine.runner import Runner
from mcp_server.engine.validate import validate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_timeout_kills_the_whole_process_group(runner, tmp_path):
    for name in ("add_spawns_and_hangs.py", "add_problem.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    result = validate(
        f"{tmp_path / 'add_problem.py'}:reference",
        f"{tmp_path / 'add_spawns_and_hangs.py'}:candidate",
        runner=runner,
        timeout_s=12,
    )
    assert any(f.kind is FindingKind.timeout for f in result.findings)
    helper = int((tmp_path / "add_spawns_and_hangs.pid").read_text())
    deadline = time.time() + 10
    while _alive(helper) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(helper)


def test_the_user_code_never_runs_in_the_parent(runner, fx):
    import sys

    before = set(sys.modules)
    assert validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner).ok
    loaded = set(sys.modules) - before
    assert not any(name.startswith(("add_good", "add_problem", "_add_kernel")) for name in loaded)


def test_a_killed_fork_server_is_replaced_on_the_next_job(fx):
    with Runner() as fresh:
        assert validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=fresh).ok
        for server in fresh._servers.values():
            if server.proc is not None:
                os.kill(server.proc.pid, signal.SIGKILL)
                server.proc.wait()
        assert validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=fresh).ok


def test_children_get_their_own_environment_and_the_parent_keeps_its(runner):
    outcome = runner.run("mcp_server.engine.jobs.probe:run", {}, env={"TRITON_INTERPRET": "1"})
    with outcome:
        assert outcome.ok and outcome.result["interpreter"] is True
    outcome = runner.run("mcp_server.engine.jobs.probe:run", {}, env={"TRITON_INTERPRET": None})
    with outcome:
        assert outcome.ok and outcome.result["interpreter"] is False
