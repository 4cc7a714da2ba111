"""``ast.parse`` for the engine's threads, and the names of decorators as source spells them.

The server and the eval pool judge several candidates at once, each in its own thread, and each reads Python
source (spec checks, the candidate scan, the stage gate, the audit's static rules). CPython 3.11's parser keeps
its AST-building recursion depth in interpreter-wide state; a garbage collection during one thread's parse can
run Python code, hand the GIL to another thread's parse, and the first then fails with ``SystemError: AST
constructor recursion depth mismatch`` (seen in ``ptt eval`` on 2 workers). One lock around every parse in the
process avoids it; parsing is milliseconds, so the lock costs nothing measurable.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse_python(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.Module:
    """``ast.parse(source, filename, mode)`` under the process-wide parse lock."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def dotted_name(node: ast.expr) -> str:
    """'triton.autotune' for ``triton.autotune`` or a call of it (``@triton.autotune(...)``), 'jit' for ``jit``; ''
    when it is not a plain name. Names as the source spells them, aliases unresolved."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def jit_decorated(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``fn`` carries a ``jit`` decorator (``@triton.jit``, ``@gluon.jit``, ``@jit``, called or not)."""
    return any(dotted_name(d).rsplit(".", 1)[-1] == "jit" for d in fn.decorator_list)
