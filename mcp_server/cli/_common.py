"""Shared by every ``ptt`` command: exit codes, the parser, options from the shared parameter sets, the
progress bar and result output."""

from __future__ import annotations

import argparse
import sys
import threading
import time
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from mcp_server.engine.errors import UsageError
from mcp_server.engine.params import Param, ToolParams

# 0 ok, 1 the kernel failed (or the gate did), 2 bad usage, 3 this environment cannot do it.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ENV = 0, 1, 2, 3


class UsageExit(SystemExit):
    """A usage error argparse found; ``message`` is what it said (main() repeats it under --json)."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_USAGE)
        self.message = message


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:  # argparse's default exits 2 too; keep the message short
        self.print_usage(sys.stderr)
        sys.stderr.write(f"ptt: {message}\n")
        raise UsageExit(f"{self.prog}: {message}")


class CommandParser(Parser):
    """A command's parser: an argument it does not know is its own usage error (its usage, not ptt's, and the
    --help that lists its options)."""

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)} (`{self.prog} --help` lists its options)")
        return namespace, extras


# --- options from the shared parameter sets -------------------------------------------------------------------


def _scalar(annotation: Any) -> Any:
    """The argparse ``type`` (and choices) of a parameter type: ``int | None`` -> int, a Literal -> choices."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is Literal:
        return str, tuple(args)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:  # X | None
        return _scalar(args[0])
    if annotation in (int, float, str):
        return annotation, None
    return str, None


def flag_of(p: Param) -> str:
    if p.flag is not None:
        return p.flag
    if p.type is bool and p.default is True:
        return "--no-" + p.name.replace("_", "-")
    return "--" + p.name.replace("_", "-")


def _help(p: Param) -> str:
    if p.type is bool and p.default is True:
        return f"Turns off what is on by default: {p.help[0].lower()}{p.help[1:]}"
    if p.type is bool or p.default is None or p.required or "default" in p.cli:
        return p.help
    return f"{p.help} (default {p.default})"


def add_params(parser: argparse.ArgumentParser, params: ToolParams) -> None:
    """The command's options: every CLI parameter of the tool's shared set."""
    for p in params.on("cli"):
        kwargs: dict[str, Any] = {"help": _help(p)}
        flag = flag_of(p)
        if p.type is bool and "action" not in p.cli:
            kwargs["action"] = "store_false" if p.default is True else "store_true"
        else:
            kind, choices = _scalar(p.type)
            if "action" not in p.cli or p.cli["action"] == "store":
                kwargs["type"] = kind
                if choices:
                    kwargs["choices"] = choices
            if not p.required:
                kwargs["default"] = p.default
        kwargs.update(p.cli)
        if flag:
            parser.add_argument(flag, dest=p.name, **kwargs)
        else:
            parser.add_argument(p.name, **kwargs)


def values(args: argparse.Namespace, params: ToolParams) -> dict[str, Any]:
    """The command's parameter values, parsed (``parse``) and checked against the bounds MCP checks too."""
    out: dict[str, Any] = {}
    for p in params.on("cli"):
        value = getattr(args, p.name)
        if p.parse is not None:
            value = p.parse(value)
        name = flag_of(p) or p.name.upper()  # a positional has no flag: its metavar
        if isinstance(value, int | float) and not isinstance(value, bool):
            low, high = p.limits.get("ge"), p.limits.get("le")
            if low is not None and value < low:
                raise UsageError(f"{name} must be at least {low}, got {value}.")
            if high is not None and value > high:
                raise UsageError(f"{name} must be at most {high}, got {value}.")
        if isinstance(value, str):
            shortest, longest = p.limits.get("min_length"), p.limits.get("max_length")
            if shortest is not None and len(value) < shortest:
                raise UsageError(f"{name} takes at least {shortest} character(s), got {len(value)}.")
            if longest is not None and len(value) > longest:
                raise UsageError(f"{name} takes at most {longest} characters, got {len(value)}.")
        out[p.name] = value
    out.pop("json", None)
    return out


# --- output ---------------------------------------------------------------------------------------------------


def emit(result: Any, as_json: bool, render: Callable[[Any], str]) -> int:
    """Print the result (its model as JSON, or rendered); exit 0 when it is ok, 1 when not."""
    print(result.model_dump_json(indent=2) if as_json else render(result))
    return EXIT_OK if getattr(result, "ok", True) else EXIT_FAILED


# When a progress line last reached stderr (a Heartbeat stays quiet while a ProgressBar speaks).
_last_progress = [0.0]


class ProgressBar:
    """A one-line progress display on stderr (a plain log line per message when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = ""

    def __call__(self, done: float, total: float | None, message: str) -> None:
        _last_progress[0] = time.monotonic()
        if total:
            width = 24
            filled = int(width * min(1.0, done / total))
            text = f"[{'#' * filled}{'.' * (width - filled)}] {message}"
        else:
            text = message
        if text == self.last:
            return
        self.last = text
        if self.tty:
            sys.stderr.write("\r\033[K" + text[:120])
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self.last:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Heartbeat:
    """Progress for a command without progress of its own: after ``after_s`` seconds without any progress line,
    ``ptt COMMAND: working (N s)`` on stderr, rewritten each second on a terminal, otherwise a line at
    ``after_s`` and then every ``every_s`` seconds. Every command runs under one (see ``cli.run``)."""

    def __init__(self, label: str, after_s: float = 3.0, every_s: float = 15.0) -> None:
        self.label, self.after_s, self.every_s = label, after_s, every_s
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.shown = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        tty = sys.stderr.isatty()
        last_line = 0.0
        while not self.stop.wait(1.0):
            now = time.monotonic()
            if now - self.started < self.after_s or now - _last_progress[0] < self.after_s:
                continue
            if not tty and self.shown and now - last_line < self.every_s:
                continue
            text = f"ptt {self.label}: working ({now - self.started:.0f} s)"
            try:
                sys.stderr.write(("\r\033[K" + text) if tty else text + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                return
            self.shown, last_line = True, now

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(2.0)
        if self.shown and sys.stderr.isatty():
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
