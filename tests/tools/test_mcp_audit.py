"""The MCP tool `audit` and the prompt `audit-triton`."""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp.client import Client

from mcp_server.server import build_server

ROOT = Path(__file__).resolve().parents[2]
SUITE_FX = ROOT / "tests" / "fixtures" / "audit" / "suite"


def run(coro):
    return anyio.run(coro)


def test_the_audit_tool_and_prompt_are_listed_with_their_schemas():
    async def go():
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools, (await client.list_prompts()).prompts

    tools, prompts = run(go)
    tool = {t.name: t for t in tools}["audit"]
    assert tool.output_schema and "categories" in tool.output_schema["properties"]
    assert tool.annotations.read_only_hint and "tolerance" in tool.description and "file:line" in tool.description
    prompt = {p.name: p for p in prompts}["audit-triton"]
    args = {a.name: a.required for a in prompt.arguments}
    assert args == {"file": True, "reference": False}


def test_the_audit_prompt_tells_the_agent_how_to_run_and_act_on_the_audit():
    async def go():
        async with Client(build_server()) as client:
            return await client.get_prompt("audit-triton", {"file": "k.py", "reference": "ref.py:f"})

    text = run(go).messages[0].content.text
    assert "k.py" in text and "ref.py:f" in text and "`audit` tool" in text
    assert "ptt-audit: ignore" in text and "not checked" in text


def test_the_audit_tool_returns_the_report_with_its_markdown():
    async def go():
        async with Client(build_server()) as client:
            return await client.call_tool(
                "audit",
                {
                    "file": f"{SUITE_FX / 'rowsum_strict.py'}:candidate",
                    "sections": ["static", "correctness"],
                    "suite": ["base"],
                },
            )

    result = run(go)
    assert not result.is_error
    data = result.structured_content
    assert data["ok"] is True and data["correctness"]["runs"][0]["tier"] == "strict"
    assert data["markdown"].startswith("# Triton kernel audit") and len(data["categories"]) == 5


def test_audit_tool_misuse_is_a_tool_error():
    async def go():
        async with Client(build_server()) as client:
            return await client.call_tool("audit", {"file": "does/not/exist.py"})

    result = run(go)
    assert result.is_error and "does not exist" in result.content[0].text
