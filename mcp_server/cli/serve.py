"""`ptt serve`: run the MCP server — over stdio (one client, this process) or streamable HTTP (many clients,
see :mod:`mcp_server.http_serve`). The transport is picked here; the server is built the same way for both."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from mcp_server.cli._common import EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if args.transport == "http":
        from mcp_server.http_serve import run_http

        run_http(
            host=args.host,
            port=args.port,
            token=args.token,
            allow_origins=args.allow_origin or [],
            max_concurrency=args.max_concurrency,
            max_request_bytes=args.max_request_bytes,
            header_timeout_s=args.header_timeout,
            body_timeout_s=args.body_timeout,
            keep_alive_s=args.keep_alive,
            max_connections=args.max_connections,
            roots=args.root,
        )
        return EXIT_OK
    from mcp_server.server import build_server

    build_server().run("stdio")
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the MCP server")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="http: the address to bind")
    p.add_argument("--port", type=int, default=8765, help="http: the port")
    p.add_argument(
        "--token",
        choices=["auto", "require", "none"],
        default="auto",
        help="http: bearer token — auto: required off loopback (from PTT_SERVE_TOKEN, else generated and "
        "printed once); require: also on loopback; none: no token (loopback only)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        metavar="URL",
        help="http: an extra allowed Origin (and Host), e.g. https://gpu-box:8765 (repeatable)",
    )
    p.add_argument("--max-concurrency", type=int, help="http: tool calls at once (default 2 per GPU, or 4)")
    p.add_argument("--max-request-bytes", type=int, default=1 << 20, help="http: largest request body (1 MiB)")
    p.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="http: a folder whose files the tools may read and write (repeatable; default the working folder); "
        "file arguments outside every root are refused, symlinks followed",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="http: a request's headers must arrive within this time (10)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="http: a request's body must arrive within this time after its headers (30)",
    )
    p.add_argument(
        "--keep-alive",
        type=int,
        default=5,
        metavar="SECONDS",
        help="http: an idle connection is closed after this time (5; at most 30)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="http: open connections at most; past it the oldest unauthenticated, then idle, one is closed "
        "(default 256, or half the open-file limit)",
    )
    p.set_defaults(fn=cmd_serve)
