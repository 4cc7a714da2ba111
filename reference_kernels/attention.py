"""FlashAttention-style fused attention, forward and backward: ``O = softmax(Q Kᵀ · scale [+ causal]) V``.

Math: for each (batch, head), ``S = Q Kᵀ / sqrt(d)``, ``P = softmax(S)`` over keys (with ``S[i, j] =
-inf`` for ``j > i`` when causal), ``O = P V``. The kernels never build S or P in memory: a program owns
BLOCK_M query rows and streams BLOCK_N keys at a time with the online softmax — running row max ``m``
and row sum ``l`` in fp32, rescaling the fp32 accumulator by ``2^(m_old − m_new)`` when the max grows.
``log2(e)`` is folded into the scale so every exponential is one ``exp2`` (MUFU.EX2).

Programs → data: grid ``(cdiv(seq, BLOCK_M), batch · heads)``; program (i, bh) computes rows
``[i·BLOCK_M, (i+1)·BLOCK_M)`` of head bh. Neighbouring programs share one head, so its K and V stay in
L2 while they are re-read ``seq / BLOCK_M`` times.
  stage 1  the straightforward kernel with one fixed 64×64 tile: causal and sequence-tail masks are
           applied to every key block.
  stage 2  the same kernel, autotuned over tile sizes, warps and pipeline depth.
  stage 3  the key loop is split: blocks strictly below the diagonal (causal) or fully inside the
           sequence (non-causal) run with no mask at all, and only the diagonal / tail blocks pay for
           masking; causal programs are launched heaviest-first (last query block first) so the short
           ones fill the tail of the wave; on Hopper Q, K and V are read through TMA tensor descriptors,
           which frees enough registers for tiles capped at 128 registers per thread: two 8-warp CTAs
           per SM, so one CTA's softmax overlaps the other's tensor-core work; some tiles also run the
           key loop warp-specialized (``tl.range(warp_specialize=True)``, a TMA producer and the
           compute warps apart). On an sm_90 GPU, for fp16/bf16 at head_dim 64 or 128 with tiles enough
           to fill it, the forward is instead the Gluon kernel of ``attention_hopper.py``: a load warp and
           two consumer warpgroups with their own schedule; with a sequence that is a multiple of 128,
           so is the backward (``attention_hopper_bwd.py``, one pass, dQ summed by TMA reduce-adds).
Autotuning: per head-dim class a short list of tiles (see ``_FWD_TILES``), compiled in parallel before
they are timed; a problem too small to fill the GPU gets one small tile and is not timed at all.
The bars: ``sdpa_flash_attention`` = torch's SDPA held to its flash backend (≥ 0.9×), and
``reference_attention`` = SDPA with the backend torch picks, cuDNN on Hopper (≥ 1.0×, not met on the H100:
forward 0.99-1.17×, forward + backward 0.97-1.13×, below 1.0 at head_dim 128 without a causal mask,
benchmarks/results/h100/attention.json);
``manual_attention`` is the unfused computation.

Bytes moved: Q, K, V read once and O written once, ``4 · B·H·S·D · bytes(dtype)`` (K and V re-reads
hit L2). Unfused attention also writes and reads the S×S score and probability matrices:
``+ ~4 · B·H·S² · bytes``, which is 64× the fused traffic at S=4096, D=64. FLOPs: ``4·B·H·S²·D``
(two matmuls), half of it when causal.

Backward (FlashAttention-2 style): the forward also writes the base-2 row log-sum-exp ``lse`` when
gradients are needed, so ``P = exp2(Q Kᵀ·scale·log2 e − lse)`` is rebuilt block by block and never
stored. ``delta = rowsum(O ∘ dO)``; one kernel per key block accumulates ``dV = Pᵀ dO`` and
``dK = scale · (P ∘ (dO Vᵀ − delta))ᵀ Q`` over the query blocks that see it, one kernel per query block
accumulates ``dQ`` over its key blocks — no atomics, seven matmuls per block pair. Both kernels mask
only the blocks that straddle the causal diagonal (or the sequence tail); query rows past the sequence
get ``lse = +inf``, hence ``P = 0``; on Hopper Q, K, V, dO come through TMA descriptors. Stage 3 runs,
where it measured faster (causal, head_dim ≤ 64), a one-pass kernel instead: the dK/dV kernel also
computes each block's ``dQ`` share and adds it into an fp32 buffer (TMA reduce-add on Hopper, atomics
elsewhere) — five matmuls per block pair, but atomics. On an sm_90 GPU stage 3's backward is the Gluon
kernel of ``attention_hopper_bwd.py`` where it applies: the same one pass, warp-specialized. Reads Q, K,
V, O, dO (K, V once per query block they meet) and writes dQ, dK, dV.

Limits: q, k, v of one shape [batch, heads, seq, head_dim] (self-attention lengths), fp16 or bf16,
head_dim a power of two in 16…128, any strides (the TMA path needs contiguous inputs and sm_90+; the
backward copies non-contiguous inputs once).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

from reference_kernels import attention_hopper, attention_hopper_bwd
from reference_kernels._autotune import parallel_autotune
from reference_kernels._common import interpreting, sm_count
from reference_kernels._spec import Case, KernelSpec, Tolerance

try:
    from triton.tools.tensor_descriptor import TensorDescriptor as _TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: pointer loads everywhere
    _TensorDescriptor = None

# ------------------------------------------------------------------------------------------------
# Constants
# ------------------------------------------------------------------------------------------------

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
# tl.arange needs powers of two; 16 is the smallest K dimension of an fp16 MMA, and 128 keeps the
# [BLOCK_M, head_dim] fp32 accumulator within the register file at BLOCK_M = 128, 8 warps.
_HEAD_DIMS = (16, 32, 64, 128)
# log2(e): folded into the softmax scale so exponentials are exp2 (tl.constexpr: read inside kernels).
LOG2E = tl.constexpr(1.4426950408889634)

# Stage 1: one readable, untuned tile (also the small-problem tile below, so stage 2 reuses its binary).
_STAGE1_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64}
_STAGE1_WARPS, _STAGE1_STAGES = 4, 2

# Forward tiles (BLOCK_M, BLOCK_N, num_stages, num_warps, maxnreg, warp-specialized key loop) for
# problems that fill the GPU, by head-dim class. On Hopper what decides the speed is how many warpgroups
# an SM holds: while one computes its softmax (exp2 on the MUFU unit: at head_dim 64 as many cycles as
# the two wgmmas) another can issue tensor-core work. BLOCK_M 128 at 8 warps gives each warpgroup a
# 64-row wgmma slice.
# ptxas -v for sm_90 (TMA path, fp16 and bf16, causal or not; registers per thread, shared memory):
#   head_dim ≤ 64   128×128 s2 w8 cap 128: 122-127 regs, no spill, 83 KB  → 2 CTAs per SM
#                   128×64  s3 w8:         107-127 regs,          67 KB  → 2 CTAs
#   head_dim 128    128×64  s2 w8 cap 128: 128 regs, no spill,    98 KB  → 2 CTAs per SM
#                   128×64  s3 w8:         138-143 regs,         132 KB → 1 CTA
#                   128×64  s4 w8:                               164 KB → 1 CTA, deeper K/V ring
# benchmarks/attention_sweep.py (H100, bf16, 5 interleaved rounds, benchmarks/results/h100/
# attention_sweep*.json) chose these; left out as slower there: 128×128 s3 w8, 128×64 s3 w4 and 128×128
# s2 w8 uncapped (d64), 128×128 s2 w8 and 128-row tiles at 2 stages uncapped (d128), 256-row tiles at
# 16 warps, a hand-pipelined QKᵀ (PIPELINE), and warp specialization at 4 warps (does not compile).
# On the pointer paths (stage 2, stage 3 without descriptors) addresses live in registers: the cap
# (Config.maxnreg) spills 12-112 bytes, so capped tiles, like warp-specialized ones, run only with TMA
# descriptors.
# Every tile has BLOCK_M % BLOCK_N == 0, which stage 3's diagonal split relies on.
_FWD_TILES = {
    64: ((128, 64, 3, 8, None, False), (128, 128, 2, 8, 128, False), (128, 64, 3, 8, None, True)),
    128: (
        (128, 64, 2, 8, 128, True),
        (128, 64, 2, 8, 128, False),
        (128, 64, 4, 8, None, True),
        (128, 64, 4, 8, None, False),
        (128, 64, 3, 8, None, False),
    ),
}
# When 128-row blocks give fewer programs than SMs (batch·heads·⌈seq/128⌉ < SMs) the grid cannot fill
# the GPU whatever the tile, and 64-row blocks double the programs: one tile, nothing to time.
_SMALL_FWD_TILE = (64, 64, _STAGE1_STAGES, _STAGE1_WARPS, None, False)
# Shared memory per block on sm_90 (227 KiB opt-in); the forward needs Q once plus num_stages K and V
# tiles (the compiler adds < 1 KiB of barriers and scratch).
_SMEM_BYTES = 232448


def _fwd_smem_bytes(tile: tuple, head_dim: int, itemsize: int = 2) -> int:
    block_m, block_n, stages = tile[:3]
    return (block_m + 2 * stages * block_n) * head_dim * itemsize


def _tile_of(c: triton.Config) -> tuple:
    return (
        c.kwargs["BLOCK_M"],
        c.kwargs["BLOCK_N"],
        c.num_stages,
        c.num_warps,
        c.maxnreg,
        c.kwargs.get("WARP_SPEC", False),
    )


def _fwd_configs(pre_hook: Any = None, warp_spec: bool = False) -> list[triton.Config]:
    """Every forward tile; without ``warp_spec`` (stage 2's kernel has no such flag) the unspecialized ones."""
    tiles = dict.fromkeys([*_FWD_TILES[64], *_FWD_TILES[128], _SMALL_FWD_TILE])  # ordered, unique
    return [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, **({"WARP_SPEC": ws} if warp_spec else {})},
            num_stages=s,
            num_warps=w,
            maxnreg=r,
            pre_hook=pre_hook,
        )
        for (bm, bn, s, w, r, ws) in tiles
        if warp_spec or not ws
    ]


def _fills_gpu(t: torch.Tensor, seq: int, head_dim: int) -> bool:
    """Whether 128-row blocks over ``t`` ([batch, heads, seq, head_dim]) make at least one full wave."""
    heads = t.numel() // max(1, seq * head_dim)
    return heads * triton.cdiv(seq, 128) >= sm_count(t.device.index or 0)


def _pointer_safe(tile: tuple) -> bool:
    """No register cap, not one warpgroup over 128 rows, no warp specialization: the pointer paths' tiles."""
    block_m, _, _, num_warps, maxnreg, warp_spec = tile
    return maxnreg is None and not (block_m == 128 and num_warps == 4) and not warp_spec


def _prune_fwd(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    """The tiles of the head-dim class (or the one small tile); see _FWD_TILES for the pointer paths."""
    d = kwargs["HEAD_DIM"]
    if _fills_gpu(named_args["o_ptr"], named_args["N_CTX"], d):
        wanted = set(_FWD_TILES[64 if d <= 64 else 128])
    else:
        wanted = {_SMALL_FWD_TILE}
    if not kwargs.get("USE_DESC", False):
        wanted = {t for t in wanted if _pointer_safe(t)}
    return [c for c in configs if _tile_of(c) in wanted]


# The interpreter cannot autotune (no timer) and is slow on big tiles: one small config whose BLOCK_M
# is twice BLOCK_N, so the diagonal split, the tail block and several blocks per row all run.
_INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 16}
# Backward under the interpreter: key blocks span two query blocks (dK/dV) and the reverse (dQ).
_INTERPRETER_BWD_DKDV = {"BLOCK_M": 16, "BLOCK_N": 32}
_INTERPRETER_BWD_DQ = {"BLOCK_M": 32, "BLOCK_N": 16}


# ------------------------------------------------------------------------------------------------
# Triton helpers
# ------------------------------------------------------------------------------------------------


@triton.jit
def _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, mask, APPLY_MASK: tl.constexpr):
    """Fold one key block into the running (acc, l, m): ``qk`` raw scores, ``mask`` keys to keep."""
    if APPLY_MASK:
        # -inf: masked keys get exp2(-inf) = 0 probability. Every row keeps at least one key of its
        # first block (column 0 ≤ row), so m stays finite and m_i - m_new never sees inf - inf.
        qk = tl.where(mask, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_new[:, None]
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_new[:, None]
    p = tl.exp2(qk)
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


# ------------------------------------------------------------------------------------------------
# Kernels
# ------------------------------------------------------------------------------------------------


@triton.jit
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    sm_scale, H, N_CTX,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Stages 1-2: every key block masked (sequence tail, and the causal triangle when CAUSAL)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    h = bh % H
    q_ptr += b * stride_qb + h * stride_qh
    k_ptr += b * stride_kb + h * stride_kh
    v_ptr += b * stride_vb + h * stride_vh
    o_ptr += b * stride_ob + h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_CTX
    # other=0: padded query rows produce finite garbage that the store mask drops.
    q = tl.load(q_ptr + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    qk_scale = sm_scale * LOG2E
    hi = N_CTX
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < N_CTX
        # other=0: masked keys are removed from the softmax below; zero V rows add nothing.
        k_t = tl.load(
            k_ptr + offs_n[None, :] * stride_ks + offs_d[:, None] * stride_kd, mask=key_ok[None, :], other=0.0
        )
        v = tl.load(v_ptr + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd, mask=key_ok[:, None], other=0.0)
        qk = tl.dot(q, k_t)
        mask = key_ok[None, :]
        if CAUSAL:
            mask = mask & (offs_m[:, None] >= offs_n[None, :])
        acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, mask, True)

    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    if STORE_LSE:
        # Row log-sum-exp of the base-2 scaled scores: the backward rebuilds P as exp2(qk·scale − lse).
        tl.store(lse_ptr + bh * N_CTX + offs_m, m_i + tl.log2(l_i), mask=row_ok)


@triton.jit
def _load_kv(k_src, v_src, row0, start_n, N_CTX, stride_ks, stride_kd, stride_vs, stride_vd,
             HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, USE_DESC: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """Kᵀ [HEAD_DIM, BLOCK_N] and V [BLOCK_N, HEAD_DIM] for keys start_n…; ``row0`` = head's first row."""
    if USE_DESC:
        # 2-D descriptors over [batch·heads·seq, head_dim]: rows past this head's end belong to the next
        # head (or are zero-filled past the tensor); their scores are masked to -inf, so P is 0 there.
        k_t = k_src.load([(row0 + start_n).to(tl.int32), 0]).T
        v = v_src.load([(row0 + start_n).to(tl.int32), 0])
    else:
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        k_ptrs = k_src + offs_n[None, :] * stride_ks + offs_d[:, None] * stride_kd
        v_ptrs = v_src + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd
        if MASKED:
            # other=0: out-of-range keys are masked to -inf before the softmax; zero V rows add nothing.
            k_t = tl.load(k_ptrs, mask=offs_n[None, :] < N_CTX, other=0.0)
            v = tl.load(v_ptrs, mask=offs_n[:, None] < N_CTX, other=0.0)
        else:
            k_t = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
    return k_t, v


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q, k_src, v_src, row0, lo, hi, offs_m, qk_scale, N_CTX,
    stride_ks, stride_kd, stride_vs, stride_vd,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    MASKED: tl.constexpr, USE_DESC: tl.constexpr, WARP_SPEC: tl.constexpr, PIPELINE: tl.constexpr,
):  # fmt: skip
    """Key blocks [lo, hi): with MASKED the sequence tail (and causal triangle) is masked."""
    if PIPELINE and USE_DESC and not MASKED:
        # Software-pipelined by hand: the next block's Q Kᵀ is issued before this block's softmax, so
        # the tensor cores have work while the softmax runs.
        if lo < hi:
            qk = tl.dot(q, k_src.load([(row0 + lo).to(tl.int32), 0]).T)
            for start_n in tl.range(lo, hi - BLOCK_N, BLOCK_N):
                v = v_src.load([(row0 + start_n).to(tl.int32), 0])
                qk_next = tl.dot(q, k_src.load([(row0 + start_n + BLOCK_N).to(tl.int32), 0]).T)
                acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, 0, False)
                qk = qk_next
            v = v_src.load([(row0 + hi - BLOCK_N).to(tl.int32), 0])
            acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, 0, False)
    else:
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k_t, v = _load_kv(
                k_src, v_src, row0, start_n, N_CTX, stride_ks, stride_kd, stride_vs, stride_vd,
                HEAD_DIM, BLOCK_N, USE_DESC, MASKED,
            )  # fmt: skip
            qk = tl.dot(q, k_t)
            if MASKED:
                offs_n = start_n + tl.arange(0, BLOCK_N)
                mask = offs_n[None, :] < N_CTX
                if CAUSAL:
                    mask = mask & (offs_m[:, None] >= offs_n[None, :])
                acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, mask, True)
            else:
                acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, 0, False)
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_split_kernel(
    q_src, k_src, v_src, o_ptr, lse_ptr,
    sm_scale, H, N_CTX,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, USE_DESC: tl.constexpr, STORE_LSE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WARP_SPEC: tl.constexpr = False,
    PIPELINE: tl.constexpr = False,
):  # fmt: skip
    """Stage 3: unmasked off-diagonal / in-sequence key blocks, masked diagonal / tail blocks only."""
    if CAUSAL:
        # Heaviest query blocks (most keys) first, so the light ones fill the end of the wave.
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    h = bh % H
    row0 = bh * N_CTX  # first row of this head in the [B·H·S, D] descriptor view
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if USE_DESC:
        q = q_src.load([(row0 + start_m * BLOCK_M).to(tl.int32), 0])
    else:
        q_src += b * stride_qb + h * stride_qh
        k_src += b * stride_kb + h * stride_kh
        v_src += b * stride_vb + h * stride_vh
        q_ptrs = q_src + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd
        # other=0: padded query rows are computed and then dropped by the store mask.
        q = tl.load(q_ptrs, mask=offs_m[:, None] < N_CTX, other=0.0)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    qk_scale = sm_scale * LOG2E

    if CAUSAL:
        # Keys [0, start_m·BLOCK_M) lie strictly below the diagonal for every row of this block and
        # inside the sequence (the block exists, so start_m·BLOCK_M < N_CTX): no mask.
        diag = start_m * BLOCK_M
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_src, v_src, row0, 0, diag, offs_m, qk_scale, N_CTX,
            stride_ks, stride_kd, stride_vs, stride_vd, HEAD_DIM, BLOCK_N, CAUSAL, False, USE_DESC, WARP_SPEC, PIPELINE,
        )  # fmt: skip
        hi = tl.minimum(diag + BLOCK_M, N_CTX)
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_src, v_src, row0, diag, hi, offs_m, qk_scale, N_CTX,
            stride_ks, stride_kd, stride_vs, stride_vd, HEAD_DIM, BLOCK_N, CAUSAL, True, USE_DESC, WARP_SPEC, PIPELINE,
        )  # fmt: skip
    else:
        full = (N_CTX // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_src, v_src, row0, 0, full, offs_m, qk_scale, N_CTX,
            stride_ks, stride_kd, stride_vs, stride_vd, HEAD_DIM, BLOCK_N, CAUSAL, False, USE_DESC, WARP_SPEC, PIPELINE,
        )  # fmt: skip
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_src, v_src, row0, full, N_CTX, offs_m, qk_scale, N_CTX,
            stride_ks, stride_kd, stride_vs, stride_vd, HEAD_DIM, BLOCK_N, CAUSAL, True, USE_DESC, WARP_SPEC, PIPELINE,
        )  # fmt: skip

    acc = acc / l_i[:, None]
    # A pointer store even on the TMA path: a 2-D descriptor store of a partial last block would spill
    # into the next head's rows.
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < N_CTX)
    if STORE_LSE:
        tl.store(lse_ptr + bh * N_CTX + offs_m, m_i + tl.log2(l_i), mask=offs_m < N_CTX)


_attn_fwd_tuned = parallel_autotune(_fwd_configs(), key=["N_CTX", "HEAD_DIM", "CAUSAL"], prune=_prune_fwd)(
    _attn_fwd_kernel
)


def _set_descriptor_blocks(nargs: dict) -> None:
    """Autotune pre-hook: TMA block shapes follow the config being tried (no-op for pointers)."""
    if not nargs["USE_DESC"]:
        return
    d = nargs["HEAD_DIM"]
    nargs["q_src"].block_shape = [nargs["BLOCK_M"], d]
    nargs["k_src"].block_shape = [nargs["BLOCK_N"], d]
    nargs["v_src"].block_shape = [nargs["BLOCK_N"], d]


_attn_fwd_split_tuned = parallel_autotune(
    _fwd_configs(pre_hook=_set_descriptor_blocks, warp_spec=True),
    key=["N_CTX", "HEAD_DIM", "CAUSAL", "USE_DESC"],
    prune=_prune_fwd,
)(_attn_fwd_split_kernel)


# Backward kernels (shared by every stage). They read contiguous [B, H, S, D] tensors: head bh starts at
# element bh·S·D and rows are D apart, which the autograd backward guarantees with .contiguous().


@triton.jit
def _attn_bwd_preprocess_kernel(
    o_ptr, do_ptr, delta_ptr, dq_ptr, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, ZERO_DQ: tl.constexpr
):
    """delta[i] = Σ_d O[i,d]·dO[i,d], which equals Σ_j P[i,j]·dP[i,j], the row term of the softmax backward.
    ZERO_DQ: also zero the same rows of dQ's fp32 buffer (laid out like O), in place of a fill of its own."""
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_CTX
    tile = bh * N_CTX * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    # other=0: padded rows are not stored.
    o = tl.load(o_ptr + tile, mask=row_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(do_ptr + tile, mask=row_ok[:, None], other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * N_CTX + offs_m, tl.sum(o * do, 1), mask=row_ok)
    if ZERO_DQ:
        tl.store(dq_ptr + tile, tl.zeros([BLOCK_M, HEAD_DIM], tl.float32), mask=row_ok[:, None])


# Rows per program of the delta pass (4 warps). 32 beat the 64 it had at four shapes of 2-4 × 16-32 heads × 4096-8192
# × 64-128 on an H200, zeroing dQ's buffer as well: 1.0-3.0 µs of 37-138 (attention_bwd_passes.py,
# results/h200/attention_bwd_passes.json); 128 rows and 8 warps were slower.
_DELTA_ROWS = 32


def _delta(o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor, dq_acc: torch.Tensor | None = None) -> torch.Tensor:
    """rowsum(O ∘ dO) of contiguous ``o``, ``do`` [B, H, S, D], laid out like ``lse`` ([B·H, S] fp32). Given
    ``dq_acc`` (fp32, contiguous, as many elements as ``o``), zeroes it in the same pass."""
    B, H, S, D = o.shape
    delta = torch.empty_like(lse)
    _attn_bwd_preprocess_kernel[(triton.cdiv(S, _DELTA_ROWS), B * H)](
        o, do, delta, delta if dq_acc is None else dq_acc, S, HEAD_DIM=D, BLOCK_M=_DELTA_ROWS,
        ZERO_DQ=dq_acc is not None, num_warps=4,
    )  # fmt: skip
    return delta


@triton.jit
def _bwd_rows(src, row0, start, N_CTX, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, USE_DESC: tl.constexpr):
    """Rows start…start+BLOCK of one head, [BLOCK, HEAD_DIM]; ``row0`` = the head's first row of the
    [batch·heads·seq, head_dim] view. Rows past N_CTX are the next head's (descriptor) or zeros (pointers):
    the callers give them P = 0 (queries) or drop their results (keys)."""
    if USE_DESC:
        return src.load([(row0 + start).to(tl.int32), 0])
    else:
        offs = start + tl.arange(0, BLOCK)
        offs_d = tl.arange(0, HEAD_DIM)
        # other=0: see the docstring.
        return tl.load(src + (row0 + offs[:, None]) * HEAD_DIM + offs_d[None, :], mask=offs[:, None] < N_CTX, other=0.0)


@triton.jit
def _bwd_dkdv_inner(
    dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, row0, lo, hi, offs_n, qk_scale, N_CTX,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr, USE_DESC: tl.constexpr,
):  # fmt: skip
    """Query blocks [lo, hi) into dK, dV; MASKED: the blocks that straddle the causal diagonal."""
    for start_m in tl.range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = _bwd_rows(q_src, row0, start_m, N_CTX, HEAD_DIM, BLOCK_M, USE_DESC)
        do = _bwd_rows(do_src, row0, start_m, N_CTX, HEAD_DIM, BLOCK_M, USE_DESC)
        # lse = +inf past the sequence: those query rows get P = exp2(-inf) = 0, so they add nothing.
        lse = tl.load(lse_ptr + row0 + offs_m, mask=offs_m < N_CTX, other=float("inf"))
        delta = tl.load(delta_ptr + row0 + offs_m, mask=offs_m < N_CTX, other=0.0)
        p_t = tl.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])
        if MASKED:
            # A select, not a multiply: exp2 of a masked score may overflow to inf.
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(
    q_src, k_src, v_src, do_src, dk_ptr, dv_ptr, lse_ptr, delta_ptr,
    sm_scale, N_CTX,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, USE_DESC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """dK, dV of BLOCK_N keys: stream the query blocks that see them, rebuilding Pᵀ from the saved lse.

    dV = Pᵀ dO,  dPᵀ = V dOᵀ,  dSᵀ = Pᵀ ∘ (dPᵀ − delta),  dK = scale · dSᵀ Q.
    Causal: queries before the key block see none of it (skipped); the BLOCK_N / BLOCK_M query blocks
    that straddle the diagonal are masked; every later block sees all of it, unmasked.
    """
    bh = tl.program_id(1).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    row0 = bh * N_CTX
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # Key rows past N_CTX: their dK, dV rows are computed from foreign or zero keys and not stored.
    k = _bwd_rows(k_src, row0, start_n, N_CTX, HEAD_DIM, BLOCK_N, USE_DESC)
    v = _bwd_rows(v_src, row0, start_n, N_CTX, HEAD_DIM, BLOCK_N, USE_DESC)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    qk_scale = sm_scale * LOG2E
    if CAUSAL:
        mid = tl.minimum(start_n + BLOCK_N, N_CTX)
        dk, dv = _bwd_dkdv_inner(
            dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, row0, start_n, mid, offs_n, qk_scale, N_CTX,
            HEAD_DIM, BLOCK_M, True, USE_DESC,
        )  # fmt: skip
        dk, dv = _bwd_dkdv_inner(
            dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, row0, mid, N_CTX, offs_n, qk_scale, N_CTX,
            HEAD_DIM, BLOCK_M, False, USE_DESC,
        )  # fmt: skip
    else:
        dk, dv = _bwd_dkdv_inner(
            dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, row0, 0, N_CTX, offs_n, qk_scale, N_CTX,
            HEAD_DIM, BLOCK_M, False, USE_DESC,
        )  # fmt: skip
    # Pointer stores: a descriptor store of a partial last block would write into the next head.
    kv_tile = (row0 + offs_n[:, None]) * HEAD_DIM + offs_d[None, :]
    key_ok = offs_n[:, None] < N_CTX
    tl.store(dk_ptr + kv_tile, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=key_ok)
    tl.store(dv_ptr + kv_tile, dv.to(dv_ptr.dtype.element_ty), mask=key_ok)


@triton.jit
def _bwd_dq_inner(
    dq, q, do, lse, delta, k_src, v_src, row0, lo, hi, offs_m, qk_scale, N_CTX,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    USE_DESC: tl.constexpr,
):  # fmt: skip
    """Key blocks [lo, hi) into dQ; MASKED: the sequence tail (and the causal diagonal) are masked."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _bwd_rows(k_src, row0, start_n, N_CTX, HEAD_DIM, BLOCK_N, USE_DESC)
        v = _bwd_rows(v_src, row0, start_n, N_CTX, HEAD_DIM, BLOCK_N, USE_DESC)
        p = tl.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            keep = offs_n[None, :] < N_CTX
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            # A select, not a multiply: exp2 of a masked score may overflow to inf.
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    q_src, k_src, v_src, do_src, dq_ptr, lse_ptr, delta_ptr,
    sm_scale, N_CTX,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, USE_DESC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """dQ of BLOCK_M queries: dP = dO Vᵀ, dS = P ∘ (dP − delta), dQ = scale · dS K. Key blocks fully
    below the diagonal (causal) or inside the sequence run unmasked; causal programs run heaviest first."""
    if CAUSAL:
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    row0 = bh * N_CTX
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_CTX
    q = _bwd_rows(q_src, row0, start_m, N_CTX, HEAD_DIM, BLOCK_M, USE_DESC)
    do = _bwd_rows(do_src, row0, start_m, N_CTX, HEAD_DIM, BLOCK_M, USE_DESC)
    # lse = +inf past the sequence: those rows get P = 0 (and are not stored).
    lse = tl.load(lse_ptr + row0 + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(delta_ptr + row0 + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    qk_scale = sm_scale * LOG2E
    if CAUSAL:
        # Keys [0, start_m) lie below the diagonal for every row (BLOCK_M % BLOCK_N == 0).
        dq = _bwd_dq_inner(
            dq, q, do, lse, delta, k_src, v_src, row0, 0, start_m, offs_m, qk_scale, N_CTX,
            HEAD_DIM, BLOCK_N, CAUSAL, False, USE_DESC,
        )  # fmt: skip
        dq = _bwd_dq_inner(
            dq, q, do, lse, delta, k_src, v_src, row0, start_m, tl.minimum(start_m + BLOCK_M, N_CTX), offs_m,
            qk_scale, N_CTX, HEAD_DIM, BLOCK_N, CAUSAL, True, USE_DESC,
        )  # fmt: skip
    else:
        full = (N_CTX // BLOCK_N) * BLOCK_N
        dq = _bwd_dq_inner(
            dq, q, do, lse, delta, k_src, v_src, row0, 0, full, offs_m, qk_scale, N_CTX,
            HEAD_DIM, BLOCK_N, CAUSAL, False, USE_DESC,
        )  # fmt: skip
        dq = _bwd_dq_inner(
            dq, q, do, lse, delta, k_src, v_src, row0, full, N_CTX, offs_m, qk_scale, N_CTX,
            HEAD_DIM, BLOCK_N, CAUSAL, True, USE_DESC,
        )  # fmt: skip
    q_tile = (row0 + offs_m[:, None]) * HEAD_DIM + offs_d[None, :]
    tl.store(dq_ptr + q_tile, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _bwd_fused_inner(
    dk, dv, k, v, q_src, do_src, dq_acc, lse_ptr, delta_ptr, row0, lo, hi, offs_n, sm_scale, qk_scale, N_CTX,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, DIAGONAL: tl.constexpr, KEY_TAIL: tl.constexpr,
    USE_DESC: tl.constexpr, DQ_REDUCE: tl.constexpr,
):  # fmt: skip
    """Query blocks [lo, hi) into dK, dV, and each block's share of dQ added to the fp32 ``dq_acc``.
    DIAGONAL: blocks that straddle the causal diagonal; KEY_TAIL: this key block runs past the sequence."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in tl.range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = _bwd_rows(q_src, row0, start_m, N_CTX, HEAD_DIM, BLOCK_M, USE_DESC)
        do = _bwd_rows(do_src, row0, start_m, N_CTX, HEAD_DIM, BLOCK_M, USE_DESC)
        # lse = +inf past the sequence: those query rows get P = exp2(-inf) = 0, so dS = 0 there too.
        lse = tl.load(lse_ptr + row0 + offs_m, mask=offs_m < N_CTX, other=float("inf"))
        delta = tl.load(delta_ptr + row0 + offs_m, mask=offs_m < N_CTX, other=0.0)
        p_t = tl.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])
        # Selects, not multiplies: exp2 of a masked score may overflow to inf.
        if DIAGONAL:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        if KEY_TAIL:
            # Key rows past the sequence (the next head's, or zeros) must not reach dQ.
            p_t = tl.where(offs_n[:, None] < N_CTX, p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        dq = tl.dot(tl.trans(ds_t), k) * sm_scale
        if DQ_REDUCE:
            # TMA reduce-add of the whole tile; rows past the sequence add dS = 0 (into the next head's rows,
            # or clipped at the tensor's end).
            dq_acc.atomic_add([(row0 + start_m).to(tl.int32), 0], dq)
        else:
            dq_ptrs = dq_acc + (row0 + offs_m[:, None]) * HEAD_DIM + offs_d[None, :]
            tl.atomic_add(dq_ptrs, dq, mask=offs_m[:, None] < N_CTX, sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_fused_kernel(
    q_src, k_src, v_src, do_src, dq_acc, dk_ptr, dv_ptr, lse_ptr, delta_ptr,
    sm_scale, N_CTX,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, USE_DESC: tl.constexpr, DQ_REDUCE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Stage 3's backward in one pass (FlashAttention-2 style): a program owns BLOCK_N keys, streams the
    query blocks that see them into dK and dV, and adds each block's dQ = scale · dS K into an fp32 buffer
    with atomics — five matmuls per block pair instead of the two-kernel backward's seven. Non-causal
    programs start at their own query block and wrap around, so the programs of one head do not add into
    the same dQ rows at the same time."""
    bh = tl.program_id(1).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    row0 = bh * N_CTX
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # Key rows past N_CTX: their dK, dV rows are not stored; KEY_TAIL keeps them out of dQ.
    k = _bwd_rows(k_src, row0, start_n, N_CTX, HEAD_DIM, BLOCK_N, USE_DESC)
    v = _bwd_rows(v_src, row0, start_n, N_CTX, HEAD_DIM, BLOCK_N, USE_DESC)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    qk_scale = sm_scale * LOG2E
    if CAUSAL:
        # Padded keys lie above every real query: the diagonal mask removes them.
        mid = tl.minimum(start_n + BLOCK_N, N_CTX)
        dk, dv = _bwd_fused_inner(
            dk, dv, k, v, q_src, do_src, dq_acc, lse_ptr, delta_ptr, row0, start_n, mid, offs_n, sm_scale,
            qk_scale, N_CTX, HEAD_DIM, BLOCK_M, True, False, USE_DESC, DQ_REDUCE,
        )  # fmt: skip
        dk, dv = _bwd_fused_inner(
            dk, dv, k, v, q_src, do_src, dq_acc, lse_ptr, delta_ptr, row0, mid, N_CTX, offs_n, sm_scale,
            qk_scale, N_CTX, HEAD_DIM, BLOCK_M, False, False, USE_DESC, DQ_REDUCE,
        )  # fmt: skip
    elif start_n + BLOCK_N <= N_CTX:
        dk, dv = _bwd_fused_inner(
            dk, dv, k, v, q_src, do_src, dq_acc, lse_ptr, delta_ptr, row0, start_n, N_CTX, offs_n, sm_scale,
            qk_scale, N_CTX, HEAD_DIM, BLOCK_M, False, False, USE_DESC, DQ_REDUCE,
        )  # fmt: skip
        dk, dv = _bwd_fused_inner(
            dk, dv, k, v, q_src, do_src, dq_acc, lse_ptr, delta_ptr, row0, 0, start_n, offs_n, sm_scale,
            qk_scale, N_CTX, HEAD_DIM, BLOCK_M, False, False, USE_DESC, DQ_REDUCE,
        )  # fmt: skip
    else:
        dk, dv = _bwd_fused_inner(
            dk, dv, k, v, q_src, do_src, dq_acc, lse_ptr, delta_ptr, row0, 0, N_CTX, offs_n, sm_scale,
            qk_scale, N_CTX, HEAD_DIM, BLOCK_M, False, True, USE_DESC, DQ_REDUCE,
        )  # fmt: skip
    kv_tile = (row0 + offs_n[:, None]) * HEAD_DIM + offs_d[None, :]
    key_ok = offs_n[:, None] < N_CTX
    tl.store(dk_ptr + kv_tile, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=key_ok)
    tl.store(dv_ptr + kv_tile, dv.to(dv_ptr.dtype.element_ty), mask=key_ok)


# Backward tiles (BLOCK_M, BLOCK_N, num_stages, num_warps) by head-dim class; the last of each list is
# the small-problem tile (see _SMALL_FWD_TILE). The dK/dV program holds two [BLOCK_N, HEAD_DIM] fp32
# accumulators plus K and V, so BLOCK_N 128 wants 8 warps and small query blocks; dQ holds one
# accumulator and streams K and V. Chosen by benchmarks/attention_sweep.py on the H100 (TMA path); on
# the pointer path 64×128 w8 at head_dim 128 spills 40-56 bytes (ptxas -v, sm_90).
_BWD_DKDV_TILES = {
    64: ((32, 128, 3, 8), (64, 64, 3, 4)),
    128: ((64, 128, 2, 8), (32, 128, 3, 8), (32, 64, 3, 4)),
}
_BWD_DQ_TILES = {
    64: ((128, 32, 3, 8), (64, 64, 3, 4)),
    128: ((128, 32, 3, 8), (128, 64, 3, 8), (64, 64, 3, 4)),
}


def _set_bwd_descriptor_blocks(nargs: dict) -> None:
    """Autotune pre-hook of both backward kernels: Q and dO come in BLOCK_M rows, K and V in BLOCK_N."""
    if not nargs["USE_DESC"]:
        return
    d = nargs["HEAD_DIM"]
    for name, block in (("q_src", "BLOCK_M"), ("do_src", "BLOCK_M"), ("k_src", "BLOCK_N"), ("v_src", "BLOCK_N")):
        nargs[name].block_shape = [nargs[block], d]


def _bwd_configs(tiles_by_class: dict) -> list[triton.Config]:
    tiles = dict.fromkeys(t for tiles in tiles_by_class.values() for t in tiles)  # ordered, unique
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w, pre_hook=_set_bwd_descriptor_blocks)
        for (bm, bn, s, w) in tiles
    ]


def _bwd_tiles(tiles_by_class: dict, out: torch.Tensor, seq: int, head_dim: int) -> tuple:
    """The head-dim class's tiles, or its last (small) tile alone when the problem cannot fill the GPU."""
    tiles = tiles_by_class[64 if head_dim <= 64 else 128]
    return tiles if _fills_gpu(out, seq, head_dim) else tiles[-1:]


def _prune_dkdv(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    wanted = _bwd_tiles(_BWD_DKDV_TILES, named_args["dk_ptr"], named_args["N_CTX"], kwargs["HEAD_DIM"])
    return [c for c in configs if _tile_of(c)[:4] in wanted]


def _prune_dq(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    wanted = _bwd_tiles(_BWD_DQ_TILES, named_args["dq_ptr"], named_args["N_CTX"], kwargs["HEAD_DIM"])
    return [c for c in configs if _tile_of(c)[:4] in wanted]


_attn_bwd_dkdv_tuned = parallel_autotune(
    _bwd_configs(_BWD_DKDV_TILES), key=["N_CTX", "HEAD_DIM", "CAUSAL", "USE_DESC"], prune=_prune_dkdv
)(_attn_bwd_dkdv_kernel)
_attn_bwd_dq_tuned = parallel_autotune(
    _bwd_configs(_BWD_DQ_TILES), key=["N_CTX", "HEAD_DIM", "CAUSAL", "USE_DESC"], prune=_prune_dq
)(_attn_bwd_dq_kernel)


# One-pass backward tiles, BLOCK_N % BLOCK_M == 0; the last is the small-problem tile. Stage 3 runs the
# one-pass backward only where it measured faster than the two kernels (see _one_pass): causal at
# head_dim ≤ 64 (H100, 2×16×8192×64: 2.10 ms against 2.35 ms). Elsewhere its fp32 atomics into dQ cost
# more than the two matmuls they save (4×32×4096×128: 8.9 ms against 7.3 ms); larger tiles at head_dim 128
# do not fit shared memory.
_BWD_FUSED_TILES = {
    64: ((64, 64, 3, 4), (64, 64, 2, 4)),
    128: ((32, 64, 3, 4), (32, 64, 2, 4)),
}


def _one_pass(causal: bool, head_dim: int) -> bool:
    """Whether stage 3's backward runs the one-pass kernel (measured faster there) or the two kernels."""
    return causal and head_dim <= 64


def _prepare_fused(nargs: dict) -> None:
    """Pre-hook of the one-pass backward: descriptor block shapes, and dQ's fp32 accumulator zeroed before
    every run (the autotuner runs each config several times into the same buffer)."""
    _set_bwd_descriptor_blocks(nargs)
    acc = nargs["dq_acc"]
    if nargs["DQ_REDUCE"]:
        acc.block_shape = [nargs["BLOCK_M"], nargs["HEAD_DIM"]]
        acc = acc.base
    acc.zero_()


def _prune_fused(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    wanted = _bwd_tiles(_BWD_FUSED_TILES, named_args["dk_ptr"], named_args["N_CTX"], kwargs["HEAD_DIM"])
    return [c for c in configs if _tile_of(c)[:4] in wanted]


_attn_bwd_fused_tuned = parallel_autotune(
    [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w, pre_hook=_prepare_fused)
        for (bm, bn, s, w) in dict.fromkeys(t for tiles in _BWD_FUSED_TILES.values() for t in tiles)
    ],
    key=["N_CTX", "HEAD_DIM", "CAUSAL", "USE_DESC", "DQ_REDUCE"],
    prune=_prune_fused,
)(_attn_bwd_fused_kernel)


# ------------------------------------------------------------------------------------------------
# Launchers
# ------------------------------------------------------------------------------------------------


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: object) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"attention: {name} must be 4-D [batch, heads, seq, head_dim]; got {tuple(t.shape)}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"attention: q, k, v must have one shape [batch, heads, seq, head_dim]; got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)} (cross-attention lengths are not supported)"
        )
    if q.dtype not in _SUPPORTED_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"attention: q, k, v must all be float16 or bfloat16; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] not in _HEAD_DIMS:
        raise ValueError(f"attention: head_dim must be one of {_HEAD_DIMS}; got {q.shape[-1]} (pad it)")
    if not (q.device == k.device == v.device):
        raise ValueError(f"attention: q, k, v are on different devices ({q.device}, {k.device}, {v.device})")
    if q.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"attention: tensors are on {q.device}; Triton needs a CUDA device, or TRITON_INTERPRET=1 for CPU tensors"
        )
    if not isinstance(causal, bool):
        raise ValueError(f"attention: causal must be a bool; got {causal!r}")


def _strides(*ts: torch.Tensor) -> tuple[int, ...]:
    return tuple(s for t in ts for s in t.stride())


def _lse_buffer(q: torch.Tensor, store_lse: bool) -> torch.Tensor | None:
    B, H, S, _ = q.shape
    return torch.empty((B * H, S), dtype=torch.float32, device=q.device) if store_lse else None


def _attention_stage12(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    tuned: bool,
    store_lse: bool = False,
    config: triton.Config | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stages 1-2; ``config`` (stage 2) runs one tile instead of autotuning (tests sweep the space)."""
    B, H, S, D = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = _lse_buffer(q, store_lse)
    if o.numel() == 0:
        return o, lse
    args = (q, k, v, o, lse, 1.0 / math.sqrt(D), H, S, *_strides(q, k, v, o))
    flags = {"HEAD_DIM": D, "CAUSAL": causal, "STORE_LSE": store_lse}
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)
    if not tuned:
        cfg = _INTERPRETER_CONFIG if interpreting() else _STAGE1_CONFIG
        _attn_fwd_kernel[grid](*args, **flags, **cfg, num_warps=_STAGE1_WARPS, num_stages=_STAGE1_STAGES)
    elif interpreting():
        _attn_fwd_tuned.fn[grid](*args, **flags, **_INTERPRETER_CONFIG)
    elif config is not None:
        _attn_fwd_tuned.fn[grid](*args, **flags, **config.all_kwargs())
    else:
        _attn_fwd_tuned[grid](*args, **flags)
    return o, lse


@functools.cache
def _capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


def _descriptors_usable(*ts: torch.Tensor) -> bool:
    """TMA: sm_90+, contiguous [B, H, S, D] (viewed as [B·H·S, D]), 16-byte aligned base pointers."""
    if _TensorDescriptor is None:
        return False
    if not interpreting() and (ts[0].device.type != "cuda" or _capability(ts[0].device.index or 0)[0] < 9):
        return False
    return all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in ts)


def _attention_stage3(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    use_desc: bool | None = None,
    store_lse: bool = False,
    config: triton.Config | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stage 3; ``config`` runs one tile instead of autotuning (tests sweep the space). On an sm_90 GPU
    the Gluon kernel of ``attention_hopper`` serves the forward where it applies, unless ``use_desc`` or
    ``config`` asks for the Triton kernels."""
    B, H, S, D = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = _lse_buffer(q, store_lse)
    if o.numel() == 0:
        return o, lse
    if use_desc is None and config is None and attention_hopper.usable(q, k, v):
        attention_hopper.forward(q, k, v, causal, o, lse)
        return o, lse
    if use_desc is None:
        use_desc = _descriptors_usable(q, k, v)
    elif use_desc and not _descriptors_usable(q, k, v):
        raise ValueError("attention: use_desc=True needs contiguous, 16-byte aligned inputs on sm_90+")
    if use_desc:
        # Placeholder block shapes; the autotune pre-hook (or the interpreter branch) sets them.
        srcs = tuple(_TensorDescriptor.from_tensor(t.view(B * H * S, D), [16, D]) for t in (q, k, v))
    else:
        srcs = (q, k, v)
    args = (*srcs, o, lse, 1.0 / math.sqrt(D), H, S, *_strides(q, k, v, o))
    flags = {"HEAD_DIM": D, "CAUSAL": causal, "USE_DESC": use_desc, "STORE_LSE": store_lse}
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)
    if interpreting():
        config = triton.Config(_INTERPRETER_CONFIG)
    if config is not None:
        _set_descriptor_blocks({"q_src": srcs[0], "k_src": srcs[1], "v_src": srcs[2], **flags, **config.kwargs})
        _attn_fwd_split_tuned.fn[grid](*args, **flags, **config.all_kwargs())
    else:
        _attn_fwd_split_tuned[grid](*args, **flags)
    return o, lse


def _attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    causal: bool,
    configs: tuple[triton.Config, triton.Config] | None = None,
    use_desc: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV; ``configs`` (dK/dV, dQ) run fixed tiles instead of autotuning (tests sweep them);
    ``use_desc`` None: TMA descriptors where usable (sm_90+)."""
    B, H, S, D = q.shape
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if q.numel() == 0:
        return dq, dk, dv
    delta = _delta(o, do, lse)
    if use_desc is None:
        use_desc = _descriptors_usable(q, k, v, do)
    sm_scale = 1.0 / math.sqrt(D)
    flags = {"HEAD_DIM": D, "CAUSAL": causal, "USE_DESC": use_desc}

    def sources() -> tuple:
        # One set per kernel: the pre-hooks give each its own block shapes.
        if not use_desc:
            return (q, k, v, do)
        # Placeholder block shapes; _set_bwd_descriptor_blocks sets them per config.
        return tuple(_TensorDescriptor.from_tensor(t.view(B * H * S, D), [16, D]) for t in (q, k, v, do))

    dkdv_args = (*sources(), dk, dv, lse, delta, sm_scale, S)
    dq_args = (*sources(), dq, lse, delta, sm_scale, S)
    dkdv_grid = lambda meta: (triton.cdiv(S, meta["BLOCK_N"]), B * H)
    dq_grid = lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)
    if interpreting():
        configs = (triton.Config(_INTERPRETER_BWD_DKDV), triton.Config(_INTERPRETER_BWD_DQ))
    if configs is not None:
        for kernel, grid, args, cfg in (
            (_attn_bwd_dkdv_tuned, dkdv_grid, dkdv_args, configs[0]),
            (_attn_bwd_dq_tuned, dq_grid, dq_args, configs[1]),
        ):
            names = dict(zip(("q_src", "k_src", "v_src", "do_src"), args[:4], strict=True))
            _set_bwd_descriptor_blocks({**names, **flags, **cfg.kwargs})
            kernel.fn[grid](*args, **flags, **cfg.all_kwargs())
    else:
        _attn_bwd_dkdv_tuned[dkdv_grid](*dkdv_args, **flags)
        _attn_bwd_dq_tuned[dq_grid](*dq_args, **flags)
    return dq, dk, dv


def _attention_backward_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    causal: bool,
    config: triton.Config | None = None,
    use_desc: bool | None = None,
    dq_reduce: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 3's one-pass backward: dQ, dK, dV. ``config`` runs one tile instead of autotuning; ``use_desc``
    None: TMA descriptors where usable; ``dq_reduce`` None: dQ added by TMA reduce where descriptors are
    used on a GPU, else by pointer atomics (the interpreter has no TMA reduce)."""
    B, H, S, D = q.shape
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    if q.numel() == 0:
        return torch.empty_like(q), dk, dv
    delta = _delta(o, do, lse)
    if use_desc is None:
        use_desc = _descriptors_usable(q, k, v, do)
    if dq_reduce is None:
        dq_reduce = use_desc and not interpreting()
    elif dq_reduce and (interpreting() or not use_desc):
        raise ValueError("attention: dq_reduce=True needs TMA descriptors on a GPU")
    # The pre-hook zeroes it before each run.
    dq_acc = torch.empty((B * H * S, D), dtype=torch.float32, device=q.device)
    if use_desc:
        # Placeholder block shapes; _prepare_fused sets them per config.
        srcs = tuple(_TensorDescriptor.from_tensor(t.view(B * H * S, D), [16, D]) for t in (q, k, v, do))
    else:
        srcs = (q, k, v, do)
    acc = _TensorDescriptor.from_tensor(dq_acc, [16, D]) if dq_reduce else dq_acc
    flags = {"HEAD_DIM": D, "CAUSAL": causal, "USE_DESC": use_desc, "DQ_REDUCE": dq_reduce}
    args = (*srcs, acc, dk, dv, lse, delta, 1.0 / math.sqrt(D), S)
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_N"]), B * H)
    if interpreting():
        config = triton.Config(_INTERPRETER_BWD_DKDV)
    if config is not None:
        names = dict(zip(("q_src", "k_src", "v_src", "do_src"), srcs, strict=True))
        _prepare_fused({**names, "dq_acc": acc, **flags, **config.kwargs})
        _attn_bwd_fused_tuned.fn[grid](*args, **flags, **config.all_kwargs())
    else:
        _attn_bwd_fused_tuned[grid](*args, **flags)
    return dq_acc.view(B, H, S, D).to(q.dtype), dk, dv


def _attention_backward_hopper(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    causal: bool,
    **schedule: bool | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 3's backward on sm_90 (``attention_hopper_bwd``), for contiguous inputs it serves: dQ, dK, dV.
    ``schedule``: ``attention_hopper_bwd.backward``'s options; left out, its measured choice. dQ's fp32 buffer
    is zeroed by the pass that forms delta (reads O and dO), not by a fill of its own."""
    dq_acc = torch.empty(o.shape, dtype=torch.float32, device=o.device)
    delta = _delta(o, do, lse, dq_acc)
    return attention_hopper_bwd.backward(
        q, k, v, do, lse, delta, causal, dq_acc=dq_acc.view(-1, o.shape[-1]), **schedule
    )


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, stage: int) -> torch.Tensor:
        # The row log-sum-exp is written only when a backward will need it.
        store_lse = any(ctx.needs_input_grad[:3])
        if stage == 3:
            o, lse = _attention_stage3(q, k, v, causal, store_lse=store_lse)
        else:
            o, lse = _attention_stage12(q, k, v, causal, tuned=stage == 2, store_lse=store_lse)
        if store_lse:
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.stage = causal, stage
        return o

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, o, lse = ctx.saved_tensors
        if ctx.stage == 3:
            q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
        if ctx.stage == 3 and attention_hopper_bwd.usable(q, k, v, do):
            dq, dk, dv = _attention_backward_hopper(q, k, v, o, lse, do, ctx.causal)
            return dq, dk, dv, None, None
        one_pass = ctx.stage == 3 and _one_pass(ctx.causal, q.shape[-1])
        backward = _attention_backward_fused if one_pass else _attention_backward
        dq, dk, dv = backward(q, k, v, o, lse, do, ctx.causal)
        return dq, dk, dv, None, None


# ------------------------------------------------------------------------------------------------
# Public functions
# ------------------------------------------------------------------------------------------------


def attention_stage1(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ/√d) v, one fixed tile, every block masked (stage 1). Differentiable."""
    _check_inputs(q, k, v, causal)
    return _Attention.apply(q, k, v, causal, 1)


def attention_stage2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ/√d) v, autotuned tiles (stage 2). Differentiable."""
    _check_inputs(q, k, v, causal)
    return _Attention.apply(q, k, v, causal, 2)


def attention_stage3(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ/√d) v, mask only where needed, heavy-first causal order, TMA on Hopper (stage 3).
    Differentiable."""
    _check_inputs(q, k, v, causal)
    return _Attention.apply(q, k, v, causal, 3)


attention = attention_stage3


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """torch's fused attention with the backend torch picks: on an H200 with torch 2.11 it ran at the speed
    of its cuDNN backend (~600 TFLOP/s at head_dim 128 in bf16, results/h200/tuning_sweep.txt); in float64
    or on the CPU, the math backend, so it also serves as the float64 reference of the tests."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """torch's SDPA held to its FlashAttention-2 backend, the bar's baseline (GPU, fp16/bf16 only). Its
    backward, recorded with the forward, is flash's too."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def manual_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Plain PyTorch: scores and probabilities materialised in fp32, result cast to the input dtype
    (the unfused computation the kernels replace)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if causal:
        S = q.shape[-2]
        above = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(above, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)


# ------------------------------------------------------------------------------------------------
# SPEC
# ------------------------------------------------------------------------------------------------


def _make_inputs(dims, dtype: torch.dtype, device: str) -> tuple:
    shape = (dims["B"], dims["H"], dims["S"], dims["D"])
    return tuple(torch.randn(shape, device=device).to(dtype) for _ in range(3))


def _dims_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> dict:
    B, H, S, D = q.shape
    return {"B": B, "H": H, "S": S, "D": D, "causal": int(causal)}


def _bytes_moved(dims, dtype: torch.dtype) -> int:
    return 4 * dims["B"] * dims["H"] * dims["S"] * dims["D"] * dtype.itemsize


def _flops(dims, dtype: torch.dtype) -> int:
    full = 4 * dims["B"] * dims["H"] * dims["S"] * dims["S"] * dims["D"]
    return full // 2 if dims.get("causal", 0) else full


def _case(label: str, B: int, H: int, S: int, D: int, causal: bool, small: bool = True) -> Case:
    return Case(label, {"B": B, "H": H, "S": S, "D": D, "causal": int(causal)}, small=small)


SPEC = KernelSpec(
    name="attention",
    summary="FlashAttention forward: softmax(Q Kᵀ/√d [causal]) V with online softmax, fp16/bf16",
    make_inputs=_make_inputs,
    reference=reference_attention,
    stages={1: attention_stage1, 2: attention_stage2, 3: attention_stage3},
    cases=(
        _case("seq 64, d 64, whole blocks", 1, 2, 64, 64, False),
        _case("seq 64, d 64, causal", 1, 2, 64, 64, True),
        _case("seq 40 → tail block masked", 2, 1, 40, 64, False),
        _case("seq 40, causal → diagonal + tail", 2, 1, 40, 64, True),
        _case("d 128, seq 48, causal", 1, 1, 48, 128, True),
        _case("d 32, seq 16 (one block)", 1, 2, 16, 32, False),
        _case("seq 1000 non-pow2, causal (GPU)", 2, 4, 1000, 64, True, small=False),
        _case("seq 1024, d 128 (GPU)", 2, 4, 1024, 128, False, small=False),
    ),
    # Sized to ~5.5e11 useful FLOPs each (causal counts half), ~1.3 ms at 400 TFLOP/s.
    bench_cases=(
        _case("B4 H32 S4096 d64", 4, 32, 4096, 64, False, small=False),
        _case("B8 H32 S4096 d64 causal", 8, 32, 4096, 64, True, small=False),
        _case("B2 H32 S4096 d128", 2, 32, 4096, 128, False, small=False),
        _case("B4 H32 S4096 d128 causal", 4, 32, 4096, 128, True, small=False),
        _case("B2 H16 S8192 d64", 2, 16, 8192, 64, False, small=False),
        _case("B4 H16 S8192 d64 causal", 4, 16, 8192, 64, True, small=False),
        _case("B1 H16 S8192 d128", 1, 16, 8192, 128, False, small=False),
        _case("B2 H16 S8192 d128 causal", 2, 16, 8192, 128, True, small=False),
        _case("B1 H8 S16384 d128 causal", 1, 8, 16384, 128, True, small=False),
    ),
    dtypes=(torch.float16, torch.bfloat16),
    # The interpreter sweeps these; bf16 runs one case per kernel (tests/reference_kernels), as the engine's
    # patched interpreter computes bf16 as the GPU does (mcp_server/engine/interp/rounding.py, bf16math.py).
    interpreter_dtypes=(torch.float16,),
    tolerances={
        # P is rounded to the input dtype before the PV matmul (as in FlashAttention); the fp32
        # reference does not round, so differences of a few ulps of O are expected.
        torch.float16: Tolerance(atol=1e-2, rtol=1e-2),
        torch.bfloat16: Tolerance(atol=3e-2, rtol=2e-2),
    },
    bytes_moved=_bytes_moved,
    flops=_flops,
    dims_of=_dims_of,
    grad_inputs=(0, 1, 2),
    bar=(
        "≥ 90 % of torch SDPA's flash backend and ≥ 1.0× SDPA's own pick (cuDNN on Hopper), forward and "
        "forward + backward, at seq ≥ 4096, fp16/bf16, head_dim 64 and 128"
    ),
    call_kwargs=lambda dims: {"causal": bool(dims.get("causal", 0))},
)

get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
