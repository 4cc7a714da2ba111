"""The fork server: a process with torch and triton imported and CUDA untouched, that forks one child per job.

Protocol (JSON lines). The parent writes to our stdin::

    {"op": "start", "id": 7, "job_dir": "/tmp/…", "env": {"K": "V"}, "cwd": "/x"}

and reads from our stdout::

    {"event": "ready", "pid": 123, "torch": "2.11.0", "triton": "3.6.0", "import_s": 2.1}
    {"event": "started", "id": 7, "pid": 456}
    {"event": "exited", "id": 7, "pid": 456, "status": 0}        # raw waitpid status
    {"event": "error", "id": 7, "message": "…"}                    # the fork itself failed

The server is single-threaded (a selector over stdin and a SIGCHLD wake-up pipe), so forking from it is
safe. Each child points fds 0/1/2 at /dev/null and the job's log files, closes the protocol pipes and
becomes the job's supervisor (:mod:`mcp_server.engine.runner.sandbox`), which confines and runs a worker
that applies the job's environment and runs :func:`mcp_server.engine.runner.child.main`. The pid the
parent learns is the supervisor's: SIGTERM to it ends the job and everything it started. We adopt
processes whose supervisor died (``PR_SET_CHILD_SUBREAPER``) and kill them; when our stdin closes (the
parent went away) every live job is killed and we exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import sys
import time

PRELOAD = (
    "torch._dynamo",
    "torch.utils._python_dispatch",
    "triton.runtime.interpreter",
    "triton.compiler",
    "triton.testing",
    "mcp_server.engine.runner.child",
    "mcp_server.engine.jobs.common",
    "mcp_server.engine.jobs.trace",
    "mcp_server.engine.jobs.validate_jobs",
    "mcp_server.engine.jobs.compile_job",
    "mcp_server.engine.jobs.bench_job",
)


def _write(fd: int, message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _run_child(job: dict, keep_fds: set[int]) -> int:
    """In the forked child: become the job's supervisor (see ``sandbox``). Never returns to the server loop."""
    job_dir = job["job_dir"]
    null_fd = os.open(os.devnull, os.O_RDONLY)
    out_fd = os.open(os.path.join(job_dir, "stdout.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err_fd = os.open(os.path.join(job_dir, "stderr.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(null_fd, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    for fd in (null_fd, out_fd, err_fd, *keep_fds):
        if fd > 2:
            with contextlib.suppress(OSError):
                os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from mcp_server.engine.runner.sandbox import supervise

    return supervise(job, _run_worker)


def _run_worker(job: dict, enforced: dict) -> int:
    """In the worker (the supervisor's child, already confined): the job's environment, then the job."""
    os.environ.update(job.get("env") or {})
    for name in job.get("unset") or ():
        os.environ.pop(name, None)
    if job.get("cwd"):
        try:
            os.chdir(job["cwd"])
        except OSError:
            os.chdir(job["job_dir"])
    # Python-level streams still point at fds 1 and 2, now the job's logs.
    from mcp_server.engine.runner.child import main

    return main(job["job_dir"])


def gpu_device_nodes() -> bool:
    """Whether this machine exposes a GPU driver's device files (NVIDIA, ROCm, or WSL's)."""
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd") or os.path.exists("/dev/dxg"))


def preload() -> None:
    """Import what the jobs of this process's mode need, once, for every child it forks (fork servers and the
    daemon's zygotes alike). CUDA stays uninitialised: children initialise it.

    torch._dynamo (seconds of import) is preloaded only where jobs use it: in a compiled-mode server on a
    machine with GPU device files, whose bench and audit jobs build torch.compile baselines. The op recorder's
    dispatch mode no longer needs it (jobs.recorder defers torch's dynamo-disable wrapper), and a job that
    calls torch.compile elsewhere imports it itself."""
    import importlib

    import numpy  # noqa: F401
    import torch  # noqa: F401
    import triton.language  # noqa: F401

    compiled = os.environ.get("TRITON_INTERPRET") != "1"
    skip = set() if compiled and gpu_device_nodes() else {"torch._dynamo"}
    for name in PRELOAD:
        if name in skip:
            continue
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    # Triton imports Gluon on a process's first launch, interpreted or compiled (its argument specialisation
    # does): ~0.07 s on a 2-core machine, a fifth of a small validate job, paid here once instead of per child.
    with contextlib.suppress(Exception):
        importlib.import_module("triton.experimental.gluon")
    # The dispatcher's table of torch ops' kernels as torch left it, before any user code (jobs.recorder's
    # replaced_kernels compares with it): ~0.06 s, paid here once.
    with contextlib.suppress(Exception):
        from mcp_server.engine.jobs import recorder

        recorder.snapshot_kernels()
    if compiled:
        # A compiled launch or compile in a fresh child would otherwise hash Triton's whole source tree for its
        # cache key (triton_key: ~0.5 s on an H100 host) and ask ptxas its version. Both are cached in this
        # process and inherited by every child; neither touches CUDA.
        with contextlib.suppress(Exception):
            from triton.runtime.cache import triton_key

            triton_key()
        with contextlib.suppress(Exception):
            from triton.backends.nvidia.compiler import get_ptxas_version

            get_ptxas_version()


def serve() -> None:
    started = time.perf_counter()
    preload()
    import torch
    import triton

    from mcp_server.engine.runner import sandbox

    # Adopt every process a job's supervisor leaves behind (killed below). No PR_SET_PDEATHSIG here: it
    # fires when the parent *thread* that started us exits, and the parent starts us from any thread; we
    # exit when our stdin closes instead, which happens when the parent process dies.
    sandbox.prctl(sandbox.PR_SET_CHILD_SUBREAPER, 1)

    in_fd = sys.stdin.fileno()
    out_fd = os.dup(sys.stdout.fileno())
    # Nothing but the protocol may reach the parent through our stdout.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    selector = selectors.DefaultSelector()
    selector.register(in_fd, selectors.EVENT_READ, "stdin")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    protocol_fds = {in_fd, out_fd, wake_r, wake_w, selector.fileno()}

    live: dict[int, int] = {}  # pid -> job id
    _write(
        out_fd,
        {
            "event": "ready",
            "pid": os.getpid(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "import_s": round(time.perf_counter() - started, 3),
        },
    )

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job_id = live.pop(pid, None)
            if job_id is not None:
                _write(out_fd, {"event": "exited", "id": job_id, "pid": pid, "status": status})

    def sweep_orphans() -> None:
        """Processes re-parented to us whose supervisor died: no job owns them any more."""
        for pid, (state, _) in sandbox.descendants(os.getpid()).items():
            if state != "Z" and pid not in live and _ppid(pid) == os.getpid():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    buffer = b""
    last_sweep = time.monotonic()
    while True:
        if time.monotonic() - last_sweep > 1.0:
            last_sweep = time.monotonic()
            sweep_orphans()
        for key, _ in selector.select(timeout=1.0):
            if key.data == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                continue
            chunk = os.read(in_fd, 65536)
            if not chunk:  # the parent is gone: take every child with us
                for pid in list(live):
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signal.SIGKILL)
                os._exit(0)
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                job = json.loads(line)
                if job.get("op") != "start":
                    continue
                try:
                    pid = os.fork()
                except OSError as exc:
                    _write(out_fd, {"event": "error", "id": job["id"], "message": f"fork failed: {exc}"})
                    continue
                if pid == 0:
                    code = 70
                    try:
                        code = _run_child(job, protocol_fds)
                    except BaseException:
                        import traceback

                        traceback.print_exc()
                    finally:
                        os._exit(code)
                live[pid] = job["id"]
                _write(out_fd, {"event": "started", "id": job["id"], "pid": pid})
        reap()


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return int(data[data.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


if __name__ == "__main__":
    serve()
