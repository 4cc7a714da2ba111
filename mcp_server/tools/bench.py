"""MCP tool ``bench``: timings on the GPU against eager PyTorch, torch.compile and the roofline."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent

from mcp_server.engine.models import BenchResult
from mcp_server.engine.params import BENCH
from mcp_server.tools._common import READ_ONLY, Placement, call_engine, callable_spec, progress_to, tool_function

DOC = """Time a validated candidate on the GPU against the reference in eager mode and under torch.compile, with
    L2 flushed and inputs rotated between calls, CUDA events cross-checked by the host clock, median and
    p20/p80. Reports speedups (each with its five timing rounds paired: faster or slower when all agree, a tie
    when not), achieved GB/s and TFLOP/s, % of the measured roofline and which bound applies, and flags:
    slower than eager/compile, < 50 % of the bound, spread > 10 %, > 10× speedups, flat scaling. Needs a CUDA
    GPU (without one it returns an error: interpreter timings are meaningless). Candidates that fail validation
    are not timed unless force=true. One bench runs per GPU at a time; others wait (up to lock_wait_s)."""


def with_image(result: BenchResult, png: bytes) -> CallToolResult:
    """The result as structured content, with the plot beside it as an image."""
    result.plot = None
    return CallToolResult(
        content=[
            TextContent(type="text", text=result.model_dump_json()),
            ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"),
        ],
        structured_content=result.model_dump(mode="json"),
    )


def register(server: MCPServer, placement: Placement) -> None:
    async def bench(ctx: Context, args: dict[str, Any]) -> BenchResult | CallToolResult:
        from mcp_server.engine.bench import bench as run

        spec = callable_spec(args, "candidate")
        reference = args.pop("reference")
        plot = args.pop("plot")
        async with placement.runner("bench", ctx) as runner:
            with tempfile.TemporaryDirectory() as tmp:
                png = str(Path(tmp) / "bench.png") if plot else None
                result = await call_engine(
                    run, spec, reference, plot=png, progress=progress_to(ctx), runner=runner, **args
                )
                if not (plot and result.plot):
                    return result
                return with_image(result, Path(result.plot).read_bytes())

    tool = tool_function(BENCH, bench, returns=Annotated[CallToolResult, BenchResult], doc=DOC)
    server.add_tool(tool, annotations=READ_ONLY, title="Benchmark a kernel on the GPU")
