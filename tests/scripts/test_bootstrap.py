"""scripts/bootstrap.py chooses the torch build by the machine: the CPU wheel (pinned ``+cpu``, so no index can
hand out a CUDA build) without a GPU, the CUDA wheel with one, and an importable torch is never replaced.
Checked on the plan and on ``--print-plan``, which runs no pip and creates nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bootstrap.py"


@pytest.fixture(scope="module")
def boot():
    saved = {
        k: os.environ.pop(k) for k in ("PTT_TORCH_SPEC", "PTT_TRITON_SPEC", "PTT_TORCH_CPU_INDEX") if k in os.environ
    }
    spec = importlib.util.spec_from_file_location("ptt_bootstrap", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
        os.environ.update(saved)


def _specs(attempts: list[list[str]]) -> list[str]:
    return [a[-1] for a in attempts]


def test_without_a_gpu_torch_comes_from_the_cpu_index_pinned_to_the_cpu_build(boot):
    plan = boot.plan(boot.Facts(gpu=False, gpu_reason="none", torch=None, platform="linux"))
    assert plan.torch_attempts[0] == ["--index-url", "https://download.pytorch.org/whl/cpu", "torch==2.13.0+cpu"]
    # The fallback is pip's configured sources with the same pin, never a plain torch==2.13.0.
    assert plan.torch_attempts[1] == ["torch==2.13.0+cpu"]
    assert plan.triton == ["triton==3.6.0"]
    assert "CPU build" in plan.torch_choice


def test_an_unreachable_cpu_index_puts_the_configured_sources_first_with_the_same_pin(boot):
    facts = boot.Facts(gpu=False, gpu_reason="none", torch=None, platform="linux", cpu_index_reachable=False)
    plan = boot.plan(facts)
    assert plan.torch_attempts[0] == ["torch==2.13.0+cpu"]
    assert plan.torch_attempts[1][:2] == ["--index-url", "https://download.pytorch.org/whl/cpu"]
    assert all(spec.endswith("+cpu") for spec in _specs(plan.torch_attempts))
    assert any("does not answer" in note for note in plan.notes)


def test_with_a_gpu_and_no_torch_the_cuda_wheel_comes_from_the_configured_index_with_its_own_triton(boot):
    plan = boot.plan(boot.Facts(gpu=True, gpu_reason="nvidia-smi lists 1 GPU(s)", torch=None, platform="linux"))
    assert plan.torch_attempts == [["torch==2.13.0"]]
    assert plan.triton is None  # the CUDA wheel requires the Triton it was built with
    assert "nvidia-smi" in plan.torch_choice


@pytest.mark.parametrize("gpu", [True, False])
def test_an_importable_cuda_torch_is_kept(boot, gpu):
    cuda = boot.Torch("2.11.0+cu128", cuda="12.8", device=gpu)
    plan = boot.plan(boot.Facts(gpu=gpu, gpu_reason="r", torch=cuda, torch_where=".venv", triton=True))
    assert plan.torch_attempts == [] and plan.triton is None
    assert "keeping torch 2.11.0+cu128 (CUDA 12.8 build)" in plan.torch_choice
    # Without a GPU it still works under the interpreter; the note says how to get the small build.
    assert bool(plan.notes) is (not gpu)


def test_a_kept_cpu_torch_without_triton_gets_the_tested_triton(boot):
    plan = boot.plan(boot.Facts(gpu=False, gpu_reason="r", torch=boot.Torch("2.13.0+cpu"), triton=False))
    assert plan.torch_attempts == [] and plan.notes == []
    assert plan.triton == ["triton==3.6.0"]


def test_macos_takes_pypis_wheel_which_is_the_cpu_build(boot):
    plan = boot.plan(boot.Facts(gpu=False, gpu_reason="none", torch=None, platform="darwin"))
    assert plan.torch_attempts == [["torch==2.13.0"]]


def _print_plan(tmp_path: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTT_")}
    env["PTT_TORCH_CPU_INDEX"] = "http://127.0.0.1:9/whl/cpu"  # refused at once: a deterministic "unreachable"
    venv = tmp_path / "venv"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--print-plan", "--isolated", "--venv", str(venv), "--dev", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert not venv.exists(), "--print-plan must not create the venv"
    return proc.stdout


@pytest.mark.skipif(sys.platform == "darwin", reason="the +cpu label is for Linux and Windows wheels")
def test_print_plan_without_a_gpu_shows_only_cpu_pinned_torch_installs(tmp_path):
    out = _print_plan(tmp_path, "--gpu", "no")
    torch_lines = [line for line in out.splitlines() if "pip install" in line and "torch==" in line]
    assert len(torch_lines) == 2, out
    assert all(line.endswith("torch==2.13.0+cpu") for line in torch_lines), out
    assert "--index-url http://127.0.0.1:9/whl/cpu" in torch_lines[1]  # unreachable, so tried second
    assert "triton==3.6.0" in out and "[dev]" in out
    assert out.startswith("torch: installing torch==2.13.0+cpu (CPU build")


def test_print_plan_with_a_gpu_shows_the_cuda_wheel_and_no_cpu_index(tmp_path):
    out = _print_plan(tmp_path, "--gpu", "yes")
    torch_lines = [line for line in out.splitlines() if "pip install" in line and "torch==" in line]
    assert [line.rsplit(" ", 1)[-1] for line in torch_lines] == ["torch==2.13.0"], out
    assert "--index-url" not in out and "triton==" not in out
    assert "(CUDA build)" in out and "--gpu yes" in out


# `make demo` run from an activated virtualenv that holds torch: .venv must see that torch, not the base
# installation's packages that --system-site-packages alone gives (there pip would fetch torch from the index).
_FIND = (
    "import importlib.util, json, sys; "
    "print(json.dumps([sys.path, getattr(importlib.util.find_spec('torch'), 'origin', None)]))"
)


def _torch_seen_by(python: Path) -> tuple[list[str], str | None]:
    """(sys.path, the file `import torch` would load) of ``python``, without importing torch."""
    import json

    out = subprocess.run([str(python), "-c", _FIND], capture_output=True, text=True, timeout=60, check=True)
    path, origin = json.loads(out.stdout)
    return path, origin


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the suite runs from .venv; this interpreter is not a venv")
def test_a_venv_made_from_a_venv_with_torch_finds_that_torch(boot, tmp_path):
    import sysconfig

    import torch

    ours = sysconfig.get_paths()["purelib"]
    assert boot.base_venv_site_packages()[0] == ours
    boot.create_venv(tmp_path / "kept", keep_system=True, with_pip=False)
    path, origin = _torch_seen_by(tmp_path / "kept" / "bin" / "python")
    assert ours in path
    assert origin is not None and Path(origin).resolve() == Path(torch.__file__).resolve()
    # What --system-site-packages alone gives a venv made from a venv: the base installation's packages only.
    import venv

    venv.EnvBuilder(with_pip=False, system_site_packages=True).create(tmp_path / "plain")
    path, origin = _torch_seen_by(tmp_path / "plain" / "bin" / "python")
    assert ours not in path
    assert origin is None or not Path(origin).resolve().is_relative_to(Path(ours).resolve())


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the suite runs from .venv; this interpreter is not a venv")
def test_packages_the_calling_venv_reaches_through_its_own_pth_files_are_kept_too(boot, tmp_path, monkeypatch):
    # A GPU image's venv whose torch lives elsewhere, named by a .pth file in the venv's site-packages: the venv
    # made from it must read that .pth too, not only list the folder.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "ptt_fake_torch").mkdir(parents=True)
    (elsewhere / "ptt_fake_torch" / "__init__.py").write_text("")
    calling_site = tmp_path / "calling-site-packages"
    calling_site.mkdir()
    (calling_site / "zz_elsewhere.pth").write_text(str(elsewhere) + "\n")
    monkeypatch.setattr(boot, "base_venv_site_packages", lambda: [str(calling_site)])
    boot.create_venv(tmp_path / "kept", keep_system=True, with_pip=False)
    code = "import importlib.util as u; s = u.find_spec('ptt_fake_torch'); print(s.origin if s else '')"
    out = subprocess.run(
        [str(tmp_path / "kept" / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(elsewhere / "ptt_fake_torch" / "__init__.py")


def test_an_isolated_venv_gets_no_pth_file(boot, tmp_path):
    boot.create_venv(tmp_path / "iso", keep_system=False, with_pip=False)
    assert not list((tmp_path / "iso").rglob("_ptt_base_venv.pth"))
