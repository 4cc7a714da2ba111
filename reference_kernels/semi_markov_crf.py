"""Semi-Markov CRF forward scan (log partition function or Viterbi score), with marginals as backward.

Model. A sequence of T emission positions is split into contiguous segments, each of length k ∈ [1, K]
and carrying one label c ∈ [0, C). With prefix sums ``S[t, c] = Σ_{i<t} emissions[i, c]`` the segment
covering positions s … t−1 (boundaries s < t, k = t − s) with label c, preceded by a segment of label c',
scores

    seg(s, t, c', c) = S[t, c] − S[s, c] + durations[k−1, c] + transitions[c', c]

(the first segment, s = 0, has no transition term). Over boundaries t = 1 … L (L = lengths[b]):

    u[0, c]     = 0                                               (start: nothing to transition from)
    alpha[t, c] = ⊕_{k=1..min(K,t)} u[t−k, c] ⊗ (S[t, c] − S[t−k, c] + durations[k−1, c])
    u[t, c]     = ⊕_{c'} alpha[t, c'] ⊗ transitions[c', c]
    result[b]   = ⊕_c alpha[L, c]

which is exactly ``alpha[t, c] = ⊕_{k, c'} alpha[t−k, c'] ⊗ seg(t−k, t, c', c)``, the textbook recursion,
with the c' sum hoisted out of the k sum (distributivity). Log semiring (⊕ = logsumexp, ⊗ = +) gives
log Z; max semiring (⊕ = max) gives the Viterbi score.

Why this parameterisation rather than a dense ``edge[B, T, K, C, C]`` tensor: every neural semi-CRF scores
a segment as (sum of its emissions) + (duration score) + (label transition), and the dense tensor of
those is 32·1024·32·24·24·4 B = 2.4 GB at the benchmark size, where these inputs are 3 MB — so the dense
form is only ever a materialisation of this one. The factorised recursion also costs O(K·C + C²) per step
instead of O(K·C²). The PyTorch reference below implements the same recursion, so the speed-up measured
is the kernel's, not the algorithm's.

Backward (log semiring): the gradients of log Z are marginals. The outside (beta) recursion is the same
scan run on the time-reversed sequence with transposed transitions (a semi-CRF read backwards is a
semi-CRF), so with ``ar, ur`` = alpha, u of the reversed run:
``P(a segment ends at t with label c) = exp(alpha[t,c] + ur[L−t,c] − log Z)``,
``P(a segment starts after t with label c) = exp(u[t,c] + ar[L−t,c] − log Z)``, and the emission,
duration and transition gradients are sums of such terms (see ``_crf_marginals_kernel``). When gradients
are needed the forward launches both directions in one grid (they are independent), so the backward is
one parallel marginal pass. Max semiring: the gradient of the Viterbi score is the indicator of the best
segmentation, found by backtracking (``_crf_viterbi_backtrace_kernel``).

Programs → data: the scan is sequential in t, so one program owns one (batch element, direction) and
loops over t; state is a ring buffer of the last K boundaries' vectors (O(K·C), not O(T·C)): in stages
1-2 ``u[s] − S[s]``, with the prefix S[t] added back at each step; in stage 3 ``u[s]`` plus the emissions
since s, grown by each step's emission row.
  stage 1  straightforward: a C-vector per step, loops over k and over c', ring and alpha in a global
           scratch row (L1/L2-resident), CTA barriers between the writes and reads of each step.
  stage 2  vectorised: the k-reduction is one [K_PAD, C_PAD] tile and the c'-reduction one
           [C_PAD, C_PAD] tile (transitions loaded once into registers); ring still in global scratch;
           num_warps autotuned.
  stage 3  the ring lives in registers (a [K_PAD, C_PAD] tile updated with a select), so a step touches
           memory only for the next emission row and the rotated duration rows, which are prefetched one
           step ahead; exponentials and logarithms as exp2/log2 (single MUFU ops) of (x − m)·log2 e,
           values in natural units (float32's whole range); each ring slot carries its segment's
           emissions itself (see the stage-3 kernel), so no prefix difference enters the scan.
Padding: C_PAD, K_PAD are powers of two; padded labels carry -inf scores, padded ring slots hold -inf.

Offsets: left alone, alpha and u grow by a few units per step (log Z ≈ 1000 at T = 256), so each step
rounds them at ulp(1000) ≈ 6e-5 in float32. Those rounding errors random-walk along the scan, and the
backward's exp(alpha + beta − log Z) turns an absolute error in the exponent into the same relative
error in a marginal: ≈ 1e-3 at T = 256, ten times autograd through the float32 PyTorch recursion. So
each run carries an integer-valued offset: at step t it grows by floor(max_c u[t−1]) (the previous
step's u, so this reduction overlaps the step's k-reduction); alpha and u are kept, and saved, relative
to it; in stages 1-2 each ring slot remembers the offset it was written under, in stage 3 every slot
moves with the offset. Integers below 2^24 add exactly in float32, so the backward and the Viterbi
backtrace combine offsets without rounding and only numbers of order one are ever rounded; stage 3's
offset stops growing past 2^24 (there rounding is at the inputs' own scale, and differences with a
larger offset could overflow).

Bytes moved (forward floor): emissions, transitions, durations and lengths read once, result written
once: ``(B·T·C + C² + K·C + B)·4 + 8·B`` bytes. The scan is latency-bound (T dependent steps, each a
couple of reductions), so it runs far from this floor; the forward with gradients also writes alpha, u
(both directions) and S: ``5·B·(T+1)·C·4`` bytes more. FLOPs: 5 per (k, c) and per (c', c) element and
step (potential add + max, subtract, exp, add of the logsumexp): ``5·B·T·(K·C + C²)``.

Limits: float32 only; lengths in [1, T] (int tensor [B], default all T); C ≤ 128 and K ≤ 128 (the
per-step tiles are held in registers). Special values (stage 3): a score past float32's range is ±inf;
a −inf emission, transition or duration rules that choice out; a NaN the scan reads makes the result
NaN, one it never reads (a duration of a length no segment reaches) does not. Stages 1-2 form segment
sums as prefix differences, which give NaN once a prefix sum passes float32's range (inf − inf), as the
PyTorch reference does. The backward works from log Z in float32: where log Z passes float32's range the
marginals are NaN (float64 has them), as in the PyTorch reference run in float32.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import triton
import triton.language as tl

from reference_kernels._autotune import ParallelAutotuner, parallel_autotune
from reference_kernels._common import interpreting
from reference_kernels._spec import Case, KernelSpec, Tolerance

# ------------------------------------------------------------------------------------------------
# Constants
# ------------------------------------------------------------------------------------------------

SEMIRINGS = {"log": 0, "max": 1}
# The per-step tiles [K_PAD, C_PAD] and [C_PAD, C_PAD] live in registers. ptxas -v (sm_90): 32 × 32 runs
# spill-free at 1-8 warps, 64 × 64 only at 8 warps; 128 × 128 at 16 warps holds the same 32 values per
# thread per tile as 32 × 32 at 1 warp. Beyond that the scan would live in local memory.
_MAX_C = 128
_MAX_K = 128
# Smallest padded extent: 2 keeps every tile two-dimensional in the compiler (size-1 dims of tl.arange
# are legal but fold away and change layouts for no gain).
_MIN_PAD = 2
# The marginal pass works on [BLOCK_T, K_PAD, C_PAD] and [BLOCK_T, C_PAD, C_PAD] tiles; 8192 elements per
# tile (64 per thread at 4 warps) is 8 positions per block at K_PAD = C_PAD = 32.
_MARGINAL_TILE_ELEMENTS = 8192
# exp2/log2 in stage 3's reductions (tl.constexpr: read inside kernels).
LOG2E = tl.constexpr(math.log2(math.e))
# Stage 3's offset steps stop past this magnitude (integers below it add exactly in float32).
OFFSET_LIMIT = tl.constexpr(2.0**24)
LN2 = tl.constexpr(math.log(2.0))

# The scan is latency-bound: one warp keeps every reduction inside the warp (shuffles, no CTA barrier);
# more warps spread the K·C and C² exponentials over more SM sub-partitions. Which wins depends on
# the tile size, so it is tuned, over the warp counts that leave each thread at least 4 elements of the
# larger per-step tile (fewer turn every reduction into cross-warp barrier traffic): 1-8 warps at
# K_PAD = C_PAD = 32, one warp (nothing to time) for tiles of ≤ 128 elements. num_stages 1: nothing in
# the t-loop feeds a dot.
_SCAN_CONFIGS = [triton.Config({}, num_warps=w, num_stages=1) for w in (1, 2, 4, 8, 16)]
_MIN_ELEMENTS_PER_THREAD = 4


# ------------------------------------------------------------------------------------------------
# Triton helpers
# ------------------------------------------------------------------------------------------------


@triton.jit
def _max_nan(a, b):
    # tl.max passes over NaN (a NaN input would vanish from a Viterbi score, or read as -inf): not here.
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _reduce(x, axis: tl.constexpr, SEMIRING: tl.constexpr):
    """Semiring sum along ``axis`` in natural units: logsumexp (0) or max (1); all -inf → -inf; a NaN
    among the x → NaN."""
    m = tl.reduce(x, axis, _max_nan)
    if SEMIRING == 0:
        # Rows that are all -inf (padding) would give -inf - -inf = nan and log(0): shift by 0, take
        # log(1), and put the -inf back.
        empty = m == float("-inf")
        m_safe = tl.where(empty, 0.0, m)
        total = tl.sum(tl.exp(x - tl.expand_dims(m_safe, axis)), axis)
        m = tl.where(empty, float("-inf"), m_safe + tl.log(tl.where(empty, 1.0, total)))
    return m


@triton.jit
def _reduce2(x, axis: tl.constexpr, SEMIRING: tl.constexpr):
    """As ``_reduce``, with exp2/log2 (single MUFU ops): exp(x − m) = exp2((x − m)·log2 e), x in natural
    units (inputs scaled by log2 e, or x·log2 e − m·log2 e as one FMA, would cost float32 a third of its
    range). A +inf among the x (a score past float32's range) gives +inf, where shifting by it would give
    inf − inf."""
    m = tl.reduce(x, axis, _max_nan)
    if SEMIRING == 0:
        infinite = tl.abs(m) == float("inf")
        m_safe = tl.where(infinite, 0.0, m)
        total = tl.sum(tl.exp2((x - tl.expand_dims(m_safe, axis)) * LOG2E), axis)
        m = tl.where(infinite, m, m_safe + tl.log2(tl.where(infinite, 1.0, total)) * LN2)
    return m


@triton.jit
def _online_add(m, s, x, SEMIRING: tl.constexpr):
    """Fold x into a running semiring sum kept as (max m, scaled sum s); s unused for max."""
    m_new = _max_nan(m, x)
    if SEMIRING == 0:
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
    return m_new, s


@triton.jit
def _online_result(m, s, SEMIRING: tl.constexpr):
    if SEMIRING == 0:
        empty = m == float("-inf")
        m = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, s)))
    return m


@triton.jit
def _scan_setup(len_ptr, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, stride_tf, stride_tt,
                stride_dir_s, stride_sb, stride_od, stride_ob, ring_stride_dir, ring_stride_b):  # fmt: skip
    """Per-program pointers: (b, direction) → its length, result slot, saved rows and scratch ring.

    Direction 1 is the time-reversed run: it reads emissions back to front and transitions transposed.
    """
    b = tl.program_id(0).to(tl.int64)
    rev = tl.program_id(1)
    L = tl.load(len_ptr + b).to(tl.int32)
    out_ptr += rev * tl.num_programs(0) + b
    alpha_ptr += rev * stride_dir_s + b * stride_sb
    u_ptr += rev * stride_dir_s + b * stride_sb
    off_ptr += rev * stride_od + b * stride_ob
    ring_ptr += rev * ring_stride_dir + b * ring_stride_b
    s_from = tl.where(rev == 1, stride_tt, stride_tf)
    s_to = tl.where(rev == 1, stride_tf, stride_tt)
    return b, rev, L, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, s_from, s_to


# ------------------------------------------------------------------------------------------------
# Kernels: forward scans (grid = (batch, directions))
# ------------------------------------------------------------------------------------------------


@triton.jit
def _crf_scan_simple_kernel(
    em_ptr, trans_ptr, dur_ptr, len_ptr, out_ptr, alpha_ptr, u_ptr, off_ptr, prefix_ptr, ring_ptr,
    C, K,
    stride_eb, stride_et, stride_ec, stride_tf, stride_tt, stride_dk, stride_dc,
    stride_dir_s, stride_sb, stride_st, stride_od, stride_ob, ring_stride_dir, ring_stride_b,
    SEMIRING: tl.constexpr, STORE: tl.constexpr, K_PAD: tl.constexpr, C_PAD: tl.constexpr,
):  # fmt: skip
    """Stage 1: vectors over c only; scalar loops over k and c'; ring rows [K_PAD] + alpha row in scratch."""
    b, rev, L, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, s_from, s_to = _scan_setup(
        len_ptr, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, stride_tf, stride_tt,
        stride_dir_s, stride_sb, stride_od, stride_ob, ring_stride_dir, ring_stride_b,
    )  # fmt: skip
    cs = tl.arange(0, C_PAD)
    c_ok = cs < C
    alpha_row = ring_ptr + K_PAD * C_PAD  # one extra scratch row after the ring: the current alpha
    # Slot 0 holds u[0] − S[0] = 0; padded labels are -inf everywhere so they never contribute.
    tl.store(ring_ptr + cs, tl.where(c_ok, 0.0, float("-inf")))
    if STORE:
        tl.store(u_ptr + cs, tl.zeros((C_PAD,), tl.float32), mask=c_ok)
        tl.store(alpha_ptr + cs, tl.full((C_PAD,), float("-inf"), tl.float32), mask=c_ok)
        tl.store(off_ptr, 0.0)
        if rev == 0:
            tl.store(prefix_ptr + b * stride_sb + cs, tl.zeros((C_PAD,), tl.float32), mask=c_ok)
    tl.debug_barrier()

    S = tl.zeros((C_PAD,), tl.float32)
    alpha = tl.full((C_PAD,), float("-inf"), tl.float32)
    u = tl.where(c_ok, 0.0, float("-inf"))
    # Offsets (see "Offsets" in the module docstring): the current one, and each ring slot's.
    slots = tl.arange(0, K_PAD)
    offset = tl.sum(tl.zeros((C_PAD,), tl.float32), 0)
    slot_offsets = tl.zeros((K_PAD,), tl.float32)
    for t in range(1, L + 1):
        pos = tl.where(rev == 1, L - t, t - 1)
        # other=0: padded labels add nothing to the prefix sum (their scores are -inf anyway).
        S += tl.load(em_ptr + b * stride_eb + pos * stride_et + cs * stride_ec, mask=c_ok, other=0.0)
        step = tl.floor(tl.max(u, 0))
        m = tl.full((C_PAD,), float("-inf"), tl.float32)
        s = tl.zeros((C_PAD,), tl.float32)
        for k in range(1, tl.minimum(K, t) + 1):
            slot = (t - k) % K
            r = tl.load(ring_ptr + slot * C_PAD + cs)
            d = tl.load(dur_ptr + (k - 1) * stride_dk + cs * stride_dc, mask=c_ok, other=0.0)
            shift = tl.sum(tl.where(slots == slot, slot_offsets, 0.0), 0) - offset
            m, s = _online_add(m, s, r + d + shift, SEMIRING)
        alpha = S + _online_result(m, s, SEMIRING) - step
        offset += step
        tl.store(alpha_row + cs, alpha)
        tl.debug_barrier()  # every thread reads every alpha[c'] below

        m = tl.full((C_PAD,), float("-inf"), tl.float32)
        s = tl.zeros((C_PAD,), tl.float32)
        for cp in range(0, C):
            a = tl.load(alpha_row + cp)
            # other=-inf: no transition into a padded label.
            tr = tl.load(trans_ptr + cp * s_from + cs * s_to, mask=c_ok, other=float("-inf"))
            m, s = _online_add(m, s, a + tr, SEMIRING)
        u = _online_result(m, s, SEMIRING)
        tl.store(ring_ptr + (t % K) * C_PAD + cs, u - S)
        slot_offsets = tl.where(slots == t % K, offset, slot_offsets)
        if STORE:
            tl.store(alpha_ptr + t * stride_st + cs, alpha, mask=c_ok)
            tl.store(u_ptr + t * stride_st + cs, u, mask=c_ok)
            tl.store(off_ptr + t, offset)
            if rev == 0:
                tl.store(prefix_ptr + b * stride_sb + t * stride_st + cs, S, mask=c_ok)
        tl.debug_barrier()  # ring slot t % K is read by other threads next step

    tl.store(out_ptr, offset + _reduce(alpha, 0, SEMIRING))


@triton.jit
def _crf_scan_tiled_kernel(
    em_ptr, trans_ptr, dur_ptr, len_ptr, out_ptr, alpha_ptr, u_ptr, off_ptr, prefix_ptr, ring_ptr,
    C, K,
    stride_eb, stride_et, stride_ec, stride_tf, stride_tt, stride_dk, stride_dc,
    stride_dir_s, stride_sb, stride_st, stride_od, stride_ob, ring_stride_dir, ring_stride_b,
    SEMIRING: tl.constexpr, STORE: tl.constexpr, K_PAD: tl.constexpr, C_PAD: tl.constexpr,
):  # fmt: skip
    """Stage 2: one [K_PAD, C_PAD] tile per k-reduction, one [C_PAD, C_PAD] tile per c'-reduction."""
    b, rev, L, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, s_from, s_to = _scan_setup(
        len_ptr, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, stride_tf, stride_tt,
        stride_dir_s, stride_sb, stride_od, stride_ob, ring_stride_dir, ring_stride_b,
    )  # fmt: skip
    cs = tl.arange(0, C_PAD)
    slots = tl.arange(0, K_PAD)
    c_ok = cs < C
    tile_ok = (slots[:, None] < K) & c_ok[None, :]
    # trans[c', c] once into registers; other=-inf: padded labels neither send nor receive.
    trans = tl.load(
        trans_ptr + cs[:, None] * s_from + cs[None, :] * s_to, mask=c_ok[:, None] & c_ok[None, :], other=float("-inf")
    )
    ring_tile = ring_ptr + slots[:, None] * C_PAD + cs[None, :]
    # Slot 0 = u[0] − S[0] = 0; every other slot -inf until written, so at t < K the slots of
    # not-yet-existing boundaries (and padded slots ≥ K, never written) contribute nothing: no mask.
    tl.store(ring_tile, tl.where((slots[:, None] == 0) & c_ok[None, :], 0.0, float("-inf")))
    if STORE:
        tl.store(u_ptr + cs, tl.zeros((C_PAD,), tl.float32), mask=c_ok)
        tl.store(alpha_ptr + cs, tl.full((C_PAD,), float("-inf"), tl.float32), mask=c_ok)
        tl.store(off_ptr, 0.0)
        if rev == 0:
            tl.store(prefix_ptr + b * stride_sb + cs, tl.zeros((C_PAD,), tl.float32), mask=c_ok)
    tl.debug_barrier()

    S = tl.zeros((C_PAD,), tl.float32)
    alpha = tl.full((C_PAD,), float("-inf"), tl.float32)
    u = tl.where(c_ok, 0.0, float("-inf"))
    offset = tl.sum(tl.zeros((C_PAD,), tl.float32), 0)
    slot_offsets = tl.zeros((K_PAD,), tl.float32)
    for t in range(1, L + 1):
        pos = tl.where(rev == 1, L - t, t - 1)
        S += tl.load(em_ptr + b * stride_eb + pos * stride_et + cs * stride_ec, mask=c_ok, other=0.0)
        # Slot j holds boundary s ≡ j (mod K), i.e. segment length k = ((t − 1 − j) mod K) + 1.
        k_minus_1 = (t - 1 - slots + K) % K
        # other=0: padded slots/labels are -inf in the ring already.
        dur = tl.load(dur_ptr + k_minus_1[:, None] * stride_dk + cs[None, :] * stride_dc, mask=tile_ok, other=0.0)
        ring = tl.load(ring_tile)
        # The new offset comes from the previous u, so its reduction overlaps the k-reduction.
        step = tl.floor(tl.max(u, 0))
        alpha = S + _reduce(ring + dur + (slot_offsets - offset)[:, None], 0, SEMIRING) - step
        offset += step
        u = _reduce(alpha[:, None] + trans, 0, SEMIRING)
        tl.store(ring_ptr + (t % K) * C_PAD + cs, u - S)
        slot_offsets = tl.where(slots == t % K, offset, slot_offsets)
        if STORE:
            tl.store(alpha_ptr + t * stride_st + cs, alpha, mask=c_ok)
            tl.store(u_ptr + t * stride_st + cs, u, mask=c_ok)
            tl.store(off_ptr + t, offset)
            if rev == 0:
                tl.store(prefix_ptr + b * stride_sb + t * stride_st + cs, S, mask=c_ok)
        # Makes the new ring row visible to every thread before the next step's tile load. (The
        # overwritten slot was read this step, but u depends on all of it through the reductions.)
        tl.debug_barrier()

    tl.store(out_ptr, offset + _reduce(alpha, 0, SEMIRING))


@triton.jit
def _crf_scan_register_kernel(
    em_ptr, trans_ptr, dur_ptr, len_ptr, out_ptr, alpha_ptr, u_ptr, off_ptr, prefix_ptr, ring_ptr,
    C, K,
    stride_eb, stride_et, stride_ec, stride_tf, stride_tt, stride_dk, stride_dc,
    stride_dir_s, stride_sb, stride_st, stride_od, stride_ob, ring_stride_dir, ring_stride_b,
    SEMIRING: tl.constexpr, STORE: tl.constexpr, K_PAD: tl.constexpr, C_PAD: tl.constexpr,
):  # fmt: skip
    """Stage 3: ring buffer in registers, next step's inputs prefetched, exponentials as exp2.

    Each ring slot holds its boundary's u plus the emissions since it, relative to the previous step's
    offset (while step t reduces over slot s: ``u[s] + Σ_{s ≤ i < t} e[i] − offset[t − 1]``): every step
    adds its emission row less the previous step's offset increment to the whole tile, and this step's
    increment is taken off the reduced C-vector. Stages 1-2 instead keep ``u[s] − S[s]`` and each slot's
    offset and add the prefix and the offset difference back. Here a segment's sum is formed from its own
    emissions and only offset increments below 2^24 enter the loop, so neither a prefix sum nor an offset
    past float32's range (inf − inf) can turn a score that overflows into NaN: it is ±inf.
    """
    b, rev, L, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, s_from, s_to = _scan_setup(
        len_ptr, out_ptr, alpha_ptr, u_ptr, off_ptr, ring_ptr, stride_tf, stride_tt,
        stride_dir_s, stride_sb, stride_od, stride_ob, ring_stride_dir, ring_stride_b,
    )  # fmt: skip
    cs = tl.arange(0, C_PAD)
    slots = tl.arange(0, K_PAD)
    c_ok = cs < C
    tile_ok = (slots[:, None] < K) & c_ok[None, :]
    em_row = em_ptr + b * stride_eb + cs * stride_ec
    dur_tile = dur_ptr + cs[None, :] * stride_dc
    trans = tl.load(
        trans_ptr + cs[:, None] * s_from + cs[None, :] * s_to, mask=c_ok[:, None] & c_ok[None, :], other=float("-inf")
    )
    # Same slot convention and -inf initialisation as stage 2, held in registers; slot 0 = u[0] = 0.
    ring = tl.where((slots[:, None] == 0) & c_ok[None, :], 0.0, float("-inf"))
    if STORE:
        tl.store(u_ptr + cs, tl.zeros((C_PAD,), tl.float32), mask=c_ok)
        tl.store(alpha_ptr + cs, tl.full((C_PAD,), float("-inf"), tl.float32), mask=c_ok)
        tl.store(off_ptr, 0.0)
        if rev == 0:
            tl.store(prefix_ptr + b * stride_sb + cs, tl.zeros((C_PAD,), tl.float32), mask=c_ok)

    # Step 1's inputs; inside the loop step t + 1's are loaded before step t's arithmetic, so their
    # latency hides behind it (nothing on the t → t + 1 dependency chain waits for memory).
    pos = tl.where(rev == 1, L - 1, 0)
    e_next = tl.load(em_row + pos * stride_et, mask=c_ok, other=0.0)
    # Durations of lengths longer than the boundary index (no such segment yet) read as -inf, so a NaN or
    # inf there cannot reach the result through a slot that holds no boundary.
    k_minus_1 = (K - slots) % K
    d_next = tl.load(
        dur_tile + k_minus_1[:, None] * stride_dk, mask=tile_ok & (k_minus_1 < 1)[:, None], other=float("-inf")
    )
    S = tl.zeros((C_PAD,), tl.float32)
    alpha = tl.full((C_PAD,), float("-inf"), tl.float32)
    u = tl.where(c_ok, 0.0, float("-inf"))
    offset = tl.sum(tl.zeros((C_PAD,), tl.float32), 0)
    step = offset  # the previous step's offset increment
    for t in range(1, L + 1):
        e_cur = e_next
        d_cur = d_next
        pos = tl.where(rev == 1, L - t - 1, t)
        # other=0: past the end (t = L) the prefetch is unused; padded labels add nothing.
        e_next = tl.load(em_row + pos * stride_et, mask=c_ok & (t < L), other=0.0)
        k_minus_1 = (t - slots + K) % K
        d_next = tl.load(
            dur_tile + k_minus_1[:, None] * stride_dk, mask=tile_ok & (k_minus_1 <= t)[:, None], other=float("-inf")
        )

        # Every open segment takes in this position, and every slot moves to the previous step's offset
        # (padded labels stay -inf: other=0 above). The k-reduction is then relative to that offset.
        ring += (e_cur - step)[None, :]
        a = _reduce2(ring + d_cur, 0, SEMIRING)
        # The offset grows by the previous u's integer part; this reduction runs beside the k-reduction
        # and enters after it, on a C-vector. Past 2^24 the offset stays where it is: it is there to keep
        # numbers of order one where rounding matters, and near float32's range u − offset and e − step
        # could overflow where u and e do not (an infinite u among them).
        step = tl.floor(tl.max(u, 0))
        step = tl.where(tl.abs(step) < OFFSET_LIMIT, step, 0.0)
        alpha = a - step
        offset += step
        u = _reduce2(alpha[:, None] + trans, 0, SEMIRING)
        # Padded labels' columns would read +inf + -inf = NaN once a real alpha overflows.
        u = tl.where(c_ok, u, float("-inf"))
        # The new slot joins the others relative to the previous offset; the next step moves them all.
        ring = tl.where(slots[:, None] == t % K, (u + step)[None, :], ring)
        if STORE:
            S += e_cur
            tl.store(alpha_ptr + t * stride_st + cs, alpha, mask=c_ok)
            tl.store(u_ptr + t * stride_st + cs, u, mask=c_ok)
            tl.store(off_ptr + t, offset)
            if rev == 0:
                tl.store(prefix_ptr + b * stride_sb + t * stride_st + cs, S, mask=c_ok)

    tl.store(out_ptr, offset + _reduce2(alpha, 0, SEMIRING))


def _prune_scan(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    tile = max(kwargs["K_PAD"], kwargs["C_PAD"]) * kwargs["C_PAD"]
    return [c for c in configs if c.num_warps == 1 or tile >= 32 * c.num_warps * _MIN_ELEMENTS_PER_THREAD]


def _time_scan(fn: Any, quantiles: Any) -> Any:
    """Warp counts differ by tens of percent on the scan: 40 ms of repetitions per config suffice."""
    return triton.testing.do_bench(fn, warmup=10, rep=40, quantiles=quantiles)


def _autotune_scan(fn: Any) -> ParallelAutotuner:
    key = ["K_PAD", "C_PAD", "SEMIRING", "STORE"]
    return parallel_autotune(_SCAN_CONFIGS, key, prune=_prune_scan, do_bench=_time_scan)(fn)


_crf_scan_tiled_tuned = _autotune_scan(_crf_scan_tiled_kernel)
_crf_scan_register_tuned = _autotune_scan(_crf_scan_register_kernel)


# ------------------------------------------------------------------------------------------------
# Kernels: backward
# ------------------------------------------------------------------------------------------------


@triton.jit
def _crf_marginals_kernel(
    alpha_ptr, u_ptr, off_ptr, prefix_ptr, trans_ptr, dur_ptr, len_ptr, gout_ptr,
    grad_em_ptr, grad_dur_ptr, grad_trans_ptr,
    C, K,
    stride_tf, stride_tt, stride_dk, stride_dc,
    stride_dir_s, stride_sb, stride_st, stride_od, stride_ob, stride_gb, stride_gt,
    K_PAD: tl.constexpr, C_PAD: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """Log-semiring gradients of one batch element from both directions' saved alpha/u.

    With A = alpha, U = u (forward run) and Ar, Ur (reversed run), z = log Z:
      end[t, c]   = exp(A[t,c] + Ur[L−t,c] − z)       P(a segment ends at boundary t with label c)
      start[s, c] = exp(U[s,c] + Ar[L−s,c] − z)       P(a segment of label c starts at boundary s)
      d/d emissions[i, c] = Σ_{s≤i} start[s,c] − Σ_{t≤i} end[t,c]   (P(position i is labelled c))
      d/d transitions[c', c] = Σ_{s=1}^{L−1} exp(A[s,c'] + trans[c',c] + Ar[L−s,c] − z)
      d/d durations[k−1, c] = Σ_t exp(U[t−k,c] − S[t−k,c] + dur[k−1,c] + S[t,c] + Ur[L−t,c] − z)
    Positions are walked in blocks of BLOCK_T; the emission gradient is a running prefix sum.

    Every saved row is relative to its run's offset at that boundary (module docstring, "Offsets"), and
    log Z = offset[L] + z of the forward run. Each exponent is assembled as (sum of offsets, exact in
    float32 because they are integers) + (sum of small normalised values), so no large
    magnitudes cancel.
    """
    b = tl.program_id(0).to(tl.int64)
    L = tl.load(len_ptr + b).to(tl.int32)
    g = tl.load(gout_ptr + b)
    cs = tl.arange(0, C_PAD)
    ks = tl.arange(0, K_PAD)  # k − 1
    ts = tl.arange(0, BLOCK_T)
    c_ok = cs < C
    fwd = b * stride_sb
    bwd = stride_dir_s + b * stride_sb
    off_f = off_ptr + b * stride_ob
    off_r = off_ptr + stride_od + b * stride_ob
    z_off = tl.load(off_f + L)
    z = _reduce(tl.load(alpha_ptr + fwd + L * stride_st + cs, mask=c_ok, other=float("-inf")), 0, 0)
    # other=-inf / 0: padded labels and lengths get zero probability below.
    trans = tl.load(
        trans_ptr + cs[:, None] * stride_tf + cs[None, :] * stride_tt,
        mask=c_ok[:, None] & c_ok[None, :],
        other=float("-inf"),
    )
    dur = tl.load(
        dur_ptr + ks[:, None] * stride_dk + cs[None, :] * stride_dc, mask=(ks[:, None] < K) & c_ok[None, :], other=0.0
    )

    g_dur = tl.zeros((K_PAD, C_PAD), tl.float32)
    g_trans = tl.zeros((C_PAD, C_PAD), tl.float32)
    covered = tl.zeros((C_PAD,), tl.float32)
    for p0 in range(0, L + 1, BLOCK_T):
        p = p0 + ts
        rows = p[:, None] * stride_st + cs[None, :]
        rows_rev = (L - p)[:, None] * stride_st + cs[None, :]
        is_end = ((p >= 1) & (p <= L))[:, None] & c_ok[None, :]
        is_start = (p <= L - 1)[:, None] & c_ok[None, :]
        # other=-inf: exp(-inf) = 0 for boundaries outside [0, L] and for padded labels.
        A = tl.load(alpha_ptr + fwd + rows, mask=is_end, other=float("-inf"))
        Ur = tl.load(u_ptr + bwd + rows_rev, mask=is_end, other=float("-inf"))
        U = tl.load(u_ptr + fwd + rows, mask=is_start, other=float("-inf"))
        Ar = tl.load(alpha_ptr + bwd + rows_rev, mask=is_start, other=float("-inf"))
        St = tl.load(prefix_ptr + b * stride_sb + rows, mask=is_end, other=0.0)
        # Boundary p pairs the forward run at p with the reversed run at L − p in all three terms below.
        o_r = tl.load(off_r + L - p, mask=p <= L, other=0.0)
        base = tl.load(off_f + p, mask=p <= L, other=0.0) + o_r - z_off - z
        end = tl.exp(A + Ur + base[:, None])
        start = tl.exp(U + Ar + base[:, None])

        covered_p = covered[None, :] + tl.cumsum(start - end, axis=0)
        covered += tl.sum(start - end, axis=0)
        g_ptrs = grad_em_ptr + b * stride_gb + p[:, None] * stride_gt + cs[None, :]
        tl.store(g_ptrs, g * covered_p, mask=(p < L)[:, None] & c_ok[None, :])

        # Transitions at boundaries 1 … L−1 (A is -inf at 0, Ar at L and beyond: zero terms).
        xi = tl.exp(A[:, :, None] + trans[None, :, :] + Ar[:, None, :] + base[:, None, None])
        g_trans += tl.sum(xi, axis=0)

        # Segments (p − k, p] for k = 1 … K.
        s_idx = p[:, None] - 1 - ks[None, :]
        pair_ok = (s_idx >= 0) & (ks[None, :] < K) & (p <= L)[:, None]
        seg_ok = pair_ok[:, :, None] & is_end[:, None, :]
        s_rows = s_idx[:, :, None] * stride_st + cs[None, None, :]
        U_s = tl.load(u_ptr + fwd + s_rows, mask=seg_ok, other=float("-inf"))
        S_s = tl.load(prefix_ptr + b * stride_sb + s_rows, mask=seg_ok, other=0.0)
        seg_base = tl.load(off_f + s_idx, mask=pair_ok, other=0.0) + o_r[:, None] - z_off - z
        seg = tl.exp(U_s - S_s + dur[None, :, :] + seg_base[:, :, None] + (St + Ur)[:, None, :])
        g_dur += tl.sum(seg, axis=0)

    kc_ok = (ks[:, None] < K) & c_ok[None, :]
    tl.store(grad_dur_ptr + b * K * C + ks[:, None] * C + cs[None, :], g * g_dur, mask=kc_ok)
    cc_ok = c_ok[:, None] & c_ok[None, :]
    tl.store(grad_trans_ptr + b * C * C + cs[:, None] * C + cs[None, :], g * g_trans, mask=cc_ok)


@triton.jit
def _crf_viterbi_backtrace_kernel(
    alpha_ptr, u_ptr, off_ptr, prefix_ptr, trans_ptr, dur_ptr, len_ptr, gout_ptr,
    grad_em_ptr, grad_dur_ptr, grad_trans_ptr,
    C, K,
    stride_tf, stride_tt, stride_dk, stride_dc,
    stride_sb, stride_st, stride_ob, stride_gb, stride_gt,
    K_PAD: tl.constexpr, C_PAD: tl.constexpr,
):  # fmt: skip
    """Max-semiring gradient: walk the best segmentation back from t = L and mark it.

    Each step re-derives the argmax the forward took: the length k maximising
    ``u[t−k,c] − S[t−k,c] + dur[k−1,c]``, then the previous label c' maximising
    ``alpha[s,c'] + trans[c',c]``. Ties (measure zero for real-valued scores) go to the lowest index.
    Saved rows are relative to their boundary's offset: the k candidates (different boundaries s) get
    offset[s] − offset[t] added back; the c' candidates share one boundary and need nothing.
    """
    b = tl.program_id(0).to(tl.int64)
    L = tl.load(len_ptr + b).to(tl.int32)
    g = tl.load(gout_ptr + b)
    cs = tl.arange(0, C_PAD)
    ks = tl.arange(0, K_PAD)  # k − 1
    c_ok = cs < C
    base = b * stride_sb
    off = off_ptr + b * stride_ob
    # other=-inf: padded labels are never the argmax.
    last = tl.load(alpha_ptr + base + L * stride_st + cs, mask=c_ok, other=float("-inf"))
    c = tl.argmax(last, 0).to(tl.int32)
    t = L
    g_dur = tl.zeros((K_PAD, C_PAD), tl.float32)
    g_trans = tl.zeros((C_PAD, C_PAD), tl.float32)
    while t > 0:
        s_idx = t - 1 - ks
        k_ok = (ks < K) & (s_idx >= 0)
        score = (
            tl.load(u_ptr + base + s_idx * stride_st + c, mask=k_ok, other=float("-inf"))
            - tl.load(prefix_ptr + base + s_idx * stride_st + c, mask=k_ok, other=0.0)
            + tl.load(dur_ptr + ks * stride_dk + c * stride_dc, mask=k_ok, other=0.0)
            + (tl.load(off + s_idx, mask=k_ok, other=0.0) - tl.load(off + t))
        )
        k_best = tl.argmax(score, 0).to(tl.int32)  # k − 1
        s = t - 1 - k_best
        # The segment covers positions s … t−1 with label c: each position lies on exactly one segment.
        tl.store(
            grad_em_ptr + b * stride_gb + (s + ks) * stride_gt + c,
            g + tl.zeros((K_PAD,), tl.float32),
            mask=ks <= k_best,
        )
        g_dur += tl.where((ks[:, None] == k_best) & (cs[None, :] == c), g, 0.0)
        prev = tl.load(alpha_ptr + base + s * stride_st + cs, mask=c_ok & (s > 0), other=float("-inf"))
        prev += tl.load(trans_ptr + cs * stride_tf + c * stride_tt, mask=c_ok, other=float("-inf"))
        c_prev = tl.argmax(prev, 0).to(tl.int32)
        g_trans += tl.where((cs[:, None] == c_prev) & (cs[None, :] == c) & (s > 0), g, 0.0)
        c = c_prev
        t = s

    kc_ok = (ks[:, None] < K) & c_ok[None, :]
    tl.store(grad_dur_ptr + b * K * C + ks[:, None] * C + cs[None, :], g_dur, mask=kc_ok)
    cc_ok = c_ok[:, None] & c_ok[None, :]
    tl.store(grad_trans_ptr + b * C * C + cs[:, None] * C + cs[None, :], g_trans, mask=cc_ok)


# ------------------------------------------------------------------------------------------------
# Launchers
# ------------------------------------------------------------------------------------------------


def _pad(n: int) -> int:
    return max(_MIN_PAD, triton.next_power_of_2(n))


def _full_lengths(emissions: torch.Tensor) -> torch.Tensor:
    """The default ``lengths``: every sequence runs the whole T."""
    B, T, _ = emissions.shape
    return torch.full((B,), T, dtype=torch.int64, device=emissions.device)


def _check_inputs(
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor | None,
    semiring: str,
) -> torch.Tensor:
    """Validate a call; returns lengths as an int64 tensor on the inputs' device."""
    for name, t in (("emissions", emissions), ("transitions", transitions), ("durations", durations)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"semi_markov_crf: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise ValueError(f"semi_markov_crf: {name} must be float32 (got {t.dtype}); cast with .float()")
        if t.device != emissions.device:
            raise ValueError(f"semi_markov_crf: {name} is on {t.device}, emissions on {emissions.device}")
    if emissions.dim() != 3:
        raise ValueError(f"semi_markov_crf: emissions must be [batch, T, C]; got shape {tuple(emissions.shape)}")
    B, T, C = emissions.shape
    if transitions.shape != (C, C):
        raise ValueError(f"semi_markov_crf: transitions must be [C, C] = [{C}, {C}]; got {tuple(transitions.shape)}")
    if durations.dim() != 2 or durations.shape[1] != C or durations.shape[0] < 1:
        raise ValueError(f"semi_markov_crf: durations must be [K, C] with C = {C}; got {tuple(durations.shape)}")
    K = durations.shape[0]
    if B == 0 or T == 0 or C == 0:
        raise ValueError(f"semi_markov_crf: batch, T and C must be ≥ 1; got emissions {tuple(emissions.shape)}")
    if C > _MAX_C or K > _MAX_K:
        raise ValueError(f"semi_markov_crf: C ≤ {_MAX_C} and K ≤ {_MAX_K} (register tiles); got C={C}, K={K}")
    if semiring not in SEMIRINGS:
        raise ValueError(f"semi_markov_crf: semiring must be one of {sorted(SEMIRINGS)}; got {semiring!r}")
    if emissions.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"semi_markov_crf: tensors are on {emissions.device}; Triton needs a CUDA device, "
            "or TRITON_INTERPRET=1 for CPU tensors"
        )
    if lengths is None:
        return _full_lengths(emissions)
    if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,) or lengths.is_floating_point():
        raise ValueError(f"semi_markov_crf: lengths must be an integer tensor of shape [{B}] (or None for all T)")
    lo, hi = (int(v) for v in torch.aminmax(lengths))  # one device sync
    if lo < 1 or hi > T:
        raise ValueError(f"semi_markov_crf: lengths must lie in [1, T={T}]; got values in [{lo}, {hi}]")
    # The kernels read lengths[b] at b: a strided view (every other element of a wider buffer) is made contiguous.
    return lengths.to(device=emissions.device, dtype=torch.int64).contiguous()


_SCAN_KERNELS = {1: _crf_scan_simple_kernel, 2: _crf_scan_tiled_tuned, 3: _crf_scan_register_tuned}


def _scan(
    stage: int,
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor,
    semiring: int,
    directions: int,
    store: bool,
) -> tuple[torch.Tensor, ...]:
    """Run ``directions`` (1: forward; 2: forward and reversed) scans; returns (out, alpha, u, off, prefix):
    alpha and u relative to the offsets ``off`` when ``store``."""
    B, T, C = emissions.shape
    K = durations.shape[0]
    K_PAD, C_PAD = _pad(K), _pad(C)
    dev = emissions.device
    out = torch.empty((directions, B), dtype=torch.float32, device=dev)
    if store:
        alpha = torch.empty((directions, B, T + 1, C), dtype=torch.float32, device=dev)
        u = torch.empty_like(alpha)
        off = torch.empty((directions, B, T + 1), dtype=torch.float32, device=dev)
        prefix = torch.empty((B, T + 1, C), dtype=torch.float32, device=dev)
    else:  # never written: STORE is a constexpr False
        alpha = u = off = prefix = out
    # Stages 1-2 keep their ring (and stage 1 its alpha row) in this scratch; stage 3 ignores it.
    ring = torch.empty((directions, B, K_PAD + 1, C_PAD), dtype=torch.float32, device=dev) if stage < 3 else out
    stride_dir_s = alpha.stride(0) if store else 0
    stride_sb, stride_st = (alpha.stride(1), alpha.stride(2)) if store else (0, 0)
    off_strides = (off.stride(0), off.stride(1)) if store else (0, 0)
    ring_strides = (ring.stride(0), ring.stride(1)) if stage < 3 else (0, 0)
    args = (
        emissions, transitions, durations, lengths, out, alpha, u, off, prefix, ring,
        C, K,
        *emissions.stride(), *transitions.stride(), *durations.stride(),
        stride_dir_s, stride_sb, stride_st, *off_strides, *ring_strides,
    )  # fmt: skip
    meta = {"SEMIRING": semiring, "STORE": store, "K_PAD": K_PAD, "C_PAD": C_PAD}
    grid = (B, directions)
    kernel = _SCAN_KERNELS[stage]
    if stage == 1:
        kernel[grid](*args, **meta, num_warps=1)
    elif interpreting():
        kernel.fn[grid](*args, **meta)
    else:
        kernel[grid](*args, **meta)
    return out, alpha, u, off, prefix


def _marginals(saved: tuple, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    emissions_shape, transitions, durations, lengths, alpha, u, off, prefix = saved
    B, _, C = emissions_shape
    K = durations.shape[0]
    grad_em = torch.zeros(emissions_shape, dtype=torch.float32, device=transitions.device)
    grad_dur = torch.empty((B, K, C), dtype=torch.float32, device=transitions.device)
    grad_trans = torch.empty((B, C, C), dtype=torch.float32, device=transitions.device)
    K_PAD, C_PAD = _pad(K), _pad(C)
    block_t = max(1, min(8, _MARGINAL_TILE_ELEMENTS // (max(K_PAD, C_PAD) * C_PAD)))
    _crf_marginals_kernel[(B,)](
        alpha, u, off, prefix, transitions, durations, lengths, grad_out,
        grad_em, grad_dur, grad_trans,
        C, K,
        *transitions.stride(), *durations.stride(),
        *alpha.stride()[:3], *off.stride()[:2], *grad_em.stride()[:2],
        K_PAD=K_PAD, C_PAD=C_PAD, BLOCK_T=block_t, num_warps=4 if block_t > 1 else 8,
    )  # fmt: skip
    # Per-batch partials summed here: deterministic, unlike atomics.
    return grad_em, grad_trans.sum(0), grad_dur.sum(0)


def _viterbi_path_grads(saved: tuple, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    emissions_shape, transitions, durations, lengths, alpha, u, off, prefix = saved
    B, _, C = emissions_shape
    K = durations.shape[0]
    grad_em = torch.zeros(emissions_shape, dtype=torch.float32, device=transitions.device)
    grad_dur = torch.empty((B, K, C), dtype=torch.float32, device=transitions.device)
    grad_trans = torch.empty((B, C, C), dtype=torch.float32, device=transitions.device)
    _crf_viterbi_backtrace_kernel[(B,)](
        alpha, u, off, prefix, transitions, durations, lengths, grad_out,
        grad_em, grad_dur, grad_trans,
        C, K,
        *transitions.stride(), *durations.stride(),
        alpha.stride(1), alpha.stride(2), off.stride(1), grad_em.stride(0), grad_em.stride(1),
        K_PAD=_pad(K), C_PAD=_pad(C), num_warps=1,
    )  # fmt: skip
    return grad_em, grad_trans.sum(0), grad_dur.sum(0)


class _SemiMarkovCRF(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        emissions: torch.Tensor,
        transitions: torch.Tensor,
        durations: torch.Tensor,
        lengths: torch.Tensor,
        semiring: int,
        stage: int,
    ) -> torch.Tensor:
        needs_grad = any(ctx.needs_input_grad[:3])
        # Log semiring: the reversed (outside) scan is independent of the forward one, so both run in
        # one launch on otherwise idle SMs; the backward is then a single parallel pass.
        directions = 2 if needs_grad and semiring == SEMIRINGS["log"] else 1
        out, alpha, u, off, prefix = _scan(
            stage, emissions, transitions, durations, lengths, semiring, directions, store=needs_grad
        )
        if needs_grad:
            ctx.save_for_backward(transitions, durations, lengths, alpha, u, off, prefix)
            ctx.emissions_shape = emissions.shape
            ctx.semiring = semiring
        return out[0]

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = (ctx.emissions_shape, *ctx.saved_tensors)
        grad_out = grad_out.contiguous().float()
        if ctx.semiring == SEMIRINGS["log"]:
            grad_em, grad_trans, grad_dur = _marginals(saved, grad_out)
        else:
            grad_em, grad_trans, grad_dur = _viterbi_path_grads(saved, grad_out)
        return grad_em, grad_trans, grad_dur, None, None, None


def _crf(stage: int, emissions, transitions, durations, lengths, semiring) -> torch.Tensor:
    lengths = _check_inputs(emissions, transitions, durations, lengths, semiring)
    return _SemiMarkovCRF.apply(emissions, transitions, durations, lengths, SEMIRINGS[semiring], stage)


# ------------------------------------------------------------------------------------------------
# Public functions
# ------------------------------------------------------------------------------------------------


def semi_markov_crf_stage1(
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor | None = None,
    semiring: str = "log",
) -> torch.Tensor:
    """log Z (or the Viterbi score) per batch element; straightforward scan (stage 1)."""
    return _crf(1, emissions, transitions, durations, lengths, semiring)


def semi_markov_crf_stage2(
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor | None = None,
    semiring: str = "log",
) -> torch.Tensor:
    """log Z (or the Viterbi score) per batch element; tile-vectorised scan (stage 2)."""
    return _crf(2, emissions, transitions, durations, lengths, semiring)


def semi_markov_crf_stage3(
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor | None = None,
    semiring: str = "log",
) -> torch.Tensor:
    """log Z (or the Viterbi score) per batch element; register ring buffer (stage 3)."""
    return _crf(3, emissions, transitions, durations, lengths, semiring)


semi_markov_crf = semi_markov_crf_stage3


def reference_semi_markov_crf(
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor | None = None,
    semiring: str = "log",
) -> torch.Tensor:
    """The recursion of the module docstring, one step per boundary t, vectorised over (batch, k, c):
    about twenty small kernels per step (window stack, segment scores, two logsumexps, the length
    select), the usual way a semi-CRF is written in PyTorch."""
    if semiring == "log":
        reduce = torch.logsumexp
    elif semiring == "max":
        reduce = torch.amax
    else:
        raise ValueError(f"reference_semi_markov_crf: unknown semiring {semiring!r}")
    B, T, C = emissions.shape
    K = durations.shape[0]
    if lengths is None:
        lengths = _full_lengths(emissions)
    prefix = torch.cat([emissions.new_zeros(B, 1, C), emissions.cumsum(dim=1)], dim=1)  # S[b, t, c]
    # Window rows are the starts s = t − k … t − 1, i.e. lengths k … 1: durations read backwards.
    durations_rev = durations.flip(0)
    u = [emissions.new_zeros(B, C)]  # u[0] = 0: the first segment has no transition into it
    final = emissions.new_full((B, C), float("-inf"))
    for t in range(1, T + 1):
        k = min(K, t)
        seg = prefix[:, t : t + 1] - prefix[:, t - k : t] + durations_rev[K - k :]  # [B, k, C]
        alpha_t = reduce(torch.stack(u[t - k : t], dim=1) + seg, dim=1)
        u.append(reduce(alpha_t[:, :, None] + transitions, dim=1))
        final = torch.where((lengths == t)[:, None], alpha_t, final)
    return reduce(final, dim=-1)


_GRAPHED: dict[tuple, Any] = {}


def graphed_reference_semi_markov_crf(
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor | None = None,
    semiring: str = "log",
) -> torch.Tensor:
    """The PyTorch reference as a careful user would run it on a GPU: captured once per shape (forward, and
    backward when an input requires grad) with ``torch.cuda.make_graphed_callables`` and replayed as CUDA
    graphs, so the ~20 kernels of each of the T steps launch without Python or launch overhead. The reference
    has no host syncs, so it captures as written; each call copies its inputs into the graph's own."""
    if lengths is None:
        lengths = _full_lengths(emissions)
    args = (emissions, transitions, durations, lengths)
    key = (semiring, *((tuple(a.shape), a.dtype, a.device, a.requires_grad) for a in args))
    graphed = _GRAPHED.get(key)
    if graphed is None:
        samples = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)

        def run(e: torch.Tensor, tr: torch.Tensor, d: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            return reference_semi_markov_crf(e, tr, d, n, semiring)

        with warnings.catch_warnings():
            # make_graphed_callables warms up on a side stream and captures on another by design: torch warns that
            # the sample inputs' gradient accumulators were made on a different stream. Expected here, not a fault.
            warnings.filterwarnings("ignore", message="The AccumulateGrad node's stream", category=UserWarning)
            graphed = _GRAPHED[key] = torch.cuda.make_graphed_callables(run, samples)
    return graphed(*args)


@triton.jit
def _scan_floor_kernel(trans_ptr, dur_ptr, len_ptr, out_ptr, C, K, K_PAD: tl.constexpr, C_PAD: tl.constexpr):
    """The dependency chain of a scan step and nothing else: per t, a max over the [K_PAD, C_PAD] ring tile,
    then a max over the [C_PAD, C_PAD] transition tile that needs its result, then the ring update; inputs
    are loaded once, before the loop. Any correct scan of this recursion does at least this per step."""
    b = tl.program_id(0)
    cs = tl.arange(0, C_PAD)
    slots = tl.arange(0, K_PAD)
    c_ok = cs < C
    dur = tl.load(dur_ptr + slots[:, None] * C + cs[None, :], mask=(slots[:, None] < K) & c_ok[None, :], other=0.0)
    trans = tl.load(trans_ptr + cs[:, None] * C + cs[None, :], mask=c_ok[:, None] & c_ok[None, :], other=0.0)
    ring = tl.zeros((K_PAD, C_PAD), tl.float32)
    alpha = tl.zeros((C_PAD,), tl.float32)
    L = tl.load(len_ptr + b).to(tl.int32)
    for t in range(1, L + 1):
        alpha = tl.max(ring + dur, 0)
        u = tl.max(alpha[:, None] + trans, 0)
        ring = tl.where(slots[:, None] == t % K, u[None, :], ring)
    tl.store(out_ptr + b, tl.max(alpha, 0))


_scan_floor_tuned = _autotune_scan(_scan_floor_kernel)


def scan_latency_floor(
    emissions: torch.Tensor,
    transitions: torch.Tensor,
    durations: torch.Tensor,
    lengths: torch.Tensor | None = None,
    semiring: str = "log",
) -> torch.Tensor:
    """A lower bound on the forward scan's time, not a CRF: ``_scan_floor_kernel`` on the same grid (one
    program per sequence), tiles and warp counts (autotuned alike) as stage 3, for the same lengths. Its
    output means nothing; the benchmark reports stage 3's time as a multiple of this one."""
    B, _, C = emissions.shape
    K = durations.shape[0]
    if lengths is None:
        lengths = _full_lengths(emissions)
    out = torch.empty(B, dtype=torch.float32, device=emissions.device)
    grid = (B,)
    kernel = _scan_floor_tuned.fn if interpreting() else _scan_floor_tuned
    kernel[grid](transitions.contiguous(), durations.contiguous(), lengths, out, C, K, K_PAD=_pad(K), C_PAD=_pad(C))
    return out


# ------------------------------------------------------------------------------------------------
# SPEC
# ------------------------------------------------------------------------------------------------


def _make_inputs(dims, dtype: torch.dtype, device: str) -> tuple:
    B, T, K, C = dims["B"], dims["T"], dims["K"], dims["C"]
    emissions = torch.randn(B, T, C, device=device).to(dtype)
    transitions = (0.5 * torch.randn(C, C, device=device)).to(dtype)
    durations = (0.5 * torch.randn(K, C, device=device)).to(dtype)
    if dims.get("ragged", 0):
        lengths = torch.randint(max(1, T // 3), T + 1, (B,), device=device)
        lengths[0] = T
        lengths[-1] = 1 if B > 1 else T  # the shortest possible sequence
    else:
        lengths = torch.full((B,), T, dtype=torch.int64, device=device)
    return emissions, transitions, durations, lengths


def _dims_of(emissions: torch.Tensor, transitions: torch.Tensor, durations: torch.Tensor, *_: object) -> dict:
    B, T, C = emissions.shape
    return {"B": B, "T": T, "K": durations.shape[0], "C": C}


def _bytes_moved(dims, dtype: torch.dtype) -> int:
    B, T, K, C = dims["B"], dims["T"], dims["K"], dims["C"]
    return (B * T * C + C * C + K * C + B) * dtype.itemsize + 8 * B


def _flops(dims, dtype: torch.dtype) -> int:
    B, T, K, C = dims["B"], dims["T"], dims["K"], dims["C"]
    return 5 * B * T * (K * C + C * C)


def _case(label: str, B: int, T: int, K: int, C: int, ragged: int = 0, semiring: str = "log", small: bool = True):
    dims = {"B": B, "T": T, "K": K, "C": C, "ragged": ragged, "semiring": SEMIRINGS[semiring]}
    return Case(label, dims, small=small)


_SEMIRING_NAMES = {code: name for name, code in SEMIRINGS.items()}

SPEC = KernelSpec(
    name="semi_markov_crf",
    summary="semi-Markov CRF scan: log Z (or Viterbi score) over segmentations, marginals as gradient",
    make_inputs=_make_inputs,
    reference=reference_semi_markov_crf,
    stages={1: semi_markov_crf_stage1, 2: semi_markov_crf_stage2, 3: semi_markov_crf_stage3},
    cases=(
        _case("log, full lengths", 2, 16, 4, 5),
        _case("log, ragged lengths incl. 1", 3, 16, 4, 5, ragged=1),
        _case("max (Viterbi), ragged", 3, 16, 4, 5, ragged=1, semiring="max"),
        _case("K > T: every length fits", 2, 6, 8, 3),
        _case("K = 1: linear-chain CRF", 2, 9, 1, 4),
        _case("C = 1, pow2 K", 2, 12, 4, 1, ragged=1),
        _case("max, C and K not pow2", 2, 13, 3, 6, semiring="max"),
        # The benchmark's 32 × 32 tiles, so the GPU tests tune and check the warp counts it runs.
        _case("B4 T256 K32 C24 ragged (GPU)", 4, 256, 32, 24, ragged=1, small=False),
        _case("B4 T256 K32 C24 max (GPU)", 4, 256, 32, 24, semiring="max", small=False),
    ),
    bench_cases=(
        _case("B32 T1024 K32 C24 log", 32, 1024, 32, 24, small=False),
        _case("B32 T1024 K32 C24 max", 32, 1024, 32, 24, semiring="max", small=False),
    ),
    dtypes=(torch.float32,),
    interpreter_dtypes=(torch.float32,),
    # log Z is a sum of ~T terms of size ~1: relative 1e-5 of it, and gradients are probabilities.
    tolerances={torch.float32: Tolerance(atol=1e-4, rtol=1e-4)},
    bytes_moved=_bytes_moved,
    flops=_flops,
    dims_of=_dims_of,
    grad_inputs=(0, 1, 2),
    bar="≥ 20× the PyTorch reference and ≥ 1× it replayed as CUDA graphs at B=32, T=1024, K=32, C=24, fp32;"
    " time over the scan's latency floor reported",
    call_kwargs=lambda dims: {"semiring": _SEMIRING_NAMES[dims.get("semiring", 0)]},
)

get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
