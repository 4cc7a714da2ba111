"""The GPU-only measurement scripts: without a GPU they say so and exit 2; their bookkeeping is checked on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["row_kernels_sweep.py", "cross_entropy_peers.py", "attention_breakdown.py", "attention_bwd_schedules.py"]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name[:-3]}", ROOT / "benchmarks" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", SCRIPTS)
def test_without_a_gpu_the_script_names_the_need_and_exits_2(name):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs a CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_breakdown_sorts_each_kernel_into_its_role():
    role = _load("attention_breakdown.py").role
    # The names the H100 run recorded (results/h100/attention_breakdown.json), by provider.
    recorded = json.loads((ROOT / "benchmarks/results/h100/attention_breakdown.json").read_text())
    kernels = {name for row in recorded["rows"] for times in row["kernels_us"].values() for name in times}
    roles = {name: role(name) for name in kernels}
    assert roles["_attn_bwd_preprocess_kernel"] == "backward pre-pass"
    assert roles["_attn_bwd_hopper"] == "backward main"
    assert roles["_attn_fwd_hopper"] == "forward"
    by_role = {r: sorted(n for n, got in roles.items() if got == r) for r in set(roles.values())}
    assert any("dot_do_o" in n for n in by_role["backward pre-pass"])
    assert any("bprop" in n for n in by_role["backward main"])
    assert any("fprop" in n for n in by_role["forward"])
    assert any("convert_dq" in n for n in by_role["dQ conversion"])
    assert any("copy_kernel" in n for n in by_role["dQ conversion"])
    assert any("Fill" in n for n in by_role["fills"]) and any("Memset" in n for n in by_role["fills"])
    assert "other" not in by_role
    # The recorded role sums are the sums of the recorded kernels.
    for row in recorded["rows"]:
        for provider, times in row["kernels_us"].items():
            for r, total in row["roles_us"][provider].items():
                assert total == pytest.approx(sum(us for n, us in times.items() if role(n) == r))
