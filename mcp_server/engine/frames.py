"""Which source files are library code, never a user's kernel: the question every error location asks when it walks
a traceback or the interpreter's frames for the line to report."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# This package (mcp_server/).
_OURS = str(Path(__file__).resolve().parents[1]) + os.sep


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
