"""Audit tests share the process-wide runner, so the CLI and MCP tests reuse its fork servers."""

from __future__ import annotations

import pytest

from mcp_server.engine.runner import Runner, shared_runner


@pytest.fixture(scope="session")
def runner() -> Runner:
    return shared_runner()
