"""How a kernel launch looks to Triton's JIT, and the launches a job ran under the interpreter.

:func:`describe_launch` types one launch's arguments as the JIT specialises them (pointer alignment, integers
divisible by 16, integers equal to 1 and None folded to constants); the audit's capture and compile read it.

Under ``TRITON_INTERPRET=1`` a ``@triton.jit`` body runs as Python, so a kernel can do there what the GPU
compiler refuses (call a plain Python function, ``break`` out of a loop, reach into a tensor's NumPy data) and
still give the right answer. :func:`record_interpreted` keeps, for each distinct specialisation an interpreted
kernel was launched with, what the compiler's front end needs to lower it for a GPU (file, line, name,
signature, constexprs); the trusted parent has it lowered in a child of its own
(:mod:`mcp_server.engine.jobs.frontend_job`). With each it keeps what tells whether the kernel that ran is the
one its file holds: what every global name the kernel reads was bound to (:func:`bindings`), the names of
triton.language, the interpreter and NumPy bound to the user's code (:func:`patched_language`), and a digest of
the source the interpreter compiled it from (:func:`source_digest`).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from mcp_server.engine.frames import function_of
from mcp_server.engine.jobs.compile_job import TORCH_TO_TRITON

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# Distinct specialisations kept per job; launches past it are counted, not kept.
LIMIT = 32


def constexpr_params_of(jit: Any) -> set[str]:
    names = list(getattr(jit, "arg_names", []))
    if hasattr(jit, "constexprs"):
        return {names[i] for i in jit.constexprs if i < len(names)}
    out = set()
    fn = function_of(jit)
    if fn is None:
        return out
    for name, param in inspect.signature(fn).parameters.items():
        ann = param.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", "") or repr(ann)
        if "constexpr" in str(text):
            out.add(name)
    return out


def not_specialised(jit: Any) -> set[str]:
    names = list(getattr(jit, "arg_names", []))
    raw = getattr(jit, "do_not_specialize", None)
    if raw is None:
        raw = (getattr(jit, "kwargs", None) or {}).get("do_not_specialize") or ()
    out = set()
    for item in raw or ():
        if isinstance(item, int) and item < len(names):
            out.add(names[item])
        elif isinstance(item, str):
            out.add(item)
    return out


def plain(value: Any) -> tuple[bool, Any]:
    if value is None or isinstance(value, bool | int | float | str):
        return True, value
    return False, None


def _descriptor_type(value: Any) -> str | None:
    """Triton's own type of a host tensor descriptor argument (``tensordesc<fp16[64, 64]>``), else None."""
    from triton.runtime.jit import mangle_type

    try:
        kind = mangle_type(value)
    except Exception:
        return None
    return kind if isinstance(kind, str) and kind.startswith("tensordesc<") else None


def describe_launch(
    jit: Any,
    args: tuple,
    kwargs: dict[str, Any],
    skip: set[str],
    constant: Callable[[Any], tuple[bool, Any]] = plain,
    descriptors: bool = False,
) -> dict[str, Any]:
    """Signature, constexprs and launch options of one launch, as Triton's JIT specialises them.

    ``constant`` says which constexpr values can be carried (and how); ``descriptors`` types host tensor
    descriptors as Triton does (the front-end check lowers them; ``compile``'s signatures do not take them)."""
    names = list(jit.arg_names)
    fn = function_of(jit)
    bound: dict[str, Any] = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key in names:
            bound[key] = value
    constexpr_params = constexpr_params_of(jit)
    no_spec = not_specialised(jit)
    defaults = inspect.signature(fn).parameters if fn is not None else {}
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    unsupported: list[str] = []
    aligned = True
    ints_div16 = True
    degenerate = False  # a size folded to 1: one row, one column…
    pointer_dtypes: list[str] = []
    for name in names:
        if name in skip:
            continue
        if name not in bound:
            default = defaults[name].default if name in defaults else inspect.Parameter.empty
            if default is inspect.Parameter.empty:
                unsupported.append(f"`{name}` was not passed")
            continue
        value = bound[name]
        if name in constexpr_params:
            ok, value_ = constant(value)
            if ok:
                constexprs[name] = value_
            else:
                unsupported.append(f"constexpr `{name}` is a {type(value).__name__}")
            continue
        if isinstance(value, torch.Tensor):
            kind = TORCH_TO_TRITON.get(value.dtype)
            if kind is None:
                unsupported.append(f"`{name}` has dtype {value.dtype}")
                continue
            is_aligned = value.data_ptr() % 16 == 0
            aligned &= is_aligned
            pointer_dtypes.append(kind)
            signature[name] = f"*{kind}:{16 if is_aligned else 1}"
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            kind = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value == 1 and name not in no_spec:
                # Triton's JIT folds an integer argument equal to 1 into a constant.
                signature[name] = kind
                constexprs[name] = 1
                ints_div16 = False
                degenerate = True
            elif value % 16 == 0 and value != 0 and name not in no_spec:
                signature[name] = f"{kind}:16"
            else:
                signature[name] = kind
                ints_div16 = False
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value is None:
            # Triton's JIT folds None into a constant (an optional pointer left out).
            signature[name] = "i32"
            constexprs[name] = None
        elif descriptors and (kind := _descriptor_type(value)):
            signature[name] = kind
        else:
            unsupported.append(f"`{name}` is a {type(value).__name__}")
    options = {k: kwargs[k] for k in LAUNCH_OPTIONS if isinstance(kwargs.get(k), int)}
    return {
        "signature": signature,
        "constexprs": constexprs,
        "options": options,
        "unsupported": unsupported,
        "aligned": aligned,
        "ints_div16": ints_div16,
        "degenerate": degenerate,
        "pointer_dtypes": sorted(set(pointer_dtypes)),
    }


# Values from these packages are described by their package alone: the interpreter patches some of Triton's.
_LIBRARIES = ("triton", "torch", "numpy", "math", "builtins")


def _library(value: Any) -> str | None:
    if isinstance(value, types.ModuleType):
        module = value.__name__
    else:
        module = getattr(value, "__module__", None) or type(value).__module__ or ""
    top = module.split(".")[0]
    return top if top in _LIBRARIES else None


def describe_value(value: Any) -> str:
    """What a name a kernel reads is bound to, in terms that mean the same with and without the interpreter:
    a kernel or a plain function by where it is defined, a user module by its file, a constant by its value."""
    if isinstance(value, types.ModuleType):
        if _library(value):
            return f"module {value.__name__}"
        return f"module {os.path.realpath(getattr(value, '__file__', None) or value.__name__)}"
    # A kernel by its function, not its wrapper: the interpreter's wrapper is Triton's, the JIT's takes the user's.
    fn = function_of(value)
    library = _library(fn if fn is not None else value)
    if library is not None:
        import triton.language as tl

        return f"constexpr {value.value!r}" if isinstance(value, tl.constexpr) else f"from {library}"
    if fn is not None:
        what = "function" if isinstance(value, types.FunctionType) else "kernel"
        return f"{what} {os.path.realpath(fn.__code__.co_filename)}:{fn.__code__.co_firstlineno}"
    if value is None or isinstance(value, bool | int | float | str):
        return f"value {value!r}"
    return f"object {type(value).__module__}.{type(value).__qualname__}"


def _codes_in(code: types.CodeType) -> list[types.CodeType]:
    out, todo = [], [code]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return out


def bindings(fn: types.FunctionType, depth: int = 0, seen: set[int] | None = None) -> list[dict[str, str]]:
    """Every global name the kernel's code (and the kernels it calls, and attributes it reads off the user's
    own modules) reads, with what it is bound to now: ``{"path", "name", "kind"}``, ``path`` the file whose
    module holds the name."""
    seen = set() if seen is None else seen
    if id(fn) in seen or depth > 4:
        return []
    seen.add(id(fn))
    space = fn.__globals__
    path = space.get("__file__")
    if not path:
        return []
    names = {n for c in _codes_in(fn.__code__) for n in c.co_names}
    # The interpreter copies its own module's globals into a kernel's where the names are free: not the user's
    # bindings (a kernel that reads one is refused by the compiler, where the name is not defined).
    injected = _interpreter_globals()
    out: list[dict[str, str]] = []
    for name in sorted(names):
        if name not in space:
            continue
        value = space[name]
        if name in injected and injected[name] is value:
            continue
        out.append({"path": path, "name": name, "kind": describe_value(value)})
        if isinstance(value, types.ModuleType) and _library(value) is None:
            for attr in sorted(names):
                if hasattr(value, attr):
                    member = getattr(value, attr)
                    out.append({"path": path, "name": f"{name}.{attr}", "kind": describe_value(member)})
                    inner = _kernel_fn(member)
                    if inner is not None:
                        out.extend(bindings(inner, depth + 1, seen))
        inner = _kernel_fn(value)
        if inner is not None:
            out.extend(bindings(inner, depth + 1, seen))
    return out


def _interpreter_globals() -> dict[str, Any]:
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover
        return {}
    return vars(interpreter)


def _kernel_fn(value: Any) -> types.FunctionType | None:
    """The Python function behind a kernel the user wrote (not a plain function, not a library's)."""
    if isinstance(value, types.FunctionType):
        return None
    fn = function_of(value)
    return fn if fn is not None and _library(fn) is None else None


def constant_or_dtype(value: Any) -> tuple[bool, Any]:
    """A constexpr as the front-end check carries it: a plain value, or a Triton dtype as ``{"dtype": name}``."""
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if isinstance(value, tl.dtype):
        return True, {"dtype": value.name}
    return plain(value)


_kept: dict[tuple, dict[str, Any]] = {}
_over = [0]
_installed = [False]
# The case being run, and whether it is one of the problem's own (not a derived size or layout).
_case: dict[str, Any] = {"key": None, "own": True}


def set_case(key: str | None, own: bool) -> None:
    """Name the case whose launches follow: a refusal in a derived case is judged as that case's refusal."""
    _case["key"], _case["own"] = key, own


def record_interpreted() -> None:
    """Keep every interpreted launch's specialisation from now on (idempotent; a no-op off the interpreter)."""
    if _installed[0]:
        return
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover
        return
    original = InterpretedFunction.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        # Only launches that ran: one the interpreter refused is the candidate's exception, judged as such.
        if not kwargs.get("warmup", False):
            with contextlib.suppress(Exception):  # recording must never break the user's launch
                _keep(self, args, kwargs)
        return out

    InterpretedFunction.run = run
    _installed[0] = True
    _follow_sources()
    for _, space in _language_spaces():
        _before.update((id(v), v) for v in list(vars(space).values()))


def _language_spaces() -> list[tuple[str, Any]]:
    """Where a kernel's builtins, operators and their interpretation are looked up: triton.language's modules,
    tl.tensor's class, the interpreter's module, its classes and its native half, and NumPy, which it computes
    with."""
    import numpy
    import triton.language as tl
    from triton._C.libtriton import interpreter as native
    from triton.runtime import interpreter

    spaces = [
        (name, module)
        for name, module in list(sys.modules.items())
        if module is not None and (name == "triton.language" or name.startswith("triton.language."))
    ]
    classes = [
        (f"{interpreter.__name__}.{name}", value)
        for name, value in vars(interpreter).items()
        if isinstance(value, type) and value.__module__ == interpreter.__name__
    ]
    return [
        *spaces,
        ("triton.language.tensor", tl.tensor),
        (interpreter.__name__, interpreter),
        *classes,
        ("triton._C.libtriton.interpreter", native),
        ("numpy", numpy),
    ]


_verdicts: dict[int, tuple[Any, bool]] = {}
_roots: list[str] = []
# Every value in those spaces before user code ran (taken when recording starts).
_before: dict[int, Any] = {}


def _user_made(value: Any) -> bool:
    """Whether ``value`` is code the user wrote: a function (or a method, partial or wrapped kernel of one) whose
    source is not a library file, one built by exec, or an instance of a class the user defined."""
    if isinstance(value, types.ModuleType | type) or value is None or isinstance(value, bool | int | float | str):
        return False
    cached = _verdicts.get(id(value))
    if cached is not None and cached[0] is value:
        return cached[1]
    from mcp_server.engine.frames import library_file, library_roots

    if not _roots:
        _roots.extend(library_roots())
    target = getattr(value, "__func__", None) or getattr(value, "func", None) or value
    fn = function_of(target)
    if fn is not None:
        filename = fn.__code__.co_filename
    else:
        try:
            filename = inspect.getfile(type(value))
        except (TypeError, OSError):
            filename = "<frozen>"
    if filename.startswith("<"):
        # Built by exec: the user's, unless it was there before user code ran (a dataclass's generated methods);
        # Python's frozen modules are its own.
        made = not filename.startswith("<frozen") and _before.get(id(value)) is not value
    else:
        made = not library_file(filename, _roots)
    _verdicts[id(value)] = (value, made)
    return made


def patched_language() -> list[str]:
    """Names in triton.language (its modules, and tl.tensor's methods) or in the interpreter bound to code the
    user wrote.

    The interpreter swaps its own versions in and leaves some there, so what counts is whose code a name holds
    now, not whether it changed: a kernel computing through a ``tl.fma`` or ``tensor.__mul__`` the user
    replaced is not the kernel a GPU would compile."""
    out = []
    for name, space in _language_spaces():
        for attr, value in list(vars(space).items()):
            if _user_made(value):
                out.append(f"{name}.{attr}")
    return sorted(out)[:20]


# sha256 of the source the interpreter compiled each kernel function from (id of the function → (it, digest)).
_sources: dict[int, tuple[Any, str]] = {}


def source_digest(fn: Any) -> str | None:
    """sha256 of ``fn``'s source as the interpreter reads it (its file's lines from the ``def`` on, dedented):
    what it compiles and runs. The front-end check reads the file again and compares."""
    import hashlib

    from triton.runtime.interpreter import FunctionRewriter

    try:
        lines, _ = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    rewriter = FunctionRewriter(fn)
    rewriter.def_lineno = rewriter._find_def(lines)
    return hashlib.sha256(rewriter._prepare_source(lines).encode()).hexdigest()


def _follow_sources() -> None:
    """Note the source the interpreter compiles each kernel from, when it compiles it (its first launch)."""
    import hashlib

    from triton.runtime.interpreter import FunctionRewriter

    original = FunctionRewriter._prepare_source

    def _prepare_source(self: Any, lines: Any) -> str:
        src = original(self, lines)
        with contextlib.suppress(Exception):
            _sources[id(self.fn)] = (self.fn, hashlib.sha256(src.encode()).hexdigest())
        return src

    FunctionRewriter._prepare_source = _prepare_source


def _keep(jit: Any, args: tuple, kwargs: dict[str, Any]) -> None:
    fn = function_of(jit)
    if fn is None:
        return
    # Defaults bound as the JIT binds them: the check lowers the kernel from its code, where they are not kept.
    params = inspect.signature(fn).parameters
    bound = dict(zip(params, args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k in params})
    for name, param in params.items():
        if name not in bound and param.default is not inspect.Parameter.empty:
            bound[name] = param.default
    options = {k: v for k, v in kwargs.items() if k in LAUNCH_OPTIONS}
    described = describe_launch(jit, (), {**bound, **options}, set(), constant=constant_or_dtype, descriptors=True)
    code = fn.__code__
    key = (
        code.co_filename,
        code.co_firstlineno,
        fn.__name__,
        repr(sorted(described["signature"].items())),
        repr(sorted((k, repr(v)) for k, v in described["constexprs"].items())),
    )
    if key in _kept:
        entry = _kept[key]
        entry["own"] = entry["own"] or _case["own"]
        # What the names are bound to is read at every launch: a rebinding between launches shows as a second kind.
        known = {(b["path"], b["name"], b["kind"]) for b in entry["bindings"]}
        for b in bindings(fn):
            if (b["path"], b["name"], b["kind"]) not in known and len(entry["bindings"]) < 512:
                entry["bindings"].append(b)
        if _case["key"] is not None and _case["key"] not in entry["cases"] and len(entry["cases"]) < 4:
            entry["cases"].append(_case["key"])
        entry["patched"] = sorted(set(entry["patched"]) | set(patched_language()))
        return
    if len(_kept) >= LIMIT:
        _over[0] += 1
        return
    _kept[key] = {
        "kernel": fn.__name__,
        "path": code.co_filename,
        "line": code.co_firstlineno,
        "signature": described["signature"],
        "constexprs": described["constexprs"],
        "num_warps": described["options"].get("num_warps"),
        "unsupported": described["unsupported"],
        "own": _case["own"],
        "bindings": bindings(fn),
        "patched": patched_language(),
        "source": _sources[id(fn)][1] if _sources.get(id(fn), (None,))[0] is fn else None,
        "cases": [_case["key"]] if _case["key"] is not None else [],
    }


def take() -> dict[str, Any]:
    """The specialisations kept since the last call (and how many past the limit were not), then forget them."""
    out = {"kernels": list(_kept.values()), "not_kept": _over[0]}
    _kept.clear()
    _over[0] = 0
    return out
