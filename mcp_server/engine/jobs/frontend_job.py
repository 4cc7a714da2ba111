"""Lower the kernels a candidate launched under the interpreter with the GPU compiler's front end.

Runs in a child without ``TRITON_INTERPRET``. Each kernel's file is imported as on a GPU
(``torch.cuda.is_available()`` answering True while it loads, as ``compile`` does); the kernel's code is found
by name and first line wherever the file defines it (at the top level, behind autotune wrappers, or inside a
function that builds it), made a real JIT function over the file's globals, and its launch's specialisation
(:mod:`.launch_specs`: every argument and constexpr, defaults and autotune picks included) is lowered to
Triton IR for ``cuda:90``: Triton's own ``ASTSource.make_ir``, the step at which the compiler refuses code it has
no lowering for (a plain Python call, ``break``, a NumPy attribute, a non-constexpr ``tl.arange`` bound).
A kernel the compiler refuses for ``cuda:90`` is tried for ``cuda:100`` and ``cuda:80`` before it counts as
refused, so a kernel written for one architecture's features is not held to another's. Later stages (layouts,
registers, PTX) are left to ``compile``: they cost seconds, the front end milliseconds.
"""

from __future__ import annotations

import os
import types
from typing import Any

from mcp_server.engine.frames import function_of
from mcp_server.engine.jobs.compile_job import load_as_on_gpu
from mcp_server.engine.jobs.launch_specs import describe_value, source_digest
from mcp_server.engine.runner.child import JobContext, classify_exception

ARCHS = (90, 100, 80)


def _codes(value: Any, depth: int = 0) -> list[types.CodeType]:
    """Code objects reachable from a module attribute: functions, wrapped kernels, classes' methods."""
    if depth > 6:
        return []
    if isinstance(value, type):
        return [c for v in vars(value).values() for c in _codes(v, depth + 1)]
    fn = function_of(value)
    return [fn.__code__] if fn is not None else []


def _find_code(module: Any, name: str, line: int) -> types.CodeType | None:
    """The code object of function ``name`` whose definition starts at ``line``, nested ones included."""
    todo = [c for v in list(vars(module).values()) for c in _codes(v)]
    seen: set[int] = set()
    while todo:
        code = todo.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        if code.co_name == name and code.co_firstlineno == line:
            return code
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return None


def _constant(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"dtype"}:
        import triton.language as tl

        return tl.dtype(value["dtype"])
    return value


def _source(jit_fn: Any, spec: dict[str, Any]) -> Any:
    """Triton's ASTSource for the launch: the signature, divisibility attributes and constexprs it was run with."""
    from triton.compiler import ASTSource

    names = list(jit_fn.arg_names)
    constexpr_params = {names[i] for i in jit_fn.constexprs}
    given = {k: _constant(v) for k, v in (spec.get("constexprs") or {}).items()}
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for pos, name in enumerate(names):
        if name in constexpr_params:
            signature[name] = "constexpr"
            if name in given:
                constexprs[name] = given[name]
            continue
        kind, _, divisibility = (spec["signature"].get(name) or "i32").partition(":")
        signature[name] = kind
        if name in given:  # an integer equal to 1, or None: the JIT folds it into a constant
            constexprs[name] = given[name]
        if divisibility == "16":
            attrs[(pos,)] = [["tt.divisibility", 16]]
    return ASTSource(jit_fn, signature=signature, constexprs=constexprs, attrs=attrs)


def _lower(src: Any, arch: int, num_warps: int | None) -> None:
    """Triton's front end for one target: what ``triton.compile`` runs before its first pass."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    options = backend.parse_options({"num_warps": num_warps or 4})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)


_MISSING = object()


def _rebound(spec: dict[str, Any], modules: dict[str, Any], ctx: JobContext) -> list[dict[str, str]]:
    """The names the kernel read at run time bound to something else than a fresh import of their file binds."""
    out = []
    for binding in spec.get("bindings") or []:
        path = binding["path"]
        try:
            if path not in modules:
                modules[path] = load_as_on_gpu(path, ctx)[0]
        except BaseException:  # reported with the kernel's own import, if that fails too
            modules[path] = None
        if modules[path] is None:
            continue
        value: Any = modules[path]
        for part in binding["name"].split("."):
            value = getattr(value, part, _MISSING)
            if value is _MISSING:
                break
        now = "not defined when the file is imported" if value is _MISSING else describe_value(value)
        if now != binding["kind"]:
            out.append({"name": binding["name"], "ran": binding["kind"], "file": now, "path": path})
    return out


def run(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    modules: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    for spec in params.get("kernels") or []:
        entry: dict[str, Any] = {"kernel": spec["kernel"], "path": spec["path"], "line": spec["line"]}
        results.append(entry)
        if spec.get("unsupported"):
            entry["skipped"] = "its arguments cannot be typed for the compiler: " + "; ".join(spec["unsupported"])
            continue
        path = spec["path"]
        if not os.path.isfile(path):
            entry["no_source"] = True
            continue
        try:
            if path not in modules:
                modules[path] = load_as_on_gpu(path, ctx)[0]
        except BaseException as exc:  # user code at import: reported, never raised
            modules[path] = None
            entry["refused"] = f"its file does not import without the interpreter ({type(exc).__name__}: {exc})"[:400]
            continue
        if modules[path] is None:
            entry["refused"] = "its file does not import without the interpreter"
            continue
        code = _find_code(modules[path], spec["kernel"], spec["line"])
        if code is None:
            entry["refused"] = (
                f"its file, imported without the interpreter, defines no function {spec['kernel']} at line "
                f"{spec['line']}"
            )
            continue
        if code.co_freevars:  # the interpreter cannot run such a kernel either (it recompiles it from source)
            entry["skipped"] = f"it reads variables of the function that builds it ({', '.join(code.co_freevars)})"
            continue
        import triton

        fn = types.FunctionType(code, vars(modules[path]), spec["kernel"])
        if spec.get("source") and source_digest(fn) != spec["source"]:
            entry["source_changed"] = True
        jit_fn = triton.jit(fn)
        rebound = _rebound(spec, modules, ctx)
        if rebound:
            entry["rebound"] = rebound
        first: BaseException | None = None
        for arch in ARCHS:
            try:
                _lower(_source(jit_fn, spec), arch, spec.get("num_warps"))
            except BaseException as exc:  # the compiler's refusal is the result
                first = first or exc
                continue
            entry["lowered_for"] = f"cuda:{arch}"
            break
        else:
            assert first is not None
            entry["failure"] = classify_exception(first, {*ctx.user_files, path}).model_dump(mode="json")
    return {"kernels": results}
