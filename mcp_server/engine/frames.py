"""Which source files are library code, never a user's kernel: the question every error location asks when it walks
a traceback or the interpreter's frames for the line to report; and how a kernel is named by where it is defined."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

# This package (mcp_server/).
_OURS = str(Path(__file__).resolve().parents[1]) + os.sep


def function_of(value: Any) -> types.FunctionType | None:
    """A Python function, or the one behind a kernel and its autotune/heuristics wrappers (JIT or interpreter)."""
    for _ in range(8):
        if isinstance(value, types.FunctionType):
            return value
        inner = getattr(value, "fn", None)
        if inner is None or inner is value:
            return None
        value = inner
    return None


def kernel_label(name: str, filename: str, line: int) -> str:
    """How a launched kernel is named in every result: ``name (file.py:line)``."""
    return f"{name} ({os.path.basename(filename)}:{line})"


def library_roots() -> list[str]:
    """Folders of installed code: this interpreter's standard library and site-packages, every other
    site-packages or dist-packages folder on sys.path (a base environment that a venv sees through
    --system-site-packages or a .pth file, the user's site) and the folders of Triton, torch and NumPy wherever
    they were imported from (an editable install of one is not a user's kernel)."""
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(
        p for p in sys.path if p and os.path.basename(os.path.normpath(p)) in ("site-packages", "dist-packages")
    )
    for name in ("triton", "torch", "numpy"):
        module_file = getattr(sys.modules.get(name), "__file__", None)
        if module_file:
            roots.add(os.path.dirname(module_file))
    return [os.path.realpath(r) + os.sep for r in roots if r]


def library_file(filename: str, roots: list[str] | None = None) -> bool:
    """Python's own modules, installed packages and this package (``roots``: library_roots(), computed once by a
    caller that asks about many frames)."""
    if filename.startswith("<"):
        return True
    real = os.path.realpath(filename)
    if real.startswith(_OURS):
        return True
    return any(real.startswith(root) for root in (library_roots() if roots is None else roots))
