"""reference_kernels.attention: every stage against the materialised-softmax reference, both stage-3 load
paths, input checks."""

from __future__ import annotations

import math
import re

import pytest
import torch

from reference_kernels import attention as at

SPEC = at.SPEC
HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"
SMALL_CASES = [c for c in SPEC.cases if c.small]
ALL_CASES = list(SPEC.cases)


def _ids(cases) -> list[str]:
    return [re.sub(r"[^0-9A-Za-z]+", "-", c.label).strip("-") for c in cases]


@pytest.mark.parametrize("stage", sorted(SPEC.stages))
@pytest.mark.parametrize("case", SMALL_CASES, ids=_ids(SMALL_CASES))
@pytest.mark.parametrize("dtype", SPEC.interpreter_dtypes, ids=str)
def test_every_stage_matches_the_reference_on_the_small_cases(check, stage, case, dtype):
    check(SPEC, stage, case, dtype, DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
@pytest.mark.parametrize("case", ALL_CASES, ids=_ids(ALL_CASES))
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=str)
def test_every_stage_matches_the_reference_on_the_gpu_for_all_cases_and_dtypes(check, stage, case, dtype):
    check(SPEC, stage, case, dtype, "cuda")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("use_desc", [True, False], ids=["tma-descriptors", "pointers"])
def test_stage3_agrees_through_tma_descriptors_and_through_pointers(use_desc, causal):
    if use_desc and HAS_GPU and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA descriptors need sm_90+")
    torch.manual_seed(0)
    # seq 72 with the interpreter's 32×16 tiles: unmasked blocks, a diagonal pair and a partial tail,
    # and (2 heads) rows past one head's end that belong to the next head in the descriptor view.
    q, k, v = (torch.randn(1, 2, 72, 64, device=DEVICE).half() for _ in range(3))
    got, _ = at._attention_stage3(q, k, v, causal, use_desc=use_desc)
    torch.testing.assert_close(got, at.reference_attention(q, k, v, causal), atol=1e-2, rtol=1e-2)


def test_non_contiguous_inputs_take_the_pointer_path_and_stay_correct():
    torch.manual_seed(0)
    # [B, S, H, D] storage viewed as [B, H, S, D]: strided, so no descriptor.
    q, k, v = (torch.randn(1, 40, 2, 32, device=DEVICE).half().transpose(1, 2) for _ in range(3))
    assert not at._descriptors_usable(q, k, v)
    expected = at.reference_attention(q, k, v, True)
    for stage in sorted(SPEC.stages):
        torch.testing.assert_close(SPEC.stages[stage](q, k, v, causal=True), expected, atol=1e-2, rtol=1e-2)


def test_causal_first_row_attends_only_to_the_first_key():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 32, 16, device=DEVICE).half() for _ in range(3))
    out = at.attention(q, k, v, causal=True)
    torch.testing.assert_close(out[0, 0, 0], v[0, 0, 0], atol=1e-3, rtol=0)


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (
            lambda d: [torch.randn(1, 2, 16, 64, device=d).half()] * 2 + [torch.randn(1, 2, 8, 64, device=d).half()],
            "one shape",
        ),
        (lambda d: [torch.randn(1, 2, 16, 64, device=d)] * 3, "float16 or bfloat16"),
        (lambda d: [torch.randn(1, 2, 16, 48, device=d).half()] * 3, "head_dim must be one of"),
        (lambda d: [torch.randn(2, 16, 64, device=d).half()] * 3, "4-D"),
    ],
    ids=["mismatched-shapes", "fp32", "head-dim-48", "3-d"],
)
def test_bad_inputs_raise_value_error_that_names_the_problem(make_args, message):
    with pytest.raises(ValueError, match=message):
        at.attention(*make_args(DEVICE))


def test_non_bool_causal_flag_raises_value_error():
    q = torch.randn(1, 1, 16, 16, device=DEVICE).half()
    with pytest.raises(ValueError, match="causal must be a bool"):
        at.attention(q, q, q, causal=1)


def test_spec_flops_halve_for_causal_and_bytes_count_q_k_v_and_o():
    dims = {"B": 2, "H": 3, "S": 128, "D": 64}
    assert SPEC.flops({**dims, "causal": 1}, torch.float16) * 2 == SPEC.flops({**dims, "causal": 0}, torch.float16)
    assert SPEC.bytes_moved(dims, torch.bfloat16) == 4 * 2 * 3 * 128 * 64 * 2
    q, k, v = SPEC.make_inputs({**dims, "causal": 0}, torch.float16, "cpu")
    assert SPEC.dims_of(q, k, v) == dims
    assert SPEC.call_kwargs({**dims, "causal": 1}) == {"causal": True}
    assert math.isclose(SPEC.flops(dims, torch.float16), 4 * 2 * 3 * 128 * 128 * 64)
