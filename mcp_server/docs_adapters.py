"""Adapters for the Triton docs cache and the skill bundle: `ptt docs`, `search_triton_docs`, the
`pytorch-to-triton` prompt, and resources for the skill's files and the cached doc pages."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp_types import ToolAnnotations
from pydantic import Field

from mcp_server.engine.docs import DocSearchResult, default_cache_dir, search, sync
from mcp_server.engine.docs import build_offline as build_offline_docs

SKILL_DIR = Path(__file__).resolve().parent.parent / "skills" / "pytorch-to-triton"


# --- CLI ------------------------------------------------------------------------------------------------


def _cmd_sync(args: argparse.Namespace) -> int:
    dest = Path(args.dest) if args.dest else None
    report = (
        build_offline_docs(dest)
        if args.offline
        else sync(dest, concurrency=args.concurrency, timeout_s=args.timeout, retries=args.retries)
    )
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        where = "offline (installed Triton only)" if report.offline else "web + installed Triton"
        print(f"docs cache {report.dest}: {where}, Triton {report.installed_triton}")
        print(
            f"  fetched {len(report.fetched)}, unchanged {len(report.not_modified)}, failed {len(report.failed)}, "
            f"installed-reference pages {report.installed_pages}, sections indexed {report.sections_indexed} "
            f"({report.duration_s:.1f} s)"
        )
        for note in [*report.version_notes, *report.notes]:
            print(f"  note: {note}")
        for failure in report.failed[:10]:
            print(f"  failed: {failure.url}: {failure.error}")
    return 0 if report.ok else 1


def render_search(result: DocSearchResult) -> str:
    lines = [f"{len(result.hits)} hit(s) for {result.query!r} in {result.cache_dir}"]
    for note in result.notes:
        lines.append(f"note: {note}")
    for n, hit in enumerate(result.hits, 1):
        where = hit.url or f"{hit.page}#{hit.anchor}"
        lines.append(f"\n{n}. {hit.title} — {hit.heading}  [{where}]")
        lines.append("   " + hit.snippet.replace("\n", "\n   "))
    return "\n".join(lines)


def _cmd_search(args: argparse.Namespace) -> int:
    result = search(" ".join(args.query), args.k)
    print(result.model_dump_json(indent=2) if args.json else render_search(result))
    return 0 if result.ok else 1


def register_cli(sub: Any) -> None:
    docs = sub.add_parser("docs", help="the local Triton docs cache: sync it, search it")
    docs_sub = docs.add_subparsers(dest="docs_command", metavar="ACTION")
    p = docs_sub.add_parser("sync", help="fetch the Triton docs (and build the installed-Triton reference)")
    p.add_argument("--dest", help="cache folder (default docs/.triton_docs in a checkout)")
    p.add_argument("--offline", action="store_true", help="build from the installed Triton only, no network")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per request")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_sync)
    p = docs_sub.add_parser("search", help="ranked snippets from the cache (built offline first if missing)")
    p.add_argument("query", nargs="+")
    p.add_argument("-k", type=int, default=8, help="number of hits (default 8)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_search)
    docs.set_defaults(fn=lambda args: (docs.print_help(), 2)[1])


# --- MCP --------------------------------------------------------------------------------------------------


async def search_triton_docs(
    query: Annotated[
        str, Field(min_length=1, max_length=400, description="What to look up, e.g. 'tl.dot input_precision'.")
    ],
    k: Annotated[int, Field(ge=1, le=30, description="How many snippets to return.")] = 8,
) -> DocSearchResult:
    """Search the Triton documentation cached for the installed Triton version (language reference, per-op
    pages, triton.testing, tutorials, debugging guide, and a reference generated from the installed
    package's own signatures and docstrings). Returns ranked snippets with page, heading and anchor. Use it
    before relying on an API you are not sure exists in this Triton version."""
    return await anyio.to_thread.run_sync(lambda: search(query, k))


def _prompt_text(target: str) -> str:
    return f"""Convert `{target}` to a Triton kernel with the pytorch-to-triton tools, in gated stages.

1. Call `device_info`. Read the code of `{target}` until you can state the op as math with shapes, dtypes and
   which dimension is contiguous. Write a reference module: the PyTorch function, `get_test_cases()` (labelled
   shapes: a tail that is not a power of two, one row, the real sizes) or `get_inputs()`, and `bytes_moved` /
   `flops` if you can.
2. `stage_start` with a conversion name and that reference.
3. Stage 1: a simple, correct kernel and launcher. Loop `compile_kernel` → `validate_against_reference` until
   ok, then `stage_submit` stage 1.
4. Stage 2: autotune, coalesce, fewer passes over memory; `bench` against stage 1; `stage_submit` stage 2.
5. Stage 3: tune until `bench` is at least torch.compile on every size and `audit` has no error finding;
   `stage_submit` stage 3.

Report to the user only what the tools showed (verdicts, speedups, % of roofline), with the findings that
remain. The skill's guides are resources under skill://pytorch-to-triton/; search APIs with
`search_triton_docs`."""


def register_tools(server: MCPServer) -> None:
    server.add_tool(
        search_triton_docs,
        title="Search the Triton docs",
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False),
    )

    @server.prompt(name="pytorch-to-triton", title="Convert PyTorch code to Triton, in gated stages")
    def pytorch_to_triton(target: str) -> str:
        """Start a staged conversion of a PyTorch callable (e.g. model.py:forward) into Triton."""
        return _prompt_text(target)

    @server.resource(
        "skill://pytorch-to-triton/SKILL.md", title="The pytorch-to-triton skill", mime_type="text/markdown"
    )
    def skill_main() -> str:
        return (SKILL_DIR / "SKILL.md").read_text()

    @server.resource(
        "skill://pytorch-to-triton/references/{name}",
        title="A guide of the pytorch-to-triton skill",
        mime_type="text/markdown",
    )
    def skill_reference(name: str) -> str:
        path = (SKILL_DIR / "references" / name).resolve()
        if path.parent != (SKILL_DIR / "references").resolve() or not path.is_file():
            available = ", ".join(sorted(p.name for p in (SKILL_DIR / "references").glob("*.md")))
            raise ResourceNotFoundError(f"no skill reference {name!r}; available: {available}")
        return path.read_text()

    @server.resource("triton-docs://{path}", title="A page of the cached Triton docs", mime_type="text/markdown")
    def triton_doc(path: str) -> str:
        root = default_cache_dir().resolve()
        page = (root / path).resolve()
        if root not in page.parents or page.suffix != ".md" or not page.is_file():
            raise ResourceNotFoundError(f"no cached doc page {path!r}; search_triton_docs returns page paths")
        return page.read_text()


def demo_docs(dest: Path | None = None) -> str:
    """For `ptt demo`: sync the docs, falling back to the installed-Triton build when offline."""
    report = sync(dest, timeout_s=8.0, retries=1)
    if not report.ok:
        report = build_offline_docs(dest)
    kind = "offline build from the installed Triton" if report.offline else "fetched from the web"
    return json.dumps({"ok": report.ok, "dest": report.dest, "source": kind, "sections": report.sections_indexed})
