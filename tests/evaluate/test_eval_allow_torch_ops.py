"""eval takes allow_torch_ops: a KernelBench solution that keeps its GEMM in torch fails as torch_compute
without it and passes with it; the option is part of the resume key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_server.engine.evaluate import EvalSettings, run_eval

EVAL_GEMM = Path(__file__).resolve().parents[1] / "fixtures" / "eval" / "gemm"


@pytest.mark.slow
def test_eval_judges_a_torch_gemm_solution_with_allow_torch_ops_and_keys_the_setting(pool, tmp_path):
    problems, solutions = tmp_path / "problems", tmp_path / "solutions"
    problems.mkdir()
    solutions.mkdir()
    shutil.copy(EVAL_GEMM / "problem.py", problems / "7_linear_relu.py")
    shutil.copy(EVAL_GEMM / "solution.py", solutions / "7_linear_relu.py")
    fast = EvalSettings(seeds=1, derive_shapes=False)

    strict = run_eval(problems, solutions, pool=pool, settings=fast, plot=None)
    assert [(r.status, r.failure_kinds) for r in strict.problems] == [("failed", ["torch_compute"])]

    opted = run_eval(
        problems, solutions, pool=pool, settings=fast.model_copy(update={"allow_torch_ops": ("mm",)}), plot=None
    )
    assert opted.evaluated_now == 1 and [r.status for r in opted.problems] == ["passed"]
    assert fast.key(False) != fast.model_copy(update={"allow_torch_ops": ("mm",)}).key(False)
