"""bench's extra candidates: implementations timed beside the candidate in the same rounds (the stage ledger's
stage-1 attempt), their ratios to it, the view of one as if it were the candidate, and a broken one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_bench import DRIFT, PEAKS, raw_row, timing

from mcp_server.engine import bench as B
from mcp_server.engine.jobs import bench_job as B_JOB
from mcp_server.engine.models import BenchResult

FX = Path(__file__).resolve().parent.parent / "fixtures"


def _with_stage1(row: dict, ms: float, outside: float = 0.0, rounds: list[float] | None = None) -> dict:
    row["timings"].append(timing("stage1", ms, outside=outside, rounds=rounds))
    return row


def test_an_extra_candidate_gets_its_ratio_and_paired_rounds_under_its_label():
    raw = _with_stage1(raw_row(cand=1.0, rounds=DRIFT), 1.5, rounds=[t * 1.5 for t in DRIFT])
    row = B._row(raw, PEAKS, extras=["stage1"])
    assert row.speedup_vs_extras == {"stage1": pytest.approx(1.5)}
    assert row.round_ratios["stage1"] == pytest.approx([1.5] * 5) and row.standing["stage1"] == "faster"
    assert "stage1" not in row.speedup_vs_baselines  # an extra candidate is no baseline to beat
    # Not named as an extra, the same timing is ignored.
    assert B._row(raw, PEAKS).speedup_vs_extras == {}


def test_work_the_candidate_leaves_on_another_stream_counts_in_its_ratio_to_an_extra():
    # The candidate's events read 1.0 ms but it leaves 0.5 ms on a side stream: against a stage-1 attempt at 1.2 ms it
    # is slower (0.8×), not 1.2× faster.
    side = B._row(_with_stage1(raw_row(cand=1.0, outside=0.5, rounds=[1.0] * 5), 1.2, rounds=[1.2] * 5), PEAKS,
                  extras=["stage1"])  # fmt: skip
    assert side.speedup_vs_extras["stage1"] == pytest.approx(0.8) and side.standing["stage1"] == "slower"


def test_the_view_of_an_extra_candidate_reads_like_its_own_bench():
    raw = _with_stage1(raw_row(cand=1.0, eager=2.0, compiled=1.5, rounds=DRIFT), 1.25)
    row = B._row(raw, PEAKS, extras=["stage1"])
    bench = BenchResult(ok=True, device="d", candidate="s2.py:f", reference="r.py:f", mode="events", l2_flush=True,
                        input_sets=2, reps=10, rows=[row])  # fmt: skip
    view = B.provider_view(bench, "stage1")
    assert view is not None and view.ok and view.candidate == "stage1 of s2.py:f"
    (seen,) = view.rows
    assert [t.provider for t in seen.timings] == ["candidate", "eager", "compile"]
    assert seen.timings[0].median_ms == 1.25
    assert seen.speedup_vs_eager == pytest.approx(1.6) and seen.speedup_vs_compile == pytest.approx(1.2)
    assert B.provider_view(bench, "nobody") is None
    # A failed extra: its rows carry the error, no ratios, and the view is not ok.
    row.timings[-1] = row.timings[-1].model_copy(update={"error": "timed_check: wrong"})
    broken = B.provider_view(bench, "stage1")
    assert broken is not None and not broken.ok and broken.rows[0].speedup_vs_eager is None


def test_an_extra_candidate_that_cannot_be_loaded_becomes_a_provider_that_raises_what_loading_raised(tmp_path):
    bad = tmp_path / "stage1.py"
    bad.write_text("raise RuntimeError('stage-1 file is broken')\n")

    ctx = SimpleNamespace(user_files={str(bad)})
    fn = B_JOB._extra_provider({"path": str(bad), "name": "candidate"}, ctx, False, [], {})
    with pytest.raises(Exception, match="stage-1 file is broken"):
        fn(torch.zeros(1))
    # The twin: a loadable one is the function itself.
    good = tmp_path / "ok.py"
    good.write_text("def candidate(x):\n    return x + 1\n")
    ctx.user_files = {str(good)}
    assert B_JOB._extra_provider({"path": str(good), "name": "candidate"}, ctx, False, [], {})(torch.zeros(1)) == 1


def _fake_gpu(monkeypatch, raw_rows: list[dict]) -> dict:
    """bench's parent over a child that returns ``raw_rows``: no GPU, no lock; returns the params the child got."""
    seen: dict = {}

    class Outcome:
        usage_error = None
        failure = None

        def __init__(self):
            self.result = {"rows": raw_rows}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Runner:
        def run(self, name, params, **kw):
            seen.update(params)
            return Outcome()

    device = SimpleNamespace(interpreter=False, device="GPU", job_env=dict)

    class Lock:
        waited_s = 0.0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(B, "probe", lambda runner: device)
    monkeypatch.setattr(B, "device_peaks", lambda device, runner: PEAKS)
    monkeypatch.setattr(B, "gpu_lock", lambda *a, **k: Lock())
    seen["runner"] = Runner()
    return seen


def test_extra_candidates_of_their_own_rules_reach_the_child_with_them_and_plain_ones_do_not(monkeypatch, tmp_path):
    from mcp_server.engine.models import ComparisonRow, ValidateResult

    seen = _fake_gpu(monkeypatch, [])
    for name in ("cand.py", "s1.py", "plain.py"):
        (tmp_path / name).write_text("def f(x):\n    return x\n")
    checked = ValidateResult(ok=True, device="GPU", findings=[], reference="r", candidate="c", mode="callable",
                             seeds=[1], cases=[], rows=[], summary="PASS", torch_share=0.4)  # fmt: skip
    checked.rows = [ComparisonRow(case="c", seed=1, output="out0", shape=[4], dtype="float16", ok=True, numel=4,
                                  rel_norm_err=2e-3, torch_rel_norm_err=1e-3)]  # fmt: skip
    B.bench(
        f"{tmp_path / 'cand.py'}:f",
        validate_first=False,
        runner=seen["runner"],
        extra_candidates={
            "stage1": B.ExtraCandidate(f"{tmp_path / 's1.py'}:f", checked, ("aten.mm",)),
            "plain": f"{tmp_path / 'plain.py'}:f",
        },
        cwd=tmp_path,
    )
    assert seen["checked"] == ["stage1", "plain"]
    assert seen["extra_checks"] == {
        "stage1": {"check_scale": 2e-3, "validated_torch_share": 0.4, "allow_torch_ops": ["aten.mm"]}
    }


@pytest.mark.gpu
def test_a_kernelbench_extra_candidate_is_built_with_the_problems_weights_and_timed_beside_it(runner):
    result = B.bench(
        f"{FX / 'validate' / 'kb_good.py'}:ModelNew",
        f"{FX / 'validate' / 'kb_problem.py'}:Model",
        extra_candidates={"stage1": B.ExtraCandidate(f"{FX / 'validate' / 'kb_good.py'}:ModelNew")},
        reps=20,
        runner=runner,
    )
    assert result.ok, result.findings
    for row in result.rows:
        stage1 = next(t for t in row.timings if t.provider == "stage1")
        assert stage1.error is None and stage1.checked_calls, stage1  # built, given the weights, checked
        assert 0.5 < row.speedup_vs_extras["stage1"] < 2.0 and len(row.round_ratios["stage1"]) == 5


def test_an_extra_candidate_or_baseline_that_failed_is_a_warning_naming_it_and_the_candidate_stands(
    monkeypatch, tmp_path
):
    for name in ("cand.py", "s1.py", "peer.py"):
        (tmp_path / name).write_text("def f(x):\n    return x\n")
    raw = raw_row(cand=1.0)
    raw["timings"].append({"provider": "stage1", "error": "exception: RuntimeError: stage-1 file is broken"})
    raw["timings"].append({"provider": "f", "error": "exception: ImportError: no module named liger_kernel"})
    seen = _fake_gpu(monkeypatch, [raw])
    result = B.bench(
        f"{tmp_path / 'cand.py'}:f",
        validate_first=False,
        runner=seen["runner"],
        extra_candidates={"stage1": f"{tmp_path / 's1.py'}:f"},
        extra_baselines=[f"{tmp_path / 'peer.py'}:f"],
        cwd=tmp_path,
    )
    assert result.ok and result.rows[0].speedup_vs_eager == pytest.approx(2.0)
    warnings = {f.message.split(" ")[0]: f for f in result.findings if f.severity.value == "warning"}
    assert "stage-1 file is broken" in warnings["stage1"].message and "failed on c" in warnings["stage1"].message
    assert "no module named liger_kernel" in warnings["f"].message
    assert not [f for f in result.findings if f.severity.value == "error"]
    # The twin: nothing failed, nothing said.
    seen = _fake_gpu(monkeypatch, [raw_row(cand=1.0)])
    clean = B.bench(f"{tmp_path / 'cand.py'}:f", validate_first=False, runner=seen["runner"], cwd=tmp_path,
                    extra_candidates={"stage1": f"{tmp_path / 's1.py'}:f"})  # fmt: skip
    assert clean.ok and not [f for f in clean.findings if "timed beside" in f.message]


def test_an_extra_the_gpu_stays_busy_after_is_not_compared_and_is_named():
    # 0.5 ms of GPU work after stage 1's end event per call: its own side stream, or a thread the candidate left
    # running to make it look slow. Either way the comparison is withheld and flagged, as for a baseline.
    busy = B._row(_with_stage1(raw_row(cand=1.0, rounds=[1.0] * 5), 1.0, outside=0.5, rounds=[1.5] * 5), PEAKS,
                  extras=["stage1"])  # fmt: skip
    assert "stage1" not in busy.speedup_vs_extras and "stage1" not in busy.round_ratios
    (flag,) = [f for f in B.flags([busy], extras=["stage1"]) if f.kind.value == "timer_disagreement"]
    assert flag.message.startswith("c: stage1: the GPU stays busy") and "withheld" in flag.message
    quiet = B._row(_with_stage1(raw_row(cand=1.0, rounds=[1.0] * 5), 1.5, rounds=[1.5] * 5), PEAKS, extras=["stage1"])
    assert quiet.speedup_vs_extras["stage1"] == pytest.approx(1.5)
    assert not [f for f in B.flags([quiet], extras=["stage1"]) if f.kind.value == "timer_disagreement"]
