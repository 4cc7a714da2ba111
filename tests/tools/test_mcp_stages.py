"""The MCP stage tools, end to end with real validation (under the interpreter without a GPU)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from stages_fakes import FIXTURES, REFERENCE

from mcp_server.server import build_server

STAGE1 = f"{FIXTURES / 'axpy_stage1.py'}:candidate"


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
