"""Launcher rules: the Python functions of the file that launch a kernel (``kernel[grid](...)``).

Methods of ``autograd.Function`` classes count as launchers too. The rules look for work done outside the
kernel (torch compute, try/except fallbacks that hide a failing kernel), host synchronisation, and grids
that do not follow the input size. Each check runs once per launcher (event ``launcher``: the module
context and the launcher).
"""

from __future__ import annotations

import ast

from mcp_server.engine.audit.analysis.module import LauncherFunction, ModuleIndex, walk_own
from mcp_server.engine.audit.rules.registry import STATIC, ModuleContext
from mcp_server.engine.models import Severity

TORCH_COMPUTE_IN_LAUNCHER = STATIC.rule(
    "torch-compute-in-launcher",
    "performance",
    Severity.warning,
    "torch compute (matmul, softmax, @, .sum(), .exp(), …) in a launcher, doing the kernel's job",
)
TRY_EXCEPT_FALLBACK = STATIC.rule(
    "try-except-fallback",
    "correctness",
    Severity.error,
    "try: around a kernel launch whose except computes the result with torch instead",
)
HOST_SYNC_IN_LAUNCHER = STATIC.rule(
    "host-sync-in-launcher",
    "performance",
    Severity.warning,
    ".item()/.cpu()/.tolist()/.numpy()/torch.cuda.synchronize() in a launcher: stalls the stream",
)
HARDCODED_GRID = STATIC.rule(
    "hardcoded-grid",
    "correctness",
    Severity.error,
    "launch grid of literal sizes (kernel[(1024,)]) instead of triton.cdiv over the input size",
)

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


def torch_compute(mod: ModuleIndex, node: ast.Call) -> str | None:
    """'torch.softmax' / '.sum()' when the call computes with torch, else None."""
    name = mod.resolve(node.func)
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
    if computes and mod.resolve(func.value) is None:  # type: ignore[union-attr]
        return f".{func.attr}()"  # type: ignore[union-attr]
    return None


def fallback_handlers(ctx: ModuleContext, lf: LauncherFunction) -> list[tuple[ast.ExceptHandler, str]]:
    """The except handlers around a kernel launch that compute the result with torch, with what they run."""
    out: list[tuple[ast.ExceptHandler, str]] = []
    launch_calls = {id(s.call) for s in lf.launches}
    for node in walk_own(lf.node):
        if not isinstance(node, ast.Try):
            continue
        body_nodes = [n for stmt in node.body for n in ast.walk(stmt)]
        launches = any(id(n) in launch_calls for n in body_nodes) or any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ctx.launcher_names
            for n in body_nodes
        )
        if not launches:
            continue
        for handler in node.handlers:
            why = _fallback_compute(ctx, handler)
            if why is not None:
                out.append((handler, why))
    return out


def _fallback_compute(ctx: ModuleContext, handler: ast.ExceptHandler) -> str | None:
    mod = ctx.mod
    for n in (n for stmt in handler.body for n in ast.walk(stmt)):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
            return f"`{ast.unparse(n)}`"
        if not isinstance(n, ast.Call):
            continue
        if torch_compute(mod, n) is not None:
            return f"`{ast.unparse(n)}`"
        if isinstance(n.func, ast.Name) and n.func.id in mod.functions and n.func.id not in ctx.launcher_names:
            fn = mod.functions[n.func.id]
            inner = [c for c in walk_own(fn) if isinstance(c, ast.Call) and torch_compute(mod, c)]
            if inner:
                return f"`{n.func.id}()` calls `{ast.unparse(inner[0])}`"
    return None


def _own_nodes(ctx: ModuleContext, lf: LauncherFunction):
    """The launcher's nodes outside the fallback handlers (try-except-fallback reports those)."""
    skip = {id(n) for h, _ in fallback_handlers(ctx, lf) for n in ast.walk(h)}
    return (node for node in walk_own(lf.node) if id(node) not in skip)


def _kernel_of(lf: LauncherFunction) -> str | None:
    names = {s.kernel.name for s in lf.launches if s.kernel is not None}
    return names.pop() if len(names) == 1 else None


@STATIC.check(TRY_EXCEPT_FALLBACK, on="launcher")
def _try_except(ctx: ModuleContext, lf: LauncherFunction) -> None:
    for handler, why in fallback_handlers(ctx, lf):
        ctx.report(
            TRY_EXCEPT_FALLBACK.id,
            handler,
            f"if the kernel launch fails, this except computes the result with torch instead ({why}): "
            "a broken kernel passes silently",
            "remove the try/except and let the error surface (or re-raise with a message naming the unsupported input)",
            kernel=_kernel_of(lf),
        )


@STATIC.check(TORCH_COMPUTE_IN_LAUNCHER, on="launcher")
def _torch_compute(ctx: ModuleContext, lf: LauncherFunction) -> None:
    kernel = _kernel_of(lf)
    for node in _own_nodes(ctx, lf):
        if isinstance(node, ast.Call):
            what = torch_compute(ctx.mod, node)
            if what is not None:
                ctx.report(
                    TORCH_COMPUTE_IN_LAUNCHER.id,
                    node,
                    f"`{ast.unparse(node)}` computes with torch ({what}) in the launcher: that work runs outside "
                    "the Triton kernel as extra kernels and memory passes",
                    "do it inside the kernel (fuse it), or move it out of the converted function if it is not "
                    "part of the op",
                    kernel=kernel,
                )
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            ctx.report(
                TORCH_COMPUTE_IN_LAUNCHER.id,
                node,
                f"`{ast.unparse(node)}` multiplies matrices in torch inside the launcher: the kernel is "
                "not doing that work",
                "move the product into the Triton kernel (tl.dot over K tiles) or fuse it with what the "
                "kernel computes",
                kernel=kernel,
            )


@STATIC.check(HOST_SYNC_IN_LAUNCHER, on="launcher")
def _host_sync(ctx: ModuleContext, lf: LauncherFunction) -> None:
    kernel = _kernel_of(lf)
    for node in _own_nodes(ctx, lf):
        if not isinstance(node, ast.Call) or torch_compute(ctx.mod, node) is not None:
            continue
        name = ctx.mod.resolve(node.func)
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
            ctx.report(
                HOST_SYNC_IN_LAUNCHER.id,
                node,
                f"`{ast.unparse(node)}` ({sync}) waits for the GPU to finish and copies to the host on every "
                "call: the launcher stalls and cannot be captured in a CUDA graph",
                "keep the value on the device (pass the tensor to the kernel) or compute it from shapes on the host",
                kernel=kernel,
            )


@STATIC.check(HARDCODED_GRID, on="launcher")
def _hardcoded_grid(ctx: ModuleContext, lf: LauncherFunction) -> None:
    for site in lf.launches:
        grid = site.grid
        if not isinstance(grid, (ast.Tuple, ast.List)) or not grid.elts:
            continue
        values = [ctx.mod.literal(e) for e in grid.elts]
        if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
            continue
        if all(v == 1 for v in values):  # one program: a deliberate single-block kernel
            continue
        name = site.kernel.name if site.kernel else None
        persistent = bool(name and ctx.facts.get(name) and ctx.facts[name].persistent)
        ctx.report(
            HARDCODED_GRID.id,
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
            kernel=name,
            severity=Severity.info if persistent else None,
        )
