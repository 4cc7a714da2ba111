"""The audit report: five categories with a status each, recommendations, reproduce commands, and Markdown.

The categories follow the static rules' (``correctness``, ``performance``, ``memory``, ``numerics``,
``practice``). A category is only ``pass`` when the section that gives it evidence ran: correctness and
numerical stability need the correctness suite, performance needs the bench (a GPU), memory access needs
the compiled section, best practices the static rules. Otherwise it is ``not checked``, never ``pass``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from mcp_server.engine.audit.compiled import occupancy_pct, vector_text
from mcp_server.engine.audit.models import CATEGORY_TITLES, AuditReport, CategorySummary, SuiteRun
from mcp_server.engine.audit.static_models import AuditFinding, Category
from mcp_server.engine.models import Severity
from mcp_server.engine.numbers import fmt_number

STATUS_LABEL = {"pass": "✅ PASS", "warn": "⚠️ WARN", "fail": "❌ FAIL", "not checked": "➖ NOT CHECKED"}
TIER_LABEL = {
    "strict": "✅ pass (default tolerance)",
    "loose": "⚠️ pass only at the loose tolerance",
    "special": "⚠️ values pass; NaN/Inf not where PyTorch has them",
    "fail": "❌ fail",
    "not run": "➖ not run",
}
SEVERITY_ORDER = {Severity.error: 0, Severity.warning: 1, Severity.info: 2}
MAX_RECOMMENDATIONS = 8


def sort_findings(findings: Sequence[AuditFinding]) -> list[AuditFinding]:
    return sorted(
        findings,
        key=lambda f: (SEVERITY_ORDER[f.severity], f.where.file, f.where.line or 0, f.where.column or 0, f.rule),
    )


def categories(report: AuditReport) -> list[CategorySummary]:
    ran = {
        "correctness": report.correctness.status not in ("skipped", "not requested"),
        "numerics": report.correctness.status not in ("skipped", "not requested"),
        "performance": report.performance.status not in ("skipped", "not requested"),
        "memory": report.compiled.status not in ("skipped", "not requested"),
        "practice": report.static.status not in ("skipped", "not requested"),
    }
    why = {
        "correctness": report.correctness.reason or "the correctness suite did not run",
        "numerics": "the value transforms of the correctness suite did not run"
        + (f" ({report.correctness.reason})" if report.correctness.reason else ""),
        "performance": report.performance.reason or "performance was not measured",
        "memory": "the compiled section did not run"
        + (f" ({report.compiled.notes[0]})" if report.compiled.notes else ""),
        "practice": "the static rules did not run",
    }
    out = []
    for key, title in CATEGORY_TITLES.items():
        mine = [f for f in report.findings if f.category == key]
        errors = sum(f.severity is Severity.error for f in mine)
        warnings = sum(f.severity is Severity.warning for f in mine)
        info = sum(f.severity is Severity.info for f in mine)
        if errors:
            status = "fail"
        elif warnings:
            status = "warn"
        elif ran[key]:
            status = "pass"
        else:
            status = "not checked"
        note = None if ran[key] else why[key]
        out.append(
            CategorySummary(
                category=key, title=title, status=status, errors=errors, warnings=warnings, info=info, note=note
            )
        )
    return out


def recommendations(report: AuditReport) -> list[str]:
    """The fixes, most severe first, one per rule with the places it applies to."""
    grouped: dict[str, list[AuditFinding]] = {}
    for f in report.findings:
        if f.severity is not Severity.info:
            grouped.setdefault(f.rule, []).append(f)
    items = sorted(grouped.items(), key=lambda kv: (min(SEVERITY_ORDER[f.severity] for f in kv[1]), kv[0]))
    out = []
    for rule, found in items[:MAX_RECOMMENDATIONS]:
        places = sorted({f.kernel or _short(f.where.file, f.where.line) for f in found})
        listing = ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "")
        out.append(f"`{rule}` ({listing}): {found[0].fix}")
    if report.correctness.status == "skipped":
        out.append(f"Run the correctness suite: {report.correctness.reason}.")
    if report.performance.status == "skipped" and "performance" in report.sections:
        out.append(
            f"Performance was not measured ({report.performance.reason}): run the `ptt audit` command below on a GPU."
        )
    if not out:
        out.append("No changes needed on this evidence. Re-audit after every change to the kernel or its configs.")
    return out


def _short(file: str, line: int | None) -> str:
    name = Path(file).name
    return f"{name}:{line}" if line else name


def _rel(path: str, cwd: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(cwd.resolve()))
    except ValueError:
        return path


def reproduce(
    report: AuditReport, *, inputs: str | None, cwd: Path, backward: bool, allow_torch_ops: tuple[str, ...] = ()
) -> list[str]:
    def q(text: str) -> str:
        return shlex.quote(_rel_spec(text, cwd))

    target = f" --target {report.target}" if report.target else ""
    ref = f" --reference {q(report.reference)}" if report.reference else ""
    inp = f" --inputs {shlex.quote(inputs)}" if inputs else ""
    allow = "".join(f" --allow-torch-op {shlex.quote(op)}" for op in allow_torch_ops)
    subject = q(report.candidate or report.file)
    lines = [f"ptt audit {subject}{ref}{inp}{allow}{target}"]
    if report.reference and report.candidate and "correctness" in report.sections:
        lines.append(
            f"ptt validate {q(report.reference)} {q(report.candidate)}{inp}{allow}" + (" --backward" * backward)
        )
        for run in report.correctness.runs:
            if run.transform and run.tier in ("loose", "special", "fail"):
                lines.append(f"ptt audit {subject}{ref}{inp}{allow} --sections correctness --suite {run.transform}")
    shown = [k for k in report.compiled.kernels if any(f.kernel == k.kernel for f in report.findings)]
    for k in (shown or report.compiled.kernels)[:4]:
        lines.append(k.command.replace(f"'{k.where.file}:", f"'{_rel(k.where.file, cwd)}:"))
    if report.candidate and "performance" in report.sections:
        lines.append(f"ptt bench {subject}{ref}{inp}")
    return lines


def _rel_spec(spec: str, cwd: Path) -> str:
    path, sep, name = spec.rpartition(":")
    if sep and path and "/" not in name:
        return f"{_rel(path, cwd)}:{name}"
    return _rel(spec, cwd)


def _first_clause(reason: str) -> str:
    """A reason's first clause: 'no reference' of 'no reference (none in the file); pass --reference …'. A colon
    ends it only after 20 characters, so that 'not timed: the candidate failed …' keeps what it says."""
    ends = [reason.find(s) for s in (" (", "; ", ". ")]
    cut = min((i for i in [*ends, reason.find(": ", 20)] if i > 0), default=len(reason))
    text = reason[:cut].rstrip(".")
    return text if len(text) <= 100 else text[:99] + "…"


def not_run(report: AuditReport) -> list[tuple[str, str]]:
    """The sections asked for that did not run, each with the first clause of why."""
    why = {
        "static": "",
        "compiled": report.compiled.notes[0] if report.compiled.notes else "",
        "correctness": report.correctness.reason or "",
        "performance": report.performance.reason or "",
    }
    status = {
        "static": report.static.status,
        "compiled": report.compiled.status if not report.compiled.kernels else "passed",
        "correctness": report.correctness.status,
        "performance": report.performance.status,
    }
    return [(s, _first_clause(why[s]) or "did not run") for s in report.sections if status[s] == "skipped"]


def summary_line(report: AuditReport) -> str:
    errors = sum(f.severity is Severity.error for f in report.findings)
    warnings = sum(f.severity is Severity.warning for f in report.findings)
    head = "PASS" if report.ok else "FAIL"
    skipped = not_run(report)
    ran = [s for s in report.sections if s not in {name for name, _ in skipped}]
    only = f" from the {', '.join(ran)} section{'s' * (len(ran) > 1)} alone" if skipped and ran else ""
    parts = [f"{head}: {errors} error(s), {warnings} warning(s){only}"]
    runs = [r for r in report.correctness.runs]
    if runs:
        strict = sum(r.tier == "strict" for r in runs)
        parts.append(f"correctness {strict}/{len(runs)} runs at the default tolerance")
    if report.compiled.kernels:
        parts.append(f"{len(report.compiled.kernels)} compiled variant(s) for {report.compiled.target}")
    if report.performance.rows:
        best = [r.speedup_vs_eager for r in report.performance.rows if r.speedup_vs_eager]
        if best:
            parts.append(f"{min(best):.2f}–{max(best):.2f}× eager")
    if skipped:
        parts.append("not run: " + ", ".join(f"{name} ({why})" for name, why in skipped))
    return "; ".join(parts)


# --- Markdown -------------------------------------------------------------------------------------------


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(x: object) -> str:
        return ("-" if x is None else str(x)).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _run_row(run: SuiteRun, factor: float) -> list[object]:
    cases = f"{run.cases_passed}/{run.cases_judged}" if run.cases_judged else "-"
    if run.cases_passed_loose is not None:
        cases += f" ({run.cases_passed_loose}/{run.cases_judged} at {factor:g}×)"
    result = TIER_LABEL[run.tier]
    if run.kinds:
        result += f" ({', '.join(run.kinds)})"
    if run.reason and run.tier in ("not run", "fail"):
        result += f": {run.reason[:160]}"
    return [f"`{run.name}`", run.inputs, cases, result, fmt_number(run.max_abs_err), fmt_number(run.max_rel_norm_err)]


def render_markdown(report: AuditReport, cwd: Path | None = None) -> str:
    cwd = cwd or Path.cwd()
    out: list[str] = []
    title = Path(report.file).name
    out.append(f"# Triton kernel audit: `{title}`")
    out.append("")
    kernels = ", ".join(f"`{k}`" for k in report.static.kernels) or "none"
    meta = [
        f"**File**: `{_rel(report.file, cwd)}`",
        f"**Kernels**: {kernels}",
        f"**Launcher audited**: `{_rel_spec(report.candidate, cwd)}`" if report.candidate else None,
        f"**Reference**: `{_rel_spec(report.reference, cwd)}`" if report.reference else None,
        f"**Device**: {report.device}" + (f" · **compile target**: {report.target}" if report.target else ""),
        f"**Date**: {report.date}",
        "**Auditor**: `ptt audit` (pytorch-to-triton)"
        + (f" — {', '.join(f'{k} {v}' for k, v in report.versions.items())}" if report.versions else ""),
    ]
    out.append("  \n".join(m for m in meta if m))
    out.append("")
    out.append(f"**Verdict**: {report.summary}")
    if report.device == "cpu-interpreter":
        out.append("")
        out.append(
            "> No CUDA GPU: kernels ran under the Triton interpreter. Correctness verdicts hold; the compiled "
            "section is for the target GPU (no GPU needed); timings need a GPU."
        )
    out.append("")
    out.append("## Summary")
    out.append("")
    rows = []
    for c in report.categories:
        label = STATUS_LABEL[c.status]
        if c.note and c.status in ("not checked", "warn"):
            label += f" — {c.note}"
        rows.append([c.title, label, c.errors, c.warnings, c.info])
    out.append(_md_table(["Category", "Status", "Errors", "Warnings", "Info"], rows))
    out.append("")

    # correctness
    out.append("## Correctness suite")
    out.append("")
    cs = report.correctness
    if cs.status in ("skipped", "not requested"):
        out.append(f"Not run: {cs.reason or 'not requested'}.")
    else:
        tol = "; ".join(f"{d} atol {a:g}, rtol {r:g}" for d, (a, r) in cs.tolerances.items()) or "the defaults"
        out.append(
            f"Each run is one `validate` (reference in float64, outputs poisoned before the call, inputs checked "
            f"for mutation). Default tolerance: {tol}. Loose tolerance: {cs.loose_factor:g}× the default atol "
            "and rtol."
        )
        out.append("")
        out.append(
            _md_table(
                ["Run", "Inputs", "Cases passed", "Result", "Max abs err", "Max rel-norm err"],
                [_run_row(r, cs.loose_factor) for r in cs.runs],
            )
        )
        out.append("")
        out.append(
            f"**Determinism** (the base cases called twice): {cs.determinism}. **Backward**: "
            + ("checked against autograd." if cs.backward_checked else "not checked (pass `--backward`).")
        )
    out.append("")

    # compiled
    out.append(f"## Compiled kernels ({report.compiled.target or 'no target'})")
    out.append("")
    comp = report.compiled
    if comp.status in ("skipped", "not requested") and not comp.kernels:
        reason = "; ".join(comp.notes) or "not requested"
        out.append(f"Not run: {reason}.")
    else:
        out.append(
            "The kernels the launcher launched, compiled for the target with the argument types, alignment and "
            "constexprs captured at launch; resources from ptxas, instruction counts over the full PTX/SASS."
        )
        out.append("")
        krows = []
        for k in comp.kernels:
            if not k.ok:
                krows.append([f"`{k.kernel}`", k.variant, k.source, "compile failed", "-", "-", "-", "-", "-", "-"])
                continue
            spills = f"{k.spill_stores or 0}/{k.spill_loads or 0}"
            fp64 = k.instructions.get("fp64", 0)
            krows.append(
                [
                    f"`{k.kernel}`",
                    k.variant,
                    (
                        f"config {k.config_index} of {k.n_configs} ({k.source})"
                        if k.config_index is not None
                        else k.source
                    ),
                    k.registers,
                    spills,
                    k.shared_bytes,
                    occupancy_pct(k),
                    vector_text(k),
                    k.tensor_cores,
                    fp64,
                ]
            )
        out.append(
            _md_table(
                [
                    "Kernel",
                    "Variant",
                    "From",
                    "Regs",
                    "Spill st/ld B",
                    "Smem B",
                    "Occupancy",
                    "Wide global ld/st (of all)",
                    "Tensor cores",
                    "fp64",
                ],
                krows,
            )
        )
        for note in comp.not_compiled + comp.notes:
            out.append(f"- {note}")
    out.append("")

    # performance
    out.append("## Performance")
    out.append("")
    perf = report.performance
    if perf.status in ("skipped", "not requested") or not perf.rows:
        out.append(f"Not measured: {perf.reason or 'not requested'}.")
    else:
        prow = [
            [
                r.size,
                fmt_number(r.triton_ms, 4),
                fmt_number(r.eager_ms, 4),
                fmt_number(r.compile_ms, 4),
                f"{r.speedup_vs_eager:.2f}×" if r.speedup_vs_eager else "-",
                (f"{r.speedup_vs_compile:.2f}×" + " tie" * (r.standing_vs_compile == "tie"))
                if r.speedup_vs_compile
                else "-",
                f"{r.pct_of_peak:.0f}% ({r.bound})" if r.pct_of_peak is not None else "-",
                f"{r.spread:.0%}" if r.spread is not None else "-",
            ]
            for r in perf.rows
        ]
        out.append(
            _md_table(
                [
                    "Size",
                    "Triton (ms)",
                    "PyTorch (ms)",
                    "torch.compile (ms)",
                    "Speedup",
                    "vs compile",
                    "% of peak",
                    "Spread",
                ],
                prow,
            )
        )
        if perf.peaks:
            out.append("")
            out.append(f"Peaks: {perf.peaks}. {' '.join(perf.notes)}")
    out.append("")

    # findings
    out.append("## Findings")
    out.append("")
    if not report.findings:
        out.append("None.")
    for severity, heading in ((Severity.error, "Errors"), (Severity.warning, "Warnings"), (Severity.info, "Info")):
        found = [f for f in report.findings if f.severity is severity]
        if not found:
            continue
        out.append(f"### {heading}")
        out.append("")
        for n, f in enumerate(found, 1):
            where = _rel(f.where.file, cwd) + (f":{f.where.line}" if f.where.line else "")
            cat = CATEGORY_TITLES[f.category]
            out.append(
                f"{n}. **[{severity.value.upper()}]** `{f.rule}` ({cat}, {f.section}) — `{where}`: {f.message}  \n"
                f"   **Fix:** {f.fix}"
            )
        out.append("")

    out.append("## Recommendations")
    out.append("")
    for n, rec in enumerate(report.recommendations, 1):
        out.append(f"{n}. {rec}")
    out.append("")
    out.append("## Reproduce")
    out.append("")
    out.append("```bash")
    out.extend(report.reproduce)
    out.append("```")
    if report.notes:
        out.append("")
        out.append("## Notes")
        out.append("")
        out.extend(f"- {n}" for n in report.notes)
    out.append("")
    return "\n".join(out)


def category_of(rule_category: Category) -> str:
    return CATEGORY_TITLES[rule_category]
