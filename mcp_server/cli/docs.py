"""`ptt docs sync|search`: the local Triton docs cache."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mcp_server.cli import markdown
from mcp_server.cli._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_params, values
from mcp_server.engine.docs import DocSearchResult
from mcp_server.engine.params import DOCS_SEARCH


def cmd_sync(args: argparse.Namespace) -> int:
    from mcp_server.engine.docs import build_offline, sync

    dest = Path(args.dest) if args.dest else None
    report = (
        build_offline(dest)
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
    return EXIT_OK if report.ok else EXIT_FAILED


def render_search(result: DocSearchResult, style: bool = False) -> str:
    """Hits for a terminal: each hit's title and heading as a heading, its snippet's Markdown rendered (code on
    its own lines, search terms bold when ``style``), and the page to read in full."""
    lines = [f"{len(result.hits)} hit(s) for {result.query!r} in {result.cache_dir}"]
    for note in result.notes:
        lines.append(f"note: {note}")
    for n, hit in enumerate(result.hits, 1):
        title = hit.title if hit.heading == hit.title else f"{hit.title} — {hit.heading}"
        lines.append("")
        lines.extend(markdown.heading(f"{n}. {title}", 3, style))
        body = markdown.render(hit.snippet, style)
        lines.extend("   " + line if line else line for line in body.splitlines())
        where = hit.url or f"{hit.page}#{hit.anchor}"
        lines.append(f"   {markdown.DIM}{where}{markdown.RESET}" if style else f"   {where}")
    return "\n".join(lines)


def cmd_search(args: argparse.Namespace) -> int:
    from mcp_server.engine.docs import search

    v = values(args, DOCS_SEARCH)
    result = search(v["query"], v["k"])
    print(result.model_dump_json(indent=2) if args.json else render_search(result, markdown.use_style()))
    return EXIT_OK if result.ok else EXIT_FAILED


def register(sub: Any) -> None:
    docs = sub.add_parser("docs", help="the local Triton docs cache: sync it, search it")
    docs_sub = docs.add_subparsers(dest="docs_command", metavar="ACTION", parser_class=type(docs))
    p = docs_sub.add_parser("sync", help="fetch the Triton docs (and build the installed-Triton reference)")
    p.add_argument("--dest", help="cache folder (default docs/.triton_docs in a checkout)")
    p.add_argument("--offline", action="store_true", help="build from the installed Triton only, no network")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per request")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_sync)
    p = docs_sub.add_parser("search", help="ranked snippets from the cache (built offline first if missing)")
    add_params(p, DOCS_SEARCH)
    p.set_defaults(fn=cmd_search)

    def usage(_args: argparse.Namespace) -> int:
        docs.print_help()
        return EXIT_USAGE

    docs.set_defaults(fn=usage)
