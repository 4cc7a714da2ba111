"""Shared for the serving tests: one runner and one worker pool (starting fork servers costs seconds), and
one HTTP server on 127.0.0.1 in a thread of this process, with a bearer token.

On a GPU machine the runner hides every GPU from its jobs (CUDA_VISIBLE_DEVICES=""), so these tests judge the
same way there as in CI; the GPU pool has its own tests (test_gpu_pool.py, marked gpu). Without a GPU there is
nothing to hide and the session's shared runner (tests/conftest.py) serves, which saves starting fork servers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcp_server.engine.pool import WorkerPool, discover
from mcp_server.engine.runner import Runner, shared_runner

ROOT = Path(__file__).resolve().parents[2]
VALIDATE_FX = ROOT / "tests" / "fixtures" / "validate"
EVAL_FX = ROOT / "tests" / "fixtures" / "eval"


@pytest.fixture(scope="session")
def runner() -> Iterator[Runner]:
    import torch

    if not torch.cuda.is_available():
        yield shared_runner()
        return
    with Runner(base_env={"CUDA_VISIBLE_DEVICES": ""}) as r:
        yield r


@pytest.fixture(scope="session")
def pool(runner: Runner) -> Iterator[WorkerPool]:
    with discover(runner, cpu_slots=4) as p:
        yield p


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
