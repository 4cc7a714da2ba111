"""MCP tool ``audit`` and prompt ``audit-triton``: the review of a Triton file, with evidence."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcp_server.engine.audit import SECTIONS, SUITE, AuditReport
from mcp_server.engine.params import AUDIT
from mcp_server.tools._common import READ_ONLY, Placement, call_engine, progress_to, tool_function

DOC = """Review Triton code the way an experienced reviewer would, with evidence. Four sections: (1) static AST
    rules over every @triton.jit kernel and launcher; (2) the kernels the launcher actually launched, compiled
    for the target GPU (no GPU needed) — register spills, local memory, occupancy and its limiter, 128-bit
    vectorisation, tensor-core use of tl.dot, stray fp64, shared memory near the limit; (3) the correctness
    suite against the PyTorch reference — base cases, zeros/ones/large/small/negative/alternating/near
    overflow/near underflow/inf/nan inputs, derived sizes, determinism, each tiered pass / pass only at 10× the
    tolerance / fail; (4) timings vs eager and torch.compile with % of peak (needs a GPU; otherwise 'not
    checked', never passed). Returns five categories (correctness, performance, memory access, numerical
    stability, best practices) with status and counts, findings with rule, file:line and fix, recommendations,
    the ptt commands to reproduce, and the Markdown report. ok=false means error findings: fix them (most
    severe first) and audit again. Use it at the end of stage 3 and for any 'audit'/'review kernel' request."""


async def _audit(ctx: Context, args: dict[str, Any]) -> AuditReport:
    from mcp_server.engine.audit import audit as run
    from mcp_server.engine.audit import render_markdown
    from mcp_server.engine.specs import source_to_file

    file, source, launcher = args.pop("file"), args.pop("file_source"), args.pop("launcher_name")
    if file and source:
        raise ToolError("Give the file either as a path or as file_source, not both.")
    if source:
        path = source_to_file(source, stem="kernels")
        file = f"{path}:{launcher}" if launcher else str(path)
    if not file:
        raise ToolError("The file is missing: pass file='path/to/kernels.py' (or :launcher), or file_source.")
    markdown = args.pop("markdown")
    args["allow_torch_ops"] = tuple(args["allow_torch_ops"] or ())
    args["sections"] = tuple(args["sections"] or SECTIONS)
    args["suite"] = tuple(args["suite"] or SUITE)
    report: AuditReport = await call_engine(run, file, progress=progress_to(ctx), **args)
    if markdown:
        report.markdown = render_markdown(report)
    return report


audit = tool_function(AUDIT, _audit, returns=AuditReport, doc=DOC)


def audit_triton_prompt(file: str, reference: str | None = None) -> str:
    """Review a Triton kernel file with the audit tool and act on what it finds."""
    ref = f"reference={reference!r}" if reference else "no reference (the tool finds the file's SPEC/reference*)"
    return f"""Audit the Triton code in `{file}` and act on the result.

1. Call the `audit` tool with file={file!r} and {ref}. Leave sections at all four. If the file has several
   public launchers, name the one to audit as `path.py:launcher`.
2. Read `categories` first: five rows (Correctness, Performance, Memory access, Numerical stability, Best
   practices) with ✅/⚠️/❌/➖. A ➖ "not checked" category was not measured (e.g. performance without a
   GPU): say so; never report it as passed.
3. Work through `findings`, errors before warnings. Each has a rule id, `where` (file:line) and a concrete
   `fix`. Errors block stage 3: fix each one in the code, then call `audit` again (for correctness findings
   `validate_against_reference` is the faster loop). For a correctness run that passes only at the loose
   (10×) tolerance, look at the accumulator dtypes and the max-shift of exponentials first.
4. Static findings can be false alarms (the rules see code, not values). If a fix is not cheap and the code
   is right, silence that line with `# ptt-audit: ignore[rule-id]` plus a comment saying why.
5. Compiled findings name the kernel variant (constexprs, warps, stages); `reproduce` holds the exact
   `ptt compile` command to re-check one after changing tile sizes or num_warps.
6. When the user asked for a review, answer with the report's `markdown` (verdict, summary table, correctness
   table, compiled kernels, performance table, findings by severity with file:line and fix,
   recommendations, reproduce commands). Quote the tool's numbers; do not estimate timings it did not
   measure.
"""


def register(server: MCPServer, placement: Placement) -> None:
    server.add_tool(audit, annotations=READ_ONLY, title="Audit a Triton kernel file")
    server.prompt(
        name="audit-triton",
        title="Audit a Triton kernel",
        description="Run the audit tool on a Triton file (optionally against a PyTorch reference) and act on its "
        "findings.",
    )(audit_triton_prompt)
