"""The validator's coverage beyond get_inputs(): larger sizes, sizes the reference accepts, non-contiguous
layouts, new values at the same address, index inputs that follow their dimension, a reference that cannot
run in float64. Each check has a candidate that must fail it and one that must pass it."""

from __future__ import annotations

import pytest
import torch

from mcp_server.engine.jobs import derive
from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.validate import validate


def kinds(result, severity=Severity.error):
    return {f.kind for f in result.findings if f.severity is severity}


def messages(result):
    return [f"{f.kind.value}: {f.message}" for f in result.findings]


# -- derived sizes (unit: no children) --------------------------------------------------------------


def test_sizes_include_larger_ones_past_the_power_of_two_and_2n_plus_1():
    subs = [new for new, _ in derive.substitutes(1000)]
    assert subs == [999, 1025, 1, 2001]
    assert [new for new, _ in derive.substitutes(1024)][:2] == [1023, 1025]
    assert [new for new, _ in derive.substitutes(777)] == [776, 1025, 1, 1555, 389]  # 776 is even: 389 is odd


def test_larger_sizes_over_the_memory_budget_are_listed_not_run():
    args = [torch.randn(1024, 1024)]  # 1024→2049 quadruples it; 1024→1025 adds 0.2 %
    budget = derive.budget_bytes(args, "cpu")
    plan, over = derive.plan_variants(args, 10, budget)
    assert "derived 1024→2049" in {v.label for v in over}
    assert all(derive.tensor_bytes(args, v.old, v.new) <= budget for v in plan)
    assert "derived 1024→1025" in {v.label for v in plan}


def test_each_size_gets_a_large_size_past_any_block_one_program_practically_covers():
    import triton.language as tl

    assert derive.LARGE_ROWS < derive.LARGE_BLOCK < tl.TRITON_MAX_TENSOR_NUMEL  # 2^20: Triton's own limit
    vectors = [torch.randn(1000), torch.randn(1000)]  # 8 KB: the CPU budget's floor (1 MiB) holds 2 × 2^15 floats
    plan, over = derive.plan_variants(vectors, 6, derive.budget_bytes(vectors, "cpu"))
    assert [v.new for v in plan] == [999, 1025, 1, 2001, 32769] and not over
    assert not plan[-1].ints and "large" in plan[-1].why
    # Rows usually set the number of programs: a leading dimension's large size stops at one past 2^8. Both on top
    # of max_derived's six (none at max_derived=0).
    rows = [torch.randn(8, 300)]
    plan, _ = derive.plan_variants(rows, 6, derive.budget_bytes(rows, "cpu"))
    assert [v.label for v in plan[6:]] == ["derived 300→32769", "derived 8→257"]
    assert derive.plan_variants(rows, 0, derive.budget_bytes(rows, "cpu")) == ([], [])
    # Within the budget: the largest power of two that fits, else listed over it.
    wide = [torch.randn(40, 300)]  # 47 KB; 40 rows of 2^15 floats would be 5 MiB
    plan, _ = derive.plan_variants(wide, 6, derive.budget_bytes(wide, "cpu"))
    assert plan[-2].label == "derived 300→4097" and "largest power of two the memory budget holds" in plan[-2].why
    big = [torch.randn(64, 4000)]  # 1 MB: the size 2^14 + 1 at least, 4 MiB, is over a budget of twice the inputs
    plan, over = derive.plan_variants(big, 6, derive.budget_bytes(big, "cpu"))
    assert "derived 4000→16385" in {v.label for v in over} and all(v.new < 16385 for v in plan)


def test_sizes_only_a_models_constructor_sets_are_derived_beside_the_inputs_sizes():
    args = [torch.zeros(16, 64)]
    # Linear(64, 40): 40 is the output's width and no input's size; a kernel size of 3 or a group count of 8 is no
    # output size (changing it changes the problem), and 64 is an input's.
    assert derive.model_only_sizes([64, 40, 3, 8, True], args, [[16, 40]]) == [40]
    assert derive.model_only_sizes([[64, 40], 1], args, [[16, 40], [40]]) == [40]
    assert derive.model_only_sizes([64, 40], args, [[16, 64]]) == []
    # A hidden width is a size of the weights only; after the outputs' sizes.
    assert derive.model_only_sizes([64, 32, 40, 8], args, [[16, 40]], [[32, 64], [32], [40, 32], [40]]) == [40, 32]
    plan, _ = derive.plan_variants(args, 2, derive.budget_bytes(args, "cpu"), [40])
    labels = [v.label for v in plan]
    # Not counted against the limit: the inputs' two, their large sizes, then the model's two.
    assert labels[:2] == ["derived 64→63", "derived 16→15"] and labels[-2:] == ["derived 40→39", "derived 40→65"]
    assert all(v.ints for v in plan if v.old == 40)
    assert derive.plan_variants(args, 0, derive.budget_bytes(args, "cpu"), [40]) == ([], [])


def test_a_large_size_leaves_integer_arguments_as_they_are():
    # A KernelBench model rebuilt with 2^15 features would hold a 2^30-element weight: it keeps its base size.
    x, n = torch.randn(16, 200), 200
    large = derive.Variant("derived 200→32769", 200, 32769, "large", ints=False)
    new_x, new_n = derive.apply_variant([x, n], large)
    assert new_x.shape == (16, 32769) and new_n == 200
    assert derive.apply_variant([x, n], derive.Variant("derived 200→199", 200, 199, ""))[1] == 199


def test_the_budget_is_whole_mib_and_the_note_says_it_in_a_readable_unit():
    from mcp_server.engine.validate import _size_notes

    assert derive.budget_bytes([torch.randn(10)], "cpu") == derive.MIB  # 40 bytes of inputs: the floor
    assert derive.budget_bytes([torch.randn(300_000)], "cpu") == 2 * derive.MIB  # twice 1.14 MiB, in whole MiB

    def note(mib):
        return _size_notes({"sizes": {"over_budget": ["1000→2001"], "budget_mib": [mib]}})[0]

    assert note("1") == "derived sizes: over the 1 MiB input budget 1000→2001"
    assert "over the 2 GiB input budget" in note("2048")
    assert "over the input budget of under 1 MiB" in note("0")  # what an 8 KB budget used to print as "0 MiB"


def test_unsigned_integer_inputs_are_derived_like_other_integers():
    # PyTorch's CPU kernels have no >= or max for uint16/32/64: looking for index-like values raised in the
    # reference's child, so such a reference could not run at all.
    bits = torch.randint(0, 2**32, (1000,)).to(torch.uint32)
    index = torch.randint(0, 1000, (64,)).to(torch.uint32)
    index[0] = 999
    new_bits, new_index = derive.apply_variant([bits, index], derive.Variant("derived 1000→1025", 1000, 1025, ""))
    assert new_bits.dtype == torch.uint32 and new_bits.shape == (1025,)
    assert new_index.dtype == torch.uint32 and int(new_index.to(torch.int64).max()) < 1025


def test_index_values_follow_the_dimension_they_index_even_when_their_shape_does_not_change():
    logits, target = torch.randn(32, 10), torch.randint(0, 10, (32,))
    target[0] = -100  # an ignore_index sentinel survives
    target[1] = 9
    variant = derive.Variant("derived 10→3", 10, 3, "")
    _, new_target = derive.apply_variant([logits, target], variant)
    assert new_target.shape == (32,) and int(new_target.max()) < 3 and int(new_target[0]) == -100
    # Values far below a size are not indices into it: a new batch size draws from the values there.
    _, drawn = derive.apply_variant([logits, target], derive.Variant("derived 32→31", 32, 31, ""))
    assert drawn.shape == (31,) and set(drawn.tolist()) <= set(target.tolist())


@pytest.mark.parametrize("kind", sorted(derive.LAYOUTS))
def test_layouts_keep_values_and_change_strides(kind):
    x = torch.randn(6, 5)
    y = derive.relayout([x], kind)[0]
    assert torch.equal(y, x)
    assert not y.is_contiguous() or y.storage_offset() > 0


# -- the checks, end to end ------------------------------------------------------------------------


def test_a_block_that_covers_only_get_inputs_fails_on_a_larger_derived_size(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("add_truncates.py", "candidate"), runner=runner)
    assert not result.ok
    failing = {c.case for c in result.cases if c.status == "failed"}
    assert "derived 1000→1025" in failing
    assert not any(c.status == "failed" for c in result.cases if not c.derived)


@pytest.mark.parametrize(
    ("problem", "wrong", "right", "case"),
    [
        ("add_problem.py", "add_fixed_block.py", "add_good.py", "derived 1000→32769"),
        pytest.param(
            "softmax_rows_problem.py",
            "softmax_fixed_block.py",
            "softmax_good.py",
            "derived 300→32769",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_block_fixed_in_the_code_fails_at_the_large_size_and_a_kernel_that_follows_the_size_passes(
    runner, fx, problem, wrong, right, case
):
    # One program with a 4096-wide block (a row block of 1024): right at every size up to 2n+1 of the inputs.
    fixed = validate(fx(problem, "reference"), fx(wrong, "candidate"), runner=runner, seeds=1)
    assert not fixed.ok
    assert {c.case for c in fixed.cases if c.status == "failed"} == {case}, fixed.cases
    [said] = [f for f in fixed.findings if f.case == case and f.severity is Severity.error]
    if said.kind is FindingKind.mismatch:  # (the rows past 1024 columns are never written: uninitialized_output)
        assert "Every base case passed" in said.message and "large: one past 2^15" in said.message, said.message
    good = validate(fx(problem, "reference"), fx(right, "candidate"), runner=runner, seeds=1)
    assert good.ok, messages(good)
    assert any(c.case == case and c.status == "passed" for c in good.cases)


@pytest.mark.parametrize(
    ("problem", "candidate", "fails_at", "kind"),
    [
        # A width only the constructor sets, fixed in the code: right for the problem's 40 alone.
        ("kb_linear_problem.py", "kb_linear_widths.py:FixedWidth", "derived 40→39", FindingKind.out_of_bounds),
        ("kb_linear_problem.py", "kb_linear_widths.py:ModelNew", None, None),
        # A hidden width (a size of the weights only), fixed in the code.
        ("kb_mlp_problem.py", "kb_mlp.py:FixedHidden", "derived 32→31", FindingKind.out_of_bounds),
        ("kb_mlp_problem.py", "kb_mlp.py:ModelNew", None, None),
        # A row block of 1024 fixed in the code: the large size of LayerNorm's 256 features now rebuilds the model
        # there (4097 features fit the budget), where the model built at 256 rejected it.
        ("kb_layernorm_problem.py", "kb_layernorm_fixed_block.py:ModelNew", "derived 256→4097", None),
        ("kb_layernorm_problem.py", "kb_layernorm_good.py:ModelNew", None, None),
    ],
)
def test_kernelbench_sizes_the_constructor_sets_are_derived_too(runner, fx, problem, candidate, fails_at, kind):
    path, name = candidate.split(":")
    result = validate(fx(problem), fx(path, name), runner=runner, seeds=1)
    if fails_at is None:
        assert result.ok, messages(result)
        telling = ("derived 40→39", "derived 256→4097", "derived 32→31")
        assert any(c.case in telling and c.status == "passed" for c in result.cases)
    else:
        assert not result.ok and any(c.case == fails_at and c.status == "failed" for c in result.cases), result.cases
        assert all(c.status == "passed" for c in result.cases if c.derived is None), result.cases
        if kind is not None:
            assert kind in kinds(result), messages(result)


@pytest.mark.slow
def test_when_the_reference_rejects_every_variant_of_a_size_multiples_are_derived(runner, fx):
    ref = fx("groups_problem.py", "reference")
    good = validate(ref, fx("groups_kernels.py", "good"), runner=runner, seeds=1)
    assert good.ok, messages(good)
    ran = {c.case: c.status for c in good.cases}
    assert ran["derived 64→96"] == "passed" and ran["derived 64→32"] == "passed"
    assert ran["derived 64→63"] == "rejected by the reference"
    note = next(n for n in good.notes if n.startswith("derived sizes"))
    assert "64→96" in note and "rejected by the reference" in note and "64→63" in note
    fixed = validate(ref, fx("groups_kernels.py", "fixed_block"), runner=runner, seeds=1)
    assert not fixed.ok
    assert "derived 64→96" in {c.case for c in fixed.cases if c.status == "failed"}
    # Right at the base size, wrong at a derived one: the finding names the size and what usually assumes it.
    said = [f.message for f in fixed.findings if f.case == "derived 64→96" and f.severity is Severity.error]
    assert said and "Every base case passed" in said[0] and "assumes the base sizes" in said[0], said


@pytest.mark.parametrize(
    ("candidate", "case", "cause"),
    [
        ("add_ignores_strides.py", "layout: strided", "pass each input's strides to the kernel"),
        ("add_ignores_offset.py", "layout: offset", "reads from the storage's start rather than data_ptr()"),
    ],
)
def test_a_kernel_wrong_only_in_one_layout_fails_there_and_is_told_the_usual_cause(runner, fx, candidate, case, cause):
    result = validate(fx("add_problem.py", "reference"), fx(candidate, "candidate"), runner=runner)
    assert FindingKind.mismatch in kinds(result), messages(result)
    assert {c.case for c in result.cases if c.status == "failed"} == {case}
    [finding] = [f for f in result.findings if f.case == case and f.severity is Severity.error]
    assert "Every base case passed" in finding.message and cause in finding.message, finding.message


def test_a_kernel_wrong_at_the_base_cases_too_is_not_told_a_layout_or_size_is_the_cause(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("add_nan.py", "candidate"), runner=runner)
    assert not result.ok
    assert {"base", "layout: strided"} <= {c.case for c in result.cases if c.status == "failed"}, result.cases
    assert not [f.message for f in result.findings if "Every base case passed" in f.message]


@pytest.mark.parametrize(
    ("name", "ok", "failing"),
    [
        ("uses_strides", True, set()),
        ("assumes_unit_stride", False, {"layout: transposed", "layout: strided"}),
    ],
)
@pytest.mark.slow
def test_2d_layouts_judge_whether_strides_are_honoured(runner, fx, name, ok, failing):
    result = validate(fx("rows_problem.py", "reference"), fx("rows_kernels.py", name), runner=runner, seeds=1)
    assert result.ok is ok, messages(result)
    assert {c.case for c in result.cases if c.status == "failed"} == failing
    assert {"layout: transposed", "layout: strided", "layout: offset"} <= {c.case for c in result.cases}


@pytest.mark.slow
def test_a_clean_refusal_of_a_non_contiguous_input_is_a_warning(runner, fx):
    result = validate(fx("rows_problem.py", "reference"), fx("rows_kernels.py", "refuses"), runner=runner, seeds=1)
    assert result.ok, messages(result)
    assert FindingKind.unsupported_shape in kinds(result, Severity.warning)
    assert {c.case for c in result.cases if c.status == "refused"} == {"layout: transposed", "layout: strided"}


@pytest.mark.slow
def test_a_result_cached_by_address_is_a_stale_cache_every_time(runner, fx):
    for _ in range(2):  # deterministic: not a matter of the allocator reusing an address
        result = validate(
            fx("add_problem.py", "reference"), fx("add_ptr_cache.py", "candidate"), runner=runner, derive_shapes=False
        )
        assert FindingKind.stale_cache in kinds(result), messages(result)
        assert any("same input tensors" in f.message for f in result.findings if f.kind is FindingKind.stale_cache)


@pytest.mark.slow
def test_cross_entropy_targets_follow_a_shrunk_class_dimension(runner, fx):
    ref = fx("ce_problem.py", "reference")
    good = validate(ref, fx("ce_kernels.py", "good"), runner=runner, seeds=1)
    assert good.ok, messages(good)
    status = {c.case: c.status for c in good.cases}
    assert status["derived 10→9"] == "passed" and status["derived 10→1"] == "passed"
    fixed = validate(ref, fx("ce_kernels.py", "fixed_block"), runner=runner, seeds=1)
    assert not fixed.ok and "derived 10→17" in {c.case for c in fixed.cases if c.status == "failed"}


def test_variants_the_reference_rejects_are_dropped_and_listed(runner, fx):
    result = validate(fx("gather_problem.py", "reference"), fx("gather_good.py", "candidate"), runner=runner, seeds=1)
    assert result.ok, messages(result)
    rejected = {c.case for c in result.cases if c.status == "rejected by the reference"}
    assert {"derived 100→99", "derived 100→1"} <= rejected
    assert any(c.case == "derived 100→129" and c.status == "passed" for c in result.cases)


@pytest.mark.slow
def test_a_reference_that_cannot_run_in_float64_is_a_warning_with_an_estimate(runner, fx):
    closure = validate(
        fx("kb_closure_problem.py"), fx("kb_linear_tanh.py", "ModelNew"), runner=runner, seeds=1, derive_shapes=False
    )
    assert closure.ok, messages(closure)
    warning = next(f for f in closure.findings if f.kind is FindingKind.reference_precision)
    assert warning.severity is Severity.warning and "RuntimeError" in warning.message
    assert closure.reference_precision.startswith("native")
    assert any(r.torch_rel_norm_err > 0 for r in closure.rows)  # the allowance was estimated, not zero
    wrong = validate(
        fx("kb_closure_problem.py"), fx("kb_linear_tanh.py", "ModelNoBias"), runner=runner, seeds=1, derive_shapes=False
    )
    assert FindingKind.mismatch in kinds(wrong)
    registered = validate(
        fx("kb_registered_problem.py"), fx("kb_linear_tanh.py", "ModelNew"), runner=runner, seeds=1, derive_shapes=False
    )
    assert registered.ok, messages(registered)
    assert FindingKind.reference_precision not in kinds(registered, Severity.warning)
    assert registered.reference_precision == "float64"
