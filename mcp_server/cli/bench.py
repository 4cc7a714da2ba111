"""`ptt bench`: time a kernel against eager PyTorch, torch.compile and the roofline (GPU only)."""

from __future__ import annotations

import argparse
from typing import Any

from mcp_server.cli._common import ProgressBar, add_params, emit, values
from mcp_server.engine.params import BENCH


def cmd_bench(args: argparse.Namespace) -> int:
    from mcp_server.cli.render import render_bench
    from mcp_server.engine.bench import bench

    v = values(args, BENCH)
    with ProgressBar() as bar:
        result = bench(v.pop("candidate"), v.pop("reference"), progress=bar, **v)
    return emit(result, args.json, render_bench)


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="time a kernel against eager, torch.compile and the roofline (GPU only)")
    add_params(p, BENCH)
    p.set_defaults(fn=cmd_bench)
