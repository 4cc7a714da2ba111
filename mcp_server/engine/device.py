"""Which device jobs run on, read once per runner by a probe child (the parent never touches CUDA).

``PTT_DEVICE=interpreter`` forces the Triton interpreter on CPU tensors even where a GPU exists;
``PTT_DEVICE=cuda:N`` picks a GPU.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from pydantic import BaseModel

from mcp_server.engine.errors import EnvironmentUnavailable
from mcp_server.engine.jobs import registry
from mcp_server.engine.models import INTERPRETER_DEVICE
from mcp_server.engine.runner import Runner, shared_runner
from mcp_server.engine.runner.forkserver import gpu_device_nodes

_cache: dict[int, DeviceInfo] = {}
_lock = threading.Lock()


class DeviceInfo(BaseModel):
    device: str  # GPU name, or "cpu-interpreter"
    interpreter: bool
    torch: str
    triton: str
    python: str
    capability: list[int] | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    device_count: int = 0
    cuda_runtime: str | None = None
    gpu_index: int | None = None

    @property
    def target(self) -> str:
        """Default compile target: the local GPU's, else Hopper."""
        if self.capability:
            return f"cuda:{self.capability[0] * 10 + self.capability[1]}"
        return "cuda:90"

    def job_env(self) -> dict[str, str | None]:
        """Environment for a child that runs kernels on this device."""
        if self.interpreter:
            return {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        env: dict[str, str | None] = {"TRITON_INTERPRET": None}
        if self.gpu_index is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu_index)
        return env

    @property
    def torch_device(self) -> str:
        return "cpu" if self.interpreter else "cuda"


def _forced() -> str:
    return os.environ.get("PTT_DEVICE", "").strip().lower()


def probe(runner: Runner | None = None) -> DeviceInfo:
    runner = runner or shared_runner()
    with _lock:
        cached = _cache.get(id(runner))
        if cached is not None:
            return cached
    forced = _forced()
    env: dict[str, str | None] = {"TRITON_INTERPRET": None}
    if forced in ("interpreter", "cpu", INTERPRETER_DEVICE):
        env["CUDA_VISIBLE_DEVICES"] = ""
    if env.get("CUDA_VISIBLE_DEVICES") == "" or not gpu_device_nodes():
        # No GPU can be found: probe in the interpreter's fork server, the one every later job here uses, instead
        # of starting the compiler's (a second torch import, ~3 s of CPU) only to learn that.
        env["TRITON_INTERPRET"] = "1"
    outcome = runner.run(registry.PROBE.name, {}, timeout_s=120, env=env)
    with outcome:
        if not outcome.ok or outcome.result is None:
            detail = outcome.failure.message if outcome.failure else "no result"
            raise EnvironmentUnavailable(
                f"Could not start a child process to probe the device: {detail}\n{outcome.stderr_tail}"
            )
        raw: dict[str, Any] = outcome.result
    cuda = bool(raw.get("cuda_available"))
    gpu_index = None
    if forced.startswith("cuda:"):
        gpu_index = int(forced.split(":", 1)[1])
    info = DeviceInfo(
        device=raw.get("name") if cuda else INTERPRETER_DEVICE,
        interpreter=not cuda,
        torch=raw["torch"],
        triton=raw["triton"],
        python=raw["python"],
        capability=raw.get("capability"),
        sm_count=raw.get("sm_count"),
        l2_bytes=raw.get("l2_bytes"),
        memory_bytes=raw.get("memory_bytes"),
        device_count=int(raw.get("device_count") or 0),
        cuda_runtime=raw.get("cuda_runtime"),
        gpu_index=gpu_index,
    )
    with _lock:
        _cache[id(runner)] = info
    return info
