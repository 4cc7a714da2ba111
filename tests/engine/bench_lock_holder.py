"""Entry point of the process test_bench.py spawns to hold the GPU lock. A module of its own: the spawned
interpreter imports only this and the bench engine, not the test module (which imports torch)."""

from __future__ import annotations

import os
import time
from typing import Any

from mcp_server.engine import bench as B
from mcp_server.engine.device import DeviceInfo


def hold_lock(cache: str, seconds: float, ready: Any) -> None:
    os.environ["PTT_CACHE_DIR"] = cache
    device = DeviceInfo(device="x", interpreter=False, torch="t", triton="t", python="p")
    with B.gpu_lock(device):
        ready.set()
        time.sleep(seconds)
