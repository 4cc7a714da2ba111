"""The per-job supervisor and the confinement of the process that runs user code (Linux).

The fork server forks one *supervisor* per job. The supervisor starts its own session, dies with the fork
server (``PR_SET_PDEATHSIG``), becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``: every orphan the job
leaves behind, new sessions included, is re-parented to it) and, where the kernel allows, enters new PID
and mount namespaces. It then forks the *worker*, which runs the job: PID 1 of the new namespace with a
private ``/proc`` (it sees and can signal no process outside its job), dying with the supervisor, and
switched to an unprivileged uid when the parent found every file the job needs readable by others.

The supervisor polls the resident memory of the worker's whole process tree and kills the tree when it
passes the job's cap. When the worker exits, or the parent asks (SIGTERM: a timeout), every descendant is
killed (frozen first, so a fork loop cannot outrun the sweep) and reaped. Only then, with no user process
left to tamper with it, does the supervisor write ``sandbox.json`` into the job folder: the worker's raw
wait status and what was enforced. The parent trusts that file over anything the worker wrote.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import time
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
SANDBOX_FILE = "sandbox.json"
POLL_S = 0.05
MEMORY_POLL_S = 0.1
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_libc: Any = None


def libc() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def prctl(option: int, value: int) -> bool:
    try:
        return libc().prctl(option, ctypes.c_ulong(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def unshare(flags: int) -> str | None:
    """None when it worked, else the reason."""
    try:
        if libc().unshare(flags) == 0:
            return None
        return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        return str(exc)


def _mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None = None) -> bool:
    try:
        return libc().mount(source, target, fstype, ctypes.c_ulong(flags), data) == 0
    except (OSError, AttributeError):
        return False


def _hide_own_memory() -> bool:
    """In the worker's private /proc: its own memory files read as empty (``/proc/<pid>/mem`` and ``/proc/kcore``
    under /dev/null, the per-thread ``task/*/mem`` under an empty read-only tmpfs, which also empties
    ``/proc/thread-self``). Under the interpreter every tensor lives in this process's memory, where reading
    ``mem`` at a tensor's address would hand its bytes to Python around the judge's count of host reads."""
    pid = os.getpid()
    hidden = _mount(b"/dev/null", b"/proc/%d/mem" % pid, None, MS_BIND) and _mount(
        b"none", b"/proc/%d/task" % pid, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=0555"
    )
    if os.path.exists("/proc/kcore"):
        hidden = _mount(b"/dev/null", b"/proc/kcore", None, MS_BIND) and hidden
    return hidden


# --- the process tree --------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, rss pages) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return int(rest[1]), rest[0].decode(), int(rest[21])
    except (IndexError, ValueError):
        return None


def descendants(root: int) -> dict[int, tuple[str, int]]:
    """Every live descendant of ``root`` (not root itself): pid -> (state, rss pages)."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[str, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if not name.isdigit():
            continue
        stat = _stat(int(name))
        if stat is None:
            continue
        ppid, state, rss = stat
        children.setdefault(ppid, []).append(int(name))
        info[int(name)] = (state, rss)
    found: dict[int, tuple[str, int]] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid in found or pid not in info:
            continue
        found[pid] = info[pid]
        stack.extend(children.get(pid, ()))
    return found


def tree_rss_bytes(root: int) -> int:
    return sum(rss for state, rss in descendants(root).values() if state != "Z") * _PAGE


def kill_tree(root: int, rounds: int = 200) -> int:
    """Freeze then kill every descendant of ``root``; reap what comes back to us. Returns how many."""
    killed: set[int] = set()
    for _ in range(rounds):
        live = [pid for pid, (state, _) in descendants(root).items() if state != "Z" and pid not in killed]
        if not live:
            break
        for pid in live:  # stop first, so nothing forks between the scan and the kill
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        for pid in live:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        reap_all()
        time.sleep(0.002)
    reap_all()
    return len(killed)


# Wait statuses of the children reaped by the sweeps (the worker's among them).
REAPED: dict[int, int] = {}


def reap_all() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


# --- the worker ---------------------------------------------------------------------------------------


def _drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _prepare_worker(job: dict[str, Any], supervisor_pid: int, in_pidns: bool) -> dict[str, Any]:
    """In the worker, before the job runs: /proc, uid, death signal, private folders."""
    enforced: dict[str, Any] = {}
    # A group of our own: kill(0, …) from the job reaches no process outside it.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    if in_pidns and job.get("sandbox", {}).get("private_proc", True) and unshare(CLONE_NEWNS) is None:
        # A /proc of our own namespace: no other process of the machine is listed or reachable. Mounted in a
        # mount namespace of our own (private, so nothing propagates back): the supervisor keeps the real one.
        enforced["private_proc"] = _mount(None, b"/", None, MS_REC | MS_PRIVATE) and _mount(
            b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC
        )
        interpreting = (job.get("env") or {}).get("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET")) == "1"
        if enforced["private_proc"] and interpreting:
            enforced["own_memory_hidden"] = _hide_own_memory()
    uid = job.get("sandbox", {}).get("uid")
    if uid is not None:
        _drop_privileges(int(uid), int(job["sandbox"].get("gid", uid)))
        enforced["uid"] = os.getuid()
    # After the uid change: a credential change clears the death signal.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if not in_pidns and os.getppid() != supervisor_pid:
        os._exit(70)
    home = os.path.join(job["job_dir"], "home")
    os.makedirs(home, exist_ok=True)
    os.environ["HOME"] = home
    os.environ["TMPDIR"] = home
    return enforced


def _write_sandbox(job_dir: str, report: dict[str, Any]) -> None:
    path = os.path.join(job_dir, SANDBOX_FILE)
    # The worker could have left anything under this name; nothing of it runs now, so replace it.
    with contextlib.suppress(OSError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    tmp = path + ".tmp"
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(report))
    os.replace(tmp, path)


def supervise(job: dict[str, Any], run_job: Any) -> int:
    """In the supervisor (a fresh fork of the fork server): confine, fork the worker, police, clean up."""
    server_pid = os.getppid()
    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:
        os._exit(70)
    sandbox = job.get("sandbox") or {}
    report: dict[str, Any] = {
        "subreaper": prctl(PR_SET_CHILD_SUBREAPER, 1),
        "session": True,
        "pidns": False,
        "memory_limit": sandbox.get("memory_limit"),
        "uid": sandbox.get("uid"),
    }
    job_dir = job["job_dir"]
    uid = sandbox.get("uid")
    if uid is not None:
        gid = int(sandbox.get("gid", uid))
        for root, dirs, files in os.walk(job_dir):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                with contextlib.suppress(OSError):
                    os.chown(name, int(uid), gid, follow_symlinks=False)
    if sandbox.get("namespaces", True):
        why = unshare(CLONE_NEWPID)  # our next child is PID 1 of a new namespace
        report["pidns"] = why is None
        if why is not None:
            report["namespace_error"] = why
    terminate = {"asked": False}

    def on_term(*_: Any) -> None:
        terminate["asked"] = True

    signal.signal(signal.SIGTERM, on_term)
    me = os.getpid()
    worker = os.fork()
    if worker == 0:
        code = 70
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            enforced = _prepare_worker(job, me, bool(report["pidns"]))
            code = run_job(job, enforced)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    report["worker_pid"] = worker
    limit = sandbox.get("memory_limit")
    status: int | None = None
    peak = 0
    next_memory = 0.0
    while status is None:
        try:
            pid, raw = os.waitpid(worker, os.WNOHANG)
        except ChildProcessError:
            status = 0
            break
        if pid == worker:
            status = raw
            break
        if terminate["asked"]:
            report["terminated"] = True
            break
        now = time.monotonic()
        if limit and now >= next_memory:
            next_memory = now + MEMORY_POLL_S
            rss = tree_rss_bytes(me)
            peak = max(peak, rss)
            if rss > limit:
                report["oom"] = True
                report["rss_bytes"] = rss
                break
        time.sleep(POLL_S)
    report["killed_descendants"] = kill_tree(me)
    if status is None:
        status = REAPED.get(worker)
    if status is None:
        with contextlib.suppress(ChildProcessError):
            _, status = os.waitpid(worker, 0)
    reap_all()
    report["status"] = status
    report["rss_peak_bytes"] = peak
    with contextlib.suppress(OSError):
        _write_sandbox(job_dir, report)
    return 0
