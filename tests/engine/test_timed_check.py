"""jobs.timed_check: the bench's check that timed calls did the work validate judged. Each rule has a case that
must fail it and a twin that must pass; the GPU tests in test_bench.py run the whole check inside bench."""

from __future__ import annotations

import math

import pytest
import torch

from mcp_server.engine.jobs import timed_check as tc
from mcp_server.engine.jobs.bench_job import _forward_backward, _TimedCheck


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to TF32 (10 mantissa bits; ties away from zero, as the tensor cores' input cast)."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def test_a_right_result_passes_and_skipped_work_fails():
    want = torch.randn(1 << 16, generator=_gen())
    assert tc.compare_outputs([want.clone()], [want], None, 0.0) is None
    half = want.clone()
    half[want.numel() // 2 :] = 0
    problem = tc.compare_outputs([half], [want], None, 0.0)
    assert problem and "relative norm distance" in problem
    # Work skipped on one element in a hundred is caught as well: √0.01 = 10 % of the norm.
    few = want.clone()
    few[::100] = 0
    assert tc.compare_outputs([few], [want], None, 0.0)


def test_a_few_values_are_held_one_by_one_with_atol_and_a_cancelled_sum_in_another_order_passes():
    # One sum of 300 values that nearly cancel: two right orders differ by more than 4× the float32 norm floor
    # relative to the small result, but by far less than atol.
    want = torch.tensor([0.12])
    assert tc.compare_outputs([want + 2e-5], [want], None, 0.0) is None
    # The same sum from 16-bit partial sums is off by 1e-3 of a large result: caught value by value.
    big = torch.tensor([17.0, -4.0])
    assert "values further from the reference" in tc.compare_outputs([big * (1 + 1e-3)], [big], None, 0.0)
    # And zeros for tiny values are a gross error on the norm.
    tiny = torch.tensor([3e-6, -2e-6])
    assert "relative norm distance" in tc.compare_outputs([torch.zeros(2)], [tiny], None, 0.0)


def test_a_result_kept_from_other_inputs_fails():
    want = torch.randn(4096, generator=_gen(1))
    stale = torch.randn(4096, generator=_gen(2))
    assert "relative norm distance" in tc.compare_outputs([stale], [want], None, 0.0)


def test_rounding_passes_in_every_dtype_and_a_cheaper_precision_fails_in_float32():
    x = torch.randn(256, 512, generator=_gen(3), dtype=torch.float64)
    w = torch.randn(512, 256, generator=_gen(4), dtype=torch.float64)
    exact = x @ w
    # A different summation order in float32 and a bf16 result one rounding away: both pass.
    assert tc.compare_outputs([(x.float() @ w.float())], [exact.float()], None, 0.0) is None
    bf = exact.to(torch.bfloat16)
    nudged = (exact * (1 + 2.0**-9)).to(torch.bfloat16)
    assert tc.compare_outputs([nudged], [bf], None, 0.0) is None
    # The same product from operands rounded to TF32's 10-bit mantissa, judged as float32: fails.
    tf32 = _tf32(x.float()) @ _tf32(w.float())
    assert "relative norm distance" in tc.compare_outputs([tf32], [exact.float()], None, 0.0)
    # Unless the reference module allows that error, or validate measured errors of that size.
    assert tc.compare_outputs([tf32], [exact.float()], {"float32": [1e-3, 1e-2]}, 0.0) is None
    assert tc.compare_outputs([tf32], [exact.float()], None, 1e-3) is None


def test_a_bf16_gemm_from_e4m3_operands_fails_and_the_same_gemm_summed_in_another_order_passes():
    x = torch.randn(512, 1024, generator=_gen(11)).to(torch.bfloat16).float()
    w = torch.randn(1024, 512, generator=_gen(12)).to(torch.bfloat16).float()
    want = (x @ w).to(torch.bfloat16)  # the reference in its own dtype
    halves = (x[:, :512] @ w[:512] + x[:, 512:] @ w[512:]).to(torch.bfloat16)
    margins: list[float] = []
    assert tc.compare_outputs([halves], [want], None, 0.0, margins) is None
    assert margins[0] < 0.1
    e4m3 = (x.to(torch.float8_e4m3fn).float() @ w.to(torch.float8_e4m3fn).float()).to(torch.bfloat16)
    problem = tc.compare_outputs([e4m3], [want], None, 0.0)
    assert problem and "relative norm distance" in problem
    # Where validate measured the candidate at that error it is the scale, and the same output passes.
    rel = float((e4m3.double() - want.double()).norm() / want.double().norm())
    assert tc.compare_outputs([e4m3], [want], None, rel) is None


def test_nan_positions_must_agree_up_to_one_element_in_a_thousand_of_large_outputs():
    want = torch.randn(100_000, generator=_gen(5))
    few = want.clone()
    few[:100] = math.nan  # exactly one in a thousand
    assert tc.compare_outputs([few], [want], None, 0.0) is None
    more = want.clone()
    more[:101] = math.nan
    assert "NaN/Inf positions" in tc.compare_outputs([more], [want], None, 0.0)
    # A small output, such as a scalar loss, may not lose even one value to NaN.
    assert "NaN/Inf positions" in tc.compare_outputs([torch.tensor([math.nan])], [torch.tensor([1.0])], None, 0.0)
    # NaN where the reference has NaN, and the same infinities, agree.
    ref = torch.tensor([math.nan, math.inf, -math.inf, 1.0])
    assert tc.compare_outputs([ref.clone()], [ref], None, 0.0) is None
    flipped = torch.tensor([math.nan, -math.inf, -math.inf, 1.0])
    assert "NaN/Inf positions" in tc.compare_outputs([flipped], [ref], None, 0.0)


def test_integer_outputs_shapes_and_output_counts():
    ids = torch.arange(10)
    assert tc.compare_outputs([ids.clone()], [ids], None, 0.0) is None
    off = ids.clone()
    off[3] = 7
    assert "1 of 10 values differ" in tc.compare_outputs([off], [ids], None, 0.0)
    assert "shape (5,)" in tc.compare_outputs([ids[:5]], [ids], None, 0.0)
    assert "1 tensor outputs where the reference gives 2" in tc.compare_outputs([ids], [ids, ids], None, 0.0)


def test_fresh_values_change_in_place_and_keep_the_sets_kind():
    x = torch.randn(10_000, generator=_gen(6)) * 3 + 5
    pos = torch.rand(10_000, generator=_gen(7))
    ids = torch.randint(0, 9, (100,), generator=_gen(8))
    leaf = torch.randn(100, generator=_gen(9)).requires_grad_(True)
    fp8 = torch.randn(64, generator=_gen(10)).to(torch.float8_e4m3fn)
    fresh = tc.FreshValues([x, (pos, ids), {"w": leaf}, fp8])
    before = [t.detach().clone() for t in (x, pos, ids, leaf, fp8)]
    ptrs = [t.data_ptr() for t in (x, pos, ids, leaf, fp8)]
    fresh.refresh()
    assert [t.data_ptr() for t in (x, pos, ids, leaf, fp8)] == ptrs
    assert not torch.equal(x, before[0]) and not torch.equal(pos, before[1])
    assert not torch.equal(leaf.detach(), before[3])
    assert not torch.equal(fp8.float(), before[4].float())
    assert torch.equal(ids, before[2])  # integers (indices, flags) stay as they are
    assert abs(x.mean().item() - 5) < 0.3 and abs(x.std().item() - 3) < 0.3
    assert pos.min().item() >= 0  # a non-negative input stays non-negative
    assert leaf.requires_grad


def test_the_keeper_copies_what_it_keeps_and_keeps_at_most_two_a_round():
    keeper = tc.Keeper({"candidate"})
    x = torch.ones(4)
    out = x * 2
    keeper.after_call("eager", 1, [x], out, None)  # not a checked provider
    for _ in range(5):
        keeper.after_call("candidate", 1, [x], out, None)  # one call in the round: always drawn
    assert len(keeper.kept) == tc.MAX_KEPT_PER_ROUND
    x.zero_()
    out.zero_()
    assert torch.equal(keeper.kept[0].inputs[0], torch.ones(4))
    assert torch.equal(keeper.kept[0].outputs[0], 2 * torch.ones(4))
    assert len(keeper.take()) == 2 and keeper.checked == {"candidate": 2} and not keeper.kept
    # Two calls in a round's hundred are drawn on average: 60 expected in 3000 (fewer than 25 or more than 110 has a
    # chance under one in a million).
    drawn = 0
    for _ in range(3000):
        keeper.after_call("candidate", 100, [x], out, None)
        drawn += len(keeper.take())
    assert 25 < drawn < 110


def test_a_cuda_graph_round_checks_two_calls_on_different_input_sets_and_any_call_can_be_one():
    seen = set()
    for _ in range(2000):
        picks = tc.graph_picks(20, 3)
        assert len(picks) == 2 and picks[0] % 3 != picks[1] % 3  # sets share values (and gradients) per set
        seen.update(picks)
    assert seen == set(range(20))  # no call is safe from the draw
    # One input set, or one call: one call is checked.
    assert len(tc.graph_picks(20, 1)) == 1 and len(tc.graph_picks(1, 3)) == 1


def _square_reference(x):
    return x * x


def test_verify_fails_a_timed_call_that_skipped_work_and_passes_its_twin():
    check = _TimedCheck(_square_reference, False, {"candidate", "lazy"}, None, 0.0)
    keeper = check.keeper()
    x = torch.randn(1000, generator=_gen(11))
    keeper.keep("candidate", [x], x * x, None)
    lazy = x * x
    lazy[500:] = 0
    keeper.keep("lazy", [x], lazy, None)
    check.verify(keeper)
    assert set(check.failures) == {"lazy"} and "relative norm distance" in check.failures["lazy"]
    # How close each came to its limit: the right one at 0, the lazy one past 1.
    assert check.margins["candidate"] == 0.0 and check.margins["lazy"] > 1
    assert keeper.checked == {"candidate": 1, "lazy": 1}


def test_forward_backward_checks_compare_the_gradients_for_the_same_upstream_gradient():
    def honest(x):
        return x * x

    class _LazyBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, dy):
            return torch.zeros_like(dy)

    for fn, fails in ((honest, False), (_LazyBackward.apply, True)):
        check = _TimedCheck(_square_reference, True, {"candidate"}, None, 0.0)
        keeper = check.keeper()
        timed = _forward_backward(fn, None)
        x = torch.randn(2000, generator=_gen(12)).requires_grad_(True)
        out = timed(x)
        keeper.keep("candidate", [x], out, timed)
        kept = keeper.kept[0]
        assert len(kept.outputs) == 2 and torch.equal(kept.upstream[0], timed.last[1][0])
        check.verify(keeper)
        assert ("candidate" in check.failures) is fails
        if fails:
            assert "output 1" in check.failures["candidate"]  # the gradient, not the forward output


@pytest.mark.parametrize("overrides", [None, {"float32": [1e-5, 1e-5]}])
def test_module_tolerances_come_from_tolerances_or_the_spec(overrides):
    class Tol:
        def __init__(self, atol, rtol):
            self.atol, self.rtol = atol, rtol

    class Spec:
        def __init__(self):
            self.tolerances = {torch.float32: Tol(1e-4, 2e-4)}

    class Module:
        SPEC = Spec()

    if overrides is not None:
        Module.TOLERANCES = overrides
    got = tc.module_tolerances(Module)
    assert got == (overrides or {"float32": [1e-4, 2e-4]})


def test_a_reference_that_refuses_the_kept_values_leaves_the_call_unchecked_not_failed():
    def picky(x):
        if bool((x < 0).any()):
            raise ValueError("negative values")
        return x.sqrt()

    check = _TimedCheck(picky, False, {"candidate"}, None, 0.0)
    keeper = check.keeper()
    x = torch.randn(100, generator=_gen(13))
    keeper.keep("candidate", [x], torch.zeros(100), None)
    check.verify(keeper)
    assert not check.failures and keeper.checked == {"candidate": 0}


class _Deferred(torch.Tensor):
    pass


def test_a_timed_call_returning_a_tensor_subclass_fails_without_being_copied_and_a_parameter_passes():
    check = _TimedCheck(_square_reference, False, {"candidate", "parameter"}, None, 0.0)
    keeper = check.keeper()
    x = torch.randn(100, generator=_gen(14))
    keeper.keep("candidate", [x], (x * x).as_subclass(_Deferred), None)
    keeper.keep("parameter", [x], torch.nn.Parameter(x * x, requires_grad=False), None)
    assert keeper.kept[0].problem and not keeper.kept[0].outputs
    check.verify(keeper)
    assert set(check.failures) == {"candidate"} and "_Deferred (a torch.Tensor subclass" in check.failures["candidate"]


def _step_reference(param, grad):
    param.sub_(0.1 * grad)
    return param


def test_a_problem_that_writes_its_inputs_is_told_apart_from_one_that_does_not():
    p, g = torch.randn(100, generator=_gen(20)), torch.randn(100, generator=_gen(21))
    before = p.clone()
    assert tc.writes_inputs(_step_reference, [p, g])
    assert torch.equal(p, before)  # judged on copies
    assert not tc.writes_inputs(_square_reference, [p])

    def broken(x):
        raise RuntimeError("the eager baseline reports this")

    assert not tc.writes_inputs(broken, [p])


def test_an_in_place_update_is_checked_on_its_inputs_as_they_were_before_the_call():
    check = _TimedCheck(_step_reference, False, {"candidate"}, None, 0.0)
    for before_call, fails in ((True, False), (False, True)):
        keeper = check.keeper()
        keeper.before = before_call
        p, g = torch.randn(4096, generator=_gen(22)), torch.randn(4096, generator=_gen(23))
        copied = keeper.inputs_before("candidate", [p, g])
        assert (copied is not None) is before_call
        out = _step_reference(p, g)  # the candidate updates p in place, rightly
        keeper.keep("candidate", [p, g], out, None, copied)
        check.failures.clear()
        check.verify(keeper)
        # Copied after the call, the inputs already hold the update: the reference would apply it twice.
        assert ("candidate" in check.failures) is fails
    assert keeper.inputs_before("eager", [p, g]) is None  # baselines are not checked


def test_a_held_call_is_copied_when_stored_so_a_replay_that_rewrites_it_is_what_is_checked():
    check = _TimedCheck(_square_reference, False, {"candidate"}, None, 0.0)
    keeper = check.keeper()
    x = torch.randn(1000, generator=_gen(24))
    out = torch.empty_like(x)
    held = keeper.hold([x], out, None)  # at capture: nothing computed yet
    x.copy_(torch.randn(1000, generator=_gen(25)))  # the replay's new values ...
    torch.mul(x, x, out=out)  # ... and what the replay wrote
    keeper.store("candidate", held)
    x.zero_()
    out.zero_()  # the next replay cannot change what was kept
    check.verify(keeper)
    assert not check.failures and keeper.checked == {"candidate": 1}
    stale = keeper.hold([x], torch.ones_like(x), None)  # a replay that never rewrote its output
    x.copy_(torch.randn(1000, generator=_gen(26)))
    keeper.store("candidate", stale)
    check.verify(keeper)
    assert "relative norm distance" in check.failures["candidate"]


def test_writing_inputs_is_told_by_their_bits_in_any_dtype():
    def keeps(x):
        return x.clone()

    def writes(x):
        x.zero_()
        return x

    for t in (torch.tensor([math.nan, 1.0]), torch.randn(8).to(torch.float8_e4m3fn), torch.tensor(3.0)):
        assert not tc.writes_inputs(keeps, [t])  # NaN unchanged is unchanged; fp8 and 0-d compare too
    assert tc.writes_inputs(writes, [torch.randn(8)])
    assert tc.writes_inputs(writes, [torch.randn(8).to(torch.float8_e4m3fn)])


def _cancelling_reference(x):
    # float32 rounds x to the spacing of 1e4 (about 1e-3): PyTorch's own answer is off by ~5e-4 of the norm.
    return (x + 1e4) - 1e4


def test_the_references_own_error_at_this_size_is_measured_against_float64():
    x = torch.randn(4096, generator=_gen(21))
    kept = tc.Kept("candidate", [x], [x.clone()])
    wide = tc.widened(kept)
    want = tc.reference_outputs(_cancelling_reference, kept, False)
    (own,) = tc.reference_errors(_cancelling_reference, wide, False, want)
    assert 1e-4 < own < 1e-3

    def float32_only(x):
        if x.dtype != torch.float32:
            raise TypeError("float32 only")
        return (x + 1e4) - 1e4

    # A reference that does not run in float64 gives no figure (and so widens nothing).
    assert tc.reference_errors(float32_only, wide, False, want) == []


def _other_in_float64(x):
    # A reference that computes something else in float64 (as a .view() between dtypes would): its "own error" is
    # the size of x itself.
    return x + 1.0 if x.dtype == torch.float64 else x


def test_an_own_error_past_what_validate_trusts_does_not_widen_the_limit():
    x = torch.randn(4096, generator=_gen(24))
    kept = tc.Kept("candidate", [x], [x.clone()])
    want = tc.reference_outputs(_other_in_float64, kept, False)
    assert tc.reference_errors(_other_in_float64, tc.widened(kept), False, want) == [0.0]
    # A candidate half a unit off everywhere fails; the exact answer passes.
    check = _TimedCheck(_other_in_float64, False, {"candidate", "off"}, None, 0.0)
    keeper = check.keeper()
    keeper.keep("candidate", [x], x.clone(), None)
    keeper.keep("off", [x], x + 0.5, None)
    check.verify(keeper)
    assert set(check.failures) == {"off"}, check.failures


class _CancellingLinear(torch.nn.Module):
    # A float32 module whose answer cancels: F.linear refuses float64 values with float32 weights.
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64, bias=False)
        self.register_buffer("offset", torch.tensor(1e4))

    def forward(self, x):
        return (self.lin(x) + self.offset) - self.offset


def test_a_reference_modules_own_error_is_measured_on_a_float64_copy_that_leaves_it_as_it_was():
    torch.manual_seed(0)
    module = _CancellingLinear()
    weights = {k: v.clone() for k, v in module.state_dict().items()}
    x = torch.randn(256, 64, generator=_gen(23))
    kept = tc.Kept("candidate", [x], [x.clone()])
    want = tc.reference_outputs(module, kept, False)
    (own,) = tc.reference_errors(module, tc.widened(kept), False, want)
    assert 1e-5 < own < 1e-3
    assert all(v.dtype == torch.float32 for v in module.state_dict().values())
    assert all(torch.equal(v, weights[k]) for k, v in module.state_dict().items())
    # The exact answer (the module in float64) passes the check with that limit, and a lazy one still fails.
    exact = module.double()(x.double()).float()
    module.float()
    check = _TimedCheck(module, False, {"candidate", "lazy"}, None, 0.0)
    keeper = check.keeper()
    keeper.keep("candidate", [x], exact, None)
    lazy = exact.clone()
    lazy[::10] = 0
    keeper.keep("lazy", [x], lazy, None)
    check.verify(keeper)
    assert set(check.failures) == {"lazy"}, check.failures


def test_a_candidate_more_accurate_than_pytorch_passes_and_a_lazy_one_still_fails():
    # The exact x is PyTorch's own error away from its answer, over 4× the float32 floor: it passes because the
    # limit takes the reference's own error at this size. Skipped work still fails.
    x = torch.randn(4096, generator=_gen(22))
    want = [_cancelling_reference(x)]
    assert tc.compare_outputs([x.clone()], want, None, 0.0) is not None  # judged against the floor alone
    check = _TimedCheck(_cancelling_reference, False, {"candidate", "lazy"}, None, 0.0)
    keeper = check.keeper()
    keeper.keep("candidate", [x], x.clone(), None)
    lazy = x.clone()
    lazy[::10] = 0
    keeper.keep("lazy", [x], lazy, None)
    check.verify(keeper)
    assert set(check.failures) == {"lazy"}, check.failures
    assert check.own_errors and 1e-4 < check.own_errors[0] < 1e-3
    check.start_case()
    assert check.own_errors is None  # measured again for the next case's size


def _offset_reference(x):
    # float32 rounds x to the spacing of 1e5·|x[0]|: PyTorch's own error moves with the values of each call.
    c = x[:1] * 1e5
    return (x + c) - c


def test_pytorchs_own_error_is_measured_again_on_a_call_it_would_fail_so_an_exact_one_passes_and_a_lazy_one_not():
    # The first kept call sets the case's figure (|x[0]| = 0.01: PyTorch off by ~3e-5 of the norm); on the second
    # (|x[0]| = 10: ~2 % of the norm) the exact answer is PyTorch's error away from PyTorch's, far past 4× the first
    # figure. It passes since the error is measured on that call before failing it; skipped work still fails.
    a, b = torch.randn(4096, generator=_gen(25)), torch.randn(4096, generator=_gen(26))
    a[0], b[0] = 0.01, 10.0
    for x in (a, b):
        (own,) = tc.reference_errors(
            _offset_reference, tc.widened(tc.Kept("c", [x], [])), False, [_offset_reference(x)]
        )
        assert (own < 1e-4) if x is a else (own > 1e-2)
    check = _TimedCheck(_offset_reference, False, {"candidate", "lazy"}, None, 0.0)
    keeper = check.keeper()
    keeper.keep("candidate", [a], a.clone(), None)
    keeper.keep("candidate", [b], b.clone(), None)
    lazy = b.clone()
    lazy[::10] = 0
    keeper.keep("lazy", [a], a.clone(), None)
    keeper.keep("lazy", [b], lazy, None)
    check.verify(keeper)
    assert set(check.failures) == {"lazy"}, check.failures
    assert check.own_errors[0] < 1e-4  # the case's figure stays the first call's
    assert tc.compare_outputs([b.clone()], [_offset_reference(b)], None, 0.0, own_errors=check.own_errors)


def test_the_values_a_call_was_given_are_drawn_again_and_a_call_that_changed_them_is_named():
    x = torch.randn(4096, generator=_gen(30))
    ids = torch.randint(0, 9, (64,), generator=_gen(31))
    fresh = tc.FreshValues([x, ids])
    fresh.refresh()
    state = fresh.last_state
    given = [x.clone(), ids.clone()]
    fresh.refresh()  # later refreshes do not change what that call was given
    assert fresh.changed(given, state) is None
    zeroed = [torch.zeros_like(x), ids.clone()]
    assert "input tensor 0" in fresh.changed(zeroed, state)
    other_ids = [given[0], torch.zeros_like(ids)]
    assert "input tensor 1" in fresh.changed(other_ids, state)
    # The same tensor passed twice: the second draw rewrites the first, so it is not compared (no false alarm).
    y = torch.randn(256, generator=_gen(32))
    twice = tc.FreshValues([y, y])
    twice.refresh()
    assert twice.changed([y.clone(), y.clone()], twice.last_state) is None


def _product_reference(x, w):
    return x @ w


def test_a_timed_call_that_zeroes_its_inputs_fails_though_its_zero_answer_matches_the_reference_on_them():
    # Zeroed inputs make the reference's answer zero, which is what the call returned: the values agree, the inputs
    # do not. Its honest twin passes.
    x, w = torch.randn(64, 32, generator=_gen(33)), torch.randn(32, 16, generator=_gen(34))
    check = _TimedCheck(_product_reference, False, {"candidate", "zeroes"}, None, 0.0)
    keeper = check.keeper()
    fresh = tc.FreshValues([x, w])
    args = [x, w]
    keeper.sources = {id(args): fresh}
    fresh.refresh()
    keeper.keep("candidate", args, x @ w, None)
    fresh.refresh()
    x.zero_()  # the cheat's call: a memset instead of a matmul
    keeper.keep("zeroes", args, torch.zeros(64, 16), None)
    check.verify(keeper)
    assert set(check.failures) == {"zeroes"}, check.failures
    assert "changed its inputs" in check.failures["zeroes"] and "input tensor 0" in check.failures["zeroes"]


def test_an_extra_candidate_is_held_to_its_own_validations_error_scale_not_the_candidates():
    # The same result, 0.5 % off the reference, from the candidate (whose validation measured no error) and from the
    # stage-1 attempt timed beside it (whose own validation measured 1 %): it fails the first and passes the second.
    check = _TimedCheck(_square_reference, False, {"candidate", "stage1"}, None, 0.0)
    check.scales["stage1"] = 1e-2
    keeper = check.keeper()
    x = torch.randn(1000, generator=_gen(3))
    off = x * x * (1 + 5e-3 * torch.randn(1000, generator=_gen(4)))
    keeper.keep("candidate", [x], off.clone(), None)
    keeper.keep("stage1", [x], off.clone(), None)
    check.verify(keeper)
    assert set(check.failures) == {"candidate"} and "relative norm distance" in check.failures["candidate"]
