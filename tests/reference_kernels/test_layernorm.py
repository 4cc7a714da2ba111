"""layernorm reference kernel: every stage against PyTorch (y, dx, dw, db) and its input checks."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import as_params, case_named, stage_params

from reference_kernels import layernorm as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]


@pytest.mark.parametrize(("stage", "case", "dtype"), stage_params(SPEC, SMALL, SPEC.interpreter_dtypes, SPEC.takes))
def test_each_stage_matches_torch_layer_norm_and_its_gradients(stage, case, dtype, check):
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
    # Forward: 16 values per thread, from 8192 columns 64 with x read twice; unmasked tiles only where they cover
    # the rows exactly.
    one = {"ROWS": 1, "EVEN": True}
    assert mod._fwd_plan(4096, 4096, 132) == ((4096,), {"BLOCK_N": 4096, "num_warps": 8, "RELOAD": False} | one)
    assert mod._fwd_plan(4096, 8192, 132) == ((4096,), {"BLOCK_N": 8192, "num_warps": 4, "RELOAD": True} | one)
    assert mod._fwd_plan(4096, 16384, 132)[1] == {"BLOCK_N": 16384, "num_warps": 8, "RELOAD": True} | one
    assert mod._fwd_plan(4096, 4000, 132)[1]["EVEN"] is False
    assert mod._fwd_plan(4095, 1024, 132)[1] == {
        "BLOCK_N": 1024,
        "ROWS": 4,
        "num_warps": 8,
        "EVEN": False,
        "RELOAD": False,
    }
    # Backward: 16 values per thread; two 8-warp programs per SM fit (~120 registers), one 16-warp.
    assert mod._bwd_plan(4096, 4096, 132) == (264, {"BLOCK_N": 4096, "ROWS": 1, "STAGES": 3, "num_warps": 8})
    assert mod._bwd_plan(4096, 8192, 132) == (132, {"BLOCK_N": 8192, "ROWS": 1, "STAGES": 3, "num_warps": 16})


@pytest.mark.parametrize(("n_cols", "rows"), [(256, 1), (200, 1), (256, 2), (200, 2)])
def test_forward_reading_x_twice_matches_holding_it(n_cols, rows):
    # RELOAD reads x again for the output; with masks (200 of 256 columns) and without, one or two rows a program.
    torch.manual_seed(0)
    m = 6
    x = 3 * torch.randn(m, n_cols) + 1
    w, b = 1 + 0.1 * torch.randn(n_cols), 0.1 * torch.randn(n_cols)
    outs = []
    for reload in (False, True):
        y, mean, rstd = torch.empty_like(x), torch.empty(m), torch.empty(m)
        even = n_cols == 256
        mod._layernorm_fwd_kernel[(m // rows,)](
            x, w, b, y, mean, rstd, m, n_cols, n_cols, n_cols, 1e-5, BLOCK_N=256, ROWS=rows, EVEN=even, RELOAD=reload
        )
        outs.append((y, mean, rstd))
    torch.testing.assert_close(outs[1][0], torch.nn.functional.layer_norm(x, (n_cols,), w, b), atol=1e-5, rtol=1e-5)
    for held, again in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(again, held, atol=0, rtol=0)


def test_one_block_stages_reject_rows_past_their_limit_and_name_stage3():
    n = mod.ONE_BLOCK_MAX_COLS + 1
    x, w, b = torch.randn(1, n), torch.ones(n), torch.zeros(n)
    for stage in (1, 2):
        with pytest.raises(ValueError, match="layernorm_stage3"):
            SPEC.stages[stage](x, w, b)


def test_three_dimensional_input_normalises_its_last_dimension():
    x = torch.randn(2, 3, 48, requires_grad=True)
    w, b = torch.randn(48, requires_grad=True), torch.randn(48, requires_grad=True)
    y = mod.layernorm_stage3(x, w, b)
    torch.testing.assert_close(y, mod.reference_layernorm(x, w, b), atol=1e-5, rtol=1e-5)
    y.sum().backward()  # stride-0 upstream gradient
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    mod.reference_layernorm(x, w, b).sum().backward()
    for ours, ref in zip(grads, (x.grad, w.grad, b.grad), strict=True):
        torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("x", "w", "b", "match"),
    [
        (torch.ones(4, 8), torch.ones(7), torch.ones(8), r"expected \(8,\)"),
        (torch.ones(4, 8), torch.ones(8, dtype=torch.float16), torch.ones(8), "weight.to"),
        (torch.ones(4, 8, dtype=torch.float64), torch.ones(8), torch.ones(8), "dtype"),
        (torch.ones(4, 8, device="meta"), torch.ones(8), torch.ones(8), "CUDA device"),
        (torch.tensor(1.0), torch.ones(1), torch.ones(1), "0-d"),
        (torch.ones(4, 8), torch.ones(8), None, "torch.Tensor"),
    ],
    ids=["weight shape", "weight dtype", "float64", "meta device", "0-d", "no bias"],
)
def test_launcher_rejects_bad_input_with_actionable_text(x, w, b, match):
    with pytest.raises(ValueError, match=match):
        mod.layernorm_stage3(x, w, b)


BF16, FP16, FP32 = SPEC.dtypes
# The GPU run, sized to compile each kernel variant about once (stage 3 tunes nothing; stage 2 autotunes
# one row length per kernel). Every case through stage 3 in bf16 covers every stage-3 path at every size
# (one-block and looped, forward and backward); fp16 and fp32 take the cases that cover both paths of
# both directions between them; stages 1 and 2 (their kernels differ from stage 3's only in launch
# config) run one small masked case each.
GPU_PARAMS = [
    *((3, c, BF16) for c in SPEC.cases),
    (3, case_named(SPEC.cases, "multi-row tiles, more rows than backward programs"), FP16),
    (3, case_named(SPEC.cases, "long row → looped path"), FP16),
    (3, case_named(SPEC.cases, "one-block forward, looped backward"), FP32),
    (1, case_named(SPEC.cases, "non-pow2 tail"), BF16),
    (2, case_named(SPEC.cases, "multi-row tiles, more rows than backward programs"), BF16),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("stage", "case", "dtype"), as_params(GPU_PARAMS))
def test_each_stage_matches_torch_layer_norm_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("n", [4096, 40000], ids=["one-block backward", "looped backward"])
def test_weight_and_bias_gradients_are_bitwise_reproducible_on_gpu(n):
    torch.manual_seed(0)
    x, w, b = SPEC.make_inputs({"M": 2048, "N": n}, torch.bfloat16, "cuda")
    dy = torch.randn_like(x)
    runs = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
        mod.layernorm_stage3(*leaves).backward(dy)
        runs.append([t.grad for t in leaves])
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


# The plain sums overflow on purpose beside the scaled ones (numpy says so under the interpreter); the test is
# that the kernel's result does not.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(
    ("rows", "cols"),
    [(3, 300), (3, 9000), (2, mod.FWD_ONE_BLOCK_MAX_COLS + 100)],
    ids=["one-block", "one-block-wide", "looped"],
)
def test_rows_near_the_float32_maximum_normalise_without_overflow(rows, cols):
    # A quarter of fp32's maximum: Σx and Σ(x − μ)² overflow fp32 where computed plainly (NaN or y = b). The
    # statistics must come out of scaled sums instead; float64 gives the exact answer to compare with. At 9000
    # columns partial sums overflow both ways and Σx comes out NaN, not ±inf: the guard must take that too.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device=device)
    x = x / x.abs().max() * (torch.finfo(torch.float32).max / 4)
    w, b = torch.randn(cols, device=device), torch.randn(cols, device=device)
    y = mod.layernorm_stage3(x, w, b)
    want = mod.reference_layernorm(x.double(), w.double(), b.double()).float()
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, want, atol=1e-4, rtol=1e-4)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_tile_of_stacked_rows_mixing_huge_and_ordinary_rows_normalises_each_row_by_its_own_statistics():
    # 300 columns stack 8 rows per program: every tile holds rows near a quarter of fp32's maximum (whose plain
    # sums overflow) beside rows of order 1 and 1e-20 (whose scaled sums underflow). Each row must take the sum
    # that holds its statistic, whatever its neighbours need.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # Enough rows that a GPU's SMs still get two programs each with 8 rows per program.
    n_rows, cols = (4096 if device == "cuda" else 32), 300
    assert mod._fwd_plan(n_rows, cols, mod._num_sms(torch.empty(0, device=device)))[1]["ROWS"] > 1
    torch.manual_seed(0)
    x = torch.randn(n_rows, cols, device=device) + 3.0
    scales = torch.tensor([torch.finfo(torch.float32).max / 4 / 8, 1.0, 1e-20, 1.0], device=device)
    x = x * scales.repeat(n_rows // 4)[:, None]
    w, b = torch.randn(cols, device=device), torch.randn(cols, device=device)
    got = mod.layernorm_stage3(x, w, b, eps=1e-45)
    want = mod.reference_layernorm(x.double(), w.double(), b.double(), eps=1e-45).float()
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize(("rows", "cols", "even"), [(32, 64, True), (30, 64, False), (4, 256, True)])
def test_stage3_forward_matches_torch_with_and_without_masks(rows, cols, even):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and cols <= 64:
        # Enough rows that a GPU's SMs still get two stacked programs each.
        rows = rows * 1024 + (0 if even else 1)
    x = torch.randn(rows, cols, device=device) + 0.5
    assert mod._fwd_plan(rows, cols, mod._num_sms(x))[1]["EVEN"] is even
    w, b = torch.randn(cols, device=device), torch.randn(cols, device=device)
    torch.testing.assert_close(mod.layernorm_stage3(x, w, b), mod.reference_layernorm(x, w, b), atol=1e-5, rtol=1e-5)


def test_ordinary_rows_keep_their_plain_statistics_next_to_the_overflow_guard():
    # Values of order 1 and tiny ones: the scaled sums underflow there, so the plain ones must be used.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for scale in (1.0, 1e-20):
        x = (torch.randn(4, 200, device=device) + 3.0) * scale
        w, b = torch.randn(200, device=device), torch.randn(200, device=device)
        want = mod.reference_layernorm(x.double(), w.double(), b.double(), eps=1e-45).float()
        got = mod.layernorm_stage3(x, w, b, eps=1e-45)
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
