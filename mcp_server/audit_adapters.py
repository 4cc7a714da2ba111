"""`ptt audit` and the MCP tool `audit` / prompt `audit-triton`: thin adapters over ``engine.audit``.

The CLI prints the report as Markdown (``--json`` for the model, ``--out`` to write the Markdown to a file)
and exits 1 when any finding is an error. The MCP tool returns the :class:`AuditReport` with its Markdown
filled in; the prompt tells an agent how to run the audit and act on it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from mcp_server.engine.audit.dynamic import SUITE
from mcp_server.engine.audit.models import SECTIONS, AuditReport
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.runner import RunnerError

EXIT_OK, EXIT_FAILED = 0, 1
READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False, destructiveHint=False)


def _csv(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if not text:
        return default
    return tuple(s.strip() for s in text.split(",") if s.strip())


# --- CLI ------------------------------------------------------------------------------------------------


def cmd_audit(args: argparse.Namespace) -> int:
    from mcp_server.cli import _ProgressBar
    from mcp_server.engine.audit import audit, render_markdown

    bar = _ProgressBar()
    try:
        report = audit(
            args.file,
            reference=args.reference,
            inputs=args.inputs,
            target=args.target,
            sizes=args.sizes,
            sections=_csv(args.sections, SECTIONS),
            suite=_csv(args.suite, SUITE),
            backward=args.backward,
            timeout_s=args.timeout,
            progress=bar,
        )
    finally:
        bar.close()
    markdown = render_markdown(report)
    if args.out:
        Path(args.out).write_text(markdown, encoding="utf-8")
    if args.json:
        print(report.model_dump_json(indent=2))
    elif args.out:
        print(report.summary)
        for c in report.categories:
            print(f"  {c.title:<20} {c.status:<12} errors {c.errors}  warnings {c.warnings}  info {c.info}")
        print(f"report written to {args.out}")
    else:
        print(markdown)
    return EXIT_OK if report.ok else EXIT_FAILED


def register_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "audit",
        help="review a Triton file: static rules, compiled code, the correctness suite and timings",
        description="Audit the Triton kernels in FILE (path.py, or path.py:launcher). Exit 1 on error findings.",
    )
    p.add_argument("file", help="path.py or path.py:launcher (default launcher: the SPEC's best stage, ModelNew, …)")
    p.add_argument("--reference", help="path.py:fn — the PyTorch reference (default: the file's SPEC/reference*)")
    p.add_argument("--inputs", help="'f32[1024,512], i32=7' or path.py:make_inputs (default: the reference's)")
    p.add_argument("--target", help="compile target: cuda:80 | cuda:90 | cuda:100 (default: the local GPU's, else 90)")
    p.add_argument("--sections", help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    p.add_argument("--suite", help=f"correctness runs, comma-separated subset of {','.join(SUITE)} (default: all)")
    p.add_argument("--sizes", help="bench sizes for the symbols in --inputs (see `ptt bench --help`)")
    p.add_argument("--backward", action="store_true", help="also check gradients (and compile backward kernels)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per isolated child (default 300)")
    p.add_argument("--json", action="store_true", help="print the report model as JSON")
    p.add_argument("--out", metavar="REPORT.md", help="write the Markdown report to this file")
    p.set_defaults(fn=cmd_audit)


# --- MCP ------------------------------------------------------------------------------------------------

FileArg = Annotated[
    str | None,
    Field(
        description="The file to audit, as path/to/kernels.py or path/to/kernels.py:launcher (the Python function "
        "that launches the kernels; default: the SPEC's best stage, ModelNew, `candidate`, or the only public "
        "launcher)."
    ),
]
SourceArg = Annotated[str | None, Field(description="Python source text of the file instead of a path.")]
NameArg = Annotated[str | None, Field(description="With file_source: the launcher's name inside the source.")]
ReferenceArg = Annotated[
    str | None,
    Field(description="The PyTorch reference as path.py:fn (default: the file's SPEC.reference, Model or reference*)."),
]
InputsArg = Annotated[
    str | None,
    Field(
        description="Inputs: 'bf16[4096,8192], f32[8192]' or path.py:fn returning the arguments (or a dict of "
        "labelled cases). Default: the reference module's get_test_cases() or get_inputs()."
    ),
]


async def audit(
    ctx: Context,
    file: FileArg = None,
    file_source: SourceArg = None,
    launcher_name: NameArg = None,
    reference: ReferenceArg = None,
    inputs: InputsArg = None,
    target: Annotated[
        str | None, Field(description="Compile target: cuda:80, cuda:90 or cuda:100; default the local GPU's, else 90.")
    ] = None,
    sections: Annotated[
        list[Literal["static", "compiled", "correctness", "performance"]] | None,
        Field(description="Sections to run; default all four."),
    ] = None,
    suite: Annotated[
        list[
            Literal[
                "base",
                "zeros",
                "ones",
                "large",
                "small",
                "negative",
                "alternating",
                "near_overflow",
                "near_underflow",
                "inf",
                "nan",
            ]
        ]
        | None,
        Field(description="Correctness runs; default all eleven (base cases + ten value transforms)."),
    ] = None,
    backward: Annotated[bool, Field(description="Also check gradients and compile the backward kernels.")] = False,
    sizes: Annotated[str | None, Field(description="Bench sizes for symbols in a type-list input.")] = None,
    markdown: Annotated[bool, Field(description="Fill in the `markdown` field with the report as Markdown.")] = True,
    timeout_s: Annotated[float, Field(ge=1, le=3600, description="Seconds each isolated child may run.")] = 300.0,
) -> AuditReport:
    """Review Triton code the way an experienced reviewer would, with evidence. Four sections: (1) static AST
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
    from mcp_server.engine.audit import audit as run
    from mcp_server.engine.audit import render_markdown
    from mcp_server.engine.specs import source_to_file

    if file and file_source:
        raise ToolError("Give the file either as a path or as file_source, not both.")
    if file_source:
        path = source_to_file(file_source, stem="kernels")
        file = f"{path}:{launcher_name}" if launcher_name else str(path)
    if not file:
        raise ToolError("The file is missing: pass file='path/to/kernels.py' (or :launcher), or file_source.")

    def progress(done: float, total: float | None, message: str) -> None:
        with contextlib.suppress(Exception):
            anyio.from_thread.run(ctx.report_progress, done, total, message)

    call = functools.partial(
        run,
        file,
        reference=reference,
        inputs=inputs,
        target=target,
        sizes=sizes,
        sections=tuple(sections or SECTIONS),
        suite=tuple(suite or SUITE),
        backward=backward,
        timeout_s=timeout_s,
        progress=progress,
    )
    try:
        report: AuditReport = await anyio.to_thread.run_sync(call)
    except UsageError as exc:
        raise ToolError(str(exc)) from None
    except (EnvironmentUnavailable, RunnerError) as exc:
        raise ToolError(f"This machine cannot do that: {exc}") from None
    if markdown:
        report.markdown = render_markdown(report)
    return report


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


def register_tools(server: Any) -> None:
    server.add_tool(audit, annotations=READ_ONLY, title="Audit a Triton kernel file")
    server.prompt(
        name="audit-triton",
        title="Audit a Triton kernel",
        description="Run the audit tool on a Triton file (optionally against a PyTorch reference) and act on its "
        "findings.",
    )(audit_triton_prompt)
