"""Attention forward for Hopper (sm_90) in Gluon: stage 3's forward where it applies.

Triton's compiler schedules one stream of instructions for all warps of a program; the fastest Hopper
attention kernels instead give warps different jobs. Gluon states that schedule directly:

  one load warp         TMA copies of Q (once per tile) and of K and V blocks into a ring of STAGES
                        shared-memory slots; it refills a slot once both consumers have released it.
  two consumer groups   four warps each (one warpgroup), 64 query rows each, so a 128-row tile shares
                        every K and V block between them. Each keeps Q in registers, issues Q Kᵀ on the
                        tensor cores (wgmma), runs the online softmax (fp32 row max and sum, base-2
                        exponentials), keeps P in registers as the A operand of P V, and rescales the
                        fp32 accumulator. The next block's Q Kᵀ is issued together with this block's
                        P V, so the tensor cores work while the softmax runs; the two groups drift
                        apart and fill each other's gaps as well.

Registers are re-balanced per group (setmaxnreg): 240 per thread for a consumer, 24 for the load warp.
Blocks strictly below the diagonal (causal) or fully inside the sequence take no mask; only the
diagonal and the sequence tail are masked. The first group's rows end 64 keys before the diagonal block does,
so it takes that block at half width (64 keys): 1.3–2.9 % faster causal at head_dim 64 by both timers, no slower
at 128 (results/h100/attention_fwd_half_diagonal_*). One persistent program per SM processes the tiles, so its next
Q and K/V loads overlap its previous tile's epilogue; ``schedule`` names how they share them.
Causal tiles range from one key block to all of them, so any fixed share leaves programs unevenly loaded:
there the load warp claims the next tile from an atomic counter (heaviest query block of each head first,
head by head, which keeps the programs running together on a few heads' K and V in L2) and hands its id to
the consumers through shared memory: 2–6 % faster than one program per tile at every causal shape.
Non-causal tiles are all of one length, and round-robin leaves the last round part empty (2048 tiles on 132
SMs: 15.5 rounds take 16). The split schedule deals out whole tiles round-robin but for the last P to 2P − 1,
whose (tile, key block) pairs go to the programs in equal runs of at least one tile; a tile two programs
share is published (unnormalized sums, row maxima and sums) by the one holding its last key blocks, first
thing in its run, and merged by the one holding its first, last thing in its run: at head_dim 64, 0.3–2.1 %
faster by do_bench and 2.3–2.8 % through ptt bench. Measured on an H100: benchmarks/attention_fwd_schedules.py,
results/h100/attention_fwd_schedules.json; docs/performance.md for head_dim 128.

The forward writes the same base-2 row log-sum-exp as the Triton kernels, so stage 3's backward is
unchanged. Used when ``usable`` says so: a CUDA device of compute capability 9.0 (wgmma is sm_90a
only), contiguous fp16/bf16 inputs with 16-byte aligned storage, head_dim 64 or 128, and enough
128-row tiles to fill the GPU; everything else takes the Triton kernels of ``attention.py``.
Measured against SDPA's own pick (cuDNN) and the Triton stage 3: benchmarks/attention_hopper.py.
"""

from __future__ import annotations

import math

import torch

from reference_kernels._common import cdiv, interpreting, sm_count
from reference_kernels._gluon import (
    GL_DTYPES,
    TensorDescriptor,
    fence_async_shared,
    gl,
    gluon,
    mbarrier,
    shared_layout,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

HEAD_DIMS = (64, 128)
# Query rows per tile: two consumer warpgroups of 64. The kernels below spell out 128 and 64 (the wgmma row
# granularity of one warpgroup is 64); this constant sizes the grid.
BLOCK_M = 128
BLOCK_N = 128  # keys per block
# K/V ring depth by head dim: as many slots as shared memory holds. At 128: 2·64·128 (Q) + 3·2·128·128 (K, V)
# halves = 224 KiB; at 64: 2·64·64 + 6·2·128·64 = 208 KiB. Six slots instead of three at head_dim 64 let the load
# warp run further into the next tile: 0.7–2.2 % faster causal by do_bench, even within 0.7 % by ptt bench (H100,
# results/h100/attention_fwd_stages*).
STAGES = {64: 6, 128: 3}
_CONSUMER_REGS = 240
_LOADER_REGS = 24
# Registers per thread the compiler plans the whole kernel with: 12 warps (two consumer warpgroups and
# the load warp's warpgroup) × 32 threads × 168 ≤ 65536, the register file of one SM.
_MAXNREG = 168

if gluon is not None:

    @gluon.jit
    def _kv_blocks(start_m, N_CTX, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        """Key blocks [0, n_full) need no mask; [n_full, n_total) do (the diagonal, the sequence tail)."""
        if CAUSAL:
            n_full = (start_m * 128) // BLOCK_N
            n_total = gl.cdiv(gl.minimum((start_m + 1) * 128, N_CTX), BLOCK_N)
        else:
            n_full = N_CTX // BLOCK_N
            n_total = gl.cdiv(N_CTX, BLOCK_N)
        return n_full, n_total

    @gluon.jit
    def _tile(t, n_m, CAUSAL: gl.constexpr):
        """Tile t → (query block, batch·head). Causal: the heaviest query block of each head first."""
        bh = t // n_m
        if CAUSAL:
            start_m = n_m - 1 - t % n_m
        else:
            start_m = t % n_m
        return start_m, bh

    @gluon.jit
    def _softmax_step(qk, j, n_full, m_i, l_i, offs_m, qk_scale, N_CTX, dtype: gl.constexpr,
                      BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, s_layout: gl.constexpr,
                      p_layout: gl.constexpr, o_layout: gl.constexpr):  # fmt: skip
        """Online softmax of key block j: P (as the next wgmma's A operand), the accumulator's rescale
        factor, and the new row max and sum."""
        if j >= n_full:
            offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
            keep = offs_n[None, :] < N_CTX
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            qk = gl.where(keep, qk, float("-inf"))
        # Every row sees key 0 in block 0, so m_new is finite from the first block on.
        m_new = gl.maximum(m_i, gl.max(qk, 1) * qk_scale)
        p = gl.exp2(qk * qk_scale - m_new[:, None])
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        return p_op, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), m_new, l_i

    @gluon.jit
    def _write_tile(acc, m_i, l_i, o_ptr, lse_ptr, bh, first, offs_m, N_CTX, HEAD_DIM: gl.constexpr,
                    STORE_LSE: gl.constexpr, o_layout: gl.constexpr):  # fmt: skip
        """One group's 64 rows of O (and their base-2 log-sum-exp) from the unnormalized sums."""
        out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
        rows = first + gl.arange(0, 64, gl.SliceLayout(1, o_layout))
        cols = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, o_layout))
        base = bh.to(gl.int64) * N_CTX
        o_ptrs = o_ptr + (base + rows)[:, None] * HEAD_DIM + cols[None, :]
        gl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < N_CTX)
        if STORE_LSE:
            gl.store(lse_ptr + base + offs_m, m_i + gl.log2(l_i), mask=offs_m < N_CTX)

    @gluon.jit
    def _segment(t_rr, n_whole, u, hi, n_blk, pid, n_prog):
        """The split schedule's next piece of work for program ``pid``: its tile, key blocks [j_lo, j_hi), part
        (0 whole, 1 the tile's end (published), 2 its start (merged)) and the boundary it shares with a
        neighbour; then the next round-robin tile ``t_rr`` and unit ``u``. Whole tiles first (``t_rr`` below
        ``n_whole``), then the units [u, hi) (tile·n_blk + key block)."""
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
    def _share(N_CTX, BH, BLOCK_N: gl.constexpr):
        """The split schedule: tiles [0, n_whole) go round-robin as whole tiles (programs running together
        share heads' K and V in L2); the last P to 2P − 1 tiles are cut into units (tile·n_blk + key block)
        and each program takes an equal run [lo, hi) of them, at least one tile's worth, so a tile is shared by
        two programs at most. Needs P ≤ tiles (``forward`` sees to it)."""
        n_blk = gl.cdiv(N_CTX, BLOCK_N)
        n_tiles = gl.cdiv(N_CTX, 128) * BH
        pid = gl.program_id(0)
        n_prog = gl.num_programs(0)
        n_whole = (n_tiles // n_prog - 1) * n_prog
        first = n_whole * n_blk
        total = (n_tiles - n_whole) * n_blk
        lo = first + (pid.to(gl.int64) * total // n_prog).to(gl.int32)
        hi = first + ((pid + 1).to(gl.int64) * total // n_prog).to(gl.int32)
        return n_whole, lo, hi, n_blk, pid

    @gluon.jit
    def _last_pv(p_op, acc, v_bufs, bars, pos, STAGES: gl.constexpr):
        """The tile's last P V, with the block at ring position ``pos``; then its slot goes back."""
        v_ready, kv_free = bars[3], bars[4]
        last = pos % STAGES
        mbarrier.wait(v_ready.index(last), (pos // STAGES) & 1)
        v_smem = v_bufs.index(last)
        acc = warpgroup_mma(p_op, v_smem, acc, is_async=True)
        acc, _ = warpgroup_mma_wait(0, deps=(acc, v_smem))
        mbarrier.arrive(kv_free.index(last), count=1)
        return acc

    @gluon.jit
    def _half_diagonal(q, p_op, acc, m_i, l_i, offs_m, k_bufs, v_bufs, bars, kv, j, n_full, qk_scale, N_CTX,
                       STAGES: gl.constexpr, s_layout: gl.constexpr,
                       p_layout: gl.constexpr, o_layout: gl.constexpr):  # fmt: skip
        """The first group's causal diagonal block j, its first 64 keys only (the rest lie past every one of its
        rows), with block j-1's P V issued beside its Q Kᵀ; then the tile's last P V, 64 keys deep."""
        k_ready, v_ready, kv_free = bars[2], bars[3], bars[4]
        h_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16]
        )
        qh_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=h_layout, k_width=2)
        row_h: gl.constexpr = gl.SliceLayout(1, h_layout)
        dtype: gl.constexpr = k_bufs.dtype
        s = (kv + j) % STAGES
        mbarrier.wait(k_ready.index(s), ((kv + j) // STAGES) & 1)
        k_half = k_bufs.index(s).slice(0, 64, dim=0)
        zero = gl.zeros([64, 64], gl.float32, h_layout)
        qk = warpgroup_mma(gl.convert_layout(q, qh_layout), k_half.permute((1, 0)), zero, use_acc=False,
                           is_async=True)  # fmt: skip
        prev = (kv + j - 1) % STAGES
        mbarrier.wait(v_ready.index(prev), ((kv + j - 1) // STAGES) & 1)
        v_smem = v_bufs.index(prev)
        acc = warpgroup_mma(p_op, v_smem, acc, is_async=True)
        qk, _ = warpgroup_mma_wait(1, deps=(qk, k_half))
        # Key block 2j of 64 is the first half of block j of 128 (the mask's key offsets).
        p_half, alpha, m_h, l_h = _softmax_step(
            qk, 2 * j, n_full, gl.convert_layout(m_i, row_h), gl.convert_layout(l_i, row_h),
            gl.convert_layout(offs_m, row_h), qk_scale, N_CTX, dtype, 64, True, h_layout, p_layout, o_layout,
        )  # fmt: skip
        acc, _ = warpgroup_mma_wait(0, deps=(acc, v_smem))
        mbarrier.arrive(kv_free.index(prev), count=1)
        acc = acc * alpha[:, None]
        v_half = v_bufs.index(s).slice(0, 64, dim=0)
        mbarrier.wait(v_ready.index(s), ((kv + j) // STAGES) & 1)
        acc = warpgroup_mma(p_half, v_half, acc, is_async=True)
        acc, _ = warpgroup_mma_wait(0, deps=(acc, v_half))
        mbarrier.arrive(kv_free.index(s), count=1)
        row: gl.constexpr = gl.SliceLayout(1, s_layout)
        return acc, gl.convert_layout(m_h, row), gl.convert_layout(l_h, row)

    @gluon.jit
    def _consumer_tile(q_bufs, k_bufs, v_bufs, bars, o_ptr, lse_ptr, qk_scale, N_CTX, t, n_m, kv, tiles_done,
                       seg, split, WHICH: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
                       STAGES: gl.constexpr, CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr,
                       STREAM: gl.constexpr):  # fmt: skip
        """One warpgroup, one tile: rows [start_m·128 + WHICH·64, +64). ``kv`` counts the K/V blocks this
        program consumed before (the ring position), ``tiles_done`` its tiles (the Q slot's phase).
        STREAM: only key blocks [j_lo, j_hi) of ``seg`` = (j_lo, j_hi, part, boundary); ``split`` = (partial
        sums, their row maxima and sums, flags) for a tile two programs share: part 1 publishes this share for
        the program before, part 2 waits for the one after and merges it."""
        q_ready, q_free, k_ready, v_ready, kv_free = bars
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        q_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
        dtype: gl.constexpr = k_bufs.dtype
        start_m, bh = _tile(t, n_m, CAUSAL)
        first = start_m * 128 + WHICH * 64
        offs_m = first + gl.arange(0, 64, gl.SliceLayout(1, s_layout))
        m_i = gl.full([64], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([64], gl.float32, gl.SliceLayout(1, s_layout))
        acc = gl.zeros([64, HEAD_DIM], gl.float32, o_layout)
        n_full, n_total = _kv_blocks(start_m, N_CTX, BLOCK_N, CAUSAL)
        if STREAM:
            j_lo, n_total, part, boundary = seg
        else:
            j_lo = 0

        mbarrier.wait(q_ready.index(WHICH), tiles_done & 1)
        q = q_bufs.index(WHICH).load(q_layout)
        # The load warp's next TMA write of this slot must come after this (generic-proxy) read.
        fence_async_shared()
        mbarrier.arrive(q_free.index(WHICH), count=1)

        # ``kv`` is the ring position of block j_lo; block j sits at kv + j - j_lo.
        kv -= j_lo
        s = (kv + j_lo) % STAGES
        mbarrier.wait(k_ready.index(s), ((kv + j_lo) // STAGES) & 1)
        k_smem = k_bufs.index(s)
        zero = gl.zeros([64, BLOCK_N], gl.float32, s_layout)
        qk = warpgroup_mma(q, k_smem.permute((1, 0)), zero, use_acc=False, is_async=True)
        qk, _ = warpgroup_mma_wait(0, deps=(qk, k_smem))
        # The accumulator is still zero: the first block's rescale factor is not needed.
        p_op, _alpha0, m_i, l_i = _softmax_step(
            qk, j_lo, n_full, m_i, l_i, offs_m, qk_scale, N_CTX, dtype, BLOCK_N, CAUSAL, s_layout, p_layout,
            o_layout,
        )  # fmt: skip
        # Causal, the first group's rows end 64 keys before the diagonal block does: its last 64 keys are all
        # masked, so that block is taken at half width (``_half_diagonal``), unless it is the tile's only one.
        HALF: gl.constexpr = CAUSAL and WHICH == 0 and not STREAM
        n_loop = n_total
        if HALF:
            n_loop = gl.maximum(n_total - 1, j_lo + 1)
        for j in range(j_lo + 1, n_loop):
            # Block j's Q Kᵀ and block j-1's P V go to the tensor cores together; the wait for one
            # outstanding group returns when Q Kᵀ is done, and its softmax runs while P V still does.
            s = (kv + j) % STAGES
            mbarrier.wait(k_ready.index(s), ((kv + j) // STAGES) & 1)
            k_smem = k_bufs.index(s)
            qk = warpgroup_mma(q, k_smem.permute((1, 0)), zero, use_acc=False, is_async=True)
            prev = (kv + j - 1) % STAGES
            mbarrier.wait(v_ready.index(prev), ((kv + j - 1) // STAGES) & 1)
            v_smem = v_bufs.index(prev)
            acc = warpgroup_mma(p_op, v_smem, acc, is_async=True)
            qk, _ = warpgroup_mma_wait(1, deps=(qk, k_smem))
            p_op, alpha_j, m_i, l_i = _softmax_step(
                qk, j, n_full, m_i, l_i, offs_m, qk_scale, N_CTX, dtype, BLOCK_N, CAUSAL,
                s_layout, p_layout, o_layout,
            )  # fmt: skip
            acc, _ = warpgroup_mma_wait(0, deps=(acc, v_smem))
            mbarrier.arrive(kv_free.index(prev), count=1)
            acc = acc * alpha_j[:, None]
        if HALF:
            if n_loop < n_total:
                acc, m_i, l_i = _half_diagonal(
                    q, p_op, acc, m_i, l_i, offs_m, k_bufs, v_bufs, bars, kv, n_total - 1, n_full, qk_scale, N_CTX,
                    STAGES, s_layout, p_layout, o_layout,
                )  # fmt: skip
            else:
                acc = _last_pv(p_op, acc, v_bufs, bars, kv + n_total - 1, STAGES)
        else:
            acc = _last_pv(p_op, acc, v_bufs, bars, kv + n_total - 1, STAGES)
        kv += n_total
        tiles_done += 1

        if STREAM:
            ws_acc, ws_ml, flags = split
            # This group's share of a tile two programs split: 64 rows of fp32 sums, then their maxima and sums.
            slot = boundary * 2 + WHICH
            cols = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, o_layout))
            acc_ptrs = ws_acc + (slot * 64 + gl.arange(0, 64, gl.SliceLayout(1, o_layout)))[:, None] * HEAD_DIM
            acc_ptrs = acc_ptrs + cols[None, :]
            ml_ptrs = ws_ml + slot * 128 + gl.arange(0, 64, gl.SliceLayout(1, s_layout))
            lane: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
            flag_ptrs = flags + slot + gl.arange(0, 128, lane) * 0
            if part == 1:
                # The tile's last key blocks, at the start of this program's share: publish them. Every thread
                # releases its own stores, so the flag reaches 128 once all of them are visible.
                gl.store(acc_ptrs, acc)
                gl.store(ml_ptrs, m_i)
                gl.store(ml_ptrs + 64, l_i)
                gl.atomic_add(flag_ptrs, gl.full([128], 1, gl.int32, lane), sem="release", scope="gpu")
            else:
                if part == 2:
                    # The tile's first key blocks, at the end of this program's share: the next program
                    # published the rest at the start of its own, so this wait is short.
                    # Poll with plain loads (one request per warp: atomics on one address from every thread
                    # would queue at L2 behind each other and slow the very program being waited for), then
                    # one acquiring read per thread, which orders the loads of the partial sums after it.
                    seen = gl.load(flag_ptrs, volatile=True)
                    while gl.min(seen, 0) < 128:
                        seen = gl.load(flag_ptrs, volatile=True)
                    gl.atomic_add(flag_ptrs, gl.zeros([128], gl.int32, lane), sem="acquire", scope="gpu")
                    m_o = gl.load(ml_ptrs)
                    l_o = gl.load(ml_ptrs + 64)
                    m_new = gl.maximum(m_i, m_o)
                    a_i = gl.exp2(m_i - m_new)
                    a_o = gl.exp2(m_o - m_new)
                    l_i = l_i * a_i + l_o * a_o
                    m_i = m_new
                    a_i = gl.convert_layout(a_i, gl.SliceLayout(1, o_layout))
                    a_o = gl.convert_layout(a_o, gl.SliceLayout(1, o_layout))
                    acc = acc * a_i[:, None] + gl.load(acc_ptrs) * a_o[:, None]
                _write_tile(acc, m_i, l_i, o_ptr, lse_ptr, bh, first, offs_m, N_CTX, HEAD_DIM, STORE_LSE, o_layout)
        else:
            _write_tile(acc, m_i, l_i, o_ptr, lse_ptr, bh, first, offs_m, N_CTX, HEAD_DIM, STORE_LSE, o_layout)
        return kv, tiles_done

    @gluon.jit
    def _take_tile(tile_bufs, tile_bars, k):
        """A consumer's k-th tile, as the load warp published it (slot k mod 2)."""
        tile_ready, tile_free = tile_bars
        slot = k % 2
        mbarrier.wait(tile_ready.index(slot), (k // 2) & 1)
        ids = tile_bufs.index(slot).load(gl.BlockedLayout([1], [32], [4], [0]))
        # Every lane holds the same id; max makes it one value.
        t = gl.max(ids, 0)
        mbarrier.arrive(tile_free.index(slot), count=1)
        return t

    @gluon.jit
    def _publish_tile(tile_bufs, tile_bars, k, t):
        """The load warp: tile ``t`` is the program's k-th; a value past the last tile ends the program."""
        tile_ready, tile_free = tile_bars
        slot = k % 2
        # Both consumers have read the id this slot held two tiles ago.
        mbarrier.wait(tile_free.index(slot), ((k // 2) & 1) ^ 1)
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        tile_bufs.index(slot).store(gl.zeros([32], gl.int32, layout) + t)
        mbarrier.arrive(tile_ready.index(slot), count=1)

    @gluon.jit
    def _claim_tile(tile_ctr):
        """The next unclaimed tile of the launch: one atomic increment, by lane 0 of the load warp."""
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        lane = gl.arange(0, 32, layout)
        old = gl.atomic_add(tile_ctr + lane * 0, gl.full([32], 1, gl.int32, layout), mask=lane == 0)
        return gl.max(gl.where(lane == 0, old, 0), 0)

    @gluon.jit
    def _consumer(q_bufs, k_bufs, v_bufs, bars, tile_bufs, tile_bars, split, o_ptr, lse_ptr, qk_scale, N_CTX, BH,
                  WHICH: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                  CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PERSISTENT: gl.constexpr,
                  DYNAMIC: gl.constexpr, STREAM: gl.constexpr):  # fmt: skip
        n_m = gl.cdiv(N_CTX, 128)
        if STREAM:
            kv = 0
            tiles_done = 0
            n_whole, lo, hi, n_blk, pid = _share(N_CTX, BH, BLOCK_N)
            t_rr = pid
            u = lo
            while (t_rr < n_whole) | (u < hi):
                t, seg, t_rr, u = _segment(t_rr, n_whole, u, hi, n_blk, pid, gl.num_programs(0))
                kv, tiles_done = _consumer_tile(
                    q_bufs, k_bufs, v_bufs, bars, o_ptr, lse_ptr, qk_scale, N_CTX, t, n_m, kv, tiles_done, seg,
                    split, WHICH, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, True,
                )  # fmt: skip
        elif DYNAMIC:
            kv = 0
            tiles_done = 0
            t = _take_tile(tile_bufs, tile_bars, 0)
            while t < n_m * BH:
                kv, tiles_done = _consumer_tile(
                    q_bufs, k_bufs, v_bufs, bars, o_ptr, lse_ptr, qk_scale, N_CTX, t, n_m, kv, tiles_done, None,
                    split, WHICH, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, False,
                )  # fmt: skip
                t = _take_tile(tile_bufs, tile_bars, tiles_done)
        elif PERSISTENT:
            kv = 0
            tiles_done = 0
            for t in range(gl.program_id(0), n_m * BH, gl.num_programs(0)):
                kv, tiles_done = _consumer_tile(
                    q_bufs, k_bufs, v_bufs, bars, o_ptr, lse_ptr, qk_scale, N_CTX, t, n_m, kv, tiles_done, None,
                    split, WHICH, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, False,
                )  # fmt: skip
        else:
            # One tile per program: no loop-carried state, fewer live registers.
            _consumer_tile(
                q_bufs, k_bufs, v_bufs, bars, o_ptr, lse_ptr, qk_scale, N_CTX, gl.program_id(0), n_m, 0, 0, None,
                split, WHICH, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, False,
            )  # fmt: skip

    @gluon.jit
    def _loader_tile(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, N_CTX, t, n_m, kv, tiles_done, seg,
                     BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                     STREAM: gl.constexpr):  # fmt: skip
        """The load warp, one tile (STREAM: key blocks [j_lo, j_hi) of ``seg``): the consumers' key blocks, in
        their order."""
        q_ready, q_free, k_ready, v_ready, kv_free = bars
        start_m, bh = _tile(t, n_m, CAUSAL)
        row0 = bh * N_CTX  # first row of this head in the [B·H·S, D] view
        for c in gl.static_range(2):
            mbarrier.wait(q_free.index(c), (tiles_done & 1) ^ 1)
            mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(
                q_desc, [row0 + start_m * 128 + c * 64, 0], q_ready.index(c), q_bufs.index(c)
            )
        _, n_total = _kv_blocks(start_m, N_CTX, BLOCK_N, CAUSAL)
        if STREAM:
            j_lo = seg[0]
            n_total = seg[1]
        else:
            j_lo = 0
        kv -= j_lo  # block j at ring position kv + j
        for j in range(j_lo, n_total):
            s = (kv + j) % STAGES
            # A fresh barrier counts as having completed the phase before its first, so the
            # first STAGES waits pass at once.
            mbarrier.wait(kv_free.index(s), (((kv + j) // STAGES) & 1) ^ 1)
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row0 + j * BLOCK_N, 0], k_ready.index(s), k_bufs.index(s))
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [row0 + j * BLOCK_N, 0], v_ready.index(s), v_bufs.index(s))
        kv += n_total
        tiles_done += 1
        return kv, tiles_done

    @gluon.jit
    def _loader(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, tile_bufs, tile_bars, tile_ctr, N_CTX, BH,
                BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr,
                DYNAMIC: gl.constexpr, STREAM: gl.constexpr):  # fmt: skip
        n_m = gl.cdiv(N_CTX, 128)
        if STREAM:
            kv = 0
            tiles_done = 0
            n_whole, lo, hi, n_blk, pid = _share(N_CTX, BH, BLOCK_N)
            t_rr = pid
            u = lo
            while (t_rr < n_whole) | (u < hi):
                t, seg, t_rr, u = _segment(t_rr, n_whole, u, hi, n_blk, pid, gl.num_programs(0))
                kv, tiles_done = _loader_tile(
                    q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, N_CTX, t, n_m, kv, tiles_done, seg,
                    BLOCK_N, STAGES, CAUSAL, True,
                )  # fmt: skip
        elif DYNAMIC:
            kv = 0
            tiles_done = 0
            t = _claim_tile(tile_ctr)
            _publish_tile(tile_bufs, tile_bars, 0, t)
            while t < n_m * BH:
                kv, tiles_done = _loader_tile(
                    q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, N_CTX, t, n_m, kv, tiles_done, None,
                    BLOCK_N, STAGES, CAUSAL, False,
                )  # fmt: skip
                t = _claim_tile(tile_ctr)
                _publish_tile(tile_bufs, tile_bars, tiles_done, t)
        elif PERSISTENT:
            kv = 0
            tiles_done = 0
            for t in range(gl.program_id(0), n_m * BH, gl.num_programs(0)):
                kv, tiles_done = _loader_tile(
                    q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, N_CTX, t, n_m, kv, tiles_done, None,
                    BLOCK_N, STAGES, CAUSAL, False,
                )  # fmt: skip
        else:
            _loader_tile(
                q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, N_CTX, gl.program_id(0), n_m, 0, 0, None,
                BLOCK_N, STAGES, CAUSAL, False,
            )  # fmt: skip

    @gluon.jit
    def _attn_fwd_hopper(q_desc, k_desc, v_desc, o_ptr, lse_ptr, tile_ctr, ws_acc, ws_ml, flags, qk_scale, N_CTX,
                         BH, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                         CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PERSISTENT: gl.constexpr,
                         DYNAMIC: gl.constexpr, STREAM: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                         LOADER_REGS: gl.constexpr):  # fmt: skip
        dtype: gl.constexpr = q_desc.dtype
        q_bufs = gl.allocate_shared_memory(dtype, [2, 64, HEAD_DIM], q_desc.layout)
        k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        q_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for c in gl.static_range(2):
            mbarrier.init(q_ready.index(c), count=1)
            mbarrier.init(q_free.index(c), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(kv_free.index(i), count=2)  # both consumers release a slot
        bars = (q_ready, q_free, k_ready, v_ready, kv_free)
        # DYNAMIC: tile ids from the load warp to the consumers, two slots.
        tile_bufs = gl.allocate_shared_memory(gl.int32, [2, 32], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        tile_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        tile_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for c in gl.static_range(2):
            mbarrier.init(tile_ready.index(c), count=1)
            mbarrier.init(tile_free.index(c), count=2)
        tile_bars = (tile_ready, tile_free)
        split = (ws_acc, ws_ml, flags)
        gl.warp_specialize(
            [
                (_consumer, (q_bufs, k_bufs, v_bufs, bars, tile_bufs, tile_bars, split, o_ptr, lse_ptr, qk_scale,
                             N_CTX, BH, 0, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, PERSISTENT, DYNAMIC,
                             STREAM)),
                (_consumer, (q_bufs, k_bufs, v_bufs, bars, tile_bufs, tile_bars, split, o_ptr, lse_ptr, qk_scale,
                             N_CTX, BH, 1, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, PERSISTENT, DYNAMIC,
                             STREAM)),
                (_loader, (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, tile_bufs, tile_bars, tile_ctr,
                           N_CTX, BH, BLOCK_N, STAGES, CAUSAL, PERSISTENT, DYNAMIC, STREAM)),
            ],
            [4, 1],
            [CONSUMER_REGS, LOADER_REGS],
        )  # fmt: skip


def tiles(q: torch.Tensor) -> int:
    B, H, S, _ = q.shape
    return cdiv(S, BLOCK_M) * B * H


def applies(
    capability: tuple[int, int], dtype: torch.dtype, head_dim: int, aligned: bool, n_tiles: int, sms: int
) -> bool:
    """The rule behind ``usable``, on plain facts: an sm_90 GPU, fp16/bf16, head_dim 64 or 128,
    contiguous 16-byte aligned inputs, and at least one 128-row tile per SM."""
    return (
        gluon is not None
        and capability == (9, 0)
        and dtype in GL_DTYPES
        and head_dim in HEAD_DIMS
        and aligned
        and n_tiles >= sms
    )


def usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether ``forward`` serves these inputs (see ``applies``); never under the interpreter."""
    if gluon is None or interpreting() or q.device.type != "cuda":
        return False
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    aligned = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v))
    return applies(torch.cuda.get_device_capability(index), q.dtype, q.shape[-1], aligned, tiles(q), sm_count(index))


SCHEDULES = ("per-tile", "round-robin", "claimed", "split")


def schedule(causal: bool, name: str | None = None, head_dim: int = 64) -> str:
    """How programs share the tiles, ``name`` or the measured choice (None):

    - ``per-tile``: one program per tile;
    - ``round-robin``: one persistent program per SM, tile i to program i mod P;
    - ``claimed``: one per SM, each claiming its next tile at run time from an atomic counter, heaviest first;
    - ``split``: one per SM, round-robin but for the last P to 2P − 1 tiles, whose (tile, key block) pairs go
      to the programs in equal runs; a tile two programs share is merged by the one that holds its first key
      blocks (non-causal only).

    Causal tiles differ in length: ``claimed``. Non-causal ones are equal, and whole tiles leave the last round
    part empty: ``split`` at head_dim 64, faster by both timers; at 128 do_bench put it 0.4–2.6 % ahead and ptt
    bench up to 8 % behind (docs/performance.md), so ``round-robin`` stays."""
    if name is None:
        return "claimed" if causal else "split" if head_dim == 64 else "round-robin"
    if name not in SCHEDULES:
        raise ValueError(f"attention_hopper: schedule {name!r} is not one of {', '.join(SCHEDULES)}")
    if name == "split" and causal:
        raise ValueError("attention_hopper: the split schedule is for non-causal attention; causal takes 'claimed'")
    return name


def programs(q: torch.Tensor, causal: bool, sms: int, name: str | None = None) -> int:
    """Grid size: one program per tile (``per-tile``), else one persistent program per SM (at most one per tile)."""
    if schedule(causal, name, q.shape[-1]) == "per-tile":
        return tiles(q)
    return min(sms, tiles(q))


def launch_args(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor | None,
    causal: bool,
    name: str | None = None,
    n_programs: int = 1,
    stages: int | None = None,
) -> tuple:
    """The kernel's arguments (descriptors over the [B·H·S, D] views; a zeroed tile counter for ``claimed``; for
    ``split`` the partial sums of shared tiles and zeroed flags, sized for ``n_programs``) and its compile-time
    flags; ``stages``: the K/V ring's depth (default: ``STAGES`` of the head dim)."""
    B, H, S, D = q.shape
    name = schedule(causal, name, q.shape[-1])
    q_layout = shared_layout(q.dtype, 64, D)
    kv_layout = shared_layout(q.dtype, BLOCK_N, D)
    q_desc = TensorDescriptor.from_tensor(q.view(B * H * S, D), [64, D], q_layout)
    k_desc = TensorDescriptor.from_tensor(k.view(B * H * S, D), [BLOCK_N, D], kv_layout)
    v_desc = TensorDescriptor.from_tensor(v.view(B * H * S, D), [BLOCK_N, D], kv_layout)
    qk_scale = math.log2(math.e) / math.sqrt(D)  # base-2 exponentials, as in attention.py
    unused = lse if lse is not None else o
    tile_ctr = torch.zeros(1, dtype=torch.int32, device=q.device) if name == "claimed" else unused
    if name == "split":
        # Two slots (one per consumer group) per boundary between neighbouring programs, 1 … n_programs − 1.
        slots = 2 * (n_programs + 1)
        ws_acc = torch.empty((slots * 64, D), dtype=torch.float32, device=q.device)
        ws_ml = torch.empty((slots, 128), dtype=torch.float32, device=q.device)
        flags = torch.zeros(slots, dtype=torch.int32, device=q.device)
    else:
        ws_acc = ws_ml = flags = unused
    return (
        q_desc, k_desc, v_desc, o, o if lse is None else lse, tile_ctr, ws_acc, ws_ml, flags, qk_scale, S, B * H,
        D, BLOCK_N, stages or STAGES[D], causal, lse is not None, name == "round-robin", name == "claimed", name == "split",
        _CONSUMER_REGS, _LOADER_REGS,
    )  # fmt: skip


def forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    o: torch.Tensor,
    lse: torch.Tensor | None,
    n_programs: int | None = None,
    name: str | None = None,
) -> None:
    """Write softmax(q kᵀ/√d) v into ``o`` (contiguous, q's shape) and, given ``lse`` ([B·H, S] fp32),
    the base-2 row log-sum-exp. ``name``: the schedule (see ``schedule``; None: the measured choice).
    ``n_programs`` sets a persistent grid (tests give programs several tiles with it); ``per-tile`` refuses it,
    more programs than tiles get one tile each, and ``split`` runs at most one program per SM."""
    name = schedule(causal, name, q.shape[-1])
    if n_programs is not None and name == "per-tile":
        raise ValueError("attention_hopper.forward: the per-tile schedule runs one program per tile; n_programs "
                         "needs a persistent schedule (round-robin, claimed or split)")  # fmt: skip
    if n_programs is not None and n_programs < 1:
        raise ValueError(f"attention_hopper.forward: n_programs must be at least 1, not {n_programs}")
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    sms = sm_count(index)
    n = min(n_programs, tiles(q)) if n_programs is not None else programs(q, causal, sms, name)
    if name == "split":
        # A program may wait for its neighbour's share of a tile: every program must be resident at once.
        n = min(n, sms)
    args = launch_args(q, k, v, o, lse, causal, name, n)
    _attn_fwd_hopper[(n,)](*args, num_warps=4, maxnreg=_MAXNREG)
