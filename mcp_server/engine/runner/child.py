"""What runs inside an isolated child: job dispatch, user-module loading, failure classification.

This module is imported by the fork server before any fork, so its imports are paid once. The code here
is ours, but it shares the process with the user's code, which could tamper with anything in it: nothing
decided here is trusted by the parent beyond the data it sends back.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp_server.engine.frames import library_file, library_roots
from mcp_server.engine.models import Failure, FindingKind, Location
from mcp_server.engine.pyast import parse_python

MESSAGE_LIMIT = 3000

_STICKY_MARKERS = (
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "device-side assert",
    "unspecified launch failure",
    "an illegal address",
    "uncorrectable ECC",
    "CUDA error: unknown error",
    "context is destroyed",
    "launch failure",
)
_OOM_MARKERS = ("out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "OutOfMemoryError", "can't allocate memory")


class UsageProblem(Exception):
    """Raised inside a job when the caller's input is at fault (reported to the parent as a usage error)."""


class Refused(Exception):
    """Raised inside a job that stops because of what the candidate's code did: a finding of ``kind``."""

    def __init__(self, kind: FindingKind, message: str):
        super().__init__(message)
        self.kind = kind


class JobContext:
    def __init__(self, job_dir: str, user_files: list[str]):
        self.job_dir = Path(job_dir)
        self.user_files = {os.path.realpath(f) for f in user_files}
        # Set by a job before it imports submitted code (jobs.integrity.Guard): looked at when the job ends, and a
        # result written after the judge's own code, or a library function its result goes through, was replaced
        # is not trusted.
        self.guard: Any = None

    def path(self, name: str) -> Path:
        return self.job_dir / name

    def progress(self, done: float, total: float | None, message: str = "") -> None:
        """Report progress to the parent (relayed to MCP progress notifications and the CLI's bar)."""
        with open(self.job_dir / "progress.jsonl", "a") as fh:
            fh.write(json.dumps({"done": done, "total": total, "message": message}) + "\n")

    def mark(self, text: str) -> None:
        """Record what the job is doing now, so a crash can be attributed (read by the parent)."""
        with open(self.job_dir / "progress.txt", "w") as fh:
            fh.write(text)


def _user_location(exc: BaseException, user_files: set[str]) -> Location | None:
    if isinstance(exc, SyntaxError) and exc.filename:
        return Location(
            file=exc.filename,
            line=exc.lineno,
            column=exc.offset,
            source_line=(exc.text or "").rstrip("\n") or None,
        )
    frames = traceback.extract_tb(exc.__traceback__)
    chosen = None
    for frame in frames:
        if os.path.realpath(frame.filename) in user_files:
            chosen = frame
    if chosen is None:
        return None
    return Location(file=chosen.filename, line=chosen.lineno, source_line=(chosen.line or None))


def _interpreted_kernel_location(exc: BaseException, user_files: set[str]) -> Location | None:
    """Under TRITON_INTERPRET=1 an error inside a kernel's body surfaces as an InterpreterError raised from
    the original error, whose traceback runs through the kernel's own lines: the last such frame in a user's
    file (the candidate's, or a module of kernels it imports) is the kernel line that failed."""
    try:
        from triton.runtime.errors import InterpreterError
    except ImportError:  # pragma: no cover - triton is a dependency
        return None
    if not isinstance(exc, InterpreterError):
        return None
    chosen = None
    roots = library_roots()
    cause = exc.__cause__
    while cause is not None:
        for frame in traceback.extract_tb(cause.__traceback__):
            if os.path.realpath(frame.filename) in user_files or not library_file(frame.filename, roots):
                chosen = frame
        cause = cause.__cause__
    if chosen is None:
        return None
    column = getattr(chosen, "colno", None)
    return Location(
        file=chosen.filename,
        line=chosen.lineno,
        column=None if column is None else column + 1,
        source_line=(chosen.line or None),
    )


def _compile_error_location(exc: BaseException) -> Location | None:
    """Map a Triton CompilationError (line numbers relative to the kernel's source) to file:line:col."""
    src = getattr(exc, "src", None)
    node = getattr(exc, "node", None)
    if not src or node is None or not hasattr(node, "lineno"):
        return None
    src_lines = src.split("\n")
    def_line = src_lines[0].strip()
    # Which file? Walk the traceback for a JITFunction whose source matches.
    tb = exc.__traceback__
    while tb is not None:
        frame_locals = tb.tb_frame.f_locals
        for value in frame_locals.values():
            fn = getattr(value, "fn", None)
            code = getattr(fn, "__code__", None)
            if code is None:
                continue
            try:
                lines = Path(code.co_filename).read_text().split("\n")
            except OSError:
                continue
            for i, line in enumerate(lines):
                if line.strip() == def_line:
                    indent = len(line) - len(line.lstrip())
                    lineno = i + node.lineno
                    text = lines[lineno - 1] if 0 < lineno <= len(lines) else None
                    return Location(
                        file=code.co_filename,
                        line=lineno,
                        column=node.col_offset + indent + 1,
                        source_line=text,
                    )
        tb = tb.tb_next
    return None


def gluon_kernel_without_gpu(exc: BaseException) -> str | None:
    """The name of the Gluon kernel whose launch raised ``exc`` for want of a GPU, else None.

    Gluon kernels (``triton.experimental.gluon``) have no interpreter: without a CUDA device their launch
    reaches Triton's driver lookup, which raises "0 active drivers"."""
    import torch

    if torch.cuda.is_available():
        return None
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if type(owner).__name__ == "GluonJITFunction" and type(owner).__module__.startswith("triton.experimental"):
            return getattr(getattr(owner, "fn", None), "__name__", None) or "the kernel"
        tb = tb.tb_next
    return None


def is_sticky_cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in _STICKY_MARKERS)


def classify_exception(exc: BaseException, user_files: set[str]) -> Failure:
    text = f"{type(exc).__name__}: {exc}"
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:  # pragma: no cover - triton is a dependency
        CompilationError = ()  # type: ignore[assignment]
    try:
        from triton.runtime.errors import OutOfResources
    except ImportError:  # pragma: no cover
        OutOfResources = ()  # type: ignore[assignment]

    where = _user_location(exc, user_files)
    from mcp_server.engine.interp import failure_of, sanitizer_hint

    if (oob := failure_of(exc)) is not None:
        return Failure(
            kind=FindingKind.out_of_bounds, message=oob[0][:MESSAGE_LIMIT], where=oob[1] or where, raised=True
        )
    if (kernel_line := _interpreted_kernel_location(exc, user_files)) is not None:
        where = kernel_line
    if isinstance(exc, Refused):
        return Failure(kind=exc.kind, message=str(exc)[:MESSAGE_LIMIT], where=None, raised=True)
    if isinstance(exc, CompilationError):
        where = _compile_error_location(exc) or where
        message = str(getattr(exc, "error_message", None) or exc)
        if where is not None and where.source_line is not None:
            line = where.source_line
            indent = len(line) - len(line.lstrip())
            caret = " " * max((where.column or 1) - 1 - indent, 0) + "^"
            message = f"{where}: {message}\n    {line.strip()}\n    {caret}"
        kind = FindingKind.compile_error
    elif isinstance(exc, OutOfResources):
        kind, message = FindingKind.compile_error, text
    elif isinstance(exc, MemoryError) or any(m in text for m in _OOM_MARKERS):
        kind, message = FindingKind.oom, text
    elif is_sticky_cuda_error(exc):
        kind = FindingKind.crash
        message = f"{text} (a sticky CUDA error: the context is unusable; usually an out-of-bounds access)"
        message += sanitizer_hint()
    elif isinstance(exc, LoadFailure):
        kind, message = FindingKind.load_error, str(exc)
        where = exc.where or where
    elif (gluon := gluon_kernel_without_gpu(exc)) is not None:
        kind = FindingKind.exception
        message = (
            f"{gluon} is a Gluon kernel (triton.experimental.gluon): Gluon has no interpreter and runs only on a "
            "CUDA GPU, which this machine lacks. Check it where a GPU is, or check a triton.language version of "
            f"the kernel here. (Triton said: {text})"
        )
    else:
        kind, message = FindingKind.exception, text
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT // 2] + "\n…\n" + message[-MESSAGE_LIMIT // 2 :]
    return Failure(kind=kind, message=message, where=where, raised=True)


class LoadFailure(Exception):
    """The user's module raised while being imported."""

    def __init__(self, message: str, where: Location | None = None):
        super().__init__(message)
        self.where = where


def _module_name_for(path: Path) -> tuple[str, Path]:
    """Import name and sys.path root: a file inside packages is imported with its dotted name."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    name = ".".join(parts)
    if len(parts) == 1 and (name in sys.modules or importlib.util.find_spec(name) is not None):
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
        name = f"ptt_user_{name}_{digest}"
    return name, folder


_loaded: dict[str, ModuleType] = {}


def load_module(path: str | Path, user_files: set[str]) -> ModuleType:
    path = Path(path).resolve()
    key = str(path)
    if key in _loaded:
        return _loaded[key]
    name, root = _module_name_for(path)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    if str(path.parent) not in sys.path:
        sys.path.insert(1, str(path.parent))
    try:
        dims = _dims()
        rewritten = _load_with_dims(name, path, dims) if dims else None
        if rewritten is not None:
            module = rewritten
        elif "." in name:
            existing = sys.modules.get(name)
            module = existing or importlib.import_module(name)
            if os.path.realpath(getattr(module, "__file__", "") or "") != str(path):
                raise LoadFailure(f"importing {name} found {module.__file__}, not {path}")
        else:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise LoadFailure(f"{path} cannot be imported as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    except LoadFailure:
        raise
    except BaseException as exc:
        where = _user_location(exc, user_files | {str(path)})
        lines = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        raise LoadFailure(f"importing {path.name} raised {lines}", where) from exc
    _loaded[key] = module
    return module


def _dims() -> dict[str, Any]:
    """The ``--dims`` overrides handed to this job (engine.dims), if any."""
    from mcp_server.engine.dims import DIMS_ENV

    text = os.environ.get(DIMS_ENV)
    return json.loads(text) if text else {}


def _load_with_dims(name: str, path: Path, dims: dict[str, Any]) -> ModuleType | None:
    """Import ``path`` with its top-level assignments of ``dims`` names rewritten to the given values; None when
    the file assigns none of them (it is then imported as usual)."""

    from mcp_server.engine.dims import rewrite

    source = path.read_text(encoding="utf-8")
    tree = parse_python(source, filename=str(path))
    if not rewrite(tree, dims):
        return None
    spec = importlib.util.find_spec(name) if "." in name else importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadFailure(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


def resolve(module: ModuleType, dotted: str) -> Any:
    obj: Any = module
    for part in dotted.split("."):
        if not hasattr(obj, part):
            raise UsageProblem(
                f"`{dotted}` is not defined in {getattr(module, '__file__', module.__name__)} once it is "
                "imported. Check the name after the colon in path.py:name."
            )
        obj = getattr(obj, part)
    return obj


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def main(job_dir: str) -> int:
    job_file = Path(job_dir, "job.json")
    job = json.loads(job_file.read_text())
    # Read once: the job's parameters (a KernelBench model's seeds among them) are not left for user code to find.
    with contextlib.suppress(OSError):
        job_file.unlink()
    ctx = JobContext(job_dir, job.get("user_files") or [])
    payload: dict[str, Any]
    params = job.get("params")
    if isinstance(params, dict) and params.get("trace"):
        # The CUDA trace starts before the job imports any user code (see jobs.trace).
        from mcp_server.engine.jobs import trace

        trace.start(job_dir)
    try:
        if os.environ.get("TRITON_INTERPRET") == "1":
            from mcp_server.engine.interp import install

            install()  # TF32 dots and address checks, as the GPU would show them
        module_name, fn_name = job["entry"].split(":")
        fn = getattr(importlib.import_module(module_name), fn_name)
        payload = {"result": fn(job["params"], ctx)}
    except UsageProblem as exc:
        payload = {"usage_error": str(exc)}
    except BaseException as exc:
        traceback.print_exc()
        payload = {"failure": classify_exception(exc, ctx.user_files).model_dump(mode="json")}
    guard = ctx.guard
    if guard is not None:
        replaced = guard.check()  # each one put back, so what writes the result below is the judge's own
        if replaced:
            listed = ", ".join(replaced[:6]) + (f" and {len(replaced) - 6} more" if len(replaced) > 6 else "")
            message = (
                f"the judge's own code, or a library function its result goes through, was replaced while user "
                f"code ran ({listed}); the job's result is not trusted. Leave them alone"
            )
            payload = {
                "failure": Failure(kind=FindingKind.evasion, message=message, raised=True).model_dump(mode="json")
            }
    _flush()
    tmp = Path(job_dir, "result.json.tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, Path(job_dir, "result.json"))
    return 0
