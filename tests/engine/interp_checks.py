"""What the interpreter tests share: a script run in a fresh interpreter process, a fixture file loaded as a
module, and the validate pair every emulation gets (its right kernel passes, its wrong twin fails)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.validate import validate

ROOT = Path(__file__).resolve().parents[2]


def fresh_interpreter(script: str) -> str:
    """The stdout of ``script`` run in a new process under Triton's interpreter without a GPU, as a child
    starts: nothing is patched until the script calls ``mcp_server.engine.interp.install()``."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def load_file(path: Path | str) -> ModuleType:
    """The Python file at ``path`` imported as a module of its own name."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def right_passes_wrong_fails(runner, reference: str, right: str, wrong: str) -> None:
    """validate passes ``right`` and fails ``wrong`` (both path.py:name) with a mismatch."""
    passed = validate(reference, right, runner=runner)
    assert passed.ok, passed.findings
    failed = validate(reference, wrong, runner=runner)
    assert not failed.ok
    assert FindingKind.mismatch in {f.kind for f in failed.findings if f.severity is Severity.error}
