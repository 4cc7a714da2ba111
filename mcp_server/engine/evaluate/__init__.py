"""Batch evaluation of KernelBench-style (problem, solution) folders: `ptt eval`.

Validate each solution against its problem, time the correct ones against eager PyTorch and torch.compile,
spread the pairs over the local GPUs (:mod:`mcp_server.engine.pool`) or a Ray cluster, keep results in a
SQLite database so a rerun resumes, and report the correctness rate and fast_p.
"""

from mcp_server.engine.evaluate.models import (
    FAST_P_DEFINITION,
    P_VALUES,
    EvalReport,
    EvalSettings,
    FastP,
    GroupSummary,
    PairResult,
    PairSpec,
    ProblemRow,
)
from mcp_server.engine.evaluate.pairs import discover_pairs, evaluate_pair
from mcp_server.engine.evaluate.report import build_report, draw_fast_p, fast_p, is_fast, render_markdown
from mcp_server.engine.evaluate.run import run_eval
from mcp_server.engine.evaluate.store import DEFAULT_DB_NAME, ResultStore

__all__ = [
    "DEFAULT_DB_NAME",
    "FAST_P_DEFINITION",
    "P_VALUES",
    "EvalReport",
    "EvalSettings",
    "FastP",
    "GroupSummary",
    "PairResult",
    "PairSpec",
    "ProblemRow",
    "ResultStore",
    "build_report",
    "discover_pairs",
    "draw_fast_p",
    "evaluate_pair",
    "fast_p",
    "is_fast",
    "render_markdown",
    "run_eval",
]
