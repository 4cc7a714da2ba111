"""What a file defines, read from its AST alone (the file is never imported: it is untrusted).

:class:`ModuleIndex` resolves import aliases (``tl.arange`` → ``triton.language.arange``, however triton
was imported), collects module-level constants, every ``@triton.jit`` function with its parameters and its
``@triton.autotune`` / ``@triton.heuristics`` wrappers (as decorators or as ``tuned =
triton.autotune(...)(kernel)``), and every Python function that launches a kernel (``kernel[grid](...)``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from mcp_server.engine.models import Location

# Names a file may use without importing them (snippets); only used when the file binds them to nothing.
_FALLBACK_ALIASES = {
    "tl": "triton.language",
    "triton": "triton",
    "torch": "torch",
    "F": "torch.nn.functional",
    "libdevice": "triton.language.extra.libdevice",
}
UNKNOWN = object()  # a value that is not a literal
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class Param:
    name: str
    node: ast.arg
    constexpr: bool
    default: object = UNKNOWN  # the literal default, when there is one


@dataclass
class ConfigInfo:
    node: ast.Call
    meta: dict[str, object] | None  # {"BLOCK": 128}; None when the dict is not a literal
    num_warps: object  # int, None (not given: Triton's default 4) or UNKNOWN


@dataclass
class AutotuneInfo:
    node: ast.Call
    configs: list[ConfigInfo] | None  # None when not a literal list of triton.Config(...)
    key: list[str] | None  # None when not a literal list of strings
    key_node: ast.expr | None


@dataclass
class JitFunction:
    name: str
    node: ast.FunctionDef
    params: list[Param]
    autotunes: list[AutotuneInfo] = field(default_factory=list)
    heuristics: list[str] = field(default_factory=list)  # names the heuristics provide
    has_heuristics: bool = False
    called_from_jit: bool = False
    launched: bool = False

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def constexprs(self) -> dict[str, Param]:
        return {p.name: p for p in self.params if p.constexpr}


@dataclass
class LaunchSite:
    call: ast.Call
    kernel: JitFunction | None  # None: launches something this file does not define
    autotuned: bool  # through an autotuned name (not ``.fn``)
    grid: ast.expr | None  # the grid expression, a local name resolved to its assignment
    launcher: LauncherFunction


@dataclass
class LauncherFunction:
    name: str  # qualified: "_Softmax.forward"
    node: ast.FunctionDef | ast.AsyncFunctionDef
    launches: list[LaunchSite] = field(default_factory=list)


class ModuleIndex:
    def __init__(self, tree: ast.Module, source: str, file: str):
        self.tree = tree
        self.file = file
        self.lines = source.splitlines()
        self.aliases: dict[str, str] = {}
        self.bound_names: set[str] = set()
        self.constants: dict[str, object] = {}
        self.list_literals: dict[str, ast.expr] = {}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.jit: dict[str, JitFunction] = {}
        # Every name that refers to a jit function: the function itself, wrappers assigned at module level.
        self.kernel_names: dict[str, tuple[JitFunction, bool]] = {}  # name → (kernel, autotuned)
        self.local_kernels: dict[ast.AST | None, dict[str, JitFunction]] = {}  # kernels defined in a function
        self.launchers: list[LauncherFunction] = []
        # One walk of the tree; every pass below filters this list (big files have ~10^6 nodes).
        self.parents: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = [tree]
        for parent in self.nodes:  # grows while iterated: a breadth-first walk
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
                self.nodes.append(child)
        self.defs = [n for n in self.nodes if isinstance(n, _FUNCS)]
        self._collect_imports()
        self._collect_module_level()
        self._collect_jit()
        self._collect_launchers()

    # ------------------------------------------------------------------------------------------ helpers

    def loc(self, node: ast.AST) -> Location:
        line = getattr(node, "lineno", None)
        col = getattr(node, "col_offset", None)
        text = self.lines[line - 1].strip() if line and 0 < line <= len(self.lines) else None
        return Location(file=self.file, line=line, column=None if col is None else col + 1, source_line=text)

    def resolve(self, expr: ast.AST) -> str | None:
        """Canonical dotted name of a Name/Attribute chain (``tl.math.exp`` → ``triton.language.math.exp``)."""
        if isinstance(expr, ast.Name):
            if expr.id in self.aliases:
                return self.aliases[expr.id]
            if expr.id not in self.bound_names:
                return _FALLBACK_ALIASES.get(expr.id)
            return None
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            return f"{base}.{expr.attr}" if base else None
        return None

    def literal(self, expr: ast.AST | None) -> object:
        """The value of a literal expression (numbers, strings, tuples, -x, module constants), else UNKNOWN."""
        if expr is None:
            return UNKNOWN
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            v = self.literal(expr.operand)
            return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else UNKNOWN
        if isinstance(expr, ast.Name) and expr.id in self.constants:
            return self.constants[expr.id]
        if isinstance(expr, ast.Call):
            name = self.resolve(expr.func)
            if name in ("triton.language.constexpr", "triton.language.core.constexpr") and expr.args:
                return self.literal(expr.args[0])
            if isinstance(expr.func, ast.Name) and expr.func.id == "float" and len(expr.args) == 1:
                arg = self.literal(expr.args[0])
                try:
                    return float(arg)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    return UNKNOWN
        if isinstance(expr, (ast.Tuple, ast.List)):
            items = [self.literal(e) for e in expr.elts]
            return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
        name = self.resolve(expr)
        if name in ("math.inf", "numpy.inf"):
            return float("inf")
        return UNKNOWN

    def is_constexpr_annotation(self, ann: ast.expr | None) -> bool:
        if ann is None:
            return False
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value.split(".")[-1] == "constexpr"
        return self.resolve(ann) in ("triton.language.constexpr", "triton.language.core.constexpr")

    def enclosing(self, node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
        cur = self.parents.get(node)
        while cur is not None and not isinstance(cur, kinds):
            cur = self.parents.get(cur)
        return cur

    # ------------------------------------------------------------------------------------------ passes

    def _collect_imports(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in self.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound_names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.bound_names.add(node.id)
            elif isinstance(node, ast.arg):
                self.bound_names.add(node.arg)
        self.bound_names -= set(self.aliases)

    def _collect_module_level(self) -> None:
        for stmt in self.tree.body:
            target, value = None, None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                target, value = stmt.targets[0].id, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                target, value = stmt.target.id, stmt.value
            if target is None or value is None:
                continue
            v = self.literal(value)
            if isinstance(v, (int, float, bool, str)):
                self.constants[target] = v
            if isinstance(value, ast.List):
                self.list_literals[target] = value
        for node in self.defs:
            self.functions.setdefault(node.name, node)  # type: ignore[union-attr]

    def _decorator_name(self, dec: ast.expr) -> str | None:
        return self.resolve(dec.func if isinstance(dec, ast.Call) else dec)

    def _autotune_info(self, call: ast.Call) -> AutotuneInfo:
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        configs_node = kw.get("configs", call.args[0] if call.args else None)
        key_node = kw.get("key", call.args[1] if len(call.args) > 1 else None)
        if isinstance(configs_node, ast.Name) and configs_node.id in self.list_literals:
            configs_node = self.list_literals[configs_node.id]
        configs: list[ConfigInfo] | None = None
        if isinstance(configs_node, ast.List):
            configs = []
            for elt in configs_node.elts:
                info = self._config_info(elt)
                if info is None:
                    configs = None
                    break
                configs.append(info)
        key = self.literal(key_node)
        keys = list(key) if isinstance(key, tuple) and all(isinstance(k, str) for k in key) else None
        return AutotuneInfo(node=call, configs=configs, key=keys, key_node=key_node)

    def _config_info(self, elt: ast.expr) -> ConfigInfo | None:
        if not isinstance(elt, ast.Call) or not (self.resolve(elt.func) or "").endswith("Config"):
            return None
        kw = {k.arg: k.value for k in elt.keywords if k.arg}
        meta_node = elt.args[0] if elt.args else kw.get("kwargs")
        meta: dict[str, object] | None = None
        if isinstance(meta_node, ast.Dict) and all(isinstance(k, ast.Constant) for k in meta_node.keys):
            meta = {k.value: self.literal(v) for k, v in zip(meta_node.keys, meta_node.values, strict=True)}  # type: ignore[union-attr]
        warps_node = kw.get("num_warps", elt.args[1] if len(elt.args) > 1 else None)
        num_warps = None if warps_node is None else self.literal(warps_node)
        return ConfigInfo(node=elt, meta=meta, num_warps=num_warps)

    def _heuristic_names(self, call: ast.Call) -> list[str]:
        arg = call.args[0] if call.args else (call.keywords[0].value if call.keywords else None)
        if isinstance(arg, ast.Dict):
            return [k.value for k in arg.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        return []

    def _make_jit(self, fn: ast.FunctionDef) -> JitFunction:
        args = fn.args
        positional = [*args.posonlyargs, *args.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        params = [
            Param(a.arg, a, self.is_constexpr_annotation(a.annotation), self.literal(d) if d else UNKNOWN)
            for a, d in zip(positional, defaults, strict=True)
        ]
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            params.append(Param(a.arg, a, self.is_constexpr_annotation(a.annotation), self.literal(d)))
        return JitFunction(name=fn.name, node=fn, params=params)

    def _collect_jit(self) -> None:
        for node in self.defs:
            if not isinstance(node, ast.FunctionDef) or not node.decorator_list:
                continue
            names = [self._decorator_name(d) for d in node.decorator_list]
            if not any(n in ("triton.jit", "triton.autotune", "triton.heuristics") for n in names):
                continue
            jf = self._make_jit(node)
            for dec, name in zip(node.decorator_list, names, strict=True):
                if name == "triton.autotune" and isinstance(dec, ast.Call):
                    jf.autotunes.append(self._autotune_info(dec))
                elif name == "triton.heuristics" and isinstance(dec, ast.Call):
                    jf.has_heuristics = True
                    jf.heuristics += self._heuristic_names(dec)
            if node.name in self.jit:  # two kernels of one name (nested in two launchers): keep both
                jf.name = f"{node.name}@{node.lineno}"
            self.jit[jf.name] = jf
            self.kernel_names.setdefault(node.name, (jf, bool(jf.autotunes)))
            self.local_kernels.setdefault(self.enclosing(node, _FUNCS), {})[node.name] = jf
        # Module-level wrapping: k = triton.jit(fn); tuned = triton.autotune(...)(k); h = triton.heuristics(...)(k)
        for stmt in self.tree.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                continue
            target = stmt.targets[0]
            if not isinstance(target, ast.Name):
                continue
            wrapped = self._unwrap_assignment(stmt.value)
            if wrapped is not None:
                jf, autotuned = wrapped
                self.kernel_names[target.id] = (jf, autotuned)
        # Which jit functions other jit functions call (helpers).
        for jf in self.jit.values():
            for node in ast.walk(jf.node):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in self.jit
                    and node.func.id != jf.name
                ):
                    self.jit[node.func.id].called_from_jit = True

    def _unwrap_assignment(self, value: ast.expr) -> tuple[JitFunction, bool] | None:
        if isinstance(value, ast.Name) and value.id in self.kernel_names:
            return self.kernel_names[value.id]
        if not (isinstance(value, ast.Call) and value.args):
            return None
        inner_target = value.args[0]
        func = value.func
        if isinstance(func, ast.Call):  # triton.autotune(...)(k) / triton.heuristics(...)(k)
            name = self.resolve(func.func)
            inner = self._unwrap_assignment(inner_target)
            if inner is None and isinstance(inner_target, ast.Name) and inner_target.id in self.functions:
                fn = self.functions[inner_target.id]
                if isinstance(fn, ast.FunctionDef) and name in ("triton.autotune", "triton.heuristics"):
                    self.jit.setdefault(fn.name, self._make_jit(fn))
                    inner = (self.jit[fn.name], False)
            if inner is None:
                return None
            jf, autotuned = inner
            if name == "triton.autotune":
                jf.autotunes.append(self._autotune_info(func))
                return jf, True
            if name == "triton.heuristics":
                jf.has_heuristics = True
                jf.heuristics += self._heuristic_names(func)
                return jf, autotuned
            return None
        if self.resolve(func) == "triton.jit" and isinstance(inner_target, ast.Name):
            fn = self.functions.get(inner_target.id)
            if isinstance(fn, ast.FunctionDef):
                self.jit.setdefault(fn.name, self._make_jit(fn))
                return self.jit[fn.name], False
        return None

    def _qualname(self, fn: ast.AST) -> str:
        parts = [fn.name]  # type: ignore[attr-defined]
        cur = self.parents.get(fn)
        while cur is not None:
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                parts.append(cur.name)
            cur = self.parents.get(cur)
        return ".".join(reversed(parts))

    def _collect_launchers(self) -> None:
        jit_nodes = {jf.node for jf in self.jit.values()}
        by_fn: dict[ast.AST, LauncherFunction] = {}
        for node in self.nodes:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
                continue
            fn = self.enclosing(node, _FUNCS)
            if fn is None or fn in jit_nodes:
                continue
            launcher = by_fn.get(fn) or LauncherFunction(name=self._qualname(fn), node=fn)  # type: ignore[arg-type]
            site = self._launch_site(node, node.func, launcher)
            if site is not None:
                launcher.launches.append(site)
                by_fn[fn] = launcher
        self.launchers = sorted(by_fn.values(), key=lambda lf: lf.node.lineno)

    def _launch_site(self, call: ast.Call, sub: ast.Subscript, launcher: LauncherFunction) -> LaunchSite | None:
        value = sub.value
        kernel: JitFunction | None = None
        autotuned = False
        local = self.local_kernels.get(launcher.node, {})
        if isinstance(value, ast.Name) and value.id in local:
            kernel = local[value.id]
            autotuned = bool(kernel.autotunes)
        elif isinstance(value, ast.Name) and value.id in self.kernel_names:
            kernel, autotuned = self.kernel_names[value.id]
        elif (
            isinstance(value, ast.Attribute)
            and value.attr == "fn"
            and isinstance(value.value, ast.Name)
            and value.value.id in self.kernel_names
        ):
            kernel = self.kernel_names[value.value.id][0]
        else:
            ident = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
            grid_like = isinstance(sub.slice, (ast.Tuple, ast.Lambda)) or (
                isinstance(sub.slice, ast.Name) and "grid" in sub.slice.id.lower()
            )
            if not (grid_like or any(h in ident.lower() for h in ("kernel", "tuned"))):
                return None
        if kernel is not None:
            kernel.launched = True
        grid = sub.slice
        if isinstance(grid, ast.Name):
            grid = self.local_assignment(launcher.node, grid.id, call.lineno) or grid
        return LaunchSite(call=call, kernel=kernel, autotuned=autotuned, grid=grid, launcher=launcher)

    def local_assignment(self, fn: ast.AST, name: str, before_line: int) -> ast.expr | None:
        """The value last assigned to ``name`` in ``fn`` before ``before_line`` (plain ``name = ...`` only)."""
        best: tuple[int, ast.expr] | None = None
        for node in walk_own(fn):
            if isinstance(node, ast.Assign) and node.lineno < before_line:
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id == name and (best is None or node.lineno > best[0]):
                        best = (node.lineno, node.value)
        return best[1] if best else None


def walk_own(fn: ast.AST):
    """Like ast.walk over a function's body, without descending into nested function or class bodies."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
