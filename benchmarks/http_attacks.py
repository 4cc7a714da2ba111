"""Attacks on a live `ptt serve --transport http` on 127.0.0.1, with its default limits; prints what held.

    python benchmarks/http_attacks.py [--out benchmarks/results/cpu/http_attacks.txt]

The server runs as its own process with a token from PTT_SERVE_TOKEN, `--root` a temporary folder, and its
open-file limit at 1024 (the usual default), as an agent's machine would run it. No GPU is needed: every tool
call here is refused before any child starts, or is one validation under the interpreter.

1. Slow-loris headers: 300 connections send part of a request's headers and nothing more. An authenticated call
   must answer within 3 s meanwhile; every one of the 300 must be closed within the header timeout (+2 s).
2. Connection flood: 1100 connections that send nothing (more than the server's 1024 descriptors). An
   authenticated call must answer within 3 s; at most --max-connections stay open.
3. Idle: one connection that sends nothing is closed within 30 s.
4. Trickled body: the headers, then the body one byte every 2 s; the connection must be closed within the body
   timeout (+2 s), before the body is complete.
5. File arguments: candidate=/etc/passwd:x, a spec through a symlink out of the root, out_dir and ledger outside
   the root: each refused, naming --root; a non-Python file inside the root named as a spec: its text not quoted.
6. The token: a candidate that writes its environment and its parent's /proc environ to a file; the token must
   be in neither (and the validation still passes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
FX = ROOT / "tests" / "fixtures" / "validate"
TOKEN = "bench-" + "k" * 40
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        env = {k: v for k, v in os.environ.items()} | {
            "PTT_SERVE_TOKEN": TOKEN,
            "PTT_DEVICE": "interpreter",
            "PYTHONPATH": str(ROOT),
        }

        def limit_files() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        command = [sys.executable, "-m", "mcp_server.cli", "serve", "--transport", "http", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, "--token", "require", "--root", str(root)],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=limit_files,
        )
        self.banner: list[str] = []
        threading.Thread(target=lambda: [self.banner.append(line) for line in self.proc.stderr], daemon=True).start()
        deadline = time.monotonic() + 180
        while True:
            try:
                httpx.get(self.url, timeout=5)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the server did not start:\n" + "".join(self.banner)) from None
                time.sleep(0.3)

    def call(self, tool: str, arguments: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        r = httpx.post(self.url, json=body, headers=HEADERS | {"Authorization": f"Bearer {TOKEN}"}, timeout=timeout)
        data = [line[5:] for line in r.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1] if data else r.text)["result"]

    def timed_call(self, root: Path) -> float:
        start = time.monotonic()
        result = self.call("stage_status", {"ledger": str(root / "ledger.db")}, timeout=30)
        assert not result["isError"], result
        return time.monotonic() - start

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def closed(sock: socket.socket, within: float) -> bool:
    deadline = time.monotonic() + within
    poller = select.poll()  # not select(): the flood's descriptors go past 1024
    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:  # at least one look, also with within=0
        if not poller.poll(max(deadline - time.monotonic(), 0) * 1000):
            return False
        try:
            if not sock.recv(65536):
                return True
        except OSError:
            return True
    return False


def wait_all_closed(socks: list[socket.socket], within: float) -> tuple[int, float]:
    """How many are still open after ``within`` s, and when the last one closed (s)."""
    start, pending = time.monotonic(), list(socks)
    while pending and time.monotonic() - start < within:
        pending = [s for s in pending if not closed(s, 0.0)]
        if pending:
            time.sleep(0.2)
    return len(pending), time.monotonic() - start


def report(lines: list[str], name: str, held: bool, detail: str) -> None:
    line = f"{'HELD ' if held else 'BROKE'}  {name}: {detail}"
    print(line, flush=True)
    lines.append(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))  # the attacker's side

    work = Path(tempfile.mkdtemp(prefix="ptt-http-attacks-"))
    root, outside = work / "root", work / "outside"
    root.mkdir()
    outside.mkdir()
    for name in ("add_problem.py", "add_good.py"):
        shutil.copy(FX / name, root / name)
        shutil.copy(FX / name, outside / name)
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "notes.txt").write_text("root:x:0:0:SECRET-NOTE-LINE:/root:/bin/bash\n")
    dump = "import json, os\nfrom pathlib import Path\n\n\ndef _environ(pid):\n    try:\n"
    dump += '        return Path("/proc/" + str(pid) + "/environ").read_bytes().decode(errors="replace")\n'
    dump += '    except OSError as exc:\n        return "unreadable: " + str(exc)\n\n\n'
    dump += 'Path(__file__).with_name("env_dump.json").write_text(\n'
    dump += '    json.dumps({"env": dict(os.environ), "parent": _environ(os.getppid())})\n)\n'
    (root / "dumps_env.py").write_text(dump + (FX / "add_good.py").read_text())

    lines: list[str] = []
    started = time.monotonic()
    server = Server(root)
    banner = "".join(server.banner)
    print(banner, flush=True)
    cap = int(banner.split("connections: at most ")[1].split(";")[0])
    header_s = float(banner.split("headers within ")[1].split(" s")[0])
    body_s = float(banner.split("bodies within ")[1].split(" s")[0])
    try:
        # 4 runs beside the others: it takes the body timeout.
        trickle: dict[str, Any] = {}

        def trickled_body() -> None:
            sock = socket.create_connection(("127.0.0.1", server.port))
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
            sock.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            )
            start, sent = time.monotonic(), 0
            while sent < len(body) and time.monotonic() - start < body_s + 10:
                try:
                    sock.sendall(body[sent : sent + 1])
                except OSError:
                    break
                sent += 1
                if closed(sock, 2.0):
                    break
            trickle.update(sent=sent, total=len(body), seconds=time.monotonic() - start)
            sock.close()

        trickler = threading.Thread(target=trickled_body)
        trickler.start()

        # 1. slow-loris headers
        socks = []
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Slow: ".encode())
            socks.append(s)
        answer = server.timed_call(root)
        left, last = wait_all_closed(socks, header_s + 2)
        report(lines, "authenticated call beside 300 unfinished headers", answer < 3, f"answered in {answer:.2f} s")
        report(
            lines,
            "300 unfinished headers closed",
            left == 0,
            f"{300 - left}/300 closed, the last after {last:.1f} s (header timeout {header_s:g} s)",
        )
        for s in socks:
            s.close()

        # 2. connection flood past the descriptor limit
        socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(1100)]
        time.sleep(0.5)
        answer = server.timed_call(root)
        still = sum(not closed(s, 0.0) for s in socks)
        report(lines, "authenticated call beside 1100 open connections", answer < 3, f"answered in {answer:.2f} s")
        report(lines, "connections held at the cap", still <= cap, f"{still} of 1100 still open (cap {cap})")
        for s in socks:
            s.close()

        # 3. idle
        sock = socket.create_connection(("127.0.0.1", server.port))
        start = time.monotonic()
        shut = closed(sock, 31)
        idle_s = time.monotonic() - start
        report(lines, "idle connection closed within 30 s", shut and idle_s <= 30, f"closed after {idle_s:.1f} s")
        sock.close()

        trickler.join()
        report(
            lines,
            "body trickled one byte every 2 s",
            trickle["sent"] < trickle["total"] and trickle["seconds"] <= body_s + 2,
            f"closed after {trickle['seconds']:.1f} s with {trickle['sent']}/{trickle['total']} bytes sent "
            f"(body timeout {body_s:g} s)",
        )

        # 5. file arguments
        ref = f"{root}/add_problem.py:reference"
        cases = {
            "candidate=/etc/passwd:x": ("validate_against_reference", {"reference": ref, "candidate": "/etc/passwd:x"}),
            "a spec through a symlink out of the root": (
                "validate_against_reference",
                {"reference": ref, "candidate": f"{root}/escape/add_good.py:candidate"},
            ),
            "a spec with .. out of the root": (
                "validate_against_reference",
                {"reference": ref, "candidate": f"{root}/../outside/add_good.py:candidate"},
            ),
            "out_dir outside the root": (
                "compile_kernel",
                {"kernel": f"{root}/add_good.py:_add_kernel", "out_dir": str(outside / "ir")},
            ),
            "ledger outside the root": ("stage_status", {"ledger": str(outside / "ledger.db")}),
        }
        for name, (tool, arguments) in cases.items():
            result = server.call(tool, arguments)
            text = result["content"][0]["text"]
            ok = result["isError"] and "outside the folders" in text and "root:x:" not in text
            report(lines, f"refused: {name}", ok, text[:110].replace("\n", " ") + "…")
        result = server.call("validate_against_reference", {"reference": ref, "candidate": f"{root}/notes.txt:x"})
        text = result["content"][0]["text"]
        report(lines, "a non-Python file's text is not quoted", "SECRET-NOTE-LINE" not in text, text[:110] + "…")

        # 6. the token and the children
        result = server.call(
            "validate_against_reference",
            {"reference": ref, "candidate": f"{root}/dumps_env.py:candidate", "seeds": 1, "derive_shapes": False},
        )
        seen = (root / "env_dump.json").read_text() if (root / "env_dump.json").exists() else ""
        report(
            lines,
            "the token is not in a candidate's environment or its parent's",
            bool(seen) and "PATH" in seen and TOKEN not in seen,
            f"dump of {len(seen)} bytes, token {'FOUND' if TOKEN in seen else 'absent'}; "
            f"the validation: ok={result.get('structuredContent', {}).get('ok')}",
        )
        alive = server.proc.poll() is None
        report(lines, "the server is still serving", alive and server.timed_call(root) < 3, "answered")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary = (
        f"{sum(line.startswith('HELD') for line in lines)}/{len(lines)} held in {time.monotonic() - started:.0f} s"
    )
    print(summary)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            "# benchmarks/http_attacks.py: ptt serve --transport http on 127.0.0.1, default limits, CPU only\n"
            + "\n".join(lines)
            + "\n"
            + summary
            + "\n"
        )
    return 0 if all(line.startswith("HELD") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
