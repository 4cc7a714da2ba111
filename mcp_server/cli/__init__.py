"""`ptt`: the command line over the engine. One module per command group, each with ``register(subparsers)``;
shared exit codes, options, progress bar and output in :mod:`mcp_server.cli._common`, result text in
:mod:`mcp_server.cli.render`.

Exit codes: 0 ok, 1 the kernel failed, 2 bad usage, 3 this environment cannot do it.
``--json`` prints the result model; otherwise a readable table. No traceback of ours reaches the user:
set PTT_DEBUG=1 to see one.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from mcp_server.cli._common import EXIT_ENV, EXIT_USAGE, Parser

# In the order `ptt --help` lists them.
COMMANDS: tuple[str, ...] = (
    "mcp_server.cli.device",
    "mcp_server.cli.compile",
    "mcp_server.cli.validate",
    "mcp_server.cli.bench",
    "mcp_server.cli.serve",
    "mcp_server.cli.demo",
    "mcp_server.cli.stages",
    "mcp_server.cli.audit",
    "mcp_server.cli.docs",
    "mcp_server.cli.eval",
    "mcp_server.cli.install",
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ptt", description="Compile, validate, bench and audit Triton kernels against PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed by argparse
        return int(exc.code or 0)
    if not getattr(args, "fn", None):
        parser.print_help()
        return EXIT_USAGE
    from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
    from mcp_server.engine.runner import RunnerError

    try:
        return int(args.fn(args) or 0)
    except UsageError as exc:
        sys.stderr.write(f"ptt: {exc}\n")
        return EXIT_USAGE
    except (EnvironmentUnavailable, RunnerError) as exc:
        sys.stderr.write(f"ptt: {exc}\n")
        return EXIT_ENV
    except KeyboardInterrupt:
        sys.stderr.write("ptt: interrupted\n")
        return 130
    except Exception as exc:
        if os.environ.get("PTT_DEBUG"):
            raise
        sys.stderr.write(
            f"ptt: internal error ({type(exc).__name__}: {exc}). This is a bug in ptt, not in your kernel; "
            "rerun with PTT_DEBUG=1 for the traceback and report it.\n"
        )
        return EXIT_ENV
