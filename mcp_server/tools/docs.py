"""MCP tool ``search_triton_docs`` and the ``triton-docs://`` resource: the cached Triton documentation."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from mcp_server.engine.docs import DocSearchResult, default_cache_dir, search
from mcp_server.engine.params import DOCS_SEARCH
from mcp_server.tools._common import READ_ONLY, Placement, call_engine, tool_function


async def _search(ctx: Context, args: dict[str, Any]) -> DocSearchResult:
    return await call_engine(search, args["query"], args["k"])


search_triton_docs = tool_function(
    DOCS_SEARCH,
    _search,
    returns=DocSearchResult,
    doc="""Search the Triton documentation cached for the installed Triton version (language reference, per-op
    pages, triton.testing, tutorials, debugging guide, and a reference generated from the installed
    package's own signatures and docstrings). Returns ranked snippets with page, heading and anchor. Use it
    before relying on an API you are not sure exists in this Triton version.""",
)


def triton_doc(path: str) -> str:
    root = default_cache_dir().resolve()
    page = (root / path).resolve()
    if root not in page.parents or page.suffix != ".md" or not page.is_file():
        raise ResourceNotFoundError(f"no cached doc page {path!r}; search_triton_docs returns page paths")
    return page.read_text()


def register(server: MCPServer, placement: Placement) -> None:
    server.add_tool(search_triton_docs, title="Search the Triton docs", annotations=READ_ONLY)
    server.resource("triton-docs://{+path}", title="A page of the cached Triton docs", mime_type="text/markdown")(
        triton_doc
    )
