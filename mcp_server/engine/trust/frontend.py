"""Under the interpreter: would the GPU compiler take the kernels that just passed?

The interpreter runs a ``@triton.jit`` body as Python, so a kernel that calls a plain Python function, leaves a
loop with ``break`` or computes on its blocks' NumPy arrays gives right answers there and fails to compile on
every GPU. The candidate's child keeps each interpreted launch's specialisation
(:mod:`mcp_server.engine.jobs.launch_specs`); a child of its own, without the interpreter, lowers each one with
Triton's front end (:mod:`mcp_server.engine.jobs.frontend_job`). A refusal is a ``compile_error``, an error: the
kernel is not a GPU kernel (a warning where only a derived case met it, as a refused case is on a GPU). A
launched kernel the check could not reach is a warning that says why.

The check lowers the kernel its file holds, so what ran must be that kernel: a global name the kernel read bound
at run time to something else than a fresh import binds, a ``triton.language``, interpreter or NumPy name bound
to the user's code, or a source file that changed since the interpreter compiled the kernel from it, is an
``evasion`` error.
"""

from __future__ import annotations

import os
from typing import Any

from mcp_server.engine.frames import kernel_label
from mcp_server.engine.jobs import registry
from mcp_server.engine.models import Failure, Finding, FindingKind, Severity
from mcp_server.engine.runner import Runner

TIMEOUT_S = 120.0
ADVICE = (
    "Under the interpreter a kernel's body runs as Python; on a GPU it must be Triton: call @triton.jit "
    "helpers, not plain functions, keep loops free of break/continue, and compute with triton.language"
)


def _label(spec: dict[str, Any]) -> str:
    # The recorder names launches the same way: a launch without a kept specialisation is told apart by it.
    return kernel_label(spec["kernel"], spec["path"], spec["line"])


def _first_line(failure: Failure) -> str:
    """The compiler's message without the source excerpt (``where`` carries it) and the location prefix."""
    line = (failure.message.splitlines() or [""])[0].strip()
    where = failure.where
    if where is not None and where.file and line.startswith(where.file):
        line = line.split(": ", 1)[-1] if ": " in line else line
    return line.rstrip(".")


def _rebinding(label: str, change: dict[str, str]) -> Finding:
    """A name the kernel read bound at run time to something else than its file binds it to on import."""
    values = change["ran"].startswith(("value ", "constexpr ")) and change["file"].startswith(("value ", "constexpr "))
    message = (
        f"{label} read `{change['name']}` bound at run time to {change['ran']}, but importing "
        f"{os.path.basename(change['path'])} binds it to {change['file']}"
    )
    if values:
        # A launcher may set a constant before its first launch (Triton refuses a change after it): lowered here
        # with the file's value, so the check may not be of the kernel that ran.
        return _warning(f"{message}: the GPU compiler's check used the file's value")
    return Finding(
        kind=FindingKind.evasion,
        severity=Severity.error,
        message=f"{message}: the kernel that ran is not the one its file gives the GPU compiler",
    )


def _warning(message: str) -> Finding:
    return Finding(kind=FindingKind.compile_error, severity=Severity.warning, message=message)


def _judged(spec: dict[str, Any], result: dict[str, Any]) -> list[tuple[tuple[str, str], Finding]]:
    """The findings of one lowered specialisation, each with the key that makes a repeat of it the same finding."""
    label = _label(spec)
    out = [((label, f"rebound {change['name']}"), _rebinding(label, change)) for change in result.get("rebound") or []]
    if result.get("source_changed"):
        message = (
            f"{label}: the source the interpreter ran is not what {os.path.basename(spec['path'])} holds now (the "
            "file changed during the run), so the kernel that passed is not the one a GPU would compile; run "
            "validate again on the file as it is"
        )
        out.append(((label, "source"), Finding(kind=FindingKind.evasion, severity=Severity.error, message=message)))
    if spec.get("patched"):
        names = ", ".join(spec["patched"])
        message = (
            f"{label} ran with {names} bound to the user's code at run time: the interpreter called that Python "
            "where a GPU compiles Triton's own, so the kernel that ran is not one a GPU would compile"
        )
        out.append(((label, "patched"), Finding(kind=FindingKind.evasion, severity=Severity.error, message=message)))
    if result.get("failure"):
        failure = Failure.model_validate(result["failure"])
        first = _first_line(failure)
        if spec.get("own", True):
            message = (
                f"{label} ran under the Triton interpreter, but the GPU compiler refuses it (cuda:90, cuda:100 and "
                f"cuda:80 tried) with the arguments it was launched with: {first}. {ADVICE}"
            )
            finding = Finding(
                kind=FindingKind.compile_error, severity=Severity.error, message=message, where=failure.where
            )
        else:
            # On a GPU the launch would raise in those cases: a refused derived case, which is a warning there.
            cases = ", ".join(k.rpartition("#")[0] or k for k in spec.get("cases") or []) or "a derived case"
            message = (
                f"{cases}: {label} ran there under the Triton interpreter, but the GPU compiler refuses it with "
                f"those arguments ({first}), so on a GPU the candidate refuses this case"
            )
            finding = Finding(
                kind=FindingKind.unsupported_shape, severity=Severity.warning, message=message, where=failure.where
            )
        out.append(((label, first), finding))
    elif result.get("no_source"):
        message = (
            f"{label} has no source file ({spec['path']}: built by exec or at run time), so whether the GPU "
            "compiler takes it cannot be checked here; define the kernel in a .py file"
        )
        finding = Finding(kind=FindingKind.compile_error, severity=Severity.error, message=message)
        out.append(((label, "no source"), finding))
    elif result.get("refused"):
        message = (
            f"{label} ran under the Triton interpreter, but a GPU could not compile it: {result['refused']}. {ADVICE}"
        )
        finding = Finding(kind=FindingKind.compile_error, severity=Severity.error, message=message)
        out.append(((label, "refused"), finding))
    elif result.get("skipped"):
        message = f"not checked against the GPU compiler: {label}: {result['skipped']}"
        out.append(((label, "skipped"), _warning(message)))
    return out


def frontend_findings(
    runner: Runner,
    specs: dict[str, Any] | None,
    launches: set[str],
    env: dict[str, str | None],
    user_files: list[str],
    cwd: str,
) -> list[Finding]:
    kept = list((specs or {}).get("kernels") or [])
    findings: list[Finding] = []
    checked = {_label(s) for s in kept}
    unseen = sorted(name for name in launches if name not in checked)
    if unseen and not (specs or {}).get("not_kept"):
        findings.append(
            _warning(
                f"not checked against the GPU compiler: {', '.join(unseen)} (launched, but no launch of it was "
                "recorded under the interpreter)"
            )
        )
    if (specs or {}).get("not_kept"):
        findings.append(
            _warning(
                f"the GPU compiler's check took the first {len(kept)} kernel specialisations; "
                f"{specs['not_kept']} launches past them were not checked"
            )
        )
    if not kept:
        return findings
    outcome = runner.run(
        registry.FRONTEND.name,
        {"kernels": kept},
        timeout_s=TIMEOUT_S,
        env={**env, "TRITON_INTERPRET": None},
        user_files=sorted({*user_files, *(s["path"] for s in kept)}),
        cwd=cwd,
    )
    with outcome:
        if outcome.usage_error or outcome.failure is not None:
            # Importing the kernels' files without the interpreter must finish: it is what a GPU does first.
            why = outcome.usage_error or (outcome.failure.message if outcome.failure else "")
            message = (
                f"the GPU compiler's check of the launched kernels did not finish ({why[:300]}): importing their "
                "files without the interpreter, as a GPU run does, must finish"
            )
            error = Finding(kind=FindingKind.compile_error, severity=Severity.error, message=message)
            return [*findings, error]
        results = (outcome.result or {}).get("kernels") or []
    # The problem's own cases first: a refusal already an error there is not repeated as a derived case's warning.
    pairs = sorted(zip(kept, results, strict=False), key=lambda pair: not pair[0].get("own", True))
    seen: set[tuple[str, str]] = set()
    for spec, result in pairs:
        for key, finding in _judged(spec, result):
            if key not in seen:
                seen.add(key)
                findings.append(finding)
    return findings
