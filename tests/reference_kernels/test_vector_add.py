"""vector_add reference kernel: every stage against PyTorch and its input checks."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import as_params, case_named, stage_params

from reference_kernels import vector_add as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]


@pytest.mark.parametrize(("stage", "case", "dtype"), stage_params(SPEC, SMALL, SPEC.interpreter_dtypes))
def test_each_stage_matches_torch_add(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cpu")


def test_bfloat16_matches_within_an_ulp_under_the_interpreter(check):
    # One case in bf16: the patched interpreter rounds fp32 → bf16 to nearest even, as the GPU does.
    case = case_named(SMALL, "full blocks + masked tail")
    check(SPEC, 2, case, torch.bfloat16, "cpu")


@pytest.mark.parametrize("progs_per_sm", [0, 1, 3], ids=["one block per program", "persistent 1", "persistent 3"])
def test_one_block_and_persistent_grids_cover_every_element_once(progs_per_sm):
    # Stage 2's autotuner chooses between the two grids; the interpreter runs one of them, so run both here.
    torch.manual_seed(0)
    n, block, n_sms = 1000, 64, 2  # 15 full blocks and a masked tail
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), float("nan"))
    n_blocks = -(-n // block)
    grid = (n_blocks if progs_per_sm == 0 else min(n_blocks, progs_per_sm * n_sms),)
    mod._vector_add_fwd_kernel[grid](x, y, out, n, 16, BLOCK=block, PROGS_PER_SM=progs_per_sm)
    torch.testing.assert_close(out, x + y)


def test_non_contiguous_inputs_keep_their_shape_and_values():
    x, y = torch.randn(30, 7).t(), torch.randn(7, 30)
    out = mod.vector_add_stage2(x, y)
    assert out.shape == (7, 30)
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        (torch.ones(8), torch.ones(9), "broadcast"),
        (torch.ones(8), torch.ones(8, dtype=torch.float16), "cast one"),
        (torch.ones(8, dtype=torch.int64), torch.ones(8, dtype=torch.int64), "dtype"),
        (torch.ones(8, device="meta"), torch.ones(8, device="meta"), "CUDA device"),
        (torch.ones(8), [1.0] * 8, "torch.Tensor"),
    ],
    ids=["shape mismatch", "dtype mismatch", "int64", "meta device", "list"],
)
def test_launcher_rejects_bad_input_with_actionable_text(x, y, match):
    for stage in SPEC.stages.values():
        with pytest.raises(ValueError, match=match):
            stage(x, y)


BF16, FP16, FP32 = SPEC.dtypes
# The GPU run: every case through stage 2 in bf16 (two autotune keys: the size class below 2^16 elements
# and 2^24), fp16 and fp32 on one small odd-sized case (each dtype is a key of its own), and stage 1 once
# at scale with a masked tail.
GPU_PARAMS = [
    *((2, c, BF16) for c in SPEC.cases),
    (2, case_named(SPEC.cases, "odd size, unaligned tail"), FP16),
    (2, case_named(SPEC.cases, "odd size, unaligned tail"), FP32),
    (1, case_named(SPEC.cases, "2^24 + 7: masked tail at scale"), BF16),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("stage", "case", "dtype"), as_params(GPU_PARAMS))
def test_each_stage_matches_torch_add_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda")
