"""swiglu reference kernel: silu(a) · b and its gradients against PyTorch, and its input checks."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import as_params, case_named, stage_params

from reference_kernels import swiglu as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]


@pytest.mark.parametrize(("stage", "case", "dtype"), stage_params(SPEC, SMALL, SPEC.interpreter_dtypes))
def test_swiglu_matches_torch_and_its_gradients(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cpu")


def test_bfloat16_matches_within_an_ulp_under_the_interpreter(check):
    # One case in bf16: the patched interpreter rounds fp32 → bf16 to nearest even, as the GPU does.
    case = case_named(SMALL, "full blocks + masked tail")
    check(SPEC, 2, case, torch.bfloat16, "cpu")


def test_backward_saves_only_the_inputs():
    a = torch.randn(4, 33, requires_grad=True)
    b = torch.randn(4, 33, requires_grad=True)
    c = mod.swiglu_stage2(a, b)
    saved = c.grad_fn.saved_tensors
    assert len(saved) == 2
    assert {t.data_ptr() for t in saved} == {a.data_ptr(), b.data_ptr()}


def test_gradient_of_a_fused_gate_up_projection_split_in_two_flows_to_both_halves():
    gate_up = torch.randn(3, 2, 40, requires_grad=True)
    a, b = gate_up.chunk(2, dim=-1)  # non-contiguous halves
    mod.swiglu_stage2(a, b).sum().backward()
    ref = gate_up.detach().double().requires_grad_(True)
    ra, rb = ref.chunk(2, dim=-1)
    mod.reference_swiglu(ra, rb).sum().backward()
    torch.testing.assert_close(gate_up.grad.double(), ref.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (torch.ones(4, 8), torch.ones(4, 9), "must match"),
        (torch.ones(4, 8), torch.ones(4, 8, dtype=torch.float16), "cast one"),
        (torch.ones(4, 8, dtype=torch.float64), torch.ones(4, 8, dtype=torch.float64), "dtype"),
        (torch.ones(4, 8, device="meta"), torch.ones(4, 8, device="meta"), "CUDA device"),
    ],
    ids=["shape mismatch", "dtype mismatch", "float64", "meta device"],
)
def test_launcher_rejects_bad_input_with_actionable_text(a, b, match):
    with pytest.raises(ValueError, match=match):
        mod.swiglu_stage2(a, b)


BF16, FP16, FP32 = SPEC.dtypes
# The GPU run: every case in bf16 (two autotune keys per kernel: the size class below 2^16 elements and
# the LLaMA-sized one), and fp16 and fp32 on one small case with full blocks and a masked tail (each
# dtype is a key of its own).
GPU_PARAMS = [
    *((2, c, BF16) for c in SPEC.cases),
    (2, case_named(SPEC.cases, "full blocks + masked tail"), FP16),
    (2, case_named(SPEC.cases, "full blocks + masked tail"), FP32),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("stage", "case", "dtype"), as_params(GPU_PARAMS))
def test_swiglu_matches_torch_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda")
