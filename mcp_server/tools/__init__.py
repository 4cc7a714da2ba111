"""The MCP face: one module per feature, each with ``register(server, placement)``; shared pieces in
:mod:`mcp_server.tools._common`. :func:`mcp_server.server.build_server` registers them all, once."""

# Registration order is the order tools are listed in.
FEATURES: tuple[str, ...] = (
    "mcp_server.tools.device",
    "mcp_server.tools.compile",
    "mcp_server.tools.validate",
    "mcp_server.tools.bench",
    "mcp_server.tools.stages",
    "mcp_server.tools.audit",
    "mcp_server.tools.docs",
    "mcp_server.tools.skill",
)
