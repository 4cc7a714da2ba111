"""Input specs: how the arguments of a call are described on the command line or through MCP.

Three forms:

- ``path.py:function`` — a function in a file returning a list of arguments, or a ``dict[label, list]``
  of labelled cases (the form ``get_test_cases`` has);
- a type list, ``"bf16[4096,8192], f32[8192], i32=8192, 1e-5"`` — each item a random tensor
  (``dtype[dims]``), a typed scalar (``i32=7``, ``f32=0.5``) or a bare number;
- nothing — the reference module's ``get_test_cases()`` or ``get_inputs()``.

The type list is parsed here (trusted, no user code) and materialised inside children.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mcp_server.engine.errors import UsageError

DTYPE_ALIASES = {
    "f64": "float64",
    "fp64": "float64",
    "float64": "float64",
    "double": "float64",
    "f32": "float32",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "f16": "float16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "i64": "int64",
    "int64": "int64",
    "long": "int64",
    "i32": "int32",
    "int32": "int32",
    "int": "int32",
    "i16": "int16",
    "int16": "int16",
    "i8": "int8",
    "int8": "int8",
    "u8": "uint8",
    "uint8": "uint8",
    "bool": "bool",
    "i1": "bool",
}

_TENSOR = re.compile(r"^\s*([A-Za-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*$")
_SCALAR = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=\s*([-+0-9.eE]+|True|False)\s*$")


@dataclass(frozen=True)
class TensorArg:
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ScalarArg:
    value: int | float | bool


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch in ",;" and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        items.append("".join(current))
    return [i.strip() for i in items if i.strip()]


def looks_like_type_list(text: str) -> bool:
    return "[" in text or (":" not in text and not text.endswith(".py"))


def parse_type_list(text: str) -> list[TensorArg | ScalarArg]:
    """Parse ``"f32[1024,512], i32=7, 0.5"``; raise UsageError naming the bad item."""
    args: list[TensorArg | ScalarArg] = []
    for item in _split_top_level(text):
        tensor = _TENSOR.match(item)
        if tensor:
            dtype = DTYPE_ALIASES.get(tensor.group(1).lower())
            if dtype is None:
                raise UsageError(
                    f"Unknown dtype {tensor.group(1)!r} in input spec item {item!r}. "
                    f"Use one of: {', '.join(sorted(set(DTYPE_ALIASES)))}."
                )
            dims = tuple(int(d) for d in tensor.group(2).replace(" ", "").split(",") if d)
            args.append(TensorArg(dtype, dims))
            continue
        scalar = _SCALAR.match(item)
        if scalar:
            kind = DTYPE_ALIASES.get(scalar.group(1).lower())
            raw = scalar.group(2)
            if kind is None:
                raise UsageError(f"Unknown scalar type {scalar.group(1)!r} in input spec item {item!r}.")
            if kind == "bool":
                args.append(ScalarArg(raw == "True" or raw == "1"))
            elif kind.startswith("int") or kind.startswith("uint"):
                args.append(ScalarArg(int(float(raw))))
            else:
                args.append(ScalarArg(float(raw)))
            continue
        try:
            value: Any = int(item)
        except ValueError:
            try:
                value = float(item)
            except ValueError:
                raise UsageError(
                    f"Cannot read input spec item {item!r}. Write tensors as dtype[d0,d1] (e.g. "
                    "bf16[4096,8192]), scalars as i32=7 / f32=0.5 or plain numbers, separated by commas; "
                    "or pass path.py:function returning the arguments."
                ) from None
        args.append(ScalarArg(value))
    if not args:
        raise UsageError("The input spec is empty. Example: --inputs 'f32[1024,512], f32[512]'.")
    return args


def materialise(args: list[TensorArg | ScalarArg], device: str) -> list[Any]:
    """Build random arguments for a parsed type list (inside a child; uses torch's global RNG)."""
    import torch

    out: list[Any] = []
    for arg in args:
        if isinstance(arg, ScalarArg):
            out.append(arg.value)
            continue
        dtype = getattr(torch, arg.dtype)
        if dtype.is_floating_point:
            out.append(torch.randn(arg.shape, device=device, dtype=torch.float32).to(dtype))
        elif dtype == torch.bool:
            out.append(torch.rand(arg.shape, device=device) < 0.5)
        else:
            out.append(torch.randint(0, 100, arg.shape, device=device, dtype=dtype))
    return out
