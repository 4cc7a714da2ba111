"""The MCP server through the SDK's in-memory client, and once as a real stdio process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from mcp_server.server import build_server

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "validate"
WITH_ZYGOTES = ROOT / "tests" / "with_zygotes.py"


def run(coro):
    return anyio.run(coro)


def test_the_server_lists_its_tools_with_schemas_and_annotations():
    async def go():
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in run(go)}
    assert {"device_info", "compile_kernel", "validate_against_reference", "bench"} <= set(tools)
    for tool in tools.values():
        assert tool.output_schema and tool.description and tool.annotations is not None
    for name in ("device_info", "compile_kernel", "validate_against_reference", "bench"):
        assert tools[name].annotations.read_only_hint


def test_validate_through_mcp_returns_the_structured_verdict():
    async def go():
        async with Client(build_server()) as client:
            return await client.call_tool(
                "validate_against_reference",
                {"reference": f"{FX}/add_problem.py:reference", "candidate": f"{FX}/add_unwritten.py:candidate"},
            )

    result = run(go)
    assert not result.is_error
    data = result.structured_content
    assert data["ok"] is False and "uninitialized_output" in {f["kind"] for f in data["findings"]}


def test_source_text_is_accepted_instead_of_a_file():
    source = (FX / "add_good.py").read_text()

    async def go():
        async with Client(build_server()) as client:
            return await client.call_tool(
                "validate_against_reference",
                {
                    "reference": f"{FX}/add_problem.py:reference",
                    "candidate_source": source,
                    "candidate_name": "candidate",
                },
            )

    result = run(go)
    assert result.structured_content["ok"] is True


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"reference": "missing.py:f", "candidate": f"{FX}/add_good.py:candidate"}, "does not exist"),
        ({"reference": f"{FX}/add_problem.py:reference"}, "candidate is missing"),
        ({"reference": f"{FX}/add_problem.py:reference", "candidate_source": "x = 1"}, "candidate_name"),
    ],
)
def test_misuse_is_a_tool_error_that_names_the_fix(arguments, words):
    async def go():
        async with Client(build_server()) as client:
            return await client.call_tool("validate_against_reference", arguments)

    result = run(go)
    assert result.is_error and words in result.content[0].text


def test_a_blank_docs_query_is_a_tool_error_that_names_the_fix_and_a_real_one_finds_its_page():
    async def go(query):
        async with Client(build_server()) as client:
            return await client.call_tool("search_triton_docs", {"query": query, "k": 1})

    blank = run(lambda: go("   "))
    assert blank.is_error and "needs a query: an API name" in blank.content[0].text
    found = run(lambda: go("tl.load"))
    assert not found.is_error and found.structured_content["hits"], found


@pytest.mark.slow
def test_the_stdio_server_survives_a_crashing_kernel_and_then_judges_a_good_one():
    # The SDK passes a minimal environment to the server; keep the import path (e.g. a --target install).
    env = {k: v for k, v in os.environ.items() if k == "PYTHONPATH" or k.startswith("PTT_")}
    # Its fork servers come from the test run's zygotes (tests/with_zygotes.py), as the in-memory servers' do.
    params = StdioServerParameters(
        command=sys.executable, args=[str(WITH_ZYGOTES), "-m", "mcp_server.cli", "serve"], cwd=str(ROOT), env=env
    )

    async def go():
        async with Client(params) as client:
            crashed = await client.call_tool(
                "validate_against_reference",
                {"reference": f"{FX}/add_problem.py:reference", "candidate": f"{FX}/add_segfault.py:candidate"},
            )
            good = await client.call_tool(
                "validate_against_reference",
                {"reference": f"{FX}/add_problem.py:reference", "candidate": f"{FX}/add_good.py:candidate"},
            )
            return crashed, good

    crashed, good = run(go)
    assert crashed.structured_content["ok"] is False
    assert "crash" in {f["kind"] for f in crashed.structured_content["findings"]}
    assert good.structured_content["ok"] is True


def test_prompts_resources_and_docs_search_through_the_real_server(tmp_path, monkeypatch):
    monkeypatch.setenv("PTT_TRITON_DOCS_DIR", str(tmp_path / "docs"))

    async def go():
        async with Client(build_server()) as client:
            prompts = (await client.list_prompts()).prompts
            rendered = await client.get_prompt("pytorch-to-triton", {"target": "model.py:forward"})
            templates = (await client.list_resource_templates()).resource_templates
            resources = (await client.list_resources()).resources
            skill = await client.read_resource("skill://pytorch-to-triton/SKILL.md")
            stage1 = await client.read_resource("skill://pytorch-to-triton/references/stage1.md")
            hits = await client.call_tool("search_triton_docs", {"query": "tl.dot input_precision", "k": 3})
            return prompts, rendered, templates, resources, skill, stage1, hits

    prompts, rendered, templates, resources, skill, stage1, hits = run(go)
    assert {"pytorch-to-triton", "audit-triton"} <= {p.name for p in prompts}
    text = rendered.messages[0].content.text
    assert "model.py:forward" in text and "validate_against_reference" in text and "stage_submit" in text
    assert "skill://pytorch-to-triton/references/{name}" in {t.uri_template for t in templates}
    assert "skill://pytorch-to-triton/SKILL.md" in {str(r.uri) for r in resources}
    assert skill.contents[0].text.startswith("---\nname: pytorch-to-triton")
    assert "Stage 1" in stage1.contents[0].text or "stage 1" in stage1.contents[0].text.lower()
    data = hits.structured_content
    assert (
        data["ok"]
        and data["hits"]
        and any("dot" in h["title"].lower() or "dot" in h["heading"].lower() for h in data["hits"])
    )
