"""vector_add reference kernel: every stage against PyTorch and its input checks."""

from __future__ import annotations

import re

import pytest
import torch

from reference_kernels import vector_add as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]


def _id(stage: int, case, dtype: torch.dtype) -> str:
    label = re.sub(r"[^0-9A-Za-z]+", "-", case.label).strip("-")
    return f"stage{stage}-{label}-{str(dtype).removeprefix('torch.')}"


def _params(cases, dtypes_of):
    return [
        pytest.param(stage, case, dtype, id=_id(stage, case, dtype))
        for case in cases
        for stage in sorted(SPEC.stages)
        for dtype in dtypes_of(case)
    ]


@pytest.mark.parametrize(("stage", "case", "dtype"), _params(SMALL, lambda c: SPEC.interpreter_dtypes))
def test_each_stage_matches_torch_add(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cpu")


def test_bfloat16_matches_within_an_ulp_under_the_interpreter(check):
    # The interpreter rounds fp32 → bf16 toward zero, so bf16 is checked once at the SPEC tolerance.
    case = next(c for c in SMALL if c.label == "full blocks + masked tail")
    check(SPEC, 2, case, torch.bfloat16, "cpu")


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


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("stage", "case", "dtype"), _params(SPEC.cases, lambda c: SPEC.dtypes if c.small else SPEC.dtypes[:1])
)
def test_each_stage_matches_torch_add_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda")
