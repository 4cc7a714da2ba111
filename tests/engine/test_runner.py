"""The runner: children are isolated, killed as a group on timeout, and a dead fork server is replaced."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from mcp_server.engine.device import probe
from mcp_server.engine.models import FindingKind
from mcp_server.engine.runner import Runner
from mcp_server.engine.validate import validate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"


def _running(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (a job's pids are namespaced: look them up by name)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if marker.encode() not in fh.read():
                    continue
            with open(f"/proc/{name}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(name))
        except OSError:
            continue
    return found


def _warm(runner: Runner) -> bool:
    """Start the fork server that validate's jobs use, if it is not running yet; whether they run interpreted."""
    device = probe(runner)
    outcome = runner.run("probe", {}, env=device.job_env())
    with outcome:
        assert outcome.ok, outcome.failure
    return device.interpreter


@pytest.mark.slow
def test_a_timeout_kills_the_whole_process_group(runner, tmp_path):
    for name in ("add_spawns_and_hangs.py", "add_problem.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    # The helper's command line names this test's folder, so only its own helper matches.
    source = (tmp_path / "add_spawns_and_hangs.py").read_text()
    marker = f"# {tmp_path.name}"
    (tmp_path / "add_spawns_and_hangs.py").write_text(
        source.replace('"import time; time.sleep(600)"', f'"import time; time.sleep(600)  {marker}"')
    )
    # The fork server starts first (its start counts within a job's limit); the limit leaves the one-case
    # reference ample time (a GPU job's child starts CUDA first).
    interpreted = _warm(runner)
    result = validate(
        f"{tmp_path / 'add_problem.py'}:reference",
        f"{tmp_path / 'add_spawns_and_hangs.py'}:candidate",
        runner=runner,
        seeds=1,
        derive_shapes=False,
        timeout_s=6 if interpreted else 12,
    )
    assert any(f.kind is FindingKind.timeout for f in result.findings)
    assert (tmp_path / "add_spawns_and_hangs.pid").exists()  # the helper did start
    assert _running(marker) == []


def test_the_user_code_never_runs_in_the_parent(runner, fx):
    import sys

    before = set(sys.modules)
    assert validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner).ok
    loaded = set(sys.modules) - before
    assert not any(name.startswith(("add_good", "add_problem", "_add_kernel")) for name in loaded)


@pytest.mark.slow
def test_a_killed_fork_server_is_replaced_on_the_next_job(runner, fx):
    def good():
        return validate(
            fx("add_problem.py", "reference"),
            fx("add_good.py", "candidate"),
            runner=runner,
            seeds=1,
            derive_shapes=False,
        )

    first = good()
    assert first.ok
    # The fork server that ran the jobs (the session's runner has one per mode; the other one is left alone).
    server = runner._servers[first.interpreter]
    killed = server.proc
    assert killed is not None
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert good().ok
    assert server.proc is not killed and server.proc.poll() is None


def test_children_get_their_own_environment_and_the_parent_keeps_its(runner):
    outcome = runner.run("mcp_server.engine.jobs.probe:run", {}, env={"TRITON_INTERPRET": "1"})
    with outcome:
        assert outcome.ok and outcome.result["interpreter"] is True
    outcome = runner.run("mcp_server.engine.jobs.probe:run", {}, env={"TRITON_INTERPRET": None})
    with outcome:
        assert outcome.ok and outcome.result["interpreter"] is False


def test_jobs_are_named_in_one_registry_with_typed_parameters_and_results(runner):
    import pytest

    from mcp_server.engine.jobs import registry

    assert set(registry.JOBS) == {
        "probe",
        "validate.reference",
        "validate.candidate",
        "compile",
        "compile.frontend",
        "bench",
        "bench.peaks",
        "audit",
    }
    assert registry.lookup("mcp_server.engine.jobs.probe:run") is registry.PROBE
    with pytest.raises(ValueError, match=r"validate\.candidate"):
        runner.run("validate.candidate", {"candidate": {"path": "x.py"}, "seeds": [1]})
    with pytest.raises(ValueError):
        registry.PROBE.check_result({"torch": "2", "triton": "3"})  # fields missing: not a probe result
    outcome = runner.run(registry.PROBE.name, {}, env={"TRITON_INTERPRET": "1"})
    with outcome:
        assert outcome.ok and outcome.result["interpreter"] is True


def test_sandbox_settings_come_from_the_environment_and_bad_ones_name_the_fix(monkeypatch):
    import pytest

    from mcp_server.engine.errors import UsageError
    from mcp_server.engine.runner.parent import SandboxPolicy

    monkeypatch.setenv("PTT_SANDBOX_UID", "off")
    monkeypatch.setenv("PTT_SANDBOX_NAMESPACES", "off")
    monkeypatch.setenv("PTT_JOB_MEMORY_GB", "2")
    policy = SandboxPolicy.from_env()
    assert (policy.uid, policy.namespaces, policy.memory_cap()) == (None, False, 2 << 30)
    monkeypatch.setenv("PTT_JOB_MEMORY_GB", "lots")
    with pytest.raises(UsageError, match="PTT_JOB_MEMORY_GB"):
        SandboxPolicy.from_env()


@pytest.mark.parametrize(("forked", "restarted"), [(True, True), (False, False)])
def test_a_young_dead_fork_server_is_restarted_only_if_it_had_forked_a_job(tmp_path, monkeypatch, forked, restarted):
    # Killed right after forking a job (an attack on its parents), it is a working server: start the next one now.
    # One that dies before forking any is broken: a restart loop would only repeat that.
    import json
    import threading

    from mcp_server.engine.runner import parent

    class DeadServer:
        def __init__(self, events):
            self.stdout = [json.dumps(e).encode() + b"\n" for e in events]

        def wait(self, timeout=None):
            return -9

    events = [{"event": "ready"}] + ([{"event": "started", "id": 1, "pid": 12345}] if forked else [])
    server = parent._ForkServer(True, tmp_path / "server.log")
    server.pending[1] = parent._Pending(1)
    server.proc = proc = DeadServer(events)
    server.started_at = parent.time.monotonic()  # it lived well under _RESTART_MIN_LIFE_S
    calls = threading.Event()
    monkeypatch.setattr(server, "_restart_quietly", calls.set)
    server._read_events(proc)
    assert calls.wait(2.0 if restarted else 0.2) is restarted
    assert server.pending[1].exited.is_set()  # the job on it is failed either way
