"""Fork servers for the whole test run, forked from two zygotes instead of started as new interpreters.

A fork server started as its own process imports torch, triton and the jobs: ~3.5 CPU-seconds on a 2-core machine,
paid by every runner a test process makes (each xdist worker's shared runner, in both modes, and the runners the
sandbox, runner and pool tests build for their own policies). The ptt daemon avoids that cost with zygotes
(mcp_server/cli/daemon.py): processes that import what a fork server imports once, then fork a fork server on
request. The test run does the same: the controlling pytest process starts one zygote per Triton mode before the
workers start and tells them where through ``PTT_TEST_ZYGOTES``; every test process then installs the daemon's
starter as ``parent.start_fork_server``. A zygote that is missing or does not answer means the runner starts a fork
server of its own, as it always did. The zygotes exit when the controlling process does (their stdin closes).
``PTT_TEST_ZYGOTES=off`` keeps the exec'd fork servers for a run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

ENV = "PTT_TEST_ZYGOTES"

_started: list = []


def start() -> None:
    """In the controlling process: start both zygotes (they import in the background) and export their folder."""
    if os.environ.get(ENV):
        return
    from mcp_server.cli import daemon

    folder = Path(tempfile.mkdtemp(prefix="ptt-zyg-"))  # private (0700), short: socket paths are limited
    paths = daemon.Paths(folder / "tests")
    for interpret in (True, False):
        zygote = daemon._Zygote(paths, interpret)
        zygote.ensure()
        _started.append(zygote)
    # A zygote binds its socket before it imports torch: once both exist, a runner's request waits for the
    # imports instead of finding no zygote and starting a server of its own.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(paths.zygote(i).exists() for i in (True, False)):
        time.sleep(0.02)
    os.environ[ENV] = str(paths.base)


def attach() -> bool:
    """In every test process: fork servers come from the zygotes (falling back to new processes)."""
    base = os.environ.get(ENV)
    if not base or base == "off":
        return False
    from mcp_server.cli import daemon
    from mcp_server.engine.runner import parent

    parent.start_fork_server = daemon._ZygoteStarter(daemon.Paths(Path(base)))
    return True


def stop() -> None:
    """In the controlling process, at the end of the run: the zygotes, their sockets and their folder."""
    folder = _started[0].paths.base.parent if _started else None
    while _started:
        _started.pop().close()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
