"""``tl.atomic_add`` on bf16 under the Triton interpreter.

Triton accepts ``atomic_add`` on a bf16 pointer (``atom_red_typechecking_impl`` allows add, and only add, for
fp16 and bf16), but Triton 3.6's interpreter raises ``ValueError('Unsupported data type')`` for it, so a right
bf16 kernel that scatters or reduces with atomics fails every run without a GPU. :func:`install` performs those
adds itself: lane by lane in lane order where several lanes of one call share an address, each sum taken in fp32
and rounded to bf16 to nearest even (:func:`rounding.bf16_bits`), the value before each lane's add returned as
the GPU returns it. Programs run one after another under the interpreter, so the order between programs is the
launch order; on the GPU it is unspecified, and a kernel whose result depends on it is caught only there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mcp_server.engine.interp.rounding import as_f32, bf16_bits

_installed = False
_original: Any = None  # the interpreter's own atomic, kept for the tests


def bf16_add(ptrs: np.ndarray, vals: np.ndarray, mask: np.ndarray, load: Any, store: Any) -> np.ndarray:
    """Add bf16 ``vals`` (uint16 bits) at the addresses ``ptrs`` where ``mask`` holds, through ``load(addrs)`` and
    ``store(addrs, bits)``; the bits each lane found before its add (0 where masked off)."""
    shape = np.shape(ptrs)
    ptrs = np.asarray(ptrs, dtype=np.uint64).reshape(-1)
    vals = np.broadcast_to(np.asarray(vals, dtype=np.uint16), shape).reshape(-1)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), shape).reshape(-1)
    old = np.zeros(ptrs.shape, dtype=np.uint16)
    remaining = np.flatnonzero(mask)
    while remaining.size:
        # Each pass takes the first lane still waiting at each address, so lanes sharing one add in lane order.
        _, first = np.unique(ptrs[remaining], return_index=True)
        lanes = remaining[np.sort(first)]
        addrs = ptrs[lanes]
        found = np.asarray(load(addrs), dtype=np.uint16)
        old[lanes] = found
        store(addrs, bf16_bits(as_f32(found) + as_f32(vals[lanes])))
        remaining = np.setdiff1d(remaining, lanes, assume_unique=True)
    return old.reshape(shape)


def install() -> None:
    """Patch the interpreter's builder once per process (idempotent)."""
    global _installed, _original
    if _installed:
        return
    _installed = True
    import triton.language as tl
    from triton._C.libtriton import interpreter as native
    from triton._C.libtriton import ir
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original = _original = builder.create_atomic_rmw
    u16 = np.dtype(np.uint16)

    def load(addrs: np.ndarray) -> np.ndarray:
        return native.load(addrs, np.ones(addrs.shape, dtype=bool), np.zeros(addrs.shape, dtype=u16), u16)

    def store(addrs: np.ndarray, bits: np.ndarray) -> None:
        native.store(addrs, bits, np.ones(addrs.shape, dtype=bool))

    def create_atomic_rmw(self: Any, rmw_op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        if rmw_op == ir.ATOMIC_OP.FADD and val.dtype.scalar == tl.bfloat16:
            return interp.TensorHandle(bf16_add(ptr.data, val.data, mask.data, load, store), tl.bfloat16)
        return original(self, rmw_op, ptr, val, mask, sem, scope)

    builder.create_atomic_rmw = create_atomic_rmw
