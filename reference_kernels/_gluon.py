"""What the Gluon kernels for Hopper share: Triton's Gluon names (all None on a Triton without Gluon, where the
Triton kernels serve everywhere), the input dtypes they take, and their TMA blocks' shared-memory layouts."""

from __future__ import annotations

import functools

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - a Triton without Gluon
    gluon = gl = fence_async_shared = mbarrier = tma = warpgroup_mma = warpgroup_mma_wait = TensorDescriptor = None

# The input dtypes the kernels serve, as Gluon names them.
GL_DTYPES = {} if gluon is None else {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


@functools.cache
def shared_layout(dtype: torch.dtype, rows: int, cols: int):
    """The NVMMA shared-memory layout of a [rows, cols] TMA block of ``dtype`` (fp16, bf16 or fp32), cached:
    computing one costs about 14 µs of host time per launch."""
    gl_dtype = gl.float32 if dtype == torch.float32 else GL_DTYPES[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)


# The split schedule of the persistent kernels (attention's forward, the matmul): whole tiles go round-robin,
# then the last P to 2P − 1 tiles (P programs) are cut into units (tile · n_blk + block of the reduction) and
# each program takes an equal run of them, at least one tile's worth, so a tile is shared by two neighbouring
# programs at most. The run's first piece may be a tile's end, which the program publishes (partial sums and a
# flag) for its predecessor; its last piece may be a tile's start, whose owner waits for the successor's
# published end and merges it. Waits only point to the next program, which starts at the same time or later and
# publishes before anything else of its run, so every program must be resident at once (grid ≤ SMs).
if gluon is not None:

    @gluon.jit
    def split_share(n_tiles, n_blk):
        """The split schedule of this program: (n_whole, lo, hi, pid): tiles [0, n_whole) go round-robin
        whole, then units [lo, hi). Needs P ≤ n_tiles."""
        pid = gl.program_id(0)
        n_prog = gl.num_programs(0)
        n_whole = (n_tiles // n_prog - 1) * n_prog
        first = n_whole * n_blk
        total = (n_tiles - n_whole) * n_blk
        lo = first + (pid.to(gl.int64) * total // n_prog).to(gl.int32)
        hi = first + ((pid + 1).to(gl.int64) * total // n_prog).to(gl.int32)
        return n_whole, lo, hi, pid

    @gluon.jit
    def split_segment(t_rr, n_whole, u, hi, n_blk, pid, n_prog):
        """The program's next piece of work: its tile, blocks [j_lo, j_hi), part (0 whole, 1 the tile's end
        (published), 2 its start (merged)) and the boundary it shares with a neighbour (the index of the
        program that publishes); then the next round-robin tile ``t_rr`` and unit ``u``. Whole tiles first
        (``t_rr`` below ``n_whole``), then the units [u, hi)."""
        whole = (t_rr < n_whole).to(gl.int32)
        t_u = u // n_blk
        lo_u = u - t_u * n_blk
        hi_u = gl.minimum(n_blk, lo_u + hi - u)
        tail = (lo_u > 0).to(gl.int32)
        head = (hi_u < n_blk).to(gl.int32)
        t = whole * t_rr + (1 - whole) * t_u
        j_lo = (1 - whole) * lo_u
        j_hi = whole * n_blk + (1 - whole) * hi_u
        part = (1 - whole) * (tail + 2 * head)
        seg = (j_lo, j_hi, part, pid + head)
        return t, seg, t_rr + whole * n_prog, u + (1 - whole) * (hi_u - lo_u)

    @gluon.jit
    def split_flag_pointers(flags, slot):
        """The flag of ``slot``, once per thread of a warpgroup (thread i holds element i)."""
        lane: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        return flags + slot + gl.arange(0, 128, lane) * 0

    @gluon.jit
    def split_publish(flags, slot):
        """After this warpgroup's partial sums are stored: every thread releases its own stores, so the flag
        reaches 128 once all of them are visible."""
        lane: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        gl.atomic_add(split_flag_pointers(flags, slot), gl.full([128], 1, gl.int32, lane), sem="release", scope="gpu")

    @gluon.jit
    def split_wait(flags, slot):
        """Before this warpgroup reads the partial sums published under ``slot``: wait for the flag to reach
        128, then give the flag back its zero, each thread by an acquiring decrement that orders its loads
        after it (so flags kept between launches start at zero)."""
        lane: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        flag_ptrs = split_flag_pointers(flags, slot)
        # Poll with plain loads (one request per warp: atomics on one address from every thread would queue at
        # L2 behind each other and slow the very program being waited for). The minimum is taken over the
        # whole warpgroup, so every thread has seen 128 before any thread decrements.
        seen = gl.load(flag_ptrs, volatile=True)
        while gl.min(seen, 0) < 128:
            seen = gl.load(flag_ptrs, volatile=True)
        gl.atomic_add(flag_ptrs, gl.full([128], -1, gl.int32, lane), sem="acquire", scope="gpu")
else:  # pragma: no cover - a Triton without Gluon
    split_share = split_segment = split_flag_pointers = split_publish = split_wait = None
