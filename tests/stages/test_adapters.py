"""`ptt stages …` and the MCP stage tools, end to end with real validation (under the interpreter without a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import torch
from mcp.client import Client
from stages_fakes import FIXTURES, REFERENCE

from mcp_server.engine.stages import LEDGER_ENV
from mcp_server.server import build_server

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


# --- MCP ------------------------------------------------------------------------------------------------------------


def call_tools(*calls: tuple[str, dict]) -> list:
    async def go():
        async with Client(build_server()) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(go)


def test_the_stage_tools_are_listed_with_schemas_and_the_right_annotations():
    async def go():
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in anyio.run(go)}
    assert {"stage_start", "stage_submit", "stage_status", "stage_best"} <= set(tools)
    for name in ("stage_start", "stage_submit", "stage_status", "stage_best"):
        assert tools[name].output_schema and "stage" in tools[name].description
    assert tools["stage_status"].annotations.read_only_hint and tools["stage_best"].annotations.read_only_hint
    assert not tools["stage_start"].annotations.read_only_hint
    assert not tools["stage_submit"].annotations.read_only_hint
    assert not tools["stage_submit"].annotations.idempotent_hint
    assert tools["stage_submit"].input_schema["properties"]["stage"]["maximum"] == 3


def test_mcp_round_trip_start_submit_source_text_status_best(tmp_path):
    ledger = str(tmp_path / "mcp" / "ledger.db")
    source = (FIXTURES / "axpy_stage1.py").read_text()
    started, submitted, status, best = call_tools(
        ("stage_start", {"name": "axpy", "reference": REFERENCE, "ledger": ledger}),
        (
            "stage_submit",
            {"name": "axpy", "stage": 1, "candidate_source": source, "candidate_name": "candidate", "ledger": ledger},
        ),
        ("stage_status", {"ledger": ledger}),
        ("stage_best", {"name": "axpy", "ledger": ledger}),
    )
    assert not started.is_error and started.structured_content["stage_reached"] == 0
    assert not submitted.is_error, submitted.content[0].text
    data = submitted.structured_content
    assert data["ok"] is True and data["verdict"]["state"] == "passed" and data["stage_reached"] == 1
    assert Path(data["candidate"].rpartition(":")[0]).is_relative_to(Path(ledger).parent / "sources")
    assert status.structured_content["conversions"][0]["stage_reached"] == 1
    assert best.structured_content["source"] == source and best.structured_content["attempt"] == 1


@pytest.mark.parametrize(
    ("name", "arguments", "words"),
    [
        ("stage_submit", {"name": "nope", "stage": 1, "candidate": STAGE1}, "No conversion named 'nope'"),
        ("stage_submit", {"name": "axpy", "stage": 1}, "candidate is missing"),
        ("stage_submit", {"name": "axpy", "stage": 1, "candidate_source": "x = 1"}, "candidate_name"),
        ("stage_start", {"name": "axpy", "reference": "missing.py:f"}, "does not exist"),
        ("stage_best", {"name": "axpy"}, "no stage ledger"),
    ],
)
def test_mcp_misuse_is_a_tool_error_that_names_the_fix(tmp_path, name, arguments, words):
    ledger = tmp_path / ("fresh.db" if name != "stage_submit" else "ledger.db")
    if name == "stage_submit":
        call_tools(("stage_start", {"name": "axpy", "reference": REFERENCE, "ledger": str(ledger)}))
    (result,) = call_tools((name, {**arguments, "ledger": str(ledger)}))
    assert result.is_error and words in result.content[0].text
