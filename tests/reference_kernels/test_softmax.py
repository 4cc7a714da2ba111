"""softmax reference kernel: every stage against PyTorch (forward and backward) and its input checks."""

from __future__ import annotations

import re

import pytest
import torch

from reference_kernels import softmax as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]
pytestmark = [
    # Padding rows of a multi-row tile compute -inf - -inf = NaN before their masked store; numpy warns.
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    # The interpreter turns a 0-d array into a Python int for loop bounds (triton 3.6 + numpy 2.3).
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning"),
]


def _fits(stage: int, case) -> bool:
    return stage == 3 or case.dims["N"] <= mod.ONE_BLOCK_MAX_COLS


def _id(stage: int, case, dtype: torch.dtype) -> str:
    label = re.sub(r"[^0-9A-Za-z]+", "-", case.label).strip("-")
    return f"stage{stage}-{label}-{str(dtype).removeprefix('torch.')}"


def _params(cases, dtypes_of):
    return [
        pytest.param(stage, case, dtype, id=_id(stage, case, dtype))
        for case in cases
        for stage in sorted(SPEC.stages)
        if _fits(stage, case)
        for dtype in dtypes_of(case)
    ]


@pytest.mark.parametrize(("stage", "case", "dtype"), _params(SMALL, lambda c: SPEC.interpreter_dtypes))
def test_each_stage_matches_torch_softmax_and_its_gradient(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cpu")


def test_bfloat16_matches_within_an_ulp_under_the_interpreter(check):
    # The interpreter rounds fp32 → bf16 toward zero, so bf16 is checked once at the SPEC tolerance.
    case = next(c for c in SMALL if c.label == "non-pow2 tail")
    check(SPEC, 3, case, torch.bfloat16, "cpu")


def test_one_block_stages_reject_rows_past_their_limit_and_name_stage3():
    x = torch.randn(1, mod.ONE_BLOCK_MAX_COLS + 1)
    for stage in (1, 2):
        with pytest.raises(ValueError, match="softmax_stage3"):
            SPEC.stages[stage](x)


def test_transposed_input_and_expanded_upstream_gradient_are_handled():
    x = torch.randn(40, 6).t().requires_grad_(True)  # rows with stride 1 only after a copy
    y = mod.softmax_stage3(x)
    torch.testing.assert_close(y, torch.softmax(x.detach(), -1), atol=1e-6, rtol=1e-5)
    y.sum().backward()  # upstream gradient is a stride-0 expand of a scalar
    torch.testing.assert_close(x.grad, torch.zeros_like(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (torch.ones(4, 8, dtype=torch.int32), "dtype"),
        (torch.ones(4, 8, dtype=torch.float64), "dtype"),
        (torch.ones(4, 8, device="meta"), "CUDA device"),
        (torch.tensor(1.0), "0-d"),
    ],
    ids=["int32", "float64", "meta device", "0-d"],
)
def test_launcher_rejects_bad_input_with_actionable_text(bad, match):
    with pytest.raises(ValueError, match=match):
        mod.softmax_stage3(bad)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("stage", "case", "dtype"), _params(SPEC.cases, lambda c: SPEC.dtypes if c.small else SPEC.dtypes[:1])
)
def test_each_stage_matches_torch_softmax_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda")
