"""Usage checks on a candidate before any case runs, in the candidate's child.

A ``@triton.jit`` kernel given where a launcher belongs, or a launcher whose parameters cannot take the
reference's inputs, is the caller's mistake, not the kernel's: it is reported once as a usage problem (exit 2
on the CLI) with the expected signature and what the inputs are, instead of a TypeError on every case.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mcp_server.engine.runner.child import UsageProblem

_SHORT = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}


def is_kernel(obj: Any) -> bool:
    """A Triton kernel object (JITFunction, its interpreter twin, Autotuner, Heuristics), not a launcher."""
    try:
        from triton.runtime import KernelInterface
    except ImportError:  # pragma: no cover - triton is a dependency
        return False
    return isinstance(obj, KernelInterface)


def describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = _SHORT.get(value.dtype, str(value.dtype).replace("torch.", ""))
        return f"{dtype}[{','.join(str(d) for d in value.shape)}]"
    if isinstance(value, bool | int | float):
        return f"{type(value).__name__}={value!r}"
    if isinstance(value, list | tuple):
        inner = ", ".join(describe_value(v) for v in value[:4]) + (", …" if len(value) > 4 else "")
        return f"{type(value).__name__}[{inner}]"
    if value is None:
        return "None"
    return type(value).__name__


def describe_inputs(args: list[Any]) -> str:
    return ", ".join(describe_value(a) for a in args) or "none"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _launchers(module: Any) -> list[str]:
    """The module's own plain functions that launch one of its kernels (``kernel[grid](...)``), directly or
    through another such function; the public ones when there are any."""
    if module is None:
        return []
    sources: dict[str, str] = {}
    for name, value in vars(module).items():
        if inspect.isfunction(value) and getattr(value, "__module__", None) == module.__name__:
            try:
                sources[name] = inspect.getsource(value)
            except (OSError, TypeError):
                continue
    kernels = [f"{name}[" for name, value in vars(module).items() if is_kernel(value)]
    found: set[str] = set()
    for _ in range(3):
        marks = kernels + [f"{name}(" for name in found]
        found |= {name for name, source in sources.items() if any(m in source for m in marks)}
    public = sorted(n for n in found if not n.startswith("_"))
    return public or sorted(found)


def check_candidate(fn: Any, args: list[Any], label: str, module: Any = None, what: str = "the reference's") -> None:
    """Raise UsageProblem when ``fn`` is a kernel or cannot be called with ``args`` (positionally)."""
    if is_kernel(fn):
        launchers = _launchers(module)
        hint = (
            f" The file's functions that launch kernels: {', '.join(launchers)}."
            if launchers
            else " Write one that allocates the outputs, picks the grid and calls kernel[grid](...)."
        )
        raise UsageProblem(
            f"`{label}` is a @triton.jit kernel, not a launcher: it is launched as kernel[grid](...) with "
            "pointers and sizes, not called with the inputs. Pass the Python function that launches it "
            f"(path.py:launcher).{hint}"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C extension: nothing to check
    try:
        signature.bind(*args)
    except TypeError as exc:
        params = [
            p
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        raise UsageProblem(
            f"{label}{signature} takes {_plural(len(params), 'required argument')}; {what} inputs are "
            f"{len(args)}: {describe_inputs(args)} ({exc}). Make its parameters match the inputs, or give "
            "inputs that match it (--inputs)."
        ) from None
