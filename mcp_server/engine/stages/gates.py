"""The stage gates: pure functions over recorded evidence. No GPU, no files, no clock.

Rules, exactly as implemented (each condition is one :class:`GateCheck`):

- **validation** (stages 1-3): the attempt's own ``ValidateResult.ok``.
- **autotune** (stages 2-3): every kernel the candidate file launches (``kernel[grid](...)``; when it launches
  none, every ``@triton.jit`` function that no other kernel calls) carries ``@triton.autotune`` — read
  statically from the file, see :func:`autotune_info` — or the submission gives a reason not to autotune.
- **gain_over_stage1** (stages 2-3): the best passing stage-1 attempt is timed in the candidate's own bench, as
  an extra candidate labelled ``stage1`` (``STAGE1``): the same inputs, the same interleaved rounds, its timed
  outputs checked. Per size, speedup = stage-1 median / candidate median (``BenchRow.speedup_vs_extras``: the
  candidate's work on other streams counted; a stage-1 timing the GPU stays busy after is withheld, as a thread
  the candidate left running would slow it). Every size needs that ratio: one without it is unmet, naming why. Met
  when the geometric mean is above ``MIN_GEOMEAN_GAIN`` (1.0), no size is below ``MIN_CASE_RATIO`` (0.95, i.e. no
  size more than 5 % slower), and the gain stands out of the paired rounds' noise (``_gain_in_noise``: the mean over
  sizes of each size's mean log round ratio is ``MIN_GAIN_Z`` standard errors above 0); the detail names the sizes
  whose paired rounds disagree. When the same code was timed
  before beside the same stage-1 attempt on the same device, a size's speedup is the median of all those benches'
  paired rounds and this one's (``GateEvidence.same_code_stage1``), as for torch.compile below. Attempts recorded
  before the stage-1 attempt rode in the candidate's bench timed it in a bench of its own
  (``GateEvidence.baseline_bench``), which is still read.
- **vs_torch_compile** (stage 3): on every benchmark size, ``speedup_vs_compile >= MIN_VS_COMPILE`` (1.0).
  A size without a torch.compile timing is unmet (the gate needs the number). The detail names the sizes where
  bench's timing rounds disagree (``BenchRow.standing`` says tie), met or not: there a rerun may flip the check.
  When the same code (the same syntax tree and function: comments and layout do not count) was benched before
  on the same device in this conversion, a size is judged by the median of every paired round of all those
  benches and this one (``GateEvidence.same_code_benches``): submitting the same kernel again adds evidence
  instead of drawing a new verdict.
- **audit** (stage 3): the audit ran and has no error-severity finding. An audit that could not run is
  pending, never met.

Timings taken under the Triton interpreter (``device == "cpu-interpreter"``) or not taken because the
machine has no GPU make the performance checks *pending* ("not measurable here"). A verdict is *passed* when
every check is met, *failed* when one is unmet, and *pending* otherwise.
"""

from __future__ import annotations

import ast
import hashlib
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from mcp_server.engine.models import INTERPRETER_DEVICE, BenchResult, BenchRow, ValidateResult
from mcp_server.engine.pyast import dotted_name, jit_decorated, parse_python
from mcp_server.engine.stages.models import (
    AuditSummary,
    AutotuneInfo,
    CaseSpeed,
    GateCheck,
    GateEvidence,
    GateVerdict,
)

MIN_GEOMEAN_GAIN = 1.0  # stage 2: geometric-mean speedup over stage 1 must exceed this
MIN_CASE_RATIO = 0.95  # stage 2: no benchmark size may be more than 5 % slower than stage 1
# stage 2: the mean over the sizes of their paired rounds' mean log ratio must stand out of its standard error at the
# one-sided level a normal variable reaches ``MIN_GAIN_Z`` standard deviations above its mean (2.3 %). The error is
# estimated from a handful of rounds, so the multiple is Student's t quantile at that level with Welch-Satterthwaite
# degrees of freedom (2.87 with one size of five rounds; 2.0 with many). A kernel exactly as fast as stage 1
# (simulated, normal noise, five rounds a size) then gets there one time in 44 with one size, 48 with three; with 2
# standard errors flat it did one time in 17 and 28, and with the geometric mean alone one time in two.
MIN_GAIN_Z = 2.0
_NORMAL = statistics.NormalDist()
MIN_VS_COMPILE = 1.0  # stage 3: at least as fast as torch.compile on every size
MAX_LISTED = 5  # error findings / sizes named in one reason line
STAGE1 = "stage1"  # the stage-1 attempt's label in the candidate's bench

NOT_MEASURABLE = "not measurable here"


# --- evidence helpers -------------------------------------------------------------------------------------


def geomean(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _timing_ms(row: BenchRow, provider: str = "candidate") -> float | None:
    for t in row.timings:
        if t.provider == provider and t.error is None and t.median_ms > 0:
            return t.median_ms
    return None


def _timing_error(row: BenchRow, provider: str = "candidate") -> str | None:
    for t in row.timings:
        if t.provider == provider:
            return t.error
    return f"no {provider} timing"


def _compile_error(row: BenchRow) -> str | None:
    for t in row.timings:
        if t.provider == "compile":
            return t.error
    return None


def _no_stage1_ratio(row: BenchRow) -> str | None:
    """Why a row of a bench that timed the stage-1 attempt beside the candidate has no ratio between them, or None."""
    if STAGE1 in row.speedup_vs_extras:
        return None
    if _timing_ms(row) is None:
        return f"this attempt's timing failed: {_timing_error(row)}"
    if not any(t.provider == STAGE1 for t in row.timings):
        return "stage 1 was not timed"
    if error := _timing_error(row, STAGE1):
        return f"stage 1's timing failed: {error}"
    return (
        "stage 1's timing withheld: the GPU stayed busy after its end event, its own work on another stream or a "
        "thread this attempt left running"
    )


def stage1_in_bench(bench: BenchResult | None) -> bool:
    """Did ``bench`` time the stage-1 attempt beside the candidate (an extra candidate labelled ``STAGE1``)?"""
    return bench is not None and any(t.provider == STAGE1 for r in bench.rows for t in r.timings)


def case_speeds(bench: BenchResult | None, baseline: BenchResult | None = None) -> list[CaseSpeed]:
    """Per benchmark size: the candidate's median and, when the stage-1 attempt was timed (beside it in ``bench``, or
    in a ``baseline`` bench of its own), the ratio to it."""
    if bench is None:
        return []
    base = {r.case: _timing_ms(r) for r in baseline.rows} if baseline is not None else {}
    out = []
    for row in bench.rows:
        ms = _timing_ms(row)
        if baseline is None:
            base_ms = _timing_ms(row, STAGE1)
            gain = row.speedup_vs_extras.get(STAGE1)
        else:
            base_ms = base.get(row.case)
            gain = (base_ms / ms) if (ms and base_ms) else None
        out.append(
            CaseSpeed(
                case=row.case,
                median_ms=ms,
                baseline_ms=base_ms,
                speedup_vs_stage1=gain,
                speedup_vs_eager=row.speedup_vs_eager,
                speedup_vs_compile=row.speedup_vs_compile,
                pct_of_roofline=row.pct_of_roofline,
            )
        )
    return out


def _fmt_x(x: float) -> str:
    return f"{x:.3f}×"


def _not_measurable(ev: GateEvidence) -> str | None:
    """Why timings cannot count here, or None when they can."""
    if ev.validation is not None and ev.validation.device == INTERPRETER_DEVICE:
        return f"{NOT_MEASURABLE}: kernels ran under the Triton interpreter (no CUDA GPU); timings need a GPU"
    if ev.bench_unavailable:
        return f"{NOT_MEASURABLE}: {ev.bench_unavailable}"
    if ev.bench is not None and ev.bench.device == INTERPRETER_DEVICE:
        return f"{NOT_MEASURABLE}: the bench ran under the Triton interpreter; timings need a GPU"
    if ev.bench is None:
        return f"{NOT_MEASURABLE}: no bench result was recorded"
    return None


# --- the checks -------------------------------------------------------------------------------------------


def check_validation(validation: ValidateResult | None) -> GateCheck:
    if validation is None:
        return GateCheck(name="validation", state="unmet", detail="no validation result was recorded")
    if validation.ok:
        return GateCheck(name="validation", state="met", detail=validation.summary or "validation passed")
    kinds: dict[str, int] = {}
    for f in validation.errors:
        kinds[f.kind.value] = kinds.get(f.kind.value, 0) + 1
    listing = ", ".join(f"{k}×{n}" if n > 1 else k for k, n in kinds.items())
    detail = f"validation failed ({listing or 'no error findings listed'})"
    if validation.summary:
        detail += f": {validation.summary}"
    return GateCheck(name="validation", state="unmet", detail=detail)


def check_autotune(info: AutotuneInfo | None, reason: str | None) -> GateCheck:
    if reason and reason.strip():
        return GateCheck(name="autotune", state="met", detail=f"not autotuned, reason given: {reason.strip()}")
    if info is None:
        return GateCheck(name="autotune", state="unmet", detail="the candidate's autotuning was not checked")
    if info.ok:
        parts = [f"@triton.autotune on {', '.join(info.autotuned)}"] if info.autotuned else []
        parts += [f"{k}: {why}" for k, why in info.exempt.items()]
        return GateCheck(name="autotune", state="met", detail="; ".join(parts))
    if not info.kernels:
        what = "the candidate file defines no @triton.jit kernel (kernels imported from other files are not read)"
    else:
        what = f"no @triton.autotune on {', '.join(info.missing or info.kernels)}"
    return GateCheck(
        name="autotune",
        state="unmet",
        detail=f"{what}; add @triton.autotune(configs=[...], key=[...]) or give a reason not to "
        "(--no-autotune-reason / no_autotune_reason)",
    )


def check_gain(ev: GateEvidence) -> GateCheck:
    name = "gain_over_stage1"
    if ev.validation is not None and not ev.validation.ok:
        return GateCheck(name=name, state="pending", detail="not measured: the candidate failed validation")
    if ev.bench_error:
        return GateCheck(name=name, state="unmet", detail=f"the bench refused the candidate: {ev.bench_error}")
    if why := _not_measurable(ev):
        return GateCheck(name=name, state="pending", detail=why)
    if ev.baseline_attempt is None:
        return GateCheck(
            name=name,
            state="unmet",
            detail="no passing stage-1 attempt to compare with: pass stage 1 first",
        )
    beside = ev.baseline_bench is None and stage1_in_bench(ev.bench)
    if ev.baseline_bench is None and not beside:
        why = ev.baseline_unavailable or "it was not timed"
        return GateCheck(
            name=name, state="unmet", detail=f"stage-1 attempt #{ev.baseline_attempt} has no timing: {why}"
        )
    speeds = [s for s in case_speeds(ev.bench, ev.baseline_bench) if s.speedup_vs_stage1 is not None]
    pooled, attempts = _pooled_rounds(ev, STAGE1) if beside else ({}, [])
    for s in speeds:
        if rounds := pooled.get(s.case):
            s.speedup_vs_stage1 = statistics.median(rounds)
    if beside and ev.bench is not None:
        # Every size counts: one without a comparison (this attempt's timing failed there, or stage 1's, or stage 1's
        # was withheld) would otherwise leave the gain to the sizes where it wins.
        lacking = [f"{r.case} ({why})" for r in ev.bench.rows if (why := _no_stage1_ratio(r))]
        if lacking:
            note = f" ({ev.baseline_unavailable})" if ev.baseline_unavailable else ""
            return GateCheck(
                name=name,
                state="unmet",
                detail=f"stage-1 attempt #{ev.baseline_attempt} has no comparison beside this one on {len(lacking)} "
                f"of {len(ev.bench.rows)} size(s): {'; '.join(lacking[:MAX_LISTED])}{note}; the gain is judged on "
                "every size",
            )
    if not speeds:
        return GateCheck(
            name=name,
            state="unmet",
            detail=f"no benchmark size has a timing for both this attempt and stage-1 attempt #{ev.baseline_attempt}",
        )
    gm = geomean(s.speedup_vs_stage1 for s in speeds) or 0.0
    slow = [s for s in speeds if (s.speedup_vs_stage1 or 0) < MIN_CASE_RATIO]
    problems = []
    if gm <= MIN_GEOMEAN_GAIN:
        problems.append(
            f"geometric-mean speedup over stage-1 attempt #{ev.baseline_attempt} is {_fmt_x(gm)}, "
            f"needs > {_fmt_x(MIN_GEOMEAN_GAIN)}"
        )
    if slow:
        listed = ", ".join(f"{s.case} {_fmt_x(s.speedup_vs_stage1 or 0)}" for s in slow[:MAX_LISTED])
        problems.append(
            f"{len(slow)} size(s) more than {round((1 - MIN_CASE_RATIO) * 100)} % slower than stage 1: {listed}"
        )
    rows = ev.bench.rows if beside and ev.bench is not None else []
    if not problems and (noise := _gain_in_noise(rows, pooled)):
        problems.append(noise)
    pooled_note = _pooled_note(
        attempts, f"timed the same code beside stage-1 attempt #{ev.baseline_attempt} on this device"
    )
    if problems:
        return GateCheck(name=name, state="unmet", detail="; ".join(problems) + pooled_note)
    worst = min(s.speedup_vs_stage1 or 0 for s in speeds)
    detail = (
        f"{_fmt_x(gm)} over stage-1 attempt #{ev.baseline_attempt} (geometric mean of {len(speeds)} size(s); worst "
        f"{_fmt_x(worst)}{', timed in the same rounds' if beside else ''})"
    )
    return GateCheck(name=name, state="met", detail=detail + pooled_note + _ties_note(rows, STAGE1, "stage 1", pooled))


def _gain_in_noise(rows: list[BenchRow], pooled: dict[str, list[float]]) -> str | None:
    """Why the gain does not stand out of its paired rounds' noise, or None. Per size, the mean log ratio of its paired
    rounds (pooled where the same code was timed before) and that mean's variance from the rounds' own spread; over
    the sizes, the mean of those means (the log of a geometric mean over sizes) must be ``MIN_GAIN_Z`` standard errors
    above 0. Sizes that differ from each other do not count as noise, rounds that disagree within a size do. Without
    it, a stage 2 exactly as fast as stage 1 would meet a geometric mean above 1.0 half the time, and could try again
    with any change to its syntax tree."""
    means, variances, counts = [], [], []
    for r in rows:
        logs = [math.log(x) for x in (pooled.get(r.case) or r.round_ratios.get(STAGE1) or []) if x > 0 and x < math.inf]
        if len(logs) >= 2:
            means.append(statistics.fmean(logs))
            variances.append(statistics.variance(logs) / len(logs))
            counts.append(len(logs))
    n = sum(counts)
    if n < 5:
        return None
    mean = statistics.fmean(means)
    error = math.sqrt(sum(variances)) / len(means)
    # Welch-Satterthwaite: the degrees of freedom of a sum of variances each estimated from its own rounds.
    spread = sum(v * v / (k - 1) for v, k in zip(variances, counts, strict=True))
    dof = sum(variances) ** 2 / spread if spread > 0 else math.inf
    needed = student_t_quantile(_NORMAL.cdf(MIN_GAIN_Z), dof)
    if mean > needed * error:
        return None
    return (
        f"the gain does not stand out of the timing rounds' noise: over {len(means)} size(s) their {n} paired rounds "
        f"average {_fmt_x(math.exp(mean))} with a standard error of {error * 100:.2f} %, needs {needed:.2f} standard "
        f"errors above 1.000× (Student's t at {dof:.1f} degrees of freedom, one-sided "
        f"{(1 - _NORMAL.cdf(MIN_GAIN_Z)) * 100:.1f} %: a kernel exactly as fast as stage 1 gets there one time in 44 "
        "to 48)"
    )


def student_t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile (0.5 <= p < 1) of Student's t with ``dof`` (>= 1, may be fractional or inf) degrees of
    freedom: Newton's method on the distribution function, itself Simpson's rule over the density from 0."""
    z = _NORMAL.inv_cdf(p)
    if not math.isfinite(dof) or dof > 1e6:
        return z
    log_scale = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)

    def density(t: float) -> float:
        return math.exp(log_scale - (dof + 1) / 2 * math.log1p(t * t / dof))

    def cdf(x: float) -> float:
        steps = 400  # even; the density is smooth, so the error is far below the tolerance used
        h = x / steps
        inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
        return 0.5 + h / 3 * (density(0.0) + inner + density(x))

    x = z
    for _ in range(50):
        step = (cdf(x) - p) / density(x)
        x = max(x - step, x / 2)  # t's tails are heavier than the normal's: x only grows from z, never past 0
        if abs(step) < 1e-10 * max(1.0, x):
            break
    return x


def _pooled_note(attempts: list[int], which: str) -> str:
    """'; judged with the timing rounds of attempt(s) #2, #3, which <which>, pooled …', or '' without any."""
    if not attempts:
        return ""
    return (
        f"; judged with the timing rounds of attempt(s) {', '.join(f'#{n}' for n in attempts)}, which {which}, pooled "
        "with this bench's (the median of each size's paired rounds)"
    )


def _ties_note(rows: list[BenchRow], peer: str, name: str, pooled: dict[str, list[float]]) -> str:
    """The sizes (not judged on pooled rounds) whose paired rounds against ``peer`` disagree, or ''."""
    ties = [f"{r.case} ({r.round_range(peer)})" for r in rows if r.standing.get(peer) == "tie" and r.case not in pooled]
    if not ties:
        return ""
    return f"; a tie on {len(ties)} size(s), where some timing round had {name} faster: {', '.join(ties[:MAX_LISTED])}"


def check_vs_compile(ev: GateEvidence) -> GateCheck:
    name = "vs_torch_compile"
    if ev.validation is not None and not ev.validation.ok:
        return GateCheck(name=name, state="pending", detail="not measured: the candidate failed validation")
    if ev.bench_error:
        return GateCheck(name=name, state="unmet", detail=f"the bench refused the candidate: {ev.bench_error}")
    if why := _not_measurable(ev):
        return GateCheck(name=name, state="pending", detail=why)
    if ev.bench is None or not ev.bench.rows:
        return GateCheck(name=name, state="unmet", detail="the bench result has no benchmark sizes")
    missing = []
    slow = []
    pooled, attempts = _pooled_rounds(ev)
    ratios: dict[str, float] = {}
    for row in ev.bench.rows:
        if row.speedup_vs_compile is None:
            err = _compile_error(row) or _timing_error(row) or "no timing"
            missing.append(f"{row.case} ({err})")
            continue
        rounds = pooled.get(row.case, [])
        ratio = ratios[row.case] = statistics.median(rounds) if rounds else row.speedup_vs_compile
        if ratio < MIN_VS_COMPILE:
            if rounds:
                note = f" (median of {len(rounds)} paired rounds, {min(rounds):.3f}–{max(rounds):.3f}×)"
            elif row.standing.get("compile") == "tie":
                note = f" (a tie: {row.round_range('compile')})"
            else:
                note = ""
            slow.append(f"{row.case} {_fmt_x(ratio)}{note}")
    problems = []
    if slow:
        problems.append(
            f"slower than torch.compile on {len(slow)} size(s): {', '.join(slow[:MAX_LISTED])}; "
            f"needs ≥ {_fmt_x(MIN_VS_COMPILE)} on every size"
        )
    if missing:
        problems.append(f"no torch.compile comparison for {', '.join(missing[:MAX_LISTED])}")
    pooled_note = _pooled_note(attempts, "benched the same code on this device")
    if problems:
        return GateCheck(name=name, state="unmet", detail="; ".join(problems) + pooled_note)
    worst = min(ratios.values())
    detail = f"≥ torch.compile on all {len(ev.bench.rows)} size(s) (worst {_fmt_x(worst)}){pooled_note}"
    if ties := _ties_note(ev.bench.rows, "compile", "torch.compile", pooled):
        detail += f"{ties} — a rerun of the same file may fall short there"
    return GateCheck(name=name, state="met", detail=detail)


def code_key(source: str, function: str) -> str:
    """What makes two submissions the same code: the file's syntax tree (comments, blank lines and layout do not
    change it) and the function named; the text's own digest where the file does not parse."""
    try:
        tree = ast.dump(parse_python(source))
    except (SyntaxError, ValueError):
        tree = source
    return hashlib.sha256(f"{function}\n{tree}".encode()).hexdigest()


def _pooled_rounds(ev: GateEvidence, peer: str = "compile") -> tuple[dict[str, list[float]], list[int]]:
    """Per size, the paired round ratios against ``peer`` (torch.compile, or ``STAGE1``: then only of benches that
    timed the same stage-1 attempt as this one) of this bench and of the earlier benches of the same code (only sizes
    an earlier bench has too), and the attempts they came from."""
    if not ev.same_code_benches or ev.bench is None:
        return {}, []
    earlier: dict[str, list[float]] = {}
    used = []
    for number, bench in sorted(ev.same_code_benches.items()):
        if bench.device != ev.bench.device:
            continue
        if peer == STAGE1 and (ev.baseline_attempt is None or ev.same_code_stage1.get(number) != ev.baseline_attempt):
            continue
        found = False
        for row in bench.rows:
            if rounds := row.round_ratios.get(peer):
                earlier.setdefault(row.case, []).extend(rounds)
                found = True
        if found:
            used.append(number)
    pooled = {
        row.case: earlier[row.case] + row.round_ratios[peer]
        for row in ev.bench.rows
        if row.case in earlier and row.round_ratios.get(peer)
    }
    return pooled, used if pooled else []


def check_audit(audit: AuditSummary | None, unavailable: str | None) -> GateCheck:
    if audit is None:
        why = unavailable or "no audit was recorded"
        return GateCheck(name="audit", state="pending", detail=f"audit unavailable ({why}); it never counts as passed")
    if audit.errors:
        listed = "; ".join(audit.errors[:MAX_LISTED])
        more = f" (+{len(audit.errors) - MAX_LISTED} more)" if len(audit.errors) > MAX_LISTED else ""
        return GateCheck(name="audit", state="unmet", detail=f"{len(audit.errors)} error finding(s): {listed}{more}")
    return GateCheck(name="audit", state="met", detail=f"no error findings ({audit.warnings} warning(s))")


def evaluate(stage: int, ev: GateEvidence) -> GateVerdict:
    """The verdict of ``stage``'s gate on ``ev``: every condition as a check, every unmet one as a reason."""
    if stage not in (1, 2, 3):
        raise ValueError(f"stage must be 1, 2 or 3, got {stage}")
    checks = [check_validation(ev.validation)]
    if stage >= 2:
        checks += [check_autotune(ev.autotune, ev.no_autotune_reason), check_gain(ev)]
    if stage >= 3:
        checks += [check_vs_compile(ev), check_audit(ev.audit, ev.audit_unavailable)]
    if any(c.state == "unmet" for c in checks):
        state = "failed"
    elif any(c.state == "pending" for c in checks):
        state = "pending"
    else:
        state = "passed"
    reasons = [f"{c.name}: {c.detail}" for c in checks if c.state != "met"]
    return GateVerdict(stage=stage, state=state, checks=checks, reasons=reasons)


# --- static autotune check ----------------------------------------------------------------------------------


_SIZE_WORDS = ("next_power_of_2", "shape", "numel", "size", "stride", "cdiv", "len")


def _is_constexpr(arg: ast.arg) -> bool:
    ann = arg.annotation
    return ann is not None and dotted_name(ann).rsplit(".", 1)[-1] == "constexpr"


def _size_derived(expr: ast.expr | None, derived: set[str]) -> bool:
    """True when ``expr`` is computed from the problem's sizes (a shape, numel, next_power_of_2 of one, or a
    variable assigned from such an expression), so the launch does not choose it."""
    if expr is None:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in derived:
            return True
        if isinstance(node, ast.Attribute) and node.attr in _SIZE_WORDS:
            return True
        if isinstance(node, ast.Call) and dotted_name(node.func).rsplit(".", 1)[-1] in _SIZE_WORDS:
            return True
    return False


def _derived_names(fn: ast.AST) -> set[str]:
    """Variables of a launcher assigned from the problem's sizes (followed through chains of assignments)."""
    derived: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(fn):
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets, value = [node.target], node.value
            if value is None or not _size_derived(value, derived):
                continue
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id not in derived:
                        derived.add(n.id)
                        changed = True
    return derived


def _single_program(grid: ast.expr) -> bool:
    if isinstance(grid, ast.Lambda):
        grid = grid.body
    items = grid.elts if isinstance(grid, ast.Tuple | ast.List) else [grid]
    return bool(items) and all(isinstance(i, ast.Constant) and i.value == 1 for i in items)


class _Launch:
    def __init__(self, kernel: str, call: ast.Call, grid: ast.expr, branch: tuple[tuple[int, str], ...], owner):
        self.kernel, self.call, self.grid, self.branch, self.owner = kernel, call, grid, branch, owner


def _launches(tree: ast.AST, kernels: set[str]) -> list[_Launch]:
    """Every ``kernel[grid](...)`` call with the if/else branches around it and the function that makes it."""
    found: list[_Launch] = []

    def visit(node: ast.AST, branch: tuple[tuple[int, str], ...], owner: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            owner = node
        if isinstance(node, ast.If):
            visit(node.test, branch, owner)
            for child in node.body:
                visit(child, (*branch, (id(node), "body")), owner)
            for child in node.orelse:
                visit(child, (*branch, (id(node), "orelse")), owner)
            return
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in kernels
        ):
            found.append(_Launch(node.func.value.id, node, node.func.slice, branch, owner))
        for child in ast.iter_child_nodes(node):
            visit(child, branch, owner)

    visit(tree, (), tree)
    return found


def _exemption(
    fn: ast.FunctionDef, launches: list[_Launch], autotuned_launches: list[_Launch], tuned_kernel_exists: bool
) -> str:
    """Why a launched, un-autotuned kernel has nothing to tune ('' when it has something)."""
    params = [a for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    constexprs = [a.arg for a in params if _is_constexpr(a)]
    positions = {a.arg: i for i, a in enumerate((*fn.args.posonlyargs, *fn.args.args))}
    chosen_launch_options = any(
        kw.arg in ("num_warps", "num_stages", "num_ctas") and isinstance(kw.value, ast.Constant)
        for launch in launches
        for kw in launch.call.keywords
    )
    if tuned_kernel_exists and launches and all(_single_program(launch.grid) for launch in launches):
        return "a single-program step beside an autotuned kernel"
    if tuned_kernel_exists and launches:

        def falls_back(launch: _Launch) -> bool:
            for if_id, side in launch.branch:
                other = "orelse" if side == "body" else "body"
                if any((if_id, other) in tuned.branch for tuned in autotuned_launches):
                    return True
            return False

        if all(falls_back(launch) for launch in launches):
            return "a fallback in the other branch of an autotuned launch"
    if not launches:
        return ""  # never seen launched: nothing shows what it is given
    if not constexprs and not chosen_launch_options:
        return "no tile sizes or launch options to choose"
    if constexprs and not chosen_launch_options:
        for launch in launches:
            derived = _derived_names(launch.owner)
            given = {kw.arg: kw.value for kw in launch.call.keywords if kw.arg}
            for name in constexprs:
                if name in given:
                    value: ast.expr | None = given[name]
                elif name in positions and positions[name] < len(launch.call.args):
                    value = launch.call.args[positions[name]]
                else:
                    continue  # a default or a heuristic decides it, not the launch
                if not _size_derived(value, derived):
                    return ""
        return "every tile size is set by the problem's sizes"
    return ""


def autotune_info(source: str, filename: str = "<candidate>") -> AutotuneInfo:
    """Which kernels of the file must be autotuned, and which are. Parses the file; imports nothing.

    The rule: every launched kernel with something to tune carries ``@triton.autotune``. A kernel has nothing
    to tune when it takes no tile-size constexprs and its launches choose no warps or stages, or when every
    constexpr its launches pass is computed from the problem's sizes (``triton.next_power_of_2(n)``, a shape).
    Beside an autotuned kernel, a single-program finishing step (grid ``(1,)``) and a fallback launched in the
    other branch of an ``if`` that launches an autotuned kernel are exempt too. At least one kernel must be
    autotuned unless none has anything to tune.
    """
    try:
        tree = parse_python(source, filename=filename)
    except SyntaxError as exc:
        return AutotuneInfo(note=f"the file does not parse: {exc.msg} at line {exc.lineno}")
    kernels: dict[str, bool] = {}
    bodies: dict[str, ast.FunctionDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and jit_decorated(node):
            kernels[node.name] = any(dotted_name(d).rsplit(".", 1)[-1] == "autotune" for d in node.decorator_list)
            bodies[node.name] = node
    calls = _launches(tree, set(kernels))
    launched: list[str] = list(dict.fromkeys(c.kernel for c in calls))
    if launched:
        targets = launched
        note = ""
    else:
        called = {
            n.func.id
            for body in bodies.values()
            for n in ast.walk(body)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        targets = [k for k in kernels if k not in called]
        note = (
            "no kernel[grid](...) launch found; kernels that no other kernel calls must be autotuned" if kernels else ""
        )
    autotuned = [k for k in targets if kernels[k]]
    tuned_launches = [c for c in calls if kernels[c.kernel]]
    exempt: dict[str, str] = {}
    for k in targets:
        if kernels[k]:
            continue
        why = _exemption(bodies[k], [c for c in calls if c.kernel == k], tuned_launches, bool(autotuned))
        if why:
            exempt[k] = why
    missing = [k for k in targets if not kernels[k] and k not in exempt]
    return AutotuneInfo(
        kernels=list(kernels),
        launched=launched,
        autotuned=autotuned,
        missing=missing,
        exempt=exempt,
        note=note,
    )


# --- audit results ---------------------------------------------------------------------------------------


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _severity(finding: Any) -> str:
    sev = _get(finding, "severity", "")
    return str(getattr(sev, "value", sev)).lower()


def summarize_audit(report: Any) -> AuditSummary:
    """Read any audit report with ``findings`` whose items have a ``severity`` (pydantic model or dict)."""
    findings: Sequence[Any] = _get(report, "findings", None) or []
    errors = []
    warnings = 0
    for f in findings:
        sev = _severity(f)
        if sev == "error":
            label = _get(f, "rule", None) or _get(f, "kind", None) or "finding"
            label = str(getattr(label, "value", label))
            where = _get(f, "where", None)
            at = f" at {where}" if where else ""
            errors.append(f"[{label}]{at} {_get(f, 'message', '')}".strip())
        elif sev == "warning":
            warnings += 1
    raw: dict[str, Any] | None = None
    if hasattr(report, "model_dump"):
        raw = report.model_dump(mode="json")
    elif isinstance(report, dict):
        raw = report
    return AuditSummary(
        device=_get(report, "device", None),
        errors=errors,
        warnings=warnings,
        findings=len(findings),
        report=raw,
    )
