"""`ptt compile`: compile a @triton.jit kernel for a GPU target (no GPU needed)."""

from __future__ import annotations

import argparse
from typing import Any

from mcp_server.cli._common import add_params, emit, values
from mcp_server.engine.params import COMPILE


def cmd_compile(args: argparse.Namespace) -> int:
    from mcp_server.cli.render import render_compile
    from mcp_server.engine.compile import compile_kernel

    v = values(args, COMPILE)
    result = compile_kernel(v.pop("kernel"), **{**v, "ir": list(v["ir"] or [])})
    return emit(result, args.json, render_compile)


def register(sub: Any) -> None:
    p = sub.add_parser("compile", help="compile a @triton.jit kernel for a GPU target (no GPU needed)")
    add_params(p, COMPILE)
    p.set_defaults(fn=cmd_compile)
