"""MCP tool ``compile_kernel``: ahead-of-time compilation for a GPU target (no GPU needed)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_server.engine.models import CompileResult
from mcp_server.engine.params import COMPILE
from mcp_server.tools._common import READ_ONLY, Placement, call_engine, callable_spec, tool_function


async def _compile(ctx: Context, args: dict[str, Any]) -> CompileResult:
    from mcp_server.engine.compile import compile_kernel as run

    spec = callable_spec(args, "kernel")
    return await call_engine(run, spec, **{**args, "ir": list(args["ir"] or [])})


compile_kernel = tool_function(
    COMPILE,
    _compile,
    returns=CompileResult,
    doc="""Compile a @triton.jit kernel ahead of time for a GPU target — no GPU needed. Returns per config: registers
    per thread, spill bytes, shared memory, an occupancy estimate and the limiter, compile time, and the IR
    stages asked for (e.g. ptx to check ld.global.v4 vectorisation, sass for HGMMA tensor-core use). Compile
    errors come back with file:line:column and Triton's message. Use it before validating, and after changing
    tile sizes to see register pressure.""",
)


def register(server: MCPServer, placement: Placement) -> None:
    server.add_tool(compile_kernel, annotations=READ_ONLY, title="Compile a Triton kernel (AOT)")
