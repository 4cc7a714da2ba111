"""The import rule of docs/architecture.md, checked on the source: faces -> engine -> runner, never back.

Imports are read with ast (nothing is imported). Module-level imports make the graph whose cycles fail the
test (a cycle there is an import-order bug waiting to happen); the layering rules count every import, also
those inside functions, since a lazy import still couples the two modules.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mcp_server", "reference_kernels")
FACES = ("mcp_server.cli", "mcp_server.tools", "mcp_server.server", "mcp_server.http_serve")
TRANSPORTS = ("uvicorn", "starlette", "mcp_server.http_serve", "mcp.server.stdio", "mcp.server.streamable_http")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str, path: Path) -> list[str]:
    """The modules an import statement names (a ``from pkg import sub`` names pkg.sub when that is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in MODULES else base)
    return out


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imports(module: str, path: Path, *, top_level_only: bool, source: str | None = None) -> set[str]:
    tree = _tree(path) if source is None else ast.parse(source, str(path))
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.update(_targets(node, module, path))
            elif isinstance(node, ast.If) and _is_type_checking(node):
                continue  # annotations only: not imported at run time
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for block in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, block, []):
                        visit(child.body if isinstance(child, ast.ExceptHandler) else [child])
            elif not top_level_only:
                visit([n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)])

    visit(tree.body)
    return found


# The graphs are built on first use, once per process (parsing the whole tree costs seconds; pytest imports this
# module in every worker, and only one of them runs its tests). Tests that plant an edge monkeypatch these dicts.


@functools.cache
def _top() -> dict[str, set[str]]:
    return {m: {t for t in _imports(m, p, top_level_only=True) if t in MODULES} for m, p in MODULES.items()}


@functools.cache
def _all() -> dict[str, set[str]]:
    return {m: _imports(m, p, top_level_only=False) for m, p in MODULES.items()}


def _under(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.slow
def test_the_module_level_import_graph_has_no_cycle():
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(_top()[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(_top()):
        if module not in state:
            walk(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def _every_import(module: str, path: Path) -> set[str]:
    """Every import of ``module`` anywhere in it (functions and TYPE_CHECKING blocks too), within the tree."""
    tree = _tree(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(t for t in _targets(node, module, path) if t in MODULES)
    # A submodule naming its own package adds no knot: importing the submodule runs the package first anyway.
    return {t for t in found if not module.startswith(t + ".")}


@functools.cache
def _every() -> dict[str, set[str]]:
    return {m: _every_import(m, p) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    return cycles


def test_no_cycle_even_through_imports_inside_functions_or_for_type_checking():
    cycles = _cycles(_every())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_a_cycle_through_a_function_level_import_is_found(monkeypatch):
    monkeypatch.setitem(_every(), "mcp_server.engine.errors", {"mcp_server.engine.bench"})
    with pytest.raises(AssertionError, match="import cycles"):
        test_no_cycle_even_through_imports_inside_functions_or_for_type_checking()


def test_the_engine_imports_no_face():
    bad = {m: sorted(t for t in _all()[m] if _under(t, FACES)) for m in _all() if _under(m, "mcp_server.engine")}
    assert not {m: t for m, t in bad.items() if t}


def test_the_server_imports_no_transport_and_no_cli():
    targets = _all()["mcp_server.server"]
    assert not [t for t in targets if _under(t, (*TRANSPORTS, "mcp_server.cli"))]


def test_the_http_server_serves_build_server_and_imports_no_cli():
    targets = _all()["mcp_server.http_serve"]
    assert "mcp_server.server" in targets
    assert not [t for t in targets if _under(t, "mcp_server.cli")]


def test_the_two_faces_do_not_import_each_other():
    g = _all()
    tools_to_cli = {m: t for m in g if _under(m, "mcp_server.tools") for t in g[m] if _under(t, "mcp_server.cli")}
    cli_to_tools = {m: t for m in g if _under(m, "mcp_server.cli") for t in g[m] if _under(t, "mcp_server.tools")}
    assert not tools_to_cli and not cli_to_tools


def test_reference_kernels_import_nothing_of_mcp_server():
    bad = {m: sorted(t for t in _all()[m] if _under(t, "mcp_server")) for m in _all() if _under(m, "reference_kernels")}
    assert not {m: t for m, t in bad.items() if t}


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("from mcp_server.cli import main\n", test_the_engine_imports_no_face),
        ("def f():\n    from mcp_server.tools import _common\n", test_the_engine_imports_no_face),
    ],
)
def test_the_rules_catch_a_violation(monkeypatch, source, rule):
    """A planted engine -> face import (also a lazy one) fails the engine rule."""
    path = ROOT / "mcp_server" / "engine" / "_planted.py"
    module = "mcp_server.engine._planted"
    monkeypatch.setitem(_all(), module, _imports(module, path, top_level_only=False, source=source))
    with pytest.raises(AssertionError):
        rule()


def test_a_planted_cycle_is_found(monkeypatch):
    g = _top()
    monkeypatch.setitem(g, "mcp_server.engine.errors", {*g["mcp_server.engine.errors"], "mcp_server.engine.bench"})
    with pytest.raises(AssertionError, match="import cycles"):
        test_the_module_level_import_graph_has_no_cycle()
