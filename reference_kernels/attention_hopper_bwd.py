"""Attention backward for Hopper (sm_90) in Gluon: stage 3's backward where it applies.

One pass over the (key block, query block) pairs, FlashAttention-2 order with Hopper's warp specialization.
A program owns 128 keys of one head and streams every query block of 64 that sees them:

  one load warp         K and V of the program's keys once, then Q and dO blocks into a ring of STAGES
                        shared-memory slots, refilled once both consumers have released a slot. Each block's
                        row log-sum-exp and delta come with it (a [64] TMA copy each), so no consumer waits
                        on a global load inside the loop: 7–10 % off the main kernel on an H100
                        (results/h100/attention_bwd_stats_smem.json).
  two consumer groups   one warpgroup each, 64 of the keys each. Per query block a group issues
                        Sᵀ = K Qᵀ and dPᵀ = V dOᵀ together on the tensor cores (wgmma), rebuilds
                        Pᵀ = exp2(Sᵀ·scale − lse) from the forward's base-2 row log-sum-exp while dPᵀ
                        runs, then issues dV += Pᵀ dO and dK += dSᵀ Q with dSᵀ = Pᵀ ∘ (dPᵀ − delta),
                        both A operands in registers. dSᵀ also goes to shared memory, where the two
                        groups' halves make the 128 keys of dQ = dS K.

Every key block adds a share to a query block's dQ, so dQ is summed in fp32 in global memory by TMA
reduce-adds (``cp.reduce.async.bulk.tensor``) over all 128 keys of the program, which needs both groups'
dSᵀ. The buffer is zeroed by stage 3's delta pass as it reads O and dO (0.2–0.9 % off the whole backward
against a fill of its own on an H200, results/h200/attention_bwd_passes.json and _fp16.json). The sums are unscaled and a pass
after the kernel scales and casts them, so the stretch between a
block's last wgmma and its reduce-add (tensor cores idle for the group) carries no multiplies, and the
non-causal wrap around the query blocks is a compare instead of an integer division: 419 instructions per
block and group where there were 467 at head_dim 128. On an H100 (results/h100/attention_bwd_short_tail.json,
three same-run A/Bs) the non-causal head_dim-128 backward took 0.8–3.6 % less time in five readings of six
(0.9 % more in one); causal and head_dim 64 moved within ±2.4 % either way, the spread of those runs.

``defer`` picks when a group issues its dQ: for the same block (the groups run in step), or one block later
(a group waits only for the other's dSᵀ of the block before, so the two drift apart and fill each other's gaps
on the tensor cores; a third dSᵀ buffer). ``alternate`` picks who (deferred only): each group half of the
head-dim columns of every block, or the groups taking turns at the whole dQ of a block (block b by group
b mod 2, the program's last by group 0). ``kv_registers`` keeps the group's K and V in registers as the A
operands of Sᵀ and dPᵀ.

Why, as an estimate: shared memory serves about 128 bytes per clock per SM, and at head_dim 64 the tensor
cores' operand reads alone come close to that. Per group and block, Sᵀ and dPᵀ read 16 KiB each with
K and V in shared memory, dQ halves read 24 KiB for 64·32·128 products. Taking turns makes dQ 64 columns wide
(32 KiB every other block) and K and V in registers halve Sᵀ's and dPᵀ's reads: 72 → 48 KiB per group and
block. Measured on an H100 (benchmarks/attention_bwd_schedules.py, results/h100/attention_bwd_schedules.json),
main kernel alone at head_dim 64: 3384 → 3027 µs at 2×16×8192×64 and 3322 → 3165 µs causal at 4×16×8192×64,
so it is the choice there. At 128 the K and V fragments (32 registers each) and a whole-width dQ (64) do not
fit beside dK and dV: K and V in registers spill and run 1.45× slower, and the groups run in step with halves.

Causal: a key block sees the query blocks from its own on; only the two that straddle the diagonal are
masked. Used when ``usable`` says so (an sm_90 GPU, fp16/bf16, head_dim 64 or 128, a sequence that is a
multiple of 128, contiguous aligned tensors); everything else takes the Triton backward of
``attention.py``. Measured against SDPA's own pick (cuDNN): benchmarks/attention_hopper.py.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from reference_kernels._common import interpreting
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

if gluon is not None:
    from triton._C.libtriton import ir
    from triton.experimental.gluon.language._core import builtin

HEAD_DIMS = (64, 128)
BLOCK_N = 128  # keys per program: two groups of 64
BLOCK_M = 64  # queries per streamed block
_CONSUMER_REGS = 240
_LOADER_REGS = 24
_MAXNREG = 168
# Q/dO ring depth by head dim (shared memory: K, V 2·128·D, ring 2·STAGES·64·D halves, dSᵀ, dQ staging).
_STAGES = {64: 3, 128: 2}
# Elements per program and warps of dQ's scale-and-cast: 4096 and 4 beat 8192 and 8 by 0.6-1.1 µs of 30-100 at
# the four shapes of results/h200/attention_bwd_passes.json (attention_bwd_passes.py, an H200).
_CAST_BLOCK = 4096
_CAST_WARPS = 4

if gluon is not None:

    @builtin
    def _tma_reduce_add(desc, coord, src, _semantic=None):
        """desc[coord…] += src (shared memory), a TMA reduce-add; Gluon 3.6 exposes only the copy."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, desc.handle, coord, src.handle)

    @gluon.jit
    def _wrap(mb, n_m):
        """``mb mod n_m`` for 0 ≤ mb < 2·n_m: a compare and a subtract instead of an integer division, which the
        non-causal loop would otherwise pay in every block (a reciprocal and a dozen integer instructions)."""
        return mb - n_m * (mb >= n_m).to(gl.int32)

    @gluon.jit
    def _bwd_dq(ds_slot, k_bufs, ds_bufs, WHICH: gl.constexpr, HEAD_DIM: gl.constexpr, ALT: gl.constexpr):
        """Issue this group's dQ share over all 128 keys (both groups' dSᵀ, in ``ds_slot``): half of the
        head-dim columns, or (ALT) all of them."""
        DQ_N: gl.constexpr = HEAD_DIM if ALT else HEAD_DIM // 2
        COL0: gl.constexpr = 0 if ALT else WHICH * DQ_N
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, DQ_N, 16]
        )
        zero = gl.zeros([64, DQ_N], gl.float32, dq_layout)
        dq = warpgroup_mma(
            ds_bufs.index(ds_slot * 2).permute((1, 0)), k_bufs.index(0).slice(COL0, DQ_N, dim=1),
            zero, use_acc=False, is_async=True,
        )  # fmt: skip
        dq = warpgroup_mma(
            ds_bufs.index(ds_slot * 2 + 1).permute((1, 0)), k_bufs.index(1).slice(COL0, DQ_N, dim=1),
            dq, is_async=True,
        )  # fmt: skip
        return dq

    @gluon.jit
    def _bwd_dq_out(dq, mb, dq_bufs, dq_desc, row0, WHICH: gl.constexpr, HEAD_DIM: gl.constexpr, ALT: gl.constexpr):
        """Add this group's dQ share of query block mb into the fp32 dQ: a TMA reduce-add from shared memory.
        The share is left unscaled; the cast after the kernel applies the softmax scale, which keeps 32
        multiplies per thread out of the stretch where the tensor cores wait for this store."""
        dq_smem = dq_bufs.index(WHICH)
        # The previous reduce-add must have read the staging buffer before it is overwritten.
        tma.store_wait(0)
        dq_smem.store(dq)
        fence_async_shared()
        COL0: gl.constexpr = 0 if ALT else WHICH * (HEAD_DIM // 2)
        _tma_reduce_add(dq_desc, [row0 + mb * 64, COL0], dq_smem)

    @gluon.jit
    def _bwd_block(
        i, mb, mb_prev, dk, dv, k_op, v_op, k_bufs, v_bufs, q_bufs, do_bufs, ds_bufs, dq_bufs, bars, dq_desc, lse_bufs,
        delta_bufs, row0, start_n, qk_scale, WHICH: gl.constexpr, HEAD_DIM: gl.constexpr,
        STAGES: gl.constexpr, MASKED: gl.constexpr, DEFER: gl.constexpr, FIRST: gl.constexpr, ALT: gl.constexpr,
        DO_DQ: gl.constexpr,
    ):  # fmt: skip
        """Query block ``mb`` (the i-th this program streams) into dK, dV and a dQ share; MASKED: a block
        that straddles the causal diagonal. DEFER: the dQ issued here is the previous block's (``mb_prev``),
        so a group waits only for the other's dSᵀ of one block back and the two need not run in step.
        ALT (with DEFER): the groups take turns at the whole dQ of a block; DO_DQ: this group's turn.
        ``k_op``, ``v_op``: this group's K and V as Sᵀ's and dPᵀ's A operand (registers or shared memory)."""
        q_ready, do_ready, qdo_free, ds_ready = bars[1], bars[2], bars[3], bars[4]
        dtype: gl.constexpr = k_bufs.dtype
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16]
        )
        kv_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
        )
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
        N_DS: gl.constexpr = 3 if DEFER else 2
        k_smem = k_bufs.index(WHICH)
        v_smem = v_bufs.index(WHICH)
        start_m = mb * 64
        s = i % STAGES
        ph = (i // STAGES) & 1
        q_smem = q_bufs.index(s)
        do_smem = do_bufs.index(s)
        zero_st = gl.zeros([64, 64], gl.float32, st_layout)
        mbarrier.wait(q_ready.index(s), ph)
        lse = lse_bufs.index(s).load(gl.SliceLayout(0, st_layout))
        st = warpgroup_mma(k_op, q_smem.permute((1, 0)), zero_st, use_acc=False, is_async=True)
        mbarrier.wait(do_ready.index(s), ph)
        dpt = warpgroup_mma(v_op, do_smem.permute((1, 0)), zero_st, use_acc=False, is_async=True)
        st, _, _ = warpgroup_mma_wait(1, deps=(st, k_smem, q_smem))
        pt = gl.exp2(st * qk_scale - lse[None, :])
        if MASKED:
            # Local key r and query c of this block pair: key start_n + WHICH·64 + r, query mb·64 + c.
            r = gl.arange(0, 64, gl.SliceLayout(1, st_layout))
            c = gl.arange(0, 64, gl.SliceLayout(0, st_layout))
            shift = start_m - start_n - WHICH * 64
            # A select, not a multiply: exp2 of a masked score may overflow to inf.
            pt = gl.where(c[None, :] + shift >= r[:, None], pt, 0.0)
        dv = warpgroup_mma(gl.convert_layout(pt.to(dtype), a_layout), do_smem, dv, is_async=True)
        delta = delta_bufs.index(s).load(gl.SliceLayout(0, st_layout))
        dpt, _, _ = warpgroup_mma_wait(1, deps=(dpt, v_smem, do_smem))
        dst = (pt * (dpt - delta[None, :])).to(dtype)
        slot = i % N_DS
        if DEFER and not FIRST:
            # The other group has written block i-1's dSᵀ, so it is done with block i-2's dQ, the last
            # reader of the slot written next.
            mbarrier.wait(ds_ready.index((i - 1) % 3), ((i - 1) // 3) & 1)
        ds_bufs.index(slot * 2 + WHICH).store(dst)
        fence_async_shared()
        mbarrier.arrive(ds_ready.index(slot), count=1)
        dk = warpgroup_mma(gl.convert_layout(dst, a_layout), q_smem, dk, is_async=True)
        if DEFER:
            if not FIRST and DO_DQ:
                dq = _bwd_dq((i - 1) % 3, k_bufs, ds_bufs, WHICH, HEAD_DIM, ALT)
                dv, dk, dq, _, _, _, _ = warpgroup_mma_wait(0, deps=(dv, dk, dq, q_smem, do_smem, ds_bufs, k_bufs))
                mbarrier.arrive(qdo_free.index(s), count=1)
                _bwd_dq_out(dq, mb_prev, dq_bufs, dq_desc, row0, WHICH, HEAD_DIM, ALT)
            else:
                dv, dk, _, _ = warpgroup_mma_wait(0, deps=(dv, dk, q_smem, do_smem))
                mbarrier.arrive(qdo_free.index(s), count=1)
        else:
            mbarrier.wait(ds_ready.index(slot), (i // 2) & 1)
            dq = _bwd_dq(slot, k_bufs, ds_bufs, WHICH, HEAD_DIM, ALT)
            dv, dk, dq, _, _, _, _ = warpgroup_mma_wait(0, deps=(dv, dk, dq, q_smem, do_smem, ds_bufs, k_bufs))
            mbarrier.arrive(qdo_free.index(s), count=1)
            _bwd_dq_out(dq, mb, dq_bufs, dq_desc, row0, WHICH, HEAD_DIM, ALT)
        return dk, dv

    @gluon.jit
    def _bwd_consumer(
        k_bufs, v_bufs, q_bufs, do_bufs, ds_bufs, dq_bufs, bars, dq_desc, dk_ptr, dv_ptr, lse_bufs, delta_bufs,
        sm_scale, qk_scale, N_CTX, WHICH: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
        CAUSAL: gl.constexpr, DEFER: gl.constexpr, ALT: gl.constexpr, KV_REGS: gl.constexpr,
    ):  # fmt: skip
        kv_ready, ds_ready = bars[0], bars[4]
        kv_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
        )
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16]
        )
        a_st: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=st_layout, k_width=2)
        start_n = gl.program_id(0) * 128
        row0 = gl.program_id(1) * N_CTX
        n_m = N_CTX // 64
        first = start_n // 64
        dk = gl.zeros([64, HEAD_DIM], gl.float32, kv_layout)
        dv = gl.zeros([64, HEAD_DIM], gl.float32, kv_layout)
        mbarrier.wait(kv_ready, 0)
        if KV_REGS:
            # K and V stay for the whole program: Sᵀ and dPᵀ then read only Qᵀ and dOᵀ from shared memory.
            k_op = k_bufs.index(WHICH).load(a_st)
            v_op = v_bufs.index(WHICH).load(a_st)
        else:
            k_op = k_bufs.index(WHICH)
            v_op = v_bufs.index(WHICH)
        args = (k_op, v_op, k_bufs, v_bufs, q_bufs, do_bufs, ds_bufs, dq_bufs, bars, dq_desc, lse_bufs, delta_bufs,
                row0, start_n, qk_scale)  # fmt: skip
        # With ALT the groups take turns at dQ: block b's by group b % 2 (issued, deferred, in step b + 1), but for
        # the program's last block (see the end).
        DQ_ODD: gl.constexpr = (not ALT) or WHICH == 0
        DQ_EVEN: gl.constexpr = (not ALT) or WHICH == 1
        if CAUSAL:
            n_iter = n_m - first
        else:
            n_iter = n_m
        # Causal: the two query blocks on the diagonal are masked; every later one sees all 128 keys.
        # Not causal: start at this program's own query block and wrap, so the programs of one head add into
        # different dQ rows at any moment.
        dk, dv = _bwd_block(0, first, first - 1, dk, dv, *args, WHICH, HEAD_DIM, STAGES, CAUSAL, DEFER, True, ALT,
                            True)  # fmt: skip
        if ALT:
            # Whose turn it is follows the block's parity, so blocks go in pairs (n_iter is even: whole
            # 128-key blocks) and each call knows at compile time whether it issues a dQ.
            mb1 = first + 1
            if not CAUSAL:
                mb1 = _wrap(mb1, n_m)
            dk, dv = _bwd_block(1, mb1, first, dk, dv, *args, WHICH, HEAD_DIM, STAGES, CAUSAL, DEFER, False, ALT,
                                DQ_ODD)  # fmt: skip
            for j in range(1, n_iter // 2):
                for h in gl.static_range(2):
                    i = 2 * j + h
                    mb = first + i
                    mb_prev = mb - 1
                    if not CAUSAL:
                        mb = _wrap(mb, n_m)
                        mb_prev = _wrap(mb_prev, n_m)
                    dk, dv = _bwd_block(i, mb, mb_prev, dk, dv, *args, WHICH, HEAD_DIM, STAGES, False, DEFER, False,
                                        ALT, DQ_EVEN if h == 0 else DQ_ODD)  # fmt: skip
        elif CAUSAL:
            # One block per iteration: unrolled pairs spill more at head_dim 128.
            dk, dv = _bwd_block(1, first + 1, first, dk, dv, *args, WHICH, HEAD_DIM, STAGES, True, DEFER, False, ALT,
                                True)  # fmt: skip
            for i in range(2, n_iter):
                dk, dv = _bwd_block(i, first + i, first + i - 1, dk, dv, *args, WHICH, HEAD_DIM, STAGES, False, DEFER,
                                    False, ALT, True)  # fmt: skip
        else:
            for i in range(1, n_iter):
                mb, mb_prev = _wrap(first + i, n_m), _wrap(first + i - 1, n_m)
                dk, dv = _bwd_block(i, mb, mb_prev, dk, dv, *args, WHICH, HEAD_DIM, STAGES, False, DEFER, False, ALT,
                                    True)  # fmt: skip
        last = first + n_iter - 1
        if not CAUSAL:
            last = _wrap(last, n_m)
        if DEFER and DQ_ODD:
            # The last block's dQ: no later step issues it. With ALT group 0 takes it (the block is odd, but
            # any one group will do: each block's dQ is added exactly once).
            mbarrier.wait(ds_ready.index((n_iter - 1) % 3), ((n_iter - 1) // 3) & 1)
            dq = _bwd_dq((n_iter - 1) % 3, k_bufs, ds_bufs, WHICH, HEAD_DIM, ALT)
            dq, _, _ = warpgroup_mma_wait(0, deps=(dq, ds_bufs, k_bufs))
            _bwd_dq_out(dq, last, dq_bufs, dq_desc, row0, WHICH, HEAD_DIM, ALT)
        tma.store_wait(0)

        rows = start_n + WHICH * 64 + gl.arange(0, 64, gl.SliceLayout(1, kv_layout))
        cols = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, kv_layout))
        tile = (row0.to(gl.int64) + rows)[:, None] * HEAD_DIM + cols[None, :]
        gl.store(dk_ptr + tile, (dk * sm_scale).to(dk_ptr.dtype.element_ty))
        gl.store(dv_ptr + tile, dv.to(dv_ptr.dtype.element_ty))

    @gluon.jit
    def _bwd_loader(k_desc, v_desc, q_desc, do_desc, lse_desc, delta_desc, k_bufs, v_bufs, q_bufs, do_bufs, lse_bufs,
                    delta_bufs, bars, N_CTX, STAGES: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
        kv_ready, q_ready, do_ready, qdo_free = bars[0], bars[1], bars[2], bars[3]
        start_n = gl.program_id(0) * 128
        row0 = gl.program_id(1) * N_CTX
        n_m = N_CTX // 64
        mbarrier.expect(kv_ready, 4 * k_desc.block_type.nbytes)
        for c in gl.static_range(2):
            tma.async_copy_global_to_shared(k_desc, [row0 + start_n + c * 64, 0], kv_ready, k_bufs.index(c))
            tma.async_copy_global_to_shared(v_desc, [row0 + start_n + c * 64, 0], kv_ready, v_bufs.index(c))
        first = start_n // 64
        if CAUSAL:
            n_iter = n_m - first
        else:
            n_iter = n_m
        for i in range(n_iter):
            mb = first + i
            if not CAUSAL:
                mb = _wrap(mb, n_m)
            s = i % STAGES
            # A fresh barrier counts as having completed the phase before its first: the first STAGES
            # waits pass at once.
            mbarrier.wait(qdo_free.index(s), ((i // STAGES) & 1) ^ 1)
            # The block's row log-sum-exp travels with Q and its delta with dO, so the consumers read both from
            # shared memory instead of waiting on global loads in every block.
            mbarrier.expect(q_ready.index(s), q_desc.block_type.nbytes + lse_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [row0 + mb * 64, 0], q_ready.index(s), q_bufs.index(s))
            tma.async_copy_global_to_shared(lse_desc, [row0 + mb * 64], q_ready.index(s), lse_bufs.index(s))
            mbarrier.expect(do_ready.index(s), do_desc.block_type.nbytes + delta_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(do_desc, [row0 + mb * 64, 0], do_ready.index(s), do_bufs.index(s))
            tma.async_copy_global_to_shared(delta_desc, [row0 + mb * 64], do_ready.index(s), delta_bufs.index(s))

    @gluon.jit
    def _attn_bwd_hopper(
        q_desc, k_desc, v_desc, do_desc, dq_desc, dk_ptr, dv_ptr, lse_desc, delta_desc, sm_scale, qk_scale, N_CTX,
        HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, DEFER: gl.constexpr, ALT: gl.constexpr,
        KV_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
    ):  # fmt: skip
        dtype: gl.constexpr = q_desc.dtype
        k_bufs = gl.allocate_shared_memory(dtype, [2, 64, HEAD_DIM], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [2, 64, HEAD_DIM], v_desc.layout)
        q_bufs = gl.allocate_shared_memory(dtype, [STAGES, 64, HEAD_DIM], q_desc.layout)
        do_bufs = gl.allocate_shared_memory(dtype, [STAGES, 64, HEAD_DIM], do_desc.layout)
        ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 64], dtype)
        if DEFER:
            ds_bufs = gl.allocate_shared_memory(dtype, [6, 64, 64], ds_layout)
        else:
            ds_bufs = gl.allocate_shared_memory(dtype, [4, 64, 64], ds_layout)
        DQ_N: gl.constexpr = HEAD_DIM if ALT else HEAD_DIM // 2
        dq_bufs = gl.allocate_shared_memory(gl.float32, [2, 64, DQ_N], dq_desc.layout)
        lse_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, 64], lse_desc.layout)
        delta_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, 64], delta_desc.layout)
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        do_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        qdo_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        ds_ready = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_ready, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(q_ready.index(i), count=1)
            mbarrier.init(do_ready.index(i), count=1)
            mbarrier.init(qdo_free.index(i), count=2)  # both consumers release a slot
        for i in gl.static_range(3):
            mbarrier.init(ds_ready.index(i), count=2)  # both consumers write their dSᵀ
        bars = (kv_ready, q_ready, do_ready, qdo_free, ds_ready)
        gl.warp_specialize(
            [
                (_bwd_consumer, (k_bufs, v_bufs, q_bufs, do_bufs, ds_bufs, dq_bufs, bars, dq_desc, dk_ptr, dv_ptr,
                                 lse_bufs, delta_bufs, sm_scale, qk_scale, N_CTX, 0, HEAD_DIM, STAGES, CAUSAL,
                                 DEFER, ALT, KV_REGS)),
                (_bwd_consumer, (k_bufs, v_bufs, q_bufs, do_bufs, ds_bufs, dq_bufs, bars, dq_desc, dk_ptr, dv_ptr,
                                 lse_bufs, delta_bufs, sm_scale, qk_scale, N_CTX, 1, HEAD_DIM, STAGES, CAUSAL,
                                 DEFER, ALT, KV_REGS)),
                (_bwd_loader, (k_desc, v_desc, q_desc, do_desc, lse_desc, delta_desc, k_bufs, v_bufs, q_bufs, do_bufs,
                               lse_bufs, delta_bufs, bars, N_CTX, STAGES, CAUSAL)),
            ],
            [4, 1],
            [CONSUMER_REGS, LOADER_REGS],
        )  # fmt: skip


def applies(capability: tuple[int, int], dtype: torch.dtype, head_dim: int, seq: int, rows: int, aligned: bool) -> bool:
    """The rule behind ``usable``, on plain facts: an sm_90 GPU, fp16/bf16, head_dim 64 or 128, a sequence
    that is a multiple of 128, fewer than 2³¹ rows of batch·heads·seq (TMA coordinates are 32-bit), and
    contiguous 16-byte aligned tensors."""
    return (
        gluon is not None
        and capability == (9, 0)
        and dtype in GL_DTYPES
        and head_dim in HEAD_DIMS
        and seq > 0
        and seq % BLOCK_N == 0
        and rows < 2**31
        and aligned
    )


def usable(*ts: torch.Tensor) -> bool:
    """Whether ``backward`` serves these tensors (q, k, v and dO, of one shape); never under the interpreter."""
    q = ts[0]
    if gluon is None or interpreting() or q.device.type != "cuda":
        return False
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    aligned = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in ts)
    B, H, S, D = q.shape
    return applies(torch.cuda.get_device_capability(index), q.dtype, D, S, B * H * S, aligned)


def schedule(
    head_dim: int, defer: bool | None = None, alternate: bool | None = None, kv_registers: bool | None = None
) -> tuple[bool, bool, bool]:
    """(defer, alternate, kv_registers) with each None replaced by the measured choice: head_dim 64 deferred,
    alternating, K and V in registers; 128 in step, halves, K and V in shared memory. ValueError for a
    combination the kernel has no schedule for."""
    if defer is None:
        defer = head_dim == 64
    if alternate is None:
        alternate = defer and head_dim == 64
    if kv_registers is None:
        kv_registers = head_dim == 64
    if alternate and not defer:
        raise ValueError("alternate (the groups taking turns at dQ) needs defer=True (the deferred schedule)")
    if alternate and head_dim != 64:
        # Whole-width dQ staging and a third dSᵀ buffer: 246 144 bytes of shared memory at 128, over the 232 448
        # an sm_90 program may have.
        raise ValueError(f"alternate (the groups taking turns at dQ) needs head_dim 64, not {head_dim}")
    return defer, alternate, kv_registers


def launch_args(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    dq_acc: torch.Tensor,
    dk: torch.Tensor,
    dv: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    causal: bool,
    defer: bool | None = None,
    alternate: bool | None = None,
    kv_registers: bool | None = None,
) -> tuple:
    """The kernel's arguments (descriptors over the [B·H·S, D] views) and compile-time flags; the schedule
    options as ``schedule`` resolves them."""
    B, H, S, D = q.shape
    defer, alternate, kv_registers = schedule(D, defer, alternate, kv_registers)
    layout = shared_layout(q.dtype, BLOCK_M, D)
    descs = [TensorDescriptor.from_tensor(t.view(B * H * S, D), [BLOCK_M, D], layout) for t in (q, k, v, do)]
    # dQ is summed in blocks of 64 rows and half the head-dim columns (one group's share) or all of them.
    dq_n = D if alternate else D // 2
    dq_layout = shared_layout(torch.float32, BLOCK_M, dq_n)
    dq_desc = TensorDescriptor.from_tensor(dq_acc, [BLOCK_M, dq_n], dq_layout)
    sm_scale = 1.0 / math.sqrt(D)
    qk_scale = sm_scale * math.log2(math.e)
    # The row statistics travel with their query block: [64] slices of the flat [B·H·S] fp32 vectors.
    stats_layout = shared_layout(torch.float32, BLOCK_M)
    lse_desc, delta_desc = (TensorDescriptor.from_tensor(t.view(-1), [BLOCK_M], stats_layout) for t in (lse, delta))
    return (
        *descs, dq_desc, dk, dv, lse_desc, delta_desc, sm_scale, qk_scale, S,
        D, _STAGES[D], causal, defer, alternate, kv_registers, _CONSUMER_REGS, _LOADER_REGS,
    )  # fmt: skip


def backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    causal: bool,
    defer: bool | None = None,
    alternate: bool | None = None,
    kv_registers: bool | None = None,
    dq_acc: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV from contiguous q, k, v, dO of one shape [B, H, S, D], the forward's base-2 row
    log-sum-exp ``lse`` and ``delta`` = rowsum(O ∘ dO) (both [B·H, S] fp32). dQ is summed unscaled in an
    fp32 buffer, then scaled and cast in one pass. ``dq_acc``: that buffer ([B·H·S, D] fp32, contiguous),
    already zeroed (stage 3 zeroes it in its delta pass); left out, one is allocated and zeroed here."""
    B, H, S, D = q.shape
    if dq_acc is None:
        dq_acc = torch.zeros((B * H * S, D), dtype=torch.float32, device=q.device)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = (S // BLOCK_N, B * H)
    args = launch_args(q, k, v, do, dq_acc, dk, dv, lse, delta, causal, defer, alternate, kv_registers)
    _attn_bwd_hopper[grid](*args, num_warps=4, maxnreg=_MAXNREG)
    dq = torch.empty_like(q)
    scale_cast(dq_acc, dq, 1.0 / math.sqrt(D))
    return dq, dk, dv


def scale_cast(src: torch.Tensor, dst: torch.Tensor, scale: float) -> None:
    """dst = src · scale in dst's dtype, element for element over dst's numel (both contiguous)."""
    n = dst.numel()
    _scale_cast_kernel[(triton.cdiv(n, _CAST_BLOCK),)](src, dst, scale, n, BLOCK=_CAST_BLOCK, num_warps=_CAST_WARPS)


@triton.jit
def _scale_cast_kernel(src_ptr, dst_ptr, scale, n, BLOCK: tl.constexpr):
    """dst = (src · scale) in dst's dtype: the fp32 dQ sums, scaled and cast in one pass."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs, mask=offs < n)
    tl.store(dst_ptr + offs, (x * scale).to(dst_ptr.dtype.element_ty), mask=offs < n)
