"""Cases derived from one ``get_inputs()`` (inside the reference's child): other sizes and other layouts.

Sizes: every distinct dimension size of the inputs is replaced, consistently across the arguments, by
smaller sizes (size−1, 1, an odd size when size−1 is even) and larger ones (the size just past the power
of two at or above it, where a kernel's block would end; 2n+1), within a memory budget, at most
``max_derived`` of them. Each size also gets one large size, on top of those: one past the largest power of
two, from four times the one at or above the size up to ``LARGE_BLOCK`` (``LARGE_ROWS`` for a leading
dimension), whose inputs fit the budget. A kernel that launches one program with a block fixed in its code
(or a grid fixed at the base size) is right up to that block and wrong past it: the large size is past any
such block a kernel practically uses. When the reference rejects every variant of a size (a head count that
must divide it, a block it must be a multiple of), multiples it may accept are tried instead (3n/2, n/2, 2n).

Integer tensors whose values look like indices into a substituted dimension (every value below the size,
the largest near it) get new values below the new size, whether or not their own shape changes: class
targets of a cross-entropy keep pointing at a class that exists.

Layouts: the same values as the first case, passed as non-contiguous tensors: a transposed view, every
other element of a wider buffer, and a view at a storage offset. Tensors cross processes contiguous, so
the layout travels as a name and is applied by each child just before the call (``relayout``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from mcp_server.engine.jobs.trees import iter_tensors, map_tensors

MIB = 1 << 20
# Bytes of derived inputs allowed, as a multiple of the original inputs' bytes and as absolute bounds.
# The interpreter runs every program of a grid in numpy, its time grows with the size: the CPU budget is tight.
# (factor, floor, ceiling). Twice the inputs: the size past the power of two fits, 2n+1 of a dimension every
# input has does not, unless the inputs are small enough for the floor to hold it. The CPU's floor of 1 MiB holds
# the large size of most small problems (2^15 + 1 for two float32 vectors or for 8 rows), about 0.1-0.2 s of
# interpreter time a case.
CPU_BUDGET = (2.0, MIB, 64 * MIB)
GPU_BUDGET = (4.5, 64 * MIB, 2048 * MIB)
# A large size is one past a power of two up to this one, at least four times the one at or above the size: past
# any block one program could practically cover. Triton takes blocks of up to 2^20 elements
# (triton.language.TRITON_MAX_TENSOR_NUMEL), but its tutorials cap a fused row at 64 KiB (2^14 fp32 or 2^15 fp16
# values; 2^16 fp32 values would fill an H100 SM's 256 KiB of registers on their own), and the interpreter's time
# grows with the size: one past 2^20 costs it seconds a case where one past 2^15 costs a tenth of one.
LARGE_BLOCK = 1 << 15
# The same for a size that is a leading dimension of some input (rows, a batch, a matmul's K as B's rows): it
# usually sets how many programs run, and the interpreter runs them one at a time (about 0.4 ms each, twice a
# case). One past 2^8 is past the rows of the 2-D tiles kernels use (BLOCK_M up to 256).
LARGE_ROWS = 1 << 8
# Values written where a strided or offset view skips memory: a kernel that reads them is visibly wrong.
GAP_FLOAT = 777.0
# Elements before an offset view: 16 keeps the 16-byte alignment Triton specializes on, so the case costs
# no extra compile, and still moves data_ptr off the start of the allocation.
OFFSET = 16


@dataclass
class Variant:
    label: str
    old: int
    new: int
    why: str
    fallback: bool = False
    # Whether integer arguments equal to ``old`` become ``new`` too. Not for a large size: the budget counts the
    # inputs only, and a KernelBench model rebuilt at 2^15 features would hold a 2^30-element weight (a model
    # built at the base size rejects the large inputs, and the case is listed as rejected).
    ints: bool = True


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def substitutes(size: int) -> list[tuple[int, str]]:
    """Sizes to try in place of ``size``, most telling first."""
    subs: list[tuple[int, str]] = []

    def add(new: int, why: str) -> None:
        if new >= 1 and new != size and all(new != s for s, _ in subs):
            subs.append((new, why))

    if size > 2:
        add(size - 1, "size−1: a non-power-of-2 tail")
    add(_next_pow2(size) + 1, "larger: one past the power of two a block would cover")
    if size > 1:
        add(1, "size 1")
    add(2 * size + 1, "larger: 2n+1")
    if size > 6 and size % 2:  # size−1 is even: an odd size smaller still
        add((size // 2) | 1, "an odd size")
    return subs


def _large_blocks(args: list[Any], size: int) -> list[int]:
    """The powers of two a large size may be one past, largest first: from ``LARGE_BLOCK`` (``LARGE_ROWS`` where
    ``size`` is a leading dimension of an input) down to four times the one at or above ``size`` (well past the
    larger sizes of ``substitutes``), or twice it where four times is past the cap; none where twice is."""
    leading = any(size in t.shape[:-1] for t in iter_tensors(args))
    cap = LARGE_ROWS if leading else LARGE_BLOCK
    top = _next_pow2(size)
    lowest = max(2 * top, min(4 * top, cap))
    return [1 << k for k in range(cap.bit_length() - 1, lowest.bit_length() - 2, -1)]


def large_substitute(args: list[Any], size: int, budget: int) -> tuple[int, str] | None:
    """The large size for ``size``: one past the largest power of two of ``_large_blocks`` at which the inputs fit
    ``budget`` (counted at the power of two: the one element more is no matter), with why; None where none fits."""
    for block in _large_blocks(args, size):
        if tensor_bytes(args, size, block) <= budget:
            if block in (LARGE_BLOCK, LARGE_ROWS):
                why = f"large: one past 2^{block.bit_length() - 1}, past any block one program could practically cover"
            else:
                why = (
                    f"large: one past 2^{block.bit_length() - 1} (the largest power of two the memory budget "
                    "holds), past any block up to that size one program could cover"
                )
            return block + 1, why
    return None


def fallback_substitutes(size: int) -> list[tuple[int, str]]:
    """Multiples to try when the reference rejected every variant of ``size``."""
    if size % 2 == 0:
        out = [(size + size // 2, "3n/2: a multiple of n/2 with a ragged tail past n")]
        if size // 2 > 1:
            out.append((size // 2, "n/2"))
        out.append((2 * size, "2n"))
        return out
    return [(2 * size, "2n"), (3 * size, "3n")]


def tensor_bytes(tree: Any, old: int | None = None, new: int | None = None) -> int:
    total = 0
    for t in iter_tensors(tree):
        shape = [new if (old is not None and d == old) else d for d in t.shape]
        total += math.prod(shape) * t.element_size()
    return total


def budget_bytes(args: list[Any], device: str) -> int:
    factor, floor, ceiling = GPU_BUDGET if device.startswith("cuda") else CPU_BUDGET
    limit = min(max(factor * tensor_bytes(args), floor), ceiling)
    if device.startswith("cuda"):
        try:
            free, _ = torch.cuda.mem_get_info()
            limit = min(limit, free // 8)
        except RuntimeError:
            pass
    # Whole MiB from one on (the floors are): the note listing the sizes over the budget states it in MiB.
    return int(limit) // MIB * MIB if limit >= MIB else int(limit)


def sizes_of(args: list[Any]) -> list[int]:
    sizes: list[int] = []
    for t in iter_tensors(args):
        for d in t.shape:
            if d > 1 and d not in sizes:
                sizes.append(d)
    return sorted(sizes, reverse=True)


# A size only a KernelBench model's constructor sets (an output width, say): its most telling variants, each run
# beside the inputs' sizes (not counted against their limit).
MODEL_SIZE_VARIANTS = 2
MODEL_SIZES_MOST = 2


def model_only_sizes(
    init: list[Any], args: list[Any], shapes: list[list[int]], weight_shapes: list[list[int]] | None = None
) -> list[int]:
    """The integers of a KernelBench model's constructor arguments that are no input's size but are sizes of its
    outputs (Linear's ``out_features``), then those that are sizes of its weights only (a hidden width): a kernel
    that fixes them in its code is right only at the problem's own (at most ``MODEL_SIZES_MOST``; outputs' first,
    largest first). Constructor integers in neither (a group count, a head count) are left as they are: changing
    them changes the problem, not only its size; a variant whose outputs do not keep the shape the substitution
    predicts (a kernel size changes the spatial size) is rejected like any other."""
    found: list[int] = []

    def walk(tree: Any) -> None:
        if isinstance(tree, bool):
            return
        if isinstance(tree, int) and tree > 1 and tree not in found:
            found.append(tree)
        elif isinstance(tree, list | tuple):
            for x in tree:
                walk(x)

    walk(init)
    inputs = set(sizes_of(args))
    outputs = {d for shape in shapes for d in shape}
    weights = {d for shape in weight_shapes or [] for d in shape}
    first = sorted((n for n in found if n in outputs and n not in inputs), reverse=True)
    then = sorted((n for n in found if n in weights and n not in outputs and n not in inputs), reverse=True)
    return (first + then)[:MODEL_SIZES_MOST]


def plan_variants(
    args: list[Any], limit: int, budget: int, model_sizes: list[int] | None = None
) -> tuple[list[Variant], list[Variant]]:
    """Variants to run (round-robin over sizes, at most ``limit``, then each size's large one when ``limit`` is
    not 0, then ``MODEL_SIZE_VARIANTS`` of each of ``model_sizes``) and those over the memory budget."""
    per_size = [(s, substitutes(s)) for s in sizes_of(args)]
    plan: list[Variant] = []
    over: list[Variant] = []
    depth = max((len(subs) for _, subs in per_size), default=0)
    for rank in range(depth):
        for size, subs in per_size:
            if rank < len(subs):
                new, why = subs[rank]
                variant = Variant(f"derived {size}→{new}", size, new, why)
                if new > size and tensor_bytes(args, size, new) > budget:
                    over.append(variant)
                elif len(plan) < limit:
                    plan.append(variant)
    for size, _ in per_size if limit > 0 else []:
        large = large_substitute(args, size, budget)
        if large is None:
            blocks = _large_blocks(args, size)
            lowest = blocks[-1] + 1 if blocks else None
            if lowest is not None and all((v.old, v.new) != (size, lowest) for v in over):
                over.append(Variant(f"derived {size}→{lowest}", size, lowest, "large", ints=False))
        elif all((v.old, v.new) != (size, large[0]) for v in plan):
            plan.append(Variant(f"derived {size}→{large[0]}", size, large[0], large[1], ints=False))
    for size in (model_sizes or []) if limit > 0 else []:
        for new, why in substitutes(size)[:MODEL_SIZE_VARIANTS]:
            plan.append(Variant(f"derived {size}→{new}", size, new, f"{why} (a size the model's constructor sets)"))
    return plan, over


def plan_fallbacks(size: int, tried: set[int], args: list[Any], budget: int) -> list[Variant]:
    out = []
    for new, why in fallback_substitutes(size):
        if new in tried or new == size:
            continue
        if new > size and tensor_bytes(args, size, new) > budget:
            continue
        out.append(Variant(f"derived {size}→{new}", size, new, f"{why} (the reference rejected the others)", True))
    return out


# Unsigned integer dtypes past uint8: PyTorch's CPU kernels compare them with nothing but ==, so they are
# widened to int64 before any < or max (uint64 values past int64's range wrap negative: sentinels, never indices).
WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def _comparable(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int64) if t.dtype in WIDE_UNSIGNED else t


def _looks_like_index(t: torch.Tensor, old: int) -> bool:
    """Integer values that look like indices into a dimension of size ``old`` (negatives are sentinels)."""
    if t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex or t.numel() == 0:
        return False
    t = _comparable(t)
    valid = t[t >= 0]
    if valid.numel() == 0:
        return False
    hi = int(valid.max().item())
    return hi < old and hi >= old - 1 - max(1, old // 8)


def value_stats(t: torch.Tensor) -> tuple[float, float, bool]:
    """(mean, standard deviation, all non-negative) of the finite values of a floating tensor: what fresh values
    that resemble it are drawn with (a normal draw, folded to non-negative where every value was)."""
    ref = t.detach().float()
    finite = ref[torch.isfinite(ref)] if ref.numel() else ref
    mean = finite.mean().item() if finite.numel() else 0.0
    std = finite.std().item() if finite.numel() > 1 else 1.0
    std = std if math.isfinite(std) and std > 0 else 1.0
    return mean, std, bool(finite.numel()) and finite.min().item() >= 0


def refill(t: torch.Tensor, shape: list[int], old: int, new: int) -> torch.Tensor:
    """A random tensor of ``shape`` that resembles ``t`` (range, sign, dtype, index-like values)."""
    device, dtype = t.device, t.dtype
    if dtype == torch.bool:
        return torch.rand(shape, device=device) < 0.5
    if dtype.is_floating_point or dtype.is_complex:
        mean, std, nonneg = value_stats(t)
        fresh = torch.randn(shape, device=device) * std + mean
        return (fresh.abs() if nonneg else fresh).to(dtype)
    if _looks_like_index(t, old):
        return _reindex(t, shape, new)
    if t.numel() == 0:
        return torch.zeros(shape, device=device, dtype=dtype)
    # Other integers: drawn from the values already there (sentinels, flags and ranges stay valid).
    flat = t.reshape(-1)
    return flat[torch.randint(0, flat.numel(), shape, device=device)].clone()


def _reindex(t: torch.Tensor, shape: list[int], new: int) -> torch.Tensor:
    """Fresh indices below ``new``; negative sentinels (ignore_index) keep their places where shapes allow."""
    dtype = t.dtype
    t = _comparable(t)
    fresh = torch.randint(0, new, shape, device=t.device, dtype=t.dtype)
    if list(t.shape) == shape:
        fresh = torch.where(t < 0, t, fresh)
    elif bool((t < 0).any()):
        sentinel = int(t.min().item())
        fresh = torch.where(torch.rand(shape, device=t.device) < float((t < 0).float().mean()), sentinel, fresh)
    return fresh.to(dtype)


def apply_variant(args: Any, variant: Variant) -> Any:
    def swap(t: torch.Tensor) -> torch.Tensor:
        if variant.old not in t.shape:
            if _looks_like_index(t, variant.old):
                return _reindex(t, list(t.shape), variant.new)
            return t.clone()
        shape = [variant.new if d == variant.old else d for d in t.shape]
        return refill(t, shape, variant.old, variant.new)

    def walk(tree: Any) -> Any:
        if isinstance(tree, torch.Tensor):
            return swap(tree)
        if isinstance(tree, bool):
            return tree
        if isinstance(tree, int) and tree == variant.old and variant.ints:
            return variant.new
        if isinstance(tree, list):
            return [walk(x) for x in tree]
        if isinstance(tree, tuple):
            return tuple(walk(x) for x in tree)
        if isinstance(tree, dict):
            return {k: walk(v) for k, v in tree.items()}
        return tree

    return walk(args)


# --- layouts --------------------------------------------------------------------------------------

LAYOUTS: dict[str, str] = {
    "transposed": "non-contiguous: inputs of 2+ dims as transposed views (last two strides swapped)",
    "strided": "non-contiguous: every other element of a buffer twice as wide (last stride 2)",
    "offset": f"a view at a storage offset of {OFFSET} elements (data_ptr not the allocation's start)",
}


def _gap_value(t: torch.Tensor) -> Any:
    if t.dtype == torch.bool:
        return False
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return GAP_FLOAT
    return 0


def _relayout_one(t: torch.Tensor, kind: str) -> torch.Tensor:
    if t.dim() == 0 or t.numel() == 0:
        return t
    if kind == "transposed":
        if t.dim() < 2:
            return t
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if kind == "strided":
        buf = torch.full((*t.shape[:-1], 2 * t.shape[-1]), _gap_value(t), dtype=t.dtype, device=t.device)
        view = buf[..., ::2]
        view.copy_(t)
        return view
    if kind == "offset":
        buf = torch.full((t.numel() + OFFSET,), _gap_value(t), dtype=t.dtype, device=t.device)
        view = buf[OFFSET:].view(t.shape)
        view.copy_(t)
        return view
    raise ValueError(f"unknown layout {kind!r}")


def relayout(tree: Any, kind: str | None) -> Any:
    """The same values with the layout ``kind`` (no-op for None)."""
    if not kind:
        return tree
    return map_tensors(tree, lambda t: _relayout_one(t.detach(), kind))


def layout_changes(args: list[Any], kind: str) -> bool:
    """Whether ``kind`` makes any input non-contiguous or offset."""
    for t in iter_tensors(args):
        if t.dim() == 0 or t.numel() <= 1:
            continue
        if kind == "transposed" and t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1:
            return True
        if kind in ("strided", "offset"):
            return True
    return False
