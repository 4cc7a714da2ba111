"""The gates as pure functions: for each condition, evidence that must fail it and evidence that must pass it."""

from __future__ import annotations

import math

from stages_fakes import AUTOTUNED_KERNEL, INTERP, PLAIN_KERNEL, bench, validation

from mcp_server.engine.audit import analyze_source
from mcp_server.engine.models import BenchResult
from mcp_server.engine.stages import (
    AuditSummary,
    GateEvidence,
    autotune_info,
    evaluate,
    summarize_audit,
)
from mcp_server.engine.stages.gates import STAGE1, check_autotune, student_t_quantile

SIZES = {"1M": 1.0, "4M": 4.0, "16M": 16.0}


def faster(factor: float, **kw) -> BenchResult:
    return bench({k: v / factor for k, v in SIZES.items()}, eager_ms=SIZES, compile_ms=SIZES, **kw)


def stage2_evidence(**overrides) -> GateEvidence:
    fields = dict(
        validation=validation(),
        autotune=autotune_info(AUTOTUNED_KERNEL),
        bench=faster(1.5),
        baseline_attempt=1,
        baseline_bench=faster(1.0),
        audit=AuditSummary(),
    )
    fields.update(overrides)
    return GateEvidence(**fields)


def check(verdict, name):
    return next(c for c in verdict.checks if c.name == name)


# --- stage 1 ---------------------------------------------------------------------------------------------------


def test_stage1_passes_on_a_passing_validation():
    verdict = evaluate(1, GateEvidence(validation=validation(ok=True)))
    assert verdict.passed and verdict.state == "passed" and verdict.reasons == []
    assert [c.name for c in verdict.checks] == ["validation"]


def test_stage1_fails_on_a_failing_validation_and_names_the_finding_kind():
    verdict = evaluate(1, GateEvidence(validation=validation(ok=False)))
    assert verdict.state == "failed"
    assert verdict.reasons and verdict.reasons[0].startswith("validation:") and "mismatch" in verdict.reasons[0]


def test_stage1_fails_without_any_validation_recorded():
    assert evaluate(1, GateEvidence()).state == "failed"


def test_stage1_passes_under_the_interpreter_because_correctness_holds_there():
    assert evaluate(1, GateEvidence(validation=validation(device=INTERP))).passed


# --- stage 2 ---------------------------------------------------------------------------------------------------


def test_stage2_passes_with_validation_autotune_and_a_gain_over_stage1():
    verdict = evaluate(2, stage2_evidence())
    assert verdict.passed, verdict.reasons
    assert "1.500×" in check(verdict, "gain_over_stage1").detail


def test_stage2_refuses_a_kernel_without_autotune_and_without_a_reason():
    verdict = evaluate(2, stage2_evidence(autotune=autotune_info(PLAIN_KERNEL)))
    assert verdict.state == "failed"
    assert check(verdict, "autotune").state == "unmet"
    assert any(r.startswith("autotune:") and "_k" in r and "--no-autotune-reason" in r for r in verdict.reasons)


def test_stage2_accepts_a_documented_reason_instead_of_autotune():
    ev = stage2_evidence(autotune=autotune_info(PLAIN_KERNEL), no_autotune_reason="fixed shapes, tuned by hand")
    verdict = evaluate(2, ev)
    assert verdict.passed and "fixed shapes, tuned by hand" in check(verdict, "autotune").detail


def test_stage2_treats_a_blank_reason_as_no_reason():
    ev = stage2_evidence(autotune=autotune_info(PLAIN_KERNEL), no_autotune_reason="   ")
    assert check(evaluate(2, ev), "autotune").state == "unmet"


def test_stage2_refuses_a_kernel_no_faster_than_stage1():
    verdict = evaluate(2, stage2_evidence(bench=faster(1.0)))
    assert verdict.state == "failed"
    assert "1.000×" in check(verdict, "gain_over_stage1").detail and "needs > 1.000×" in verdict.reasons[0]


def test_stage2_refuses_a_gain_on_average_that_loses_more_than_5_percent_on_one_size():
    candidate = bench({"1M": 0.5, "4M": 2.0, "16M": 16.0 / 0.9}, eager_ms=SIZES, compile_ms=SIZES)
    verdict = evaluate(2, stage2_evidence(bench=candidate))
    detail = check(verdict, "gain_over_stage1").detail
    assert verdict.state == "failed" and "16M 0.900×" in detail and "more than 5 % slower" in detail


def test_stage2_accepts_a_size_slower_by_less_than_5_percent_when_the_mean_gains():
    candidate = bench({"1M": 0.5, "4M": 2.0, "16M": 16.0 / 0.97}, eager_ms=SIZES, compile_ms=SIZES)
    assert evaluate(2, stage2_evidence(bench=candidate)).passed


def test_stage2_needs_a_passing_stage1_attempt_to_compare_with():
    verdict = evaluate(2, stage2_evidence(baseline_attempt=None, baseline_bench=None))
    assert verdict.state == "failed" and "pass stage 1 first" in check(verdict, "gain_over_stage1").detail


def test_stage2_fails_when_the_stage1_baseline_could_not_be_timed():
    ev = stage2_evidence(baseline_bench=None, baseline_unavailable="importing stage1.py raised ImportError")
    detail = check(evaluate(2, ev), "gain_over_stage1").detail
    assert "attempt #1 has no timing" in detail and "ImportError" in detail


def test_stage2_fails_when_no_size_was_timed_for_both():
    ev = stage2_evidence(baseline_bench=bench({"other": 1.0}))
    assert "no benchmark size has a timing for both" in check(evaluate(2, ev), "gain_over_stage1").detail


def test_stage2_without_a_gpu_is_not_measurable_here_and_never_passes():
    ev = stage2_evidence(validation=validation(device=INTERP), bench=None, baseline_bench=None)
    verdict = evaluate(2, ev)
    assert verdict.state == "pending" and not verdict.passed
    assert check(verdict, "validation").state == "met" and check(verdict, "autotune").state == "met"
    assert "not measurable here" in check(verdict, "gain_over_stage1").detail


def test_stage2_is_pending_when_the_bench_reports_the_environment_unavailable():
    ev = stage2_evidence(bench=None, baseline_bench=None, bench_unavailable="bench needs a CUDA GPU")
    verdict = evaluate(2, ev)
    assert verdict.state == "pending" and "not measurable here: bench needs a CUDA GPU" in verdict.reasons[0]


def test_timings_taken_under_the_interpreter_never_count():
    ev = stage2_evidence(bench=faster(3.0, device=INTERP))
    assert evaluate(2, ev).state == "pending"


def test_a_bench_that_refuses_the_candidate_fails_the_gain():
    ev = stage2_evidence(bench=None, baseline_bench=None, bench_error="inputs do not fit on the GPU")
    assert "bench refused the candidate" in check(evaluate(2, ev), "gain_over_stage1").detail


def test_an_unmet_check_outweighs_a_pending_one():
    ev = stage2_evidence(validation=validation(device=INTERP), autotune=autotune_info(PLAIN_KERNEL))
    assert evaluate(2, ev).state == "failed"


def test_a_failing_validation_leaves_the_timings_unmeasured_not_passed():
    verdict = evaluate(2, stage2_evidence(validation=validation(ok=False)))
    assert verdict.state == "failed" and check(verdict, "gain_over_stage1").state == "pending"


# --- stage 3 ---------------------------------------------------------------------------------------------------


def test_stage3_passes_at_or_above_torch_compile_everywhere_with_a_clean_audit():
    verdict = evaluate(3, stage2_evidence(bench=faster(1.5)))
    assert verdict.passed, verdict.reasons
    assert [c.name for c in verdict.checks] == [
        "validation",
        "autotune",
        "gain_over_stage1",
        "vs_torch_compile",
        "audit",
    ]


def test_stage3_refuses_a_kernel_below_torch_compile_on_one_size():
    candidate = bench({"1M": 0.5, "4M": 2.0, "16M": 8.0}, eager_ms=SIZES, compile_ms={"1M": 1.0, "4M": 1.0, "16M": 4.0})
    verdict = evaluate(3, stage2_evidence(bench=candidate))
    detail = check(verdict, "vs_torch_compile").detail
    assert verdict.state == "failed" and "4M 0.500×" in detail and "16M 0.500×" in detail and "1M" not in detail


def test_stage3_counts_exactly_torch_compile_speed_as_enough():
    candidate = bench({"1M": 0.5}, eager_ms={"1M": 1.0}, compile_ms={"1M": 0.5})
    ev = stage2_evidence(bench=candidate, baseline_bench=bench({"1M": 1.0}))
    assert check(evaluate(3, ev), "vs_torch_compile").state == "met"


def _with_rounds(result: BenchResult, ratios: dict[str, list[float]]) -> BenchResult:
    """``result`` with per-size paired round ratios against torch.compile, and the standing bench derives."""
    from mcp_server.engine.bench import standing

    for row in result.rows:
        if row.case in ratios:
            row.round_ratios["compile"] = ratios[row.case]
            row.standing["compile"] = standing(ratios[row.case])
    return result


def test_stage3_names_a_tie_in_the_timing_rounds_met_or_not():
    # Just under torch.compile at 4M, with rounds on both sides of 1.0: unmet, and said to be a tie.
    close = bench({"1M": 0.5, "4M": 1.01}, eager_ms=SIZES, compile_ms={"1M": 1.0, "4M": 1.0})
    close = _with_rounds(close, {"4M": [0.97, 1.02, 0.99, 0.98, 1.01], "1M": [2.0] * 5})
    unmet = check(evaluate(3, stage2_evidence(bench=close)), "vs_torch_compile")
    assert unmet.state == "unmet" and "4M 0.990× (a tie: 0.970–1.020× over 5 rounds)" in unmet.detail
    # Just over it with the same kind of rounds: met, and the detail warns that a rerun may fall short there.
    over = _with_rounds(bench({"4M": 0.99}, eager_ms=SIZES, compile_ms={"4M": 1.0}), {"4M": [0.99, 1.02, 1.01]})
    met = check(evaluate(3, stage2_evidence(bench=over)), "vs_torch_compile")
    assert met.state == "met" and "a tie on 1 size(s)" in met.detail and "0.990–1.020× over 3 rounds" in met.detail
    # A win in every round, or rounds not paired at all, say nothing of ties.
    clear = _with_rounds(faster(1.5), {"1M": [1.4, 1.5, 1.6]})
    for result in (clear, faster(1.5)):
        detail = check(evaluate(3, stage2_evidence(bench=result)), "vs_torch_compile").detail
        assert "tie" not in detail


def test_stage3_fails_a_size_without_a_torch_compile_timing():
    candidate = bench({"1M": 0.5, "4M": 2.0, "16M": 8.0}, eager_ms=SIZES, compile_ms={"1M": 1.0, "4M": 4.0})
    detail = check(evaluate(3, stage2_evidence(bench=candidate)), "vs_torch_compile").detail
    assert "no torch.compile comparison for 16M" in detail


def test_stage3_refuses_an_audit_with_an_error_finding():
    audit = AuditSummary(errors=["[unmasked-access] at k.py:9 tl.load has no mask"], findings=1)
    verdict = evaluate(3, stage2_evidence(audit=audit))
    assert verdict.state == "failed" and "unmasked-access" in check(verdict, "audit").detail


def test_stage3_accepts_an_audit_with_only_warnings():
    assert evaluate(3, stage2_evidence(audit=AuditSummary(warnings=2, findings=2))).passed


def test_stage3_without_an_audit_is_pending_never_passed():
    verdict = evaluate(3, stage2_evidence(audit=None, audit_unavailable="the audit tool is not installed"))
    assert verdict.state == "pending" and "it never counts as passed" in check(verdict, "audit").detail


def test_stage3_without_a_gpu_lists_every_performance_part_as_pending():
    ev = stage2_evidence(validation=validation(device=INTERP), bench=None, baseline_bench=None)
    verdict = evaluate(3, ev)
    pending = {c.name for c in verdict.checks if c.state == "pending"}
    assert verdict.state == "pending" and pending == {"gain_over_stage1", "vs_torch_compile"}


# --- the static autotune check and the audit reader -------------------------------------------------------------


def test_autotune_check_requires_every_launched_kernel_to_be_autotuned():
    source = AUTOTUNED_KERNEL + (
        "\n\n@triton.jit\ndef _other(p, BLOCK: tl.constexpr):\n    pass\n\n\n"
        "def more(x):\n    _other[(x.numel() // 256,)](x, BLOCK=256)\n"
    )
    info = autotune_info(source)
    assert info.launched == ["_k", "_other"] and info.autotuned == ["_k"] and info.missing == ["_other"]
    assert not info.ok


def test_autotune_check_ignores_helpers_that_kernels_call():
    source = AUTOTUNED_KERNEL.replace("    pass", "    _helper(x_ptr)") + "\n\n@triton.jit\ndef _helper(p):\n    pass\n"
    info = autotune_info(source)
    assert info.ok and "_helper" in info.kernels and "_helper" not in info.missing


def test_autotune_check_understands_plain_imports_of_jit_and_autotune():
    source = (
        "from triton import autotune, jit, Config\n\n"
        "@autotune(configs=[Config({})], key=[])\n@jit\ndef k(p):\n    pass\n"
    )
    info = autotune_info(source)
    assert info.ok and info.launched == [] and info.note


def test_autotune_check_reports_a_file_without_kernels():
    info = autotune_info("from other import candidate\n")
    assert not info.ok and info.kernels == []


def test_heuristics_alone_is_not_autotuning():
    source = "import triton\n\n@triton.heuristics({'B': lambda a: 64})\n@triton.jit\ndef k(p, B):\n    pass\n"
    assert autotune_info(source).missing == ["k"]


def test_audit_reader_counts_error_findings_of_a_real_static_report():
    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n    tl.store(x_ptr + offs, tl.load(x_ptr + offs))\n"
    )
    report = analyze_source(source, "k.py")
    summary = summarize_audit(report)
    assert summary.findings == len(report.findings)
    assert summary.errors and len(summary.errors) == len(report.errors) and summary.report["file"] == "k.py"
    assert any("unmasked-access" in e for e in summary.errors)


def test_audit_reader_accepts_plain_dicts():
    summary = summarize_audit(
        {"findings": [{"severity": "error", "kind": "mismatch", "message": "bad"}, {"severity": "warning"}]}
    )
    assert summary.errors == ["[mismatch] bad"] and summary.warnings == 1


# --- the stage-2 rule: autotuning where there is something to tune ------------------------------------------

TUNED_MAIN = """
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})], key=["n"])
@triton.jit
def _partial(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.jit
def _finish(part_ptr, out_ptr, n_parts, BLOCK: tl.constexpr):
    pass


@triton.jit
def _small(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass
"""


def _info(launcher: str):
    return autotune_info(TUNED_MAIN + launcher)


def test_a_single_program_finishing_kernel_beside_an_autotuned_one_needs_no_autotune():
    info = _info(
        "\ndef candidate(x):\n    parts = torch.empty(64)\n    out = torch.empty(1)\n"
        "    _partial[(64,)](x, parts, x.numel())\n    _finish[(1,)](parts, out, 64, BLOCK=64)\n    return out\n"
    )
    assert info.ok and info.missing == [] and "single-program" in info.exempt["_finish"]


def test_a_finishing_kernel_with_many_programs_still_needs_autotune():
    info = _info(
        "\ndef candidate(x):\n    parts = torch.empty(64)\n    out = torch.empty(8)\n"
        "    _partial[(64,)](x, parts, x.numel())\n    _finish[(8,)](parts, out, 64, BLOCK=64)\n    return out\n"
    )
    assert not info.ok and info.missing == ["_finish"]


def test_a_single_program_kernel_alone_is_not_exempt():
    info = _info(
        "\ndef candidate(x):\n    out = torch.empty(1)\n    _finish[(1,)](x, out, 64, BLOCK=64)\n    return out\n"
    )
    assert not info.ok and info.missing == ["_finish"]


def test_a_fallback_in_the_other_branch_of_an_autotuned_launch_needs_no_autotune():
    launcher = (
        "\ndef candidate(x):\n    out = torch.empty_like(x)\n    if x.numel() > 4096:\n"
        "        _partial[(64,)](x, out, x.numel())\n    else:\n"
        "        _small[(x.shape[0],)](x, out, x.numel(), BLOCK=4096)\n    return out\n"
    )
    info = _info(launcher)
    assert info.ok and "fallback" in info.exempt["_small"]
    # The same kernel launched unconditionally is no fallback.
    both = (
        "\ndef candidate(x):\n    out = torch.empty_like(x)\n    if x.numel() > 4096:\n"
        "        _partial[(64,)](x, out, x.numel())\n"
        "    _small[(x.shape[0],)](x, out, x.numel(), BLOCK=4096)\n    return out\n"
    )
    info = _info(both)
    assert info.missing == ["_small"]


def test_a_kernel_whose_tile_is_set_by_the_problem_size_has_nothing_to_tune():
    info = _info(
        "\ndef candidate(x):\n    out = torch.empty_like(x)\n    n = x.shape[-1]\n"
        "    block = triton.next_power_of_2(n)\n    _small[(x.shape[0],)](x, out, n, BLOCK=block)\n    return out\n"
    )
    assert info.ok and info.autotuned == [] and "problem's sizes" in info.exempt["_small"]
    check = check_autotune(info, None)
    assert check.state == "met" and "_small" in check.detail


def test_a_hand_picked_tile_or_warp_count_is_something_to_tune():
    picked = _info(
        "\ndef candidate(x):\n    out = torch.empty_like(x)\n    _small[(8,)](x, out, 8, BLOCK=128)\n    return out\n"
    )
    assert not picked.ok and picked.missing == ["_small"]
    warps = _info(
        "\ndef candidate(x):\n    out = torch.empty_like(x)\n    n = x.shape[-1]\n"
        "    _small[(8,)](x, out, n, BLOCK=triton.next_power_of_2(n), num_warps=8)\n    return out\n"
    )
    assert not warps.ok and warps.missing == ["_small"]


def test_the_same_code_is_the_same_tree_and_function_whatever_its_comments_and_layout():
    from mcp_server.engine.stages.gates import code_key

    base = code_key(AUTOTUNED_KERNEL, "candidate")
    assert code_key("# a header\n" + AUTOTUNED_KERNEL.replace("\n\n\n", "\n\n") + "\n# tuned\n", "candidate") == base
    assert code_key(AUTOTUNED_KERNEL, "other") != base
    assert code_key(AUTOTUNED_KERNEL.replace('{"BLOCK": 64}', '{"BLOCK": 32}'), "candidate") != base
    # A file that does not parse is keyed by its text.
    assert code_key("def (", "candidate") == code_key("def (", "candidate") != code_key("def  (", "candidate")


# --- the stage-1 attempt timed beside the candidate ------------------------------------------------------------


def _beside(result: BenchResult, stage1_ms: dict[str, float | None], ratios: dict[str, float],
            rounds: dict[str, list[float]] | None = None) -> BenchResult:  # fmt: skip
    """``result`` with the stage-1 attempt timed in it: its median per size (None: its timing failed), bench's ratio
    (its time over the candidate's, side-stream work counted) and paired rounds."""
    from mcp_server.engine.bench import standing
    from mcp_server.engine.models import ProviderTiming

    for row in result.rows:
        ms = stage1_ms[row.case]
        error = "timed_check: a timed call's result is not the reference's" if ms is None else None
        row.timings.append(ProviderTiming(provider=STAGE1, median_ms=ms or 0.0, p20_ms=ms or 0.0, p80_ms=ms or 0.0,
                                          min_ms=ms or 0.0, spread=0.0, samples=50, error=error))  # fmt: skip
        if ms is not None and row.case in ratios:  # a size left out: bench withheld the comparison
            row.speedup_vs_extras[STAGE1] = ratios[row.case]
        if rounds and row.case in rounds:
            row.round_ratios[STAGE1] = rounds[row.case]
            row.standing[STAGE1] = standing(rounds[row.case])
    return result


def test_the_gain_over_a_stage1_attempt_timed_beside_is_bench_s_own_ratio_side_stream_work_counted():
    # By the events' medians the candidate is 2× stage 1 (0.5 ms against 1.0); it leaves 0.75 ms a call on a side
    # stream, which bench's ratio counts: 0.8×. The gate reads bench's ratio, so it fails.
    side = _beside(faster(2.0), {k: v for k, v in SIZES.items()}, {k: 0.8 for k in SIZES})
    gain = check(evaluate(2, stage2_evidence(bench=side, baseline_bench=None)), "gain_over_stage1")
    assert gain.state == "unmet" and "0.800×" in gain.detail
    # The twin with no side-stream work: bench's ratio is the medians', 2×, met, and said to be from the same rounds.
    plain = _beside(faster(2.0), {k: v for k, v in SIZES.items()}, {k: 2.0 for k in SIZES})
    gain = check(evaluate(2, stage2_evidence(bench=plain, baseline_bench=None)), "gain_over_stage1")
    assert gain.state == "met" and "2.000×" in gain.detail and "timed in the same rounds" in gain.detail


def test_a_gain_whose_paired_rounds_disagree_is_named_a_tie():
    steady = [1.19, 1.2, 1.21, 1.2, 1.2]
    rounds = {"1M": steady, "4M": [0.99, 1.04, 1.03, 1.02, 1.05], "16M": steady}
    result = _beside(faster(1.0), {k: v for k, v in SIZES.items()}, {"1M": 1.2, "4M": 1.03, "16M": 1.2}, rounds)
    gain = check(evaluate(2, stage2_evidence(bench=result, baseline_bench=None)), "gain_over_stage1")
    assert (
        gain.state == "met" and "a tie on 1 size(s)" in gain.detail and "4M (0.990–1.050× over 5 rounds)" in gain.detail
    )
    clear = _beside(faster(1.0), {k: v for k, v in SIZES.items()}, {k: 1.2 for k in SIZES}, {"4M": [1.1] * 5})
    assert "tie" not in check(evaluate(2, stage2_evidence(bench=clear, baseline_bench=None)), "gain_over_stage1").detail


def test_a_gain_inside_the_rounds_noise_is_not_met_and_a_steady_one_is():
    # Must fail (met before): stage 1's own kernel again; every size's median reads 1.01x, so the geometric mean is
    # above 1.0, but the paired rounds scatter around 1.0 on both sides (a coin flip a re-roll would win).
    noisy = {
        "1M": [0.97, 1.04, 1.01, 0.99, 1.03],
        "4M": [0.98, 1.03, 1.02, 0.99, 1.01],
        "16M": [1.02, 0.97, 1.01, 1.00, 1.03],
    }
    same = _beside(faster(1.0), dict(SIZES), {k: 1.01 for k in SIZES}, noisy)
    gain = check(evaluate(2, stage2_evidence(bench=same, baseline_bench=None)), "gain_over_stage1")
    assert gain.state == "unmet" and "does not stand out of the timing rounds' noise" in gain.detail, gain.detail
    assert "15 paired rounds average 1.006×" in gain.detail
    # Twin: a 3 % gain every round; and sizes that differ from each other (1.0x, 1.0x, 1.2x) with steady rounds.
    steady = {k: [1.02, 1.03, 1.04, 1.03, 1.05] for k in SIZES}
    met = _beside(faster(1.0), dict(SIZES), {k: 1.03 for k in SIZES}, steady)
    assert check(evaluate(2, stage2_evidence(bench=met, baseline_bench=None)), "gain_over_stage1").state == "met"
    mixed = {"1M": [0.99, 1.01, 1.0, 1.0, 1.0], "4M": [1.0, 0.995, 1.005, 1.0, 1.0], "16M": [1.19, 1.2, 1.21, 1.2, 1.2]}
    one = _beside(faster(1.0), dict(SIZES), {"1M": 1.0, "4M": 1.0, "16M": 1.2}, mixed)
    assert check(evaluate(2, stage2_evidence(bench=one, baseline_bench=None)), "gain_over_stage1").state == "met"


def test_the_gains_noise_margin_grows_when_few_rounds_estimate_the_error():
    # Must fail (met under a flat 2 standard errors): one size's five rounds put the mean log ratio 2.5 standard
    # errors above 0, but an error estimated from five rounds has Student's t tails: it needs 2.87.
    few = {"4M": [1.0, 1.005, 1.02, 1.025, 1.04]}
    result = _beside(faster(1.0), dict(SIZES), {k: 1.02 for k in SIZES}, few)
    gain = check(evaluate(2, stage2_evidence(bench=result, baseline_bench=None)), "gain_over_stage1")
    assert gain.state == "unmet" and "needs 2.87 standard errors" in gain.detail, gain.detail
    assert "4.0 degrees of freedom" in gain.detail
    # Twin: fifteen rounds 2.4 standard errors above 0; with 14 degrees of freedom that stands out (2.20 needed).
    many = {"4M": [0.97, 0.985, 0.995, 1.0, 1.0, 1.005, 1.01, 1.015, 1.02, 1.02, 1.03, 1.03, 1.04, 1.05, 1.06]}
    result = _beside(faster(1.0), dict(SIZES), {k: 1.02 for k in SIZES}, many)
    assert check(evaluate(2, stage2_evidence(bench=result, baseline_bench=None)), "gain_over_stage1").state == "met"


def test_student_t_quantiles_match_the_tables():
    for dof, want in ((1, 12.706), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert abs(student_t_quantile(0.975, dof) - want) < 1e-3, dof
    assert abs(student_t_quantile(0.975, math.inf) - 1.960) < 1e-3
    assert student_t_quantile(0.975, 4.5) < student_t_quantile(0.975, 4)


def test_a_stage1_attempt_whose_timings_failed_beside_the_candidate_leaves_the_gain_unmet_with_the_error():
    failed = _beside(faster(2.0), {k: None for k in SIZES}, {})
    gain = check(evaluate(2, stage2_evidence(bench=failed, baseline_bench=None)), "gain_over_stage1")
    assert gain.state == "unmet"
    assert "stage-1 attempt #1 has no comparison beside this one on 3 of 3 size(s)" in gain.detail
    assert "1M (stage 1's timing failed: timed_check: a timed call's result" in gain.detail


def test_the_gain_pools_rounds_only_of_benches_beside_the_same_stage1_attempt():
    def attempt(rounds: list[float]) -> BenchResult:
        return _beside(
            faster(1.0), {k: v for k, v in SIZES.items()}, {k: 1.0 for k in SIZES}, {k: rounds for k in SIZES}
        )

    lost = attempt([0.97, 0.975, 0.98, 0.985, 0.99])
    lucky = attempt([0.99, 1.0, 1.01, 1.02, 1.03])
    lucky.rows = [r.model_copy(update={"speedup_vs_extras": {STAGE1: 1.01}}) for r in lucky.rows]
    # The earlier bench timed the same stage-1 attempt (#1): pooled, 0.99×, unmet.
    same = stage2_evidence(bench=lucky, baseline_bench=None, same_code_benches={2: lost}, same_code_stage1={2: 1})
    gain = check(evaluate(2, same), "gain_over_stage1")
    assert gain.state == "unmet" and "0.990×" in gain.detail and "attempt(s) #2" in gain.detail
    # The twin: it timed another stage-1 attempt (#3), so its rounds say nothing about this one; judged alone, met.
    other = stage2_evidence(bench=lucky, baseline_bench=None, same_code_benches={2: lost}, same_code_stage1={2: 3})
    gain = check(evaluate(2, other), "gain_over_stage1")
    assert gain.state == "met" and "pooled" not in gain.detail


def test_a_size_without_a_stage1_comparison_leaves_the_gain_unmet_rather_than_judged_on_the_others():
    # 3× stage 1 on two sizes; on 16M the candidate's timing failed its check (it cached results there), and on 4M
    # stage 1's timing was withheld (the GPU stayed busy after it: a thread the candidate left running). Judged on
    # the sizes left, the gain would be 3×: it must be unmet, naming both.
    result = _beside(faster(3.0), {k: v for k, v in SIZES.items()}, {"1M": 3.0})
    failed = result.rows[2].timings[0]
    result.rows[2].timings[0] = failed.model_copy(update={"error": "timed_check: a timed call's result differs"})
    gain = check(evaluate(2, stage2_evidence(bench=result, baseline_bench=None)), "gain_over_stage1")
    assert gain.state == "unmet" and "on 2 of 3 size(s)" in gain.detail
    assert "4M (stage 1's timing withheld: the GPU stayed busy after its end event" in gain.detail
    assert "16M (this attempt's timing failed: timed_check: a timed call's result differs)" in gain.detail
    # The twin with every size compared: met.
    whole = _beside(faster(3.0), {k: v for k, v in SIZES.items()}, {k: 3.0 for k in SIZES})
    assert check(evaluate(2, stage2_evidence(bench=whole, baseline_bench=None)), "gain_over_stage1").state == "met"
