"""The dynamic parts of the audit: the correctness suite (through ``validate``) and the timings (``bench``).

Correctness suite. Each run is one ``validate`` call, judged in three tiers:

- **strict**: passes at the default tolerance (the reference module's, else ``compare.DEFAULT_TOLERANCES``);
- **loose**: fails strict with value mismatches only, and passes when atol and rtol are both multiplied by
  :data:`LOOSE_FACTOR` (10×) — the kernel is numerically weaker than PyTorch (e.g. it accumulates in fp16);
- **fail**: fails at the loose tolerance too, or fails in a way no tolerance excuses (NaN positions, shape,
  uninitialised output, a crash…).

The runs: ``base`` (the reference's cases, 3 seeds, edge shapes derived from a single ``get_inputs()``,
a repeated call for determinism, gradients when asked) and one run per value transform in
:data:`TRANSFORMS` (zeros, ones, large, small, negative, alternating, near_overflow, near_underflow, inf,
nan; 1 seed). Derived shapes are reported as their own row ("size variations").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from mcp_server.engine.audit.models import CorrectnessSection, PerformanceSection, PerfRow, SuiteRun, Tier
from mcp_server.engine.audit.static_models import AuditFinding, Category
from mcp_server.engine.device import DeviceInfo, probe
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.models import (
    BenchResult,
    Finding,
    FindingKind,
    Location,
    Severity,
    ValidateResult,
)
from mcp_server.engine.runner import Runner

LOOSE_FACTOR = 10.0
BASE_SEEDS = 3
# What each transform does to every floating input (see jobs.common.TRANSFORMS).
TRANSFORMS: dict[str, str] = {
    "zeros": "every floating input set to 0",
    "ones": "every floating input set to 1",
    "large": "scaled to |x| ≤ 1e6 (or the dtype's max / 1000)",
    "small": "scaled to |x| ≤ 1e-6 (or 10⁴ × the dtype's smallest normal)",
    "negative": "−|x|: every value negative",
    "alternating": "|x| with alternating signs",
    "near_overflow": "scaled to a quarter of the dtype's max (fp32 8.5e37, fp16 16384)",
    "near_underflow": "scaled to 8 × the dtype's smallest normal (fp32 9.4e-38)",
    "inf": "1 % of the elements set to +inf / −inf",
    "nan": "1 % of the elements set to NaN",
}
SUITE: tuple[str, ...] = ("base", *TRANSFORMS)
# Transforms that probe numerical stability rather than plain correctness.
STRESS = {"large", "small", "near_overflow", "near_underflow", "inf", "nan"}
# Errors a stress run turns into warnings: in which runs, the tier a run reads when they are its only errors, and
# what the warning adds. The judge's "no verdict" is the reference's limit at those inputs (it loses the answer in
# its own dtype), not the candidate's fault; on injected NaN/Inf, where PyTorch's output has them depends on its
# algorithm (a NaN carried through a zero weight or a masked term, or not).
TOLERATED: dict[FindingKind, tuple[frozenset[str], Tier, str]] = {
    FindingKind.reference_precision: (frozenset(STRESS), "not run", ""),
    FindingKind.nan_mismatch: (
        frozenset({"inf", "nan"}),
        "special",
        " (at injected NaN/Inf inputs PyTorch's own pattern depends on its algorithm, e.g. NaN carried through a "
        "masked or zero-weighted term: a warning)",
    ),
}
# Failures that a looser tolerance could excuse.
VALUE_KINDS = {FindingKind.mismatch, FindingKind.backward_mismatch}
MAX_FINDINGS_PER_RUN = 3

FIXES: dict[FindingKind, str] = {
    FindingKind.mismatch: "Compare the bad positions with the block boundaries: check masks and `other=` values "
    "first, then strides, then the accumulator dtype (fp32).",
    FindingKind.nan_mismatch: "Subtract the max before exp, pad masked lanes with values neutral for the reduction, "
    "guard divisions; NaN/Inf must appear exactly where PyTorch's do.",
    FindingKind.shape_mismatch: "Allocate the output from the reference's output shape (torch.empty_like) and "
    "reshape it back before returning.",
    FindingKind.dtype_mismatch: "Return the reference's dtype: cast at the store (`.to(out_ptr.dtype.element_ty)`).",
    FindingKind.device_mismatch: "Allocate outputs on the input's device.",
    FindingKind.input_mutated: "Write to a fresh output tensor, not into an input.",
    FindingKind.output_aliases_input: "Return a new tensor, not an input or a view of one.",
    FindingKind.buffer_mismatch: "Update the module's buffers as the reference's forward does (BatchNorm in "
    "training mode: running_mean/var with the momentum, num_batches_tracked), in the kernel or after it.",
    FindingKind.outputs_overlap: "Give each output its own memory: allocate one per output (views of one buffer "
    "are fine where their elements do not overlap).",
    FindingKind.no_triton_launch: "Launch the Triton kernel on every supported call; raise ValueError otherwise.",
    FindingKind.torch_compute: "Move the torch compute into the kernel (allocation and views are fine).",
    FindingKind.nondeterministic: "One writer per output element; replace float atomics by a two-phase reduction.",
    FindingKind.uninitialized_output: "Cover every output element: grid from triton.cdiv over the real size, masks "
    "no stricter than the bounds.",
    FindingKind.stale_cache: "Cache only what depends on shapes and dtypes, never results.",
    FindingKind.unsupported_shape: "Support the shape, or keep the clean error if callers never pass it.",
    FindingKind.backward_mismatch: "Check the backward kernel against autograd on the reference case by case.",
    FindingKind.timeout: "Check loop bounds and spin locks; raise the timeout only for legitimately long work.",
    FindingKind.crash: "Look for unmasked accesses and int32 offsets that wrap; rerun small under the interpreter.",
    FindingKind.oom: "Size scratch buffers by SM count, not by problem size; free what a call allocates.",
    FindingKind.reference_precision: "Make the reference the same function at every dtype, computing in float32 or "
    "float64 and casting only its result, so that its float64 run can judge.",
    FindingKind.exception: "The message and its place say what raised.",
    FindingKind.compile_error: "Fix the construct at the line the message names.",
    FindingKind.load_error: "Run the file with plain Python first: it must import without errors.",
    FindingKind.slower_than_eager: "Profile the largest case: fuse the surrounding ops, or pick bigger tiles and "
    "autotune num_warps/num_stages.",
    FindingKind.slower_than_compile: "torch.compile fuses the neighbourhood: fuse as much in the kernel, and autotune "
    "over more configs.",
    FindingKind.low_efficiency: "Under half the roofline: check vectorised accesses and occupancy in the compiled "
    "section, then the number of passes over memory.",
    FindingKind.high_spread: "Time again with more reps, a larger size, or cuda-graph mode before trusting the figure.",
    FindingKind.suspicious_speedup: "Validate again and check the bytes/FLOPs model: the kernel may skip work.",
    FindingKind.flat_scaling: "The time does not grow with the work: launch-bound (use cuda-graph mode to see the "
    "kernel alone) or not doing the work.",
    FindingKind.timer_disagreement: "Work ran on another stream or the host: launch on the current stream.",
    FindingKind.failed_validation: "Fix correctness first: bench refuses a candidate that fails validation.",
}
if hasattr(FindingKind, "launch_bound"):
    FIXES[FindingKind.launch_bound] = "Fewer launches per call, a lighter launcher, or CUDA graphs."


def _def_line(path: Path, name: str) -> int | None:
    from mcp_server.engine.audit.compiled import def_lines

    return def_lines(path).get(name.split(".")[0])


def candidate_location(spec: str) -> Location:
    path_text, _, name = spec.rpartition(":")
    path = Path(path_text)
    return Location(file=str(path), line=_def_line(path, name) if name else None)


def _category(run: str, kind: FindingKind | None) -> Category:
    if kind is FindingKind.nan_mismatch or run in STRESS:
        return "numerics"
    return "correctness"


def convert(
    finding: Finding,
    *,
    section: str,
    run: str,
    default_where: Location,
    category: Category | None = None,
    fix: str | None = None,
) -> AuditFinding:
    label = f"[{run}] " if run else ""
    where = finding.where or default_where
    return AuditFinding(
        rule=finding.kind.value,
        category=category or _category(run, finding.kind),
        severity=finding.severity,
        message=f"{label}{finding.message}".replace("\n", " "),
        fix=fix or FIXES.get(finding.kind, "See the message."),
        where=where,
        section=section,  # type: ignore[arg-type]
        kind=finding.kind,
    )


# --- correctness ----------------------------------------------------------------------------------------


def _judged(result: ValidateResult, derived: bool | None) -> tuple[int, int]:
    cases = [c for c in result.cases if derived is None or (c.derived is not None) == derived]
    judged = [c for c in cases if c.status in ("passed", "failed")]
    return sum(c.status == "passed" for c in judged), len(judged)


def _errors(rows: list[Any]) -> tuple[float | None, float | None]:
    if not rows:
        return None, None
    return max(r.max_abs_err for r in rows), max(r.rel_norm_err for r in rows)


def _loose(strict: ValidateResult) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for row in strict.rows:
        if row.atol is not None and row.rtol is not None and row.dtype not in out:
            out[row.dtype] = (row.atol * LOOSE_FACTOR, row.rtol * LOOSE_FACTOR)
    return out


def _tolerated(run: str, finding: Finding) -> bool:
    rule = TOLERATED.get(finding.kind)
    return finding.severity is Severity.error and rule is not None and run in rule[0]


def _tolerated_tier(run: str, result: ValidateResult) -> Tier | None:
    """The tier of a run whose errors are all of one kind this run tolerates (``TOLERATED``); None otherwise."""
    kinds = {f.kind for f in result.errors}
    if len(kinds) != 1 or not _tolerated(run, result.errors[0]):
        return None
    return TOLERATED[kinds.pop()][1]


def _tier(strict: ValidateResult, loose: ValidateResult | None, derived: bool | None) -> Tier:
    passed, judged = _judged(strict, derived)
    if judged and passed == judged:
        return "strict"
    if loose is not None:
        passed_l, judged_l = _judged(loose, derived)
        if judged_l and passed_l == judged_l:
            return "loose"
    return "fail"


def correctness_section(
    reference: str,
    candidate: str,
    *,
    inputs: str | None,
    suite: tuple[str, ...] = SUITE,
    backward: bool = False,
    allow_torch_ops: tuple[str, ...] = (),
    dims: dict[str, Any] | None = None,
    timeout_s: float,
    runner: Runner,
    cwd: Path | None,
    progress: Callable[[str], None] | None = None,
) -> tuple[CorrectnessSection, list[AuditFinding]]:
    """The suite's validate runs. ``allow_torch_ops`` (e.g. ``("mm", "addmm")``) is passed to every run: the
    torch ops the candidate may keep (a cuBLAS GEMM beside the Triton kernels) without a torch_compute error."""
    from mcp_server.engine.validate import validate

    started = time.perf_counter()
    unknown = [s for s in suite if s not in SUITE]
    if unknown:
        raise UsageError(f"Unknown correctness run(s) {', '.join(unknown)}; choose from {', '.join(SUITE)}.")
    where = candidate_location(candidate)
    runs: list[SuiteRun] = []
    findings: list[AuditFinding] = []
    tolerances: dict[str, tuple[float, float]] = {}
    determinism = "not checked"

    def check(transform: str | None, tol: dict[str, tuple[float, float]] | None) -> ValidateResult:
        base = transform is None
        return validate(
            reference,
            candidate,
            inputs=inputs,
            seeds=BASE_SEEDS if base else 1,
            derive_shapes=base,
            backward=backward and base,
            determinism=base,
            tolerances=tol,
            allow_torch_ops=allow_torch_ops,
            dims=dims,
            transform=transform,
            timeout_s=timeout_s,
            runner=runner,
            cwd=cwd,
        )

    def evaluate(name: str) -> tuple[ValidateResult | UsageError, ValidateResult | None, float]:
        """The strict run of one suite entry, and the loose rerun when only values were off."""
        t0 = time.perf_counter()
        transform = None if name == "base" else name
        try:
            strict = check(transform, None)
        except UsageError as exc:
            return exc, None, t0
        loose = None
        if not strict.ok and {f.kind for f in strict.errors} <= VALUE_KINDS:
            loose = check(transform, _loose(strict))
        return strict, loose, t0

    # The runs are independent isolated jobs: run several at once (on a GPU the children share it; the
    # parent's float64 comparisons use the CPU), then read them in the suite's order.
    workers = 2 if probe(runner).interpreter else 4
    results: dict[str, tuple[ValidateResult | UsageError, ValidateResult | None, float]] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(evaluate, name): name for name in suite}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if progress:
                progress(f"correctness {len(results)}/{len(suite)}: {futures[future]} done")

    for name in suite:
        transform = None if name == "base" else name
        what = TRANSFORMS.get(name, f"the reference's cases, {BASE_SEEDS} seeds")
        outcome, loose, t0 = results[name]
        if isinstance(outcome, UsageError):
            exc = outcome
            if name == "base":
                raise exc
            runs.append(
                SuiteRun(
                    name=name,
                    transform=transform,
                    inputs=what,
                    tier="not run",
                    reason=f"the reference rejects these inputs: {str(exc).splitlines()[0][:300]}",
                    seconds=round(time.perf_counter() - t0, 3),
                )
            )
            continue
        strict = outcome
        for row in strict.rows:
            if row.atol is not None and row.rtol is not None:
                tolerances.setdefault(row.dtype, (row.atol, row.rtol))
        final = loose if loose is not None else strict
        subsets: list[tuple[str, str, bool | None]] = [(name, what, False if name == "base" else None)]
        if name == "base" and any(c.derived for c in strict.cases):
            shapes = sorted({c.derived for c in strict.cases if c.derived})
            subsets.append(("size variations", "derived shapes: " + "; ".join(shapes)[:300], True))
        for label, inputs_text, derived in subsets:
            passed, judged = _judged(strict, derived)
            if judged == 0:
                statuses = sorted({c.status for c in strict.cases})
                reason = strict.findings[0].message.splitlines()[0][:300] if strict.findings else None
                runs.append(
                    SuiteRun(
                        name=label,
                        transform=transform,
                        inputs=inputs_text,
                        tier="fail" if strict.errors else "not run",
                        reason=reason or f"no case was judged ({', '.join(statuses)})",
                        kinds=sorted({f.kind.value for f in strict.errors}),
                        seconds=round(time.perf_counter() - t0, 3),
                    )
                )
                continue
            tier = _tier(strict, loose, derived)
            unjudged = None
            tolerated = _tolerated_tier(name, final) if tier == "fail" else None
            if tolerated is not None:
                tier = tolerated
                unjudged = final.errors[0].message.splitlines()[0][:300]
            rows = [r for r in final.rows if _row_derived(final, r.case) == derived or derived is None]
            abs_err, norm_err = _errors(rows)
            failing = [f for f in final.errors if derived is None or _case_derived(final, f.case) in (derived, None)]
            runs.append(
                SuiteRun(
                    name=label,
                    transform=transform,
                    inputs=inputs_text,
                    tier=tier,
                    cases_passed=passed,
                    cases_judged=judged,
                    cases_passed_loose=_judged(loose, derived)[0] if loose is not None else None,
                    max_abs_err=abs_err,
                    max_rel_norm_err=norm_err,
                    kinds=sorted({f.kind.value for f in failing}) if tier != "strict" else [],
                    reason=unjudged
                    or (failing[0].message.splitlines()[0][:300] if failing and tier == "fail" else None),
                    seconds=round(time.perf_counter() - t0, 3),
                )
            )
        findings.extend(_suite_findings(name, strict, loose, where))
        if name == "base":
            determinism = _determinism(strict)
    status = _status(runs, findings)
    section = CorrectnessSection(
        status=status,
        reference=reference,
        candidate=candidate,
        runs=runs,
        determinism=determinism,
        backward_checked=backward,
        allow_torch_ops=list(allow_torch_ops),
        tolerances=tolerances,
        loose_factor=LOOSE_FACTOR,
        seconds=round(time.perf_counter() - started, 3),
    )
    return section, findings


def _row_derived(result: ValidateResult, case: str) -> bool:
    return any(c.derived is not None for c in result.cases if c.case == case)


def _case_derived(result: ValidateResult, case: str | None) -> bool | None:
    if case is None:
        return None
    return _row_derived(result, case)


def _determinism(result: ValidateResult) -> str:
    kinds = [f for f in result.findings if f.kind is FindingKind.nondeterministic]
    if any(f.severity is Severity.error for f in kinds):
        return "differs beyond tolerance"
    if kinds:
        return "within tolerance (not bitwise)"
    if any(c.status == "passed" for c in result.cases):
        return "bitwise identical"
    return "not checked"


def _suite_findings(
    run: str, strict: ValidateResult, loose: ValidateResult | None, where: Location
) -> list[AuditFinding]:
    out: list[AuditFinding] = []
    if loose is not None and loose.ok:
        worst = max((r.rel_norm_err for r in strict.rows if not r.ok), default=0.0)
        kinds = sorted({f.kind.value for f in strict.errors})
        out.append(
            AuditFinding(
                rule="loose-tolerance-only",
                category=_category(run, None) if run in STRESS else "numerics",
                severity=Severity.warning,
                message=f"[{run}] passes only at {LOOSE_FACTOR:g}× the default atol/rtol ({', '.join(kinds)} at the "
                f"default; worst relative-norm error {worst:.2e}): less accurate than PyTorch in this dtype",
                fix="Accumulate in fp32 (tl.zeros(..., tl.float32), .to(tl.float32) before tl.sum/tl.dot), subtract "
                "the max before exp, and avoid reassociating long sums in half precision.",
                where=where,
                section="correctness",
                kind=FindingKind.mismatch,
            )
        )
        final_findings = [f for f in loose.findings if f.severity is not Severity.error]
    else:
        final_findings = (loose or strict).findings
    counts: dict[tuple[FindingKind, Severity], int] = {}
    for f in final_findings:
        if f.severity is Severity.info and f.kind is not FindingKind.nondeterministic:
            continue
        fix = None
        if f.kind is FindingKind.reference_precision and f.severity is Severity.warning:
            f, fix = _reference_precision(f, loose or strict)
        if _tolerated(run, f):
            f = f.model_copy(update={"severity": Severity.warning, "message": f.message + TOLERATED[f.kind][2]})
        key = (f.kind, f.severity)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= MAX_FINDINGS_PER_RUN:
            out.append(convert(f, section="correctness", run=run, default_where=where, fix=fix))
    return out


def _reference_precision(finding: Finding, result: ValidateResult) -> tuple[Finding, str | None]:
    """The warning that the reference's float64 run could not be the truth, said from what happened: float64
    failed (raised, or kept a lower dtype), or it ran and the run in the reference's own dtype is far from it
    (at stress inputs, usually an intermediate that overflows or underflows in that dtype); with its fix."""
    precision = result.reference_precision_cause
    if precision is None:
        return finding, None
    dtypes = sorted({r.dtype for r in result.rows})
    own = dtypes[0] if len(dtypes) == 1 else "its own dtype"
    if not precision.float64_ran:
        message = (
            f"The reference could not run in float64 ({precision.cause}). The outputs were judged against its run "
            f"in {own}, PyTorch's own error estimated from {precision.estimate}."
        )
        fix = (
            "Make the reference reach all its modules as registered attributes (so .double() converts them) and "
            "avoid hard-coded dtypes, so that it runs in float64."
        )
        return finding.model_copy(update={"message": message}), fix
    gap = (
        f" on output {precision.output} (relative norm error {precision.rel_norm:.3g})"
        if precision.output is not None and precision.rel_norm is not None
        else ""
    )
    message = (
        f"The reference ran in float64, but its run in {own} is far from that result{gap}: at these inputs {own} "
        "loses the answer (an intermediate overflows or underflows), or the reference computes something else in "
        f"float64. The outputs were judged against its run in {own}; an output that matches the float64 result "
        "passes too."
    )
    fix = (
        f"Nothing, if inputs this close to {own}'s limits never occur; otherwise scale before squaring or summing "
        "(e.g. by the row's largest |x|) or accumulate in a wider type, in the kernel and the reference."
    )
    return finding.model_copy(update={"message": message}), fix


def _status(runs: list[SuiteRun], findings: list[AuditFinding]) -> str:
    if any(f.severity is Severity.error for f in findings) or any(r.tier == "fail" for r in runs):
        return "failed"
    if any(f.severity is Severity.warning for f in findings) or any(
        r.tier in ("loose", "special", "not run") for r in runs
    ):
        return "warnings"
    return "passed"


# --- performance ----------------------------------------------------------------------------------------


def performance_section(
    candidate: str,
    reference: str | None,
    *,
    device: DeviceInfo,
    inputs: str | None,
    sizes: str | None,
    validated: bool,
    timeout_s: float,
    runner: Runner,
    cwd: Path | None,
    progress: Callable[[str], None] | None = None,
) -> tuple[PerformanceSection, list[AuditFinding]]:
    started = time.perf_counter()
    if device.interpreter:
        return PerformanceSection(status="skipped", reason="needs a CUDA GPU: interpreter timings mean nothing"), []
    try:
        from mcp_server.engine.bench import bench
    except ImportError as exc:
        return PerformanceSection(status="skipped", reason=f"bench is not available here ({exc})"), []
    if progress:
        progress("timing against eager and torch.compile")
    try:
        result = bench(
            candidate,
            reference,
            inputs=inputs,
            sizes=sizes,
            validate_first=not validated,
            timeout_s=max(timeout_s, 600.0),
            runner=runner,
            cwd=cwd,
            progress=(lambda done, total, message: progress(f"bench: {message}")) if progress else None,
        )
    except (EnvironmentUnavailable, UsageError) as exc:
        return PerformanceSection(status="skipped", reason=str(exc).splitlines()[0][:400]), []
    return bench_section(result, candidate, round(time.perf_counter() - started, 3))


def bench_section(
    result: BenchResult, candidate: str, seconds: float = 0.0
) -> tuple[PerformanceSection, list[AuditFinding]]:
    """The seed's table (size, Triton ms, PyTorch ms, torch.compile ms, speedup, % of peak) and its flags."""
    from mcp_server.engine.bench import honest_ms

    rows = []
    for row in result.rows:
        by = {t.provider: t for t in row.timings if not t.error}
        cand = by.get("candidate")
        rows.append(
            PerfRow(
                size=row.case,
                triton_ms=honest_ms(cand) if cand else None,
                eager_ms=honest_ms(by["eager"]) if "eager" in by else None,
                compile_ms=honest_ms(by["compile"]) if "compile" in by else None,
                speedup_vs_eager=row.speedup_vs_eager,
                speedup_vs_compile=row.speedup_vs_compile,
                standing_vs_compile=row.standing.get("compile"),
                pct_of_peak=row.pct_of_roofline,
                bound=row.bound,
                spread=cand.spread if cand else None,
                bandwidth_gbps=row.bandwidth_gbps,
                tflops=row.tflops,
            )
        )
    where = candidate_location(candidate)
    findings = [
        convert(f, section="performance", run=f.case or "", default_where=where, category="performance")
        for f in result.findings
    ]
    for f in findings:
        if f.message.startswith("[") and f.kind is not None:
            f.message = f.message.split("] ", 1)[-1]
    errors = any(f.severity is Severity.error for f in findings)
    warnings = any(f.severity is Severity.warning for f in findings)
    peaks = None
    if result.peaks is not None:
        tf = ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in result.peaks.matmul_tflops.items())
        peaks = f"{result.peaks.device}: copy {result.peaks.copy_gbps:.0f} GB/s; matmul {tf}"
    section = PerformanceSection(
        status="failed" if errors or not result.ok else "warnings" if warnings else "passed",
        rows=rows,
        peaks=peaks,
        reason=None if result.rows else result.summary,
        notes=[f"{result.mode} timing, {result.reps} reps, L2 {'flushed' if result.l2_flush else 'warm'}"],
        seconds=seconds or result.seconds,
    )
    return section, findings
