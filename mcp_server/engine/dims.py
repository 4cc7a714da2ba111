"""``--dims``: new values for a problem file's module-level sizes, without editing the file.

KernelBench problems set their sizes at module level (``batch_size = 4096``, ``dim = 393216``) and read them in
``get_inputs()`` / ``get_init_inputs()``; many allocate gigabytes at those sizes. ``dims`` names such constants
and the values to use instead: the child that imports a user file rewrites each named top-level assignment
before running the module, so values computed from them at import time (``hidden = 4 * dim``) follow too.

The parent checks the names against the files' top-level assignments (read, never run) so a misspelt name is
a usage error that lists the names there, and hands the values to the children in :data:`DIMS_ENV`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mcp_server.engine.errors import UsageError
from mcp_server.engine.pyast import parse_python

DIMS_ENV = "PTT_DIMS"
Value = int | float | bool

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_dims(text: str | dict[str, Any] | None) -> dict[str, Value]:
    """``"batch_size=8, dim=1024"`` (or a dict) -> ``{"batch_size": 8, "dim": 1024}``; numbers and booleans only."""
    if not text:
        return {}
    items: Iterable[tuple[str, Any]]
    if isinstance(text, dict):
        items = text.items()
    else:
        pairs = []
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise UsageError(
                    f"--dims takes NAME=VALUE pairs separated by commas, e.g. batch_size=8,dim=1024; got {part!r}."
                )
            pairs.append((name.strip(), value.strip()))
        items = pairs
    out: dict[str, Value] = {}
    for name, raw in items:
        if not _NAME.match(str(name)):
            raise UsageError(f"--dims: {name!r} is not a Python name (the module-level variable to set).")
        value = _value(name, raw)
        out[str(name)] = value
    return out


def _value(name: str, raw: Any) -> Value:
    if isinstance(raw, bool | int | float):
        return raw
    text = str(raw)
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--dims: {name}={text!r} is not a number or a boolean.") from None


def top_level_names(path: Path) -> list[str]:
    """Names assigned at the top level of ``path`` (a file that does not parse has none)."""
    try:
        tree = parse_python(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in tree.body:
        for target in _targets(node):
            if target not in names:
                names.append(target)
    return names


def check_dims(dims: dict[str, Value], files: Iterable[Path]) -> None:
    """Every name in ``dims`` is assigned at the top level of at least one of ``files``."""
    files = list(files)
    known = {name for f in files for name in top_level_names(f)}
    unknown = [name for name in dims if name not in known]
    if unknown:
        listed = ", ".join(sorted(n for n in known if not n.startswith("_") and not n[:1].isupper())) or "none"
        where = ", ".join(f.name for f in files)
        raise UsageError(
            f"--dims names {', '.join(unknown)}, which no module-level assignment in {where} sets. "
            f"Module-level names there: {listed}."
        )


def dims_env(dims: dict[str, Value]) -> dict[str, str]:
    """The environment entry that carries ``dims`` to a child (empty when there are none)."""
    return {DIMS_ENV: json.dumps(dims)} if dims else {}


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return [node.target.id]
    return []


def rewrite(tree: ast.Module, dims: dict[str, Value]) -> list[str]:
    """Set each top-level assignment of a name in ``dims`` to its new value, in place; the names rewritten."""
    done: list[str] = []
    for node in tree.body:
        names = _targets(node)
        hit = [n for n in names if n in dims]
        if not hit or len(names) != 1:
            continue
        assert isinstance(node, ast.Assign | ast.AnnAssign)
        node.value = ast.copy_location(ast.Constant(dims[hit[0]]), node.value or node)
        done.append(hit[0])
    return done
