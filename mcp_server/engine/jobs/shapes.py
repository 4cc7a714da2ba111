"""Derived edge shapes: each distinct dimension size replaced by size-1, 1 and an odd size, inputs refilled alike."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from mcp_server.engine.jobs.trees import iter_tensors


def _substitutes(size: int) -> list[tuple[int, str]]:
    subs: list[tuple[int, str]] = []
    if size > 2:
        subs.append((size - 1, "size−1: a non-power-of-2 tail"))
    if size > 1:
        subs.append((1, "size 1"))
    odd = (size // 2) | 1
    if size > 6 and odd not in (size - 1, 1, size):
        subs.append((odd, "an odd size"))
    return subs


def refill(t: torch.Tensor, shape: list[int], old: int, new: int) -> torch.Tensor:
    """A random tensor of a new shape that resembles ``t`` (range, sign, dtype, index-like values)."""
    device, dtype = t.device, t.dtype
    if dtype == torch.bool:
        return torch.rand(shape, device=device) < 0.5
    if dtype.is_floating_point or dtype.is_complex:
        ref = t.float()
        if ref.numel() == 0:
            return torch.randn(shape, device=device).to(dtype)
        finite = ref[torch.isfinite(ref)]
        mean = finite.mean().item() if finite.numel() else 0.0
        std = finite.std().item() if finite.numel() > 1 else 1.0
        std = std if math.isfinite(std) and std > 0 else 1.0
        fresh = torch.randn(shape, device=device) * std + mean
        if finite.numel() and finite.min().item() >= 0:
            fresh = fresh.abs()
        return fresh.to(dtype)
    lo = int(t.min().item()) if t.numel() else 0
    hi = int(t.max().item()) if t.numel() else 1
    if hi < old <= hi + 1 + max(1, old // 8) and lo >= -1:
        hi = min(hi, new - 1)  # values look like indices into the substituted dimension
    hi = max(hi, lo)
    return torch.randint(lo, hi + 1, shape, device=device, dtype=dtype)


@dataclass
class Variant:
    label: str
    old: int
    new: int
    why: str


def plan_variants(args: list[Any], limit: int) -> list[Variant]:
    sizes: list[int] = []
    for t in iter_tensors(args):
        for d in t.shape:
            if d > 1 and d not in sizes:
                sizes.append(d)
    sizes.sort(reverse=True)
    plan: list[Variant] = []
    # Round-robin over sizes so a small limit still touches every dimension once.
    per_size = [_substitutes(s) for s in sizes]
    for rank in range(3):
        for size, subs in zip(sizes, per_size, strict=True):
            if rank < len(subs):
                new, why = subs[rank]
                plan.append(Variant(f"derived {size}→{new}", size, new, why))
    return plan[:limit]


def apply_variant(args: Any, variant: Variant) -> Any:
    def swap(t: torch.Tensor) -> torch.Tensor:
        if variant.old not in t.shape:
            return t.clone()
        shape = [variant.new if d == variant.old else d for d in t.shape]
        return refill(t, shape, variant.old, variant.new)

    def walk(tree: Any) -> Any:
        if isinstance(tree, torch.Tensor):
            return swap(tree)
        if isinstance(tree, bool):
            return tree
        if isinstance(tree, int) and tree == variant.old:
            return variant.new
        if isinstance(tree, list):
            return [walk(x) for x in tree]
        if isinstance(tree, tuple):
            return tuple(walk(x) for x in tree)
        if isinstance(tree, dict):
            return {k: walk(v) for k, v in tree.items()}
        return tree

    return walk(args)
