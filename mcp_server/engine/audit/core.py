"""audit: a kernel review from four kinds of evidence — the code, the compiled artifact, runs, timings.

1. **static** — the AST rules (:func:`analyze_file`); the file is parsed, never imported here.
2. **compiled** — a child imports the file, runs the launcher on the reference's inputs and records every
   launch (``jobs.audit_job``); each launched kernel is compiled for the target GPU (no GPU needed) with
   exactly the captured signature, constexprs and launch options, and the compiled-code rules read it.
3. **correctness** — the suite of ``validate`` runs: base cases, ten value transforms, derived sizes,
   determinism, backward when asked; each run tiered strict / loose (10×) / fail (see ``dynamic``).
4. **performance** — ``bench`` against eager and torch.compile with % of the device's peak; needs a GPU,
   and without one the section says so and the category is "not checked", never passed.

``FILE`` may name the launcher (``path.py:launcher``). Without a name the child picks the SPEC's highest
stage, a KernelBench ``ModelNew``, a function named ``candidate``, or the file's only public launcher. The
reference defaults to the SPEC's, ``Model``, or the file's only ``reference*`` function.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mcp_server.engine.audit.compiled import compiled_section
from mcp_server.engine.audit.dynamic import SUITE, correctness_section, performance_section
from mcp_server.engine.audit.models import (
    SECTIONS,
    AuditReport,
    CompiledSection,
    CorrectnessSection,
    PerformanceSection,
    Section,
    StaticSection,
)
from mcp_server.engine.audit.render import categories, recommendations, reproduce, sort_findings, summary_line
from mcp_server.engine.audit.static import analyze_file
from mcp_server.engine.audit.static_models import AuditFinding, StaticAnalysisError
from mcp_server.engine.device import probe
from mcp_server.engine.dims import check_dims, dims_env, parse_dims
from mcp_server.engine.errors import UsageError
from mcp_server.engine.jobs import registry
from mcp_server.engine.models import Location, Severity
from mcp_server.engine.resolve import resolve_inputs
from mcp_server.engine.runner import Runner, shared_runner
from mcp_server.engine.specs import looked_up, parse_spec, read_python

Progress = Callable[[float, float | None, str], None]


def _file_spec(file: str, cwd: Path | None) -> tuple[Path, str | None]:
    """``path.py`` or ``path.py:launcher`` → (absolute path, launcher name or None)."""
    text = (file or "").strip()
    if not text:
        raise UsageError("No file to audit. Pass path/to/kernels.py or path/to/kernels.py:launcher.")
    head, sep, tail = text.rpartition(":")
    if sep and head and "/" not in tail and not tail.startswith("\\") and tail:
        spec = parse_spec(text, role="launcher", cwd=cwd)
        return spec.path, spec.name
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    path, kind = looked_up(path, "The file to audit", "Pass path/to/kernels.py.")
    if kind != "file":
        raise UsageError(f"The file to audit, {path}, does not exist or is not a file. Pass path/to/kernels.py.")
    read_python(path, "audited")
    return path, None


def _imports_triton(path: Path) -> bool:
    """Whether the file imports ``triton`` (or a module under it) anywhere, read from its source."""
    _, tree = read_python(path, "audited")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "triton" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton":
            return True
    return False


def _sections(sections: Iterable[str]) -> list[Section]:
    chosen = list(dict.fromkeys(s.strip() for s in sections if s.strip()))
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown or not chosen:
        raise UsageError(
            f"Unknown audit section(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SECTIONS)}."
        )
    return [s for s in SECTIONS if s in chosen]


def audit(
    file: str,
    *,
    reference: str | None = None,
    inputs: str | None = None,
    target: str | None = None,
    sizes: str | None = None,
    sections: Iterable[str] = SECTIONS,
    suite: Iterable[str] = SUITE,
    backward: bool = False,
    allow_torch_ops: Iterable[str] = (),
    dims: str | dict[str, Any] | None = None,
    timeout_s: float = 300.0,
    progress: Progress | None = None,
    runner: Runner | None = None,
    cwd: Path | None = None,
) -> AuditReport:
    """Audit the Triton code in ``file`` (``path.py`` or ``path.py:launcher``) against ``reference``.

    ``allow_torch_ops`` names torch ops the candidate may run beside its kernels (as ``validate`` takes
    them: ``mm``, ``aten.addmm``, ...): every correctness run passes them on, so a candidate that keeps its
    cuBLAS GEMMs in torch is not failed as ``torch_compute``.

    Raises UsageError for misuse (missing file, unknown section, a reference that cannot run). A kernel that
    is wrong, slow or wasteful is a report with findings; ``ok`` is false when any finding is an error.
    """
    started = time.perf_counter()
    wanted = _sections(sections)
    suite_runs = tuple(dict.fromkeys(s.strip() for s in suite if s.strip()))
    unknown = [s for s in suite_runs if s not in SUITE]
    if unknown or not suite_runs:
        raise UsageError(
            f"Unknown correctness run(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SUITE)}."
        )
    allowed = tuple(dict.fromkeys(op.strip() for op in allow_torch_ops if op and op.strip()))
    path, launcher = _file_spec(file, cwd)
    ref_spec = parse_spec(reference, role="reference", defaults=("Model", "reference"), cwd=cwd) if reference else None
    overrides = parse_dims(dims)
    if overrides:
        check_dims(overrides, [path] + ([ref_spec.path] if ref_spec else []))
    steps = 1 + sum(s != "static" for s in wanted)
    done = 0

    def say(message: str) -> None:
        if progress:
            progress(done, steps, message)

    # 1. static
    findings: list[AuditFinding] = []
    notes: list[str] = []
    say("static analysis")
    try:
        static = analyze_file(path)
    except StaticAnalysisError as exc:
        raise UsageError(str(exc)) from None
    if not static.kernels and not _imports_triton(path):
        raise UsageError(
            f"{path} defines no @triton.jit kernel and does not import Triton, so there is no Triton kernel to "
            "audit. Pass the file that defines the kernels: path/to/kernels.py, or path/to/kernels.py:launcher."
        )
    static_section = StaticSection(
        status="not requested",
        kernels=static.kernels,
        launchers=static.launchers,
        rules_run=len(static.rules_run),
        notes=static.notes,
    )
    if "static" in wanted:
        findings.extend(static.findings)
        errors = any(f.severity is Severity.error for f in static.findings)
        warns = any(f.severity is Severity.warning for f in static.findings)
        static_section.status = "failed" if errors else "warnings" if warns else "passed"
    done += 1

    runner = runner or shared_runner()
    device = probe(runner)
    target_name = _target(target, device.target)
    compiled = CompiledSection(status="not requested", target=target_name)
    correctness = CorrectnessSection(status="not requested")
    performance = PerformanceSection(status="not requested")
    candidate: str | None = f"{path}:{launcher}" if launcher else None
    reference_text = str(ref_spec) if ref_spec else None

    # 2. discovery and launch capture (one child)
    needs_child = any(s in wanted for s in ("compiled", "correctness", "performance"))
    captured: dict[str, Any] = {}
    if needs_child:
        say("running the launcher to capture its kernel launches" if "compiled" in wanted else "finding the launcher")
        captured, failure = _capture(
            path,
            launcher,
            ref_spec,
            inputs,
            static.launchers,
            "compiled" in wanted,
            backward,
            device,
            overrides,
            runner,
            cwd,
            timeout_s,
        )
        if failure is not None:
            findings.append(failure)
            reason = failure.message  # "the file could not be loaded and run: …"
            compiled.status = "skipped" if "compiled" in wanted else compiled.status
            compiled.notes.append(reason)
            if "correctness" in wanted:
                correctness = CorrectnessSection(status="skipped", reason=reason)
            if "performance" in wanted:
                performance = PerformanceSection(status="skipped", reason=reason)
        else:
            if not candidate and captured.get("candidate"):
                candidate = f"{path}:{captured['candidate']}"
            if not reference_text and captured.get("reference"):
                reference_text = f"{path}:{captured['reference']}"
            if not candidate:
                notes.append(f"launcher: {captured.get('candidate_why')}")
            if captured.get("case_errors"):
                notes.append(
                    "the launcher raised while its launches were captured (the correctness suite judges it): "
                    + "; ".join(captured["case_errors"][:3])
                )
            elsewhere = [k for k in captured.get("elsewhere") or {} if not k.startswith("capture error")]
            if elsewhere:
                notes.append(f"kernels from other files were launched and not audited: {', '.join(elsewhere[:5])}")
            notes.extend(k for k in captured.get("elsewhere") or {} if k.startswith("capture error"))

    # 3. compiled
    if "compiled" in wanted and compiled.status == "not requested":
        launches = captured.get("launches") or []
        if launches:
            launched = {rec["kernel"] for rec in launches}
            idle = [k for k in static.kernels if k not in launched]
            extra = list(captured.get("notes") or [])
            if idle:
                extra.append(
                    f"not launched by {candidate.rpartition(':')[2] if candidate else 'the launcher'} on these inputs "
                    f"(helpers are compiled inside the kernels that call them): {', '.join(idle)}"
                )
            compiled, more = compiled_section(
                path, launches, target=target_name, runner=runner, cwd=cwd, notes=extra, progress=say
            )
            findings.extend(more)
        else:
            why = (
                "; ".join(captured.get("notes") or [])
                or (None if candidate else f"no launcher to run ({captured.get('candidate_why')})")
                or "the launcher launched no @triton.jit kernel of this file"
            )
            compiled = CompiledSection(status="skipped", target=target_name, notes=[why])
        done += 1

    # 4. correctness
    if "correctness" in wanted and correctness.status == "not requested":
        if not candidate:
            correctness = CorrectnessSection(
                status="skipped", reason=f"no launcher to validate ({captured.get('candidate_why')})"
            )
        elif not reference_text:
            correctness = CorrectnessSection(
                status="skipped",
                candidate=candidate,
                reason=f"no reference ({captured.get('reference_why')}); pass --reference path.py:fn",
            )
        else:
            correctness, more = correctness_section(
                reference_text,
                candidate,
                inputs=inputs,
                suite=suite_runs,
                backward=backward,
                allow_torch_ops=allowed,
                dims=overrides,
                timeout_s=timeout_s,
                runner=runner,
                cwd=cwd,
                progress=say,
            )
            findings.extend(more)
        done += 1

    # 5. performance
    if "performance" in wanted and performance.status == "not requested":
        if not candidate:
            performance = PerformanceSection(status="skipped", reason="no launcher to time")
        elif correctness.status == "failed":
            performance = PerformanceSection(
                status="skipped", reason="not timed: the candidate failed the correctness suite"
            )
        else:
            performance, more = performance_section(
                candidate,
                reference_text,
                device=device,
                inputs=inputs,
                sizes=sizes,
                validated=correctness.status in ("passed", "warnings"),
                timeout_s=timeout_s,
                runner=runner,
                cwd=cwd,
                progress=say,
            )
            findings.extend(more)
        done += 1

    findings = sort_findings(findings)
    report = AuditReport(
        ok=not any(f.severity is Severity.error for f in findings),
        complete=all(s.status != "skipped" for s in (compiled, correctness, performance)),
        device=device.device,
        file=str(path),
        candidate=candidate,
        reference=reference_text,
        target=target_name,
        sections=wanted,
        static=static_section,
        compiled=compiled,
        correctness=correctness,
        performance=performance,
        categories=[],
        findings=findings,
        notes=notes,
        versions={"torch": device.torch, "triton": device.triton},
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    report.categories = categories(report)
    report.recommendations = recommendations(report)
    report.reproduce = reproduce(
        report, inputs=inputs, cwd=cwd or Path.cwd(), backward=backward, allow_torch_ops=allowed
    )
    report.summary = summary_line(report)
    report.seconds = round(time.perf_counter() - started, 3)
    if progress:
        progress(steps, steps, "audit done")
    return report


def _target(target: str | None, local: str) -> str:
    from mcp_server.engine.jobs.compile_job import parse_target

    text = target or local
    try:
        arch = parse_target(text)
    except Exception:
        raise UsageError(f"Unknown target {text!r}. Use cuda:80, cuda:90 or cuda:100 (or sm_90).") from None
    if arch < 75:
        raise UsageError(f"Target sm_{arch} is older than Triton supports (7.5+). Use cuda:80, cuda:90 or cuda:100.")
    return f"cuda:{arch}"


def _capture(
    path: Path,
    launcher: str | None,
    ref_spec: Any,
    inputs: str | None,
    launchers: list[str],
    capture: bool,
    backward: bool,
    device: Any,
    dims: dict[str, Any],
    runner: Runner,
    cwd: Path | None,
    timeout_s: float,
) -> tuple[dict[str, Any], AuditFinding | None]:
    """Run the audit job: discover the launcher/reference, and record the launches when asked."""
    files = [str(path)]
    if ref_spec is not None:
        files.append(str(ref_spec.path))
    resolved = resolve_inputs(inputs, cwd=cwd)
    inputs_param = resolved.value
    files.extend(resolved.files)
    outcome = runner.run(
        registry.AUDIT.name,
        {
            "file": str(path),
            "candidate": launcher,
            "reference": {"path": str(ref_spec.path), "name": ref_spec.name} if ref_spec else None,
            "inputs": inputs_param,
            "launchers": launchers,
            "capture": capture,
            "backward": backward,
            "device": device.torch_device,
        },
        timeout_s=timeout_s,
        env={**device.job_env(), **dims_env(dims)},
        user_files=files,
        cwd=str(cwd or Path.cwd()),
    )
    with outcome:
        if outcome.usage_error:
            raise UsageError(outcome.usage_error)
        if outcome.failure is not None:
            f = outcome.failure
            where = f.where or Location(file=str(path))
            return {}, AuditFinding(
                rule=f.kind.value,
                category="correctness",
                severity=Severity.error,
                message=f"the file could not be loaded and run: {f.message}".replace("\n", " "),
                fix="Run the file with plain Python first: it must import (and its launcher run) without errors.",
                where=where,
                section="compiled",
                kind=f.kind,
            )
        return dict(outcome.result or {}), None
