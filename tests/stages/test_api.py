"""start / submit / status / show / best over a real ledger, with recorded tool results instead of a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from stages_fakes import AUTOTUNED_KERNEL, INTERP, REFERENCE, FakeTools, bench, validation

from mcp_server.engine.audit import analyze_source
from mcp_server.engine.errors import UsageError
from mcp_server.engine.stages import LEDGER_ENV, best, show, start, status, submit
from mcp_server.engine.stages.evidence import _supported
from mcp_server.engine.stages.gates import STAGE1

SIZES = {"1M": 1.0, "4M": 4.0}


def timed(factor: float, compile_factor: float = 1.0):
    """A bench where the candidate is ``factor``× eager and ``factor/compile_factor``× torch.compile."""
    return bench(
        {k: v / factor for k, v in SIZES.items()},
        eager_ms=SIZES,
        compile_ms={k: v / compile_factor for k, v in SIZES.items()},
    )


def test_start_is_idempotent_for_the_same_reference(db):
    first = start("axpy", REFERENCE, notes="vector op", ledger=db)
    again = start("axpy", REFERENCE, ledger=db)
    assert first == again and again.stage_reached == 0 and again.attempts == 0
    assert again.next_gate.stage == 1 and again.next_gate.state == "not attempted"
    assert "stage 1" in again.next_step


def test_start_refuses_the_same_name_for_another_reference(db, write):
    start("axpy", REFERENCE, ledger=db)
    with pytest.raises(UsageError, match="already exists"):
        start("axpy", write("other_ref.py"), ledger=db)


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "x" * 101, "semi;colon"])
def test_unusable_conversion_names_are_refused(db, name):
    with pytest.raises(UsageError, match="not usable"):
        start(name, REFERENCE, ledger=db)


def test_submit_to_an_unknown_conversion_names_the_known_ones_and_the_fix(db, write):
    start("axpy", REFERENCE, ledger=db)
    with pytest.raises(UsageError) as err:
        submit("softmax", write("k.py"), 1, ledger=db, evidence=FakeTools().fns())
    assert "axpy" in str(err.value) and "ptt stages start softmax" in str(err.value)


def test_submit_refuses_a_stage_outside_one_to_three(db, write):
    start("axpy", REFERENCE, ledger=db)
    with pytest.raises(UsageError, match="stage must be 1, 2 or 3"):
        submit("axpy", write("k.py"), 4, ledger=db, evidence=FakeTools().fns())


def test_a_stage1_submission_records_the_source_its_hash_and_the_validation(db, write):
    start("axpy", REFERENCE, ledger=db)
    spec = write("stage1.py")
    result = submit("axpy", spec, 1, ledger=db, evidence=FakeTools().fns())
    assert result.ok and result.attempt == 1 and result.stage_reached == 1 and result.verdict.state == "passed"
    detail = show("axpy", ledger=db, full=True)
    attempt = detail.attempts[0]
    assert attempt.candidate == spec and attempt.source_chars == len(Path(spec[:-10]).read_text())
    assert attempt.evidence.validation.ok and attempt.validation.startswith("PASS")
    assert best("axpy", ledger=db).source == Path(spec[:-10]).read_text()


def test_a_failing_attempt_is_recorded_with_the_reason_and_does_not_advance(db, write):
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(validations={"wrong.py": validation(ok=False)})
    result = submit("axpy", write("wrong.py"), 1, ledger=db, evidence=tools.fns())
    assert not result.ok and result.stage_reached == 0 and result.findings[0].kind.value == "mismatch"
    row = status(ledger=db).conversions[0]
    assert row.attempts == 1 and row.next_gate.state == "failed" and "mismatch" in row.next_gate.reasons[0]
    assert row.next_step.startswith("Stage 1 failed on attempt #1")


def test_stage2_times_the_best_stage1_attempt_beside_the_candidate_in_one_bench(db, write):
    start("axpy", REFERENCE, ledger=db)
    stage1 = write("stage1.py")
    checked, own = validation(), validation()
    own.torch_share = 0.3
    tools = FakeTools(
        validations={"stage1.py": own, "stage2.py": checked},
        benches={"stage1.py": timed(1.0), "stage2.py": timed(2.0, compile_factor=1.5)},
    )
    submit("axpy", stage1, 1, ledger=db, evidence=tools.fns(), allow_torch_ops=["aten.mm"])
    assert ("bench", stage1) not in tools.calls  # stage 1 needs no timing
    result = submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    # One bench, not two: the stage-1 attempt rides in the candidate's, held to its own validation and allowed ops.
    assert ("bench", stage1) not in tools.calls and [k for k, _ in tools.calls].count("bench") == 1
    assert tools.bench_validations["stage2.py"] is checked
    beside = tools.extras["stage2.py"][STAGE1]
    assert beside.spec == stage1 and beside.validation.torch_share == 0.3 and beside.allow_torch_ops == ("aten.mm",)
    assert result.ok, result.verdict.reasons
    assert [s.speedup_vs_stage1 for s in result.speeds] == [2.0, 2.0]
    gain = next(c for c in result.verdict.checks if c.name == "gain_over_stage1")
    assert "timed in the same rounds" in gain.detail
    row = status(ledger=db).conversions[0]
    assert row.stage_reached == 2 and row.best_speedup_vs_eager == pytest.approx(2.0)
    assert row.best_speedup_vs_compile == pytest.approx(2.0 / 1.5) and row.best_pct_of_roofline == 50.0
    attempts = show("axpy", ledger=db, full=True).attempts
    assert attempts[1].baseline_attempt == 1 and attempts[1].evidence.baseline_bench is None
    # The stage-1 attempt's own figures come from its timings beside attempt #2.
    assert attempts[0].timing == "timed as a stage-1 baseline" and attempts[0].speedup_vs_eager == pytest.approx(1.0)


def test_a_stage1_attempt_that_fails_beside_the_candidate_leaves_the_gain_unmet_with_its_error(db, write):
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(
        benches={"stage1.py": RuntimeError("importing stage1.py raised ImportError"), "stage2.py": timed(2.0)}
    )
    submit("axpy", write("stage1.py"), 1, ledger=db, evidence=tools.fns())
    result = submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    assert not result.ok
    (reason,) = result.verdict.reasons
    assert "stage-1 attempt #1 has no comparison beside this one on 2 of 2 size(s)" in reason
    assert "1M (stage 1's timing failed: importing stage1.py raised ImportError)" in reason
    # The candidate's own timings stand.
    assert [s.speedup_vs_eager for s in result.speeds] == [2.0, 2.0]


def test_a_bench_that_fails_as_a_whole_with_the_stage1_attempt_beside_times_the_candidate_alone(db, write):
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(benches={"stage1.py": timed(1.0), "stage2.py": timed(2.0)})
    tools.fail_with_extras = "bench failed: illegal_memory_access"
    submit("axpy", write("stage1.py"), 1, ledger=db, evidence=tools.fns())
    result = submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    assert [k for k, _ in tools.calls].count("bench") == 2 and tools.extras["stage2.py"] == {}  # the retry alone
    assert [s.speedup_vs_eager for s in result.speeds] == [2.0, 2.0] and not result.ok
    (reason,) = result.verdict.reasons
    assert "stage-1 attempt #1 has no timing" in reason and "illegal_memory_access" in reason
    assert "timed this one alone" in reason


def test_the_baseline_is_timed_from_the_ledgers_copy_when_the_stage1_file_changed(db, write):
    start("axpy", REFERENCE, ledger=db)
    stage1 = write("stage1.py")
    tools = FakeTools(benches={"stage1.py": timed(1.0), "stage2.py": timed(2.0)})
    submit("axpy", stage1, 1, ledger=db, evidence=tools.fns())
    original = Path(stage1[:-10]).read_text()
    Path(stage1[:-10]).write_text("# edited after stage 1\n")
    submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    copy = Path(tools.extras["stage2.py"][STAGE1].spec[:-10])
    assert copy.is_relative_to(db.parent / "sources") and copy.read_text() == original
    rollback = best("axpy", 1, ledger=db)
    assert rollback.source == original and not rollback.file_unchanged


def test_stage2_without_a_gpu_is_recorded_as_pending_and_stage_reached_stays_1(db, write):
    start("axpy", REFERENCE, ledger=db)
    interp = FakeTools(validations={n: validation(device=INTERP) for n in ("stage1.py", "stage2.py")})
    submit("axpy", write("stage1.py"), 1, ledger=db, evidence=interp.fns())
    result = submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=interp.fns())
    assert not result.ok and result.verdict.state == "pending" and result.stage_reached == 1
    assert not any(kind == "bench" for kind, _ in interp.calls)  # nothing is timed under the interpreter
    assert "not measurable here" in result.next_step and "pending" in result.next_step


def test_stage2_with_a_bench_that_reports_no_gpu_is_pending(db, write):
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools()  # its bench raises EnvironmentUnavailable
    submit("axpy", write("stage1.py"), 1, ledger=db, evidence=tools.fns())
    result = submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    assert result.verdict.state == "pending" and "bench needs a CUDA GPU" in result.verdict.reasons[0]


def test_stage3_with_no_audit_installed_is_pending_not_passed(db, write):
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(benches={"stage1.py": timed(1.0), "stage3.py": timed(3.0, compile_factor=2.0)})
    submit("axpy", write("stage1.py"), 1, ledger=db, evidence=tools.fns())
    result = submit("axpy", write("stage3.py", AUTOTUNED_KERNEL), 3, ledger=db, evidence=tools.fns())
    assert result.verdict.state == "pending" and result.stage_reached == 1
    assert [r.split(":")[0] for r in result.verdict.reasons] == ["audit"]


def test_stage3_with_a_broken_audit_records_the_evidence_and_stays_pending(db, write):
    def broken():
        raise RuntimeError("audit crashed")

    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(benches={"stage1.py": timed(1.0), "stage3.py": timed(3.0)}, audit=broken)
    submit("axpy", write("stage1.py"), 1, ledger=db, evidence=tools.fns())
    result = submit("axpy", write("stage3.py", AUTOTUNED_KERNEL), 3, ledger=db, evidence=tools.fns())
    assert result.verdict.state == "pending" and "RuntimeError: audit crashed" in result.verdict.reasons[0]


def test_stage3_passes_on_full_evidence_and_a_real_static_audit_report(db, write):
    clean = analyze_source(AUTOTUNED_KERNEL, "stage3.py")
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(
        benches={"stage1.py": timed(1.0), "stage3.py": timed(3.0, compile_factor=2.0)}, audit=lambda: clean
    )
    submit("axpy", write("stage1.py"), 1, ledger=db, evidence=tools.fns())
    result = submit("axpy", write("stage3.py", AUTOTUNED_KERNEL), 3, ledger=db, evidence=tools.fns())
    assert result.ok, result.verdict.reasons
    row = status("axpy", ledger=db).conversions[0]
    assert row.stage_reached == 3 and row.next_gate.state == "passed" and "All three stages passed" in row.next_step


def test_best_picks_the_fastest_passing_attempt_of_a_stage_and_refuses_stages_not_passed(db, write):
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(
        benches={"s1.py": timed(1.0), "fast.py": timed(3.0), "slow.py": timed(1.5), "fails.py": timed(9.0)},
        validations={"fails.py": validation(ok=False)},
    )
    submit("axpy", write("s1.py"), 1, ledger=db, evidence=tools.fns())
    for name in ("fast.py", "slow.py", "fails.py"):
        submit("axpy", write(name, AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    chosen = best("axpy", ledger=db)
    assert chosen.stage == 2 and chosen.attempt == 2 and chosen.candidate.endswith("fast.py:candidate")
    assert "fastest passing stage-2 attempt" in chosen.chosen_by and chosen.file_unchanged
    with pytest.raises(UsageError, match="no passing stage-3 attempt; stages passed: 1, 2"):
        best("axpy", 3, ledger=db)


def test_best_without_any_passing_attempt_says_there_is_nothing_to_roll_back_to(db):
    start("axpy", REFERENCE, ledger=db)
    with pytest.raises(UsageError, match="nothing to roll back to"):
        best("axpy", ledger=db)


def test_status_of_a_missing_ledger_creates_nothing(tmp_path):
    where = tmp_path / "nowhere" / "ledger.db"
    result = status(ledger=where)
    assert not result.exists and result.conversions == [] and not where.parent.exists()
    with pytest.raises(UsageError, match="no stage ledger"):
        show("axpy", ledger=where)


def test_the_ledger_defaults_to_dot_ptt_in_the_working_folder_and_follows_the_env_var(tmp_path, monkeypatch):
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    start("axpy", REFERENCE)
    assert (tmp_path / ".ptt" / "ledger.db").is_file()
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "elsewhere.db"))
    assert status().conversions == []
    start("other", REFERENCE)
    assert (tmp_path / "elsewhere.db").is_file() and status().conversions[0].name == "other"


def test_status_draws_speed_per_attempt_when_asked(db, write, tmp_path):
    start("axpy", REFERENCE, ledger=db)
    tools = FakeTools(benches={"s1.py": timed(1.0), "s2.py": timed(2.0)})
    submit("axpy", write("s1.py"), 1, ledger=db, evidence=tools.fns())
    submit("axpy", write("s2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    result = status(ledger=db, plot=tmp_path / "plots" / "speed.png")
    assert result.plot and Path(result.plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_file_edited_while_it_is_checked_is_not_recorded(db, write):
    start("axpy", REFERENCE, ledger=db)
    spec = write("racing.py")
    tools = FakeTools()

    def validate_then_edit(**kwargs):
        Path(spec[:-10]).write_text("# saved by the agent mid-check\n")
        return tools.validate(**kwargs)

    fns = tools.fns()
    fns = type(fns)(validate=validate_then_edit, bench=fns.bench, audit=fns.audit)
    with pytest.raises(UsageError, match="changed while it was being checked"):
        submit("axpy", spec, 1, ledger=db, evidence=fns)
    assert status(ledger=db).conversions[0].attempts == 0


def test_the_real_bench_is_handed_the_validations_error_scale_torch_share_and_allowed_ops(monkeypatch):
    import mcp_server.engine.bench as bench_module
    from mcp_server.engine.models import ComparisonRow
    from mcp_server.engine.stages.evidence import real_evidence

    seen: dict = {}

    def fake_bench(candidate, reference=None, **kwargs):
        seen.clear()
        seen.update(kwargs)
        return "timed"

    monkeypatch.setattr(bench_module, "bench", fake_bench)
    fns = real_evidence(runner=None, allow_torch_ops=("aten.mm",))
    checked = validation()
    checked.torch_share = 0.25
    row = {"case": "c", "seed": 1, "output": "out0", "shape": [4], "dtype": "float16", "ok": True, "numel": 4}
    checked.rows = [ComparisonRow(**row, rel_norm_err=3e-3, torch_rel_norm_err=1e-3)]
    assert fns.bench(reference="r.py:f", candidate="c.py:f", inputs=None, validation=checked) == "timed"
    assert seen["validated_torch_share"] == 0.25 and seen["check_scale"] == 3e-3
    assert seen["allow_torch_ops"] == ("aten.mm",) and seen["validate_first"] is False
    # Without a validation at hand bench applies its defaults.
    fns.bench(reference="r.py:f", candidate="c.py:f", inputs=None, validation=None)
    assert "validated_torch_share" not in seen and "check_scale" not in seen and "extra_candidates" not in seen
    # The stage-1 attempt timed beside it goes to bench with its own validation and allowed ops.
    fns.bench(
        reference="r.py:f",
        candidate="c.py:f",
        inputs=None,
        extra_candidates={"stage1": bench_module.ExtraCandidate("s.py:f", checked, ("aten.mm",))},
    )
    assert seen["extra_candidates"] == {"stage1": bench_module.ExtraCandidate("s.py:f", checked, ("aten.mm",))}


def test_the_real_tools_get_only_the_options_their_signatures_accept():
    def bench_like(candidate, reference=None, *, inputs=None, runner=None):
        return candidate

    def takes_anything(candidate, **kwargs):
        return kwargs

    options = {"inputs": "f32[8]", "runner": None, "validate_first": False}
    assert _supported(bench_like, options) == {"inputs": "f32[8]", "runner": None}
    assert _supported(takes_anything, options) == options


def _compile_rounds(result, rounds: list[float]):
    """``result`` with every size's paired round ratios against torch.compile, and the standing bench derives."""
    from mcp_server.engine.bench import standing

    for row in result.rows:
        row.round_ratios["compile"] = list(rounds)
        row.standing["compile"] = standing(rounds)
    return result


def test_submitting_the_same_kernel_again_pools_its_timing_rounds_instead_of_drawing_a_new_verdict(db, write):
    clean = analyze_source(AUTOTUNED_KERNEL, "stage3.py")
    lost = _compile_rounds(timed(3.0, compile_factor=3.0 / 0.98), [0.975, 0.98, 0.985, 0.97, 0.99])
    lucky = _compile_rounds(timed(3.0, compile_factor=3.0 / 1.01), [0.99, 1.02, 1.01, 1.0, 1.03])
    tools = FakeTools(benches={"s1.py": timed(1.0), "stage3.py": lost}, audit=lambda: clean)
    start("axpy", REFERENCE, ledger=db)
    submit("axpy", write("s1.py"), 1, ledger=db, evidence=tools.fns())
    first = submit("axpy", write("stage3.py", AUTOTUNED_KERNEL), 3, ledger=db, evidence=tools.fns())
    assert not first.ok and "0.980×" in first.verdict.reasons[0]
    # The same file again draws a lucky bench (1.01× alone): judged with the first bench's rounds, 0.99×.
    tools.benches["stage3.py"] = lucky
    again = submit("axpy", write("stage3.py", AUTOTUNED_KERNEL), 3, ledger=db, evidence=tools.fns())
    check = next(c for c in again.verdict.checks if c.name == "vs_torch_compile")
    assert check.state == "unmet" and "0.990× (median of 10 paired rounds, 0.970–1.030×)" in check.detail
    assert "attempt(s) #2" in check.detail
    # Under another name with a comment added it is the same code: a bench level with torch.compile alone (1.000×)
    # joins the other two, 0.99× over all 15 rounds.
    level = _compile_rounds(timed(3.0, compile_factor=3.0), [0.98, 0.99, 1.005, 0.985, 0.99])
    tools.benches["renamed.py"] = level
    renamed = submit("axpy", write("renamed.py", AUTOTUNED_KERNEL + "\n# tuned\n"), 3, ledger=db, evidence=tools.fns())
    check = next(c for c in renamed.verdict.checks if c.name == "vs_torch_compile")
    assert check.state == "unmet" and "attempt(s) #2, #3" in check.detail
    assert "0.990× (median of 15 paired rounds, 0.970–1.030×)" in check.detail
    # A changed kernel is new code: judged on its own bench, it passes.
    changed = AUTOTUNED_KERNEL.replace('{"BLOCK": 128}', '{"BLOCK": 256}')
    tools.benches["changed.py"] = lucky
    new = submit("axpy", write("changed.py", changed), 3, ledger=db, evidence=tools.fns())
    check = next(c for c in new.verdict.checks if c.name == "vs_torch_compile")
    assert new.ok and check.state == "met" and "attempt(s)" not in check.detail and "a tie on 2 size(s)" in check.detail


def test_submitting_the_same_stage2_kernel_again_pools_its_rounds_against_the_same_stage1_attempt(db, write):
    tools = FakeTools(benches={"s1.py": timed(1.0), "stage2.py": timed(0.98)})
    tools.extra_rounds["stage2.py"] = [0.975, 0.98, 0.985, 0.97, 0.99]
    start("axpy", REFERENCE, ledger=db)
    submit("axpy", write("s1.py"), 1, ledger=db, evidence=tools.fns())
    first = submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    assert not first.ok and "0.980×" in first.verdict.reasons[0]
    # The same file again draws a lucky bench: 1.01× stage 1 alone would pass. Judged with the first bench's rounds
    # against the same stage-1 attempt, each size's median of 10 paired rounds is 0.99×: unmet.
    tools.benches["stage2.py"] = timed(1.01)
    tools.extra_rounds["stage2.py"] = [0.99, 1.02, 1.01, 1.0, 1.03]
    again = submit("axpy", write("stage2.py", AUTOTUNED_KERNEL), 2, ledger=db, evidence=tools.fns())
    gain = next(c for c in again.verdict.checks if c.name == "gain_over_stage1")
    assert gain.state == "unmet" and "0.990×" in gain.detail, gain.detail
    assert "attempt(s) #2" in gain.detail and "beside stage-1 attempt #1" in gain.detail
    # A changed kernel is new code: its bench is judged alone (rounds steady enough for its gain to stand out).
    changed = AUTOTUNED_KERNEL.replace('"BLOCK": 128', '"BLOCK": 256')
    tools.benches["changed.py"] = timed(1.01)
    tools.extra_rounds["changed.py"] = [0.995, 1.02, 1.02, 1.02, 1.03]
    alone = submit("axpy", write("changed.py", changed), 2, ledger=db, evidence=tools.fns())
    gain = next(c for c in alone.verdict.checks if c.name == "gain_over_stage1")
    assert gain.state == "met" and "pooled" not in gain.detail and "a tie on 2 size(s)" in gain.detail, gain.detail
