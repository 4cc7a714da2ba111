"""`ptt`: the command line over the engine. One module per command group, each with ``register(subparsers)``;
shared exit codes, options, progress bar and output in :mod:`mcp_server.cli._common`, result text in
:mod:`mcp_server.cli.render`.

Exit codes: 0 ok, 1 the kernel failed, 2 bad usage, 3 this environment cannot do it.
``--json`` prints the result model — always exactly one JSON object on stdout, failures included
(``{"ok": false, "error": {"kind", "message", "exit_code"}}``); otherwise a readable table. No traceback of
ours reaches the user: set PTT_DEBUG=1 to see one.

The `ptt` entry point (``main()`` with no arguments) runs the command in the warm background engine of
:mod:`mcp_server.cli.daemon` when it can, and in this process otherwise; ``main(argv)`` always runs here.
This module imports little at its top: a call that goes to the engine does not pay for the parser.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from contextlib import nullcontext
from typing import Any, TextIO

from mcp_server.cli.help import annotate
from mcp_server.cli.version import VersionAction

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
    "mcp_server.cli.daemon",
)


def build_parser() -> argparse.ArgumentParser:
    from mcp_server.cli._common import CommandParser, Parser

    parser = Parser(
        prog="ptt",
        description="Compile, validate, bench and audit Triton kernels against PyTorch.",
        epilog="Every command has --help with an example, and --json: one JSON object on stdout, failures "
        "included. Exit codes: 0 ok, 1 the kernel failed, 2 bad usage, 3 this machine cannot do it.",
    )
    parser.add_argument("--version", action=VersionAction, help="ptt, torch and Triton versions, and the device")
    parser.add_argument(
        "--no-daemon",
        action="store_true",
        help="run in this process instead of the warm background engine (also PTT_NO_DAEMON=1)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="say on stderr when the background engine is not used, and why"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    annotate(parser)
    return parser


class _Watched:
    """stdout, noting whether anything was written (so ``--json`` can promise exactly one object)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.wrote = False

    def write(self, text: str) -> int:
        if text:
            self.wrote = True
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _error(as_json: bool, kind: str, message: str, code: int, printed: bool = True) -> int:
    """Report a failure: the message on stderr; under --json also one object on stdout."""
    if not printed:
        sys.stderr.write(f"ptt: {message}\n")
    if as_json:
        error = {"kind": kind, "message": message, "exit_code": code}
        sys.stdout.write(json.dumps({"ok": False, "error": error}, indent=2) + "\n")
    return code


def main(argv: list[str] | None = None) -> int:
    """`ptt`: with no ``argv`` (the entry point), through the background engine when it can be used."""
    if argv is None:
        from mcp_server.cli.daemon import dispatch

        argv = sys.argv[1:]
        code = dispatch(argv)
        if code is not None:
            return code
    return run(argv)


def run(argv: list[str]) -> int:
    """The command, in this process."""
    from mcp_server.cli._common import EXIT_ENV, EXIT_USAGE, Heartbeat

    argv = list(argv)
    as_json = "--json" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv, namespace=argparse.Namespace(_argv=argv))
    except SystemExit as exc:  # --help / --version (0), or a usage error argparse already printed on stderr
        code = int(exc.code or 0)
        if code:
            return _error(as_json, "usage", getattr(exc, "message", "bad usage; see --help"), code)
        return code
    if not getattr(args, "fn", None):
        parser.print_help(sys.stderr)
        return _error(as_json, "usage", "name a command; ptt --help lists them", EXIT_USAGE, printed=False)
    from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
    from mcp_server.engine.runner import RunnerError

    stdout = sys.stdout
    watched = _Watched(stdout)
    sys.stdout = watched  # type: ignore[assignment]
    heartbeat = Heartbeat(args.command) if args.command not in ("serve", "install", "daemon") else nullcontext()
    try:
        with heartbeat:
            code = int(args.fn(args) or 0)
    except UsageError as exc:
        return _error(as_json, "usage", str(exc), EXIT_USAGE, printed=False)
    except (EnvironmentUnavailable, RunnerError) as exc:
        return _error(as_json, "environment", str(exc), EXIT_ENV, printed=False)
    except KeyboardInterrupt:
        return _error(as_json, "interrupted", "interrupted", 130, printed=False)
    except Exception as exc:
        if os.environ.get("PTT_DEBUG"):
            raise
        said = str(exc) if len(str(exc)) <= 500 else f"{str(exc)[:500]}… ({len(str(exc))} characters)"
        message = (
            f"internal error ({type(exc).__name__}: {said}). This is a bug in ptt, not in your kernel; "
            "rerun with PTT_DEBUG=1 for the traceback and report it."
        )
        return _error(as_json, "internal", message, EXIT_ENV, printed=False)
    finally:
        sys.stdout = stdout
    if as_json and not watched.wrote:  # a command that printed nothing still answers with one object
        if code:
            return _error(as_json, "failed", f"{args.command} failed (exit {code}); see stderr", code, printed=True)
        sys.stdout.write(json.dumps({"ok": True}) + "\n")
    return code
