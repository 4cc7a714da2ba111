"""Matrix multiply for Hopper (sm_90) in Gluon: stage 3's matmul where it applies.

``C = act(A @ B + bias)`` as in ``matmul.py``, with the warps given different jobs (warp specialization):

  one load warp         TMA copies of A's 128×64 and B's 64×256 blocks into a ring of STAGES shared-memory
                        slots; it refills a slot once both consumers have released it.
  two consumer groups   one warpgroup each, 64 of the tile's 128 rows and all 256 columns (a 64×256 fp32
                        accumulator, 128 registers per thread). Each keeps one wgmma in flight: block k's
                        product is issued before block k−1's slot is released. Bias and activation run on the
                        fp32 accumulator; the tile goes out through shared memory by a TMA store that the next
                        tile's first products overlap.

Registers are re-balanced per group (setmaxnreg): 240 per thread for a consumer, 24 for the load warp, so the
accumulator never spills. One persistent program per SM walks the tiles in groups of GROUP_M tile rows (L2
reuse), and the load warp runs ahead into the next tile while the consumers finish the last one.

Used when ``usable`` says so: an sm_90 GPU, fp16/bf16 A and B (and bias), row-major with 16-byte aligned rows and
base pointers (TMA), and enough 128×256 tiles to fill the GPU; everything else takes the Triton kernels of
``matmul.py``. Measured against cuBLAS and the Triton kernel: benchmarks/matmul_hopper.py.
"""

from __future__ import annotations

import torch

from reference_kernels._common import interpreting, sm_count
from reference_kernels._epilogue import bias_activation
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

BLOCK_M = 128  # two consumer warpgroups of 64 rows
BLOCK_N = 256
BLOCK_K = 64
GROUP_M = 8
# Shared memory: STAGES·(128·64 + 64·256) halves of A and B (48 KiB a slot) and 2·64·256 halves of C staging.
STAGES = 3
# Whether the tile goes out in two stores of 128 columns through a staging buffer of half the size.
EPILOGUE_SPLIT = False
_CONSUMER_REGS = 240
_LOADER_REGS = 24
# Registers per thread the compiler plans the whole kernel with: 12 warps × 32 threads × 168 ≤ 65536.
_MAXNREG = 168

if gluon is not None:

    @gluon.jit
    def _tile_coords(t, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
        """Tile t → (tile row, tile column), GROUP_M tile rows walked column by column (L2 reuse)."""
        per_group = GROUP_M * num_pid_n
        first_m = (t // per_group) * GROUP_M
        rows = gl.minimum(num_pid_m - first_m, GROUP_M)
        within = t % per_group
        return first_m + within % rows, within // rows

    @gluon.jit
    def _loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M: gl.constexpr,
                BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                STAGES: gl.constexpr):  # fmt: skip
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid_n = gl.cdiv(N, BLOCK_N)
        k_tiles = gl.cdiv(K, BLOCK_K)
        it = 0
        for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            pid_m, pid_n = _tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
            for kk in range(k_tiles):
                s = it % STAGES
                # A fresh barrier counts as having completed the phase before its first: the first STAGES
                # waits pass at once.
                mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                # TMA zero-fills reads past M, N and K, so the tails need no masks.
                tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, kk * BLOCK_K], ready.index(s),
                                                a_bufs.index(s))  # fmt: skip
                tma.async_copy_global_to_shared(b_desc, [kk * BLOCK_K, pid_n * BLOCK_N], ready.index(s),
                                                b_bufs.index(s))  # fmt: skip
                it += 1

    @gluon.jit
    def _consumer(a_bufs, b_bufs, c_bufs, ready, empty, c_desc, bias_ptr, M, N, K, WHICH: gl.constexpr,
                  HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                  EPI_SPLIT: gl.constexpr):  # fmt: skip
        """One warpgroup: rows [64·WHICH, +64) of every tile the program takes."""
        layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid_n = gl.cdiv(N, BLOCK_N)
        k_tiles = gl.cdiv(K, BLOCK_K)
        c_smem = c_bufs.index(WHICH)
        it = 0
        for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            pid_m, pid_n = _tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
            acc = gl.zeros([64, BLOCK_N], gl.float32, layout)
            for kk in range(k_tiles):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                a_smem = a_bufs.index(s).slice(WHICH * 64, 64, dim=0)
                b_smem = b_bufs.index(s)
                acc = warpgroup_mma(a_smem, b_smem, acc, is_async=True)
                # One product in flight: block kk−1's is done, so its slot goes back to the load warp.
                acc = warpgroup_mma_wait(1, deps=(acc,))
                if kk > 0:
                    mbarrier.arrive(empty.index((it - 1) % STAGES), count=1)
                it += 1
            acc = warpgroup_mma_wait(0, deps=(acc,))
            mbarrier.arrive(empty.index((it - 1) % STAGES), count=1)
            off_n = pid_n * BLOCK_N
            # The Triton kernels' epilogue, with the columns in the accumulator's layout.
            offs_n = off_n + gl.arange(0, BLOCK_N, gl.SliceLayout(0, layout))
            acc = bias_activation(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
            row = pid_m * BLOCK_M + WHICH * 64
            if EPI_SPLIT:
                # Two stores of 128 columns through one staging buffer of half the size (room for a fourth slot).
                halves = gl.permute(gl.reshape(acc.to(c_desc.dtype), [64, 2, BLOCK_N // 2]), (0, 2, 1))
                left, right = gl.split(halves)
                tma.store_wait(0)
                c_smem.store(left)
                fence_async_shared()
                tma.async_copy_shared_to_global(c_desc, [row, off_n], c_smem)
                tma.store_wait(0)
                c_smem.store(right)
                fence_async_shared()
                tma.async_copy_shared_to_global(c_desc, [row, off_n + BLOCK_N // 2], c_smem)
            else:
                # The previous tile's store must have read the staging buffer before it is overwritten.
                tma.store_wait(0)
                c_smem.store(acc.to(c_desc.dtype))
                fence_async_shared()
                # TMA stores clip at the tensor bounds, so partial tiles need no mask either.
                tma.async_copy_shared_to_global(c_desc, [row, off_n], c_smem)
        tma.store_wait(0)

    @gluon.jit
    def _matmul_hopper(a_desc, b_desc, c_desc, bias_ptr, M, N, K, HAS_BIAS: gl.constexpr,
                       ACTIVATION: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                       BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                       EPI_SPLIT: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):  # fmt: skip
        dtype: gl.constexpr = a_desc.dtype
        a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
        EPI_N: gl.constexpr = BLOCK_N // 2 if EPI_SPLIT else BLOCK_N
        c_bufs = gl.allocate_shared_memory(dtype, [2, 64, EPI_N], c_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)  # both consumers release a slot
        gl.warp_specialize(
            [
                (_consumer, (a_bufs, b_bufs, c_bufs, ready, empty, c_desc, bias_ptr, M, N, K, 0, HAS_BIAS,
                             ACTIVATION, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, EPI_SPLIT)),
                (_consumer, (a_bufs, b_bufs, c_bufs, ready, empty, c_desc, bias_ptr, M, N, K, 1, HAS_BIAS,
                             ACTIVATION, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, EPI_SPLIT)),
                (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                           GROUP_M, STAGES)),
            ],
            [4, 1],
            [CONSUMER_REGS, LOADER_REGS],
        )  # fmt: skip


def applies(capability: tuple[int, int], dtype: torch.dtype, M: int, N: int, K: int, sms: int, aligned: bool) -> bool:
    """The rule behind ``usable``, on plain facts: an sm_90 GPU, fp16/bf16, a non-empty K, at least one
    128×256 tile per SM (smaller problems leave SMs idle with these tiles; the Triton kernel tunes its tile),
    and TMA-ready tensors (unit last stride, 16-byte aligned rows and bases)."""
    tiles = -(-M // BLOCK_M) * -(-N // BLOCK_N)
    return gluon is not None and capability == (9, 0) and dtype in GL_DTYPES and K > 0 and tiles >= sms and aligned


def usable(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether ``matmul`` serves these tensors (A [M, K], B [K, N], the result C, bias); never under the
    interpreter."""
    if gluon is None or interpreting() or a.device.type != "cuda":
        return False
    if bias is not None and not (bias.is_contiguous() and bias.dtype == a.dtype):
        return False
    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    aligned = all(
        t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0 for t in (a, b, c)
    )
    M, K = a.shape
    N = b.shape[1]
    return applies(torch.cuda.get_device_capability(index), a.dtype, M, N, K, sm_count(index), aligned)


def launch_args(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    bias: torch.Tensor | None,
    act: int,
    stages: int = STAGES,
    group_m: int = GROUP_M,
    epilogue_split: bool = EPILOGUE_SPLIT,
) -> tuple:
    """The kernel's arguments: TMA descriptors over A, B and C, and its compile-time flags."""
    epi_n = BLOCK_N // 2 if epilogue_split else BLOCK_N
    a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K], shared_layout(a.dtype, BLOCK_M, BLOCK_K))
    b_desc = TensorDescriptor.from_tensor(b, [BLOCK_K, BLOCK_N], shared_layout(a.dtype, BLOCK_K, BLOCK_N))
    c_desc = TensorDescriptor.from_tensor(c, [64, epi_n], shared_layout(a.dtype, 64, epi_n))
    M, K = a.shape
    N = b.shape[1]
    return (
        a_desc, b_desc, c_desc, bias, M, N, K, bias is not None, act,
        BLOCK_M, BLOCK_N, BLOCK_K, group_m, stages, epilogue_split, _CONSUMER_REGS, _LOADER_REGS,
    )  # fmt: skip


def matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None, act: int) -> torch.Tensor:
    """C = act(A @ B + bias) into ``c`` for tensors ``usable`` accepts; ``act`` a code of _epilogue.ACTIVATIONS."""
    M, _ = a.shape
    N = b.shape[1]
    tiles = -(-M // BLOCK_M) * -(-N // BLOCK_N)
    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    grid = (min(sm_count(index), tiles),)
    _matmul_hopper[grid](*launch_args(a, b, c, bias, act), num_warps=4, maxnreg=_MAXNREG)
    return c
