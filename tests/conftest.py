"""Shared test configuration: the `gpu` marker skips without a CUDA device, one runner per session, and the
worker pool the HTTP and eval tests share.

Under pytest-xdist (`make test`) each worker is its own session with its own runner; on a GPU machine the
`gpu` tests of all workers take turns (a file lock), so that no timing shares the device with another test.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import torch
import zygotes
from file_order import DURATIONS_FILE, file_of, longest_files_first, merge_durations, recorded_durations

if TYPE_CHECKING:
    from mcp_server.engine.pool import WorkerPool
    from mcp_server.engine.runner import Runner

HAS_GPU = torch.cuda.is_available()

# Triton chooses between its compiler and its interpreter when a function is decorated with @triton.jit,
# including the functions of triton.language itself. Without a GPU the tests that run kernels in this
# process need the interpreter, so the choice is made here, before any test module imports triton.
# (The engine's own children pick their mode per job and are unaffected.)
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # The kernels tests run in this process take the interpreter the engine's children use for helper calls
    # (mcp_server/engine/interp/nested.py: no re-patching of triton.language per call) and scalar loop bounds
    # (scalars.py: no NumPy scalar-conversion warning, no error from NumPy 2.4 on), bf16 casts that round as
    # the GPU rounds them (rounding.py), bf16 arithmetic on values rather than bit patterns (bf16math.py) and
    # bf16 atomic adds (atomics.py), and fp8 casts and refusals as on an H100 (fp8.py).
    from mcp_server.engine.interp import atomics, bf16math, fastpaths, fp8, nested, rounding, scalars

    nested.install()
    scalars.install()
    fastpaths.install()
    rounding.install()
    bf16math.install()
    fp8.install()
    atomics.install()

# `ptt` run as a process by a test stays in that process; tests/cli/test_daemon.py turns the daemon on itself.
os.environ.setdefault("PTT_NO_DAEMON", "1")


@pytest.fixture(scope="session")
def runner():
    """The process-wide runner (the one the CLI and the MCP tools use when given none): its fork servers
    start once per session instead of once per test directory."""
    from mcp_server.engine.runner import shared_runner

    return shared_runner()


@pytest.fixture(scope="session")
def serving_runner() -> Iterator[Runner]:
    """The runner under the worker pool of the HTTP and eval tests. On a GPU machine it hides every GPU from its
    jobs (CUDA_VISIBLE_DEVICES=""), so those tests judge the same way there as in CI; the GPU pool has its own
    tests (tests/engine/test_gpu_pool.py, marked gpu). Without a GPU there is nothing to hide and the session's
    shared runner serves, which saves starting fork servers."""
    from mcp_server.engine.runner import Runner, shared_runner

    if not HAS_GPU:
        yield shared_runner()
        return
    with Runner(base_env={"CUDA_VISIBLE_DEVICES": ""}) as r:
        yield r


@pytest.fixture(scope="session")
def pool(serving_runner: Runner) -> Iterator[WorkerPool]:
    """One worker pool for the HTTP and eval tests (starting fork servers costs seconds)."""
    from mcp_server.engine.pool import discover

    with discover(serving_runner, cpu_slots=4) as p:
        yield p


_GUARDED_SIGNALS = ("SIGINT", "SIGCHLD", "SIGTERM", "SIGPIPE")


def _kernel_signal_state() -> dict[str, int]:
    """Whether SIGINT, SIGTERM and SIGCHLD are ignored or blocked as the kernel has it (a C library can change
    that behind Python's back). Other signals are left out: Python and libraries adjust SIGPIPE and SIGXFSZ."""
    import signal

    bits = sum(1 << (int(s) - 1) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD))
    try:
        with open("/proc/self/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        return {k: int(fields[k], 16) & bits for k in ("SigIgn", "SigBlk")}
    except (OSError, KeyError, ValueError):
        return {}


@pytest.fixture(autouse=True)
def _signals_left_as_found() -> Iterator[None]:
    """A test that leaves this process's signal handling changed fails (and it is put back). An ignored SIGCHLD
    makes every later subprocess exit 0 to Popen; an ignored SIGINT is inherited by the processes tests start."""
    import signal

    before = {name: signal.getsignal(getattr(signal, name)) for name in _GUARDED_SIGNALS}
    kernel_before = _kernel_signal_state()
    yield
    kernel_after = _kernel_signal_state()
    assert kernel_after == kernel_before, (
        f"the test left the kernel's signal masks changed: {kernel_before} → {kernel_after}"
    )
    changed = {}
    for name, handler in before.items():
        now = signal.getsignal(getattr(signal, name))
        if now != handler:
            changed[name] = now
            signal.signal(getattr(signal, name), handler)
    assert not changed, f"the test left signal handlers changed: {changed}"


@pytest.fixture(autouse=True)
def _one_gpu_test_at_a_time(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if not (HAS_GPU and "gpu" in request.keywords and os.environ.get("PYTEST_XDIST_WORKER")):
        yield
        return
    # Each worker's base temp is <root>/popen-gwN: the lock lives in the root the workers share.
    lock = tmp_path_factory.getbasetemp().parent / "gpu-tests.lock"
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Files longest first (tests/file_order.py says why), among the tests left once -m and -k have deselected:
    # a file missing from the durations table weighs its number of tests, which deselection changes.
    order = longest_files_first([item.nodeid for item in items], recorded_durations(DURATIONS_FILE))
    items[:] = [items[i] for i in order]
    if HAS_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


_file_seconds: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    # Fork servers forked from zygotes shared by the whole run (tests/zygotes.py says why). The controlling
    # process (an xdist controller, or a plain run) starts them before any worker exists; workers inherit the env.
    if not hasattr(config, "workerinput"):
        zygotes.start()
    zygotes.attach()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        zygotes.stop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("PTT_RECORD_DURATIONS"):
        f = file_of(report.nodeid)
        _file_seconds[f] = _file_seconds.get(f, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With PTT_RECORD_DURATIONS set, the controlling process (not an xdist worker) merges this run's seconds per
    file into tests/file_durations.json."""
    if _file_seconds and not hasattr(session.config, "workerinput"):
        merge_durations(DURATIONS_FILE, _file_seconds, session.config.rootpath)


# Tests not marked gpu launch their kernels in the test process under the interpreter, which Triton enables only
# when no GPU is visible at import: with one visible they would fail for that reason alone.
_GPU_VISIBLE = (
    "tests not marked gpu run as in CI, without a GPU; this process sees one. Run them with the GPU hidden and "
    'the gpu tests on their own: CUDA_VISIBLE_DEVICES= pytest -m "not gpu" ...; pytest -m gpu ... '
    "(`make test` runs both passes)"
)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if HAS_GPU and "gpu" not in item.keywords:
        pytest.fail(_GPU_VISIBLE, pytrace=False)
