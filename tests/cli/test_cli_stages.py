"""`ptt stages …`, end to end with real validation (under the interpreter without a GPU)."""

from __future__ import annotations

import json

import pytest
import torch
from stages_fakes import FIXTURES, REFERENCE

from mcp_server.engine.stages import LEDGER_ENV

HAS_GPU = torch.cuda.is_available()
STAGE1 = f"{FIXTURES / 'axpy_stage1.py'}:candidate"
STAGE2 = f"{FIXTURES / 'axpy_stage2.py'}:candidate"
WRONG = f"{FIXTURES / 'axpy_wrong.py'}:candidate"


class Proc:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def ptt(capsys, tmp_path, monkeypatch):
    """Run `ptt` in this process, in a fresh project folder (so the default ledger is .ptt/ledger.db there)."""
    from mcp_server.cli import main

    monkeypatch.delenv(LEDGER_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    def call(*args: str) -> Proc:
        code = main(list(args))
        out = capsys.readouterr()
        return Proc(code, out.out, out.err)

    return call


@pytest.mark.slow
def test_cli_round_trip_start_submit_status_show_best(ptt, tmp_path):
    proc = ptt("stages", "start", "axpy", REFERENCE, "--notes", "x + 2y")
    assert proc.returncode == 0 and "conversion axpy" in proc.stdout
    assert (tmp_path / ".ptt" / "ledger.db").is_file()

    proc = ptt("stages", "submit", "axpy", STAGE1, "--stage", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "attempt #1 at stage 1: PASSED" in proc.stdout and "validation" in proc.stdout

    proc = ptt("stages", "submit", "axpy", WRONG, "--stage", "1", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["verdict"]["state"] == "failed" and data["attempt"] == 2
    assert "mismatch" in {f["kind"] for f in data["findings"]}

    proc = ptt("stages", "submit", "axpy", STAGE2, "--stage", "2")
    if not HAS_GPU:  # validation passes; the gain cannot be measured here
        assert proc.returncode == 3 and "PENDING" in proc.stdout and "not measurable here" in proc.stdout

    proc = ptt("stages", "status")
    assert proc.returncode == 0
    assert "conversion" in proc.stdout and "best × compile" in proc.stdout and "axpy" in proc.stdout
    proc = ptt("stages", "status", "axpy", "--json")
    row = json.loads(proc.stdout)["conversions"][0]
    assert row["stage_reached"] >= 1 and row["attempts"] == 3

    proc = ptt("stages", "show", "axpy")
    assert proc.returncode == 0 and "#2 (stage 1, failed):" in proc.stdout and "axpy_wrong.py" in proc.stdout

    proc = ptt("stages", "best", "axpy", "--stage", "1")
    assert proc.returncode == 0 and proc.stdout == (FIXTURES / "axpy_stage1.py").read_text()
    assert "attempt #1" in proc.stderr
    out = tmp_path / "rolled_back.py"
    proc = ptt("stages", "best", "axpy", "--stage", "1", "--write", str(out))
    assert proc.returncode == 0 and out.read_text() == (FIXTURES / "axpy_stage1.py").read_text()
    assert ptt("stages", "best", "axpy", "--stage", "1", "--write", str(out)).returncode == 2  # no --force


def test_cli_misuse_exits_2_with_the_fix_and_no_traceback(ptt, tmp_path):
    assert ptt("stages").returncode == 2
    proc = ptt("stages", "submit", "nope", STAGE1, "--stage", "1")
    assert proc.returncode == 2 and "ptt stages start" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "junk.db").write_text("not a ledger")
    proc = ptt("stages", "status", "--ledger", str(tmp_path / "junk.db"))
    assert proc.returncode == 2 and "junk.db" in proc.stderr and "not a SQLite database" in proc.stderr
    assert ptt("stages", "submit", "nope", STAGE1, "--stage", "4").returncode == 2


def test_cli_status_without_a_ledger_says_how_to_start(ptt, tmp_path):
    proc = ptt("stages", "status")
    assert proc.returncode == 0 and "ptt stages start" in proc.stdout and not (tmp_path / ".ptt").exists()
