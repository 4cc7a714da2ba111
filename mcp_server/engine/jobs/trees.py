"""Argument trees inside children: tensors nested in lists, tuples and dicts, and what is done to them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mcp_server.engine.runner.child import UsageProblem


def map_tensors(tree: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, list):
        return [map_tensors(t, fn) for t in tree]
    if isinstance(tree, tuple):
        return tuple(map_tensors(t, fn) for t in tree)
    if isinstance(tree, dict):
        return {k: map_tensors(v, fn) for k, v in tree.items()}
    return tree


def iter_tensors(tree: Any) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, list | tuple):
        for t in tree:
            yield from iter_tensors(t)
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from iter_tensors(v)


def check_plain(tree: Any, what: str) -> None:
    """Arguments travel between processes as tensors and plain Python values only."""
    if isinstance(tree, torch.Tensor) or tree is None or isinstance(tree, bool | int | float | str):
        return
    if isinstance(tree, list | tuple):
        for t in tree:
            check_plain(t, what)
        return
    if isinstance(tree, dict):
        for v in tree.values():
            check_plain(v, what)
        return
    raise UsageProblem(
        f"{what} contains a {type(tree).__name__}; inputs must be tensors, numbers, strings, None, or "
        "lists/tuples/dicts of those. Build other objects inside the function under test."
    )


def to_device(tree: Any, device: str) -> Any:
    return map_tensors(tree, lambda t: t.to(device))


def plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain ``torch.Tensor`` (a Parameter or other subclass unwrapped): the trusted parent reads what
    children save with ``torch.load(weights_only=True)``, which refuses classes it does not know."""
    return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)


def foreign_tensor(o: Any) -> bool:
    """A ``torch.Tensor`` subclass other than ``nn.Parameter``: its methods can run code of its own whenever
    the tensor is used, also after the call that returned it (work done outside a timed call)."""
    return isinstance(o, torch.Tensor) and type(o) not in (torch.Tensor, torch.nn.Parameter)


def type_label(o: Any) -> str:
    """How a finding names the type of a returned object."""
    name = type(o).__name__
    return f"{name} (a torch.Tensor subclass: return plain tensors)" if foreign_tensor(o) else name


def to_cpu(tree: Any) -> Any:
    return map_tensors(tree, lambda t: plain(t.detach().to("cpu")))


def clone(tree: Any) -> Any:
    return map_tensors(tree, lambda t: t.detach().clone())


class Flat(list):
    """A call's outputs as a flat list, with the call's ``result`` as it was returned (how it nests them:
    :func:`nesting_fields`, worked out only where a job asks, not in bench's timed calls)."""

    result: Any = None


def nesting(out: Any, leaf: Any = None) -> str:
    """How ``out`` nests its leaves: ``(·, ·)`` for a pair (tuple or list), ``{'a': ·}`` for a dict, ``·`` for
    anything else; ``leaf(o)`` names a leaf instead of ``·``."""
    if isinstance(out, list | tuple):
        inner = ", ".join(nesting(item, leaf) for item in out)
        return f"({inner},)" if len(out) == 1 else f"({inner})"
    if isinstance(out, dict):
        return "{" + ", ".join(f"{key!r}: {nesting(out[key], leaf)}" for key in sorted(out, key=str)) + "}"
    return "·" if leaf is None else leaf(out)


def _leaves(out: Any) -> list[Any]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [leaf for item in out for leaf in _leaves(item)]
    if isinstance(out, dict):
        return [leaf for key in sorted(out, key=str) for leaf in _leaves(out[key])]
    return [out]


def flatten_outputs(out: Any) -> Flat:
    """A call's result as a flat list: a tensor, or the leaves of tuples/lists/dicts (dicts by key)."""
    flat = Flat(_leaves(out))
    flat.result = out
    return flat


def nesting_fields(flat: Any) -> dict[str, str]:
    """For a job's report, how the call behind ``flat`` (from :func:`flatten_outputs`) nested its outputs:
    ``nesting``, the key two calls are compared by (tuples and lists alike; a digest where it is long), and
    ``described``, the same with its leaves named, for a message. Empty for any other list."""
    if not isinstance(flat, Flat):
        return {}
    key = nesting(flat.result)
    if len(key) > 2000:
        key = "#" + hashlib.sha256(key.encode()).hexdigest()[:16]
    described = nesting(flat.result, lambda o: "tensor" if isinstance(o, torch.Tensor) else type(o).__name__)
    return {"nesting": key, "described": described if len(described) <= 160 else f"{described[:160]}…"}


def flat_bytes(t: torch.Tensor, on_device: bool = False) -> torch.Tensor:
    """``t``'s elements as one row of bytes on the CPU (or where ``t`` is), whatever its strides. (``contiguous()``
    keeps a stride other than 1 on a one-element tensor, such as the slice ``x[::2][:1]``, and a byte view then
    refuses it.) A sparse tensor reads as its dense values, a quantized one as its integer representation (neither
    has a byte view of its own; compare fails them as outputs)."""
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_quantized:
        t = t.int_repr()
    flat = (t.detach() if on_device else t.detach().to("cpu")).reshape(-1)
    if flat.numel() and flat.stride(-1) != 1:
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor, on_device: bool = False) -> bool:
    """Bitwise equality of shape, dtype and elements (NaN equals an identical NaN, unlike torch.equal), compared on
    the CPU or, ``on_device``, where the tensors are."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(flat_bytes(a, on_device), flat_bytes(b, on_device))


def tensor_digest(t: torch.Tensor) -> str:
    data = flat_bytes(t).numpy().tobytes()
    return hashlib.sha256(data + str((t.dtype, tuple(t.shape))).encode()).hexdigest()


def storage_span(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0:
        return None
    try:
        storage = t.untyped_storage()
        start = storage.data_ptr()
        return (start, start + storage.nbytes())
    except (RuntimeError, NotImplementedError):
        return None


def aliases(outputs: list[Any], inputs: list[Any]) -> list[tuple[int, int]]:
    """(output index, input index) pairs whose storages overlap."""
    spans_in = [(i, storage_span(t)) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
    pairs = []
    for o, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            continue
        span = storage_span(out)
        if span is None:
            continue
        for i, other in spans_in:
            if other is not None and span[0] < other[1] and other[0] < span[1]:
                pairs.append((o, i))
    return pairs


def _element_bytes(t: torch.Tensor) -> tuple[int, int]:
    """The first and one past the last byte any element of ``t`` covers (torch's strides are never negative)."""
    start = t.data_ptr()
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return start, start + (last + 1) * t.element_size()


def _dense(t: torch.Tensor) -> bool:
    """Whether the elements of ``t`` fill their byte range once each (contiguous in some order of its dims)."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride(), strict=True) if s > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _element_starts(t: torch.Tensor) -> torch.Tensor:
    """The byte address of every element of ``t``, sorted."""
    offsets = torch.zeros((), dtype=torch.int64, device=t.device)
    for n, s in zip(t.shape, t.stride(), strict=True):
        offsets = offsets.unsqueeze(-1) + torch.arange(n, dtype=torch.int64, device=t.device) * s
    return (offsets.flatten() * t.element_size() + t.data_ptr()).sort().values


def elements_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether some byte is part of an element of both: a write through one would change the other.

    Views of one buffer that interleave without touching (the real and imaginary columns of one allocation, the
    halves of a split) do not overlap."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    a0, a1 = _element_bytes(a)
    b0, b1 = _element_bytes(b)
    if a1 <= b0 or b1 <= a0:
        return False
    if _dense(a) and _dense(b):
        return True  # each covers its whole byte range
    starts_a, size_a, size_b = _element_starts(a), a.element_size(), b.element_size()
    for chunk in _element_starts(b).split(1 << 22):
        # For each element of b, the last element of a that starts before b's element ends.
        last = torch.searchsorted(starts_a, chunk + size_b) - 1
        hit = (last >= 0) & (starts_a[last.clamp(min=0)] + size_a > chunk)
        if bool(hit.any()):
            return True
    return False


def overlapping_outputs(outputs: list[Any]) -> list[tuple[int, int]]:
    """(i, j) pairs, i < j, of output tensors some of whose elements are the same memory."""
    tensors = [
        (i, t) for i, t in enumerate(outputs) if isinstance(t, torch.Tensor) and not foreign_tensor(t) and t.numel()
    ]
    return [(i, j) for k, (i, a) in enumerate(tensors) for j, b in tensors[k + 1 :] if elements_overlap(a, b)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
