"""fast_p and the report, on synthetic results: the arithmetic, the edge cases, and what is not measurable."""

from __future__ import annotations

import json

import pytest

from mcp_server.engine.evaluate import (
    P_VALUES,
    EvalReport,
    PairResult,
    build_report,
    draw_fast_p,
    fast_p,
    is_fast,
    render_markdown,
)


def result(name, status="passed", eager=None, compile=None, cand_ms=1.0, timing="measured"):
    correct = status == "passed"
    return PairResult(
        name=name,
        status=status,
        correct=correct,
        device="NVIDIA H200",
        timing=timing if correct else "not timed",
        candidate_ms=cand_ms if correct else None,
        eager_ms=eager * cand_ms if eager else None,
        compile_ms=compile * cand_ms if compile else None,
        speedup_eager=eager,
        speedup_compile=compile,
    )


@pytest.fixture
def five():
    return [
        result("a", eager=2.0, compile=0.8),
        result("b", eager=1.2, compile=1.6),
        result("c", eager=0.4, compile=None),  # torch.compile failed on this problem: unmeasured
        result("d", status="failed"),
        result("e", status="missing"),
    ]


def report(results, timings=True) -> EvalReport:
    return build_report(results, timings_possible=timings, problems_dir="P", solutions_dir="S", db="D", backend="local")


@pytest.mark.parametrize(
    ("p", "eager", "compile"),
    [(0.0, 3, 3), (0.5, 2, 2), (1.0, 2, 1), (1.5, 1, 1), (2.0, 0, 0)],
)
def test_fast_p_counts_correct_and_strictly_faster_over_all_problems(five, p, eager, compile):
    assert fast_p(five, "eager", p, True) == (eager / 5, eager)
    assert fast_p(five, "compile", p, True) == (compile / 5, compile)


def test_a_speedup_equal_to_p_is_not_faster_than_p():
    r = result("x", eager=1.0, compile=2.0)
    assert is_fast(r, "eager", 1.0, True) is False and is_fast(r, "eager", 0.999, True) is True
    assert is_fast(r, "compile", 2.0, True) is False


def test_fast_0_is_the_correctness_rate_even_without_timings(five):
    untimed = [r.model_copy(update={"speedup_eager": None, "speedup_compile": None}) for r in five]
    assert fast_p(untimed, "eager", 0.0, False) == (0.6, 3)
    assert fast_p(untimed, "compile", 0.0, True) == (0.6, 3)


def test_without_a_gpu_fast_p_above_zero_is_not_measurable(five):
    for p in P_VALUES[1:]:
        assert fast_p(five, "eager", p, False) == (None, None)
    rep = report(five, timings=False)
    assert [pt.eager for pt in rep.overall.fast_p] == [0.6, None, None, None, None]
    assert rep.overall.correctness_rate == 0.6 and not rep.timings_measured
    assert "not measurable" in render_markdown(rep)
    assert any("No GPU" in n for n in rep.notes)
    assert rep.problems[0].fast_eager == [True, None, None, None, None]


def test_an_incorrect_solution_is_never_fast_whatever_its_speed():
    wrong = result("w", status="failed").model_copy(update={"speedup_eager": 50.0})
    assert all(is_fast(wrong, "eager", p, True) is False for p in P_VALUES)


def test_unmeasured_correct_solutions_make_the_figure_a_lower_bound(five):
    rep = report(five)
    assert rep.overall.unmeasured_compile == 1 and rep.overall.unmeasured_eager == 0
    assert any("lower bound" in n and "torch.compile" in n for n in rep.notes)
    assert rep.problems[2].fast_compile == [True, False, False, False, False]


def test_the_report_has_per_problem_flags_and_a_summary(five):
    rep = report(five)
    assert rep.ok is False and rep.overall.problems == 5 and rep.overall.correct == 3
    assert [pt.p for pt in rep.overall.fast_p] == list(P_VALUES)
    a = rep.problems[0]
    assert a.fast_eager == [True, True, True, True, False] and a.fast_compile == [True, True, False, False, False]
    assert rep.problems[3].fast_eager == [False] * 5
    text = render_markdown(rep)
    assert "| 1 | 40.0 % (2/5) | 20.0 % (1/5) |" in text
    assert "| a | passed |" in text and "2.00×" in text and "| e | missing |" in text
    assert "fast_p (against a baseline B)" in text
    assert EvalReport.model_validate(json.loads(rep.model_dump_json())) == rep


def test_fast_solutions_whose_rounds_tie_with_the_baseline_are_counted_at_p_1():
    tied = result("tied", eager=2.0, compile=1.01)
    tied.standing_eager, tied.standing_compile = "faster", "tie"
    clear = result("clear", eager=2.0, compile=1.3)
    clear.standing_eager, clear.standing_compile = "faster", "faster"
    slow_tie = result("slow_tie", eager=2.0, compile=0.99)
    slow_tie.standing_eager, slow_tie.standing_compile = "faster", "tie"  # not fast: not counted
    rep = report([tied, clear, slow_tie])
    at_1 = next(pt for pt in rep.overall.fast_p if pt.p == 1.0)
    assert (at_1.compile_count, at_1.compile_ties) == (2, 1) and (at_1.eager_count, at_1.eager_ties) == (3, 0)
    assert all(pt.compile_ties is None for pt in rep.overall.fast_p if pt.p != 1.0)
    text = render_markdown(rep)
    assert "| 1 | 100.0 % (3/3) | 66.7 % (2/3) (1 a tie) |" in text
    assert "| 1.01× tie |" in text and "| 1.30× |" in text
    # Without a GPU nothing is timed: no ties are claimed.
    assert all(pt.compile_ties is None for pt in report([tied], timings=False).overall.fast_p)


def test_folders_get_their_own_summaries():
    results = [
        result("level1/a", eager=3.0, compile=3.0),
        result("level1/b", status="failed"),
        result("level2/c", eager=0.5, compile=0.5),
    ]
    rep = report(results)
    groups = {g.group: g for g in rep.groups}
    assert set(groups) == {"level1", "level2"}
    assert groups["level1"].correct == 1 and groups["level1"].fast_p[2].eager == 0.5
    assert groups["level2"].fast_p[2].eager == 0.0 and groups["level2"].fast_p[0].eager == 1.0
    assert report([result("x"), result("y")]).groups == []


def test_an_empty_set_is_not_ok_and_measures_nothing():
    rep = report([])
    assert rep.ok is False and rep.overall.problems == 0 and rep.overall.fast_p[0].eager is None


@pytest.mark.slow
@pytest.mark.parametrize("timings", [True, False])
def test_the_plot_is_written(tmp_path, five, timings):
    pytest.importorskip("matplotlib")
    path = draw_fast_p(report(five, timings), tmp_path / "fast_p.png")
    assert (tmp_path / "fast_p.png").stat().st_size > 1000 and path.endswith("fast_p.png")


def test_a_problems_standing_is_its_sizes_when_they_agree_and_a_tie_when_not():
    from mcp_server.engine.evaluate.pairs import _standing
    from mcp_server.engine.models import BenchRow

    def row(**standing):
        return BenchRow(case="c", timings=[], bytes=0, flops=0, model="m", standing=standing)

    assert _standing([row(compile="faster"), row(compile="faster")], "compile") == "faster"
    assert _standing([row(compile="slower")], "compile") == "slower"
    assert _standing([row(compile="faster"), row(compile="slower")], "compile") == "tie"
    assert _standing([row(compile="faster"), row(eager="faster")], "compile") is None  # a size without rounds
    assert _standing([], "compile") is None
