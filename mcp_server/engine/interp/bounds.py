"""Address checks for the Triton interpreter: every load, store and atomic against the tensors it may touch.

Under the interpreter a kernel's pointers are plain host addresses and a bad offset reads whatever memory is
there (or crashes the process). At each launch we record the byte span of every tensor argument (the span
its view covers, from its first to its last element); each memory operation's active lanes must fall
inside one of them. The first access that does not raises :class:`OutOfBoundsAccess` naming the kernel line,
the program id and the nearest argument, which the child reports as an ``out_of_bounds`` finding.

A lane that lands inside a *different* argument than the one its pointer was derived from is not caught:
the interpreter does not track derivation, only addresses. A kernel that makes pointers from integers
(``x.to(tl.pointer_type(...))`` on a table of data pointers) is not checked from that point of its launch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from mcp_server.engine.frames import library_file, library_roots
from mcp_server.engine.models import Location


@dataclass(frozen=True)
class Span:
    name: str
    start: int
    end: int  # exclusive
    itemsize: int
    describe: str  # e.g. "float32[1000]"


class OutOfBoundsAccess(Exception):
    """A kernel touched memory outside every tensor argument of its launch (interpreter only)."""

    def __init__(self, message: str, where: Location | None):
        super().__init__(message)
        self.where = where


# The spans of the launch being interpreted (launches do not nest).
_spans: list[Span] = []
_starts = np.zeros(0, dtype=np.uint64)
_ends = np.zeros(0, dtype=np.uint64)


def _tensor_span(name: str, tensor: Any) -> Span | None:
    base = getattr(tensor, "base", None)
    if base is not None and hasattr(base, "data_ptr") and not hasattr(tensor, "untyped_storage"):
        tensor = base  # triton.reinterpret's TensorWrapper
    if not hasattr(tensor, "data_ptr") or not hasattr(tensor, "stride"):
        return None
    itemsize = int(tensor.element_size())
    start = int(tensor.data_ptr())
    if tensor.numel() == 0:
        return Span(name, start, start, itemsize, f"{str(tensor.dtype).replace('torch.', '')}[empty]")
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
    shape = ", ".join(str(s) for s in tensor.shape)
    dtype = str(tensor.dtype).replace("torch.", "")
    return Span(name, start, start + (last + 1) * itemsize, itemsize, f"{dtype}[{shape}]")


def _collect(name: str, value: Any, out: list[Span]) -> None:
    if isinstance(value, tuple | list):
        for i, item in enumerate(value):
            _collect(f"{name}[{i}]", item, out)
        return
    base = getattr(value, "base", None)
    if base is not None and hasattr(value, "block_shape"):  # host TensorDescriptor
        _collect(f"{name}.base", base, out)
        return
    span = _tensor_span(name, value)
    if span is not None:
        out.append(span)


def pointers_from_integers() -> None:
    """The kernel made a pointer from an integer (a table of data pointers, say): its accesses may target
    tensors that are not arguments, so address checks stop for the rest of this launch."""
    global _starts, _ends
    _spans.clear()
    _starts = _ends = np.zeros(0, dtype=np.uint64)


def set_launch(arg_names: list[str], args: list[Any], kwargs: dict[str, Any]) -> None:
    global _starts, _ends
    spans: list[Span] = []
    for name, value in zip(arg_names, args, strict=False):
        _collect(name, value, spans)
    for name, value in kwargs.items():
        _collect(name, value, spans)
    spans = [s for s in spans if s.end > s.start]
    spans.sort(key=lambda s: s.start)
    _spans[:] = spans
    _starts = np.array([s.start for s in spans], dtype=np.uint64)
    _ends = np.array([s.end for s in spans], dtype=np.uint64)


def current_spans() -> list[Span]:
    """The tensor arguments of the launch being interpreted, by start address (empty when not checked)."""
    return _spans


def kernel_location() -> Location | None:
    """The innermost frame outside library code (engine.frames): the kernel line whose access was checked."""
    roots = library_roots()
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not library_file(filename, roots):
            line = None
            try:
                import linecache

                line = linecache.getline(filename, frame.f_lineno).rstrip("\n") or None
            except Exception:
                line = None
            return Location(file=filename, line=frame.f_lineno, source_line=line)
        frame = frame.f_back
    return None


def _program() -> str:
    try:
        from triton.runtime.interpreter import interpreter_builder

        idx = interpreter_builder.grid_idx
        return f"program ({idx[0]}, {idx[1]}, {idx[2]})" if idx is not None else "a program"
    except Exception:
        return "a program"


def check(ptrs: np.ndarray, mask: np.ndarray | None, itemsize: int, what: str) -> None:
    """Raise OutOfBoundsAccess if an active lane of ``ptrs`` is outside every tensor argument."""
    if not _spans:
        return
    addr = np.asarray(ptrs, dtype=np.uint64)
    if mask is not None:
        active = np.broadcast_to(np.asarray(mask, dtype=bool), addr.shape)
        addr = addr[active]
    else:
        addr = addr.reshape(-1)
    if addr.size == 0:
        return
    # The span starting at or before each address; the access is inside if its last byte is in it too.
    pos = np.searchsorted(_starts, addr, side="right").astype(np.int64) - 1
    clipped = np.clip(pos, 0, None)
    inside = (pos >= 0) & (addr + np.uint64(itemsize) <= _ends[clipped])
    if bool(inside.all()):
        return
    bad = addr[~inside]
    first = int(bad[0])
    where = kernel_location()
    near = _nearest(first)
    code = f" `{where.source_line.strip()}`" if where is not None and where.source_line else ""
    at = f" at {where}" if where is not None else ""
    message = (
        f"out-of-bounds {what}{at}{code}: {bad.size} of {addr.size} active lanes in {_program()} address memory "
        f"outside every tensor argument; {near}. On the GPU this {_EFFECT.get(what, 'is undefined')}. "
        "Check the mask of this access against the tensor's size."
    )
    raise OutOfBoundsAccess(message, where)


_EFFECT = {
    "load": "reads whatever lies there, or stops with an illegal memory access",
    "store": "overwrites other memory, or stops with an illegal memory access",
    "atomic": "updates other memory, or stops with an illegal memory access",
}


def _nearest(addr: int) -> str:
    best = min(_spans, key=lambda s: min(abs(addr - s.start), abs(addr - (s.end - 1))))
    index = (addr - best.start) // best.itemsize
    last = (best.end - best.start) // best.itemsize - 1
    return f"the first is at element offset {index} from `{best.name}` ({best.describe}, offsets 0..{last})"
