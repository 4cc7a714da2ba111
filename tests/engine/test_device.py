"""Probing the device: on a machine with no GPU device files the probe runs in the interpreter's fork server,
the one every later job there uses, so a runner starts one fork server instead of two."""

from __future__ import annotations

import pytest

from mcp_server.engine import device
from mcp_server.engine.runner.parent import JobOutcome

PROBED = {"torch": "2.x", "triton": "3.x", "python": "3.x", "cuda_available": False, "interpreter": True}


class _Recorder:
    """Stands in for a Runner: records the environment each job asks for and answers as a CPU machine."""

    def __init__(self, tmp_path):
        self.envs: list[dict] = []
        self.tmp_path = tmp_path

    def run(self, entry, params, *, timeout_s, env):
        self.envs.append(dict(env))
        return JobOutcome(result=dict(PROBED), failure=None, wall_s=0.0, job_dir=self.tmp_path)


@pytest.mark.parametrize(
    ("nodes", "forced", "interpret"),
    [(False, "", "1"), (True, "", None), (True, "interpreter", "1"), (False, "cuda:0", "1")],
    ids=["no-device-files", "device-files", "forced-interpreter", "forced-gpu-without-device-files"],
)
def test_the_probe_asks_for_the_fork_server_the_jobs_will_use(monkeypatch, tmp_path, nodes, forced, interpret):
    monkeypatch.setenv("PTT_DEVICE", forced)
    monkeypatch.setattr(device, "gpu_device_nodes", lambda: nodes)
    monkeypatch.setattr(device, "_cache", {})  # probes are cached per runner id
    fake = _Recorder(tmp_path)
    info = device.probe(fake)  # type: ignore[arg-type]
    assert fake.envs[0].get("TRITON_INTERPRET") == interpret
    # On this (CPU) answer the jobs go to the interpreter's server: the one the probe started when it could.
    assert info.interpreter and info.job_env()["TRITON_INTERPRET"] == "1"


def test_device_files_are_looked_for_where_gpu_drivers_put_them(monkeypatch):
    import glob

    seen: list[str] = []
    monkeypatch.setattr(glob, "glob", lambda pattern: seen.append(pattern) or [])
    monkeypatch.setattr(device.os.path, "exists", lambda path: seen.append(path) or path == "/dev/dxg")
    assert device.gpu_device_nodes()
    assert seen == ["/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg"]


@pytest.mark.parametrize(
    ("nodes", "interpret", "dynamo"),
    [(False, None, False), (True, None, True), (False, "1", False), (True, "1", False)],
    ids=["compiled-without-device-files", "compiled-with-device-files", "interpreter", "interpreter-on-a-gpu-host"],
)
def test_servers_preload_dynamo_only_where_jobs_build_compile_baselines(monkeypatch, nodes, interpret, dynamo):
    # Seconds of torch._dynamo import, paid once per server only where bench/audit jobs call torch.compile.
    import importlib

    from mcp_server.engine.runner import forkserver

    imported: list[str] = []
    monkeypatch.setattr(forkserver, "gpu_device_nodes", lambda: nodes)
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name))
    if interpret:
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    forkserver.preload()
    assert ("torch._dynamo" in imported) is dynamo
    assert set(forkserver.PRELOAD) - {"torch._dynamo"} <= set(imported)
    # Triton's launch path imports Gluon in interpreted and compiled mode alike (a fifth of a small job's time).
    assert "triton.experimental.gluon" in imported


def test_the_probe_finds_inductors_cache_dir_without_importing_inductor(monkeypatch, tmp_path):
    # The probe's cache check runs inductor's own cache_dir() loaded from its file: the sandbox's
    # TORCHINDUCTOR_CACHE_DIR is honoured, the default is inductor's per-user temp folder, and (when inductor
    # was not imported yet) torch._inductor's package init, which imports torch._dynamo, does not run.
    import getpass
    import sys
    import tempfile

    from mcp_server.engine.jobs import probe

    loaded = "torch._inductor" in sys.modules
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    assert probe._inductor_cache_dir() == str(tmp_path / "inductor") and (tmp_path / "inductor").is_dir()
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert probe._inductor_cache_dir() == str(tmp_path / f"torchinductor_{getpass.getuser()}")
    assert ("torch._inductor" in sys.modules) is loaded
