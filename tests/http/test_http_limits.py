"""The HTTP server's limits, each attacked and each with a twin that must still be served: headers that never
finish, a trickled body, a flood of connections past the cap, file arguments outside the served folder (plain,
through ``..`` and through a symlink), a non-Python file named as a spec, and the token in a child's
environment. One server on 127.0.0.1 in a thread with short deadlines (headers 1.5 s, body 2 s) and a cap of 32
connections, serving a temporary folder."""

from __future__ import annotations

import http.client
import json
import os
import select
import shutil
import socket
import threading
import time
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_server.engine.errors import UsageError
from mcp_server.engine.params import TOOLS
from mcp_server.engine.specs import parse_spec
from mcp_server.http_serve import (
    TOKEN_ENV,
    ConnectionGuard,
    PathConfinement,
    build_http_app,
    confine,
    keep_token_from_children,
    resolve_config,
    uvicorn_server,
)

ROOT = Path(__file__).resolve().parents[2]
VALIDATE_FX = ROOT / "tests" / "fixtures" / "validate"
HEADER_S = 1.5
BODY_S = 2.0
CAP = 32
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass
class Served:
    url: str
    port: int
    token: str
    root: Path
    outside: Path
    guard: ConnectionGuard

    def call(self, tool: str, arguments: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """One tools/call (stateless: no session needed); the JSON-RPC result."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        headers = MCP_HEADERS | {"Authorization": f"Bearer {self.token}"}
        response = httpx.post(self.url, json=body, headers=headers, timeout=timeout)
        assert response.status_code == 200, response.text
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1] if data else response.text)["result"]


@pytest.fixture(scope="module")
def served(pool, tmp_path_factory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("limits")
    root, outside = base / "root", base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    for name in ("add_good.py", "add_problem.py"):
        shutil.copy(VALIDATE_FX / name, root / name)
        shutil.copy(VALIDATE_FX / name, outside / name)
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "alias").symlink_to(root / "sub", target_is_directory=True)
    (root / "link_out.py").symlink_to(outside / "add_good.py")
    (root / "link_in.py").symlink_to(root / "add_good.py")
    port = free_port()
    config = resolve_config(
        host="127.0.0.1",
        port=port,
        token="require",
        env={},
        header_timeout_s=HEADER_S,
        body_timeout_s=BODY_S,
        max_connections=CAP,
        roots=[str(root)],
    )
    assert config.token is not None
    from mcp_server.server import build_server

    server, guard = uvicorn_server(build_http_app(build_server(pool=pool), config), config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test HTTP server did not start"
        thread.join(0.05)
    try:
        yield Served(f"http://127.0.0.1:{port}/mcp", port, config.token, root, outside, guard)
    finally:
        server.should_exit = True
        thread.join(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (anything it sends first is read)."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            return False
        try:
            if not sock.recv(65536):
                return True
        except OSError:  # reset
            return True
    return False


def still_open(socks: list[socket.socket]) -> list[int]:
    """Indexes of the sockets the server has not closed (checked without waiting)."""
    return [i for i, s in enumerate(socks) if not closed_by_server(s, 0.01)]


def quick_call_seconds(served: Served) -> float:
    start = time.monotonic()
    result = served.call("stage_status", {"ledger": str(served.root / "sub" / "ledger.db")}, timeout=10)
    assert result["isError"] is False and result["structuredContent"]["ok"] is True
    return time.monotonic() - start


def partial_headers(port: int) -> bytes:
    return f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode()


# --- read timeouts -----------------------------------------------------------------------------------------


def test_headers_that_never_finish_are_closed_within_the_header_timeout_while_a_call_still_answers(served):
    socks = [connect(served.port) for _ in range(20)]
    for s in socks:
        s.sendall(partial_headers(served.port))
    try:
        assert quick_call_seconds(served) < 3
        start = time.monotonic()
        assert all(closed_by_server(s, HEADER_S + 2) for s in socks)
        assert time.monotonic() - start < HEADER_S + 2
    finally:
        for s in socks:
            s.close()


def test_a_connection_that_sends_nothing_is_closed_within_the_header_timeout(served):
    sock = connect(served.port)
    try:
        start = time.monotonic()
        assert closed_by_server(sock, HEADER_S + 2)
        assert time.monotonic() - start > HEADER_S - 0.3
    finally:
        sock.close()


def test_headers_sent_in_pieces_within_the_timeout_are_answered(served):
    sock = connect(served.port)
    try:
        request = f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nConnection: close\r\n\r\n".encode()
        for i in range(0, len(request), len(request) // 3 + 1):
            sock.sendall(request[i : i + len(request) // 3 + 1])
            time.sleep(0.3)
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 401"), reply[:80]  # answered (no token: refused by the gate)
    finally:
        sock.close()


def _body_request(served: Served, length: int) -> bytes:
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nAuthorization: Bearer {served.token}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_body_trickled_one_byte_at_a_time_is_closed_within_the_body_timeout(served):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    sock = connect(served.port)
    try:
        sock.sendall(_body_request(served, len(body)))
        start, sent = time.monotonic(), 0
        while sent < len(body) and time.monotonic() - start < BODY_S + 3:
            try:
                sock.sendall(body[sent : sent + 1])
            except OSError:
                break
            sent += 1
            if closed_by_server(sock, 0.4):
                break
        assert sent < len(body), "the whole body was accepted one byte every 0.4 s"
        assert time.monotonic() - start < BODY_S + 1.5
    finally:
        sock.close()


def test_a_body_sent_in_pieces_within_the_timeout_is_served(served):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    sock = connect(served.port)
    try:
        sock.sendall(_body_request(served, len(body)))
        for i in range(0, len(body), len(body) // 4 + 1):
            sock.sendall(body[i : i + len(body) // 4 + 1])
            time.sleep(0.25)
        reply = b""
        while b"stage_status" not in reply:
            chunk = sock.recv(65536)
            assert chunk, reply[:200]
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200")
    finally:
        sock.close()


# --- the connection cap ------------------------------------------------------------------------------------


def test_a_flood_past_the_cap_pushes_out_the_oldest_unauthenticated_connections_and_a_call_still_answers(served):
    before = served.guard.stats["pushed_out"]
    socks = [connect(served.port) for _ in range(3 * CAP)]
    try:
        time.sleep(0.3)
        assert quick_call_seconds(served) < 3
        open_now = still_open(socks)
        assert len(open_now) < CAP
        assert min(open_now) >= CAP, "an older connection outlived a newer one"
        assert served.guard.stats["pushed_out"] - before >= 2 * CAP
    finally:
        for s in socks:
            s.close()


def _keep_alive(served: Served, token: str | None) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=5)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    conn.request("GET", "/mcp", headers=headers)
    response = conn.getresponse()
    response.read()
    assert response.status in (401, 405, 406), response.status  # answered, connection kept open
    return conn


def test_an_authenticated_idle_connection_outlives_a_flood_of_unauthenticated_ones(served):
    trusted = _keep_alive(served, served.token)
    untrusted = _keep_alive(served, None)  # the twin: same request without the token
    socks = [connect(served.port) for _ in range(CAP + 8)]
    try:
        time.sleep(0.2)
        trusted.request("GET", "/mcp", headers={"Authorization": f"Bearer {served.token}"})
        assert trusted.getresponse().status in (405, 406)  # the same connection, still open
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            untrusted.request("GET", "/mcp")
            untrusted.getresponse()
    finally:
        trusted.close()
        untrusted.close()
        for s in socks:
            s.close()


class _Conn:
    def __init__(self, phase: str, trusted: bool):
        self.phase, self.trusted, self.cut_for = phase, trusted, ""

    def cut(self, why: str) -> None:
        self.cut_for = why


def _guard_with(*conns: _Conn) -> ConnectionGuard:
    guard = ConnectionGuard(resolve_config(env={}, max_connections=len(conns)))
    for c in conns:
        guard.open[c] = None  # type: ignore[index]
    return guard


def test_at_the_cap_the_oldest_unauthenticated_goes_first_then_an_idle_one_and_a_running_call_never():
    running = [_Conn("app", True) for _ in range(4)]
    idle, first, second, answering = (
        _Conn("request", True),
        _Conn("body", False),
        _Conn("request", False),
        _Conn("app", False),
    )
    guard = _guard_with(running[0], idle, answering, first, running[1], second, running[2], running[3])
    assert guard.admit(_Conn("request", False))  # type: ignore[arg-type]
    assert first.cut_for and not (second.cut_for or idle.cut_for or answering.cut_for)
    assert "not yet authenticated" in first.cut_for
    guard = _guard_with(*running, idle, answering, _Conn("app", True), _Conn("app", True))
    assert guard.admit(_Conn("request", False))  # type: ignore[arg-type]
    assert "idle" in idle.cut_for and not any(c.cut_for for c in running) and not answering.cut_for


def test_when_every_connection_runs_a_call_a_new_one_is_refused():
    guard = ConnectionGuard(resolve_config(env={}, max_connections=8))
    for _ in range(8):
        guard.open[_Conn("app", True)] = None  # type: ignore[index]
    assert guard.admit(_Conn("request", False)) is False  # type: ignore[arg-type]
    assert guard.stats["refused"] == 1


def test_limits_are_checked_and_idle_connections_close_within_30_s_by_default():
    config = resolve_config(env={})
    assert config.header_timeout_s <= 30 and config.keep_alive_s <= 30 and config.body_timeout_s <= 30
    for bad in ({"header_timeout_s": 0}, {"body_timeout_s": -1}, {"keep_alive_s": 31}, {"max_connections": 2}):
        with pytest.raises(UsageError):
            resolve_config(env={}, **bad)
    with pytest.raises(UsageError, match="not a folder"):
        resolve_config(env={}, roots=["/nonexistent/folder"])


# --- file arguments ----------------------------------------------------------------------------------------


def _validate(served: Served, reference: str, candidate: str) -> dict[str, Any]:
    return served.call(
        "validate_against_reference",
        {"reference": reference, "candidate": candidate, "seeds": 1, "derive_shapes": False, "determinism": False},
        timeout=300,
    )


def _error_text(result: dict[str, Any]) -> str:
    assert result["isError"] is True, result
    return result["content"][0]["text"]


@pytest.mark.parametrize(
    "candidate",
    [
        "/etc/passwd:x",
        "{outside}/add_good.py:candidate",
        "{root}/../outside/add_good.py:candidate",
        "{root}/escape/add_good.py:candidate",
        "{root}/link_out.py:candidate",
    ],
    ids=["etc-passwd", "absolute", "dotdot", "symlinked-folder", "symlinked-file"],
)
def test_a_file_argument_outside_the_root_is_refused_with_a_clear_error(served, candidate):
    spec = candidate.format(root=served.root, outside=served.outside)
    text = _error_text(_validate(served, f"{served.root}/add_problem.py:reference", spec))
    assert "outside the folders this server serves" in text and str(served.root) in text and "--root" in text
    assert "root:x:" not in text


@pytest.mark.slow
def test_a_file_argument_inside_the_root_works_also_through_a_symlink_that_stays_inside(served):
    result = _validate(served, f"{served.root}/add_problem.py:reference", f"{served.root}/link_in.py:candidate")
    assert result["isError"] is False and result["structuredContent"]["ok"] is True, result


def test_written_paths_are_confined_too(served):
    inside = served.call("stage_status", {"ledger": str(served.root / "alias" / "ledger.db")})
    assert inside["isError"] is False
    for ledger in (served.outside / "ledger.db", served.root / "escape" / "ledger.db"):
        assert "outside the folders" in _error_text(served.call("stage_status", {"ledger": str(ledger)}))
    kernel = f"{served.root}/add_good.py:_add_kernel"
    text = _error_text(served.call("compile_kernel", {"kernel": kernel, "out_dir": str(served.outside / "ir")}))
    assert "out_dir" in text and not (served.outside / "ir").exists()


def test_a_type_list_is_not_a_path_and_an_inputs_file_is():
    roots = [Path("/srv/work")]
    assert confine("f32[1024], f32[1024]", "inputs", roots) is None
    assert confine("/etc/x.py:make", "inputs", roots) is not None
    assert confine("/srv/work/x.py:make", "inputs", roots, cwd=Path("/srv/work")) is None
    assert confine("x.py:a/../../../../etc/passwd", "spec", roots, cwd=Path("/srv/work")) is not None
    assert confine("~/x.py:fn", "spec", roots) is not None


# Every string parameter of every MCP tool is either marked as a path in the shared table or known not to
# name a file: a new parameter must be placed on one side.
NOT_PATHS = {
    "signature", "target", "sizes", "notes", "name", "query", "no_autotune_reason", "mode",
    "kernel_source", "kernel_name", "reference_source", "reference_name", "candidate_source", "candidate_name",
    "file_source", "launcher_name", "allow_torch_ops", "constexprs", "tolerances", "dims",
}  # fmt: skip


def _takes_text(annotation: Any) -> bool:
    """Whether a parameter's type holds free text anywhere (``str``, ``str | None``, ``list[str]`` …)."""
    return annotation is str or any(_takes_text(a) for a in typing.get_args(annotation))


def test_every_string_parameter_is_either_a_path_or_known_not_to_be_one():
    for tool in TOOLS:
        for p in tool.on("mcp"):
            if _takes_text(p.type) and not p.path:
                assert p.name in NOT_PATHS, f"{tool.tool}.{p.name}: mark it path= in params.py, or list it here"
    confinement = PathConfinement([Path("/srv/work")])
    for tool in TOOLS:
        for p in tool.on("mcp"):
            if p.path:
                value = (
                    ["/etc/passwd.py:x"]
                    if typing.get_origin(p.type) is list or "list" in str(p.type)
                    else "/etc/passwd.py:x"
                )
                assert confinement.check(str(tool.tool), {p.name: value}), (tool.tool, p.name)


# --- the contents of a file that is not Python -------------------------------------------------------------


def test_a_non_python_file_named_as_a_spec_is_not_quoted(served, tmp_path):
    notes = served.root / "notes.txt"
    notes.write_text("root:x:0:0:SECRET-LINE-42:/root:/bin/bash\n")
    text = _error_text(_validate(served, f"{served.root}/add_problem.py:reference", f"{notes}:x"))
    assert "SECRET-LINE-42" not in text and "not Python source" in text
    with pytest.raises(UsageError) as exc:
        parse_spec(f"{notes}:x", role="candidate")
    assert "SECRET-LINE-42" not in str(exc.value)


def test_a_python_file_with_a_syntax_error_still_shows_its_line(served):
    broken = served.root / "broken.py"
    broken.write_text("def candidate(x:\n    return x  # BROKEN-LINE-7\n")
    text = _error_text(_validate(served, f"{served.root}/add_problem.py:reference", f"{broken}:candidate"))
    assert "syntax error" in text and "def candidate(x:" in text


# --- the token and the children ----------------------------------------------------------------------------


def test_the_token_is_taken_out_of_the_environment_before_children_start():
    env = {TOKEN_ENV: "s" * 40, "PATH": "/bin"}
    keep_token_from_children(env)
    assert env == {"PATH": "/bin"}


DUMP = """
import json, os
from pathlib import Path


def _environ(pid):
    try:
        return Path("/proc/" + str(pid) + "/environ").read_bytes().decode(errors="replace")
    except OSError as exc:
        return "unreadable: " + str(exc)


Path(__file__).with_name("env_dump.json").write_text(
    json.dumps({"env": dict(os.environ), "parent": _environ(os.getppid())})
)
"""


@pytest.mark.slow
def test_a_candidate_finds_no_token_in_its_environment_or_its_parents(tmp_path):
    import subprocess
    import sys

    token = "T0KEN-" + "q" * 40
    port = free_port()
    (tmp_path / "add_problem.py").write_text((VALIDATE_FX / "add_problem.py").read_text())
    (tmp_path / "dumps_env.py").write_text(DUMP + (VALIDATE_FX / "add_good.py").read_text())
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env |= {TOKEN_ENV: token, "PTT_DEVICE": "interpreter", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_server.cli", "serve", "--transport", "http", "--port", str(port),
         "--token", "require", "--root", str(tmp_path)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        served = Served(f"http://127.0.0.1:{port}/mcp", port, token, tmp_path, tmp_path, None)  # type: ignore[arg-type]
        deadline = time.monotonic() + 120
        while True:
            try:
                result = _validate(served, f"{tmp_path}/add_problem.py:reference", f"{tmp_path}/dumps_env.py:candidate")
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None, "the server never started listening"
                time.sleep(0.3)
        assert result["isError"] is False, result
        # Reading /proc is itself named by the candidate scan; nothing else may be wrong with the kernel.
        errors = {f["kind"] for f in result["structuredContent"]["findings"] if f["severity"] == "error"}
        assert errors <= {"evasion"}, result
        dump = json.loads((tmp_path / "env_dump.json").read_text())
        assert "PATH" in dump["env"] and dump["parent"]  # the twin: the dump saw the environment
        assert token not in json.dumps(dump)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
