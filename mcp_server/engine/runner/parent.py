"""The trusted parent of process isolation: starts fork servers, submits jobs, enforces limits.

A job is a function of ours, named in :mod:`mcp_server.engine.jobs.registry`, that runs in a fresh child
forked from a fork server; it loads the user's files there. The parent never imports user code. What a
child sends back is read with safe loaders only (JSON checked against the job's result model,
``torch.load(weights_only=True)``): a child cannot run code here. What is enforced on the child (session,
subreaper, namespaces, uid, memory cap) is decided here per job, carried out by
:mod:`mcp_server.engine.runner.sandbox`, and described in docs/sandbox.md.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mcp_server.engine.errors import UsageError
from mcp_server.engine.jobs import registry
from mcp_server.engine.models import Failure, FindingKind
from mcp_server.engine.runner.sandbox import SANDBOX_FILE

DEFAULT_TIMEOUT_S = 120.0
STDERR_TAIL_LINES = 30
# A child's result.json larger than this is not read (a hostile child could try to exhaust us).
MAX_RESULT_BYTES = 64 * 1024 * 1024
_READY_TIMEOUT_S = 180.0
# After SIGTERM to a job's supervisor, how long it has to sweep its tree before the group is SIGKILLed.
_TERM_GRACE_S = 5.0
# A fork server that dies after living this long, or after forking a job, is restarted at once; one that dies
# sooner without having forked one is broken, and the next job's start reports why.
_RESTART_MIN_LIFE_S = 5.0
# The unprivileged uid/gid jobs run as when every file they need is readable by others ("nobody").
SANDBOX_UID = 65534
# Environment variables that look like secrets never reach a child (e.g. the HTTP server's bearer token).
SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE_KEY|_AUTH", re.I)
SECRET_ENV_NAMES = frozenset({"PTT_SERVE_TOKEN"})


def scrub_env(env: dict[str, str]) -> dict[str, str]:
    """The environment without anything that looks like a secret."""
    return {k: v for k, v in env.items() if k not in SECRET_ENV_NAMES and not SECRET_ENV.search(k)}


def _memory_total() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass
class SandboxPolicy:
    """What the runner enforces on each job (see docs/sandbox.md). Defaults come from the environment.

    ``uid``: "auto" runs jobs as ``SANDBOX_UID`` when every file they need is readable by others (else as
    ourselves), None never switches, a number forces that uid. ``namespaces``: a PID and mount namespace
    per job (private /proc) where the kernel allows. ``memory_fraction`` / ``memory_limit``: resident
    memory cap of a job's whole process tree (bytes; the fraction of RAM when no limit is given; 0 = none).
    """

    uid: int | str | None = "auto"
    namespaces: bool = True
    memory_fraction: float = 0.5
    memory_limit: int | None = None

    @classmethod
    def from_env(cls) -> SandboxPolicy:
        policy = cls()
        raw_uid = os.environ.get("PTT_SANDBOX_UID", "auto").strip().lower()
        policy.namespaces = os.environ.get("PTT_SANDBOX_NAMESPACES", "on").strip().lower() not in ("off", "0", "no")
        try:
            policy.uid = None if raw_uid in ("off", "none", "no") else ("auto" if raw_uid == "auto" else int(raw_uid))
            if os.environ.get("PTT_JOB_MEMORY_GB"):
                policy.memory_limit = int(float(os.environ["PTT_JOB_MEMORY_GB"]) * (1 << 30))
        except ValueError:
            raise UsageError(
                "PTT_SANDBOX_UID must be auto, off or a uid number, and PTT_JOB_MEMORY_GB a number of GiB "
                f"(got {os.environ.get('PTT_SANDBOX_UID')!r}, {os.environ.get('PTT_JOB_MEMORY_GB')!r})"
            ) from None
        return policy

    def memory_cap(self) -> int | None:
        if self.memory_limit is not None:
            return self.memory_limit or None
        total = _memory_total()
        return int(total * self.memory_fraction) if total and self.memory_fraction > 0 else None


def _others_can(path: str, need: int) -> bool:
    """Whether a process of another uid can reach ``path`` (x on every ancestor) and has ``need`` on it."""
    try:
        real = os.path.realpath(path)
        mode = os.stat(real).st_mode
    except OSError:
        return True  # nothing there to read (a path that does not exist fails alike for everyone)
    if (mode & need) != need:
        return False
    parent = os.path.dirname(real)
    while parent and parent != os.path.dirname(parent):
        try:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        parent = os.path.dirname(parent)
    return True


_RX = stat.S_IROTH | stat.S_IXOTH


_SERVER_DIED = "the fork server exited"


class RunnerError(RuntimeError):
    """The isolation machinery itself failed (not the user's code)."""


@dataclass
class JobOutcome:
    """What came back from one child."""

    result: dict[str, Any] | None
    failure: Failure | None
    wall_s: float
    job_dir: Path
    pid: int | None = None
    stderr_tail: str = ""
    stdout_tail: str = ""
    # The job found the caller's input at fault (raised as UsageError by the engine).
    usage_error: str | None = None
    # What the job's supervisor enforced and saw (sandbox.json; see runner.sandbox).
    sandbox: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and self.result is not None

    def path(self, name: str) -> Path:
        return self.job_dir / name

    def cleanup(self) -> None:
        shutil.rmtree(self.job_dir, ignore_errors=True)

    def __enter__(self) -> JobOutcome:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


@dataclass
class _Pending:
    job_id: int
    started: threading.Event = field(default_factory=threading.Event)
    exited: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    status: int | None = None
    error: str | None = None


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _read_text(path: Path, limit: int = 256 * 1024) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def popen_fork_server(env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """A new interpreter running the fork server (it imports torch and triton itself)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mcp_server.engine.runner.forkserver"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
        start_new_session=True,
    )


# Starts one fork-server process from its full environment (TRITON_INTERPRET gives the mode) and its log file,
# and returns a Popen-like object (stdin, stdout, poll, wait, kill). The ptt daemon swaps in one that forks
# the server from a process that has already imported torch and triton.
start_fork_server: Callable[[dict[str, str], IO[bytes]], Any] = popen_fork_server


class _ForkServer:
    """One fork-server process and the jobs in flight on it."""

    def __init__(self, interpret: bool, log_path: Path):
        self.interpret = interpret
        self.log_path = log_path
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pending: dict[int, _Pending] = {}
        self.ready = threading.Event()
        self.info: dict[str, Any] = {}
        self.started_at = time.monotonic()

    def ensure(self) -> subprocess.Popen[bytes]:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                return self.proc
            self.ready.clear()
            env = scrub_env(dict(os.environ))
            # Triton decides between its JIT and its interpreter when a kernel is decorated, and the fork
            # server imports triton.language (whose own functions are decorated) once: so one server per mode.
            if self.interpret:
                env["TRITON_INTERPRET"] = "1"
            else:
                env.pop("TRITON_INTERPRET", None)
            env["PYTHONUNBUFFERED"] = "1"
            root = str(Path(__file__).resolve().parents[3])
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the process
            self.proc = start_fork_server(env, log)
            log.close()
            self.started_at = time.monotonic()
            threading.Thread(target=self._read_events, args=(self.proc,), daemon=True).start()
            proc = self.proc
        if not self.ready.wait(_READY_TIMEOUT_S):
            raise RunnerError(f"the fork server did not start within {_READY_TIMEOUT_S:.0f} s; see {self.log_path}")
        if proc.poll() is not None:
            raise RunnerError(f"the fork server exited at start:\n{tail(_read_text(self.log_path))}")
        return proc

    def _read_events(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        forked = False  # it started a job: a working server, whatever killed it later
        for raw in proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "ready":
                self.info = event
                self.ready.set()
                continue
            pending = self.pending.get(event.get("id", -1))
            if pending is None:
                continue
            if kind == "started":
                forked = True
                pending.pid = event["pid"]
                pending.started.set()
            elif kind == "exited":
                pending.status = event["status"]
                pending.exited.set()
                pending.started.set()
            elif kind == "error":
                pending.error = event.get("message", "fork failed")
                pending.started.set()
                pending.exited.set()
        # The fork server is gone: every job still waiting fails as a crash of the machinery.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)  # reaped, so ensure() starts a new one
        lived = time.monotonic() - self.started_at
        self.ready.set()
        for pending in list(self.pending.values()):
            if not pending.exited.is_set():
                pending.error = pending.error or _SERVER_DIED
                pending.started.set()
                pending.exited.set()
        # It died under us (not closed by us): start a fresh one now, so the next job does not wait for it.
        if self.proc is proc and (lived > _RESTART_MIN_LIFE_S or forked):
            threading.Thread(target=self._restart_quietly, daemon=True).start()

    def _restart_quietly(self) -> None:
        with contextlib.suppress(RunnerError, OSError):
            self.ensure()

    def submit(self, message: dict[str, Any], pending: _Pending) -> None:
        proc = self.ensure()
        self.pending[pending.job_id] = pending
        try:
            with self.write_lock:
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(message) + "\n").encode())
                proc.stdin.flush()
        except OSError as exc:
            self.pending.pop(pending.job_id, None)
            raise RunnerError(f"could not reach the fork server: {exc}") from exc

    def close(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()


class Runner:
    """Runs jobs in isolated children of fork servers. Thread-safe; jobs may run concurrently.

    There is one fork server per Triton mode (compiled kernels, or the interpreter), started on first use.
    """

    def __init__(
        self,
        *,
        base_env: dict[str, str | None] | None = None,
        tmp_root: str | None = None,
        sandbox: SandboxPolicy | None = None,
    ):
        self._base_env = dict(base_env or {})
        self._tmp_root = Path(tmp_root or _default_tmp_root())
        self._tmp_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.sandbox = sandbox or SandboxPolicy.from_env()
        self._static_readable: bool | None = None
        self._lock = threading.Lock()
        self._retry_lock = threading.Lock()
        self._next_id = 1
        self._servers = {
            mode: _ForkServer(mode, self._tmp_root / f"forkserver{'-interp' if mode else ''}.log")
            for mode in (False, True)
        }

    @property
    def info(self) -> dict[str, Any]:
        """What the (compiled-mode) fork server reported when it started: versions and import time."""
        return self._servers[False].info or self._servers[True].info

    def close(self) -> None:
        for server in self._servers.values():
            server.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sandbox -----------------------------------------------------------------------------------
    def _sandbox_uid(self, user_files: list[str] | tuple[str, ...], cwd: str | None) -> int | None:
        """The uid a job runs as: unprivileged when we are root and everything it reads is readable."""
        policy = self.sandbox.uid
        if policy is None or os.geteuid() != 0:
            return None
        if policy != "auto":
            return int(policy)
        if self._static_readable is None:
            roots = [str(Path(__file__).resolve().parents[3]), sys.prefix, sys.base_prefix]
            roots += [p for p in sys.path if p and os.path.isdir(p)]
            ok = all(_others_can(p, _RX) for p in roots)
            devices = glob.glob("/dev/nvidia*")
            need_rw = stat.S_IROTH | stat.S_IWOTH
            ok = ok and all(_others_can(d, need_rw) for d in devices if not os.path.isdir(d))
            if ok:
                # Others may pass through the job root (to their own folder) but not list it.
                with contextlib.suppress(OSError):
                    self._tmp_root.chmod(0o711)
                ok = _others_can(str(self._tmp_root), stat.S_IXOTH)
            self._static_readable = ok
        if not self._static_readable:
            return None
        for path in user_files:
            if not (_others_can(path, stat.S_IROTH) and _others_can(os.path.dirname(path) or ".", _RX)):
                return None
        if cwd and not _others_can(cwd, stat.S_IXOTH):
            return None
        return SANDBOX_UID

    def _sandbox_cache(self, uid: int) -> str:
        """A Triton cache the sandbox uid can write, shared by this runner's jobs."""
        path = self._tmp_root / f"triton-cache-{uid}"
        if not path.exists():
            path.mkdir(mode=0o700)
            os.chown(path, uid, uid)
        return str(path)

    # -- jobs --------------------------------------------------------------------------------------
    def new_job_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="job-", dir=self._tmp_root))

    def run(
        self,
        entry: str,
        params: dict[str, Any],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        env: dict[str, str | None] | None = None,
        user_files: list[str] | tuple[str, ...] = (),
        cwd: str | None = None,
        job_dir: Path | None = None,
        on_progress: Callable[[float, float | None, str], None] | None = None,
        restore: Callable[[], None] | None = None,
    ) -> JobOutcome:
        """Run job ``entry`` (a name in ``jobs.registry`` or its ``module:function``) with ``params`` in a
        fresh child; block until it ends or ``timeout_s`` passes.

        ``params`` are checked against the job's parameter model here, and its result against the result
        model when it comes back. ``on_progress(done, total, message)`` is called with what the child
        reports through ``ctx.progress`` (polled twice a second). A job whose fork server died under it
        (not of its own doing, as far as we can tell) is run once more on a fresh one. The child deletes
        ``job.json`` once it has read it (user code must not find its parameters there); it is written again for
        that second run, and ``restore()`` is called to put back any other file the job deletes once read.
        """
        spec = registry.lookup(entry)
        if spec is not None:
            params = spec.check_params(params)
            entry = spec.entry
        job_dir = job_dir or self.new_job_dir()
        job_text = json.dumps({"entry": entry, "params": params, "user_files": list(user_files)})
        (job_dir / "job.json").write_text(job_text)
        merged = {**self._base_env, **(env or {})}
        uid = self._sandbox_uid(user_files, cwd)
        if uid is not None:
            cache = self._sandbox_cache(uid)
            merged["TRITON_CACHE_DIR"] = cache
            # Inductor's default (/tmp/torchinductor_<user>, with tempfile's dir fixed before the fork) belongs
            # to the runner's user: the sandbox uid cannot write it and torch.compile baselines would fail.
            merged["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
        set_env = scrub_env({k: v for k, v in merged.items() if v is not None})
        unset = [k for k, v in merged.items() if v is None]
        sandbox = {
            "uid": uid,
            "namespaces": self.sandbox.namespaces,
            "memory_limit": self.sandbox.memory_cap(),
        }
        server = self._servers[set_env.get("TRITON_INTERPRET") == "1"]
        outcome = self._run_once(server, job_dir, set_env, unset, sandbox, cwd, timeout_s, on_progress)
        if outcome.failure is not None and outcome.failure.message == _SERVER_DIED:
            # The fork server died under this job: not the candidate's fault as far as we know. Once more.
            for name in ("stdout.log", "stderr.log", "result.json", SANDBOX_FILE, "progress.jsonl"):
                with contextlib.suppress(OSError):
                    (job_dir / name).unlink()
            (job_dir / "job.json").write_text(job_text)
            if restore is not None:
                restore()
            # One retry at a time: a job that kills fork servers cannot take another retried job down with it.
            with self._retry_lock:
                outcome = self._run_once(server, job_dir, set_env, unset, sandbox, cwd, timeout_s, on_progress)
            if outcome.failure is not None and outcome.failure.message == _SERVER_DIED:
                outcome.failure.message = (
                    "the fork server died twice while this job ran (a job that kills its parent processes)"
                )
        if spec is not None and outcome.result is not None:
            try:
                outcome.result = spec.check_result(outcome.result)
            except ValueError as exc:
                outcome.failure = Failure(
                    kind=FindingKind.crash,
                    message=f"the child sent back a result that is not a {spec.name} result: {str(exc)[:400]}",
                    stderr_tail=outcome.stderr_tail,
                )
        return outcome

    def _run_once(
        self,
        server: _ForkServer,
        job_dir: Path,
        set_env: dict[str, str],
        unset: list[str],
        sandbox: dict[str, Any],
        cwd: str | None,
        timeout_s: float,
        on_progress: Callable[[float, float | None, str], None] | None,
    ) -> JobOutcome:
        with self._lock:
            job_id = self._next_id
            self._next_id += 1
        pending = _Pending(job_id)
        message = {
            "op": "start",
            "id": job_id,
            "job_dir": str(job_dir),
            "env": set_env,
            "unset": unset,
            "cwd": cwd,
            "sandbox": sandbox,
        }
        started = time.perf_counter()
        server.submit(message, pending)

        timed_out = False
        if on_progress is not None:
            _poll_progress(job_dir, pending, on_progress, started + timeout_s)
        if not pending.exited.wait(max(0.0, started + timeout_s - time.perf_counter())):
            timed_out = True
            pending.started.wait(5)
            if pending.pid is not None:
                # The supervisor sweeps the job's whole tree on SIGTERM; SIGKILL the group if it does not.
                with contextlib.suppress(OSError):
                    os.kill(pending.pid, signal.SIGTERM)
                if not pending.exited.wait(_TERM_GRACE_S):
                    _kill_group(pending.pid)
            pending.exited.wait(15)
        wall_s = time.perf_counter() - started
        server.pending.pop(job_id, None)
        return self._outcome(pending, job_dir, wall_s, timed_out, timeout_s)

    def _outcome(
        self, pending: _Pending, job_dir: Path, wall_s: float, timed_out: bool, timeout_s: float
    ) -> JobOutcome:
        stderr = _read_text(job_dir / "stderr.log")
        stdout = _read_text(job_dir / "stdout.log")
        stderr_tail = tail(stderr)
        outcome = JobOutcome(
            result=None,
            failure=None,
            wall_s=wall_s,
            job_dir=job_dir,
            pid=pending.pid,
            stderr_tail=stderr_tail,
            stdout_tail=tail(stdout, 10),
        )
        if timed_out:
            outcome.failure = Failure(
                kind=FindingKind.timeout,
                message=(
                    f"the job ran past its {timeout_s:g} s limit and its process group was killed "
                    "(an endless loop in the kernel or launcher, or a problem too large for this device; "
                    "raise the limit with timeout_s / --timeout if the work is legitimately long)"
                ),
                stderr_tail=stderr_tail,
            )
            return outcome
        if pending.error is not None and not (job_dir / SANDBOX_FILE).exists():
            outcome.failure = Failure(kind=FindingKind.crash, message=pending.error, stderr_tail=stderr_tail)
            return outcome

        status = pending.status or 0
        report = _read_result(job_dir / SANDBOX_FILE)
        if report is not None:
            outcome.sandbox = report
            if isinstance(report.get("status"), int):
                status = report["status"]
        payload = _read_result(job_dir / "result.json")
        if report is not None and report.get("oom"):
            limit = report.get("memory_limit") or 0
            outcome.failure = Failure(
                kind=FindingKind.oom,
                message=(
                    f"the job's processes held {report.get('rss_bytes', 0) / 2**30:.1f} GiB of memory, over its "
                    f"{limit / 2**30:.1f} GiB cap, and were killed (PTT_JOB_MEMORY_GB raises the cap)"
                ),
                stderr_tail=stderr_tail,
            )
            return outcome
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            hint = " (the system may have run out of memory)" if sig == signal.SIGKILL else ""
            outcome.failure = Failure(
                kind=FindingKind.crash,
                message=f"the process was killed by {name}{hint}",
                stderr_tail=stderr_tail,
                signal=sig,
            )
            return outcome
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if payload is None:
            outcome.failure = Failure(
                kind=FindingKind.crash,
                message=(
                    f"the process exited with code {code} before reporting a result "
                    "(os._exit or a fatal error in user code)"
                ),
                stderr_tail=stderr_tail,
                exit_code=code,
            )
            return outcome
        if payload.get("usage_error"):
            outcome.usage_error = str(payload["usage_error"])
            return outcome
        if payload.get("failure"):
            try:
                failure = Failure.model_validate(payload["failure"])
            except ValueError:
                failure = Failure(
                    kind=FindingKind.crash,
                    message="the process reported a failure the judge cannot read (its own code changed it)",
                )
            if not failure.stderr_tail:
                failure.stderr_tail = stderr_tail
            outcome.failure = failure
            outcome.result = payload.get("result")
            return outcome
        outcome.result = payload.get("result") or {}
        return outcome


def _poll_progress(
    job_dir: Path, pending: _Pending, on_progress: Callable[[float, float | None, str], None], deadline: float
) -> None:
    """Relay the child's progress lines until it exits or the deadline passes."""
    path = job_dir / "progress.jsonl"
    offset = 0
    while not pending.exited.wait(0.5) and time.perf_counter() < deadline:
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except OSError:
            continue
        complete = chunk[: chunk.rfind(b"\n") + 1]
        offset += len(complete)
        for line in complete.splitlines():
            try:
                event = json.loads(line)
                on_progress(float(event["done"]), event.get("total"), str(event.get("message", ""))[:200])
            except (ValueError, KeyError, TypeError):
                continue


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > MAX_RESULT_BYTES:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # (a hostile child's nesting too deep to decode)
        return None
    return data if isinstance(data, dict) else None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _default_tmp_root() -> str:
    # Job directories hold the tensors exchanged with children; PTT_TMPDIR moves them (e.g. to a tmpfs).
    return tempfile.mkdtemp(prefix="ptt-", dir=os.environ.get("PTT_TMPDIR") or None)


_shared: Runner | None = None
_shared_lock = threading.Lock()


def shared_runner() -> Runner:
    """The process-wide runner used by the CLI and the server."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Runner()
        return _shared
