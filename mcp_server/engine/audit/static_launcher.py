"""Rules about how kernels are tuned and launched: autotune decorators, launch sites, launcher bodies.

Launchers are the Python functions of the file that launch a kernel (``kernel[grid](...)``), methods of
``autograd.Function`` classes included. Their rules look for work done outside the kernel (torch compute,
try/except fallbacks that hide a failing kernel), host synchronisation, and grids that do not follow the
input size. The autotune rules compare ``@triton.autotune`` configs and keys with the kernel's arguments and
with the launch sites.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable

from mcp_server.engine.audit.static_kernel import KernelFacts
from mcp_server.engine.audit.static_module import (
    UNKNOWN,
    AutotuneInfo,
    JitFunction,
    LauncherFunction,
    LaunchSite,
    ModuleIndex,
    walk_own,
)
from mcp_server.engine.models import Severity

Report = Callable[..., None]

# torch functions (torch.X, torch.nn.functional.X, torch.special.X, torch.linalg.X) that compute.
_TORCH_COMPUTE = {
    *("matmul", "mm", "bmm", "addmm", "addmv", "baddbmm", "einsum", "tensordot", "outer", "dot", "linear"),
    *("softmax", "log_softmax", "logsumexp", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt"),
    *("sum", "mean", "var", "std", "var_mean", "prod", "cumsum", "cumprod", "max", "min", "amax", "amin"),
    *("maximum", "minimum", "norm", "sigmoid", "tanh", "relu", "gelu", "silu", "softplus", "mish", "erf"),
    *("layer_norm", "rms_norm", "group_norm", "batch_norm", "dropout", "conv1d", "conv2d", "conv3d"),
    *("cross_entropy", "nll_loss", "mse_loss", "scaled_dot_product_attention", "sort", "topk", "argmax"),
    *("argmin", "where", "clamp", "abs", "pow", "mul", "add", "sub", "div", "square", "cos", "sin"),
    *("addcmul", "addcdiv", "lerp", "cdist", "normalize", "embedding"),
}
_F_NOT_COMPUTE = {"pad"}  # data movement, not the op's math
# Tensor methods that compute. Left out on purpose: add/sub/sort/index (sets, regexes and lists have them).
_METHOD_COMPUTE = {
    *("matmul", "mm", "bmm", "addmm", "baddbmm", "softmax", "log_softmax", "logsumexp", "exp", "exp_"),
    *("sum", "mean", "var", "std", "prod", "cumsum", "amax", "amin", "max", "min", "norm", "sqrt", "rsqrt"),
    *("sigmoid", "tanh", "relu", "relu_", "abs", "pow", "clamp", "clamp_", "mul_", "add_", "div_", "sub_"),
    *("argmax", "argmin", "topk", "square", "erf", "masked_fill", "masked_fill_", "mul", "div"),
}
_METHOD_NO_ARGS_ONLY = {"log"}  # x.log() computes; logger.log(level, msg) does not
_SYNC_METHODS = {"item", "cpu", "tolist", "numpy", "synchronize"}


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


# ------------------------------------------------------------------------------------------- autotune


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


def check_autotune(mod: ModuleIndex, jf: JitFunction, facts: KernelFacts, report: Report) -> None:
    top_level = jf.launched or not jf.called_from_jit
    if top_level and not jf.autotunes and not jf.has_heuristics:
        report(
            "missing-autotune",
            jf.node,
            f"kernel {jf.name} has no @triton.autotune: one tile size and num_warps for every shape and GPU",
            "wrap it in `@triton.autotune(configs=[triton.Config({'BLOCK': b}, num_warps=w) ...], key=[<size "
            "args>])` and drop the fixed values from the launch",
            kernel=jf.name,
        )
    params = set(jf.param_names)
    shape_args = {p for p in facts.shape_params if p in params and p not in jf.constexprs and "stride" not in p.lower()}
    for at in jf.autotunes:
        if at.key is not None:
            unknown = [k for k in at.key if k not in params]
            if unknown:
                report(
                    "autotune-unknown-name",
                    at.key_node or at.node,
                    f"autotune key names {', '.join(map(repr, unknown))}, not an argument of {jf.name}; Triton "
                    "silently leaves it out of the key",
                    _did_you_mean(unknown[0], jf.param_names)
                    or f"key on argument names of {jf.name}: {', '.join(sorted(params - set(jf.constexprs)))}",
                    severity=Severity.warning,
                    kernel=jf.name,
                )
            missing = sorted(shape_args - set(at.key))
            if missing and not unknown:  # with a misspelt key, that finding already says what to fix
                # A padded tile size in the key (BLOCK_N = next_pow2(n_cols)) stands in for its shape.
                proxies = shape_args | facts.extent_params | facts.shape_constexprs
                none_kept = not (proxies & set(at.key))
                report(
                    "autotune-key-incomplete",
                    at.key_node or at.node,
                    f"autotune key {at.key} leaves out {', '.join(missing)}, which {jf.name} masks or loops on: "
                    + (
                        "the config tuned for the first shape is reused for every other"
                        if none_kept
                        else "configs are not re-tuned when only those change"
                    ),
                    f"add them: key={sorted(set(at.key) | set(missing))}",
                    severity=None if none_kept else Severity.info,
                    kernel=jf.name,
                )
        for cfg in at.configs or []:
            bad = [k for k in (cfg.meta or {}) if k not in params]
            if bad:
                report(
                    "autotune-unknown-name",
                    cfg.node,
                    f"triton.Config sets {', '.join(map(repr, bad))}, not an argument of {jf.name}: the launch "
                    'fails with "Keyword argument ... was specified but unrecognised"',
                    _did_you_mean(bad[0], list(jf.constexprs))
                    or f"rename it to a tl.constexpr parameter of {jf.name} or add it to the signature",
                    kernel=jf.name,
                )
        if at.configs is not None and len(at.configs) >= 2:
            warps = {4 if c.num_warps is None else c.num_warps for c in at.configs}
            if UNKNOWN not in warps and len(warps) == 1:
                report(
                    "autotune-fixed-num-warps",
                    at.node,
                    f"all {len(at.configs)} configs of {jf.name} use num_warps={warps.pop()}; the best warp "
                    "count changes with the tile size",
                    "give the configs a spread of num_warps (e.g. 2, 4, 8) paired with their tile sizes",
                    kernel=jf.name,
                )
    bad_heur = [h for h in jf.heuristics if h not in params]
    if bad_heur:
        report(
            "autotune-unknown-name",
            jf.node,
            f"@triton.heuristics sets {', '.join(map(repr, bad_heur))}, not an argument of {jf.name}",
            f"add `{bad_heur[0]}: tl.constexpr` to the signature or remove the heuristic",
            kernel=jf.name,
        )


def check_conflicting_meta(mod: ModuleIndex, report: Report) -> None:
    for launcher in mod.launchers:
        for site in launcher.launches:
            if site.kernel is None or not site.autotuned:
                continue
            tuned: set[str] = set()
            for at in site.kernel.autotunes:
                tuned |= config_names(mod, at) or set()
            passed = {kw.arg for kw in site.call.keywords if kw.arg}
            clash = sorted(passed & tuned)
            if clash:
                report(
                    "autotune-conflicting-meta",
                    site.call,
                    f"the launch passes {', '.join(clash)}, which the autotune configs of {site.kernel.name} also "
                    'set: Triton raises "Conflicting meta-parameters"',
                    f"drop {', '.join(f'{c}=' for c in clash)} from the launch and let the autotuner choose",
                    kernel=site.kernel.name,
                )


# ------------------------------------------------------------------------------------------ launchers


class LauncherRules:
    def __init__(self, mod: ModuleIndex, facts: dict[str, KernelFacts], report: Report):
        self.mod = mod
        self.facts = facts
        self._report = report
        self.launcher_names = {lf.node.name for lf in mod.launchers}

    def run(self) -> None:
        for lf in self.mod.launchers:
            kernel = _kernel_of(lf)
            fallback_handlers = self.check_try_except(lf, kernel)
            skip = {id(n) for h in fallback_handlers for n in ast.walk(h)}
            for node in walk_own(lf.node):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.Call):
                    self.check_call(node, kernel)
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    self.report(
                        "torch-compute-in-launcher",
                        node,
                        f"`{ast.unparse(node)}` multiplies matrices in torch inside the launcher: the kernel is "
                        "not doing that work",
                        "move the product into the Triton kernel (tl.dot over K tiles) or fuse it with what the "
                        "kernel computes",
                        kernel,
                    )
            for site in lf.launches:
                self.check_grid(site)

    def report(self, rule: str, node: ast.AST, message: str, fix: str, kernel: str | None, **kw: object) -> None:
        self._report(rule, node, message, fix, kernel=kernel, **kw)

    def torch_compute(self, node: ast.Call) -> str | None:
        """'torch.softmax' / '.sum()' when the call computes with torch, else None."""
        name = self.mod.resolve(node.func)
        if name:
            for prefix in ("torch.nn.functional.", "torch.special.", "torch.linalg.", "torch.fft."):
                if name.startswith(prefix):
                    last = name[len(prefix) :]
                    if prefix != "torch.nn.functional." or last not in _F_NOT_COMPUTE:
                        return name
            if name.startswith("torch.") and name.count(".") == 1 and name[6:] in _TORCH_COMPUTE:
                return name
            return None
        func = node.func
        computes = isinstance(func, ast.Attribute) and (
            func.attr in _METHOD_COMPUTE or (func.attr in _METHOD_NO_ARGS_ONLY and not node.args)
        )
        # The receiver must not be a module (math.exp, np.sum, triton.cdiv are not tensor methods).
        if computes and self.mod.resolve(func.value) is None:  # type: ignore[union-attr]
            return f".{func.attr}()"  # type: ignore[union-attr]
        return None

    def check_call(self, node: ast.Call, kernel: str | None) -> None:
        what = self.torch_compute(node)
        if what is not None:
            self.report(
                "torch-compute-in-launcher",
                node,
                f"`{ast.unparse(node)}` computes with torch ({what}) in the launcher: that work runs outside the "
                "Triton kernel as extra kernels and memory passes",
                "do it inside the kernel (fuse it), or move it out of the converted function if it is not part "
                "of the op",
                kernel,
            )
            return
        name = self.mod.resolve(node.func)
        sync = None
        if name in ("torch.cuda.synchronize", "torch.cuda.current_stream.synchronize"):
            sync = name
        elif isinstance(node.func, ast.Attribute) and node.func.attr in _SYNC_METHODS and name is None:
            sync = f".{node.func.attr}()"
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "to" and name is None:
            target = node.args[0] if node.args else {k.arg: k.value for k in node.keywords}.get("device")
            if target is not None and "cpu" in ast.unparse(target).lower():
                sync = ".to('cpu')"
        if sync is not None:
            self.report(
                "host-sync-in-launcher",
                node,
                f"`{ast.unparse(node)}` ({sync}) waits for the GPU to finish and copies to the host on every "
                "call: the launcher stalls and cannot be captured in a CUDA graph",
                "keep the value on the device (pass the tensor to the kernel) or compute it from shapes on the host",
                kernel,
            )

    def check_try_except(self, lf: LauncherFunction, kernel: str | None) -> list[ast.ExceptHandler]:
        flagged: list[ast.ExceptHandler] = []
        launch_calls = {id(s.call) for s in lf.launches}
        for node in walk_own(lf.node):
            if not isinstance(node, ast.Try):
                continue
            body_nodes = [n for stmt in node.body for n in ast.walk(stmt)]
            launches = any(id(n) in launch_calls for n in body_nodes) or any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.launcher_names
                for n in body_nodes
            )
            if not launches:
                continue
            for handler in node.handlers:
                why = self._fallback_compute(handler)
                if why is None:
                    continue
                flagged.append(handler)
                self.report(
                    "try-except-fallback",
                    handler,
                    f"if the kernel launch fails, this except computes the result with torch instead ({why}): "
                    "a broken kernel passes silently",
                    "remove the try/except and let the error surface (or re-raise with a message naming the "
                    "unsupported input)",
                    kernel,
                )
        return flagged

    def _fallback_compute(self, handler: ast.ExceptHandler) -> str | None:
        for n in (n for stmt in handler.body for n in ast.walk(stmt)):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                return f"`{ast.unparse(n)}`"
            if not isinstance(n, ast.Call):
                continue
            what = self.torch_compute(n)
            if what is not None:
                return f"`{ast.unparse(n)}`"
            if (
                isinstance(n.func, ast.Name)
                and n.func.id in self.mod.functions
                and n.func.id not in self.launcher_names
            ):
                fn = self.mod.functions[n.func.id]
                inner = [c for c in walk_own(fn) if isinstance(c, ast.Call) and self.torch_compute(c)]
                if inner:
                    return f"`{n.func.id}()` calls `{ast.unparse(inner[0])}`"
        return None

    def check_grid(self, site: LaunchSite) -> None:
        grid = site.grid
        if not isinstance(grid, (ast.Tuple, ast.List)) or not grid.elts:
            return
        values = [self.mod.literal(e) for e in grid.elts]
        if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
            return
        if all(v == 1 for v in values):  # one program: a deliberate single-block kernel
            return
        name = site.kernel.name if site.kernel else None
        persistent = bool(name and self.facts.get(name) and self.facts[name].persistent)
        self.report(
            "hardcoded-grid",
            site.call,
            f"grid {ast.unparse(grid)} is fixed: "
            + (
                "a persistent kernel's program count should follow the GPU (SM count), not a literal"
                if persistent
                else "the number of programs does not follow the input size, so other sizes are cut short or "
                "launch idle programs"
            ),
            "compute it from the size: `grid = (triton.cdiv(n, BLOCK),)` or `lambda meta: (triton.cdiv(n, "
            "meta['BLOCK']),)`" + ("; for a persistent kernel use the SM count" if persistent else ""),
            name,
            severity=Severity.info if persistent else None,
        )


def _did_you_mean(name: str, candidates: list[str]) -> str | None:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.3)
    return f"did you mean {close[0]!r}? use the parameter's exact name" if close else None


def _kernel_of(lf: LauncherFunction) -> str | None:
    names = {s.kernel.name for s in lf.launches if s.kernel is not None}
    return names.pop() if len(names) == 1 else None
