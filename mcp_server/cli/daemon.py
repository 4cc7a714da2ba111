"""The warm engine behind `ptt`: one background process per user and environment that keeps torch imported and
the fork servers warm, so a command costs a fork instead of an interpreter start and two torch imports.

Three kinds of process, all ours:

- the **listener** (``python -m mcp_server.cli.daemon --serve BASE``) holds ``BASE.lock`` for its whole life,
  listens on ``BASE.sock`` (0600, peers of another uid refused), and has the CLI and the engine's parent side
  imported. It runs no command itself: for each request it forks a **handler**;
- a **handler** is the in-process CLI of one request: it takes the caller's stdin/stdout/stderr (passed as file
  descriptors), environment, working directory and umask, runs ``cli.run(argv)`` and sends the exit code back.
  Relative paths, ``--json`` output, progress on stderr and exit codes are those of the in-process CLI because
  it *is* the in-process CLI, in a fresh fork of a warm process;
- two **zygotes** (``BASE.z0.sock`` compiled mode, ``BASE.z1.sock`` interpreter) have torch, triton and the
  jobs imported like a fork server. When a handler's runner needs a fork server it asks the zygote of that mode
  (``runner.parent.start_fork_server``), which forks one with the handler's environment and pipes. User code
  still runs only in the job children that fork server forks, never in the listener, a handler or a zygote.
  Both start with the listener: without a GPU, validation runs kernels under the interpreter and puts them
  through the GPU compiler's front end in compiled mode;

The client (``dispatch``) is the `ptt` entry point: it connects (starting the listener when there is none),
sends the request and waits. Ctrl-C is passed on (the handler stops like the in-process CLI would, and its fork
servers take their jobs down when its pipes close). When the listener cannot be started or reached, the command
runs in this process (said on stderr with ``-v`` or PTT_DEBUG); when a handler dies before answering, the client
says so and runs the command in this process once. ``PTT_NO_DAEMON=1`` or ``--no-daemon`` turn it off.

``BASE`` is ``CHECKOUT-SOURCE``: CHECKOUT hashes the interpreter (sys.prefix), the uid, the package version and
path and the environment variables read while torch and triton import (PYTHON*, TORCH*, TRITON* but
TRITON_INTERPRET, OMP_*, MKL_*, LD_*); SOURCE hashes every ``.py`` file of the package, so an edited checkout
never talks to a stale listener (a new listener stops the ones serving its checkout's earlier code). It lives
in ``$XDG_RUNTIME_DIR/ptt`` or ``/tmp/ptt-UID`` (0700, owned by the user, else not used). The listener
exits after PTT_DAEMON_IDLE_S seconds (default 600) without a request.

This module is imported by every `ptt` call before anything else: it uses the standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

PKG = Path(__file__).resolve().parents[1]  # mcp_server/
ROOT = PKG.parent
# Commands that never go through the daemon: they own the terminal or a long-lived transport, or manage it.
NEVER = frozenset({"serve", "install", "daemon"})
IDLE_S = 600.0
_START_S = 60.0  # how long a client waits for a new listener to bind its socket
_ZYGOTE_WAIT_S = 120.0  # how long a handler waits for a zygote that is still importing
_INTERRUPT_GRACE_S = 10.0
_IMPORT_ENV_PREFIXES = ("PYTHON", "TORCH", "PYTORCH", "TRITON", "OMP_", "MKL_", "LD_", "NUMEXPR", "OPENBLAS")


# Set in the listener and the zygotes: they never hand a command to a daemon themselves.
_inside = False


class Unavailable(Exception):
    """The daemon cannot be used for this call; the command runs in this process."""


# --- where ----------------------------------------------------------------------------------------------------


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(PKG.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(PKG)).encode() + b"\0")
        with contextlib.suppress(OSError):
            digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _import_env(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {
        k: v
        for k, v in sorted(env.items())
        if k.startswith(_IMPORT_ENV_PREFIXES) and k not in ("TRITON_INTERPRET", "PYTHONUNBUFFERED")
    }


def daemon_key(env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``CHECKOUT-SOURCE``: this checkout in this environment, and the state of its code."""
    from mcp_server import __version__

    env = os.environ if env is None else env
    parts = [sys.prefix, sys.executable, os.getuid(), __version__, str(PKG), _import_env(env)]
    checkout = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
    return f"{checkout}-{_source_hash()[:12]}"


def _stop_stale(paths: Paths) -> None:
    """Stop the listeners of this checkout's earlier code: nobody can reach them any more."""
    checkout = paths.base.name.split("-")[0]
    for other in paths.base.parent.glob(f"{checkout}-*.sock"):
        stale = Paths(other.with_suffix(""))
        if stale.base != paths.base and not stale.base.name.endswith((".z0", ".z1")):
            with contextlib.suppress(OSError, ValueError, Unavailable):
                if query(stale, "stop", timeout=5.0) is not None:
                    _log(f"stopped {stale.sock}: it served earlier code of this checkout")


def runtime_dir(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """The user's private folder for sockets and logs; raises Unavailable when it is missing or not private."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_RUNTIME_DIR")
    base = Path(xdg) / "ptt" if xdg else Path(tempfile.gettempdir()) / f"ptt-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, parents=bool(xdg), exist_ok=True)
        st = os.lstat(base)
    except OSError as exc:
        raise Unavailable(f"cannot use {base} for its socket ({exc.strerror or exc})") from exc
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise Unavailable(f"{base} is not a private folder of this user (mode 0700, owned by uid {os.getuid()})")
    if not os.access(base, os.W_OK | os.X_OK):
        raise Unavailable(f"{base} is not writable")
    return base


class Paths:
    def __init__(self, base: Path):
        self.base = base
        self.sock = base.with_suffix(".sock")
        self.lock = base.with_suffix(".lock")
        self.log = base.with_suffix(".log")

    def zygote(self, interpret: bool) -> Path:
        return self.base.with_suffix(f".z{int(interpret)}.sock")

    @classmethod
    def for_env(cls, env: dict[str, str] | os._Environ[str] | None = None) -> Paths:
        return cls(runtime_dir(env) / daemon_key(env))


# --- the wire: JSON lines over a unix stream socket, file descriptors with the first bytes of a message --------


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def send(self, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
        data = (json.dumps(message) + "\n").encode()
        if fds:
            sent = socket.send_fds(self.sock, [data], list(fds))
            data = data[sent:]
        if data:
            self.sock.sendall(data)

    def recv(self, maxfds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
        """One message (None when the peer closed first) and the descriptors that came with it."""
        fds: list[int] = []
        while b"\n" not in self.buffer:
            if maxfds and not fds:
                chunk, got, _, _ = socket.recv_fds(self.sock, 1 << 16, maxfds)
                fds.extend(got)
            else:
                chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None, fds
            self.buffer += chunk
            if len(self.buffer) > 16 << 20:
                raise ValueError("message too large")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line), fds


def _peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _connect(path: Path, timeout: float | None = None) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    if _peer_uid(sock) != os.getuid():
        sock.close()
        raise Unavailable(f"{path} belongs to another user")
    sock.settimeout(timeout)
    return sock


def _bind(path: Path) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock


# --- the client -----------------------------------------------------------------------------------------------


def _command(argv: list[str]) -> tuple[list[str], str | None]:
    """The options before the command, and the command."""
    for i, token in enumerate(argv):
        if not token.startswith("-"):
            return argv[:i], token
    return list(argv), None


def dispatch(argv: list[str]) -> int | None:
    """Run ``ptt ARGV`` in the daemon and return its exit code; None when it should run in this process."""
    env = os.environ
    before, command = _command(argv)
    if _inside or env.get("PTT_NO_DAEMON", "") not in ("", "0") or "--no-daemon" in before:
        return None
    if command is None or command in NEVER or {"-h", "--help"} & set(before):
        return None
    verbose = bool(env.get("PTT_DEBUG")) or "-v" in before or "--verbose" in before
    try:
        return Client().run(argv)
    except Unavailable as exc:
        if verbose:
            sys.stderr.write(f"ptt: running in this process; the background engine is not available: {exc}\n")
        return None


def _stdio_fds() -> tuple[list[int], list[int]]:
    """The caller's fds 0, 1, 2 (/dev/null in place of a closed one), and the ones opened here."""
    fds, opened = [], []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            fds.append(null)
            opened.append(null)
    return fds, opened


def _stream_info(stream: Any) -> dict[str, Any] | None:
    if stream is None:
        return None
    return {
        "encoding": getattr(stream, "encoding", None),
        "errors": getattr(stream, "errors", None),
        "line_buffering": bool(getattr(stream, "line_buffering", False)),
        "write_through": bool(getattr(stream, "write_through", False)),
    }


class Client:
    def __init__(self, env: dict[str, str] | os._Environ[str] | None = None):
        self.env = dict(os.environ if env is None else env)

    def run(self, argv: list[str]) -> int | None:
        paths = Paths.for_env(self.env)
        for _ in range(3):
            sock = self.connect(paths)
            try:
                reply = self.request(sock, argv)
            finally:
                sock.close()
            if reply is not None and "exit" in reply:
                return int(reply["exit"])
            if reply is not None and reply.get("retry"):
                continue  # that listener was going idle; start or find the next one
            if reply is not None and reply.get("unavailable"):
                raise Unavailable(str(reply["unavailable"]))
            detail = (reply or {}).get("error") or "it closed the connection"
            sys.stderr.write(
                f"ptt: the background engine stopped before answering ({detail}); running the command in this "
                f"process instead. Its log: {paths.log}\n"
            )
            sys.stderr.flush()
            return None
        raise Unavailable("its listener kept closing")

    def connect(self, paths: Paths) -> socket.socket:
        sock = _connect(paths.sock)
        if sock is not None:
            return sock
        proc = start(paths, self.env)
        deadline = time.monotonic() + _START_S
        while time.monotonic() < deadline:
            sock = _connect(paths.sock)
            if sock is not None:
                return sock
            code = proc.poll()
            if code not in (None, 0):
                raise Unavailable(f"it could not start (exit {code}); see {paths.log}")
            time.sleep(0.05)
        raise Unavailable(f"it did not start within {_START_S:.0f} s; see {paths.log}")

    def request(self, sock: socket.socket, argv: list[str]) -> dict[str, Any] | None:
        try:
            cwd = os.getcwd()
        except OSError as exc:
            raise Unavailable(f"the working directory is gone ({exc.strerror})") from exc
        umask = os.umask(0o022)
        os.umask(umask)
        message = {
            "op": "run",
            "argv": list(argv),
            "cwd": cwd,
            "env": self.env,
            "umask": umask,
            "stdio": [_stream_info(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
        }
        channel = Channel(sock)
        fds, opened = _stdio_fds()
        try:
            channel.send(message, fds)
        except OSError as exc:
            raise Unavailable(f"could not send the request ({exc})") from exc
        finally:
            for fd in opened:
                os.close(fd)
        try:
            return channel.recv()[0]
        except KeyboardInterrupt:
            pass
        except (OSError, ValueError) as exc:
            return {"error": str(exc)}
        # Ctrl-C: the handler stops the way the in-process command would, and says so on our stderr.
        with contextlib.suppress(OSError):
            channel.send({"op": "interrupt"})
        try:
            sock.settimeout(_INTERRUPT_GRACE_S)
            reply = channel.recv()[0]
            if reply is not None and "exit" in reply:
                return reply
        except (KeyboardInterrupt, OSError, ValueError):
            pass
        sys.stderr.write("ptt: interrupted\n")
        return {"exit": 130}


def start(paths: Paths, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a listener in its own session; several may start at once, the lock keeps one."""
    child_env = dict(env)
    path = env.get("PYTHONPATH", "")
    if path.split(os.pathsep)[0] != str(ROOT):
        child_env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    with open(paths.log, "ab") as log:
        os.chmod(paths.log, 0o600)
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "mcp_server.cli.daemon", "--serve", str(paths.base)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=child_env,
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            raise Unavailable(f"could not start it ({exc})") from exc


def query(paths: Paths, op: str, timeout: float = 30.0) -> dict[str, Any] | None:
    """Ask a running listener (``status`` or ``stop``); None when none runs."""
    sock = _connect(paths.sock, timeout=timeout)
    if sock is None:
        return None
    with sock:
        channel = Channel(sock)
        channel.send({"op": op})
        try:
            return channel.recv()[0]
        except (OSError, ValueError):
            return None


# --- the listener ---------------------------------------------------------------------------------------------


def _log(message: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {message}\n")
    sys.stderr.flush()


def _lock(path: Path, wait_s: float) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def _preload_parent() -> None:
    """What a handler would import: the CLI and the engine's parent side (not the jobs: they run in children)."""
    import importlib
    import pkgutil

    import mcp_server.cli as cli
    import mcp_server.engine as engine

    cli.build_parser()
    skip = (".__main__", ".jobs", ".runner.forkserver", ".runner.child", ".ray_backend", ".cli.serve", ".cli.daemon")
    for pkg in (engine, cli):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if any(part in info.name for part in skip):
                continue
            with contextlib.suppress(Exception):
                importlib.import_module(info.name)


class _Zygote:
    def __init__(self, paths: Paths, interpret: bool):
        self.paths, self.interpret = paths, interpret
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def ensure(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        if self.starts >= 5:  # handlers fall back to a fork server of their own
            return
        self.starts += 1
        env = dict(os.environ)
        if self.interpret:
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_server.cli.daemon", "--zygote", str(self.paths.zygote(self.interpret))],
            stdin=subprocess.PIPE,  # closed when the listener exits: the zygote follows
            stdout=sys.stderr.fileno(),
            stderr=sys.stderr.fileno(),
            env=env,
            start_new_session=True,
        )

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(OSError):
            self.paths.zygote(self.interpret).unlink()


def serve(base: Path) -> int:
    """The listener: one per BASE (the lock), until idle."""
    paths = Paths(base)
    idle_s = float(os.environ.get("PTT_DAEMON_IDLE_S") or IDLE_S)
    lock_fd = _lock(paths.lock, wait_s=10.0)
    if lock_fd is None:
        return 0  # another listener holds it
    sock = _bind(paths.sock)
    ino = os.stat(paths.sock).st_ino
    started = time.time()
    _log(f"listening on {paths.sock} (idle exit after {idle_s:g} s)")
    _stop_stale(paths)
    # Both modes start now: without a GPU a validation's kernels run in the interpreter's and its front-end
    # compile check runs in the compiled mode's (a zygote a handler asks for later still starts: op "zygote").
    zygotes = [_Zygote(paths, False), _Zygote(paths, True)]
    for z in zygotes:
        z.ensure()
    _preload_parent()
    _log(f"ready in {time.time() - started:.1f} s")

    handlers: dict[int, float] = {}
    last = time.monotonic()
    served = 0

    def reap() -> None:
        nonlocal last
        while handlers:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                handlers.clear()
                return
            if pid == 0:
                return
            if handlers.pop(pid, None) is not None:
                last = time.monotonic()

    stopping = False
    while not stopping:
        ready, _, _ = select.select([sock], [], [], 1.0)
        reap()
        for z in zygotes:
            z.ensure()
        if not ready:
            try:
                moved = os.stat(paths.sock).st_ino != ino
            except OSError:
                moved = True
            if moved:
                _log("socket removed; exiting")
                break
            if not handlers and time.monotonic() - last > idle_s:
                _log(f"idle for {idle_s:g} s; exiting")
                break
            continue
        conn, _ = sock.accept()
        last = time.monotonic()
        try:
            if _peer_uid(conn) != os.getuid():
                _log("refused a connection from another uid")
                conn.close()
                continue
            conn.settimeout(10.0)
            channel = Channel(conn)
            message, fds = channel.recv(maxfds=3)
        except (OSError, ValueError) as exc:
            _log(f"bad request: {exc}")
            conn.close()
            continue
        op = (message or {}).get("op")
        if op == "run" and len(fds) == 3:
            served += 1
            pid = os.fork()
            if pid == 0:
                pipes = [z.proc.stdin.fileno() for z in zygotes if z.proc and z.proc.stdin]
                inherited = [sock.fileno(), lock_fd, *pipes]
                _handle(channel, message or {}, fds, inherited, paths)  # never returns
            handlers[pid] = time.monotonic()
        elif op == "status":
            with contextlib.suppress(OSError):
                channel.send(
                    {
                        "pid": os.getpid(),
                        "socket": str(paths.sock),
                        "log": str(paths.log),
                        "uptime_s": round(time.time() - started, 1),
                        "idle_s": idle_s,
                        "served": served,
                        "handlers": sorted(handlers),
                        "zygotes": [z.proc.pid if z.proc else None for z in zygotes],
                    }
                )
        elif op == "zygote":  # a handler needs a zygote that is not running (it exited)
            wanted = zygotes[1 if (message or {}).get("interpret") else 0]
            wanted.ensure()
            with contextlib.suppress(OSError):
                channel.send({"started": wanted.proc is not None and wanted.proc.poll() is None})
        elif op == "stop":
            with contextlib.suppress(OSError):
                channel.send({"stopping": True, "pid": os.getpid()})
            _log("stop requested")
            stopping = True
        for fd in fds:
            os.close(fd)
        conn.close()

    # No new caller can find us once the socket is gone; callers already queued are told to retry.
    with contextlib.suppress(OSError):
        if os.stat(paths.sock).st_ino == ino:
            paths.sock.unlink()
    sock.setblocking(False)
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            break
        with conn, contextlib.suppress(OSError):
            Channel(conn).send({"retry": True})
    sock.close()
    for z in zygotes:
        z.close()
    os.close(lock_fd)
    return 0


# --- a handler: the in-process CLI, for one request ------------------------------------------------------------


def _reopen_stdio(infos: list[dict[str, Any] | None]) -> None:
    modes = ("r", "w", "w")
    streams = []
    for fd, (mode, info) in enumerate(zip(modes, infos, strict=False)):
        info = info or {}
        stream = open(  # noqa: SIM115 - the process's standard streams
            fd, mode, encoding=info.get("encoding") or "utf-8", errors=info.get("errors") or "strict", closefd=False
        )
        if mode == "w":
            stream.reconfigure(
                line_buffering=bool(info.get("line_buffering")), write_through=bool(info.get("write_through"))
            )
        streams.append(stream)
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams


def _handle(channel: Channel, message: dict[str, Any], fds: list[int], inherited: list[int], paths: Paths) -> None:
    code = 70
    try:
        for fd in inherited:  # the listener's socket, its lock, the zygotes' pipes: not ours to hold
            with contextlib.suppress(OSError):
                os.close(fd)
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            os.chdir(message["cwd"])
        except OSError as exc:
            channel.send({"unavailable": f"cannot enter {message['cwd']} ({exc.strerror})"})
            os._exit(0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            if fd > 2:
                os.close(fd)
        _reopen_stdio(message.get("stdio") or [None, None, None])
        os.environ.clear()
        os.environ.update(message["env"])
        os.umask(int(message.get("umask", 0o022)))
        channel.sock.settimeout(None)
        threading.Thread(target=_watch, args=(channel,), daemon=True).start()

        from mcp_server.engine.runner import parent

        parent.start_fork_server = _ZygoteStarter(paths)
        from mcp_server.cli import run

        code = run(list(message["argv"]))
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:  # the client must hear about it, then run the command itself
        with contextlib.suppress(Exception):
            channel.send({"error": f"{type(exc).__name__}: {exc}"})
        os._exit(0)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    with contextlib.suppress(Exception):
        channel.send({"exit": code})
    os._exit(0)


def _watch(channel: Channel) -> None:
    """A handler's ear on its client: Ctrl-C there interrupts here; a client gone takes the handler with it."""
    while True:
        try:
            message, _ = channel.recv()
        except (OSError, ValueError):
            message = None
        if message is None:
            os.kill(os.getpid(), signal.SIGKILL)  # our fork servers see their pipes close and kill their jobs
            return
        if message.get("op") == "interrupt":
            os.kill(os.getpid(), signal.SIGINT)


class _Forked:
    """A fork server forked by a zygote: what the runner needs of a Popen (it is not our child)."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int):
        self.pid = pid
        self.stdin: IO[bytes] = open(stdin_fd, "wb")  # noqa: SIM115
        self.stdout: IO[bytes] = open(stdout_fd, "rb")  # noqa: SIM115
        self.returncode: int | None = None
        # The runner's event thread and its callers may wait on the server at the same time: one of them closes
        # the pidfd when the server is gone, after which the others must not select on it.
        self._lock = threading.Lock()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:
            self._pidfd = None
            self.returncode = -1

    def _gone(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self.returncode is not None or self._pidfd is None:
                    return True
                # Short selects under the lock, so a second waiter gets its turn and sees the outcome.
                step = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
                ready, _, _ = select.select([self._pidfd], [], [], step)
                if ready:
                    self.returncode = -1  # its status went to the zygote
                    os.close(self._pidfd)
                    self._pidfd = None
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def poll(self) -> int | None:
        self._gone(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._gone(timeout):
            raise subprocess.TimeoutExpired("fork server", timeout or 0)
        return self.returncode if self.returncode is not None else -1

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)


class _ZygoteStarter:
    """The handler's ``parent.start_fork_server``: a fork server forked by the zygote of the job's mode."""

    def __init__(self, paths: Paths):
        self.paths = paths

    def __call__(self, env: dict[str, str], log: IO[bytes]) -> Any:
        from mcp_server.engine.runner import parent

        try:
            return self._fork(env, log)
        except (OSError, ValueError, Unavailable) as exc:
            log.write(f"ptt daemon: no zygote ({exc}); starting a fork server of its own\n".encode())
            log.flush()
            return parent.popen_fork_server(env, log)

    def _fork(self, env: dict[str, str], log: IO[bytes]) -> _Forked:
        interpret = env.get("TRITON_INTERPRET") == "1"
        path = self.paths.zygote(interpret)
        if not path.exists():
            self._ask_listener(interpret)
        deadline = time.monotonic() + _ZYGOTE_WAIT_S
        sock = _connect(path, timeout=_ZYGOTE_WAIT_S)
        while sock is None:
            if time.monotonic() > deadline:
                raise Unavailable(f"{path} does not answer")
            time.sleep(0.05)
            sock = _connect(path, timeout=_ZYGOTE_WAIT_S)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            with sock:
                channel = Channel(sock)
                umask = os.umask(0o022)
                os.umask(umask)
                channel.send({"env": env, "cwd": os.getcwd(), "umask": umask}, [stdin_r, stdout_w, log.fileno()])
                reply, _ = channel.recv()
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        if not reply or "pid" not in reply:
            os.close(stdin_w)
            os.close(stdout_r)
            raise Unavailable(f"the zygote did not fork a server ({(reply or {}).get('error', 'no answer')})")
        return _Forked(int(reply["pid"]), stdin_w, stdout_r)

    def _ask_listener(self, interpret: bool) -> None:
        """Have the listener start the zygote of this mode (one it starts only on demand)."""
        sock = _connect(self.paths.sock, timeout=10.0)
        if sock is None:
            raise Unavailable(f"{self.paths.sock} does not answer")
        with sock:
            channel = Channel(sock)
            channel.send({"op": "zygote", "interpret": interpret})
            reply, _ = channel.recv()
        if not (reply or {}).get("started"):
            raise Unavailable("the listener could not start the zygote")


# --- a zygote -------------------------------------------------------------------------------------------------


def zygote(path: Path) -> int:
    """Import what a fork server imports, then fork fork servers on request, until the listener goes."""
    sock = _bind(path)
    from mcp_server.engine.runner import forkserver

    forkserver.preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # fork servers are reaped by the kernel
    parent = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([sock, parent], [], [])
        if parent in ready and not os.read(parent, 4096):
            return 0
        if sock not in ready:
            continue
        conn, _ = sock.accept()
        fds: list[int] = []
        try:
            if _peer_uid(conn) != os.getuid():
                continue
            conn.settimeout(10.0)
            channel = Channel(conn)
            message, fds = channel.recv(maxfds=3)
            if message is None or len(fds) != 3:
                continue
            pid = os.fork()
            if pid == 0:
                _become_fork_server(message, fds, [sock.fileno(), conn.fileno(), parent])
            channel.send({"pid": pid})
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                Channel(conn).send({"error": str(exc)})
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            conn.close()


def _become_fork_server(message: dict[str, Any], fds: list[int], close: list[int]) -> None:
    code = 70
    try:
        os.setsid()
        for fd in close:
            with contextlib.suppress(OSError):
                os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(message["env"])
        os.umask(int(message.get("umask", 0o022)))
        with contextlib.suppress(OSError):
            os.chdir(message.get("cwd") or "/")
        from mcp_server.engine.runner import forkserver

        forkserver.serve()
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


# --- `ptt daemon` -----------------------------------------------------------------------------------------------


def cmd_daemon(args: Any) -> int:
    from mcp_server.cli._common import EXIT_ENV, EXIT_OK

    try:
        paths = Paths.for_env()
    except Unavailable as exc:
        sys.stderr.write(f"ptt: the background engine cannot run here: {exc}\n")
        return EXIT_ENV
    if args.action == "start" and query(paths, "status") is None:
        proc = start(paths, dict(os.environ))
        deadline = time.monotonic() + _START_S
        while query(paths, "status") is None:
            if time.monotonic() > deadline or proc.poll() not in (None, 0):
                sys.stderr.write(f"ptt: the background engine did not start; see {paths.log}\n")
                return EXIT_ENV
            time.sleep(0.1)
    if args.action == "stop":
        reply = query(paths, "stop")
        info: dict[str, Any] = {"running": False, "stopped": reply is not None, "socket": str(paths.sock)}
    else:
        reply = query(paths, "status")
        info = {"running": reply is not None, "socket": str(paths.sock), "log": str(paths.log), **(reply or {})}
    if args.json:
        print(json.dumps(info, indent=2))
    elif args.action == "stop":
        print("stopped" if info["stopped"] else "not running")
    elif info["running"]:
        print(
            f"running: pid {info['pid']}, up {info['uptime_s']:g} s, {info['served']} requests served, "
            f"{len(info['handlers'])} in progress, idle exit after {info['idle_s']:g} s\n"
            f"socket {info['socket']}\nlog    {info['log']}"
        )
    else:
        print(f"not running (socket {info['socket']})")
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("daemon", help="the warm background engine that runs ptt commands: status, start or stop it")
    p.add_argument("action", choices=("status", "start", "stop"), nargs="?", default="status")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(fn=cmd_daemon)


def _main(argv: list[str]) -> int:
    global _inside
    _inside = True
    os.environ["PTT_NO_DAEMON"] = "1"  # and neither do processes they start
    if len(argv) == 2 and argv[0] == "--serve":
        return serve(Path(argv[1]))
    if len(argv) == 2 and argv[0] == "--zygote":
        return zygote(Path(argv[1]))
    sys.stderr.write("usage: python -m mcp_server.cli.daemon --serve BASE | --zygote SOCKET\n")
    return 2


if __name__ == "__main__":
    import importlib

    # One copy of this module (the handlers run in it), not a __main__ copy beside it.
    sys.exit(importlib.import_module("mcp_server.cli.daemon")._main(sys.argv[1:]))
