"""The warm engine behind `ptt` (mcp_server/cli/daemon.py): the same results as the in-process CLI, one listener
per environment, stale code never served, idle exit, and the in-process fallback when it cannot be used or dies.

Tests that start a listener pay for its torch imports (10 s and more on a busy 2-core machine): they are `slow`
and share one listener where they can. The in-process side of a comparison, the `daemon` commands and the
fallbacks run here, in the pytest process (whose torch and shared runner are already warm), with the folder and
environment a `ptt` process would have been given.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_server import cli
from mcp_server.cli import daemon

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "validate"
KERNELS = ROOT / "tests" / "fixtures" / "compile" / "kernels.py"


def _env(runtime: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PTT_NO_DAEMON"}
    env.update(
        XDG_RUNTIME_DIR=str(runtime),
        PYTHONPATH=str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
        PTT_DAEMON_IDLE_S="120",
    )
    env.update(extra)
    return env


def ptt(runtime: Path, *args: str, cwd: Path = ROOT, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mcp_server.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(runtime, **env),
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def _as_caller(runtime: Path, cwd: Path = ROOT, **extra: str) -> Iterator[None]:
    """This process with the environment and working folder that ``ptt()`` gives its process."""
    env = _env(runtime, **extra)
    with pytest.MonkeyPatch.context() as mp:
        for name in set(os.environ) - set(env):
            mp.delenv(name)
        for name, value in env.items():
            mp.setenv(name, value)
        mp.chdir(cwd)
        yield


def ptt_here(runtime: Path, *args: str) -> subprocess.CompletedProcess:
    """``ptt ARGS`` by the in-process CLI (``cli.run``) in this process, in the folder and environment that
    ``ptt()`` gives its process."""
    out, err = io.StringIO(), io.StringIO()
    with _as_caller(runtime), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.run(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _status(runtime: Path) -> dict:
    proc = ptt_here(runtime, "daemon", "status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _signal_masks(pid: int | str = "self") -> dict[str, str]:
    """Ignored, blocked and caught signals of a process, as the kernel has them."""
    with open(f"/proc/{pid}/status") as fh:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in fh if ":" in line) if k.startswith("Sig")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def runtime():
    # A short path: unix socket paths are limited to 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="pttd-"))
    yield path
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_RUNTIME_DIR", str(path))
        try:
            paths = daemon.Paths.for_env()
            daemon.query(paths, "stop")
        except daemon.Unavailable:
            pass
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def warm():
    """One listener shared by the module's slow tests."""
    path = Path(tempfile.mkdtemp(prefix="pttw-"))
    proc = ptt_here(path, "daemon", "start")
    assert proc.returncode == 0, proc.stderr
    yield path
    ptt_here(path, "daemon", "stop")
    shutil.rmtree(path, ignore_errors=True)


def _same_text(text: str) -> str:
    """Rendered output with its timings (and every other decimal number) blanked."""
    return re.sub(r"\b\d+\.\d+\b", "N", text)


def _same_json(text: str) -> object:
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if "second" not in k and not k.endswith("_s")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(text))


# --- fast: no listener -----------------------------------------------------------------------------------------


def test_the_key_changes_when_the_source_changes(tmp_path, monkeypatch):
    pkg = tmp_path / "mcp_server"
    shutil.copytree(ROOT / "mcp_server", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(daemon, "PKG", pkg)
    before = daemon.daemon_key()
    assert daemon.daemon_key() == before
    target = pkg / "engine" / "validate.py"
    target.write_text(target.read_text() + "\n# edited\n")
    assert daemon.daemon_key() != before


def test_a_new_listener_stops_the_one_serving_this_checkouts_earlier_code(tmp_path):
    import threading

    current = daemon.Paths(tmp_path / "aaaa-new")
    asked: list[str] = []

    def fake_listener(path: Path) -> threading.Thread:
        server = daemon._bind(path)

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                message, _ = daemon.Channel(conn).recv()
                asked.append(f"{path.name}:{message['op']}")
                daemon.Channel(conn).send({"stopping": True})
            server.close()

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        return thread

    stale = fake_listener(tmp_path / "aaaa-old.sock")
    other = daemon._bind(tmp_path / "bbbb-old.sock")  # another checkout or environment: left alone
    daemon._stop_stale(current)
    stale.join(10)
    assert asked == ["aaaa-old.sock:stop"]
    other.setblocking(False)
    with pytest.raises(BlockingIOError):
        other.accept()
    other.close()


def test_the_runner_hook_the_handlers_use_exists():
    # A fresh process starts its fork servers as new interpreters; a handler swaps in the zygote starter (and so
    # does this test run: tests/zygotes.py).
    code = "from mcp_server.engine.runner import parent; print(parent.start_fork_server is parent.popen_fork_server)"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert fresh.stdout.strip() == "True", fresh.stderr[-2000:]
    assert "parent.start_fork_server = _ZygoteStarter" in Path(daemon.__file__).read_text()


def test_a_forked_server_can_be_waited_on_from_two_threads_at_once():
    # The runner's event thread waits on a server that exits while a caller polls or waits on it too: both learn
    # it is gone, neither trips over the other's closing of the pidfd.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    forked = daemon._Forked(proc.pid, stdin_w, stdout_r)
    outcomes: list[object] = []

    def wait() -> None:
        try:
            outcomes.append(forked.wait(30))
        except BaseException as exc:  # the failure is the test's finding
            outcomes.append(exc)

    threads = [threading.Thread(target=wait) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # both are waiting
    with pytest.raises(subprocess.TimeoutExpired):
        forked.wait(0.05)
    proc.kill()
    proc.wait()
    for t in threads:
        t.join(30)
    assert outcomes == [-1, -1]
    assert forked.poll() == -1
    for fd in (stdin_r, stdout_w):
        os.close(fd)
    forked.stdin.close()
    forked.stdout.close()


def test_the_key_follows_the_import_environment_but_not_the_mode():
    base = {"HOME": "/x"}
    assert daemon.daemon_key({**base, "TRITON_INTERPRET": "1"}) == daemon.daemon_key(base)
    assert daemon.daemon_key({**base, "PYTHONPATH": "/elsewhere"}) != daemon.daemon_key(base)
    assert daemon.daemon_key({**base, "TORCH_LOGS": "dynamo"}) != daemon.daemon_key(base)


def test_a_folder_that_is_not_private_or_not_a_folder_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    (shared / "ptt").mkdir(parents=True)
    (shared / "ptt").chmod(0o777)
    with pytest.raises(daemon.Unavailable, match="not a private folder"):
        daemon.runtime_dir({"XDG_RUNTIME_DIR": str(shared)})
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(daemon.Unavailable, match="cannot use"):
        daemon.runtime_dir({"XDG_RUNTIME_DIR": str(a_file)})


@pytest.mark.parametrize(
    "argv",
    [
        ["serve"],
        ["install", "claude"],
        ["daemon", "status"],
        ["--no-daemon", "validate", "a.py:f", "b.py:g"],
        ["--help"],
        [],
    ],
)
def test_commands_that_never_go_through_the_daemon(argv, monkeypatch):
    monkeypatch.delenv("PTT_NO_DAEMON", raising=False)
    monkeypatch.setattr(daemon.Client, "run", lambda self, argv: pytest.fail("went to the daemon"))
    assert daemon.dispatch(argv) is None


def test_ptt_no_daemon_keeps_every_command_here(monkeypatch):
    monkeypatch.setenv("PTT_NO_DAEMON", "1")
    monkeypatch.setattr(daemon.Client, "run", lambda self, argv: pytest.fail("went to the daemon"))
    assert daemon.dispatch(["validate", "a.py:f", "b.py:g"]) is None


def test_an_unusable_socket_folder_falls_back_to_this_process_and_says_so_with_v(tmp_path, capsys, monkeypatch):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    args = ("validate", "nope.py:f", f"{FX}/add_good.py:candidate")

    def entry_point(*argv: str) -> tuple[int, str]:
        """The `ptt` entry point (``main()``, which reads sys.argv) in this process."""
        monkeypatch.setattr(sys, "argv", ["ptt", *argv])
        with _as_caller(a_file):
            capsys.readouterr()
            code = cli.main()
            return code, capsys.readouterr().err

    code, err = entry_point(*args)
    assert code == 2 and "does not exist" in err
    assert "background engine" not in err
    code, err = entry_point("-v", *args)
    assert code == 2 and "running in this process" in err and "cannot use" in err


# --- slow: a listener -------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        # A seed of their own: left out, each run draws fresh ones and the two outputs name different seeds.
        ("validate", f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate", "--seed", "7"),
        ("validate", f"{FX}/add_problem.py:reference", f"{FX}/add_unwritten.py:candidate", "--seed", "7", "--json"),
        ("validate", "nope.py:f", f"{FX}/add_good.py:candidate", "--json"),
        ("compile", f"{KERNELS}:scale_kernel", "--signature", "*fp32, *fp32, i32, fp32", "--constexpr", "BLOCK=1024"),
        ("compile", f"{KERNELS}:launcher", "--signature", "*fp32"),
    ],
    ids=["validate-ok", "validate-fails-json", "validate-usage", "compile", "compile-usage"],
)
def test_exit_codes_and_output_are_those_of_the_in_process_cli(warm, args):
    here = ptt_here(warm, "--no-daemon", *args)
    served = _status(warm)["served"]
    there = ptt(warm, *args)
    assert there.returncode == here.returncode, (here.stderr, there.stderr)
    assert "stopped before answering" not in there.stderr
    if "--json" in args and here.stdout.strip():
        assert _same_json(there.stdout) == _same_json(here.stdout)
    else:
        assert _same_text(there.stdout) == _same_text(here.stdout)
    status = _status(warm)
    assert status["served"] == served + 1  # `there` went through the listener
    if args[0] == "compile" and there.returncode == 0:
        # Its fork server came from the compiled-mode zygote, started for it where no GPU is (on demand).
        assert status["zygotes"][0] is not None


@pytest.mark.slow
def test_paths_resolve_against_the_callers_folder_and_the_callers_environment_reaches_the_kernel(warm, tmp_path):
    shutil.copy(FX / "add_problem.py", tmp_path / "problem.py")
    source = (FX / "add_good.py").read_text()
    check = "import os\n\nimport torch\n\nassert os.environ['WARM_MARK'] == 'yes'\n"
    marked = source.replace("import torch\n", check, 1)
    (tmp_path / "kernel.py").write_text(marked)
    args = ("validate", "problem.py:reference", "kernel.py:candidate", "--json")
    seen = ptt(warm, *args, cwd=tmp_path, WARM_MARK="yes")
    assert seen.returncode == 0, seen.stderr
    assert json.loads(seen.stdout)["candidate"].startswith(str(tmp_path))
    unseen = ptt(warm, *args, cwd=tmp_path, WARM_MARK="no")
    assert unseen.returncode == 1


@pytest.mark.slow
def test_two_clients_at_once_start_one_listener_that_exits_when_idle(runtime):
    args = ("validate", f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate")
    env = _env(runtime, PTT_DAEMON_IDLE_S="3")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mcp_server.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("PASS" in out for out, _ in outs)
    logs = list((runtime / "ptt").glob("*.log"))
    assert len(logs) == 1
    assert logs[0].read_text().count("listening on") == 1
    status = _status(runtime)
    assert status["running"] and status["served"] == 2
    # Both modes' zygotes: without a GPU a validation runs its kernels in the interpreter's and checks them with
    # the GPU compiler's front end in the compiled mode's.
    assert status["zygotes"][0] is not None
    assert status["zygotes"][1] is not None
    pid = status["pid"]
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(pid), "the listener outlived its idle timeout"
    assert "idle for" in logs[0].read_text()
    # The losing client's listener may still have been waiting for the lock; if it got it as the first one
    # left, it serves and idles out in turn. Either way no socket outlives the listeners.
    while list((runtime / "ptt").glob("*.sock")) and time.monotonic() < deadline + 15:
        time.sleep(0.5)
    assert not list((runtime / "ptt").glob("*.sock")), logs[0].read_text()[-3000:]


def _slow_candidate(folder: Path, seconds: float) -> str:
    """add_good, after ``seconds`` of touching ``folder/beat`` (so a test can see whether its job still runs)."""
    source = (FX / "add_good.py").read_text()
    wait = (
        "import pathlib\nimport time\n\nimport torch\n\n"
        f"for _ in range(int({seconds} / 0.2)):\n"
        f"    pathlib.Path({str(folder / 'beat')!r}).write_text(str(time.time()))\n"
        "    time.sleep(0.2)\n"
    )
    (folder / "slow_kernel.py").write_text(source.replace("import torch\n", wait, 1))
    return f"{folder}/slow_kernel.py:candidate"


def _handler_of(paths: daemon.Paths, timeout: float = 60) -> int:
    """The pid of the listener's handler in progress, from its status reply (no global state: any thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        handlers = (daemon.query(paths, "status") or {}).get("handlers")
        if handlers:
            return handlers[0]
        time.sleep(0.1)
    raise AssertionError("no request in progress")


@pytest.mark.slow
def test_a_handler_killed_mid_request_falls_back_to_this_process_and_says_so(warm, tmp_path, capfd, monkeypatch):
    candidate = _slow_candidate(tmp_path, 3)
    paths = daemon.Paths.for_env(_env(warm))
    killed: list[int] = []

    def kill_the_handler() -> None:
        pid = _handler_of(paths)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    # The `ptt` entry point in this process: its client hands this process's stdout and stderr to the handler,
    # and runs the command here (on this session's warm runner) once the handler is gone.
    monkeypatch.setattr(sys, "argv", ["ptt", "validate", f"{FX}/add_problem.py:reference", candidate])
    killer = threading.Thread(target=kill_the_handler, daemon=True)
    with _as_caller(warm):
        killer.start()
        code = cli.main()
    killer.join(60)
    out, err = capfd.readouterr()
    assert killed, "no handler was seen"
    assert "stopped before answering" in err and "running the command in this process" in err
    assert code == 0 and "PASS" in out


@pytest.mark.slow
def test_ctrl_c_on_the_client_stops_the_request_and_its_jobs(warm, tmp_path):
    candidate = _slow_candidate(tmp_path, 60)
    client = subprocess.Popen(
        [sys.executable, "-m", "mcp_server.cli", "validate", f"{FX}/add_problem.py:reference", candidate],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(warm),
        # As a terminal's foreground command gets it: a suite started in the background by a non-interactive
        # shell ignores SIGINT, and an ignored SIGINT is inherited (Python then installs no handler for it).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    handler = _handler_of(daemon.Paths.for_env(_env(warm)))
    deadline = time.monotonic() + 120
    while not (tmp_path / "beat").exists() and time.monotonic() < deadline:  # the candidate's job has started
        time.sleep(0.1)
    assert (tmp_path / "beat").exists(), "the candidate's job did not start"
    # Popen.send_signal says nothing when poll() finds the process gone (or reaped by someone else): ask first.
    assert client.poll() is None, f"the client ended before Ctrl-C (returncode {client.returncode})"
    signals = _signal_masks(client.pid)
    os.kill(client.pid, signal.SIGINT)
    try:
        _, err = client.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        client.kill()
        raise AssertionError(
            f"Ctrl-C did not stop the client; its signal masks: {signals}, ours: {_signal_masks()}"
        ) from None
    assert "interrupted" in err, err[-3000:]
    assert client.returncode == 130
    deadline = time.monotonic() + 20
    while _alive(handler) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(handler)
    time.sleep(2)
    beat = (tmp_path / "beat").read_text()
    time.sleep(2)
    assert (tmp_path / "beat").read_text() == beat, "a job of the interrupted request is still running"
