"""The tree stays ruff-clean (lint and format), with the configuration in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str]:
    exe = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    return [exe]


def test_ruff_check_is_clean():
    proc = subprocess.run([*_ruff(), "check", "."], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_ruff_format_is_clean():
    proc = subprocess.run([*_ruff(), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
