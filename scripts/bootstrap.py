#!/usr/bin/env python3
"""Create or refresh the project's virtualenv (.venv) with what is missing, and nothing more.

Which torch, in order:

1. A torch that is already importable is kept, whatever its build: one in .venv, or one of the base
   interpreter (the venv is then created with --system-site-packages so that it sees it; where the base
   interpreter is itself a virtualenv, whose packages --system-site-packages would not reach, a .pth file
   in .venv names that virtualenv's site-packages). A CUDA or ROCm build installed by hand is never
   replaced. On a machine without a GPU a kept CUDA build works
   (the tests run under the Triton interpreter) and a note says how to get the smaller CPU build.
2. Otherwise the machine is probed for an NVIDIA GPU: ``nvidia-smi -L`` lists one, or
   /proc/driver/nvidia/gpus has an entry. ``--gpu yes|no`` overrides the probe.
3. With a GPU: ``torch==2.13.0`` from pip's configured index (PyPI's Linux wheel is the CUDA build,
   and it brings the Triton release it was built with).
4. Without a GPU: ``torch==2.13.0+cpu``. The ``+cpu`` local version label is part of the pin, so no
   index (PyPI, a mirror, PyTorch's own) can hand out a CUDA build for it: the worst case is an error,
   never gigabytes of CUDA wheels. Where PyTorch's CPU index answers (one HTTP request, 10 s at most),
   the pin is installed the way PyTorch documents it, ``pip install --index-url
   https://download.pytorch.org/whl/cpu`` (that index also serves torch's dependencies; pip's
   configured find-links and extra indexes still apply), and if that fails, from pip's configured
   sources alone (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS). Where it does not answer (a firewall, a
   machine that reaches only a local mirror), the order is reversed, so pip does not spend minutes
   retrying an unreachable host for every dependency: a mirror that carries the CPU wheel serves it.
   If no source has it, the script stops with exit 2 and says what to set. On macOS PyPI's wheels are
   the CPU builds and carry no label: ``torch==2.13.0`` from pip's configured index.
5. Triton: ``triton==3.6.0`` (the version CI tests and the lent GPUs carry) when none is importable;
   the CPU torch wheel does not bring one.

PTT_TORCH_SPEC, PTT_TRITON_SPEC and PTT_TORCH_CPU_INDEX override the pins and the CPU index.
The project itself is installed editable, with the ``dev`` extra when --dev is given. The choice is
printed with its reason. A stamp in .venv records what was installed so a second run costs a second,
not a minute. ``--print-plan`` prints the choice and the pip commands without creating or installing
anything.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH_VERSION = "2.13.0"
TORCH_SPEC = os.environ.get("PTT_TORCH_SPEC")  # None: chosen per machine (see the module docstring)
TRITON_SPEC = os.environ.get("PTT_TRITON_SPEC", "triton==3.6.0")
CPU_INDEX = os.environ.get("PTT_TORCH_CPU_INDEX", "https://download.pytorch.org/whl/cpu")
PIP = ("-m", "pip", "install", "--disable-pip-version-check", "-q")

_TORCH_PROBE = (
    "import json, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
    "'hip': getattr(torch.version, 'hip', None), 'device': torch.cuda.is_available()}))"
)


@dataclass(frozen=True)
class Torch:
    """A torch that an interpreter can import."""

    version: str
    cuda: str | None = None
    hip: str | None = None
    device: bool = False  # torch.cuda.is_available() there

    @property
    def build(self) -> str:
        if self.cuda:
            return f"CUDA {self.cuda} build"
        if self.hip:
            return f"ROCm {self.hip} build"
        return "CPU build"


@dataclass(frozen=True)
class Facts:
    """What the plan depends on; gathered by ``probe`` or given by a test."""

    gpu: bool
    gpu_reason: str
    torch: Torch | None  # importable by the venv (or the base interpreter the venv will see)
    torch_where: str = ""  # ".venv" or "the base interpreter"
    triton: bool = False  # importable there
    platform: str = sys.platform
    cpu_index_reachable: bool = True  # probed only when a CPU torch is to be installed


@dataclass
class Plan:
    torch_choice: str  # one line: what and why
    torch_attempts: list[list[str]] = field(default_factory=list)  # pip argument lists, tried in order
    triton: list[str] | None = None
    notes: list[str] = field(default_factory=list)


def _probe_torch(python: Path | str) -> Torch | None:
    try:
        proc = subprocess.run(
            [str(python), "-c", _TORCH_PROBE], capture_output=True, text=True, check=False, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return Torch(data["version"], data["cuda"], data["hip"], bool(data["device"]))


def _can_import(python: Path | str, module: str) -> bool:
    probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, check=False)
    return probe.returncode == 0


def detect_gpu(torch: Torch | None) -> tuple[bool, str]:
    """(present, reason) from nvidia-smi, the NVIDIA driver's /proc entry, or an importable torch."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False, timeout=30)
            gpus = [line for line in proc.stdout.splitlines() if line.startswith("GPU ")]
            if proc.returncode == 0 and gpus:
                return True, f"nvidia-smi lists {len(gpus)} GPU(s)"
        except (OSError, subprocess.TimeoutExpired):
            pass
    proc_gpus = Path("/proc/driver/nvidia/gpus")
    if proc_gpus.is_dir() and any(proc_gpus.iterdir()):
        return True, f"the NVIDIA driver lists {len(list(proc_gpus.iterdir()))} GPU(s) in {proc_gpus}"
    if torch is not None and torch.device:
        return True, f"the installed torch {torch.version} sees a GPU"
    return False, "no nvidia-smi GPU, no /proc/driver/nvidia/gpus entry, no torch that sees a GPU"


def cpu_torch_spec(platform: str) -> str:
    """The pin that can only resolve to a CPU build of torch on this platform."""
    if TORCH_SPEC:
        return TORCH_SPEC
    return f"torch=={TORCH_VERSION}" if platform == "darwin" else f"torch=={TORCH_VERSION}+cpu"


def plan(facts: Facts) -> Plan:
    """The torch and Triton installs for these facts (see the module docstring for the rules)."""
    if facts.torch is not None:
        t = facts.torch
        p = Plan(f"keeping torch {t.version} ({t.build}) already importable by {facts.torch_where or '.venv'}")
        if t.cuda and not facts.gpu:
            p.notes.append(
                f"this is a CUDA build on a machine without a GPU ({facts.gpu_reason}); it works, but the CPU "
                "build is far smaller: remove .venv (and torch from the base interpreter) and run this again"
            )
    elif facts.gpu:
        spec = TORCH_SPEC or f"torch=={TORCH_VERSION}"
        p = Plan(f"installing {spec} (CUDA build) from pip's configured index: {facts.gpu_reason}")
        p.torch_attempts.append([spec])
    else:
        spec = cpu_torch_spec(facts.platform)
        if facts.platform == "darwin":
            p = Plan(f"installing {spec} (PyPI's macOS wheel is a CPU build): {facts.gpu_reason}")
            p.torch_attempts.append([spec])
        else:
            p = Plan(f"installing {spec} (CPU build; the +cpu pin excludes CUDA wheels): {facts.gpu_reason}")
            from_index, from_config = ["--index-url", CPU_INDEX, spec], [spec]
            if facts.cpu_index_reachable:
                p.torch_attempts += [from_index, from_config]
            else:
                p.notes.append(f"{CPU_INDEX} does not answer from here: pip's configured sources first")
                p.torch_attempts += [from_config, from_index]
    installs_triton_with_torch = facts.torch is None and facts.gpu
    if not facts.triton and not installs_triton_with_torch:
        p.triton = [TRITON_SPEC]
    return p


def index_reachable(url: str, timeout_s: float = 10.0) -> bool:
    """Whether the index answers at all (any HTTP status counts; only no answer does not)."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url.rstrip("/") + "/torch/", method="HEAD"), timeout=timeout_s
        ):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def probe(venv_dir: Path, gpu: str, isolated: bool) -> Facts:
    python = venv_dir / "bin" / "python"
    if python.exists():
        where, interp = ".venv", python
    elif not isolated:
        where, interp = "the base interpreter", Path(sys.executable)
    else:
        where, interp = "", None
    torch = _probe_torch(interp) if interp else None
    triton = _can_import(interp, "triton") if interp else False
    if gpu == "auto":
        present, reason = detect_gpu(torch)
    else:
        present, reason = gpu == "yes", f"--gpu {gpu}"
    reachable = True
    if torch is None and not present and sys.platform != "darwin":
        reachable = index_reachable(CPU_INDEX)
    return Facts(present, reason, torch, where if torch else "", triton, cpu_index_reachable=reachable)


def _pip_cmd(python: Path, args: list[str]) -> list[str]:
    return [str(python), *PIP, *args]


def _show(cmd: list[str]) -> str:
    python = Path(cmd[0])
    if python.is_relative_to(Path.cwd()):
        python = python.relative_to(Path.cwd())
    return "+ " + shlex.join([str(python), *cmd[1:]])


def _stamp(extras: str) -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update(extras.encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def base_venv_site_packages() -> list[str]:
    """Where this interpreter's packages live when it runs inside a virtualenv (empty otherwise): a venv made
    from it with --system-site-packages sees the base installation's packages, not these."""
    import sysconfig

    if sys.prefix == sys.base_prefix:
        return []
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(paths[k] for k in ("purelib", "platlib")))


def create_venv(venv_dir: Path, keep_system: bool, with_pip: bool = True) -> None:
    """A virtualenv at ``venv_dir``; with ``keep_system`` it sees this interpreter's packages (torch among them),
    through --system-site-packages and, where this interpreter is itself a virtualenv, a .pth file."""
    venv.EnvBuilder(with_pip=with_pip, system_site_packages=keep_system).create(venv_dir)
    extra = base_venv_site_packages() if keep_system else []
    if extra:
        python = venv_dir / "bin" / "python"
        out = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        site_dir = Path(out.stdout.strip())
        # site.addsitedir, not a bare path line: the .pth files in those folders are read too (an editable
        # install there, or a torch that the calling venv itself reaches through a .pth).
        lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in extra)
        (site_dir / "_ptt_base_venv.pth").write_text(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="example: python3 scripts/bootstrap.py --dev --print-plan",
    )
    parser.add_argument("--dev", action="store_true", help="also install the test and lint extras")
    parser.add_argument(
        "--gpu", choices=("auto", "yes", "no"), default="auto", help="override the GPU probe (default: auto)"
    )
    parser.add_argument(
        "--isolated", action="store_true", help="do not reuse the base interpreter's torch (no system site packages)"
    )
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv", help="where the virtualenv lives (default: .venv)")
    parser.add_argument(
        "--print-plan", action="store_true", help="print the choice and the pip commands; create and install nothing"
    )
    args = parser.parse_args(argv)
    extras = "dev" if args.dev else ""
    venv_dir: Path = args.venv.resolve()
    python = venv_dir / "bin" / "python"
    stamp_file = venv_dir / ".ptt-stamp"
    choice_file = venv_dir / ".ptt-torch"
    wanted = _stamp(extras)

    if not args.print_plan and stamp_file.exists() and wanted in stamp_file.read_text().split():
        if choice_file.exists():
            print(f"{venv_dir.name} is up to date: {choice_file.read_text().strip()}", flush=True)
        return 0

    facts = probe(venv_dir, args.gpu, args.isolated)
    the_plan = plan(facts)
    project = ["-e", f"{ROOT}[{extras}]" if extras else str(ROOT)]
    print(f"torch: {the_plan.torch_choice}", flush=True)
    for note in the_plan.notes:
        print(f"note: {note}", flush=True)

    if args.print_plan:
        if not python.exists():
            keep = facts.torch is not None and facts.torch_where == "the base interpreter"
            print(f"+ python3 -m venv{' --system-site-packages' if keep else ''} {venv_dir}")
            extra = base_venv_site_packages() if keep else []
            if extra:
                print(f"+ (a .pth file in {venv_dir} adding {', '.join(extra)} as site folders)")
        for i, attempt in enumerate(the_plan.torch_attempts):
            prefix = "" if i == 0 else "(if that fails) "
            print(prefix + _show(_pip_cmd(python, attempt)))
        if the_plan.triton:
            print(_show(_pip_cmd(python, the_plan.triton)))
        print(_show(_pip_cmd(python, project)))
        return 0

    if not python.exists():
        keep_system = facts.torch is not None and facts.torch_where == "the base interpreter"
        print(f"creating {venv_dir} (base interpreter's torch kept: {keep_system})", flush=True)
        create_venv(venv_dir, keep_system)
        if keep_system and _probe_torch(python) is None:
            print(
                f"error: {venv_dir} does not see the torch of {sys.executable}; remove {venv_dir} and run this "
                "again with --isolated to install torch into it",
                file=sys.stderr,
            )
            return 2

    for i, attempt in enumerate(the_plan.torch_attempts):
        cmd = _pip_cmd(python, attempt)
        print(_show(cmd), flush=True)
        if subprocess.run(cmd, check=False).returncode == 0:
            break
        if i + 1 < len(the_plan.torch_attempts):
            print("that failed; trying the same pin from the other source", flush=True)
    if the_plan.torch_attempts:
        installed = _probe_torch(python)
        if installed is None:
            print(
                f"error: no source served {the_plan.torch_attempts[-1][-1]}. Point pip at an index that has it "
                f"(PIP_INDEX_URL or PTT_TORCH_CPU_INDEX), or install torch into {venv_dir} yourself and run this "
                "again: an importable torch is kept.",
                file=sys.stderr,
            )
            return 2
        print(f"torch: installed {installed.version} ({installed.build})", flush=True)
        if installed.cuda and not facts.gpu:
            print("warning: a CUDA build came although the pin asked for the CPU build (PTT_TORCH_SPEC?)")
    if the_plan.triton:
        cmd = _pip_cmd(python, the_plan.triton)
        print(_show(cmd), flush=True)
        subprocess.run(cmd, check=True)
    cmd = _pip_cmd(python, project)
    print(_show(cmd), flush=True)
    subprocess.run(cmd, check=True)

    final = _probe_torch(python)
    summary = f"torch {final.version} ({final.build})" if final else "torch missing"
    choice_file.write_text(summary + "\n")
    previous = stamp_file.read_text().split() if stamp_file.exists() else []
    stamp_file.write_text("\n".join({*previous, wanted}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
