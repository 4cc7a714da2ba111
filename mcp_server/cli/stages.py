"""`ptt stages start|submit|status|show|best`: the stage ledger. The engine (:mod:`mcp_server.engine.stages`)
decides every verdict; this module passes the arguments and renders the results.

Exit codes of `ptt stages submit`: 0 the gate passed, 1 it failed (the reasons are printed), 3 it is pending
because this machine cannot measure part of it (no GPU, no audit); 2 for misuse, as everywhere in `ptt`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcp_server.cli._common import EXIT_ENV, EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_params, values
from mcp_server.cli.render import INTERPRETER_BANNER, findings_block, table
from mcp_server.engine import stages as engine
from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import INTERPRETER_DEVICE
from mcp_server.engine.params import STAGE_BEST, STAGE_SHOW, STAGE_START, STAGE_STATUS, STAGE_SUBMIT
from mcp_server.engine.stages.models import ConversionDetail, ConversionStatus, LedgerStatus, SubmitResult

_VERDICT_EXIT = {"passed": EXIT_OK, "failed": EXIT_FAILED, "pending": EXIT_ENV}
_STATE_MARK = {"met": "ok", "unmet": "NOT MET", "pending": "pending"}


# --- rendering ------------------------------------------------------------------------------------------------


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def _gate_text(c: ConversionStatus) -> str:
    return "all passed" if c.next_gate.state == "passed" else f"stage {c.next_gate.stage}: {c.next_gate.state}"


def render_status(result: LedgerStatus) -> str:

    if not result.exists:
        return f"No stage ledger at {result.ledger} yet. Start one: ptt stages start NAME REFERENCE.py:fn"
    if not result.conversions:
        return f"ledger {result.ledger}: no conversions yet. Start one: ptt stages start NAME REFERENCE.py:fn"
    rows = [
        [
            c.name,
            c.stage_reached,
            c.attempts,
            _x(c.best_speedup_vs_eager),
            _x(c.best_speedup_vs_compile),
            _pct(c.best_pct_of_roofline),
            _gate_text(c),
        ]
        for c in result.conversions
    ]
    out = [
        f"ledger {result.ledger}",
        table(
            ["conversion", "stage", "attempts", "best × eager", "best × compile", "% roofline", "next gate"],
            rows,
            right=(1, 2, 3, 4, 5),
        ),
    ]
    for c in result.conversions:
        out.append(f"\n{c.name}:")
        for reason in c.next_gate.reasons if c.next_gate.state != "passed" else []:
            out.append(f"  - {reason}")
        out.append(f"  next: {c.next_step}")
    if result.plot:
        out.append(f"\nplot: {result.plot}")
    return "\n".join(out)


def _checks_table(checks: list[Any]) -> str:

    return table(["check", "state", "detail"], [[c.name, _STATE_MARK[c.state], c.detail] for c in checks])


def render_submit(result: SubmitResult) -> str:

    out = []
    if result.device == INTERPRETER_DEVICE:
        out.append(INTERPRETER_BANNER)
    out.append(
        f"{result.name}: attempt #{result.attempt} at stage {result.stage}: {result.verdict.state.upper()}"
        f"   (stage reached: {result.stage_reached}, device {result.device})"
    )
    out.append(f"candidate {result.candidate}  sha256 {result.sha256[:12]}")
    out.append(_checks_table(result.verdict.checks))
    if result.speeds:
        out.append(
            table(
                ["size", "median ms", "stage-1 ms", "× stage 1", "× eager", "× compile", "% roofline"],
                [
                    [
                        s.case,
                        "-" if s.median_ms is None else f"{s.median_ms:.4g}",
                        "-" if s.baseline_ms is None else f"{s.baseline_ms:.4g}",
                        _x(s.speedup_vs_stage1),
                        _x(s.speedup_vs_eager),
                        _x(s.speedup_vs_compile),
                        _pct(s.pct_of_roofline),
                    ]
                    for s in result.speeds
                ],
                right=(1, 2, 3, 4, 5, 6),
            )
        )
    if result.findings:
        out.append(findings_block(result.findings))
    out.append(f"next: {result.next_step}")
    return "\n".join(out)


def render_show(result: ConversionDetail) -> str:

    c = result.conversion
    out = [
        f"{c.name}: stage reached {c.stage_reached}, {c.attempts} attempt(s)   ledger {result.ledger}",
        f"reference {c.reference}" + (f"   inputs {c.inputs}" if c.inputs else ""),
    ]
    if c.notes:
        out.append(f"notes {c.notes}")
    rows = [
        [
            a.number,
            a.stage,
            a.verdict.state,
            a.device,
            _x(a.speedup_vs_stage1),
            _x(a.speedup_vs_eager),
            _x(a.speedup_vs_compile),
            _pct(a.pct_of_roofline),
            a.sha256[:10],
            a.submitted_at[:19].replace("T", " "),
            a.candidate,
        ]
        for a in result.attempts
    ]
    if rows:
        out.append(
            table(
                [
                    "#",
                    "stage",
                    "verdict",
                    "device",
                    "× stage 1",
                    "× eager",
                    "× compile",
                    "% roofline",
                    "sha256",
                    "submitted (UTC)",
                    "candidate",
                ],
                rows,
                right=(0, 1, 4, 5, 6, 7),
            )
        )
    for a in result.attempts:
        if a.verdict.reasons:
            out.append(f"#{a.number} (stage {a.stage}, {a.verdict.state}):")
            out.extend(f"  - {r}" for r in a.verdict.reasons)
    out.append(f"next: {c.next_step}")
    return "\n".join(out)


# --- commands -------------------------------------------------------------------------------------------------


def _print(result: Any, as_json: bool, render: Any) -> None:
    print(result.model_dump_json(indent=2) if as_json else render(result))


def _started(c: ConversionStatus) -> str:
    return f"conversion {c.name}: reference {c.reference}, {c.attempts} attempt(s)\nnext: {c.next_step}"


def cmd_start(args: argparse.Namespace) -> int:
    v = values(args, STAGE_START)
    result = engine.start(v["name"], v["reference"], v["inputs"], notes=v["notes"], ledger=v["ledger"])
    _print(result, args.json, _started)
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    v = values(args, STAGE_SUBMIT)
    result = engine.submit(
        v["name"],
        v["candidate"],
        v["stage"],
        no_autotune_reason=v["no_autotune_reason"],
        allow_torch_ops=v["allow_torch_ops"],
        ledger=v["ledger"],
    )
    _print(result, args.json, render_submit)
    return _VERDICT_EXIT[result.verdict.state]


def cmd_status(args: argparse.Namespace) -> int:
    v = values(args, STAGE_STATUS)
    _print(engine.status(v["name"], ledger=v["ledger"], plot=v["plot"]), args.json, render_status)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    v = values(args, STAGE_SHOW)
    _print(engine.show(v["name"], ledger=v["ledger"], full=v["full"]), args.json, render_show)
    return EXIT_OK


def cmd_best(args: argparse.Namespace) -> int:
    v = values(args, STAGE_BEST)
    result = engine.best(v["name"], v["stage"], ledger=v["ledger"])
    if v["write"]:
        target = Path(v["write"])
        if target.exists() and not v["force"]:
            raise UsageError(f"{target} exists; pass --force to overwrite it, or --write another path.")
        target.write_text(result.source, encoding="utf-8")
    if args.json:
        print(result.model_dump_json(indent=2))
        return EXIT_OK
    where = f"wrote {v['write']}" if v["write"] else ""
    sys.stderr.write(
        f"{result.name} stage {result.stage}: attempt #{result.attempt}, {result.chosen_by}; "
        f"{result.candidate} {'unchanged' if result.file_unchanged else 'has changed since'}; sha256 "
        f"{result.sha256[:12]}. {where}\n"
    )
    if not v["write"]:
        sys.stdout.write(result.source)
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("stages", help="the stage ledger: record attempts; a stage passes only on the tools' evidence")
    stages_sub = p.add_subparsers(dest="stages_command", metavar="STAGES_COMMAND", parser_class=type(p))

    def usage(_args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return EXIT_USAGE

    p.set_defaults(fn=usage)
    commands = (
        (STAGE_START, cmd_start, "begin a conversion of a PyTorch reference"),
        (STAGE_SUBMIT, cmd_submit, "validate (and bench, audit) a candidate and record it against a stage gate"),
        (STAGE_STATUS, cmd_status, "where every conversion stands, and why its next gate is not met"),
        (STAGE_SHOW, cmd_show, "every attempt of a conversion with its verdict"),
        (STAGE_BEST, cmd_best, "the source of the best passing attempt of a stage (to roll back)"),
    )
    for params, fn, help in commands:
        s = stages_sub.add_parser(params.command[-1], help=help)
        add_params(s, params)
        s.set_defaults(fn=fn)
