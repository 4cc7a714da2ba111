"""One parameter set per tool: the MCP tool's input schema and the `ptt` command's options both come from
mcp_server.engine.params, and neither face may take a parameter the other lacks unless the set says it is
face-only (presentation or transport: source text on MCP; --json and output files on the CLI)."""

from __future__ import annotations

import argparse

import anyio
import pytest
from mcp.client import Client

from mcp_server.cli import build_parser
from mcp_server.cli._common import flag_of
from mcp_server.engine.params import REQUIRED, TOOLS, ToolParams
from mcp_server.server import build_server

# What may be on one face only: presentation and transport, never what a tool computes.
MCP_ONLY_ALLOWED = {"markdown"}
CLI_ONLY_ALLOWED = {"json", "out", "write", "force", "plot"}


def _mcp_tools() -> dict[str, object]:
    async def go():
        async with Client(build_server()) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    return anyio.run(go)


MCP = _mcp_tools()


def _command(params: ToolParams) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = build_parser()
    for word in params.command or ():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def _cli_options(params: ToolParams) -> dict[str, argparse.Action]:
    parser = _command(params)
    return {
        a.dest: a for a in parser._actions if a.dest not in ("help",) and not isinstance(a, argparse._SubParsersAction)
    }


@pytest.mark.parametrize("params", [p for p in TOOLS if p.tool], ids=lambda p: p.tool)
def test_the_mcp_schema_and_the_cli_options_take_the_same_parameters(params):
    schema = MCP[params.tool].input_schema
    mcp = set(schema["properties"])
    cli = set(_cli_options(params))
    assert mcp == params.names("mcp"), f"{params.tool}: MCP schema differs from the shared set"
    assert cli == params.names("cli"), f"ptt {' '.join(params.command)}: CLI options differ from the shared set"
    mcp_only, cli_only = mcp - cli, cli - mcp
    assert {n for n in mcp_only if not n.endswith(("_source", "_name"))} <= MCP_ONLY_ALLOWED, mcp_only
    assert cli_only <= CLI_ONLY_ALLOWED, cli_only


@pytest.mark.parametrize("params", [p for p in TOOLS if p.tool], ids=lambda p: p.tool)
def test_shared_parameters_have_the_same_default_and_required_ness_on_both_faces(params):
    schema = MCP[params.tool].input_schema
    options = _cli_options(params)
    required = set(schema.get("required", []))
    for p in params.params:
        if p.faces != frozenset({"cli", "mcp"}):
            continue
        prop, action = schema["properties"][p.name], options[p.name]
        if p.required:
            assert p.name in required
            positional = not action.option_strings
            assert positional or action.required, f"{p.name}: required on MCP, optional on the CLI"
            continue
        assert p.name not in required and prop.get("default") == p.default, p.name
        if "default" not in p.cli and action.option_strings:
            assert action.default == p.default, f"{flag_of(p)}: CLI default {action.default!r} != {p.default!r}"
        arms = [prop, *prop.get("anyOf", [])]
        for key, word in (("ge", "minimum"), ("le", "maximum")):
            if key in p.limits:
                assert p.limits[key] in [arm.get(word) for arm in arms], f"{p.name}: MCP {word} differs"


def test_every_command_only_set_has_no_tool_and_every_tool_is_in_the_table():
    tabled = {p.tool for p in TOOLS if p.tool}
    assert set(MCP) == tabled, "every MCP tool takes its parameters from mcp_server.engine.params"


def test_the_cli_checks_the_same_bounds_as_mcp(capsys):
    from mcp_server.cli import main

    assert main(["validate", "a.py:f", "b.py:g", "--seeds", "0"]) == 2
    assert "--seeds must be at least 1" in capsys.readouterr().err
    # String lengths too: MCP's schema refuses an empty query and one past 400 characters.
    assert main(["docs", "search", ""]) == 2
    assert "QUERY takes at least 1 character" in capsys.readouterr().err
    assert main(["docs", "search", "x" * 401]) == 2
    assert "QUERY takes at most 400 characters, got 401" in capsys.readouterr().err
    assert main(["docs", "search", "x" * 400, "--json"]) == 0
    capsys.readouterr()


def test_required_defaults_are_marked():
    for params in TOOLS:
        for p in params.params:
            assert (p.default is REQUIRED) == p.required
