"""rmsnorm reference kernel: every stage against PyTorch (y, dx, dw) and its input checks."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import as_params, case_named, stage_params

from reference_kernels import rmsnorm as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]


@pytest.mark.parametrize(("stage", "case", "dtype"), stage_params(SPEC, SMALL, SPEC.interpreter_dtypes, SPEC.takes))
def test_each_stage_matches_torch_rms_norm_and_its_gradients(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cpu")


def test_bfloat16_matches_within_an_ulp_under_the_interpreter(check):
    # One case in bf16: the patched interpreter rounds fp32 → bf16 to nearest even, as the GPU does.
    case = case_named(SMALL, "non-pow2 tail")
    check(SPEC, 3, case, torch.bfloat16, "cpu")


def test_stage3_chooses_one_block_or_looped_kernels_by_row_length():
    assert mod._paths(3, mod.BWD_ONE_BLOCK_MAX_COLS) == ("one_block", "one_block")
    assert mod._paths(3, mod.BWD_ONE_BLOCK_MAX_COLS + 1) == ("one_block", "looped")
    assert mod._paths(3, mod.FWD_ONE_BLOCK_MAX_COLS + 1) == ("looped", "looped")


def test_stage3_plans_follow_the_register_budget_rules():
    # The rules behind stage 3's configs (see _fwd_plan / _bwd_plan): checked here so a change is deliberate.
    # Forward: 16 values per thread; from 8192 columns x is read a second time instead of held; unmasked tiles
    # only where they cover the rows exactly.
    even = {"EVEN": True, "RELOAD": False}
    assert mod._fwd_plan(4096, 4096, 132) == ((4096,), {"BLOCK_N": 4096, "ROWS": 1, "num_warps": 8, **even})
    assert mod._fwd_plan(4096, 8192, 132) == (
        (4096,),
        {"BLOCK_N": 8192, "ROWS": 1, "num_warps": 16, "EVEN": True, "RELOAD": True},
    )
    assert mod._fwd_plan(4096, 4000, 132)[1]["EVEN"] is False
    assert mod._fwd_plan(4096, 1024, 132)[1] == {"BLOCK_N": 1024, "ROWS": 4, "num_warps": 8, **even}
    assert mod._fwd_plan(4095, 1024, 132)[1]["EVEN"] is False
    assert mod._bwd_plan(4096, 8192, 132) == (132, {"BLOCK_N": 8192, "ROWS": 1, "STAGES": 3, "num_warps": 16})


@pytest.mark.parametrize(
    ("rows", "cols", "flags"),
    [(32, 64, {"EVEN": True, "RELOAD": False}), (30, 64, {"EVEN": False, "RELOAD": False}),
     (4, 8192, {"EVEN": True, "RELOAD": True}), (4, 8000, {"EVEN": False, "RELOAD": True})],
    ids=["stacked-unmasked", "stacked-masked", "second-read-unmasked", "second-read-masked"],
)  # fmt: skip
def test_stage3_forward_matches_torch_with_and_without_masks_and_second_read(rows, cols, flags):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and cols <= 64:
        # Enough rows that a GPU's SMs still get two stacked programs each.
        rows = rows * 1024 + (0 if flags["EVEN"] else 1)
    x = torch.randn(rows, cols, device=device)
    _, meta = mod._fwd_plan(rows, cols, mod._num_sms(x))
    assert {k: meta[k] for k in flags} == flags
    if cols <= 64:
        assert meta["ROWS"] > 1
    w = torch.randn(cols, device=device)
    torch.testing.assert_close(mod.rmsnorm_stage3(x, w), mod.reference_rmsnorm(x, w), atol=1e-5, rtol=1e-5)


def test_stage2_rejects_rows_past_its_limit_and_names_stage3():
    n = mod.ONE_BLOCK_MAX_COLS + 1
    with pytest.raises(ValueError, match="rmsnorm_stage3"):
        mod.rmsnorm_stage2(torch.randn(1, n), torch.ones(n))


def test_three_dimensional_input_and_custom_eps():
    x = torch.randn(2, 3, 48, requires_grad=True)
    w = torch.randn(48, requires_grad=True)
    y = mod.rmsnorm_stage3(x, w, 1e-2)
    torch.testing.assert_close(y, mod.reference_rmsnorm(x, w, 1e-2), atol=1e-5, rtol=1e-5)
    y.sum().backward()  # stride-0 upstream gradient
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    mod.reference_rmsnorm(x, w, 1e-2).sum().backward()
    torch.testing.assert_close(gx, x.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gw, w.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("x", "w", "match"),
    [
        (torch.ones(4, 8), torch.ones(7), r"expected \(8,\)"),
        (torch.ones(4, 8), torch.ones(8, dtype=torch.float16), "weight.to"),
        (torch.ones(4, 8, dtype=torch.int32), torch.ones(8), "dtype"),
        (torch.ones(4, 8, device="meta"), torch.ones(8, device="meta"), "CUDA device"),
        (torch.tensor(1.0), torch.ones(1), "0-d"),
    ],
    ids=["weight shape", "weight dtype", "int32", "meta device", "0-d"],
)
def test_launcher_rejects_bad_input_with_actionable_text(x, w, match):
    with pytest.raises(ValueError, match=match):
        mod.rmsnorm_stage3(x, w)


BF16, FP16, FP32 = SPEC.dtypes
# The GPU run, sized to compile each kernel variant about once (stage 3 tunes nothing; stage 2 autotunes
# one row length per kernel). Every case through stage 3 in bf16 covers every stage-3 path at every size
# (one-block and looped, forward and backward); fp16 and fp32 take the cases that cover both paths of
# both directions between them; stage 2 (its kernels differ from stage 3's only in launch config) runs
# one small masked case.
GPU_PARAMS = [
    *((3, c, BF16) for c in SPEC.cases),
    (3, case_named(SPEC.cases, "multi-row tiles, more rows than backward programs"), FP16),
    (3, case_named(SPEC.cases, "long row → looped path"), FP16),
    (3, case_named(SPEC.cases, "one-block forward, looped backward"), FP32),
    (2, case_named(SPEC.cases, "multi-row tiles, more rows than backward programs"), BF16),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("stage", "case", "dtype"), as_params(GPU_PARAMS))
def test_each_stage_matches_torch_rms_norm_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("n", [4096, 40000], ids=["one-block backward", "looped backward"])
def test_weight_gradient_is_bitwise_reproducible_on_gpu(n):
    torch.manual_seed(0)
    x, w = SPEC.make_inputs({"M": 2048, "N": n}, torch.bfloat16, "cuda")
    dy = torch.randn_like(x)
    grads = []
    for _ in range(2):
        wl = w.detach().clone().requires_grad_(True)
        mod.rmsnorm_stage3(x, wl).backward(dy)
        grads.append(wl.grad)
    assert torch.equal(grads[0], grads[1])
