"""softmax reference kernel: every stage against PyTorch (forward and backward) and its input checks."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from kernel_cases import as_params, case_named, stage_params

from reference_kernels import softmax as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]
pytestmark = [
    # Padding rows of a multi-row tile compute -inf - -inf = NaN before their masked store; numpy warns.
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]


@pytest.mark.parametrize(("stage", "case", "dtype"), stage_params(SPEC, SMALL, SPEC.interpreter_dtypes, SPEC.takes))
def test_each_stage_matches_torch_softmax_and_its_gradient(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cpu")


def test_bfloat16_matches_within_an_ulp_under_the_interpreter(check):
    # One case in bf16: the patched interpreter rounds fp32 → bf16 to nearest even, as the GPU does.
    case = case_named(SMALL, "non-pow2 tail")
    check(SPEC, 3, case, torch.bfloat16, "cpu")


@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")  # the all -inf row: 1 / 0
def test_looped_rows_with_minus_inf_scores_match_torch_and_all_minus_inf_gives_nan():
    # Per-lane running maxima: a lane that has seen only -inf (masked scores, tails) must add 0, not NaN.
    torch.manual_seed(0)
    x = 3.0 * torch.randn(4, mod.FWD_ONE_BLOCK_MAX_COLS + 232)
    x[0, :30000] = float("-inf")  # leading -inf: whole chunks with nothing finite
    x[1, 2048:] = float("-inf")
    x[2] = float("-inf")  # NaN row, as in PyTorch
    x[3, ::7] = float("-inf")
    x.requires_grad_(True)
    y = mod.softmax_stage3(x)
    torch.testing.assert_close(y, torch.softmax(x.detach(), -1), atol=1e-7, rtol=1e-5, equal_nan=True)
    assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3]]).any()
    g = torch.randn_like(y)
    y.backward(g)
    ref = x.detach().clone().requires_grad_(True)
    torch.softmax(ref, -1).backward(g)
    torch.testing.assert_close(x.grad, ref.grad, atol=1e-7, rtol=1e-5, equal_nan=True)


def test_stage3_tiles_keep_16_values_per_thread_and_two_programs_per_sm():
    # The rule behind stage 3's configs (see _one_block_plan): checked here so a change is deliberate.
    assert mod._one_block_plan(4096, 8192, 132) == ((4096,), {"BLOCK_N": 8192, "ROWS": 1, "num_warps": 16})
    assert mod._one_block_plan(4096, 1024, 132) == ((2048,), {"BLOCK_N": 1024, "ROWS": 2, "num_warps": 4})
    # Few rows: stacking stops while each SM still gets two programs.
    assert mod._one_block_plan(300, 64, 132)[1]["ROWS"] == 1


@pytest.mark.parametrize(("rows", "cols", "even"), [(32, 64, True), (30, 64, False), (4, 256, True), (4, 250, False)])
def test_stage3_forward_drops_its_masks_only_where_the_tiles_cover_the_rows(rows, cols, even):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and cols <= 64:
        # Enough rows that a GPU's SMs still get two stacked programs each.
        rows = rows * 1024 + (0 if even else 1)
    x = torch.randn(rows, cols, device=device)
    _, meta = mod._one_block_plan(rows, cols, mod._num_sms(x))
    assert mod.rows_plan.even_tiles(rows, cols, meta) is even
    if cols <= 64:
        assert meta["ROWS"] > 1
    torch.testing.assert_close(mod.softmax_stage3(x), torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


def test_stage3_backward_tiles_give_32_values_per_thread_from_8192_columns():
    # The backward's rule (see _bwd_one_block_plan): the forward's tile to 4096 columns, 8 warps at 8192.
    assert mod._bwd_one_block_plan(4096, 8192, 132) == (
        (4096,), {"BLOCK_N": 8192, "ROWS": 1, "num_warps": 8, "EVEN": True}
    )  # fmt: skip
    assert mod._bwd_one_block_plan(4096, 4096, 132) == (
        (4096,), {"BLOCK_N": 4096, "ROWS": 1, "num_warps": 8, "EVEN": True}
    )  # fmt: skip
    assert mod._bwd_one_block_plan(4096, 1024, 132) == (
        (2048,), {"BLOCK_N": 1024, "ROWS": 2, "num_warps": 4, "EVEN": True}
    )  # fmt: skip
    assert mod._bwd_one_block_plan(4096, 8000, 132)[1]["EVEN"] is False
    assert mod._bwd_one_block_plan(4095, 1024, 132)[1]["EVEN"] is False


@pytest.mark.parametrize(("rows", "cols"), [(32, 64), (30, 64), (4, 256), (4, 250), (3, 8192), (3, 8000)])
def test_stage3_backward_is_right_with_and_without_its_masks(rows, cols):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(rows * cols)
    x = torch.randn(rows, cols, device=device, generator=g, requires_grad=True)
    dy = torch.randn(rows, cols, device=device, generator=g)
    mod.softmax_stage3(x).backward(dy)
    ref = x.detach().clone().requires_grad_(True)
    torch.softmax(ref, -1).backward(dy)
    torch.testing.assert_close(x.grad, ref.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("even", [False, True])
def test_the_measured_kernel_options_stage3_leaves_off_still_compute_softmax(even):
    # The second read of x (forward) is a sweep option (benchmarks/row_kernels_sweep.py), and both kernels run
    # masked and unmasked.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, dy = torch.randn(8, 256, device=device), torch.randn(8, 256, device=device)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    mod._softmax_fwd_kernel[(8,)](x, y, 8, 256, 256, 256, BLOCK_N=256, ROWS=1, EVEN=even, RELOAD=True)
    want = torch.softmax(x, -1)
    torch.testing.assert_close(y, want, atol=1e-6, rtol=1e-5)
    mod._softmax_bwd_kernel[(8,)](want, dy, dx, 8, 256, 256, 256, 256, BLOCK_N=256, ROWS=1, EVEN=even)
    torch.testing.assert_close(dx, want * (dy - (want * dy).sum(-1, keepdim=True)), atol=1e-6, rtol=1e-5)


def test_stage3_long_16_bit_rows_take_the_packed_kernels_and_others_loop():
    n = mod.ONE_BLOCK_MAX_COLS + 1
    # Just past the one-block budget the packed forward, padded to 65536, loses to the looped one (measured); the
    # backward keeps its own bound.
    assert mod._paths(3, n, torch.bfloat16) == ("looped", "packed")
    assert mod._paths(3, mod.FWD_PACKED_MIN_COLS - 1, torch.bfloat16) == ("looped", "packed")
    assert mod._paths(3, mod.FWD_PACKED_MIN_COLS, torch.bfloat16) == ("packed", "packed")
    assert mod.ONE_BLOCK_MAX_COLS < mod.FWD_PACKED_MIN_COLS <= mod.FWD_PACKED_MAX_COLS
    assert mod._paths(3, mod.BWD_PACKED_MAX_COLS, torch.float16) == ("packed", "packed")
    assert mod._paths(3, mod.FWD_PACKED_MAX_COLS + 1, torch.bfloat16)[0] == "looped"
    assert mod._paths(3, mod.BWD_PACKED_MAX_COLS + 1, torch.bfloat16)[1] == "looped"
    assert mod._paths(3, n, torch.float32) == ("looped", "looped")
    assert mod._paths(3, mod.ONE_BLOCK_MAX_COLS, torch.bfloat16) == ("one_block", "packed")
    assert mod._paths(2, n, torch.bfloat16) == ("tuned", "tuned")


def test_stage3_16_bit_backward_goes_packed_from_its_own_bound_and_fp32_rows_never_do():
    # From 16384 columns the packed backward beat the fp32 one-block kernel (measured); below, the two tie.
    below, at = mod.BWD_PACKED_MIN_COLS - 1, mod.BWD_PACKED_MIN_COLS
    assert mod._paths(3, below, torch.bfloat16) == ("one_block", "one_block")
    assert mod._paths(3, at, torch.float16) == ("one_block", "packed")
    assert mod._paths(3, at, torch.float32) == ("one_block", "one_block")
    assert mod._paths(1, at, torch.bfloat16) == ("row", "row")
    # 32 warps while the padded row fits 32768 columns (16 ran 1.27× slower there), 16 past it (32 lost from 36864).
    assert [mod._bwd_packed_warps(triton.next_power_of_2(n)) for n in (at, 32768, 32769, 65536)] == [32, 32, 16, 16]


@triton.jit
def _bwd_summed_in_16_bits(y_ptr, dy_ptr, dx_ptr, n_cols, BLOCK_N: tl.constexpr):
    # The packed kernel with its one deliberate difference undone: the products are summed in their 16-bit
    # type, as a one-block backward without an fp32 accumulator does.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dx = y.to(tl.float32) * (dy.to(tl.float32) - tl.sum(y * dy, axis=0))
    tl.store(dx_ptr + row * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _packed_backward_against_the_fp32_path(device: str) -> None:
    # dy near 8 with unit spread: dx = y·(dy − Σ y·dy) cancels to a few parts in eight, so an error in the sum
    # shows in dx. The packed kernel (16-bit products, fp32 sum) must be as close to float64 as the looped
    # kernel (fp32 throughout), within 10 %; summing the products in 16 bits must not be.
    torch.manual_seed(0)
    n = mod.ONE_BLOCK_MAX_COLS + 232
    y = torch.softmax(0.1 * torch.randn(3, n, device=device), -1).half()
    dy = (8 + torch.randn(3, n, device=device)).half()
    y64, dy64 = y.double(), dy.double()
    want = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))

    def err(dx: torch.Tensor) -> float:
        return float((dx.double() - want).norm() / want.norm())

    fp32_path = err(mod._bwd(y, dy, "looped"))
    assert err(mod._bwd(y, dy, "packed")) <= 1.1 * fp32_path
    low = torch.empty_like(y)
    _bwd_summed_in_16_bits[(3,)](y, dy, low, n, BLOCK_N=triton.next_power_of_2(n))
    assert err(low) > 1.5 * fp32_path


def test_packed_backward_sums_in_fp32_and_matches_the_fp32_path():
    _packed_backward_against_the_fp32_path("cpu")


def _packed_forward_against_the_fp32_path(device: str, dtype: torch.dtype) -> None:
    # The packed forward keeps x in 16 bits but forms every exponential in fp32: it must be as close to float64
    # as the looped kernel, and give rows of -inf, +inf and NaN what PyTorch gives them.
    torch.manual_seed(0)
    n = mod.ONE_BLOCK_MAX_COLS + 232
    x = (4 * torch.randn(5, n, device=device)).to(dtype)
    x[1] = float("-inf")
    x[2, 7] = float("inf")
    x[3, 9] = float("nan")
    x[4, : n // 2] = float("-inf")
    want = torch.softmax(x.double(), -1)

    def err(y: torch.Tensor) -> float:
        ok = [0, 4]
        return float((y[ok].double() - want[ok]).abs().max() / want[ok].abs().max())

    packed, looped = mod._fwd(x, "packed"), mod._fwd(x, "looped")
    assert err(packed) <= 1.1 * err(looped) + 1e-6
    for row in (1, 2, 3):
        assert packed[row].isnan().all() and want[row].isnan().all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_packed_forward_matches_the_fp32_path(dtype):
    _packed_forward_against_the_fp32_path("cpu", dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_packed_forward_matches_the_fp32_path_on_gpu(dtype):
    _packed_forward_against_the_fp32_path("cuda", dtype)


@pytest.mark.gpu
def test_packed_backward_sums_in_fp32_and_matches_the_fp32_path_on_gpu():
    _packed_backward_against_the_fp32_path("cuda")


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


BF16, FP16, FP32 = SPEC.dtypes
# The GPU run, sized to compile each kernel variant about once (stage 3 tunes nothing; stage 2 autotunes
# one row length per kernel). Every case through stage 3 in bf16 covers every stage-3 path at every size
# (one-block and looped, forward and backward; the packed backward); fp16 and fp32 take the cases that cover
# both paths of both directions between them; stages 1 and 2 (their kernels differ from stage 3's only in launch
# config) run one small masked case each.
GPU_PARAMS = [
    *((3, c, BF16) for c in SPEC.cases),
    (3, case_named(SPEC.cases, "wide row, one program per row"), FP16),
    (3, case_named(SPEC.cases, "multi-row tile, odd row count"), FP32),
    (3, case_named(SPEC.cases, "long row → looped path"), FP32),
    (3, case_named(SPEC.cases, "long row → looped path"), FP16),
    (1, case_named(SPEC.cases, "non-pow2 tail"), BF16),
    (2, case_named(SPEC.cases, "multi-row tile, odd row count"), BF16),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("stage", "case", "dtype"), as_params(GPU_PARAMS))
def test_each_stage_matches_torch_softmax_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda")
