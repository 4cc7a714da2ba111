"""A solution that keeps its GEMM in torch is a choice the user opts into: stage submit takes allow_torch_ops
(as validate and audit do), judges with it, and records it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mcp_server.engine.stages import show, start, submit

FX = Path(__file__).resolve().parents[1] / "fixtures"
GEMM = FX / "audit" / "suite" / "gemm_torch_mm.py"


@pytest.mark.slow
def test_stage_submit_fails_a_torch_gemm_unless_mm_is_allowed_and_records_the_choice(db):
    start("linear", f"{GEMM}:reference", ledger=db)
    plain = submit("linear", f"{GEMM}:candidate", 1, ledger=db)
    assert not plain.ok and "torch_compute" in {f.kind.value for f in plain.findings}
    assert plain.allow_torch_ops == []

    allowed = submit("linear", f"{GEMM}:candidate", 1, allow_torch_ops=["mm", " mm", ""], ledger=db)
    assert allowed.ok and allowed.verdict.state == "passed", allowed.verdict
    assert allowed.allow_torch_ops == ["mm"]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT allow_torch_ops FROM attempt ORDER BY number").fetchall()
    assert [r[0] for r in rows] == ["", "mm"]
    detail = show("linear", ledger=db)
    assert detail.conversion.stage_reached == 1
    assert [a.allow_torch_ops for a in detail.attempts] == [[], ["mm"]]
