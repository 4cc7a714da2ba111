"""`ptt serve --transport http` as a real process: it prints where to connect and a generated token once,
serves a validation to a client holding that token, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "validate"


@pytest.mark.slow
def test_the_http_server_process_prints_its_token_once_and_serves_with_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PTT_SERVE_TOKEN"}
    env["PTT_DEVICE"] = "interpreter"  # the same on a GPU machine
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "with_zygotes.py"),  # its fork servers come from the test run's zygotes
            "-m",
            "mcp_server.cli",
            "serve",
            "--transport",
            "http",
            "--port",
            str(port),
            "--token",
            "require",
            "--max-concurrency",
            "2",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    try:
        seen: list[str] = []
        while not seen or "bearer token (shown once" not in seen[-1]:
            seen.append(lines.get(timeout=120))
        token = lines.get(timeout=10).strip()
        text = "".join(seen)
        assert f"http://127.0.0.1:{port}/mcp" in text and "at most 2 tool calls at once" in text
        assert len(token) >= 40 and token not in text  # printed on its own line, once (checked again below)

        url = f"http://127.0.0.1:{port}/mcp"
        # The banner is printed while the server starts; wait until it accepts connections.
        deadline = time.monotonic() + 60
        while True:
            try:
                first = httpx.post(url, json={}, timeout=10)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server never started listening"
                time.sleep(0.2)
        assert first.status_code == 401

        async def call():
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with http, Client(streamable_http_client(url, http_client=http)) as c:
                return await c.call_tool(
                    "validate_against_reference",
                    {
                        "reference": f"{FX}/add_problem.py:reference",
                        "candidate": f"{FX}/add_good.py:candidate",
                        "seeds": 1,
                        "derive_shapes": False,
                    },
                )

        result = anyio.run(call)
        assert result.structured_content["ok"] is True, result.content
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    # uvicorn shuts down gracefully, then re-raises the signal it caught (so the exit status is the signal's).
    assert code in (0, -signal.SIGTERM)
    reader.join(10)
    rest = "".join(lines.get() for _ in range(lines.qsize()))
    assert "Traceback" not in rest and token not in rest
