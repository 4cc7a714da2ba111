"""Callable specs (``path/to/file.py:name``), checked in the trusted process without running user code.

The checks here read files and parse them (``ast``), which executes nothing: a missing file, a syntax
error or a name that the file does not define is reported here as a :class:`UsageError` that names the
fix, before any child is started.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mcp_server.engine.errors import UsageError
from mcp_server.engine.pyast import jit_decorated, parse_python

SPEC_FORM = "path/to/file.py:name"


@dataclass(frozen=True)
class CallableSpec:
    path: Path
    name: str
    # Top-level names of the file, and whether the file could define more at run time (star imports…).
    top_level: frozenset[str] = field(default_factory=frozenset)
    dynamic_names: bool = False

    def __str__(self) -> str:
        return f"{self.path}:{self.name}"

    @property
    def module_defines(self) -> frozenset[str]:
        return self.top_level


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    names: set[str] = set()
    dynamic = False

    def targets(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Tuple | ast.List):
            for elt in node.elts:
                targets(elt)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def visit(body: list[ast.stmt]) -> None:
        nonlocal dynamic
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    targets(t)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets(node.target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        dynamic = True
                    else:
                        names.add(alias.asname or alias.name)
            elif isinstance(node, ast.For | ast.AsyncFor):
                targets(node.target)
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.With | ast.AsyncWith):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
                visit(node.body)
            elif isinstance(node, ast.If | ast.While):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.Expr) and "globals" in ast.dump(node):
                # globals()[...] = … can define names we cannot see.
                dynamic = True

    visit(tree.body)
    return names, dynamic


def looked_up(path: Path, what: str, fix: str) -> tuple[Path, str]:
    """``path`` resolved (links followed) and what is there: ``"file"``, ``"dir"``, ``"missing"`` or ``"other"``.

    A path the system refuses to look up at all (a name too long, a loop of links, a folder on the way this process
    may not enter) is a UsageError that names ``what`` and ends with ``fix``."""
    try:
        path = path.resolve()
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return path, "missing"
    except (OSError, RuntimeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        text = str(path)
        shown = text if len(text) <= 200 else f"{text[:200]}… ({len(text)} characters)"
        raise UsageError(f"{what} {shown} cannot be used: {why}. {fix}") from None
    return path, "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def output_path(text: str | os.PathLike[str], what: str) -> Path:
    """Where a file the user named for output goes (``what``: its flag), resolved, with its folder made; a
    UsageError that names ``what`` where the path cannot be looked up, is a folder, or its folder cannot be made."""
    path, kind = looked_up(Path(os.path.expanduser(str(text))), what, f"Pass another path with {what}.")
    if kind == "dir":
        raise UsageError(f"{what} {path} is a folder; pass the path of a file to write.")
    output_folder(path.parent, what)
    return path


def output_folder(text: str | os.PathLike[str], what: str) -> Path:
    """A folder the user named for output, resolved and made; a UsageError that names ``what`` where it cannot be."""
    path, kind = looked_up(Path(os.path.expanduser(str(text))), what, f"Pass another folder with {what}.")
    if kind not in ("dir", "missing"):
        raise UsageError(f"{what} {path} is a file, not a folder; pass a folder.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{what}: the folder {path} cannot be made ({exc.strerror}).") from None
    return path


def read_python(path: Path, role: str) -> tuple[str, ast.Module]:
    """Read and parse a user's file; a syntax error becomes a UsageError pointing at the line."""
    if path.suffix != ".py":
        # Python imports a module only from a .py file, so a job could not load it even where it parses; and its
        # text is not quoted (it may be any file on the machine).
        raise UsageError(
            f"The {role} file {path} is not Python source: its name does not end in .py, and Python imports a "
            f"module only from a .py file. Rename it to .py and pass it as {SPEC_FORM}."
        )
    try:
        # Opened without blocking and checked on the open file: a pipe named .py would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(
                    f"The {role} file {path} is not a regular file (a folder, a pipe or a device). Pass a Python "
                    f"file as {SPEC_FORM}."
                )
            with os.fdopen(fd, "rb", closefd=False) as f:
                source = f.read().decode("utf-8")
        finally:
            os.close(fd)
    except UnicodeDecodeError as exc:
        raise UsageError(f"The {role} file {path} is not UTF-8 text ({exc}). Save it as UTF-8.") from None
    except OSError as exc:
        raise UsageError(f"The {role} file {path} cannot be read: {exc.strerror}.") from None
    try:
        tree = parse_python(source, filename=str(path))
    except SyntaxError as exc:
        line = (exc.text or "").rstrip("\n")
        caret = " " * max((exc.offset or 1) - 1, 0) + "^" if line else ""
        detail = f"\n    {line}\n    {caret}" if line else ""
        if exc.lineno is None:  # no line to point at: the text itself is not source (null bytes, say)
            raise UsageError(
                f"The {role} file {path} cannot be read as Python source: {exc.msg}. Save it as plain UTF-8 text."
            ) from None
        raise UsageError(
            f"The {role} file has a syntax error at {path}:{exc.lineno}:{exc.offset}: {exc.msg}.{detail}\n"
            "Fix the syntax and run again."
        ) from None
    return source, tree


def jit_kernels(tree: ast.Module) -> list[str]:
    """The file's top-level functions under a ``jit`` decorator (``@triton.jit``, ``@gluon.jit``, ``@jit``), read
    from its source."""
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and jit_decorated(n)]


def parse_spec(
    text: str, *, role: str, defaults: tuple[str, ...] = (), cwd: Path | None = None, kernels: bool = False
) -> CallableSpec:
    """Parse ``path.py[:name]``; check the file exists, parses, and defines ``name``.

    ``defaults`` are tried in order when no name is given (``Model`` for a KernelBench problem,
    ``ModelNew`` for its solution). ``kernels``: the name is a @triton.jit kernel's, so an error lists those.
    """
    if not text or not text.strip():
        raise UsageError(f"No {role} was given. Pass it as {SPEC_FORM}.")
    text = text.strip()
    path_text, name = text, ""
    head, sep, tail = text.rpartition(":")
    if sep and head and "/" not in tail and not tail.startswith("\\"):
        path_text, name = head, tail.strip()
    base = cwd or Path.cwd()
    path = Path(os.path.expanduser(path_text))
    if not path.is_absolute():
        path = base / path
    path, kind = looked_up(path, f"The {role} path", f"Pass the {role} as {SPEC_FORM}.")
    if kind == "missing":
        hint = ""
        with contextlib.suppress(OSError):  # the name with .py added may be one too long
            if path.suffix != ".py" and path.with_suffix(".py").is_file():
                hint = f" Did you mean {path.with_suffix('.py')}?"
        raise UsageError(
            f"The {role} file {path} does not exist (resolved from {text!r} in {base}).{hint} "
            f"Pass the {role} as {SPEC_FORM}."
        )
    if kind == "dir":
        raise UsageError(f"The {role} {path} is a folder. Pass a Python file as {SPEC_FORM}.")
    _, tree = read_python(path, role)
    names, dynamic = _top_level_names(tree)
    callables = sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef))
    if kernels:
        found = jit_kernels(tree)
        listing = f" Its @triton.jit kernels: {', '.join(found)}." if found else " It has no @triton.jit kernel."
    else:
        found = callables
        listing = f" It defines: {', '.join(callables)}." if callables else ""
    if not name:
        for candidate in defaults:
            if candidate in names:
                name = candidate
                break
        else:
            if defaults:
                missing = f"has no {' or '.join(f'`{d}`' for d in defaults)} to use by default"
            else:
                missing = f"was given without a {role} name"
            named = f"the kernel: {path.name}:{found[0]}" if kernels and found else f"the callable: {path.name}:<name>"
            raise UsageError(f"The {role} file {path} {missing}.{listing} Name {named}.")
    head_name = name.split(".")[0]
    if head_name not in names and not dynamic:
        close = difflib.get_close_matches(head_name, found or callables, n=1, cutoff=0.6)
        suggestion = f" Did you mean {path.name}:{close[0]}?" if close else ""
        raise UsageError(
            f"`{name}` is not defined at the top level of {path}.{suggestion}{listing} Pass the {role} as {SPEC_FORM}."
        )
    return CallableSpec(path=path, name=name, top_level=frozenset(names), dynamic_names=dynamic)


def swapped_kernelbench_hint(reference: str, candidate: str, cwd: Path | None, command: str) -> str:
    """The line a usage error gets when a KernelBench solution (``ModelNew``) was given as the reference and its
    problem (``Model``) as the candidate, naming the right command (``command``, with ``{problem}`` and
    ``{solution}`` as the user wrote them); empty otherwise, or when either does not parse."""
    try:
        solution = parse_spec(reference, role="reference", defaults=("ModelNew",), cwd=cwd)
        problem = parse_spec(candidate, role="candidate", defaults=("Model",), cwd=cwd)
    except UsageError:
        return ""
    if solution.name != "ModelNew" or problem.name != "Model":
        return ""
    right = command.format(problem=candidate.strip(), solution=reference.strip())
    return (
        f"\n{reference.strip()} defines ModelNew (a KernelBench solution) and {candidate.strip()} defines Model (its "
        f"problem): the two are the other way round. The command: `{right}`."
    )


_SOURCE_ROOT: Path | None = None


def source_to_file(source: str, *, stem: str) -> Path:
    """Write source text given through MCP to a private file (Triton's JIT reads kernels from files)."""
    global _SOURCE_ROOT
    if _SOURCE_ROOT is None:
        _SOURCE_ROOT = Path(tempfile.mkdtemp(prefix="ptt-src-"))
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    folder = _SOURCE_ROOT / digest
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.py"
    if not path.exists():
        path.write_text(source, encoding="utf-8")
    return path
