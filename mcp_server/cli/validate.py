"""`ptt validate`: check a candidate against a PyTorch reference."""

from __future__ import annotations

import argparse
from typing import Any

from mcp_server.cli._common import add_params, emit, values
from mcp_server.engine.params import VALIDATE


def cmd_validate(args: argparse.Namespace) -> int:
    from mcp_server.cli.render import render_validate
    from mcp_server.engine.validate import validate

    v = values(args, VALIDATE)
    result = validate(v.pop("reference"), v.pop("candidate"), **v)
    return emit(result, args.json, render_validate)


def register(sub: Any) -> None:
    p = sub.add_parser("validate", help="check a candidate against a PyTorch reference")
    add_params(p, VALIDATE)
    p.set_defaults(fn=cmd_validate)
