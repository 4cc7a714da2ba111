"""The MCP server: :func:`build_server` registers every tool, prompt and resource of :mod:`mcp_server.tools`
once. It picks no transport: ``ptt serve`` runs it over stdio, :mod:`mcp_server.http_serve` over HTTP.

Each tool checks its arguments, runs the engine in a worker thread (the engine blocks on child processes) and
returns the engine's pydantic result, so every tool has an output schema. Misuse becomes a tool error whose
text names the fix; a failing kernel is a normal result with ``ok: false``. User code never runs in this
process: the engine runs it in isolated children.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mcp.server.mcpserver import MCPServer

from mcp_server.tools import FEATURES
from mcp_server.tools._common import Placement

if TYPE_CHECKING:
    from mcp_server.engine.pool import WorkerPool

INSTRUCTIONS = (
    "Tools to turn PyTorch code into fast, correct Triton kernels. Work in stages: write a simple correct "
    "kernel and call validate_against_reference until it passes; then autotune and bench; then optimise "
    "further and audit. Every verdict comes from isolated runs, never from the kernel's own claims. Without a "
    "GPU, kernels run under the Triton interpreter and results say device='cpu-interpreter'."
)


def build_server(pool: WorkerPool | None = None) -> MCPServer:
    """The server with every tool registered once. ``pool``: run validations and benches on a place of this
    GPU worker pool (the HTTP server's many clients); None: on this process's shared runner (stdio)."""
    from mcp_server import __version__

    server = MCPServer("pytorch-to-triton", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    placement = Placement(pool)
    for module in FEATURES:
        importlib.import_module(module).register(server, placement)
    return server
