"""`ptt audit` and the MCP tool `audit` / prompt `audit-triton`."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from mcp_server.server import build_server

ROOT = Path(__file__).resolve().parents[2]
SUITE_FX = ROOT / "tests" / "fixtures" / "audit" / "suite"


@pytest.fixture
def ptt(capsys):
    from mcp_server.cli import main

    def call(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


def test_ptt_audit_on_the_softmax_reference_kernel_raises_no_error_finding(ptt):
    code, out, err = ptt(
        "audit",
        str(ROOT / "reference_kernels" / "softmax.py"),
        "--sections",
        "static,compiled,correctness",
        "--suite",
        "base,zeros,nan",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] and not [f for f in report["findings"] if f["severity"] == "error"]
    assert report["candidate"].endswith("softmax.py:softmax_stage3")
    assert report["reference"].endswith("softmax.py:reference_softmax")
    kernels = report["compiled"]["kernels"]
    assert kernels and all(k["ok"] and k["registers"] for k in kernels)
    assert {r["tier"] for r in report["correctness"]["runs"]} == {"strict"}


def test_ptt_audit_writes_the_markdown_report_and_exits_1_on_error_findings(ptt, tmp_path):
    out_file = tmp_path / "report.md"
    code, out, _ = ptt(
        "audit",
        f"{SUITE_FX / 'rowsum_fail.py'}:candidate",
        "--sections",
        "static,correctness",
        "--suite",
        "base",
        "--out",
        str(out_file),
    )
    assert code == 1
    text = out_file.read_text(encoding="utf-8")
    assert text.startswith("# Triton kernel audit") and "❌ FAIL" in text and "`mismatch`" in text
    assert "report written to" in out and "FAIL" in out.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--sections", "static,speed"], "choose from static"),
        (["--suite", "base,huge"], "choose from base"),
    ],
)
def test_ptt_audit_misuse_exits_2_with_the_fix(ptt, args, words):
    code, _, err = ptt("audit", f"{SUITE_FX / 'rowsum_strict.py'}:candidate", *args)
    assert code == 2 and words in err


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
