"""What the launch sites and autotune decorators of a file tell about each kernel (read from the AST).

The values a kernel's constexprs get (configs, launch keywords), whether its grid rounds up
(``triton.cdiv``), the meta-parameters its autotune configs set, and the flags that every launch sets from
a divisibility test (``EVEN_N=n % BLOCK == 0``).
"""

from __future__ import annotations

import ast

from mcp_server.engine.audit.analysis.module import (
    UNKNOWN,
    AutotuneInfo,
    JitFunction,
    LaunchSite,
    ModuleIndex,
    walk_own,
)


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

    # ---- proven facts, for the rules that must not guess: None (or nothing) whenever a launch is unclear

    def sites(self, kernel: str) -> list[LaunchSite]:
        return [s for lf in self.mod.launchers for s in lf.launches if s.kernel is not None and s.kernel.name == kernel]

    def _argument(self, site: LaunchSite, jf: JitFunction, name: str) -> ast.expr | bool | None:
        """The expression a launch passes for parameter ``name``; None when it leaves it to the default, False
        when it cannot be told (``*args``/``**kwargs``)."""
        call = site.call
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return False
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        index = jf.param_names.index(name)
        return call.args[index] if index < len(call.args) else None

    def _resolve(self, site: LaunchSite, expr: ast.expr) -> ast.expr:
        """A launcher-local name replaced by the value last assigned to it (one level)."""
        if isinstance(expr, ast.Name) and expr.id not in self.mod.constants:
            value = self.mod.local_assignment(site.launcher.node, expr.id, site.call.lineno)
            if value is not None:
                return value
        return expr

    def constexpr_values(self, kernel: str, name: str) -> list[int] | None:
        """Every integer value constexpr ``name`` of ``kernel`` can take, when each launch gives a literal (or
        leaves a literal default) and the autotune configs set literals; else None."""
        jf = self.mod.jit.get(kernel)
        if jf is None or name not in jf.constexprs or name in jf.heuristics:
            return None
        sites = self.sites(kernel)
        if not sites:
            return None
        values: list[object] = []
        tuned = False
        for at in jf.autotunes:
            names = config_names(self.mod, at)
            if names is None:
                return None
            if name in names:
                if at.configs is None or any(name not in (c.meta or {}) for c in at.configs):
                    return None
                values += [c.meta[name] for c in at.configs if c.meta]
                tuned = True
        for site in sites:
            arg = self._argument(site, jf, name)
            if arg is False:
                return None
            if arg is None:
                if not tuned:
                    values.append(jf.constexprs[name].default)
                continue
            values.append(self.mod.literal(self._resolve(site, arg)))  # type: ignore[arg-type]
        if not values or any(not isinstance(v, int) or isinstance(v, bool) for v in values):
            return None
        return sorted(set(values))  # type: ignore[arg-type]

    def grid_bound(self, kernel: str, axis: int) -> int | None:
        """An upper bound on the number of programs along ``axis`` over every launch of ``kernel``."""
        sites = self.sites(kernel)
        if not sites:
            return None
        out = 0
        for site in sites:
            grid = site.grid
            if isinstance(grid, ast.Lambda):
                grid = grid.body
            if not isinstance(grid, (ast.Tuple, ast.List)) or any(isinstance(e, ast.Starred) for e in grid.elts):
                return None
            if axis >= len(grid.elts):
                bound: int | None = 1
            else:
                bound = self._bound(site, grid.elts[axis], 0)
            if bound is None:
                return None
            out = max(out, bound)
        return out

    def _bound(self, site: LaunchSite, expr: ast.expr, depth: int) -> int | None:
        if depth > 4:
            return None
        value = self.mod.literal(expr)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(expr, ast.Name):
            resolved = self._resolve(site, expr)
            return None if resolved is expr else self._bound(site, resolved, depth + 1)
        if isinstance(expr, ast.IfExp):
            body, orelse = self._bound(site, expr.body, depth + 1), self._bound(site, expr.orelse, depth + 1)
            return None if body is None or orelse is None else max(body, orelse)
        if isinstance(expr, ast.Attribute) and expr.attr == "multi_processor_count":
            return _MAX_SMS
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("min", "max"):
            bounds = [self._bound(site, a, depth + 1) for a in expr.args]
            if expr.func.id == "min" and any(b is not None for b in bounds):
                return min(b for b in bounds if b is not None)
            if expr.func.id == "max" and bounds and all(b is not None for b in bounds):
                return max(bounds)  # type: ignore[type-var]
            return None
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Mult)):
            left, right = self._bound(site, expr.left, depth + 1), self._bound(site, expr.right, depth + 1)
            if left is None or right is None or left < 0 or right < 0:
                return None
            return left + right if isinstance(expr.op, ast.Add) else left * right
        return None

    def divisible_flags(self, kernel: str) -> dict[str, set[str]]:
        """Constexpr flags of ``kernel`` that every launch (or its heuristic) sets from ``size % TILE == 0``,
        with the tile constexprs whose extent divides the size: in the flag's true branch those tiles are
        whole."""
        jf = self.mod.jit.get(kernel)
        if jf is None:
            return {}
        out: dict[str, set[str]] = {}
        for name, test in self._heuristic_tests(jf).items():
            divisor = divisibility(test)
            if divisor is not None:
                tiles = _heuristic_arg(divisor)
                if tiles is not None and tiles in jf.constexprs:
                    out[name] = {tiles}
        sites = self.sites(kernel)
        if not sites:
            return out
        for name in jf.constexprs:
            if name in out or name in jf.heuristics:
                continue
            tiles: set[str] | None = None
            for site in sites:
                arg = self._argument(site, jf, name)
                divisor = divisibility(self._resolve(site, arg)) if isinstance(arg, ast.expr) else None
                found = self._tiles_passed(site, jf, divisor) if divisor is not None else set()
                tiles = found if tiles is None else tiles & found
                if not tiles:
                    break
            if tiles:
                out[name] = tiles
        return out

    def _tiles_passed(self, site: LaunchSite, jf: JitFunction, divisor: ast.expr) -> set[str]:
        """Constexprs of the launch that receive exactly the divisor (the same name or the same literal)."""
        want = ast.dump(divisor)
        literal = self.mod.literal(divisor)
        out = set()
        for name in jf.constexprs:
            arg = self._argument(site, jf, name)
            if not isinstance(arg, ast.expr):
                continue
            if ast.dump(arg) == want or (literal is not UNKNOWN and self.mod.literal(arg) == literal):
                out.add(name)
        return out

    def _heuristic_tests(self, jf: JitFunction) -> dict[str, ast.expr]:
        """name → the body of its ``lambda args: ...`` in @triton.heuristics({...}) decorators."""
        out: dict[str, ast.expr] = {}
        for dec in jf.node.decorator_list:
            if not (isinstance(dec, ast.Call) and self.mod.resolve(dec.func) == "triton.heuristics" and dec.args):
                continue
            table = dec.args[0]
            if not isinstance(table, ast.Dict):
                continue
            for key, value in zip(table.keys, table.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Lambda):
                    out[key.value] = value.body
        return out


# No GPU has more SMs than this: a grid of multi_processor_count programs is bounded by it.
_MAX_SMS = 1024


def divisibility(expr: ast.expr | None) -> ast.expr | None:
    """The divisor of ``x % d == 0`` (``0 == x % d``, ``not x % d``, ``bool(...)`` of those), else None."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "bool" and expr.args:
        return divisibility(expr.args[0])
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        inner = expr.operand
        return inner.right if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Mod) else None
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq):
        for side, other in ((expr.left, expr.comparators[0]), (expr.comparators[0], expr.left)):
            zero = isinstance(other, ast.Constant) and other.value == 0 and not isinstance(other.value, bool)
            if zero and isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mod):
                return side.right
    return None


def _heuristic_arg(expr: ast.expr) -> str | None:
    """``args["BLOCK"]`` → "BLOCK"."""
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str):
        return expr.slice.value
    return None
