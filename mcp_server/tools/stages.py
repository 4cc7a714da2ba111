"""MCP tools over the stage ledger: stage_start, stage_submit, stage_status, stage_best. The engine
(:mod:`mcp_server.engine.stages`) decides every verdict."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_server.engine import stages as engine
from mcp_server.engine.params import STAGE_BEST, STAGE_START, STAGE_STATUS, STAGE_SUBMIT
from mcp_server.engine.stages.models import BestAttempt, ConversionStatus, LedgerStatus, SubmitResult
from mcp_server.tools._common import (
    READ_ONLY,
    WRITES,
    WRITES_IDEMPOTENT,
    Placement,
    call_engine,
    callable_spec,
    tool_function,
)


def _saver(ledger: str | None):
    """Source text is kept under the ledger's folder (by content hash), so the ledger can show it later."""

    def save(source: str, role: str) -> Path:
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        path = engine.ledger_path(ledger).parent / "sources" / digest / f"{role}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(source, encoding="utf-8")
        return path

    return save


async def _start(ctx: Context, args: dict[str, Any]) -> ConversionStatus:
    ref = callable_spec(args, "reference", save=_saver(args["ledger"]))
    return await call_engine(
        engine.start, args["name"], ref, args["inputs"], notes=args["notes"], ledger=args["ledger"]
    )


async def _submit(ctx: Context, args: dict[str, Any]) -> SubmitResult:
    cand = callable_spec(args, "candidate", save=_saver(args["ledger"]))
    return await call_engine(
        engine.submit,
        args["name"],
        cand,
        args["stage"],
        no_autotune_reason=args["no_autotune_reason"],
        allow_torch_ops=tuple(args["allow_torch_ops"] or ()),
        ledger=args["ledger"],
    )


async def _status(ctx: Context, args: dict[str, Any]) -> LedgerStatus:
    return await call_engine(engine.status, args["name"], ledger=args["ledger"])


async def _best(ctx: Context, args: dict[str, Any]) -> BestAttempt:
    return await call_engine(engine.best, args["name"], args["stage"], ledger=args["ledger"])


stage_start = tool_function(
    STAGE_START,
    _start,
    returns=ConversionStatus,
    doc="""Begin (or resume) a staged conversion of a PyTorch reference into Triton. Calling it again with the same
    name and reference returns the conversion's current status, so it is safe at the start of every session.
    The ledger records every attempt; a stage passes only when stage_submit's own tool runs show its gate met:
    1 correct (validation), 2 autotuned and faster than stage 1, 3 at least torch.compile's speed on every size
    and an audit without errors. Next: write a simple correct kernel and call stage_submit with stage=1.""",
)
stage_submit = tool_function(
    STAGE_SUBMIT,
    _submit,
    returns=SubmitResult,
    doc="""Submit a candidate for a stage of a conversion started with stage_start. The tool runs the evidence
    itself — validation always; for stages 2-3 one bench timing this candidate with the best passing stage-1
    attempt beside it, in the same rounds; for stage 3 the audit — records the attempt with its source, and
    returns the gate's verdict: passed, failed (each unmet condition in verdict.reasons) or pending (part of the
    gate cannot be measured here, e.g. no GPU: say so to the user rather than estimating). Fix what
    verdict.reasons says and submit again; the same code submitted again (renamed or recommented too) is judged
    on all its benches' timing rounds together (against torch.compile, and against the same stage-1 attempt), so
    change the kernel rather than resubmit it. After a pass, follow next_step. Keep each stage in its own file:
    stage 1 is the baseline.""",
)
stage_status = tool_function(
    STAGE_STATUS,
    _status,
    returns=LedgerStatus,
    doc="""Where each conversion stands: stage reached, attempts, best speedup vs eager and vs torch.compile, % of
    roofline, the next gate's state with every unmet condition, and next_step. Read-only. Call it when resuming
    work, or to report progress to the user from recorded evidence.""",
)
stage_best = tool_function(
    STAGE_BEST,
    _best,
    returns=BestAttempt,
    doc="""The source text of the best passing attempt of a stage (fastest where timed, else the latest), as it was
    submitted — to roll back after a later attempt regressed, or to hand the user the final kernel. Read-only.""",
)


def register(server: MCPServer, placement: Placement) -> None:
    server.add_tool(stage_start, annotations=WRITES_IDEMPOTENT, title="Start (or resume) a staged conversion")
    server.add_tool(stage_submit, annotations=WRITES, title="Submit an attempt against a stage gate")
    server.add_tool(stage_status, annotations=READ_ONLY, title="Status of the stage ledger")
    server.add_tool(stage_best, annotations=READ_ONLY, title="Best passing attempt's source")
