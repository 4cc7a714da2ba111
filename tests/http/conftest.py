"""Shared for the HTTP tests: one HTTP server on 127.0.0.1 in a thread of this process, with a bearer token,
serving the session's worker pool (the `pool` fixture of tests/conftest.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from mcp_server.engine.pool import WorkerPool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    port: int
    token: str


@pytest.fixture(scope="session")
def live_server(pool: WorkerPool) -> Iterator[LiveServer]:
    import uvicorn

    from mcp_server.http_serve import build_http_app, resolve_config
    from mcp_server.server import build_server

    port = free_port()
    config = resolve_config(
        host="127.0.0.1",
        port=port,
        token="require",
        allow_origins=["https://agents.example:8443"],
        max_concurrency=4,
        max_request_bytes=64 * 1024,
        env={},
    )
    assert config.token is not None
    app = build_http_app(build_server(pool=pool), config)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test HTTP server did not start")
        thread.join(0.05)
    try:
        yield LiveServer(url=f"http://127.0.0.1:{port}/mcp", port=port, token=config.token)
    finally:
        server.should_exit = True
        thread.join(10)
