"""`ptt audit`: review a Triton file — static rules, compiled code, the correctness suite and timings.

Prints the report as Markdown (``--json`` for the model, ``--out`` to write the Markdown to a file) and exits 1
when any finding is an error.
"""

from __future__ import annotations

import argparse
from typing import Any

from mcp_server.cli._common import EXIT_FAILED, EXIT_OK, ProgressBar, add_params, values
from mcp_server.engine.params import AUDIT
from mcp_server.engine.specs import output_path


def cmd_audit(args: argparse.Namespace) -> int:
    from mcp_server.engine.audit import SECTIONS, SUITE, audit, render_markdown

    v = values(args, AUDIT)
    out = v.pop("out")
    v["sections"] = v["sections"] or SECTIONS
    v["suite"] = v["suite"] or SUITE
    with ProgressBar() as bar:
        report = audit(v.pop("file"), progress=bar, **v)
    markdown = render_markdown(report)
    if out:
        output_path(out, "--out").write_text(markdown, encoding="utf-8")
    if args.json:
        print(report.model_dump_json(indent=2))
    elif out:
        print(report.summary)
        for c in report.categories:
            print(f"  {c.title:<20} {c.status:<12} errors {c.errors}  warnings {c.warnings}  info {c.info}")
        print(f"report written to {out}")
    else:
        print(markdown)
    return EXIT_OK if report.ok else EXIT_FAILED


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="review a Triton file: static rules, compiled code, the correctness suite and timings",
        description="Audit the Triton kernels in FILE (path.py, or path.py:launcher). Exit 1 on error findings.",
    )
    add_params(p, AUDIT)
    p.set_defaults(fn=cmd_audit)
