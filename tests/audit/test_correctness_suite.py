"""The audit's correctness suite (tiers strict / loose / fail), its performance section, and the report.

Fixtures in tests/fixtures/audit/suite/: three row sums of fp16 data — one accumulating in fp32 (passes at
the default tolerance), one accumulating in fp16 (passes only at 10× the default atol/rtol), one that drops
a column (fails at any tolerance).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mcp_server.engine.audit import SUITE, AuditReport, audit, dynamic, render_markdown
from mcp_server.engine.audit.dynamic import LOOSE_FACTOR, bench_section
from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import (
    NATIVE_PRECISION,
    BenchResult,
    BenchRow,
    ComparisonRow,
    Finding,
    FindingKind,
    Location,
    ProviderTiming,
    Severity,
    ValidateResult,
)

SUITE_FX = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "suite"
CATEGORY_TITLES = ("Correctness", "Performance", "Memory access", "Numerical stability", "Best practices")


def _spec(tier: str) -> str:
    return f"{SUITE_FX / f'rowsum_{tier}.py'}:candidate"


@pytest.fixture(scope="module")
def strict(runner) -> AuditReport:
    """Every section, the whole suite: the kernel that is as accurate as PyTorch."""
    return audit(_spec("strict"), runner=runner)


@pytest.mark.slow
def test_a_kernel_as_accurate_as_pytorch_passes_every_run_at_the_default_tolerance(strict):
    runs = {r.name: r for r in strict.correctness.runs}
    assert set(SUITE) | {"size variations"} == set(runs)
    assert {r.tier for r in runs.values()} == {"strict"}, [(r.name, r.tier, r.reason) for r in runs.values()]
    assert runs["base"].cases_judged == 3 and runs["size variations"].cases_judged >= 4
    assert strict.correctness.determinism == "bitwise identical"
    assert strict.correctness.tolerances["float16"] == (1e-5, 1e-3)
    assert strict.ok and strict.correctness.status == "passed"


@pytest.mark.slow
def test_a_kernel_accumulating_in_fp16_passes_only_at_the_loose_tolerance(runner):
    report = audit(_spec("loose"), sections=["correctness"], suite=["base"], runner=runner)
    tiers = {r.name: r.tier for r in report.correctness.runs}
    assert "loose" in tiers.values() and "fail" not in tiers.values(), tiers
    (loose,) = [f for f in report.findings if f.rule == "loose-tolerance-only"]
    assert loose.severity is Severity.warning and f"{LOOSE_FACTOR:g}×" in loose.message and loose.where.line
    assert report.ok and report.correctness.status == "warnings"
    numerics = {c.category: c for c in report.categories}["numerics"]
    assert numerics.status == "warn" and numerics.warnings == 1


@pytest.mark.slow
def test_a_wrong_kernel_fails_even_at_the_loose_tolerance_and_is_not_timed(runner):
    report = audit(_spec("fail"), sections=["correctness", "performance"], suite=["base"], runner=runner)
    assert {r.tier for r in report.correctness.runs} == {"fail"}
    run = report.correctness.runs[0]
    assert run.cases_passed == 0 and run.cases_passed_loose == 0 and run.kinds == ["mismatch"]
    errors = [f for f in report.findings if f.severity is Severity.error]
    assert errors and {f.rule for f in errors} == {"mismatch"} and all(f.fix for f in errors)
    assert not report.ok and {c.category: c.status for c in report.categories}["correctness"] == "fail"
    assert report.performance.status == "skipped" and "failed the correctness suite" in report.performance.reason


def test_without_a_gpu_performance_says_so_and_is_never_counted_as_passed(strict):
    if strict.device != "cpu-interpreter":
        pytest.skip("a GPU is present: the performance section ran")
    assert strict.performance.status == "skipped" and "needs a CUDA GPU" in strict.performance.reason
    performance = {c.category: c for c in strict.categories}["performance"]
    assert performance.status != "pass" and "needs a CUDA GPU" in (performance.note or "")
    assert not strict.complete
    assert "from the static, compiled, correctness sections alone" in strict.summary
    assert strict.summary.endswith("not run: performance (needs a CUDA GPU: interpreter timings mean nothing)")


def test_the_verdict_line_names_every_section_asked_for_that_did_not_run(runner):
    # A file whose launcher has no example inputs and no reference: only the static rules can run. Its PASS is
    # theirs alone, and the line says which sections did not run and why.
    lone = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "undefined_name_good.py"
    report = audit(str(lone), runner=runner)
    assert report.ok and report.summary.startswith("PASS: 0 error(s), 0 warning(s) from the static section alone;")
    skipped = report.summary.split("not run: ", 1)[1]
    assert "compiled (no example inputs to run the launcher with)" in skipped
    assert "correctness (no reference)" in skipped
    if report.device == "cpu-interpreter":
        assert "performance (needs a CUDA GPU: interpreter timings mean nothing)" in skipped
    # Asked for the static rules alone, the audit ran all it was asked: nothing is said missing.
    only = audit(str(lone), sections=["static"], runner=runner)
    assert only.summary == "PASS: 0 error(s), 0 warning(s)"


def test_the_report_covers_five_categories_findings_and_the_commands_to_reproduce(strict):
    assert [c.title for c in strict.categories] == list(CATEGORY_TITLES)
    text = render_markdown(strict)
    for title in CATEGORY_TITLES:
        assert f"| {title} |" in text
    for heading in ("## Summary", "## Correctness suite", "## Compiled kernels", "## Performance", "## Findings"):
        assert heading in text
    assert "## Recommendations" in text and "## Reproduce" in text
    reproduce = text.split("## Reproduce", 1)[1]
    assert "ptt audit" in reproduce and "ptt validate" in reproduce and "ptt compile" in reproduce
    assert any(line.startswith("ptt compile") and "_rowsum_kernel" in line for line in strict.reproduce)
    assert AuditReport.model_validate_json(strict.model_dump_json()) == strict


def _seed_bench() -> BenchResult:
    """A bench of one size that loses to eager in every round and ties torch.compile, with bench's flags."""

    def timing(provider: str, ms: float, spread: float = 0.02) -> ProviderTiming:
        return ProviderTiming(
            provider=provider, median_ms=ms, p20_ms=ms, p80_ms=ms, min_ms=ms, spread=spread, samples=100
        )

    rows = [
        BenchRow(
            case="4096×1024",
            timings=[timing("candidate", 0.05, 0.2), timing("eager", 0.04), timing("compile", 0.03)],
            bytes=1 << 25,
            flops=0,
            model="SPEC",
            pct_of_roofline=31.0,
            bound="memory",
            speedup_vs_eager=0.8,
            speedup_vs_compile=0.6,
            standing={"eager": "slower", "compile": "tie"},
        )
    ]
    flags = [
        Finding(kind=FindingKind.slower_than_eager, severity=Severity.warning, message="4096×1024: 0.80× eager"),
        Finding(kind=FindingKind.low_efficiency, severity=Severity.warning, message="4096×1024: 31 % of the roofline"),
        Finding(kind=FindingKind.high_spread, severity=Severity.warning, message="4096×1024: spread 20 %"),
    ]
    result = BenchResult(
        ok=True, device="NVIDIA H200", findings=flags, candidate="k.py:f", reference="k.py:ref", mode="events",
        l2_flush=True, input_sets=4, reps=100, rows=rows,
    )  # fmt: skip
    return result


def test_bench_results_become_the_seed_table_and_its_red_flags():
    result = _seed_bench()
    section, findings = bench_section(result, f"{SUITE_FX / 'rowsum_strict.py'}:candidate")
    (row,) = section.rows
    assert (row.triton_ms, row.eager_ms, row.compile_ms) == (0.05, 0.04, 0.03)
    assert row.speedup_vs_eager == 0.8 and row.pct_of_peak == 31.0 and row.spread == 0.2
    assert row.standing_vs_compile == "tie"
    assert {f.rule for f in findings} == {"slower_than_eager", "low_efficiency", "high_spread"}
    assert all(f.category == "performance" and f.section == "performance" and f.fix for f in findings)
    assert section.status == "warnings"


def test_the_performance_table_marks_a_tie_with_torch_compile(strict):
    section, _ = bench_section(_seed_bench(), f"{SUITE_FX / 'rowsum_strict.py'}:candidate")
    text = render_markdown(strict.model_copy(update={"performance": section}))
    row = next(line for line in text.splitlines() if line.startswith("| 4096×1024 |"))
    assert "| 0.80× |" in row and "| 0.60× tie |" in row


def test_misuse_is_a_usage_error_that_names_the_choices(runner):
    with pytest.raises(UsageError, match="choose from static"):
        audit(_spec("strict"), sections=["static", "speed"], runner=runner)
    with pytest.raises(UsageError, match="does not exist"):
        audit("no/such/file.py", runner=runner)
    with pytest.raises(UsageError, match="choose from base"):
        audit(_spec("strict"), sections=["correctness"], suite=["base", "huge"], runner=runner)
    with pytest.raises(UsageError, match=r"Pass the launcher as path/to/file\.py:name\.$"):
        audit(f"{SUITE_FX / 'rowsum_strict.py'}:nothere", runner=runner)


def test_a_file_without_a_triton_kernel_is_a_usage_error_not_a_pass(runner, tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n\n\ndef double(x):\n    return x * 2\n")
    with pytest.raises(UsageError) as caught:
        audit(str(plain), runner=runner)
    said = str(caught.value)
    assert said.startswith(f"{plain} defines no @triton.jit kernel and does not import Triton, so there is no")
    assert "Pass the file that defines the kernels: path/to/kernels.py" in said


@pytest.mark.gpu
def test_on_a_gpu_the_performance_section_times_the_kernel_against_both_baselines(runner):
    root = Path(__file__).resolve().parents[2]
    report = audit(str(root / "reference_kernels" / "softmax.py"), sections=["performance"], runner=runner)
    assert report.performance.status in ("passed", "warnings"), report.performance.reason
    row = report.performance.rows[0]
    assert row.triton_ms and row.eager_ms and row.compile_ms and row.pct_of_peak is not None


@pytest.mark.slow
def test_allow_torch_ops_lets_a_candidate_keep_its_gemm_in_torch(runner):
    spec = f"{SUITE_FX / 'gemm_torch_mm.py'}:candidate"
    refused = audit(spec, sections=["correctness"], suite=["base"], runner=runner)
    assert not refused.ok and "torch_compute" in {f.rule for f in refused.findings if f.severity is Severity.error}
    allowed = audit(spec, sections=["correctness"], suite=["base"], allow_torch_ops=["mm"], runner=runner)
    assert allowed.correctness.allow_torch_ops == ["mm"]
    assert {r.tier for r in allowed.correctness.runs} == {"strict"}, [
        (r.name, r.reason) for r in allowed.correctness.runs
    ]
    assert allowed.ok and not [
        f for f in allowed.findings if f.rule == "torch_compute" and f.severity is Severity.error
    ]
    assert any("--allow-torch-op mm" in line for line in allowed.reproduce)


def _result(*findings: Finding) -> ValidateResult:
    return ValidateResult(
        ok=False, device="cpu-interpreter", reference="r.py:f", candidate="c.py:g", mode="callable", seeds=[1],
        cases=[], rows=[], findings=list(findings),
    )  # fmt: skip


def test_no_verdict_on_a_stress_input_is_the_references_limit_not_the_candidates_fault():
    # At near-underflow inputs a reference in its own dtype can lose its answer (products past its range): the
    # judge gives no verdict. In a stress run that is a warning and the run is not judged; on the base inputs,
    # or beside a real failure, it stays what it was.
    where = Location(file="c.py", line=1)
    no_verdict = Finding(kind=FindingKind.reference_precision, severity=Severity.error, message="out: no verdict.")
    wrong = Finding(kind=FindingKind.mismatch, severity=Severity.error, message="out: 3 of 8 elements outside")
    assert dynamic._tolerated_tier("near_underflow", _result(no_verdict)) == "not run"
    assert dynamic._tolerated_tier("base", _result(no_verdict)) is None
    assert dynamic._tolerated_tier("near_underflow", _result(no_verdict, wrong)) is None
    found = dynamic._suite_findings("near_underflow", _result(no_verdict, wrong), None, where)
    assert {(f.kind, f.severity) for f in found} == {
        (FindingKind.reference_precision, Severity.warning),
        (FindingKind.mismatch, Severity.error),
    }
    base = dynamic._suite_findings("base", _result(no_verdict), None, where)
    assert [(f.kind, f.severity) for f in base] == [(FindingKind.reference_precision, Severity.error)]


def _precision_warning(cause: str) -> list:
    """The suite's findings for a near_overflow run whose reference could not be judged against float64."""
    from mcp_server.engine.jobs.validate_jobs import precision_fields
    from mcp_server.engine.validate import _precision_cause

    result = _result(
        Finding(
            kind=FindingKind.reference_precision,
            severity=Severity.warning,
            message=f"The reference could not run in float64 ({cause}). " + "The outputs were compared… " * 30,
        )
    ).model_copy(
        update={
            "ok": True,
            "reference_precision": NATIVE_PRECISION.format(cause=cause, how="the reference on nudged inputs"),
            "reference_precision_cause": _precision_cause(precision_fields(cause, "the reference on nudged inputs")),
            "rows": [
                ComparisonRow(case="c", seed=1, output="out", shape=[8], dtype="float32", ok=True, numel=8),
            ],
        }
    )
    return dynamic._suite_findings("near_overflow", result, None, Location(file="c.py", line=1))


def test_a_reference_whose_own_dtype_overflows_is_said_to_have_run_in_float64_with_a_fix_of_its_own():
    # RMSNorm at a quarter of float32's max: the sum of squares overflows in float32 (the output is all zeros),
    # float64 holds it. The float64 run ran; saying it could not run, cut off mid-sentence, misled.
    from mcp_server.engine.jobs.validate_jobs import _disagreement

    cause = _disagreement([torch.zeros(8)], [torch.ones(8, dtype=torch.float64)])
    [found] = _precision_warning(cause)
    assert found.message.startswith("[near_overflow] The reference ran in float64, but its run in float32 is far")
    assert "on output 0 (relative norm error 1)" in found.message
    assert found.message.endswith("an output that matches the float64 result passes too.")
    assert "could not run" not in found.message and "overflows" in found.message
    assert found.fix.startswith("Nothing, if inputs this close to float32's limits never occur")


def test_a_reference_that_could_not_run_in_float64_says_why_whole_with_the_fix():
    cause = "on cpu it raised RuntimeError: expected scalar type Float but found Double"
    [found] = _precision_warning(cause)
    assert found.message == (
        f"[near_overflow] The reference could not run in float64 ({cause}). The outputs were judged against its "
        "run in float32, PyTorch's own error estimated from the reference on nudged inputs."
    )
    assert "registered attributes" in found.fix
    assert dynamic.FIXES[FindingKind.reference_precision] != "See the message."


def test_a_finding_message_reaches_the_report_whole():
    long = "x" * 2000 + " the advice at the end"
    wrong = Finding(kind=FindingKind.mismatch, severity=Severity.error, message=long)
    found = dynamic.convert(wrong, section="correctness", run="base", default_where=Location(file="c.py"))
    assert found.message == f"[base] {long}"


def test_nan_positions_that_differ_at_injected_nans_warn_and_elsewhere_fail():
    # A causal kernel that never reads masked keys keeps a row finite that PyTorch's 0·NaN turns to NaN.
    where = Location(file="c.py", line=1)
    nan = Finding(kind=FindingKind.nan_mismatch, severity=Severity.error, message="out: 8 elements have NaN/Inf")
    wrong = Finding(kind=FindingKind.mismatch, severity=Severity.error, message="out: 3 of 8 elements outside")
    for run in ("nan", "inf"):
        assert dynamic._tolerated_tier(run, _result(nan)) == "special"
        found = dynamic._suite_findings(run, _result(nan), None, where)
        assert [(f.kind, f.severity) for f in found] == [(FindingKind.nan_mismatch, Severity.warning)]
        assert dynamic._tolerated_tier(run, _result(nan, wrong)) is None
    for run in ("base", "near_overflow"):
        assert dynamic._tolerated_tier(run, _result(nan)) is None
        found = dynamic._suite_findings(run, _result(nan), None, where)
        assert [(f.kind, f.severity) for f in found] == [(FindingKind.nan_mismatch, Severity.error)]


def test_a_reason_is_cut_to_its_first_clause_and_a_short_head_keeps_its_colon():
    from mcp_server.engine.audit.render import _first_clause

    failed = "not timed: the candidate failed the correctness suite"
    assert _first_clause(failed) == failed
    assert _first_clause("no example inputs to run the launcher with: k.py defines neither") == (
        "no example inputs to run the launcher with"
    )
    assert _first_clause("no reference (none found in the file; pass one); pass --reference path.py:fn") == (
        "no reference"
    )
    assert len(_first_clause("x" * 300)) == 100
