"""Human-readable text for results: what `ptt` prints when --json is not given."""

from __future__ import annotations

from collections.abc import Sequence

from mcp_server.engine.models import (
    BenchResult,
    BenchRow,
    CompileResult,
    Finding,
    Severity,
    ToolResult,
    ValidateResult,
)
from mcp_server.engine.numbers import fmt_number

INTERPRETER_BANNER = (
    "No CUDA GPU: kernels ran under the Triton interpreter on CPU tensors (TRITON_INTERPRET=1). "
    "Correctness verdicts hold; timings and hardware figures do not."
)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = ()) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def findings_block(findings: Sequence[Finding]) -> str:
    if not findings:
        return "findings: none"
    lines = ["findings:"]
    for f in findings:
        where = f" [{f.where}]" if f.where else ""
        text = f.message.replace("\n", "\n      ")
        lines.append(f"  {f.severity.value:<7} {f.kind.value}{where}: {text}")
    return "\n".join(lines)


def banner(result: ToolResult) -> str:
    return INTERPRETER_BANNER if result.device == "cpu-interpreter" else ""


def render_validate(result: ValidateResult) -> str:
    out = []
    if b := banner(result):
        out.append(b)
    out.append(result.summary)
    out.append(f"reference  {result.reference}")
    out.append(f"candidate  {result.candidate}")
    extra = f"   weights {result.weights}" if result.weights else ""
    out.append(
        f"device     {result.device}   mode {result.mode}   reference precision {result.reference_precision}"
        f"   seeds {', '.join(map(str, result.seeds))}{extra}"
    )
    if not result.ok and result.seeds:
        out.append(f"replay     the same inputs with --seed {result.seeds[0]}")
    rows = []
    for r in result.rows:
        rows.append(
            [
                r.case,
                r.seed,
                r.output,
                r.dtype,
                "ok" if r.ok else "FAIL",
                fmt_number(r.max_abs_err),
                fmt_number(r.rel_norm_err),
                fmt_number(r.torch_rel_norm_err),
                f"{r.mismatches}/{r.numel}" + (f" + {r.nan_mismatches} NaN/Inf" if r.nan_mismatches else ""),
            ]
        )
    if rows:
        out.append("")
        out.append(
            table(
                [
                    "case",
                    "seed",
                    "output",
                    "dtype",
                    "result",
                    "max abs err",
                    "rel-norm err",
                    "torch's own",
                    "mismatches",
                ],
                rows,
                right=(5, 6, 7, 8),
            )
        )
    other = [c for c in result.cases if c.status not in ("passed", "failed")]
    for c in other:
        out.append(f"  {c.case} (seed {c.seed}): {c.status}" + (f" — {c.reason}" if c.reason else ""))
    out.append("")
    launched = ", ".join(result.kernels_launched) or "none"
    out.append(f"kernels launched: {launched}")
    if result.torch_ops:
        ops = ", ".join(f"{o.op}×{o.calls}" for o in result.torch_ops)
        out.append(f"torch compute ops in the candidate: {ops}")
    for note in result.notes:
        out.append(f"note: {note}")
    if result.interpreter_caveats:
        out.append("under the interpreter this verdict cannot show:")
        out.extend(f"  - {c}" for c in result.interpreter_caveats)
    out.append(findings_block(result.findings))
    out.append(f"({result.seconds:.1f} s)")
    return "\n".join(out)


def render_compile(result: CompileResult) -> str:
    out = []
    state = "OK" if result.ok else "FAILED"
    out.append(f"compile {result.kernel} for {result.target}: {state} ({result.seconds:.2f} s)")
    rows = []
    for c in result.configs:
        occ = c.occupancy
        rows.append(
            [
                "-" if c.config_index is None else c.config_index,
                ", ".join(f"{k}={v}" for k, v in c.config.items())
                or ", ".join(f"{k}={v}" for k, v in c.constexprs.items()),
                c.num_warps,
                c.num_stages,
                c.registers if c.registers is not None else "-",
                f"{c.spill_stores or 0}/{c.spill_loads or 0}",
                c.shared_bytes,
                f"{occ.fraction:.0%} ({occ.limiter})" if occ else "-",
                f"{c.compile_s:.2f}",
                "ok" if c.ok else c.failure.kind.value if c.failure else "failed",
            ]
        )
    if rows:
        out.append(
            table(
                [
                    "cfg",
                    "constexprs",
                    "warps",
                    "stages",
                    "regs",
                    "spill st/ld",
                    "smem B",
                    "occupancy",
                    "compile s",
                    "result",
                ],
                rows,
                right=(2, 3, 4, 6, 8),
            )
        )
    if result.note:
        out.append(result.note)
    for c in result.configs:
        for stage, text in c.ir.items():
            out.append(f"--- {stage} (config {c.config_index}) ---")
            out.append(text.text)
    errors = [f for f in result.findings if f.severity is Severity.error]
    if errors or result.findings:
        out.append(findings_block(result.findings))
    return "\n".join(out)


def _versus(row: BenchRow, peer: str, ratio: float | None) -> str:
    """'1.23×', or '0.99× tie' when the timing rounds disagree on who is faster."""
    if not ratio:
        return "-"
    return f"{ratio:.2f}× tie" if row.standing.get(peer) == "tie" else f"{ratio:.2f}×"


def render_bench(result: BenchResult) -> str:
    out = []
    what = "forward + backward" if result.backward else "forward"
    head = f"bench {result.candidate} ({what}) on {result.device} ({result.mode}, "
    head += f"L2 {'flushed' if result.l2_flush else 'warm'}"
    head += f", {result.input_sets} input sets rotated, {result.reps} reps)"
    out.append(head)
    if result.validation:
        out.append(f"validation: {result.validation}")
    if result.peaks:
        rates = ", ".join(f"{k} {v:.0f}" for k, v in result.peaks.matmul_tflops.items())
        out.append(f"ceilings: copy {result.peaks.copy_gbps:.0f} GB/s; matmul TFLOP/s {rates}")
    if result.queued_s > 1:
        out.append(f"waited {result.queued_s:.1f} s for the GPU lock")
    rows = []
    peers = list(result.baselines)  # the --baseline labels, each with its time and ratio after compile's
    for r in result.rows:
        by = {t.provider: t for t in r.timings}

        def ms(name: str, by: dict = by) -> str:
            t = by.get(name)
            if t is None:
                return "-"
            if t.error:
                return "error"
            return f"{t.median_ms:.4f}"

        cand = by.get("candidate")
        band = f"{cand.p20_ms:.4f}–{cand.p80_ms:.4f}" if cand and not cand.error else "-"
        roof = f"{r.pct_of_roofline:.0f}% {r.bound}" if r.pct_of_roofline is not None else "-"
        rows.append(
            [
                r.case,
                ms("candidate"),
                band,
                ms("eager"),
                ms("compile"),
                *(ms(label) for label in peers),
                _versus(r, "eager", r.speedup_vs_eager),
                _versus(r, "compile", r.speedup_vs_compile),
                *(_versus(r, label, r.speedup_vs_baselines.get(label)) for label in peers),
                f"{r.bandwidth_gbps:.0f}" if r.bandwidth_gbps else "-",
                f"{r.tflops:.1f}" if r.tflops else "-",
                roof,
            ]
        )
    if rows:
        out.append("")
        out.append(
            table(
                [
                    "case",
                    "Triton ms",
                    "p20–p80",
                    "eager ms",
                    "compile ms",
                    *(f"{label} ms" for label in peers),
                    "vs eager",
                    "vs compile",
                    *(f"vs {label}" for label in peers),
                    "GB/s",
                    "TFLOP/s",
                    "of roofline",
                ],
                rows,
                right=tuple(i for i in range(1, 9 + 2 * len(peers)) if i != 2),
            )
        )
    compile_times = {t.provider: t.compile_s for r in result.rows[:1] for t in r.timings if t.compile_s is not None}
    if compile_times:
        out.append(
            "first call (compile/autotune, not timed): " + ", ".join(f"{k} {v:.2f} s" for k, v in compile_times.items())
        )
    if result.plot:
        out.append(f"plot: {result.plot}")
    out.extend(f"note: {note}" for note in result.notes)
    out.append(findings_block(result.findings))
    out.append(f"({result.seconds:.1f} s)")
    return "\n".join(out)
