"""The skill's tool catalogue is generated from the real server and must not drift from it."""

from __future__ import annotations

from mcp_server.tools import catalogue as tools_catalogue


def test_the_tool_catalogue_matches_the_servers_list_tools():
    rendered = tools_catalogue.render()
    assert tools_catalogue.TARGET.read_text() == rendered, "run: python -m mcp_server.tools.catalogue"


def test_the_catalogue_names_every_tool_prompt_and_resource():
    text = tools_catalogue.render()
    for name in (
        "device_info",
        "compile_kernel",
        "validate_against_reference",
        "bench",
        "audit",
        "search_triton_docs",
        "stage_start",
        "stage_submit",
        "stage_status",
    ):
        assert f"## `{name}`" in text
    assert "`pytorch-to-triton`(target)" in text and "`audit-triton`" in text
    assert "skill://pytorch-to-triton/references/{name}" in text and "triton-docs://{+path}" in text
