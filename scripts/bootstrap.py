#!/usr/bin/env python3
"""Create or refresh the project's virtualenv (.venv) with what is missing, and nothing more.

Rules, in order:
- A torch that the base interpreter can already import (a CUDA build, say) is kept: the venv is
  created with --system-site-packages and torch is not reinstalled.
- With no torch anywhere, ``torch==2.13.0`` is installed (PTT_TORCH_SPEC overrides). Never a bare
  ``torch``: on a machine without a GPU that would pull gigabytes of CUDA wheels.
- With no Triton anywhere, ``triton==3.6.0`` is installed (PTT_TRITON_SPEC overrides): the version CI
  tests and the lent GPUs carry.
- The project itself is installed editable, with the ``dev`` extra when --dev is given.
A stamp in .venv records what was installed so a second run costs a second, not a minute.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
TORCH_SPEC = os.environ.get("PTT_TORCH_SPEC", "torch==2.13.0")
TRITON_SPEC = os.environ.get("PTT_TRITON_SPEC", "triton==3.6.0")


def _can_import(python: Path | str, module: str) -> bool:
    probe = subprocess.run(
        [str(python), "-c", f"import {module}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return probe.returncode == 0


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    print("+", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def _stamp(extras: str) -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update(extras.encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", action="store_true", help="also install the test and lint extras")
    args = parser.parse_args()
    extras = "dev" if args.dev else ""

    python = VENV / "bin" / "python"
    if not python.exists():
        keep_system = _can_import(sys.executable, "torch")
        print(f"creating {VENV.relative_to(ROOT)} (system torch kept: {keep_system})", flush=True)
        venv.EnvBuilder(with_pip=True, system_site_packages=keep_system).create(VENV)

    stamp_file = VENV / ".ptt-stamp"
    wanted = _stamp(extras)
    if stamp_file.exists() and wanted in stamp_file.read_text().split():
        return 0

    if not _can_import(python, "torch"):
        _pip(python, TORCH_SPEC)
    if not _can_import(python, "triton"):
        _pip(python, TRITON_SPEC)
    target = f".[{extras}]" if extras else "."
    _pip(python, "-e", target)

    previous = stamp_file.read_text().split() if stamp_file.exists() else []
    stamp_file.write_text("\n".join({*previous, wanted}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
