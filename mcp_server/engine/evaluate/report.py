"""The report: correctness rate and fast_p against eager and torch.compile, per problem, per folder and
overall; as a model (JSON), Markdown and a PNG of the fast_p curves. Pure arithmetic over PairResults."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mcp_server.engine.errors import UsageError
from mcp_server.engine.evaluate.models import (
    BASELINE_LABEL,
    BASELINES,
    FAST_P_DEFINITION,
    P_VALUES,
    Baseline,
    EvalReport,
    FastP,
    GroupSummary,
    PairResult,
    ProblemRow,
)
from mcp_server.engine.specs import output_path


def is_fast(result: PairResult, baseline: Baseline, p: float, timings_possible: bool) -> bool | None:
    """Correct and faster than p × the baseline. None: cannot be known here (no GPU, p > 0)."""
    if not result.correct:
        return False
    if p <= 0:
        return True  # any measured speedup is > 0: fast_0 is correctness
    if not timings_possible:
        return None
    speedup = result.speedup(baseline)
    return speedup is not None and speedup > p


def fast_p(
    results: Sequence[PairResult], baseline: Baseline, p: float, timings_possible: bool
) -> tuple[float | None, int | None]:
    """(fraction of all problems that are fast at p, how many); (None, None) when not measurable."""
    if not results:
        return None, None
    flags = [is_fast(r, baseline, p, timings_possible) for r in results]
    if any(f is None for f in flags):
        return None, None
    count = sum(1 for f in flags if f)
    return count / len(results), count


def _fast_ties(results: Sequence[PairResult], baseline: Baseline) -> int:
    """Problems counted fast at p = 1 whose timing rounds tie with the baseline: a rerun may count them slow."""
    standing = "standing_eager" if baseline == "eager" else "standing_compile"
    return sum(1 for r in results if is_fast(r, baseline, 1.0, True) and getattr(r, standing) == "tie")


def summarize_group(
    group: str, results: Sequence[PairResult], timings_possible: bool, p_values: Sequence[float] = P_VALUES
) -> GroupSummary:
    correct = sum(1 for r in results if r.correct)
    points = []
    for p in p_values:
        eager, n_eager = fast_p(results, "eager", p, timings_possible)
        comp, n_comp = fast_p(results, "compile", p, timings_possible)
        point = FastP(p=p, eager=eager, compile=comp, eager_count=n_eager, compile_count=n_comp)
        if p == 1.0 and timings_possible:
            point.eager_ties, point.compile_ties = (_fast_ties(results, b) for b in BASELINES)
        points.append(point)
    unmeasured = {
        b: sum(1 for r in results if r.correct and r.speedup(b) is None) if timings_possible else 0 for b in BASELINES
    }
    return GroupSummary(
        group=group,
        problems=len(results),
        correct=correct,
        correctness_rate=correct / len(results) if results else 0.0,
        fast_p=points,
        unmeasured_eager=unmeasured["eager"],
        unmeasured_compile=unmeasured["compile"],
    )


def build_report(
    results: Sequence[PairResult],
    *,
    timings_possible: bool,
    problems_dir: str,
    solutions_dir: str,
    db: str,
    backend: str,
    workers: Sequence[str] = (),
    evaluated_now: int = 0,
    resumed: int = 0,
    wall_s: float = 0.0,
    notes: Sequence[str] = (),
) -> EvalReport:
    results = list(results)
    overall = summarize_group("", results, timings_possible)
    groups: dict[str, list[PairResult]] = {}
    for r in results:
        head, sep, _ = r.name.partition("/")
        groups.setdefault(head if sep else "", []).append(r)
    group_summaries = (
        [summarize_group(g, rs, timings_possible) for g, rs in sorted(groups.items())] if len(groups) > 1 else []
    )
    rows = [
        ProblemRow(
            **r.model_dump(),
            fast_eager=[is_fast(r, "eager", p, timings_possible) for p in P_VALUES],
            fast_compile=[is_fast(r, "compile", p, timings_possible) for p in P_VALUES],
        )
        for r in results
    ]
    devices = sorted({r.device for r in results if r.device})
    all_notes = list(notes)
    if not timings_possible:
        all_notes.append(
            "No GPU: solutions were validated under the Triton interpreter; timings were not measured, so fast_p "
            "for p > 0 is not measurable (fast_0, the correctness rate, is)."
        )
    for b in BASELINES:
        n = overall.unmeasured_eager if b == "eager" else overall.unmeasured_compile
        if n:
            all_notes.append(
                f"{n} correct solution(s) have no timing against {BASELINE_LABEL[b]} (see the per-problem notes); "
                "they count as not fast, so fast_p against it is a lower bound."
            )
    if len(devices) > 1:
        all_notes.append(f"results come from different devices: {', '.join(devices)} (rerun with --redo to unify)")
    return EvalReport(
        ok=bool(results) and all(r.correct for r in results),
        device=", ".join(devices) or "-",
        problems_dir=problems_dir,
        solutions_dir=solutions_dir,
        db=db,
        backend=backend,
        workers=list(workers),
        definition=FAST_P_DEFINITION,
        timings_measured=timings_possible and any(r.timing == "measured" for r in results),
        overall=overall,
        groups=group_summaries,
        problems=rows,
        evaluated_now=evaluated_now,
        resumed=resumed,
        wall_s=round(wall_s, 3),
        notes=all_notes,
    )


# --- Markdown -----------------------------------------------------------------------------------------


def _pct(value: float | None, count: int | None, total: int) -> str:
    if value is None:
        return "not measurable"
    return f"{100 * value:.1f} % ({count}/{total})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _ties(n: int | None) -> str:
    return f" ({n} a tie)" if n else ""


def _fast_table(summary: GroupSummary) -> list[str]:
    lines = ["| p | vs eager | vs torch.compile |", "|---:|---:|---:|"]
    for point in summary.fast_p:
        lines.append(
            f"| {point.p:g} | {_pct(point.eager, point.eager_count, summary.problems)}{_ties(point.eager_ties)} "
            f"| {_pct(point.compile, point.compile_count, summary.problems)}{_ties(point.compile_ties)} |"
        )
    return lines


def render_markdown(report: EvalReport) -> str:
    o = report.overall
    lines = [
        f"# ptt eval: {report.problems_dir}",
        "",
        f"solutions `{report.solutions_dir}` · device {report.device} · backend {report.backend}"
        + (f" ({', '.join(report.workers)})" if report.workers else "")
        + f" · {o.problems} problems: {report.evaluated_now} evaluated now, {report.resumed} from `{report.db}`"
        + f" · {report.wall_s:.1f} s",
        "",
        f"**Correct: {o.correct}/{o.problems} ({100 * o.correctness_rate:.1f} %)**",
        "",
        "## fast_p",
        "",
        *_fast_table(o),
        "",
        f"*Definition.* {report.definition}",
        "",
    ]
    for g in report.groups:
        lines += [f"### {g.group or '(top level)'}: {g.correct}/{g.problems} correct", "", *_fast_table(g), ""]
    if report.notes:
        lines += ["Notes:", *[f"- {n}" for n in report.notes], ""]
    lines += [
        "## Per problem",
        "",
        "| problem | status | solution ms | eager ms | compile ms | × eager | × compile | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in report.problems:
        if r.status == "passed":
            note = r.timing_note or ("" if r.timing == "measured" else r.timing)
        elif r.status == "failed":
            note = ", ".join(r.failure_kinds) + (f": {r.summary}" if r.summary else "")
        else:
            note = r.summary
        lines.append(
            f"| {_cell(r.name)} | {r.status} | {_ms(r.candidate_ms)} | {_ms(r.eager_ms)} | {_ms(r.compile_ms)} "
            f"| {_x(r.speedup_eager)}{' tie' * (r.standing_eager == 'tie')} "
            f"| {_x(r.speedup_compile)}{' tie' * (r.standing_compile == 'tie')} | {_cell(note[:200])} |"
        )
    if report.plot:
        lines += ["", f"Plot: `{report.plot}`"]
    return "\n".join(lines) + "\n"


# --- plot ---------------------------------------------------------------------------------------------


def draw_fast_p(report: EvalReport, path: str | Path) -> str:
    """fast_p against p (0 … 3) for eager and torch.compile; without timings only the p = 0 point."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError("the fast_p plot needs matplotlib: pip install 'pytorch-to-triton[plot]'") from exc
    results = report.problems
    timings = report.timings_measured
    grid = [i / 20 for i in range(0, 61)] if timings else [0.0]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for baseline, style in zip(BASELINES, ("-", "--"), strict=True):
        ys = [fast_p(results, baseline, p, timings)[0] for p in grid]
        pts = [(p, y) for p, y in zip(grid, ys, strict=True) if y is not None]
        if pts:
            ax.step(
                [p for p, _ in pts], [y for _, y in pts], style, where="post", label=f"vs {BASELINE_LABEL[baseline]}"
            )
        marks = [(p, fast_p(results, baseline, p, timings)[0]) for p in P_VALUES]
        marks = [(p, y) for p, y in marks if y is not None]
        if marks:
            ax.plot([p for p, _ in marks], [y for _, y in marks], "o", color=ax.lines[-1].get_color())
    ax.set_xlabel("p (speedup threshold: correct and t_baseline / t_solution > p)")
    ax.set_ylabel("fast_p (fraction of all problems)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(-0.05, grid[-1] + 0.05 if timings else 2.05)
    ax.grid(True, alpha=0.3)
    if not timings:
        ax.text(1.0, 0.5, "timings not measured (no GPU):\nonly fast_0 = correctness rate", ha="center", va="center")
    ax.legend(loc="upper right")
    ax.set_title(f"fast_p on {report.overall.problems} problems · {report.device}")
    fig.tight_layout()
    out = output_path(path, "--plot")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return str(out)
