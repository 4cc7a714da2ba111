"""`ptt eval` on a small KernelBench-style set under the interpreter: verdicts per problem, the database and
resuming after a stop, --redo, a changed solution, the CLI, and KernelBench's file naming."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from mcp_server.engine.errors import UsageError
from mcp_server.engine.evaluate import EvalSettings, ResultStore, discover_pairs, run_eval

EVAL_FX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
PROBLEMS = EVAL_FX / "problems"
FAST = EvalSettings(seeds=1, derive_shapes=False)
EXPECTED = {
    "1_add": ("passed", []),
    "2_relu": ("passed", []),
    "3_scale": ("passed", []),
    "4_square": ("failed", ["mismatch"]),
    "5_negate": ("failed", ["crash", "evasion"]),  # a segfault through ctypes, which the scan names too
    "6_row_sum": ("missing", []),
}


@pytest.fixture
def solutions(tmp_path) -> Path:
    dest = tmp_path / "solutions"
    shutil.copytree(EVAL_FX / "solutions", dest)
    return dest


def test_pairs_are_matched_by_name_and_a_missing_solution_is_noted(solutions):
    pairs, notes = discover_pairs(PROBLEMS, solutions)
    assert [p.name for p in pairs] == list(EXPECTED)
    assert [p.solution is None for p in pairs] == [False] * 5 + [True]
    assert notes == []


@pytest.mark.slow
def test_the_whole_set_is_judged_per_problem_with_default_settings(pool, solutions, tmp_path):
    seen: list[str] = []
    report = run_eval(
        PROBLEMS,
        solutions,
        pool=pool,
        plot=tmp_path / "fast_p.png",
        progress=lambda done, total, message: seen.append(message),
    )
    got = {r.name: (r.status, r.failure_kinds) for r in report.problems}
    assert got == EXPECTED
    assert report.overall.correct == 3 and report.overall.correctness_rate == pytest.approx(0.5)
    assert report.overall.fast_p[0].eager == pytest.approx(0.5)
    assert all(pt.eager is None and pt.compile is None for pt in report.overall.fast_p[1:])  # no GPU: not measurable
    passed = [r for r in report.problems if r.status == "passed"]
    assert all(r.timing == "not measured" and r.candidate_ms is None and r.speedup_eager is None for r in passed)
    assert all(r.device == "cpu-interpreter" and r.worker == "cpu-interpreter" for r in passed)
    assert report.evaluated_now == 6 and report.resumed == 0 and not report.ok
    # A failure names the seed that gives its inputs again (they are drawn afresh per run).
    square = next(r for r in report.problems if r.name == "4_square")
    replay = f"ptt validate {PROBLEMS}/4_square.py:Model {solutions}/4_square.py:ModelNew --seed "
    assert re.search(rf"these inputs again: {re.escape(replay)}\d+$", square.summary), square.summary
    assert (tmp_path / "fast_p.png").exists() and report.plot
    assert seen[0].startswith("evaluating 5 pair(s)") and any("4_square FAILED (mismatch)" in m for m in seen)
    assert Path(report.db) == solutions / ".ptt-eval.db"


@pytest.mark.slow
def test_a_stopped_run_resumes_where_it_stopped_and_redo_starts_over(pool, solutions):
    db = solutions / "results.db"
    first = run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST, stop_after=2)
    assert first.evaluated_now == 3  # two pairs and the missing one
    assert len(first.problems) == 3 and any("not evaluated yet" in n for n in first.notes)
    with ResultStore(db) as store:
        assert len(store.all()) == 3

    second = run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST)
    assert (second.evaluated_now, second.resumed) == (3, 3)
    assert {r.name: (r.status, r.failure_kinds) for r in second.problems} == EXPECTED

    third = run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST)
    assert (third.evaluated_now, third.resumed) == (0, 6)
    assert [r.model_dump() for r in third.problems] == [r.model_dump() for r in second.problems]

    redo = run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST, redo=True)
    assert (redo.evaluated_now, redo.resumed) == (6, 0)


@pytest.mark.slow
def test_an_interrupted_run_keeps_what_finished(pool, solutions):
    db = solutions / "interrupted.db"

    def interrupt(done, total, message):
        if done >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST, progress=interrupt)
    with ResultStore(db) as store:
        kept = {r.name for r in store.all()}
    assert "6_row_sum" in kept and 2 <= len(kept) < 6
    resumed = run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST)
    assert resumed.resumed >= 2 and resumed.evaluated_now == 6 - resumed.resumed
    assert {r.name: r.status for r in resumed.problems} == {k: v[0] for k, v in EXPECTED.items()}


@pytest.mark.slow
def test_a_changed_solution_or_setting_is_evaluated_again(pool, solutions):
    db = solutions / "changes.db"
    run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST)
    # Fix the wrong solution: only that pair runs again, and now passes.
    fixed = (solutions / "4_square.py").read_text().replace("x + x", "x * x")
    (solutions / "4_square.py").write_text(fixed)
    again = run_eval(PROBLEMS, solutions, db=db, pool=pool, settings=FAST)
    assert again.evaluated_now == 1
    assert next(r for r in again.problems if r.name == "4_square").status == "passed"
    other = run_eval(
        PROBLEMS, solutions, db=db, pool=pool, settings=FAST.model_copy(update={"seeds": 2}), only=["1_add"]
    )
    assert other.evaluated_now == 1 and [r.name for r in other.problems] == ["1_add"]


@pytest.mark.slow
def test_ptt_eval_cli_prints_json_and_exits_1_when_a_problem_is_not_solved(pool, solutions, monkeypatch, capsys):
    import mcp_server.engine.pool as pool_mod
    from mcp_server.cli import main

    monkeypatch.setattr(pool_mod, "discover", lambda **kwargs: pool)
    code = main(["eval", str(PROBLEMS), str(solutions), "--seeds", "1", "--no-derive", "--json"])
    out = capsys.readouterr()
    assert code == 1
    data = json.loads(out.out)
    assert data["overall"]["correct"] == 3 and data["overall"]["problems"] == 6
    assert data["overall"]["fast_p"][1]["eager"] is None
    assert Path(data["plot"]).name == ".ptt-eval-fast_p.png" and Path(data["plot"]).exists()
    assert "evaluating 5 pair(s)" in out.err
    # Markdown by default, from the database this time.
    assert main(["eval", str(PROBLEMS), str(solutions), "--seeds", "1", "--no-derive", "--no-plot"]) == 1
    text = capsys.readouterr().out
    assert "**Correct: 3/6 (50.0 %)**" in text and "| 5_negate | failed |" in text
    assert main(["eval", str(PROBLEMS), str(solutions / "nowhere")]) == 2


def test_kernelbench_level_folders_and_sample_names_are_matched(tmp_path):
    problems, runs = tmp_path / "KernelBench", tmp_path / "runs" / "run1"
    (problems / "level1").mkdir(parents=True)
    (problems / "level2").mkdir()
    runs.mkdir(parents=True)
    model = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
    for rel in ("level1/19_ReLU.py", "level1/23_Softmax.py", "level2/1_Conv2D_ReLU.py"):
        (problems / rel).write_text(model)
    (problems / "level1" / "helpers.py").write_text("X = 1\n")
    (problems / "level1" / "__init__.py").write_text("")
    for name in (
        "level_1_problem_19_sample_1_kernel.py",
        "level_1_problem_19_sample_0_kernel.py",
        "level_2_problem_1_sample_0_kernel.py",
    ):
        (runs / name).write_text("class ModelNew: pass\n")
    pairs, notes = discover_pairs(problems, tmp_path / "runs")
    by = {p.name: p.solution for p in pairs}
    assert by == {
        "level1/19_ReLU": str(runs / "level_1_problem_19_sample_0_kernel.py"),
        "level1/23_Softmax": None,
        "level2/1_Conv2D_ReLU": str(runs / "level_2_problem_1_sample_0_kernel.py"),
    }
    assert len(notes) == 1 and "helpers.py" in notes[0]


def test_folders_named_like_python_files_are_skipped_with_a_note_on_either_side(tmp_path):
    problems, solutions = tmp_path / "problems", tmp_path / "solutions"
    model = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
    (problems / "level1").mkdir(parents=True)
    (problems / "level1" / "19_ReLU.py").write_text(model)
    (problems / "level1" / "20_Folder.py").mkdir()
    os.mkfifo(problems / "level1" / "22_Pipe.py")  # reading it would wait for a writer
    (problems / "level1" / "21_Tanh.py").write_text(model)
    # A folder where 21's solution would be, and a sample file for it that is one too.
    (solutions / "level1" / "21_Tanh.py").mkdir(parents=True)
    (solutions / "level_1_problem_21_sample_0_kernel.py").mkdir()
    (solutions / "level1" / "19_ReLU.py").write_text("class ModelNew: pass\n")
    pairs, notes = discover_pairs(problems, solutions)
    assert {p.name: p.solution for p in pairs} == {
        "level1/19_ReLU": str(solutions / "level1" / "19_ReLU.py"),
        "level1/21_Tanh": None,
    }
    assert len(notes) == 1 and "level1/20_Folder.py" in notes[0] and "level1/22_Pipe.py" in notes[0]
    assert "2 path(s)" in notes[0] and "folders, pipes" in notes[0]


def test_a_failures_replay_is_the_whole_validate_command_with_the_settings_that_change_its_inputs():
    from mcp_server.engine.evaluate.pairs import _replay

    problem, solution = PROBLEMS / "4_square.py", Path("/s o/4_square.py")
    assert _replay(problem, solution, EvalSettings(), 7) == (
        f"ptt validate {problem}:Model '/s o/4_square.py:ModelNew' --seed 7"
    )
    settings = EvalSettings(seeds=1, derive_shapes=False, allow_torch_ops=("mm",))
    assert _replay(problem, solution, settings, 7).endswith("--seed 7 --seeds 1 --no-derive --allow-torch-op mm")


def test_folders_that_do_not_exist_are_said_to_be_missing(tmp_path, solutions):
    with pytest.raises(UsageError, match=r"PROBLEMS_DIR .*/nope does not exist\. Pass a folder"):
        discover_pairs(tmp_path / "nope", solutions)
    with pytest.raises(UsageError, match=r"SOLUTIONS_DIR .*/nope does not exist: make it"):
        discover_pairs(PROBLEMS, tmp_path / "nope")
    with pytest.raises(UsageError, match="is not a folder of KernelBench-style problem files"):
        discover_pairs(PROBLEMS / "1_add.py", solutions)


def test_only_must_name_a_problem(solutions):
    with pytest.raises(UsageError, match="names no problem"):
        discover_pairs(PROBLEMS, solutions, only=["nope"])
