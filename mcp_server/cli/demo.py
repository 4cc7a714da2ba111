"""`ptt demo`: the whole pipeline on the bundled softmax example — device, docs, compile, validate, bench, audit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mcp_server.cli.render import INTERPRETER_BANNER, render_bench, render_compile, render_validate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _step(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)))


def demo_docs(dest: Path | None = None) -> str:
    """Sync the docs, falling back to the installed-Triton build when offline."""
    from mcp_server.engine.docs import build_offline, sync

    report = sync(dest, timeout_s=8.0, retries=1)
    if not report.ok:
        report = build_offline(dest)
    kind = "offline build from the installed Triton" if report.offline else "fetched from the web"
    return json.dumps({"ok": report.ok, "dest": report.dest, "source": kind, "sections": report.sections_indexed})


def run_demo() -> int:
    from mcp_server.engine.compile import compile_kernel
    from mcp_server.engine.device import probe
    from mcp_server.engine.validate import validate

    problem = EXAMPLES / "softmax_problem.py"
    kernel = EXAMPLES / "softmax_triton.py"
    device = probe()
    _step("device")
    if device.interpreter:
        print(INTERPRETER_BANNER)
    print(f"{device.device}   torch {device.torch}   triton {device.triton}   compile target {device.target}")

    _step("Triton docs cache")
    docs = demo_docs()
    print(docs)

    _step(f"compile {kernel.name}:softmax_kernel for {device.target}")
    compiled = compile_kernel(
        f"{kernel}:softmax_kernel", signature="*bf16, *bf16, i32, i32:16, i32:16", constexprs={"BLOCK": 8192}
    )
    print(render_compile(compiled))

    _step("validate against torch.softmax")
    verdict = validate(f"{problem}:reference", f"{kernel}:softmax")
    print(render_validate(verdict))

    _step("bench against eager PyTorch and torch.compile")
    timed = None
    if device.interpreter:
        print("skipped: timing needs a CUDA GPU (interpreter timings would be meaningless)")
    else:
        from mcp_server.engine.bench import bench

        timed = bench(f"{kernel}:softmax", f"{problem}:reference", validate_first=False)
        print(render_bench(timed))

    _step("audit: static rules, the compiled kernel, a correctness suite" + ("" if device.interpreter else ", timings"))
    from mcp_server.engine.audit import audit

    review = audit(f"{kernel}:softmax", reference=f"{problem}:reference", suite=("base", "zeros", "large", "nan"))
    print(review.summary)
    for finding in review.findings:
        if finding.severity.value != "info":
            print(f"  {finding.severity.value:<7} {finding.rule} [{finding.where}]: {finding.message}")

    _step("summary")
    print(f"docs      {docs}")
    print(f"compile   {'ok' if compiled.ok else 'FAILED'}")
    print(f"validate  {verdict.summary}")
    print(f"bench     {timed.summary if timed else 'skipped (no GPU)'}")
    print(f"audit     {review.summary}")
    ok = compiled.ok and verdict.ok and (timed is None or timed.ok) and review.ok
    return 0 if ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo()


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on a bundled example kernel")
    p.set_defaults(fn=cmd_demo)
