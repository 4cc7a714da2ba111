"""Adapters for the stage ledger: `ptt stages start|submit|status|show|best` and the MCP tools
stage_start, stage_submit, stage_status, stage_best. No logic here beyond arguments and rendering: the engine
(:mod:`mcp_server.engine.stages`) decides every verdict.

Exit codes of `ptt stages submit`: 0 the gate passed, 1 it failed (the reasons are printed), 3 it is pending
because this machine cannot measure part of it (no GPU, no audit); 2 for misuse, as everywhere in `ptt`.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from mcp_server.engine import stages as engine
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.models import INTERPRETER_DEVICE
from mcp_server.engine.stages.models import (
    BestAttempt,
    ConversionDetail,
    ConversionStatus,
    LedgerStatus,
    SubmitResult,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ENV = 0, 1, 2, 3
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
    from mcp_server.render import table

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
    from mcp_server.render import table

    return table(["check", "state", "detail"], [[c.name, _STATE_MARK[c.state], c.detail] for c in checks])


def render_submit(result: SubmitResult) -> str:
    from mcp_server.render import INTERPRETER_BANNER, findings_block, table

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
    from mcp_server.render import table

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


# --- CLI ------------------------------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ledger", help="ledger file (default: $PTT_LEDGER, else .ptt/ledger.db in this folder)")
    p.add_argument("--json", action="store_true", help="print the result model as JSON")


def _print(result: Any, as_json: bool, render: Any) -> None:
    print(result.model_dump_json(indent=2) if as_json else render(result))


def cmd_start(args: argparse.Namespace) -> int:
    result = engine.start(args.name, args.reference, args.inputs, notes=args.notes, ledger=args.ledger)
    _print(
        result,
        args.json,
        lambda c: f"conversion {c.name}: reference {c.reference}, {c.attempts} attempt(s)\nnext: {c.next_step}",
    )
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    result = engine.submit(
        args.name, args.candidate, args.stage, no_autotune_reason=args.no_autotune_reason, ledger=args.ledger
    )
    _print(result, args.json, render_submit)
    return _VERDICT_EXIT[result.verdict.state]


def cmd_status(args: argparse.Namespace) -> int:
    _print(engine.status(args.name, ledger=args.ledger, plot=args.plot), args.json, render_status)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    _print(engine.show(args.name, ledger=args.ledger, full=args.full), args.json, render_show)
    return EXIT_OK


def cmd_best(args: argparse.Namespace) -> int:
    result = engine.best(args.name, args.stage, ledger=args.ledger)
    if args.write:
        target = Path(args.write)
        if target.exists() and not args.force:
            raise UsageError(f"{target} exists; pass --force to overwrite it, or --write another path.")
        target.write_text(result.source, encoding="utf-8")
    if args.json:
        print(result.model_dump_json(indent=2))
        return EXIT_OK
    where = f"wrote {args.write}" if args.write else ""
    sys.stderr.write(
        f"{result.name} stage {result.stage}: attempt #{result.attempt}, {result.chosen_by}; "
        f"{result.candidate} {'unchanged' if result.file_unchanged else 'has changed since'}; sha256 "
        f"{result.sha256[:12]}. {where}\n"
    )
    if not args.write:
        sys.stdout.write(result.source)
    return EXIT_OK


def register_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "stages", help="the stage ledger: record attempts; a stage passes only on the tools' evidence"
    )
    sub = p.add_subparsers(dest="stages_command", metavar="STAGES_COMMAND", parser_class=type(p))

    def usage(_args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return EXIT_USAGE

    p.set_defaults(fn=usage)

    s = sub.add_parser("start", help="begin a conversion of a PyTorch reference")
    s.add_argument("name", help="a short name, e.g. softmax")
    s.add_argument("reference", help="path.py:fn (or a KernelBench problem file)")
    s.add_argument("--inputs", help="'f32[1024,512], i32=7' or path.py:make_inputs (default: the reference's)")
    s.add_argument("--notes", help="free text kept with the conversion")
    _common(s)
    s.set_defaults(fn=cmd_start)

    s = sub.add_parser("submit", help="validate (and bench, audit) a candidate and record it against a stage gate")
    s.add_argument("name")
    s.add_argument("candidate", help="path.py:fn (or a KernelBench solution file with ModelNew)")
    s.add_argument("--stage", type=int, choices=(1, 2, 3), required=True)
    s.add_argument(
        "--no-autotune-reason",
        metavar="TEXT",
        help="stages 2-3 without @triton.autotune: why (e.g. 'fixed shapes, tuned by hand')",
    )
    _common(s)
    s.set_defaults(fn=cmd_submit)

    s = sub.add_parser("status", help="where every conversion stands, and why its next gate is not met")
    s.add_argument("name", nargs="?")
    s.add_argument("--plot", metavar="PNG", help="also write a plot of speed per attempt (needs matplotlib)")
    _common(s)
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("show", help="every attempt of a conversion with its verdict")
    s.add_argument("name")
    s.add_argument("--full", action="store_true", help="with the tools' complete results (use with --json)")
    _common(s)
    s.set_defaults(fn=cmd_show)

    s = sub.add_parser("best", help="the source of the best passing attempt of a stage (to roll back)")
    s.add_argument("name")
    s.add_argument("--stage", type=int, choices=(1, 2, 3), help="default: the highest stage passed")
    s.add_argument("--write", metavar="PATH", help="write the source to this file instead of printing it")
    s.add_argument("--force", action="store_true", help="overwrite the --write file if it exists")
    _common(s)
    s.set_defaults(fn=cmd_best)


# --- MCP ------------------------------------------------------------------------------------------------------

WRITES = ToolAnnotations(readOnlyHint=False, idempotentHint=False, openWorldHint=False, destructiveHint=False)
WRITES_IDEMPOTENT = ToolAnnotations(readOnlyHint=False, idempotentHint=True, openWorldHint=False, destructiveHint=False)
READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False, destructiveHint=False)

ConversionName = Annotated[
    str, Field(description="The conversion's name, e.g. 'softmax' (letters, digits, '.', '_', '-').")
]
LedgerFile = Annotated[
    str | None,
    Field(description="Ledger file; default $PTT_LEDGER, else .ptt/ledger.db in the server's working folder."),
]
SpecArg = Annotated[str | None, Field(description="A callable in a file, as path/to/file.py:name.")]
SourceArg = Annotated[
    str | None,
    Field(description="Python source text instead of a file; kept under the ledger's folder, named by *_name."),
]
SourceName = Annotated[str | None, Field(description="Name of the callable inside the given source text.")]


def _spec(spec: str | None, source: str | None, name: str | None, role: str, ledger: str | None) -> str:
    if spec and source:
        raise ToolError(f"Give the {role} either as a file spec or as source text, not both.")
    if source:
        if not name:
            raise ToolError(f"{role}_name is required with {role}_source: name the callable defined in the source.")
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        path = engine.ledger_path(ledger).parent / "sources" / digest / f"{role}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(source, encoding="utf-8")
        return f"{path}:{name}"
    if not spec:
        raise ToolError(f"The {role} is missing: pass {role}='path/to/file.py:name' or {role}_source + {role}_name.")
    return spec


async def _call(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    from mcp_server.engine.runner import RunnerError

    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    except UsageError as exc:
        raise ToolError(str(exc)) from None
    except (EnvironmentUnavailable, RunnerError) as exc:
        raise ToolError(f"This machine cannot do that: {exc}") from None


async def stage_start(
    name: ConversionName,
    reference: SpecArg = None,
    reference_source: SourceArg = None,
    reference_name: SourceName = None,
    inputs: Annotated[
        str | None,
        Field(
            description="Inputs: a type list such as 'bf16[4096,8192], f32[8192]', or path.py:function; "
            "default: the reference module's get_test_cases() or get_inputs()."
        ),
    ] = None,
    notes: Annotated[str | None, Field(description="Free text kept with the conversion.")] = None,
    ledger: LedgerFile = None,
) -> ConversionStatus:
    """Begin (or resume) a staged conversion of a PyTorch reference into Triton. Calling it again with the same
    name and reference returns the conversion's current status, so it is safe at the start of every session.
    The ledger records every attempt; a stage passes only when stage_submit's own tool runs show its gate met:
    1 correct (validation), 2 autotuned and faster than stage 1, 3 at least torch.compile's speed on every size
    and an audit without errors. Next: write a simple correct kernel and call stage_submit with stage=1."""
    ref = _spec(reference, reference_source, reference_name, "reference", ledger)
    return await _call(engine.start, name, ref, inputs, notes=notes, ledger=ledger)


async def stage_submit(
    name: ConversionName,
    stage: Annotated[int, Field(ge=1, le=3, description="The stage this attempt claims: 1, 2 or 3.")],
    candidate: SpecArg = None,
    candidate_source: SourceArg = None,
    candidate_name: SourceName = None,
    no_autotune_reason: Annotated[
        str | None,
        Field(
            description="Stages 2-3 only, when the kernel is deliberately not @triton.autotune'd: why "
            "(e.g. 'fixed shapes, tuned by hand'). Recorded with the attempt."
        ),
    ] = None,
    ledger: LedgerFile = None,
) -> SubmitResult:
    """Submit a candidate for a stage of a conversion started with stage_start. The tool runs the evidence
    itself — validation always; for stages 2-3 a bench of this candidate and of the best passing stage-1
    attempt; for stage 3 the audit — records the attempt with its source, and returns the gate's verdict:
    passed, failed (each unmet condition in verdict.reasons) or pending (part of the gate cannot be measured
    here, e.g. no GPU: say so to the user rather than estimating). Fix what verdict.reasons says and submit
    again; after a pass, follow next_step. Keep each stage in its own file: stage 1 is the baseline."""
    cand = _spec(candidate, candidate_source, candidate_name, "candidate", ledger)
    return await _call(engine.submit, name, cand, stage, no_autotune_reason=no_autotune_reason, ledger=ledger)


async def stage_status(
    name: Annotated[str | None, Field(description="One conversion; default all.")] = None,
    ledger: LedgerFile = None,
) -> LedgerStatus:
    """Where each conversion stands: stage reached, attempts, best speedup vs eager and vs torch.compile, % of
    roofline, the next gate's state with every unmet condition, and next_step. Read-only. Call it when resuming
    work, or to report progress to the user from recorded evidence."""
    return await _call(engine.status, name, ledger=ledger)


async def stage_best(
    name: ConversionName,
    stage: Annotated[int | None, Field(ge=1, le=3, description="Default: the highest stage passed.")] = None,
    ledger: LedgerFile = None,
) -> BestAttempt:
    """The source text of the best passing attempt of a stage (fastest where timed, else the latest), as it was
    submitted — to roll back after a later attempt regressed, or to hand the user the final kernel. Read-only."""
    return await _call(engine.best, name, stage, ledger=ledger)


def register_tools(server: Any) -> None:
    server.add_tool(stage_start, annotations=WRITES_IDEMPOTENT, title="Start (or resume) a staged conversion")
    server.add_tool(stage_submit, annotations=WRITES, title="Submit an attempt against a stage gate")
    server.add_tool(stage_status, annotations=READ_ONLY, title="Status of the stage ledger")
    server.add_tool(stage_best, annotations=READ_ONLY, title="Best passing attempt's source")
