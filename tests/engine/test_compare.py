"""The trusted comparison: each rule with a tensor that must fail it and one that must pass it."""

from __future__ import annotations

import pytest
import torch

from mcp_server.engine.compare import compare_tensor, describe, sentinel, tolerance_for
from mcp_server.engine.errors import UsageError
from mcp_server.engine.jobs.recorder import poison_value
from mcp_server.engine.models import FindingKind


def _truth(n=4096, scale=1.0, dtype=torch.float32):
    g = torch.randn(n, dtype=torch.float64) * scale
    return g.to(dtype), g


def test_an_exact_float32_result_passes():
    r, g = _truth()
    assert compare_tensor(r.clone(), r, g, tolerance_for(torch.float32)).ok


def test_an_all_zero_output_fails_on_the_norm_even_when_every_element_is_within_atol():
    r, g = _truth(scale=1e-7)
    result = compare_tensor(torch.zeros_like(r), r, g, tolerance_for(torch.float32))
    assert result.mismatches == 0  # every element is inside atol = 1e-5 …
    assert result.problem is FindingKind.mismatch and result.rel_norm_err > 0.9  # … the norm is not


def test_a_few_element_output_is_held_to_gross_errors_on_the_norm_and_a_large_one_to_pytorchs_error():
    # One value from a sum that cancels: a right kernel summing in another order is 9.5× PyTorch's own error off
    # the truth (the seed validate found), every element inside atol + rtol·|truth|.
    g = torch.tensor([0.12], dtype=torch.float64)
    r, c = (g + 3.3e-7).float(), (g + 3.1e-6).float()
    tol = tolerance_for(torch.float32)
    assert compare_tensor(c, r, g, tol).ok
    tiny = torch.tensor([3e-6], dtype=torch.float64)  # all zeros where the truth is tiny: gross, still caught
    assert compare_tensor(torch.zeros(1), tiny.float(), tiny, tol).problem is FindingKind.mismatch
    # The same relative error on every one of 4096 values is a whole output off: the norm still catches it.
    g = torch.full((4096,), 0.12, dtype=torch.float64)
    r, c = (g + 3.3e-7).float(), (g + 3.1e-6).float()
    result = compare_tensor(c, r, g, tol)
    assert result.mismatches == 0 and result.problem is FindingKind.mismatch, result


def test_a_constant_output_fails():
    r, g = _truth()
    assert compare_tensor(torch.full_like(r, float(r.mean())), r, g, tolerance_for(torch.float32)).problem


def test_bf16_rounding_of_the_exact_result_passes_and_a_one_percent_bias_fails():
    g = torch.randn(8192, dtype=torch.float64)
    r = g.to(torch.bfloat16)
    assert compare_tensor(g.to(torch.bfloat16), r, g, tolerance_for(torch.bfloat16)).ok
    biased = (g * 1.05).to(torch.bfloat16)
    assert compare_tensor(biased, r, g, tolerance_for(torch.bfloat16)).problem is FindingKind.mismatch


@pytest.mark.parametrize("seed", range(40))
def test_the_allowed_error_grows_with_pytorchs_own_error(seed):
    # PyTorch itself 1e-3 off everywhere: the values it got within fp32's tolerance are the few it was lucky on, so
    # the mean error for each value's size is not held against the candidate there (it failed a quarter of seeds).
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(4096, dtype=torch.float64, generator=gen)
    noisy_ref = (g + 1e-3 * torch.randn(4096, dtype=torch.float64, generator=gen)).float()
    cand = (g + 2e-3 * torch.randn(4096, dtype=torch.float64, generator=gen)).float()
    assert compare_tensor(cand, noisy_ref, g, tolerance_for(torch.float32)).ok
    assert not compare_tensor(cand, g.float(), g, tolerance_for(torch.float32)).ok


def test_where_pytorch_lost_the_answer_its_error_is_taken_as_an_ulp_of_the_largest_value_lost():
    # The reference in its own dtype is NaN everywhere (its intermediates overflowed); float64 has the answer. A
    # result whose small values carry the rounding of terms near the largest (cancellation in fp32) passes; one
    # that is 1 % off at those values, or off as a whole, does not.
    g = torch.randn(4096, dtype=torch.float64) * 1e37
    g[:8] = 4e32  # values that cancel from terms of order 1e37
    r = torch.full((4096,), float("nan"))
    rounded = g.float().double()
    rounded[:8] += 2e30  # a few ulps of 1e37
    tol = tolerance_for(torch.float32)
    assert compare_tensor(rounded.float(), r, g, tol).ok
    off = rounded.clone()
    off[:8] = 4e32 * 1.01 + 2e30 * 10 * 4
    result = compare_tensor(off.float(), r, g, tol)
    assert result.problem is FindingKind.mismatch and result.mismatches == 8, result
    assert compare_tensor((g * 1.01).float(), r, g, tol).problem is FindingKind.mismatch
    # The same bound as a reference that had the values, rounded to float32 (its own error then sets the slack).
    assert compare_tensor(rounded.float(), g.float(), g, tol).ok


def test_subnormal_outputs_one_step_apart_are_rounding_and_zeros_for_many_steps_are_not():
    # fp16 outputs of one to three subnormal steps (5.96e-8): a result one step off at half of them is 0.7 of the
    # norm away, yet only rounding; zeros where the truth is 40 steps and more are wrong.
    step = 2.0**-24
    g = (torch.randint(1, 4, (2048,)) * step).double()
    r = g.half()
    off = (g + step * (torch.arange(2048) % 2)).half()
    tol = tolerance_for(torch.float16)
    assert compare_tensor(off, r, g, tol).ok
    big = (torch.randint(40, 60, (2048,)) * step).double()
    result = compare_tensor(torch.zeros(2048, dtype=torch.float16), big.half(), big, tol)
    assert result.problem is FindingKind.mismatch and result.mismatches == 0, result


def test_a_truth_past_the_dtypes_largest_value_is_its_infinity():
    # float64 says -3.43e38, past float32's -3.40e38: -inf is the right float32 answer, +inf is not, and so is a
    # float32 result off elsewhere.
    g = torch.randn(4096, dtype=torch.float64) * 1e37
    g[3] = -3.43e38
    r = g.float()  # rounds to -inf too
    tol = tolerance_for(torch.float32)
    assert compare_tensor(g.float(), torch.full((4096,), float("nan")), g, tol).ok  # PyTorch lost it; inf is right
    assert compare_tensor(g.float(), r, g, tol).ok
    wrong = g.float()
    wrong[3] = float("inf")
    assert compare_tensor(wrong, r, g, tol).problem is FindingKind.nan_mismatch
    big = g.clone()
    big[3] = -3.0e38  # representable: an infinity there is an overflow the kernel caused
    assert compare_tensor(big.float().index_fill(0, torch.tensor([3]), float("-inf")), big.float(), big, tol).problem


def test_nan_positions_must_match():
    r, g = _truth()
    r[5] = g[5] = float("nan")
    good = r.clone()
    assert compare_tensor(good, r, g, tolerance_for(torch.float32)).ok
    missing = r.clone()
    missing[5] = 0.0
    assert compare_tensor(missing, r, g, tolerance_for(torch.float32)).problem is FindingKind.nan_mismatch
    extra = r.clone()
    extra[7] = float("nan")
    assert compare_tensor(extra, r, g, tolerance_for(torch.float32)).problem is FindingKind.nan_mismatch


def test_infinities_must_match_in_sign():
    r, g = _truth()
    r[3] = g[3] = float("inf")
    flipped = r.clone()
    flipped[3] = -float("inf")
    assert compare_tensor(r.clone(), r, g, tolerance_for(torch.float32)).ok
    assert compare_tensor(flipped, r, g, tolerance_for(torch.float32)).problem is FindingKind.nan_mismatch


def test_unwritten_elements_are_told_apart_from_computed_nans():
    r, g = _truth()
    first = r.clone()
    first[10:20] = float("nan")
    second = r.clone()
    second[10:20] = 12345.0  # the repeat call's poison survived: nobody wrote these
    result = compare_tensor(first, r, g, tolerance_for(torch.float32), second)
    assert result.problem is FindingKind.uninitialized_output and result.uninitialized == 10
    computed = compare_tensor(first, r, g, tolerance_for(torch.float32), first.clone())
    assert computed.problem is FindingKind.nan_mismatch


def test_a_complex_allocation_is_poisoned_rather_than_failing_the_call():
    # torch.iinfo on a complex dtype raised inside every candidate that allocated a complex tensor.
    for second in (False, True):
        value = poison_value(torch.complex64, second=second)
        filled = torch.empty(4, dtype=torch.complex64).fill_(value)
        assert (filled.real.isnan().all() and filled.imag.isnan().all()) if not second else (filled.real == 1e30).all()


def test_unwritten_fp8_elements_are_found_with_a_poison_the_format_holds():
    # 12345 overflows float8_e4m3fn (largest 448): filling an fp8 allocation with it raised inside every
    # candidate that allocated its fp8 output, failing right kernels.
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16):
        assert poison_value(dtype, second=True) == sentinel(dtype)
        torch.empty(4, dtype=dtype).fill_(poison_value(dtype, second=True))
    g = torch.linspace(-100, 100, 64, dtype=torch.float64)
    r = g.to(torch.float8_e4m3fn)
    first, second = r.clone(), r.clone()
    first[5:9] = float("nan")
    second[5:9] = sentinel(torch.float8_e4m3fn)
    result = compare_tensor(first, r, r.double(), tolerance_for(torch.float8_e4m3fn), second)
    assert result.problem is FindingKind.uninitialized_output and result.uninitialized == 4
    assert compare_tensor(r.clone(), r, r.double(), tolerance_for(torch.float8_e4m3fn), r.clone()).ok


def test_no_verdict_where_pytorchs_own_error_would_admit_a_mostly_wrong_output():
    g = torch.linspace(1.0, 2.0, 512, dtype=torch.float64)
    noise = torch.where(torch.arange(512) % 2 == 0, 1.0, -1.0).double()
    far = (g * (1 + 0.3 * noise)).float()  # the reference itself 30 % off its float64 run
    result = compare_tensor(torch.zeros_like(far), far, g, tolerance_for(torch.float32))
    assert result.problem is FindingKind.reference_precision and not result.ok
    assert "no verdict" in describe(result.problem, result, "out")
    near = (g * (1 + 0.05 * noise)).float()  # 5 %: judged, and a zero output fails
    assert compare_tensor(near.clone(), near, g, tolerance_for(torch.float32)).ok
    assert compare_tensor(torch.zeros_like(near), near, g, tolerance_for(torch.float32)).problem is FindingKind.mismatch


def test_an_fp8_output_may_be_one_step_off_where_the_sums_ran_in_another_order_and_no_more():
    # Hopper's fp8 dots accumulate with about 3.5e-3 relative error, so a right fp8 GEMM writing fp8 crosses a
    # rounding point at some elements; float32's default (1e-5, 1e-5) failed it.
    for dtype, g in (
        (torch.float8_e4m3fn, torch.linspace(-300, 300, 257)),
        (torch.float8_e5m2, torch.linspace(-1e3, 1e3, 257)),
    ):
        r = g.double().to(dtype)
        bits = r.view(torch.uint8)
        picks = torch.tensor([3, 50, 77, 200])
        one, three = bits.clone(), bits.clone()
        one[picks] += 1  # one step further from zero
        three[picks] += 3
        tol = tolerance_for(dtype)
        assert compare_tensor(one.view(dtype), r, r.double(), tol).ok
        assert compare_tensor(three.view(dtype), r, r.double(), tol).problem is FindingKind.mismatch
        assert not compare_tensor(torch.zeros_like(r), r, r.double(), tol).ok


def test_a_truth_of_zeros_the_reference_is_not_gives_no_verdict_and_agreeing_zeros_pass():
    zeros = torch.zeros(64, dtype=torch.float64)
    noisy = torch.full((64,), 1e-3)  # the reference in its own dtype where its float64 run is exactly 0
    assert compare_tensor(torch.zeros(64), noisy, zeros, tolerance_for(torch.float32)).problem is (
        FindingKind.reference_precision
    )
    assert compare_tensor(torch.zeros(64), torch.zeros(64), zeros, tolerance_for(torch.float32)).ok


def test_a_truth_that_is_zero_at_the_tolerances_scale_is_judged_elementwise():
    # LayerNorm's input gradient over one column cancels exactly: float64 gives ~1e-17, float32 ~1e-8, both
    # inside atol. Rounding noise of that size passes; an output off by more than atol fails on its values.
    truth = torch.randn(64, dtype=torch.float64) * 1e-17
    ref = (torch.randn(64) * 1e-8).float()
    tol = tolerance_for(torch.float32)
    close = compare_tensor((torch.randn(64) * 1e-8).float(), ref, truth, tol)
    assert close.ok and close.problem is None
    # Within atol of a truth that is zero at that scale: right, though 500× PyTorch's own error by the norm.
    assert compare_tensor(torch.full((64,), 5e-6), ref, truth, tol).ok
    off = compare_tensor(torch.full((64,), 1e-3), ref, truth, tol)
    assert off.problem is FindingKind.mismatch and off.mismatches == 64


def test_a_truth_of_zeros_whose_reference_noise_passes_atol_a_little_is_still_judged_on_its_values():
    # LayerNorm's weight gradient over one column: float64 is 0, PyTorch's float32 run rounding noise up to 3.2e-4
    # (rstd ≈ 316 amplifies it), past the declared atol of 1e-4 in 2 % of seeds. That noise was "no verdict".
    truth = torch.randn(8, dtype=torch.float64) * 1e-17
    tol = tolerance_for(torch.float32, {"float32": (1e-4, 1e-4)})  # as reference_kernels/layernorm.py declares
    ref = torch.tensor([3.2e-4, -1e-4, 0.0, 2e-4, 0.0, -3e-5, 1e-4, 0.0])
    assert compare_tensor(torch.zeros(8), ref, truth, tol).ok  # the exact answer
    assert compare_tensor(ref.clone(), ref, truth, tol).ok  # PyTorch's own noise
    off = compare_tensor(torch.full((8,), 0.05), ref, truth, tol)  # far past that noise
    assert off.problem is FindingKind.mismatch and off.mismatches == 8
    # Noise past 16x atol on a zero truth, or any noise on a truth that is not zero at atol's scale: no verdict.
    loud = torch.full((8,), 2e-3)
    assert compare_tensor(torch.zeros(8), loud, truth, tol).problem is FindingKind.reference_precision
    small_truth = torch.full((8,), 3e-4, dtype=torch.float64)
    far = torch.full((8,), 3e-4 + 4e-4)
    assert compare_tensor(small_truth.float(), far, small_truth, tol).problem is FindingKind.reference_precision


def test_bitwise_differences_within_tolerance_are_not_failures():
    r, g = _truth()
    second = r.clone()
    second[0] = torch.nextafter(second[0], torch.tensor(10.0))
    result = compare_tensor(r.clone(), r, g, tolerance_for(torch.float32), second)
    assert result.ok and result.bitwise_diff == 1
    second[1] += 1.0
    assert compare_tensor(r.clone(), r, g, tolerance_for(torch.float32), second).problem is (
        FindingKind.nondeterministic
    )


def test_integer_outputs_must_match_exactly():
    r = torch.randint(0, 100, (500,))
    assert compare_tensor(r.clone(), r, None, tolerance_for(r.dtype)).ok
    off = r.clone()
    off[4] += 1
    off[9] -= 7
    result = compare_tensor(off, r, None, tolerance_for(r.dtype))
    assert result.problem is FindingKind.mismatch and result.first_bad[0].index == [4]
    # Said as an exact comparison with its largest difference (it read "max abs err 0, rel-norm err 0").
    said = describe(result.problem, result, "out")
    assert "2 of 500 elements differ" in said and "must match exactly" in said and "largest difference 7" in said


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_integer_outputs_must_match_exactly_as_signed_ones_do(dtype):
    # PyTorch's CPU kernels have little but == and bitwise ops for these: the comparison must need no more.
    r = torch.randint(0, 2**16, (500,)).to(dtype)
    assert compare_tensor(r.clone(), r, None, tolerance_for(dtype), r.clone()).ok
    off = torch.where(torch.arange(500) == 7, r ^ 1, r)
    result = compare_tensor(off, r, None, tolerance_for(dtype))
    assert result.problem is FindingKind.mismatch and result.mismatches == 1 and result.first_bad[0].index == [7]
    flaky = compare_tensor(r.clone(), r, None, tolerance_for(dtype), off)
    assert flaky.problem is FindingKind.nondeterministic


@pytest.mark.parametrize("dtype", [torch.uint32, torch.uint64, torch.int32])
def test_an_integer_output_where_the_reference_is_floating_is_compared_without_the_floating_poison(dtype):
    # The float32 sums' bits returned as uint32: torch.finfo on the candidate's dtype (for its repeat call's poison)
    # raised. Validate reports the dtype; the values are compared as numbers and are wrong.
    r, g = _truth()
    bits = r.view(torch.int32).to(dtype) if dtype != torch.uint32 else r.view(torch.uint32)
    result = compare_tensor(bits, r, g, tolerance_for(torch.float32), bits.clone())
    assert result.problem is FindingKind.mismatch and result.uninitialized == 0
    rounded = torch.arange(4096).to(dtype)  # integers that are the reference's values: no mismatch there
    truth = torch.arange(4096, dtype=torch.float64)
    assert compare_tensor(rounded, truth.float(), truth, tolerance_for(torch.float32), rounded.clone()).ok


def test_a_sparse_output_fails_naming_a_dense_strided_tensor_and_its_dense_twin_passes():
    r, g = _truth()
    result = compare_tensor(r.to_sparse(), r, g, tolerance_for(torch.float32), r.to_sparse())
    assert result.problem is FindingKind.shape_mismatch and not result.ok
    said = describe(result.problem, result, "base")
    assert "sparse_coo" in said and "return a dense strided float32 tensor" in said, said
    assert compare_tensor(r.to_sparse().to_dense(), r, g, tolerance_for(torch.float32)).ok


@pytest.mark.filterwarnings("ignore:.*quantize_per_tensor")
def test_a_quantized_output_fails_naming_the_references_dtype_and_its_plain_twin_passes():
    r, g = _truth()
    quantized = torch.quantize_per_tensor(r, 0.01, 0, torch.qint8)
    result = compare_tensor(quantized, r, g, tolerance_for(torch.float32), quantized)
    assert result.problem is FindingKind.dtype_mismatch and not result.ok
    said = describe(result.problem, result, "base")
    assert "quantized qint8" in said and "return a dense strided float32 tensor" in said, said
    assert compare_tensor(r.clone(), r, g, tolerance_for(torch.float32), r.clone()).ok


def test_a_repeat_calls_output_that_holds_no_values_leaves_the_first_call_judged():
    r, g = _truth()
    assert compare_tensor(r.clone(), r, g, tolerance_for(torch.float32), r.to_sparse()).ok
    wrong = r * 2
    result = compare_tensor(wrong, r, g, tolerance_for(torch.float32), r.to_sparse())
    assert result.problem is FindingKind.mismatch


@pytest.mark.filterwarnings("ignore:.*quantize_per_tensor")
@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda r: r.to_sparse(), "a sparse_coo tensor"),
        (lambda r: torch.quantize_per_tensor(r, 0.01, 0, torch.qint8), "a quantized qint8 tensor"),
    ],
)
def test_a_reference_whose_output_holds_no_values_is_a_usage_error_naming_the_fix(make, what):
    r, g = _truth()
    with pytest.raises(UsageError) as info:
        compare_tensor(r.clone(), make(r), g, tolerance_for(torch.float32))
    assert f"The reference returns {what}" in str(info.value) and "dense strided" in str(info.value)
    with pytest.raises(UsageError, match="returns in float64 a sparse_coo tensor"):
        compare_tensor(r.clone(), r, g.to_sparse(), tolerance_for(torch.float32))
    # A candidate that returns the same is told about its own output first, not the reference's.
    assert compare_tensor(make(r), make(r), g, tolerance_for(torch.float32)).problem is not None


def test_complex_outputs_are_judged_on_both_parts():
    # Read as float64 a complex output lost its imaginary part: an all-zero imaginary part passed.
    g = torch.randn(2048, dtype=torch.complex128)
    r = g.to(torch.complex64)
    tol = tolerance_for(torch.complex64)
    assert tol == tolerance_for(torch.float32)
    assert compare_tensor(r.clone(), r, g, tol, r.clone()).ok
    assert compare_tensor(r.conj().conj(), r, g, tol).ok  # a conjugate view of the same values
    real_only = torch.complex(r.real, torch.zeros_like(r.real))
    result = compare_tensor(real_only, r, g, tol)
    assert result.problem is FindingKind.mismatch and result.mismatches == 2048
    assert result.first_bad[0].index[-1] == 1 and "imaginary" in describe(result.problem, result, "out")
    # A real output where the reference's is complex, or the other way round: the dtype, and what to return.
    for cand, ref, truth in ((r.real.clone(), r, g), (r, r.real.clone(), g.real.clone())):
        mixed = compare_tensor(cand, ref, truth, tolerance_for(ref.dtype))
        assert mixed.problem is FindingKind.dtype_mismatch
        assert f"return {str(ref.dtype).removeprefix('torch.')}" in describe(mixed.problem, mixed, "out")


def test_a_shape_difference_is_reported_as_such():
    r, g = _truth()
    assert compare_tensor(r.view(64, 64), r, g, tolerance_for(torch.float32)).problem is FindingKind.shape_mismatch


def test_user_tolerances_override_the_defaults():
    g = torch.randn(4096, dtype=torch.float64)
    cand = (g * 1.001).float()
    assert not compare_tensor(cand, g.float(), g, tolerance_for(torch.float32)).ok
    assert compare_tensor(cand, g.float(), g, tolerance_for(torch.float32, {"float32": (1e-5, 2e-3)})).ok


def test_small_values_wrong_beside_large_ones_fail_on_their_mean_error_for_their_size():
    # exp of 6·randn spans e^-24..e^24: PyTorch's largest error (at the largest values) widened every element's
    # bound past the small values themselves, and the norm is the large values'. Zeroing the values under e^-6 (a
    # sixth of them) passed both; it fails now. Twins: PyTorch's own result, and one a unit in the last place off at
    # every value, pass.
    x = torch.randn(4096, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 6
    g = x.float().double().exp()
    r = g.float()
    tol = tolerance_for(torch.float32)
    wrong = torch.where(x.float() > -6.0, r, torch.zeros_like(r))
    result = compare_tensor(wrong, r, g, tol)
    assert result.problem is FindingKind.mismatch and result.mismatches == 0, result
    assert "relative to each value" in (result.note or "")
    assert compare_tensor(r, r, g, tol).ok
    assert compare_tensor(torch.nextafter(r, torch.full_like(r, float("inf"))), r, g, tol).ok


def test_the_mean_error_for_each_values_size_leaves_out_the_few_values_cancellation_puts_near_zero():
    # A matmul's outputs near zero by cancellation are off by a large part of themselves in any float arithmetic:
    # one of them, 7.6e-6 off a value of 1e-4 (inside the elementwise bound), set a TF32×3 matmul's mean at 4.01
    # times PyTorch's over 1024 outputs, and a right kernel failed. The mean leaves out the largest 1 %.
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(1024, generator=gen, dtype=torch.float64) * 8
    g[17] = 1e-4
    r = g.float()
    tol = tolerance_for(torch.float32)
    cand = r.clone()
    cand[17] += 7.6e-6
    result = compare_tensor(cand, r, g, tol)
    assert result.ok and result.mismatches == 0, result
    # A tenth of the values wrong by as much is no cancellation: the mean still fails it.
    many = r.clone()
    many[::10] += 1e-4 * many[::10].abs() + 7.6e-6
    assert compare_tensor(many, r, g, tol).problem is FindingKind.mismatch


def test_fp32_matmuls_summed_in_other_orders_pass_on_every_seed():
    # Right answers that differ from PyTorch's only by the order of the sums, over 400 seeded matmuls: the mean
    # error for each value's size (without its trim) failed one of them, a K=1000 product summed term by term.
    tol = tolerance_for(torch.float32)
    failed = []
    for seed in range(400):
        gen = torch.Generator().manual_seed(seed)
        m, k, n = [(63, 64, 32), (64, 64, 64), (257, 32, 33), (16, 1000, 40)][seed % 4]
        a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        truth, ours = a.double() @ b.double(), a @ b
        chunked = sum((a[:, lo : lo + 16] @ b[lo : lo + 16] for lo in range(0, k, 16)), torch.zeros(m, n))
        term_by_term = torch.zeros(m, n)
        for i in reversed(range(k)):
            term_by_term = term_by_term + a[:, i : i + 1] * b[i : i + 1]
        for name, cand in (("chunked", chunked), ("term by term", term_by_term)):
            result = compare_tensor(cand, ours, truth, tol)
            if not result.ok:
                failed.append((seed, name, result.note))
    assert not failed, failed
