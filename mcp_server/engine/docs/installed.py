"""The API reference of the INSTALLED Triton, as Markdown pages, so the cache matches what runs.

Read from signatures and docstrings: ``triton`` (jit, autotune, Config, heuristics, cdiv, …),
``triton.language`` (``tl.*``), ``triton.language.extra.libdevice`` and ``triton.testing``. Nothing is
compiled or launched; importing triton is all it needs, so it works offline and without a GPU.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

# Modules documented one page per public name; libdevice gets one page with a section per function.
_PER_NAME_MODULES = ("triton", "triton.language", "triton.testing", "triton.tools.tensor_descriptor")
LIBDEVICE = "triton.language.extra.libdevice"
INSTALLED_DIR = "installed"


@dataclass(frozen=True)
class InstalledPage:
    path: str  # relative to the cache directory
    qualname: str
    title: str
    markdown: str
    aliases: tuple[str, ...] = field(default=())


def triton_version() -> str:
    import triton

    return str(triton.__version__)


def aliases_of(qualname: str) -> tuple[str, ...]:
    """The short names code uses for a qualified name: ``tl.load`` for ``triton.language.load``."""
    out = [qualname]
    if qualname.startswith(LIBDEVICE + "."):
        out.append("libdevice." + qualname[len(LIBDEVICE) + 1 :])
    elif qualname.startswith("triton.language."):
        out.append("tl." + qualname[len("triton.language.") :])
    return tuple(out)


def build_pages() -> list[InstalledPage]:
    """Every page of the installed reference, module index pages first."""
    version = triton_version()
    pages: list[InstalledPage] = []
    for module_name in _PER_NAME_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # triton.tools.tensor_descriptor arrived in 3.4; older builds lack it
            continue
        entries = list(_public_members(module))
        pages.append(_module_index(module_name, entries, version))
        dtypes = [(n, o) for n, o in entries if _is_dtype(o)]
        if dtypes:
            pages.append(_dtype_page(module_name, dtypes, version))
        for name, obj in entries:
            if not _is_dtype(obj):
                pages.append(_object_page(f"{module_name}.{name}", obj, version))
    pages.append(_libdevice_page(version))
    return pages


def _public_members(module: types.ModuleType) -> Iterator[tuple[str, object]]:
    for name in sorted(dir(module)):
        if name.startswith("_"):
            continue
        obj = getattr(module, name)
        if isinstance(obj, types.ModuleType):
            continue
        owner = _owner_module(obj)
        if owner is not None and not owner.startswith("triton"):
            continue  # re-exported stdlib (os, functools, typing) is not Triton's API
        yield name, obj


def _owner_module(obj: object) -> str | None:
    for candidate in (getattr(obj, "fn", None), obj):
        mod = getattr(candidate, "__module__", None)
        if isinstance(mod, str) and not isinstance(candidate, (int, float, str)):
            return mod
    return None


def _is_dtype(obj: object) -> bool:
    return type(obj).__name__ in ("dtype", "pointer_type") and not isinstance(obj, type)


def signature_of(obj: object) -> str | None:
    """``(a, b=1)``: the call signature without Triton's private ``_semantic``-style parameters."""
    # A JITFunction's own signature is (*args, **kwargs); the wrapped Python function has the real one.
    for candidate in (getattr(obj, "fn", None), getattr(obj, "__wrapped__", None), obj):
        if candidate is None:
            continue
        try:
            sig = inspect.signature(candidate)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        params = [p for p in sig.parameters.values() if not p.name.startswith("_")]
        return str(sig.replace(parameters=params))
    return None


def docstring_of(obj: object) -> str:
    for candidate in (getattr(obj, "fn", None), obj):
        doc = getattr(candidate, "__doc__", None) if candidate is not None else None
        if isinstance(doc, str) and doc.strip():
            if not isinstance(candidate, type) and doc == type(candidate).__doc__:
                continue  # an int constant would otherwise show int's docstring
            return inspect.cleandoc(doc)
    return ""


def _kind(obj: object) -> str:
    if isinstance(obj, type):
        return "class"
    if callable(obj):
        return "function"
    return "constant"


def _header(qualname: str, version: str, aliases: tuple[str, ...] | None = None) -> list[str]:
    short = [a for a in (aliases_of(qualname) if aliases is None else aliases) if a != qualname]
    lines = [f"# {qualname}", ""]
    lines.append(f"Source: installed Triton {version} (signature and docstring read from the package).")
    if short:
        lines.append("Also written: " + ", ".join(f"`{a}`" for a in short) + ".")
    lines.append("")
    return lines


def _object_page(qualname: str, obj: object, version: str) -> InstalledPage:
    lines = _header(qualname, version)
    kind = _kind(obj)
    if kind == "constant":
        lines += ["```python", f"{qualname} = {obj!r}", "```", ""]
    else:
        sig = signature_of(obj)
        prefix = "class " if kind == "class" else ""
        lines += ["```python", f"{prefix}{qualname}{sig if sig is not None else '(...)'}", "```", ""]
    doc = docstring_of(obj)
    lines.append(doc if doc else "(No docstring in the installed package.)")
    return InstalledPage(
        path=f"{INSTALLED_DIR}/{qualname}.md",
        qualname=qualname,
        title=qualname,
        markdown="\n".join(lines).rstrip() + "\n",
        aliases=aliases_of(qualname),
    )


def _module_index(module_name: str, entries: list[tuple[str, object]], version: str) -> InstalledPage:
    lines = _header(module_name, version)
    lines.append(f"Public names of `{module_name}` in the installed Triton, with their first docstring line.")
    lines.append("")
    for name, obj in entries:
        first = next((ln for ln in docstring_of(obj).splitlines() if ln.strip()), "")
        lines.append(f"- `{module_name}.{name}` ({_kind(obj) if not _is_dtype(obj) else 'dtype'}) {first}")
    return InstalledPage(
        path=f"{INSTALLED_DIR}/{module_name}.md",
        qualname=module_name,
        title=f"{module_name} (index)",
        markdown="\n".join(lines).rstrip() + "\n",
        aliases=aliases_of(module_name),
    )


def _dtype_page(module_name: str, dtypes: list[tuple[str, object]], version: str) -> InstalledPage:
    qualname = f"{module_name}.dtypes"  # a page name, not an attribute of the module
    lines = _header(qualname, version, aliases=())
    lines.append("Data types usable in kernels (`x.to(tl.float32)`, `tl.zeros(shape, dtype=...)`):")
    lines.append("")
    lines += [f"- `{module_name}.{name}`: {obj}" for name, obj in dtypes]
    return InstalledPage(
        path=f"{INSTALLED_DIR}/{qualname}.md",
        qualname=qualname,
        title=f"{module_name} data types",
        markdown="\n".join(lines).rstrip() + "\n",
        aliases=(),
    )


def _libdevice_page(version: str) -> InstalledPage:
    lines = _header(LIBDEVICE, version, aliases=("libdevice",))
    try:
        libdevice = importlib.import_module(LIBDEVICE)
    except ImportError:
        lines.append("This Triton build has no libdevice module.")
        names: list[str] = []
    else:
        names = [n for n in sorted(dir(libdevice)) if not n.startswith("_") and callable(getattr(libdevice, n))]
        lines.append(
            "Math functions beyond `tl.*`, imported with `from triton.language.extra import libdevice` and "
            "called inside a kernel as `libdevice.<name>(x)`. Each name dispatches on the argument's dtype "
            "to the backend's device library (CUDA libdevice or the AMD device libs)."
        )
        lines.append("")
        for name in names:
            obj = getattr(libdevice, name)
            lines += [
                f"## {LIBDEVICE}.{name}",
                "",
                "```python",
                f"libdevice.{name}{signature_of(obj) or '(...)'}",
            ]
            lines += ["```", ""]
            doc = docstring_of(obj)
            if doc:
                lines += [doc, ""]
    return InstalledPage(
        path=f"{INSTALLED_DIR}/{LIBDEVICE}.md",
        qualname=LIBDEVICE,
        title=f"{LIBDEVICE} (math functions)",
        markdown="\n".join(lines).rstrip() + "\n",
        aliases=("libdevice", LIBDEVICE),
    )
