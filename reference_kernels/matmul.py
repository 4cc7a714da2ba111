"""Matrix multiply with a fused bias + activation epilogue: ``C = act(A @ B + bias)``.

Math: ``C[m, n] = act(sum_k A[m, k] * B[k, n] + bias[n])`` with ``act`` one of identity, relu,
gelu (tanh approximation, as ``torch.nn.functional.gelu(approximate="tanh")``) or silu. Inputs are fp16
or bf16, products are accumulated in fp32, bias and activation are applied to the fp32 accumulator and
the result is rounded once to the input dtype.

Programs → data:
  stage 1  one program per BLOCK_M × BLOCK_N output tile on a 2-D grid, row-major launch order.
  stage 2  one program per tile on a 1-D grid, tiles visited in super-groups of GROUP_M tile rows so
           that programs resident at the same time share A rows and B columns in L2; autotuned.
  stage 3  persistent: one program per SM, each walks tiles ``pid, pid + NUM_SMS, ...`` in the same
           grouped order, so the K-loop of the next tile overlaps the epilogue of the previous one
           and no launch/tail waves are paid. On Hopper (sm_90+) A, B and C move through TMA tensor
           descriptors; elsewhere (older GPUs, unaligned strides) the same kernel uses pointer loads.
           With TMA, when the last round of whole tiles would leave over 40 % of the programs idle, that
           round's K iterations are split evenly over every program instead (stream-K tail).
           On an sm_90 GPU, problems the Gluon kernel of ``matmul_hopper.py`` serves (fp16/bf16, TMA-ready,
           at least one 128×256 tile per SM) go to it: the same tiles with warp-specialized loads.
Autotuning (stages 2-3) compiles the configs of a new key in parallel before timing them; a problem
whose 128×128 tiles do not fill the GPU gets one config and is not timed.

Bytes moved: the floor is one read of A and B, one read of bias and one write of C:
``(M·K + K·N + N + M·N) · bytes(dtype)``. The eager baseline (matmul, then ``+ bias``, then the
activation) writes C and reads it back twice more: ``+ 4·M·N`` element transfers. A tile of
BLOCK_M × BLOCK_N re-reads A ``N / BLOCK_N`` times and B ``M / BLOCK_M`` times; grouped ordering keeps
most of those re-reads in L2 — at 4096³ the op is compute-bound (2·M·N·K flops).

Limits: A is [M, K], B is [K, N], bias is [N] or None, all of one dtype (fp16 or bf16) on one device.
Any strides for the pointer paths; the TMA path needs unit stride in the last dim and 16-byte aligned
rows and base pointers, and falls back to pointers otherwise. Forward only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from reference_kernels import matmul_hopper
from reference_kernels._autotune import parallel_autotune
from reference_kernels._common import cdiv, interpreting, sm_count
from reference_kernels._epilogue import ACTIVATIONS, bias_activation
from reference_kernels._spec import Case, KernelSpec, Tolerance

# ------------------------------------------------------------------------------------------------
# Constants
# ------------------------------------------------------------------------------------------------

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)

# Stage 1: a fixed, modest tile that runs everywhere (64×64 fp32 accumulator = 32 registers/thread at
# 4 warps) — the readable baseline, not tuned.
_STAGE1_BLOCK = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}

# Hopper-sized autotune space for the non-persistent kernel. 128×256×64 at 3 stages keeps
# (128·64 + 64·256)·2 B = 48 KiB per stage in shared memory (144 KiB of the 227 KiB per SM) and gives
# each of the 8 warps a 64×64 wgmma accumulator slice. GROUP_M 8: the usual L2 super-group height.
_STAGE2_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=s, num_warps=w)
    for (bm, bn, s, w) in [
        (128, 256, 3, 8),
        (256, 128, 3, 8),
        (128, 256, 4, 8),
        (128, 128, 4, 4),
        (128, 128, 4, 8),
        (128, 128, 3, 4),
        (64, 256, 4, 4),
        (128, 64, 4, 4),
    ]
]

# Persistent kernel: the same tile shapes, plus whether the tile loop is flattened into the K-loop
# (lets the software pipeliner prefetch the next tile's first K-blocks during the epilogue) and whether
# the epilogue is stored in two BLOCK_N/2 halves (halves the epilogue's shared-memory staging buffer).
_STAGE3_CONFIGS = [
    triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": fl, "EPILOGUE_SUBTILE": sub},
        num_stages=s,
        num_warps=w,
    )
    for (bm, bn, s, w) in [(128, 256, 3, 8), (128, 256, 4, 8), (128, 128, 4, 4), (128, 128, 4, 8)]
    for fl in (True, False)
    for sub in (True, False)
    # 128×256 at 4 stages fits shared memory only with the halved epilogue buffer (229 vs 262 KiB).
    if not (sub and bn == 128 and w == 4) and not (not sub and bn == 256 and s == 4)
]

_MAX_TILE = max(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] for c in _STAGE3_CONFIGS)

# When 128×128 tiles give fewer tiles than SMs the grid cannot fill the GPU whatever the tile, so such
# problems get one config and nothing is timed: stage 2 its smallest tile (twice the programs), stage 3
# the one 128×128 config of its space (one tile per program there; the subtiled epilogue is the path
# with the most code, so small problems in the tests cover it).
_SMALL_STAGE2 = (128, 64, 4, 4)
_SMALL_STAGE3 = (128, 128, 4, 8, False, True)  # (BLOCK_M, BLOCK_N, stages, warps, FLATTEN, EPILOGUE_SUBTILE)


def _fills_gpu(M: int, N: int) -> bool:
    """Whether 128×128 tiles make at least one wave on the current device (where Triton launches)."""
    return triton.cdiv(M, 128) * triton.cdiv(N, 128) >= sm_count(torch.cuda.current_device())


def _prune_stage2(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    if _fills_gpu(named_args["M"], named_args["N"]):
        return configs
    return [
        c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages, c.num_warps) == _SMALL_STAGE2
    ]


# Under the interpreter (CPU, numpy) autotuning cannot time anything and big tiles are slow, so the
# tuned kernels run one small config that still exercises masks, grouping and several tiles per program.
_INTERPRETER_CONFIG = {
    "BLOCK_M": 32,
    "BLOCK_N": 32,
    "BLOCK_K": 16,
    "GROUP_M": 2,
    "FLATTEN": False,
    "EPILOGUE_SUBTILE": True,
}
# Programs of the persistent kernel under the interpreter: fewer than tiles, so each loops.
_INTERPRETER_NUM_SMS = 3


# ------------------------------------------------------------------------------------------------
# Triton helpers
# ------------------------------------------------------------------------------------------------


@triton.jit
def _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile coordinates for ``tile_id`` walking GROUP_M tile rows column by column (L2 reuse)."""
    tiles_per_group = GROUP_M * num_pid_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(num_pid_m - first_m, GROUP_M)
    within = tile_id % tiles_per_group
    pid_m = first_m + within % rows_in_group
    pid_n = within // rows_in_group
    return pid_m, pid_n


# ------------------------------------------------------------------------------------------------
# Kernels
# ------------------------------------------------------------------------------------------------


@triton.jit
def _matmul_tiled_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """Stage 1: one output tile per program, 2-D grid, every load masked."""
    pid_m = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        # other=0: a zero in A or B adds nothing to the dot product.
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    acc = bias_activation(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _ab_tile_pointers(a_ptr, b_ptr, pid_m, pid_n, M, stride_am, stride_ak, stride_bk, stride_bn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """Pointers to the first BLOCK_K slice of a tile's A rows and B columns.

    The tile origin goes into the base pointers in 64-bit (row · stride passes 2^31 on big matrices);
    offsets inside the tile stay 32-bit: per-element int64 offsets cost ~35 more registers per thread at
    128×256 and push the gelu epilogue into spills (ptxas -v, sm_90). A rows past M are folded onto the
    tile's row 0 — computed, then dropped by the store mask — so A loads need no row mask.
    """
    rows = tl.arange(0, BLOCK_M)
    rows = tl.where(pid_m * BLOCK_M + rows < M, rows, 0)
    cols = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + pid_m.to(tl.int64) * BLOCK_M * stride_am + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + pid_n.to(tl.int64) * BLOCK_N * stride_bn + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    return a_ptrs, b_ptrs


@triton.jit
def _load_ab(a_ptrs, b_ptrs, k_left, n_left, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             EVEN_K: tl.constexpr, EVEN_N: tl.constexpr):  # fmt: skip
    """Load one BLOCK_K slice; ``k_left``/``n_left``: K and N remaining from this slice/tile origin.

    B columns are masked, not folded like A rows: B is contiguous along N, and a folded tail would
    break the contiguity the vectorised loads rely on. Mask-free when the tile divides the matrix.
    """
    ks = tl.arange(0, BLOCK_K)
    cols = tl.arange(0, BLOCK_N)
    # other=0: zeros in the K tail add nothing to the dot; zero columns past N are never stored.
    if EVEN_K:
        a = tl.load(a_ptrs)
    else:
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
    if EVEN_K and EVEN_N:
        b = tl.load(b_ptrs)
    elif EVEN_N:
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
    elif EVEN_K:
        b = tl.load(b_ptrs, mask=cols[None, :] < n_left, other=0.0)
    else:
        b = tl.load(b_ptrs, mask=(ks[:, None] < k_left) & (cols[None, :] < n_left), other=0.0)
    return a, b


@triton.jit
def _store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Masked store of one output tile (64-bit tile origin, 32-bit offsets inside it)."""
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    c_ptr += pid_m.to(tl.int64) * BLOCK_M * stride_cm + pid_n.to(tl.int64) * BLOCK_N * stride_cn
    mask = (pid_m * BLOCK_M + rows[:, None] < M) & (pid_n * BLOCK_N + cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


_EVEN = {
    "EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0,
    "EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0,
}


@parallel_autotune(_STAGE2_CONFIGS, key=["M", "N", "K", "HAS_BIAS", "ACTIVATION"], prune=_prune_stage2)
@triton.heuristics(_EVEN)
@triton.jit
def _matmul_grouped_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
):  # fmt: skip
    """Stage 2: one tile per program on a 1-D grid in grouped order; masks only on K and N tails."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _grouped_tile(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    a_ptrs, b_ptrs = _ab_tile_pointers(
        a_ptr, b_ptr, pid_m, pid_n, M, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K
    )
    n_left = N - pid_n * BLOCK_N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a, b = _load_ab(a_ptrs, b_ptrs, K - k0, n_left, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = bias_activation(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    _store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


def _set_descriptor_blocks(nargs: dict) -> None:
    """Autotune pre-hook: TMA block shapes follow the config being tried (no-op for pointers)."""
    a, b, c = nargs["a_src"], nargs["b_src"], nargs["c_src"]
    if not isinstance(a, _TensorDescriptor):
        return
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    a.block_shape = [bm, bk]
    b.block_shape = [bk, bn]
    c.block_shape = [bm, bn // 2] if nargs["EPILOGUE_SUBTILE"] else [bm, bn]


# The descriptor class lives in triton.tools from 3.4 on; resolved lazily so importing this module
# never touches the GPU stack.
try:
    from triton.tools.tensor_descriptor import TensorDescriptor as _TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: the pointer path is used everywhere
    _TensorDescriptor = None


def _prune_stage3(configs: list[triton.Config], named_args: dict, **kwargs: Any) -> list[triton.Config]:
    """Small problems get ``_SMALL_STAGE3`` alone. Without TMA the epilogue is a pointer store and
    EPILOGUE_SUBTILE changes nothing: drop the twins."""
    if not _fills_gpu(named_args["M"], named_args["N"]):
        return [c for c in configs if _stage3_knobs(c) == _SMALL_STAGE3]
    if kwargs.get("USE_TMA", named_args.get("USE_TMA")):
        return configs
    kept, seen = [], set()
    for c in configs:
        key = (*(v for k, v in sorted(c.kwargs.items()) if k != "EPILOGUE_SUBTILE"), c.num_warps, c.num_stages)
        if key not in seen:
            seen.add(key)
            kept.append(c)
    return kept


# Stream-K tail: when the last round of whole tiles would leave more than 40 % of the programs idle, its tiles'
# K iterations are shared out evenly instead (H100, bf16, 128×256 tiles, do_bench medians of 5 rounds: 8192³
# (2048 tiles on 132 SMs, last round 52 % full) 1.618 -> 1.559 ms, cuBLAS 1.586; 4096³ (last round 88 % full)
# 0.192 -> 0.205 ms: there the split tiles' extra pipeline starts and fix-ups cost more than the idle SMs).
STREAM_K_MAX_TAIL = 0.6


def _use_stream_k(args: dict) -> bool:
    if not args["USE_TMA"]:
        return False
    tiles = cdiv(args["M"], args["BLOCK_M"]) * cdiv(args["N"], args["BLOCK_N"])
    programs = args["NUM_SMS"]
    return tiles >= programs and 0 < tiles % programs <= STREAM_K_MAX_TAIL * programs


# One flag per program for the stream-K hand-over, per device and stream (two launches on different streams
# must not share them; launches on one stream run in order). Owners lower the flags they consume, so the
# buffer is all zeros between launches, CUDA-graph replays included.
_STREAM_K_FLAGS: dict[tuple, torch.Tensor] = {}


def _stream_k_flags(device: torch.device, programs: int) -> torch.Tensor:
    stream = None if interpreting() else torch.cuda.current_stream(device).cuda_stream
    key = (str(device), programs, stream)
    flags = _STREAM_K_FLAGS.get(key)
    if flags is None:
        flags = _STREAM_K_FLAGS[key] = torch.zeros(programs, dtype=torch.int32, device=device)
    return flags


def _stage3_knobs(c: triton.Config) -> tuple:
    k = c.kwargs
    return (k["BLOCK_M"], k["BLOCK_N"], c.num_stages, c.num_warps, k["FLATTEN"], k["EPILOGUE_SUBTILE"])


@parallel_autotune(
    [
        triton.Config(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages, pre_hook=_set_descriptor_blocks)
        for c in _STAGE3_CONFIGS
    ],
    key=["M", "N", "K", "HAS_BIAS", "ACTIVATION", "USE_TMA"],
    prune=_prune_stage3,
)
@triton.heuristics({**_EVEN, "STREAM_K": lambda args: _use_stream_k(args)})
@triton.jit
def _matmul_persistent_kernel(
    a_src, b_src, c_src, bias_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    partial_ptr, flags_ptr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, USE_TMA: tl.constexpr, NUM_SMS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    STREAM_K: tl.constexpr,
):  # fmt: skip
    """Stage 3: persistent grouped matmul. ``*_src`` are TMA descriptors when USE_TMA, else pointers.

    With STREAM_K (TMA only) the tiles of the last, partly filled round are not given out whole: their K
    iterations are split evenly over every program (``_stream_k_tail``)."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    if STREAM_K:
        num_whole = num_tiles - num_tiles % NUM_SMS
    else:
        num_whole = num_tiles
    # The epilogue recomputes its tile coordinates from its own counter rather than reusing the
    # K-loop's: with FLATTEN the pipeliner peels the loop and a value live across both ends trips it.
    tile_id_c = start - NUM_SMS

    for tile_id in tl.range(start, num_whole, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if USE_TMA:
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            for k0 in range(0, K, BLOCK_K):
                # TMA zero-fills reads past M, N and K, so the tails need no masks.
                a = a_src.load([off_m, k0])
                b = b_src.load([k0, off_n])
                acc = tl.dot(a, b, acc)
        else:
            a_ptrs, b_ptrs = _ab_tile_pointers(
                a_src, b_src, pid_m, pid_n, M, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K
            )
            n_left = N - pid_n * BLOCK_N
            for k0 in range(0, K, BLOCK_K):
                a, b = _load_ab(a_ptrs, b_ptrs, K - k0, n_left, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N)
                acc = tl.dot(a, b, acc)
                a_ptrs += BLOCK_K * stride_ak
                b_ptrs += BLOCK_K * stride_bk

        tile_id_c += NUM_SMS
        pid_m, pid_n = _grouped_tile(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        _epilogue(c_src, acc, bias_ptr, pid_m, pid_n, M, N, stride_cm, stride_cn,
                  HAS_BIAS, ACTIVATION, USE_TMA, EPILOGUE_SUBTILE, BLOCK_M, BLOCK_N)  # fmt: skip

    if STREAM_K:
        _stream_k_tail(a_src, b_src, c_src, bias_ptr, partial_ptr, flags_ptr, start, num_whole, num_tiles,
                       num_pid_m, num_pid_n, M, N, K, HAS_BIAS, ACTIVATION, NUM_SMS, BLOCK_M, BLOCK_N, BLOCK_K,
                       GROUP_M, EPILOGUE_SUBTILE)  # fmt: skip


@triton.jit
def _epilogue(c_src, acc, bias_ptr, pid_m, pid_n, M, N, stride_cm, stride_cn,
              HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, USE_TMA: tl.constexpr,
              EPILOGUE_SUBTILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """Bias and activation on the fp32 tile, then its store (TMA, optionally in two halves, or pointers)."""
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = bias_activation(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    if USE_TMA:
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        # TMA stores clip at the tensor bounds, so partial tiles need no mask either.
        if EPILOGUE_SUBTILE:
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_src.store([off_m, off_n], left.to(c_src.dtype))
            c_src.store([off_m, off_n + BLOCK_N // 2], right.to(c_src.dtype))
        else:
            c_src.store([off_m, off_n], acc.to(c_src.dtype))
    else:
        _store_tile(c_src, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


@triton.jit
def _k_segment(a_src, b_src, off_m, off_n, k_lo, k_hi,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """Sum over the K blocks [k_lo, k_hi) of one tile, through TMA descriptors."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(k_lo, k_hi):
        a = a_src.load([off_m, kb * BLOCK_K])
        b = b_src.load([kb * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _stream_k_tail(a_src, b_src, c_src, bias_ptr, partial_ptr, flags_ptr, start, first_tile, num_tiles,
                   num_pid_m, num_pid_n, M, N, K,
                   HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, NUM_SMS: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   EPILOGUE_SUBTILE: tl.constexpr):  # fmt: skip
    """The tiles from ``first_tile`` on, as one run of K iterations cut into NUM_SMS equal ranges.

    Program p takes iterations [p·q, (p+1)·q). With fewer tail tiles than programs a range is at most one
    tile long, so it touches at most two tiles: the end of one (the segment that finishes a tile: its owner)
    and the start of the next (a partial). A partial goes to the program's slot of ``partial_ptr`` (fp32) and
    raises its flag; the owner adds the partials of the programs before it that share the tile (waiting for
    each flag, then lowering it for the next launch), applies the epilogue and stores. Owners wait only on
    lower program ids, which the GPU starts first and the interpreter runs first, and every program computes
    its partial before it waits on anyone.
    """
    k_tiles = tl.cdiv(K, BLOCK_K)
    total = (num_tiles - first_tile) * k_tiles
    q = tl.cdiv(total, NUM_SMS)
    it0 = start * q
    it1 = tl.minimum(it0 + q, total)
    if it0 < it1:
        tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
        offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        t_first = it0 // k_tiles
        t_last = (it1 - 1) // k_tiles
        # The range's last segment first (usually the partial another program waits for), then its first.
        for second in range(0, 2):
            if second == 0:
                t = t_last
                lo = tl.maximum(it0, t_last * k_tiles)
                hi = it1
            else:
                t = t_first
                lo = it0
                hi = tl.minimum(it1, (t_first + 1) * k_tiles)
            if second == 0 or t_first != t_last:
                pid_m, pid_n = _grouped_tile(first_tile + t, num_pid_m, num_pid_n, GROUP_M)
                acc = _k_segment(a_src, b_src, pid_m * BLOCK_M, pid_n * BLOCK_N, lo - t * k_tiles, hi - t * k_tiles,
                                 BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip
                if hi == (t + 1) * k_tiles:
                    for p in range((t * k_tiles) // q, start):
                        while tl.atomic_add(flags_ptr + p, 0, sem="acquire") == 0:
                            pass
                        # .cg: read at L2, where the other SM's writes are, never a stale L1 line.
                        acc += tl.load(partial_ptr + p * tile_elems + offs, cache_modifier=".cg")
                        tl.atomic_xchg(flags_ptr + p, 0, sem="relaxed")
                    _epilogue(c_src, acc, bias_ptr, pid_m, pid_n, M, N, 0, 0,
                              HAS_BIAS, ACTIVATION, True, EPILOGUE_SUBTILE, BLOCK_M, BLOCK_N)  # fmt: skip
                else:
                    tl.store(partial_ptr + start * tile_elems + offs, acc, cache_modifier=".cg")
                    tl.debug_barrier()  # every thread's part is written before the flag goes up
                    tl.atomic_xchg(flags_ptr + start, 1, sem="release")


# ------------------------------------------------------------------------------------------------
# Launchers
# ------------------------------------------------------------------------------------------------


def _check_inputs(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str) -> int:
    """Validate a matmul call; returns the activation code."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise ValueError("matmul: a and b must be torch.Tensors")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul: a and b must be 2-D ([M, K] and [K, N]); got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"matmul: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} (need a.shape[1] == b.shape[0])"
        )
    if a.dtype not in _SUPPORTED_DTYPES or b.dtype != a.dtype:
        raise ValueError(
            f"matmul: a and b must both be float16 or bfloat16 (got {a.dtype} and {b.dtype}); cast with .half() or .bfloat16()"
        )
    if a.device != b.device:
        raise ValueError(f"matmul: a is on {a.device} but b is on {b.device}; move both to one device")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.shape[0] != b.shape[1]:
            shape = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise ValueError(f"matmul: bias must be a 1-D tensor of length N={b.shape[1]}; got {shape}")
        if bias.dtype != a.dtype or bias.device != a.device:
            raise ValueError(
                f"matmul: bias must match a in dtype and device ({a.dtype}, {a.device}); got {bias.dtype}, {bias.device}"
            )
    if activation not in ACTIVATIONS:
        raise ValueError(f"matmul: activation must be one of {sorted(ACTIVATIONS)}; got {activation!r}")
    if a.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"matmul: tensors are on {a.device}; Triton kernels need a CUDA device, or TRITON_INTERPRET=1 for CPU tensors"
        )
    return ACTIVATIONS[activation]


def _empty_result(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)


def _matmul_stage1(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, act: int) -> torch.Tensor:
    c = _empty_result(a, b)
    M, K = a.shape
    N = b.shape[1]
    if c.numel() == 0:
        return c
    grid = (triton.cdiv(M, _STAGE1_BLOCK["BLOCK_M"]), triton.cdiv(N, _STAGE1_BLOCK["BLOCK_N"]))
    _matmul_tiled_kernel[grid](
        a, b, c, bias,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        HAS_BIAS=bias is not None, ACTIVATION=act, **_STAGE1_BLOCK, num_warps=4, num_stages=3,
    )  # fmt: skip
    return c


def _matmul_stage2(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, act: int, config: triton.Config | None = None
) -> torch.Tensor:
    """Stage 2; ``config`` runs one tile instead of autotuning (tests sweep the space)."""
    c = _empty_result(a, b)
    M, K = a.shape
    N = b.shape[1]
    if c.numel() == 0:
        return c
    args = (a, b, c, bias, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    if interpreting():
        config = triton.Config({k: _INTERPRETER_CONFIG[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")})
    if config is not None:
        _matmul_grouped_kernel.fn[grid](*args, HAS_BIAS=bias is not None, ACTIVATION=act, **config.all_kwargs())
    else:
        _matmul_grouped_kernel[grid](*args, HAS_BIAS=bias is not None, ACTIVATION=act)
    return c


def _tma_usable(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """TMA needs sm_90+, unit last stride, 16-byte aligned bases and row strides, and non-empty dims."""
    if _TensorDescriptor is None or a.shape[1] == 0:
        return False
    if not interpreting() and (a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] < 9):
        return False
    return all(
        t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0 for t in (a, b, c)
    )


def _matmul_stage3(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    act: int,
    use_tma: bool | None = None,
    config: triton.Config | None = None,
) -> torch.Tensor:
    """Stage 3; ``config`` runs one tile instead of autotuning (tests sweep the space). Left to choose (neither
    ``use_tma`` nor ``config``), tensors the Gluon kernel serves take it (``matmul_hopper``)."""
    c = _empty_result(a, b)
    M, K = a.shape
    N = b.shape[1]
    if c.numel() == 0:
        return c
    if use_tma is None and config is None and matmul_hopper.usable(a, b, c, bias):
        return matmul_hopper.matmul(a, b, c, bias, act)
    if use_tma is None:
        use_tma = _tma_usable(a, b, c)
    elif use_tma and not _tma_usable(a, b, c):
        raise ValueError("matmul: use_tma=True but these tensors cannot use TMA (needs sm_90+, aligned rows)")
    num_sms = _INTERPRETER_NUM_SMS if interpreting() else sm_count(a.device.index or 0)
    if use_tma:
        # Block shapes are placeholders; the autotune pre-hook (or the interpreter branch) sets them.
        a_src = _TensorDescriptor.from_tensor(a, [16, 16])
        b_src = _TensorDescriptor.from_tensor(b, [16, 16])
        c_src = _TensorDescriptor.from_tensor(c, [16, 16])
    else:
        a_src, b_src, c_src = a, b, c
    args = (a_src, b_src, c_src, bias, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1))
    if use_tma:
        # Room for one fp32 partial tile per program (the largest tile of the space), for the stream-K tail.
        tile = _INTERPRETER_CONFIG["BLOCK_M"] * _INTERPRETER_CONFIG["BLOCK_N"] if interpreting() else _MAX_TILE
        partials = torch.empty(num_sms * tile, dtype=torch.float32, device=a.device)
        flags = _stream_k_flags(a.device, num_sms)
    else:
        partials = flags = None
    args = (*args, c.stride(0), c.stride(1), partials, flags)
    flags = {"HAS_BIAS": bias is not None, "ACTIVATION": act, "USE_TMA": use_tma, "NUM_SMS": num_sms}
    grid = lambda meta: (min(num_sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)
    if interpreting():
        config = triton.Config(_INTERPRETER_CONFIG)
    if config is not None:
        _set_descriptor_blocks({"a_src": a_src, "b_src": b_src, "c_src": c_src, **config.kwargs})
        _matmul_persistent_kernel.fn[grid](*args, **flags, **config.all_kwargs())
    else:
        _matmul_persistent_kernel[grid](*args, **flags)
    return c


# ------------------------------------------------------------------------------------------------
# Public functions (one per stage; all share the reference's signature)
# ------------------------------------------------------------------------------------------------


def matmul_stage1(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """act(a @ b + bias) with the plain tiled kernel (stage 1)."""
    return _matmul_stage1(a, b, bias, _check_inputs(a, b, bias, activation))


def matmul_stage2(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """act(a @ b + bias) with the autotuned, grouped-order kernel (stage 2)."""
    return _matmul_stage2(a, b, bias, _check_inputs(a, b, bias, activation))


def matmul_stage3(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """act(a @ b + bias) with the persistent kernel, TMA on Hopper (stage 3)."""
    return _matmul_stage3(a, b, bias, _check_inputs(a, b, bias, activation))


matmul = matmul_stage3


def reference_matmul(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """Eager PyTorch: cuBLAS matmul, then the bias add and the activation as separate ops."""
    out = torch.matmul(a, b)
    if bias is not None:
        out = out + bias
    if activation == "relu":
        out = torch.relu(out)
    elif activation == "gelu":
        out = F.gelu(out, approximate="tanh")
    elif activation == "silu":
        out = F.silu(out)
    elif activation != "none":
        raise ValueError(f"reference_matmul: unknown activation {activation!r}")
    return out


# ------------------------------------------------------------------------------------------------
# SPEC
# ------------------------------------------------------------------------------------------------

_ACT_NAMES = {code: name for name, code in ACTIVATIONS.items()}


def _make_inputs(dims, dtype: torch.dtype, device: str) -> tuple:
    M, N, K = dims["M"], dims["N"], dims["K"]
    # Scaled so that C has unit variance whatever K is: keeps fp16 far from overflow at K = 8192.
    a = torch.randn(M, K, device=device).div_(K**0.25).to(dtype)
    b = torch.randn(K, N, device=device).div_(K**0.25).to(dtype)
    bias = torch.randn(N, device=device).to(dtype) if dims.get("bias", 0) else None
    return a, b, bias


def _dims_of(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *_: object) -> dict:
    return {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1], "bias": int(bias is not None)}


def _bytes_moved(dims, dtype: torch.dtype) -> int:
    M, N, K = dims["M"], dims["N"], dims["K"]
    return (M * K + K * N + M * N + N * dims.get("bias", 0)) * dtype.itemsize


def _flops(dims, dtype: torch.dtype) -> int:
    return 2 * dims["M"] * dims["N"] * dims["K"]


def _case(label: str, M: int, N: int, K: int, bias: int = 0, act: str = "none", small: bool = True) -> Case:
    return Case(label, {"M": M, "N": N, "K": K, "bias": bias, "act": ACTIVATIONS[act]}, small=small)


SPEC = KernelSpec(
    name="matmul",
    summary="C = act(A @ B + bias), fp16/bf16 in, fp32 accumulate, fused bias + relu/gelu(tanh)/silu epilogue",
    make_inputs=_make_inputs,
    reference=reference_matmul,
    stages={1: matmul_stage1, 2: matmul_stage2, 3: matmul_stage3},
    cases=(
        _case("64³ whole tiles, no epilogue", 64, 64, 64),
        _case("non-multiple M, N, K → masked tails", 50, 70, 40),
        _case("bias + relu", 64, 48, 64, bias=1, act="relu"),
        _case("bias + gelu(tanh)", 40, 64, 48, bias=1, act="gelu"),
        _case("silu, K < BLOCK_K", 33, 65, 8, act="silu"),
        _case("tall-skinny M ≫ N, bias", 128, 16, 32, bias=1),
        _case("1024² × 512, bias + gelu (GPU)", 1024, 1024, 512, bias=1, act="gelu", small=False),
        _case("odd 1000×1000×1000 (GPU)", 1000, 1000, 1000, small=False),
    ),
    bench_cases=(
        _case("4096³", 4096, 4096, 4096, small=False),
        _case("4096³ bias + gelu", 4096, 4096, 4096, bias=1, act="gelu", small=False),
        _case("8192³", 8192, 8192, 8192, small=False),
        _case("8192³ bias + gelu", 8192, 8192, 8192, bias=1, act="gelu", small=False),
    ),
    dtypes=(torch.float16, torch.bfloat16),
    # The interpreter sweeps these; bf16 runs one case per kernel (tests/reference_kernels), as the engine's
    # patched interpreter computes bf16 as the GPU does (mcp_server/engine/interp/rounding.py, bf16math.py).
    interpreter_dtypes=(torch.float16,),
    tolerances={
        # fp32 accumulation on both sides; the eager reference also rounds after the matmul and after
        # the bias add, so a couple of output ulps apart.
        torch.float16: Tolerance(atol=2e-2, rtol=1e-2),
        torch.bfloat16: Tolerance(atol=6e-2, rtol=2e-2),
    },
    bytes_moved=_bytes_moved,
    flops=_flops,
    dims_of=_dims_of,
    grad_inputs=(),
    bar="≥ 95 % of cuBLAS (torch.matmul + bias + activation, eager) at M=N=K 4096–8192, fp16 and bf16",
    call_kwargs=lambda dims: {"activation": _ACT_NAMES[dims.get("act", 0)]},
)

get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()
