"""MCP tool ``validate_against_reference``: the correctness verdict."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_server.engine.models import ValidateResult
from mcp_server.engine.params import VALIDATE
from mcp_server.tools._common import READ_ONLY, Placement, call_engine, callable_spec, tool_function

DOC = """Judge a candidate (usually a Triton launcher) against a PyTorch reference. Both run in isolated processes;
    the candidate never sees expected values. Checks: values vs a float64 reference with a tolerance bounded by
    PyTorch's own error (all-zero outputs cannot pass), NaN/Inf positions, shape/dtype/device, input mutation,
    outputs aliasing inputs or each other, unwritten output elements (allocations are poisoned), a repeat call
    (determinism), results cached across calls, at least one Triton launch, and torch ops doing the kernel's work.
    Accepts KernelBench files as they are (problem with Model/get_inputs/get_init_inputs, solution with ModelNew).
    ok=false with findings means the kernel is wrong: read each finding's kind and message, fix, call again."""


def register(server: MCPServer, placement: Placement) -> None:
    async def validate_against_reference(ctx: Context, args: dict[str, Any]) -> ValidateResult:
        from mcp_server.engine.validate import validate

        ref = callable_spec(args, "reference")
        cand = callable_spec(args, "candidate")
        args["allow_torch_ops"] = tuple(args["allow_torch_ops"] or ())
        async with placement.runner("validate", ctx) as runner:
            return await call_engine(validate, ref, cand, runner=runner, **args)

    tool = tool_function(VALIDATE, validate_against_reference, returns=ValidateResult, doc=DOC)
    server.add_tool(tool, annotations=READ_ONLY, title="Validate a kernel against PyTorch")
