"""The test run's fork servers come from the zygotes the controlling process started (tests/zygotes.py)."""

from __future__ import annotations

import os

import zygotes

from mcp_server.cli import daemon
from mcp_server.engine.runner.forkserver import _ppid


def test_the_shared_runners_fork_server_is_forked_by_a_zygote_not_started_here(runner):
    assert os.environ.get(zygotes.ENV), "the controlling process exports the zygotes' folder to every test process"
    if os.environ[zygotes.ENV] == "off":
        return  # exec'd fork servers asked for: nothing to check
    outcome = runner.run("mcp_server.engine.jobs.probe:run", {}, env={"TRITON_INTERPRET": "1"})
    with outcome:
        assert outcome.ok
    server = runner._servers[True].proc
    assert isinstance(server, daemon._Forked)
    assert _ppid(server.pid) != os.getpid()
    assert "no zygote" not in runner._servers[True].log_path.read_text(errors="replace")
