"""validate_against_reference: every check has a kernel that must fail it and one that must pass it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from mcp_server.engine.device import probe
from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.validate import validate

HAS_GPU = torch.cuda.is_available()


def kinds(result, severity=Severity.error):
    return {f.kind for f in result.findings if f.severity is severity}


def test_validate_passes_a_correct_add_on_all_seeds_and_derived_shapes(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner)
    assert result.ok, result.findings
    assert result.interpreter is (not HAS_GPU)
    assert (result.device == "cpu-interpreter") is (not HAS_GPU)
    assert [c.status for c in result.cases] == ["passed"] * len(result.cases)
    assert {c.seed for c in result.cases} == set(result.seeds) and len(result.seeds) == 3
    derived = {c.case for c in result.cases if c.derived}
    # 2n+1 doubles 8 KB of inputs: within the memory budget's floor, on the GPU and in the interpreter. The large
    # size, one past 2^15, is past any block one program could practically cover.
    sizes = {"derived 1000→999", "derived 1000→1025", "derived 1000→1", "derived 1000→2001", "derived 1000→32769"}
    assert derived == sizes | {"layout: strided", "layout: offset"}  # 1-D: nothing to transpose
    note = next(n for n in result.notes if n.startswith("derived sizes: ran 1000→999, 1000→1025, 1000→1, 1000→2001"))
    assert "1000→32769" in note and "over the" not in note
    assert any("_add_kernel" in k for k in result.kernels_launched)
    assert all(r.ok and r.mismatches == 0 for r in result.rows)


def test_a_one_element_input_takes_every_layout_and_a_kernel_that_ignores_it_fails(runner, fx):
    # A one-element slice of a strided buffer keeps its stride 2 through .contiguous(); the checks that hash
    # and compare inputs once raised on it, failing every right kernel that takes a scale as a tensor.
    result = validate(fx("scale_problem.py", "reference"), fx("scale_kernels.py", "candidate"), runner=runner)
    assert result.ok, result.findings
    assert {"layout: strided", "layout: offset"} <= {c.case for c in result.cases if c.derived}
    problem = fx("scale_problem.py", "reference")
    fixed = validate(problem, fx("scale_kernels.py", "candidate_fixed_scale"), runner=runner)
    assert not fixed.ok and FindingKind.mismatch in kinds(fixed)


def test_a_float64_run_that_computes_something_else_is_not_taken_as_the_truth(runner, fx):
    # Its garbage once became the truth, and 4x "PyTorch's own error" against it admitted any output: the
    # one-off twin passed. Now the reference in its own dtype is the truth, with a warning that says why.
    problem = fx("bits_flip_problem.py", "reference")
    right = validate(problem, fx("flip_kernels.py", "candidate"), runner=runner)
    assert right.ok, right.findings
    warning = next(f for f in right.findings if f.kind is FindingKind.reference_precision)
    assert "computes something else in float64" in warning.message
    # Float64 ran here; the warning says so rather than that it could not run.
    assert warning.message.startswith("The reference ran in float64") and "could not run" not in warning.message
    wrong = validate(problem, fx("flip_kernels.py", "candidate_one_off"), runner=runner)
    assert not wrong.ok and FindingKind.mismatch in kinds(wrong)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_reference_whose_own_dtype_loses_the_answer_the_same_way_every_run_lets_float64_judge(runner, fx):
    # PyTorch's float32 layer_norm near float32's maximum: 0.66 of the output's norm off float64, yet the same on
    # nudged inputs, so it is taken as the truth. The guarded kernel, which matches float64, once failed against
    # it; now a result that matches float64 passes on that, and one that matches neither still fails.
    problem = fx("overflow_norm_problem.py", "reference")
    right = validate(problem, fx("overflow_norm_kernels.py", "candidate"), runner=runner, derive_shapes=False)
    assert right.ok, right.findings
    assert any(
        f.kind is FindingKind.reference_precision and "matches the reference's float64 result" in f.message
        for f in right.findings
    ), right.findings
    off = validate(problem, fx("overflow_norm_kernels.py", "candidate_off"), runner=runner, derive_shapes=False)
    assert not off.ok and FindingKind.mismatch in kinds(off)
    message = next(f.message for f in off.findings if f.kind is FindingKind.mismatch)
    assert "nor the reference's float64 result" in message


def test_a_reference_that_loses_its_answer_in_its_own_dtype_judges_nothing_rather_than_everything(runner, fx):
    # Its float64 run is the truth here (a second bf16 run disagrees with the first, so bf16 is what is off);
    # 4x its own 58 % error would pass zeros, and judging against the bf16 run would fail the accurate kernel.
    problem = fx("cancel_problem.py", "reference")
    for candidate in ("candidate", "candidate_zeros"):
        result = validate(problem, fx("cancel_kernels.py", candidate), runner=runner, derive_shapes=False)
        assert not result.ok and kinds(result) == {FindingKind.reference_precision}, candidate
        assert "no verdict" in next(f.message for f in result.findings if f.kind is FindingKind.reference_precision)


def test_the_float64_runs_agreement_check_scales_and_counts_values_lost_to_overflow():
    from mcp_server.engine.jobs.validate_jobs import _disagreement

    own = torch.randn(1000, dtype=torch.float64)
    lost = own.clone()
    lost[:50] = float("inf")  # 5 % non-finite only in float64
    assert "50 values finite only" in _disagreement([own.float()], [lost])
    lost[5:50] = own[5:50]
    assert _disagreement([own.float()], [lost]) == ""  # 0.5 %: an overflow float64 is entitled to
    tiny = own * 1e-300  # squares underflow unless scaled first
    assert _disagreement([tiny], [tiny * (1 + 1e-3)]) == ""
    assert "relative norm 0.5," in _disagreement([tiny], [tiny * 2])


def test_a_tolerance_looser_than_the_default_is_named_and_a_tighter_or_unused_one_is_not(runner, fx, tmp_path):
    add = fx("add_problem.py", "reference")

    def loose(tolerances=None, reference=add):
        result = validate(
            reference, fx("add_good.py", "candidate"), tolerances=tolerances, derive_shapes=False, runner=runner
        )
        assert result.ok, result.findings
        return [(f.severity, f.message) for f in result.findings if f.kind is FindingKind.loose_tolerance]

    (given,) = loose({"float32": (1.0, 1.0)})  # what --tol fp32=1,1 gives
    assert given[0] is Severity.warning and "atol=1, rtol=1" in given[1] and "1e+05×" in given[1]
    assert loose({"float32": (1e-6, 1e-6)}) == [] and loose({"bfloat16": (1.0, 1.0)}) == []  # tighter; no such output
    # Declared by the reference module: the problem's author chose it, so it is said, not warned about.
    problem = tmp_path / "declares.py"
    problem.write_text(Path(add.rsplit(":", 1)[0]).read_text() + '\nTOLERANCES = {"float32": (1e-3, 1e-3)}\n')
    (declared,) = loose(reference=f"{problem}:reference")
    assert declared[0] is Severity.info and "the reference module declares" in declared[1]


def test_validate_passes_a_correct_softmax_on_labelled_cases_without_deriving(runner, fx):
    result = validate(fx("softmax_problem.py", "reference"), fx("softmax_good.py", "candidate"), runner=runner)
    assert result.ok, result.findings
    labelled = {c.case for c in result.cases if not c.derived}
    assert labelled == {"square", "non-pow2 rows", "one row"}
    # Labelled cases get no derived sizes, but the first one is also tried in other layouts.
    assert {c.case for c in result.cases if c.derived} == {"layout: transposed", "layout: strided", "layout: offset"}


def test_a_gluon_kernel_without_a_gpu_fails_every_case_with_a_message_that_names_the_fix(runner, fx):
    if HAS_GPU:
        pytest.skip("with a GPU the Gluon kernel runs: the message is for machines without one")
    result = validate(fx("add_problem.py", "reference"), fx("add_gluon.py", "candidate"), runner=runner)
    assert not result.ok
    errors = [f for f in result.findings if f.severity is Severity.error]
    assert errors and all("_add_kernel is a Gluon kernel" in f.message for f in errors), errors


DEFECTS = [
    ("add_problem.py", "add_unwritten.py", FindingKind.uninitialized_output),
    ("add_problem.py", "add_writes_nothing.py", FindingKind.uninitialized_output),
    ("add_problem.py", "add_zeroes_input.py", FindingKind.input_mutated),
    ("add_problem.py", "add_aliases_input.py", FindingKind.output_aliases_input),
    ("add_problem.py", "add_torch_fallback.py", FindingKind.torch_compute),
    ("add_problem.py", "add_torch_compiled.py", FindingKind.torch_compute),
    ("add_problem.py", "add_torch_in_thread.py", FindingKind.torch_compute),
    ("add_problem.py", "add_torch_in_pool.py", FindingKind.torch_compute),
    ("add_problem.py", "add_no_triton.py", FindingKind.no_triton_launch),
    ("add_problem.py", "add_flaky.py", FindingKind.nondeterministic),
    ("add_problem.py", "add_stale_cache.py", FindingKind.stale_cache),
    ("add_problem.py", "add_wrong_dtype.py", FindingKind.dtype_mismatch),
    ("add_problem.py", "add_wrong_shape.py", FindingKind.shape_mismatch),
    ("add_problem.py", "add_subclass.py", FindingKind.shape_mismatch),
    ("add_problem.py", "add_nan.py", FindingKind.nan_mismatch),
    ("add_problem.py", "add_exits.py", FindingKind.crash),
    ("add_problem.py", "add_segfault.py", FindingKind.crash),
    ("add_problem.py", "add_raises.py", FindingKind.exception),
    ("add_problem.py", "add_import_fails.py", FindingKind.load_error),
    ("add_problem.py", "add_ooms.py", FindingKind.oom),
    ("tiny_problem.py", "tiny_zeros.py", FindingKind.mismatch),
    ("softmax_problem.py", "softmax_no_shift.py", FindingKind.mismatch),
    ("inplace_problem.py", "inplace_copy.py", FindingKind.mismatch),
    ("add_pow2_problem.py", "add_assumes_multiple.py", FindingKind.uninitialized_output),
    ("add_problem.py", "add_in_tuple.py", FindingKind.shape_mismatch),
    ("pair_problem.py", "pair_nested.py", FindingKind.shape_mismatch),
    ("pair_problem.py", "pair_as_dict.py", FindingKind.shape_mismatch),
]


def test_a_row_counts_its_nan_and_inf_mismatches_and_the_table_shows_them(runner, fx):
    from mcp_server.cli.render import render_validate

    bad = validate(fx("add_problem.py", "reference"), fx("add_nan.py", "candidate"), runner=runner, timeout_s=60)
    failed = [r for r in bad.rows if not r.ok]
    # Every 7th element is 0/0 in the defect; the others are right where the inputs are contiguous.
    assert failed and all(r.nan_mismatches == len(range(0, r.numel, 7)) for r in failed)
    assert all(r.mismatches == 0 for r in failed if r.case == "base")
    assert f"+ {failed[0].nan_mismatches} NaN/Inf" in render_validate(bad)
    good = validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner, timeout_s=60)
    assert good.ok and all(r.nan_mismatches == 0 for r in good.rows)
    assert "NaN/Inf" not in render_validate(good)


@pytest.mark.slow
@pytest.mark.parametrize(("problem", "candidate", "kind"), DEFECTS, ids=[d[1] for d in DEFECTS])
def test_validate_fails_each_defective_candidate_with_its_kind(runner, fx, problem, candidate, kind):
    result = validate(fx(problem, "reference"), fx(candidate, "candidate"), runner=runner, timeout_s=60)
    assert not result.ok
    assert kind in kinds(result), [f"{f.kind.value}: {f.message}" for f in result.findings]


@pytest.mark.parametrize(
    ("problem", "candidate"),
    [
        ("tiny_problem.py", "tiny_good.py"),
        ("inplace_problem.py", "inplace_good.py"),
        ("add_problem.py", "add_triton_in_thread.py"),
        ("pair_problem.py", "pair_good.py"),
        ("pair_problem.py", "pair_as_list.py"),
    ],
)
@pytest.mark.slow
def test_validate_passes_the_correct_twins_of_the_defects(runner, fx, problem, candidate):
    result = validate(fx(problem, "reference"), fx(candidate, "candidate"), runner=runner)
    assert result.ok, [f.message for f in result.findings]


def test_the_largest_torch_share_is_reported_for_bench_to_hold_timed_calls_to(runner, fx):
    # torch.add does all of the reference's work: the share is 1, an error; allowed, it is not counted at all.
    fallback = validate(fx("add_problem.py", "reference"), fx("add_torch_fallback.py", "candidate"), runner=runner)
    assert not fallback.ok and fallback.torch_share == pytest.approx(1.0)
    allowed = validate(
        fx("add_problem.py", "reference"),
        fx("add_torch_fallback.py", "candidate"),
        allow_torch_ops=("aten.add",),
        runner=runner,
    )
    assert allowed.torch_share == 0.0
    # Allowed work fails nothing, but the verdict says how much of the reference's work it was.
    said = [f for f in allowed.findings if f.kind is FindingKind.torch_compute]
    assert said and {f.severity for f in said} == {Severity.warning}
    assert "allowed by allow_torch_ops did 100%" in said[0].message
    honest = validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner)
    assert honest.ok and honest.torch_share == 0.0
    assert not [f for f in honest.findings if f.kind is FindingKind.torch_compute]


@pytest.mark.slow
def test_a_tensor_subclass_output_is_named_and_a_reference_returning_one_is_read_as_a_plain_tensor(runner, fx):
    # The candidate's subclass fails with its name (the parent could not even read it back before, a traceback).
    result = validate(fx("add_problem.py", "reference"), fx("add_subclass.py", "candidate"), runner=runner)
    assert any("torch.Tensor subclass" in f.message for f in result.findings), result.findings
    # Its twin returning a plain tensor passes against a reference that returns a subclass or a Parameter.
    for name in ("reference", "parameter_reference"):
        twin = validate(fx("subclass_problem.py", name), fx("add_good.py", "candidate"), runner=runner)
        assert twin.ok, twin.findings


def test_the_tail_bug_hides_at_a_power_of_two_until_shapes_are_derived(runner, fx):
    ref, cand = fx("add_pow2_problem.py", "reference"), fx("add_assumes_multiple.py", "candidate")
    assert validate(ref, cand, runner=runner, derive_shapes=False).ok
    result = validate(ref, cand, runner=runner)
    failing = {c.case for c in result.cases if c.status == "failed"}
    assert failing and all(name.startswith("derived") for name in failing)
    assert "derived 1024→1025" in failing  # one past the power of two


def test_a_clean_refusal_of_a_derived_shape_is_a_warning_not_a_failure(runner, fx):
    result = validate(fx("add_pow2_problem.py", "reference"), fx("add_refuses_odd.py", "candidate"), runner=runner)
    assert result.ok, result.findings
    assert FindingKind.unsupported_shape in kinds(result, Severity.warning)
    assert any(c.status == "refused" for c in result.cases)


def test_a_derived_shape_that_does_not_compile_is_a_refusal_and_the_base_shape_still_fails(runner, fx):
    # The GPU's compile error and the interpreter's exception for the same kernel got different verdicts.
    result = validate(
        fx("add_pow2_problem.py", "reference"), fx("add_compiles_pow2_only.py", "candidate"), runner=runner
    )
    assert result.ok, result.findings
    assert FindingKind.unsupported_shape in kinds(result, Severity.warning)
    base = validate(fx("add_problem.py", "reference"), fx("add_compiles_pow2_only.py", "candidate"), runner=runner)
    assert FindingKind.compile_error in kinds(base)  # 1000 is the problem's own size: no refusal there


def test_an_exception_points_at_the_users_file_and_line(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("add_raises.py", "candidate"), runner=runner)
    finding = next(f for f in result.findings if f.kind is FindingKind.exception)
    assert finding.where is not None and finding.where.file.endswith("add_raises.py") and finding.where.line == 5
    assert "boom" in finding.message


@pytest.mark.slow
def test_a_hanging_candidate_times_out_and_the_next_job_runs_normally(runner, fx):
    # The candidate spins until the limit (CPU time the suite pays: the limit is short). The limit leaves the
    # one-case reference ample time (a GPU job's child starts CUDA first), and the fork server is started
    # before: its start counts within a job's limit. Whatever runs out the limit, the finding is a timeout.
    device = probe(runner)
    warm = runner.run("probe", {}, env=device.job_env())
    with warm:
        assert warm.ok, warm.failure
    result = validate(
        fx("add_problem.py", "reference"),
        fx("add_hangs.py", "candidate"),
        runner=runner,
        seeds=1,
        derive_shapes=False,
        timeout_s=3 if device.interpreter else 12,
    )
    assert FindingKind.timeout in kinds(result)
    after = validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner)
    assert after.ok


def test_a_crash_does_not_disturb_the_next_job(runner, fx):
    crashed = validate(fx("add_problem.py", "reference"), fx("add_segfault.py", "candidate"), runner=runner)
    assert FindingKind.crash in kinds(crashed)
    assert "SIGSEGV" in next(f.message for f in crashed.findings if f.kind is FindingKind.crash)
    assert validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner).ok


@pytest.mark.slow
def test_kernelbench_files_are_accepted_as_they_are(runner, fx):
    good = validate(fx("kb_problem.py"), fx("kb_good.py"), runner=runner)
    assert good.ok, good.findings
    assert good.mode == "kernelbench" and good.weights == "copied from the reference"
    # Nothing in this model depends on its training flag: no eval-mode case repeats the base one.
    assert not any(c.case == "mode: eval" for c in good.cases)
    wrong = validate(fx("kb_problem.py"), fx("kb_wrong.py"), runner=runner)
    assert FindingKind.mismatch in kinds(wrong)
    assert not any("weights of its own" in f.message for f in good.findings + wrong.findings)


@pytest.mark.slow
def test_a_kernelbench_kernel_that_never_reads_the_weights_fails_and_one_that_reads_them_passes(runner, fx):
    # The models' parameters are moved off their initial values: a LayerNorm kernel assuming a weight of ones and a
    # bias of zeros (right while they held them) fails; its twin, reading them, passes.
    wrong = validate(fx("kb_layernorm_problem.py"), fx("kb_layernorm_ignores_weights.py"), runner=runner)
    assert not wrong.ok and FindingKind.mismatch in kinds(wrong), wrong.findings
    good = validate(fx("kb_layernorm_problem.py"), fx("kb_layernorm_good.py"), runner=runner)
    assert good.ok and good.weights == "copied from the reference", good.findings


def test_a_module_whose_weights_are_not_the_references_is_told_why_its_values_differ(runner, fx):
    renamed = validate(fx("kb_problem.py"), fx("kb_renamed.py"), runner=runner)
    assert not renamed.ok and renamed.weights == "seeded construction"
    said = [f.message for f in renamed.findings if f.kind is FindingKind.mismatch]
    assert said and "weights of its own" in said[0] and "only the reference has scale" in said[0]
    assert "only the candidate has factor" in said[0] and sum("weights of its own" in m for m in said) == 1


@pytest.mark.slow
def test_backward_is_compared_with_autograd_when_asked(runner, fx):
    ref = fx("square_problem.py", "reference")
    good = validate(ref, fx("square_autograd.py", "good"), runner=runner, backward=True)
    assert good.ok, good.findings
    assert any(r.output.startswith("grad") for r in good.rows)
    wrong = validate(ref, fx("square_autograd.py", "wrong_backward"), runner=runner, backward=True)
    assert FindingKind.backward_mismatch in kinds(wrong)
    # Without backward=True the forward alone is right.
    assert validate(ref, fx("square_autograd.py", "wrong_backward"), runner=runner).ok


def test_the_input_spec_type_list_replaces_the_references_inputs(runner, fx):
    result = validate(
        fx("add_problem.py", "reference"),
        fx("add_good.py", "candidate"),
        runner=runner,
        inputs="f32[333], f32[333]",
        derive_shapes=False,
    )
    assert result.ok
    assert result.rows[0].shape == [333]


@pytest.mark.parametrize(
    ("reference", "candidate", "words"),
    [
        ("missing.py:reference", "add_good.py:candidate", "does not exist"),
        ("add_problem.py:refrence", "add_good.py:candidate", "Did you mean"),
        ("add_problem.py:reference", "syntax_error.py:candidate", "syntax error"),
        ("bad_references.py:raises", "add_good.py:candidate", "the reference itself is broken"),
        ("bad_references.py:returns_number", "add_good.py:candidate", "must return a tensor"),
        ("bad_references.py:not_callable", "add_good.py:candidate", "not a callable"),
        ("no_inputs_problem.py:reference", "add_good.py:candidate", "get_inputs()"),
        ("softmax_good.py", "add_good.py:candidate", "Name the callable"),
    ],
)
def test_bad_input_is_a_usage_error_that_names_the_fix(runner, fx, reference, candidate, words):
    ref_file, _, ref_name = reference.partition(":")
    cand_file, _, cand_name = candidate.partition(":")
    with pytest.raises(UsageError) as info:
        validate(fx(ref_file, ref_name or None), fx(cand_file, cand_name or None), runner=runner)
    assert words in str(info.value)


def test_a_reference_that_fails_at_import_is_named_by_its_line_without_the_judges_traceback(runner, fx):
    with pytest.raises(UsageError) as info:
        validate(fx("raises_at_import.py", "reference"), fx("add_good.py", "candidate"), runner=runner)
    text = str(info.value)
    assert "raises_at_import.py:3" in text and "broken at import" in text
    assert "Traceback" not in text and "mcp_server" not in text, text


def test_a_reference_and_candidate_given_the_other_way_round_get_the_command_that_swaps_them(runner, fx):
    # The file given as the candidate makes the inputs: the reference was likely named second.
    with pytest.raises(UsageError) as info:
        validate(fx("add_good.py", "candidate"), fx("add_problem.py", "reference"), runner=runner)
    assert "the reference comes first" in str(info.value) and "add_problem.py:reference" in str(info.value)
    # KernelBench files the other way round: the solution (ModelNew) given as the reference.
    eval_fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
    problems, solutions = eval_fixtures / "problems", eval_fixtures / "solutions"
    with pytest.raises(UsageError) as info:
        validate(str(solutions / "1_add.py"), str(problems / "1_add.py"), runner=runner)
    assert f"`ptt validate {problems / '1_add.py'} {solutions / '1_add.py'}`" in str(info.value)
    # Twin: neither file makes inputs, so nothing suggests a swap.
    with pytest.raises(UsageError) as info:
        validate(fx("no_inputs_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner)
    assert "get_inputs()" in str(info.value) and "comes first" not in str(info.value)


def test_a_bad_input_spec_names_the_item(runner, fx):
    with pytest.raises(UsageError, match="f33"):
        validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), inputs="f33[4]", runner=runner)


@pytest.mark.slow
@pytest.mark.parametrize("transform", ["zeros", "large", "alternating", "near_overflow", "nan", "inf"])
def test_value_transforms_keep_a_correct_softmax_passing(runner, fx, transform):
    result = validate(
        fx("softmax_problem.py", "reference"),
        fx("softmax_good.py", "candidate"),
        runner=runner,
        transform=transform,
        seeds=1,
    )
    assert result.ok, [f.message for f in result.findings]


@pytest.mark.slow
def test_value_transforms_expose_a_kernel_that_forgets_the_max_shift(runner, fx):
    # Without the shift, exp overflows for large inputs: fine on randn, wrong at 1e6.
    ref, cand = fx("softmax_problem.py", "reference"), fx("softmax_unshifted.py", "candidate")
    assert validate(ref, cand, runner=runner, seeds=1).ok
    assert not validate(ref, cand, runner=runner, seeds=1, transform="large").ok


def test_declared_refusals_on_listed_cases_are_warnings_only_when_allowed(runner, fx):
    ref, cand = fx("add_problem.py", "reference"), fx("add_refuses_odd.py", "candidate")
    strict = validate(ref, cand, runner=runner, derive_shapes=False)
    assert FindingKind.exception in kinds(strict)  # 1000 is not a multiple of 256: refused on a listed case
    lenient = validate(ref, cand, runner=runner, derive_shapes=False, refusals_ok=True)
    assert lenient.ok and FindingKind.unsupported_shape in kinds(lenient, Severity.warning)


def test_results_a_safe_load_refuses_are_a_failure_or_a_usage_error_never_a_traceback(runner, fx, monkeypatch):
    import mcp_server.engine.validate as V

    real_load = torch.load

    def refuse(name):
        def load(path, *args, **kwargs):
            if str(path).endswith(name):
                raise pickle.UnpicklingError("Weights only load failed: Unsupported global: GLOBAL x.Y")
            return real_load(path, *args, **kwargs)

        return load

    monkeypatch.setattr(V.torch, "load", refuse("candidate.pt"))
    result = validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner)
    assert not result.ok
    assert any("could not be read back safely" in f.message for f in result.findings), result.findings
    monkeypatch.setattr(V.torch, "load", refuse("reference.pt"))
    with pytest.raises(UsageError, match="results could not be read back safely"):
        validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner)
    # The twin: the same files read with the real load pass.
    monkeypatch.setattr(V.torch, "load", real_load)
    assert validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner).ok


@pytest.mark.slow
def test_layernorms_gradients_pass_with_the_one_column_case_whose_truth_is_rounding_noise(runner):
    # Over one column x̂ = 0 and the input gradient cancels exactly: float64 gives ~1e-17, float32 ~1e-8. That
    # was "no verdict" (PyTorch's own error is most of the truth's norm); inside atol, the values judge.
    path = Path(__file__).resolve().parents[2] / "reference_kernels" / "layernorm.py"
    result = validate(f"{path}:reference_layernorm", f"{path}:layernorm_stage3", runner=runner, backward=True, seeds=1)
    assert result.ok, result.findings
    assert any(c.case.startswith("one column") and c.status == "passed" for c in result.cases)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("problem", "candidate", "says"),
    [
        ("kb_batchnorm_problem.py", "kb_batchnorm_wrong.py:NoUpdate", "the candidate's leaves it as it was"),
        ("kb_batchnorm_problem.py", "kb_batchnorm_wrong.py:BiasedVariance", "buffer bn.running_var"),
        ("kb_batchnorm_eval_problem.py", "kb_batchnorm_wrong.py:UpdatesInEval", "which the reference's leaves"),
        # Right in training mode; after model.eval() it still normalizes with the batch's statistics.
        ("kb_batchnorm_problem.py", "kb_batchnorm_wrong.py:TrainingOnly", "mode: eval: 10"),
        # Eval mode judged past the problem's own batch too (its large size).
        ("kb_batchnorm_problem.py", "kb_batchnorm_wrong.py:EvalFixedBlock", "mode: eval: 3"),
        # Right after the judge writes the start values, not on the repeat call; hidden from named_buffers().
        ("kb_batchnorm_problem.py", "kb_batchnorm_wrong.py:FirstCallOnly", "running_mean after a second call"),
        ("kb_batchnorm_problem.py", "kb_batchnorm_wrong.py:HiddenBuffers", "the candidate's leaves it as it was"),
        # Taken out of the module's buffers after the call.
        ("kb_batchnorm_problem.py", "kb_batchnorm_wrong.py:LosesBuffers", "no longer has buffer bn.running_mean"),
        ("kb_batchnorm_problem.py", "kb_batchnorm_good.py:ModelNew", None),
        ("kb_batchnorm_eval_problem.py", "kb_batchnorm_wrong.py:InEval", None),
    ],
)
def test_module_buffers_the_forward_updates_are_judged_like_outputs(runner, fx, problem, candidate, says):
    # A training-mode BatchNorm updates its running statistics and batch count: a kernel with the right outputs
    # that never updates them, or updates them wrongly, or updates them where the reference (in eval mode) does not,
    # fails; the kernel that updates them as nn.BatchNorm1d does passes, in either mode. Derived sizes only where the
    # verdict turns on them (the right kernel at every size, an eval path right at the base size only).
    path, name = candidate.split(":")
    sized = says is None or name == "EvalFixedBlock"
    result = validate(fx(problem), fx(path, name), runner=runner, seeds=1, derive_shapes=sized)
    found = [f.message for f in result.findings if f.severity is Severity.error]
    if says is None:
        assert result.ok, result.findings
        assert not [f for f in result.findings if f.kind is FindingKind.buffer_mismatch]
        if "eval" not in problem:
            assert any(r.output == "buffer bn.running_var" and r.ok for r in result.rows)
            assert any(c.case == "mode: eval" and c.status == "passed" for c in result.cases)
    else:
        assert not result.ok and any(says in m for m in found), found


def test_a_module_without_the_buffers_the_reference_updates_is_told_they_were_not_checked_and_fails_in_eval_mode(
    runner, fx
):
    # Its training-mode outputs are right; its running statistics cannot be compared (it keeps none: a warning),
    # and after model.eval() it still normalizes with the batch's statistics, where the reference uses its own.
    result = validate(
        fx("kb_batchnorm_problem.py"), fx("kb_batchnorm_wrong.py", "Untracked"), runner=runner, seeds=1,
        derive_shapes=False,
    )  # fmt: skip
    warned = [f for f in result.findings if f.kind is FindingKind.buffer_mismatch]
    assert warned and all(f.severity is Severity.warning for f in warned)
    assert "bn.running_mean, bn.running_var" in warned[0].message and "was not checked" in warned[0].message
    assert not result.ok
    failed = {c.case for c in result.cases if c.status == "failed"}
    assert "mode: eval" in failed and all(c.endswith("mode: eval") for c in failed), result.findings


@pytest.mark.parametrize(
    ("problem", "candidate", "fails"),
    [
        # Before: a PASS. Its load_state_dict does nothing and it computes with a copy of the weights rebuilt from
        # the seed the global generator showed at construction, moved as validate once moved the reference's.
        ("kb_layernorm_problem.py", "kb_layernorm_private_weights.py:ModelNew", True),
        # Before: a PASS. The same copy, moved by the weights' seed it read from the judge's job file.
        ("kb_layernorm_problem.py", "kb_layernorm_job_file.py:ModelNew", True),
        # Before: a PASS. An eval-mode BatchNorm whose running statistics held a new module's zeros and ones.
        ("kb_batchnorm_eval_problem.py", "kb_batchnorm_wrong.py:AssumesUnitStatistics", True),
        # Before: the judge's internal error (a state_dict key that is not a string) — now the wrong kernel's FAIL.
        ("kb_problem.py", "kb_odd_state.py:IntKeys", True),
        # Before: a usage error (extra state is no tensor to copy) — now its right kernel's PASS.
        ("kb_extra_state_problem.py", "kb_odd_state.py:Good", False),
        # Before: a FAIL of a right kernel. The causal mask, a frozen Parameter, was moved off its ones and zeros,
        # so the reference masked nothing; a frozen Parameter is a constant of the model and is left as it is.
        ("kb_frozen_mask_problem.py", "kb_frozen_mask.py:ModelNew", False),
        ("kb_frozen_mask_problem.py", "kb_frozen_mask.py:Strict", True),
    ],
)
def test_kernelbench_weights_reach_the_candidate_only_through_what_it_is_given(runner, fx, problem, candidate, fails):
    path, name = candidate.split(":")
    result = validate(fx(problem), fx(path, name), runner=runner, seeds=1)
    if fails:
        assert not result.ok and FindingKind.mismatch in kinds(result), result.findings
    else:
        assert result.ok and result.weights == "copied from the reference", result.findings


def test_a_kernelbench_model_is_built_from_a_seed_that_is_no_input_seed_and_leaves_the_generator_as_it_was():
    import torch

    from mcp_server.engine.jobs import validate_jobs
    from mcp_server.engine.validate import _model_seeds

    seen = []

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            seen.append(torch.initial_seed())
            self.bn = torch.nn.BatchNorm1d(4)

    first = 123456789
    seeds = _model_seeds(first)
    assert seeds == _model_seeds(first) and seeds != _model_seeds(first + 1)  # a replay rebuilds the same model
    assert not {seeds["build_seed"], seeds["weights_seed"]} & set(range(first - 20, first + 20))
    torch.manual_seed(99)
    built = validate_jobs._build(Probe, [], seeds)
    assert seen == [seeds["build_seed"]] and torch.initial_seed() == 99
    moved = validate_jobs._instantiate(Probe, [], seeds, "cpu")
    # The running statistics are moved off a new module's zeros and ones (the variance stays positive).
    assert not torch.equal(moved.bn.running_mean, built.bn.running_mean)
    assert (moved.bn.running_var > 0).all() and not torch.equal(moved.bn.running_var, built.bn.running_var)


def test_every_buffer_starts_each_case_where_the_references_did_whatever_calls_the_candidate_made_before(runner, fx):
    # Without derived sizes the eval-mode case follows a base case the candidate ran twice (the determinism repeat
    # updates a BatchNorm's running statistics again): the right kernel still passes, its statistics set to the
    # reference's before the case.
    result = validate(
        fx("kb_batchnorm_problem.py"), fx("kb_batchnorm_good.py"), runner=runner, seeds=2, derive_shapes=False
    )
    assert result.ok, result.findings
    assert [c.case for c in result.cases] == ["base", "base", "mode: eval"]


def test_a_reference_random_in_training_mode_is_named_in_the_failure_and_its_eval_mode_is_judged(runner, fx):
    # Dropout(0.5) in training mode: no kernel reproduces torch's mask, and the failure says so (before, it read
    # as the kernel's own error); after model.eval() the dropout is the identity, and the right kernel passes there.
    result = validate(fx("kb_dropout_problem.py"), fx("kb_linear_widths.py", "ModelNew"), runner=runner, seeds=1)
    assert not result.ok
    said = [f.message for f in result.findings if f.kind is FindingKind.mismatch]
    assert sum("The reference is random here: dropout (Dropout p=0.5) in training mode" in m for m in said) == 1
    evaluated = [c for c in result.cases if c.case.endswith("mode: eval")]
    assert evaluated and all(c.status == "passed" for c in evaluated), result.cases
