"""MCP tool ``device_info``: the device kernels run on, and its measured ceilings."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from mcp_server.engine.device import DeviceInfo
from mcp_server.engine.models import DevicePeaks
from mcp_server.engine.params import DEVICE
from mcp_server.tools._common import READ_ONLY, Placement, call_engine, tool_function


class DeviceReport(DeviceInfo):
    peaks: DevicePeaks | None = Field(None, description="measured ceilings (bench measures them on first use)")


def _report(peaks: bool, remeasure: bool) -> DeviceReport:
    from mcp_server.engine.bench import cached_peaks, device_peaks
    from mcp_server.engine.device import probe
    from mcp_server.engine.runner import shared_runner

    info = probe()
    measured = None
    if peaks or remeasure:
        measured = device_peaks(info, shared_runner(), remeasure=remeasure)
    elif not info.interpreter:
        measured = cached_peaks(info)
    return DeviceReport(**info.model_dump(), peaks=measured)


async def _device_info(ctx: Context, args: dict[str, Any]) -> DeviceReport:
    return await call_engine(_report, args["peaks"], args["remeasure"])


device_info = tool_function(
    DEVICE,
    _device_info,
    returns=DeviceReport,
    doc="""Describe the device kernels run on: the GPU (name, compute capability, SMs, L2, memory) or the Triton
    interpreter on CPU ('cpu-interpreter', where correctness checks work but timings mean nothing), plus the
    torch and triton versions and the default compile target, and the measured copy bandwidth and matmul rates
    once measured (peaks=true measures them). Call it first in a session.""",
)


def register(server: MCPServer, placement: Placement) -> None:
    server.add_tool(device_info, annotations=READ_ONLY, title="Device info")
