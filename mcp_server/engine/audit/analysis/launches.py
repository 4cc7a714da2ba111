"""What the launch sites and autotune decorators of a file tell about each kernel (read from the AST).

The values a kernel's constexprs get (configs, launch keywords), whether its grid rounds up
(``triton.cdiv``), the meta-parameters its autotune configs set, and the flags that every launch sets from
a divisibility test (``EVEN_N=n % BLOCK == 0``).
"""

from __future__ import annotations

import ast

from mcp_server.engine.audit.analysis.module import UNKNOWN, AutotuneInfo, ModuleIndex, walk_own


def meta_values(mod: ModuleIndex) -> dict[str, dict[str, list[tuple[object, str]]]]:
    """Per kernel, the literal values its constexprs get from autotune configs and launch keywords."""
    out: dict[str, dict[str, list[tuple[object, str]]]] = {name: {} for name in mod.jit}
    for jf in mod.jit.values():
        for at in jf.autotunes:
            for cfg in at.configs or []:
                for k, v in (cfg.meta or {}).items():
                    if v is not UNKNOWN:
                        out[jf.name].setdefault(k, []).append((v, f"triton.Config at line {cfg.node.lineno}"))
    for launcher in mod.launchers:
        for site in launcher.launches:
            if site.kernel is None:
                continue
            for kw in site.call.keywords:
                if kw.arg is None:
                    continue
                value = mod.literal(kw.value)
                if value is UNKNOWN and isinstance(kw.value, ast.Name):
                    value = mod.literal(mod.local_assignment(launcher.node, kw.value.id, site.call.lineno))
                if value is not UNKNOWN:
                    out[site.kernel.name].setdefault(kw.arg, []).append((value, f"launch at line {site.call.lineno}"))
    return out


def grid_rounds_up(mod: ModuleIndex, grid: ast.AST | None) -> bool:
    """True when a grid expression divides rounding up (triton.cdiv, math.ceil, (n + B - 1) // B)."""
    if grid is None:
        return False
    for node in ast.walk(grid):
        if isinstance(node, ast.Call):
            name = mod.resolve(node.func) or getattr(node.func, "id", "") or getattr(node.func, "attr", "")
            if name.endswith("cdiv") or name in ("math.ceil", "ceil"):
                return True
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.FloorDiv)
            and isinstance(node.left, ast.BinOp)
            and isinstance(node.left.op, (ast.Add, ast.Sub))
        ):
            return True
    return False


def cdiv_grids(mod: ModuleIndex) -> dict[str, bool]:
    out = {name: False for name in mod.jit}
    for launcher in mod.launchers:
        for site in launcher.launches:
            if site.kernel is not None and grid_rounds_up(mod, site.grid):
                out[site.kernel.name] = True
    return out


def config_names(mod: ModuleIndex, at: AutotuneInfo) -> set[str] | None:
    """Meta-parameter names the configs set, also when they are built by a comprehension or a function."""
    if at.configs is not None:
        names: set[str] = set()
        for cfg in at.configs:
            if cfg.meta is None:
                return None
            names |= set(cfg.meta)
        return names
    node = {k.arg: k.value for k in at.node.keywords}.get("configs")
    if node is None and at.node.args:
        node = at.node.args[0]
    return _names_in_config_expr(mod, node, depth=0)


def _names_in_config_expr(mod: ModuleIndex, node: ast.AST | None, depth: int) -> set[str] | None:
    if node is None or depth > 3:
        return None
    if isinstance(node, ast.Name):
        value = _module_value(mod, node.id)
        return _names_in_config_expr(mod, value, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in mod.functions:
        fn = mod.functions[node.func.id]
        returns = [n.value for n in walk_own(fn) if isinstance(n, ast.Return) and n.value is not None]
        if len(returns) == 1:
            return _names_in_config_expr(mod, returns[0], depth + 1)
        return None
    if isinstance(node, (ast.ListComp, ast.List)):
        calls = [node.elt] if isinstance(node, ast.ListComp) else list(node.elts)
        names: set[str] = set()
        for c in calls:
            if not (isinstance(c, ast.Call) and (mod.resolve(c.func) or "").endswith("Config")):
                return None
            meta = c.args[0] if c.args else {k.arg: k.value for k in c.keywords}.get("kwargs")
            if not (isinstance(meta, ast.Dict) and all(isinstance(k, ast.Constant) for k in meta.keys)):
                return None
            names |= {k.value for k in meta.keys if isinstance(k, ast.Constant)}
        return names
    return None


def _module_value(mod: ModuleIndex, name: str) -> ast.expr | None:
    for stmt in mod.tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return stmt.value
    return None


class LaunchFacts:
    """What the file's launch sites and decorators say about each kernel, computed once per file."""

    def __init__(self, mod: ModuleIndex):
        self.mod = mod
        self.meta = meta_values(mod)  # kernel → constexpr → [(literal value, where it is set)]
        self.cdiv = cdiv_grids(mod)  # kernel → its grid rounds up somewhere
