"""validate_against_reference: a verdict on a candidate that the candidate cannot fool.

The method (each step has a test with a kernel that must fail it and one that must pass):

1. The reference runs in its own child: per seed, fresh inputs from ``get_test_cases()`` /
   ``get_inputs()`` / ``--inputs``; sizes derived from a single ``get_inputs()``, smaller and larger, and
   the first case in non-contiguous layouts (see ``jobs.derive``); variants the reference rejects are
   dropped and listed (one that kills its child is dropped on a rerun); outputs in the native dtype and in
   float64, or a second native run when float64 is out of reach. Its files are loaded here and deleted.
2. The candidate runs in another child that receives inputs only. Every fresh allocation is poisoned
   (NaN first, a finite sentinel on a repeat call), inputs are cloned per call, Triton launches and torch
   ops are recorded.
3. Here, in the trusted parent: values vs float64 with a dtype-aware tolerance bounded by PyTorch's own
   error (see ``compare``); NaN/Inf positions; shape, dtype, device; input mutation; outputs aliasing
   inputs; the repeat call (determinism; unwritten elements); a result returned again for new inputs
   (stale cache), also with new values in the same input tensors; on a GPU, outputs read on the caller's
   stream before a synchronize (stream race); at least one Triton launch; torch compute that does the
   kernel's work.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from pathlib import Path
from typing import Any

import torch

from mcp_server.engine import compare
from mcp_server.engine.device import DeviceInfo, probe
from mcp_server.engine.dims import check_dims, dims_env, parse_dims
from mcp_server.engine.errors import UsageError
from mcp_server.engine.interp.configs import judge_configs
from mcp_server.engine.jobs import registry
from mcp_server.engine.jobs.cases import NO_INPUTS
from mcp_server.engine.jobs.recorder import TORCH_WORK_ERROR, TORCH_WORK_WARNING, op_label
from mcp_server.engine.jobs.trees import same_bits
from mcp_server.engine.models import (
    BadElement,
    CaseReport,
    ComparisonRow,
    Failure,
    Finding,
    FindingKind,
    Location,
    OpUse,
    PrecisionCause,
    Severity,
    ValidateResult,
)
from mcp_server.engine.resolve import resolve_inputs
from mcp_server.engine.runner import DEFAULT_TIMEOUT_S, Runner, shared_runner
from mcp_server.engine.specs import CallableSpec, parse_spec, swapped_kernelbench_hint
from mcp_server.engine.trust import evidence, frontend

# Input seeds are drawn afresh for each run (a seed given replays one). Fixed seeds would let a candidate rebuild
# the judge's inputs at import, by the reference's own get_inputs(), and answer them from a table torch filled there.
SEED_RANGE = 10**9
# With refusals_ok, these exceptions mean "this shape is not supported", not "this kernel is wrong".
REFUSALS = ("ValueError", "NotImplementedError")
MAX_FINDINGS_PER_KIND = 6


def _spec_dict(spec: CallableSpec) -> dict[str, str]:
    return {"path": str(spec.path), "name": spec.name}


def _reference_failure(outcome: Any, spec: CallableSpec) -> UsageError:
    failure = outcome.failure
    where = f" at {failure.where}" if failure.where else ""
    return UsageError(
        f"The reference {spec} could not run ({failure.kind.value}{where}): {failure.detail()}\n"
        "Fix the reference or its inputs: a reference that fails cannot judge a candidate."
    )


MAX_REFERENCE_RETRIES = 8
_INPUT_MAKERS = frozenset({"get_inputs", "get_test_cases"})


def _order_hint(usage_error: str, ref_spec: CallableSpec, cand_spec: CallableSpec) -> str:
    """For a reference file that gives no inputs while the candidate's file does: the two were likely given the
    other way round, and the hint names the command with them swapped (empty otherwise)."""
    if NO_INPUTS not in usage_error or not (cand_spec.top_level & _INPUT_MAKERS):
        return ""
    return (
        f"\n{cand_spec.path.name} defines {', '.join(sorted(cand_spec.top_level & _INPUT_MAKERS))}(): if it is the "
        f"problem, the two are the other way round. Give it as the reference and {ref_spec.path.name} as the "
        f"candidate (the reference comes first: `ptt validate {cand_spec} {ref_spec}`)."
    )


def _derived_case_lost(job_dir: Path, failure: Any, skip: dict[str, str]) -> str | None:
    """The key of the derived case the reference's child died on, if it died on one (else None)."""
    if failure.kind not in (FindingKind.crash, FindingKind.exception) or len(skip) >= MAX_REFERENCE_RETRIES:
        return None
    try:
        mark = (job_dir / "progress.txt").read_text().strip()
    except OSError:
        return None
    key = mark.removeprefix("reference case ").strip()
    if mark == key or not key.startswith(("derived ", "layout ")) or key in skip:
        return None
    return key


def _kind_of(failure: dict[str, Any]) -> FindingKind:
    try:
        return FindingKind(failure.get("kind"))
    except ValueError:
        return FindingKind.exception


def _model_seeds(first: int) -> dict[str, int]:
    """A KernelBench model's construction seed and the seed that moves its weights, drawn from the run's seed
    through a hash: a replay (``seed``) rebuilds the same model, and neither tells the candidate's code the input
    seeds or the other."""
    digest = hashlib.sha256(f"ptt model seeds {first}".encode()).digest()
    return {
        "build_seed": int.from_bytes(digest[:4], "big") >> 1,
        "weights_seed": int.from_bytes(digest[4:8], "big") >> 1,
    }


def validate(
    reference: str,
    candidate: str,
    *,
    inputs: str | None = None,
    seeds: int = 3,
    seed: int | None = None,
    derive_shapes: bool = True,
    max_derived: int = 6,
    backward: bool = False,
    determinism: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    tolerances: dict[str, tuple[float, float]] | None = None,
    allow_torch_ops: tuple[str, ...] = (),
    dims: str | dict[str, Any] | None = None,
    transform: str | None = None,
    refusals_ok: bool = False,
    runner: Runner | None = None,
    cwd: Path | None = None,
) -> ValidateResult:
    """Validate ``candidate`` against ``reference`` (both ``path.py:name``). Raises UsageError on bad input.

    ``seeds`` input sets per case, seeded ``seed``, ``seed`` + 1, …; ``seed`` None draws a fresh one per run (the
    result's ``seeds`` say which, so a run can be replayed).

    ``refusals_ok`` lets the candidate refuse listed cases with a ValueError/NotImplementedError (reported as
    ``unsupported_shape`` warnings): for staged kernels whose early stages declare a size limit.
    ``dims`` sets module-level sizes of the reference and candidate files (KernelBench's ``batch_size``...) to
    other values for this run, without editing them (see :mod:`mcp_server.engine.dims`).
    ``transform`` rewrites every floating input before the run (see ``jobs.common.TRANSFORMS``: zeros, ones,
    large, small, negative, alternating, near_overflow, near_underflow, inf, nan); derived shapes are off then.
    """
    started = time.perf_counter()
    if seeds < 1:
        raise UsageError("--seeds must be at least 1.")
    if seed is not None and not 0 <= seed < 2**62:
        raise UsageError(f"--seed takes a whole number from 0 to 2**62 - 1 (a seed a report printed), not {seed}.")
    try:
        ref_spec = parse_spec(reference, role="reference", defaults=("Model", "reference"), cwd=cwd)
    except UsageError as exc:
        hint = swapped_kernelbench_hint(reference, candidate, cwd, "ptt validate {problem} {solution}")
        raise UsageError(f"{exc}{hint}") from None
    cand_spec = parse_spec(candidate, role="candidate", defaults=("ModelNew", "candidate"), cwd=cwd)
    resolved = resolve_inputs(inputs, check=True, cwd=cwd)  # a bad type-list item raises UsageError
    inputs_spec, input_files = resolved.value, resolved.files
    runner = runner or shared_runner()
    device = probe(runner)
    overrides = parse_dims(dims)
    if overrides:
        check_dims(overrides, [ref_spec.path, cand_spec.path])
    env = {**device.job_env(), **dims_env(overrides)}
    first = secrets.randbelow(SEED_RANGE) if seed is None else seed
    seed_list = [first + i for i in range(seeds)]
    model_seeds = _model_seeds(first)
    user_files = [str(ref_spec.path), str(cand_spec.path), *input_files]
    workdir = str(cwd or Path.cwd())

    ref_params = {
        "reference": _spec_dict(ref_spec),
        "inputs": inputs_spec,
        "seeds": seed_list,
        **model_seeds,
        "derive": derive_shapes and not transform,
        "max_derived": max_derived,
        "backward": backward,
        "device": device.torch_device,
        "transform": transform,
        "skip": {},
    }
    while True:
        job_dir = runner.new_job_dir()
        ref_out = runner.run(
            registry.VALIDATE_REFERENCE.name,
            ref_params,
            timeout_s=timeout_s,
            env=env,
            user_files=user_files,
            cwd=workdir,
            job_dir=job_dir,
        )
        with ref_out:
            if ref_out.usage_error:
                raise UsageError(ref_out.usage_error + _order_hint(ref_out.usage_error, ref_spec, cand_spec))
            if ref_out.failure is not None:
                lost = _derived_case_lost(job_dir, ref_out.failure, ref_params["skip"])
                if lost is not None:
                    # A derived case killed the reference's child (a device-side assert poisons the CUDA
                    # context): run again without it, and list it as rejected.
                    ref_params["skip"][lost] = f"the reference crashed on it: {ref_out.failure.message[:300]}"
                    continue
                raise _reference_failure(ref_out, ref_spec)
            ref_meta = ref_out.result or {}
            try:
                ref_data = torch.load(ref_out.path("reference.pt"), weights_only=True, map_location="cpu")
            except Exception as exc:  # what the child saved holds something a safe load refuses
                raise UsageError(
                    f"The reference {ref_spec}'s results could not be read back safely ({type(exc).__name__}: "
                    f"{(str(exc).splitlines() or [''])[0][:300]}). Make it return tensors and Python numbers."
                ) from None
        break
    # The reference's files are gone before the candidate starts.

    ok_cases = [c for c in ref_meta["cases"] if c.get("status") == "ok"]
    bundle = {
        "cases": [
            {
                "key": c["key"],
                "name": c["name"] if c.get("derived") is None else None,
                "layout": c.get("layout"),
                "mode": ref_data["cases"][c["key"]].get("mode"),
                "inputs": ref_data["cases"][c["key"]]["inputs"],
                "grad_out": ref_data["cases"][c["key"]]["grad_out"],
                "init": ref_data["cases"][c["key"]].get("init"),
                "state": ref_data["cases"][c["key"]].get("state"),
                # What the reference's buffers held before its call, and which it updated (not their values after:
                # those are the expected update).
                "buffers": ref_data["cases"][c["key"]].get("buffers_before") or {},
                "updated": sorted(ref_data["cases"][c["key"]].get("buffers") or {}),
            }
            for c in ok_cases
        ],
        "state": ref_data.get("state"),
        "init": ref_data.get("init") or [],
    }
    # What the candidate's source says about it, read here before its child starts (engine.trust.scan).
    trust_findings = evidence.static_findings(cand_spec.path, ref_spec.path)
    job_dir = runner.new_job_dir()
    torch.save(bundle, job_dir / "cases.pt")
    cand_out = runner.run(
        registry.VALIDATE_CANDIDATE.name,
        {
            "candidate": _spec_dict(cand_spec),
            "cases_file": str(job_dir / "cases.pt"),
            "kernelbench": ref_meta.get("kernelbench", False),
            **model_seeds,
            "backward": backward,
            "determinism": determinism,
            "device": device.torch_device,
            "trace": not device.interpreter,
        },
        timeout_s=timeout_s,
        env=env,
        # The candidate's child learns nothing of the reference: not even where its file is.
        user_files=[str(cand_spec.path)],
        cwd=workdir,
        job_dir=job_dir,
        restore=lambda: torch.save(bundle, job_dir / "cases.pt"),  # the child deletes it once read
    )
    with cand_out:
        if cand_out.usage_error:
            raise UsageError(cand_out.usage_error)
        progress = ""
        if (job_dir / "progress.txt").exists():
            progress = (job_dir / "progress.txt").read_text()
        cand_data = None
        failure = cand_out.failure
        specs = (cand_out.result or {}).get("launch_specs") if failure is None else None
        if failure is None:
            try:
                cand_data = torch.load(cand_out.path("candidate.pt"), weights_only=True, map_location="cpu")
            except Exception as exc:  # what the child saved holds something a safe load refuses
                failure = Failure(
                    kind=FindingKind.exception,
                    message=f"the candidate's results could not be read back safely ({type(exc).__name__}: "
                    f"{(str(exc).splitlines() or [''])[0][:300]}): return plain tensors and Python numbers",
                )
        judge = _Judge(
            ref_meta,
            ref_data,
            cand_out.result or {},
            cand_data,
            tolerances or ref_meta.get("tolerances"),
            allow_torch_ops,
            device,
            refusals_ok,
        )
        if failure is not None:
            judge.whole_job_failed(failure, progress)
        else:
            trust_findings += _judged(judge, cand_spec.path, ref_meta, ref_data, cand_out.result or {})
        judge.findings.extend(trust_findings)
        _explain_unmatched_weights(judge.findings, (cand_out.result or {}).get("weights_unmatched"))
        _explain_random_reference(judge.findings, ref_meta.get("random_modules"))
        judge.judge_reference_precision()
        judge.note_loose_tolerances(given=bool(tolerances))
    if device.interpreter and specs is not None:
        judge.findings.extend(
            frontend.frontend_findings(runner, specs, judge.launches, env, [str(cand_spec.path)], workdir)
        )

    findings = judge.capped_findings()
    ok = not any(f.severity is Severity.error for f in findings)
    result = ValidateResult(
        ok=ok,
        device=device.device,
        findings=findings,
        reference=str(ref_spec),
        candidate=str(cand_spec),
        mode="kernelbench" if ref_meta.get("kernelbench") else "callable",
        seeds=seed_list,
        cases=judge.case_reports,
        rows=judge.rows,
        kernels_launched=sorted(judge.launches),
        torch_ops=[OpUse(op=k, calls=int(v[0]), work=v[1]) for k, v in sorted(judge.torch_ops.items())],
        torch_share=judge.torch_share,
        reference_precision=ref_meta.get("precision", "float64"),
        reference_precision_cause=_precision_cause(ref_meta),
        weights=(cand_out.result or {}).get("weights") if ref_meta.get("kernelbench") else None,
        backward_checked=backward,
        interpreter=device.interpreter,
        seconds=round(time.perf_counter() - started, 3),
        notes=_size_notes(ref_meta) + list((cand_out.result or {}).get("autotune_notes") or []),
    )
    result.summary = summarize(result)
    return result


def _explain_unmatched_weights(findings: list[Finding], unmatched: dict[str, list[str]] | None) -> None:
    """Where the candidate module's parameters did not match the reference's, so that it ran on weights of its own
    (built from the same seed), the first finding about wrong values says so and names the entries that differ."""
    if not unmatched:
        return
    said = (
        ("reference_only", "only the reference has"),
        ("candidate_only", "only the candidate has"),
        ("reshaped", "shaped otherwise:"),
    )
    parts = [f"{words} {', '.join(map(str, unmatched[key]))}" for key, words in said if unmatched.get(key)]
    _tell_first_value_finding(
        findings,
        f". The candidate ran on weights of its own, not the reference's: their state_dicts differ ("
        f"{'; '.join(parts)}), so each module drew its own from the same seed. Name and shape the parameters "
        "and buffers as the reference does, and validate gives the candidate the reference's weights",
    )


def _explain_random_reference(findings: list[Finding], parts: list[str] | None) -> None:
    """Where the reference model draws random numbers in training mode, its first wrong-values finding outside
    eval mode says so: no kernel reproduces torch's dropout mask."""
    if parts:
        _tell_first_value_finding(
            findings,
            f". The reference is random here: {', '.join(map(str, parts[:4]))} in training mode draws a new mask "
            "on every call, which no kernel reproduces; judge the model in eval mode (self.eval() in the problem's "
            "Model) or with p=0",
            skip_eval=True,
        )


def _tell_first_value_finding(findings: list[Finding], text: str, skip_eval: bool = False) -> None:
    """Add ``text`` to the first finding about an output's values (outside the eval-mode cases, ``skip_eval``)."""
    for f in findings:
        if f.kind in _VALUE_FINDINGS and not (skip_eval and "mode: eval" in (f.case or "")):
            f.message += text
            return


# Findings about an output's values: where only a derived case has one, the kernel's assumption is the cause.
_VALUE_FINDINGS = frozenset({FindingKind.mismatch, FindingKind.nan_mismatch, FindingKind.backward_mismatch})


def _derived_hint(layout: str | None, derived: str) -> str:
    """What a derived case changed (``derived``, its description; ``layout``, the kind of a layout case, None for a
    size) and the usual cause of a kernel that is right at the base sizes and layouts but wrong there."""
    if layout == "offset":
        return (
            f"gives the inputs as {derived}: a kernel that assumes aligned pointers (tl.multiple_of, a TMA "
            "descriptor's base) or reads from the storage's start rather than data_ptr() breaks here"
        )
    if layout is not None:
        return (
            f"gives the inputs {derived}, so the kernel indexes them as if contiguous: pass each input's strides "
            "to the kernel and index with them, or make the inputs contiguous in the launcher (a copy)"
        )
    return (
        f"changes one size ({derived}), so something assumes the base sizes: a block that must divide a size, "
        "a missing or off-by-one mask, a size or grid fixed in the code"
    )


class _Judge:
    """Turns the two children's data into rows and findings (trusted code)."""

    def __init__(
        self,
        ref_meta: dict[str, Any],
        ref_data: dict[str, Any],
        cand_meta: dict[str, Any],
        cand_data: dict[str, Any] | None,
        tolerances: dict[str, Any] | None,
        allow_torch_ops: tuple[str, ...],
        device: DeviceInfo,
        refusals_ok: bool = False,
    ):
        self.refusals_ok = refusals_ok
        self.ref_meta = ref_meta
        self.ref_data = ref_data
        self.cand_meta = cand_meta
        self.cand_data = cand_data or {}
        self.tolerances = {k: tuple(v) for k, v in (tolerances or {}).items()}
        self.allow = {op.split(".")[-1] for op in allow_torch_ops}
        self.device = device
        self.rows: list[ComparisonRow] = []
        self.findings: list[Finding] = []
        self.warned_races: set[str] = set()
        self.case_reports: list[CaseReport] = []
        self.launches: set[str] = set()
        self.torch_ops: dict[str, list[float]] = {}
        # The largest share of the reference's torch work the candidate's counted torch ops did in one call.
        self.torch_share = 0.0

    def note_loose_tolerances(self, given: bool) -> None:
        """Say where outputs were compared at a tolerance looser than their dtype's default: a warning when this run
        was given it (``--tol``), info when the reference module declares it. A PASS holds at that tolerance only."""
        compared = {row.dtype for row in self.rows}
        for name, (atol, rtol) in sorted(self.tolerances.items()):
            default = compare.DEFAULT_TOLERANCES.get(name)
            if name not in compared or default is None or (atol <= default[0] and rtol <= default[1]):
                continue
            by = max(atol / default[0], rtol / default[1])
            self.add(
                FindingKind.loose_tolerance,
                f"{name} outputs were compared at atol={atol:g}, rtol={rtol:g}, up to {by:.3g}× the default "
                f"({default[0]:g}, {default[1]:g}), as "
                + ("this run was told (--tol)" if given else "the reference module declares")
                + ": a pass holds at that tolerance",
                severity=Severity.warning if given else Severity.info,
            )

    # -- helpers -----------------------------------------------------------------------------------
    def add(
        self,
        kind: FindingKind,
        message: str,
        case: str | None = None,
        seed: int | None = None,
        severity: Severity = Severity.error,
        where: Any = None,
    ) -> None:
        self.findings.append(Finding(kind=kind, severity=severity, message=message, case=case, seed=seed, where=where))

    def merged_findings(self) -> list[Finding]:
        """The findings, each said once: findings that differ only in their case ("base: …", "derived 4096→4095: …")
        become the first of them, naming every case it holds."""
        merged: list[Finding] = []
        cases: dict[tuple[Any, ...], list[str]] = {}
        first: dict[tuple[Any, ...], int] = {}
        for f in self.findings:
            prefix = f"{f.case}: " if f.case else ""
            if not prefix or not f.message.startswith(prefix):
                merged.append(f)
                continue
            key = (f.kind, f.severity, f.message[len(prefix) :], str(f.where))
            if key in first:
                cases[key].append(f.case)  # type: ignore[arg-type]
                continue
            first[key], cases[key] = len(merged), [f.case]  # type: ignore[list-item]
            merged.append(f)
        for key, index in first.items():
            if len(cases[key]) > 1:
                counts: dict[str, int] = {}
                for case in cases[key]:  # a case of several seeds: once, with its count
                    counts[case] = counts.get(case, 0) + 1
                named = [f"{case} ({n} seeds)" if n > 1 else case for case, n in counts.items()]
                shown = ", ".join(named[:4]) + (f" and {len(named) - 4} more cases" if len(named) > 4 else "")
                merged[index] = merged[index].model_copy(update={"message": f"{shown}: {key[2]}"})
        return merged

    def capped_findings(self) -> list[Finding]:
        seen: dict[tuple[FindingKind, Severity], int] = {}
        out: list[Finding] = []
        dropped: dict[tuple[FindingKind, Severity], int] = {}
        for f in sorted(self.merged_findings(), key=lambda f: ["error", "warning", "info"].index(f.severity.value)):
            key = (f.kind, f.severity)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= MAX_FINDINGS_PER_KIND:
                out.append(f)
            else:
                dropped[key] = dropped.get(key, 0) + 1
        for (kind, severity), count in dropped.items():
            out.append(Finding(kind=kind, severity=severity, message=f"… and {count} more like the above"))
        return out

    # -- whole-job failure -------------------------------------------------------------------------
    def whole_job_failed(self, failure: Any, progress: str) -> None:
        where_case = progress.removeprefix("candidate case ").strip() or None
        case, seed = _split_key(where_case) if where_case else (None, None)
        self.add(failure.kind, failure.detail(), case, seed, where=failure.where)
        for c in self.ref_meta["cases"]:
            name, seed_ = c["name"], c["seed"]
            status = "failed" if c["key"] == where_case else "not run"
            self.case_reports.append(
                CaseReport(case=name, seed=seed_, derived=c.get("derived"), status=status, reason=failure.kind.value)
            )

    # -- the comparison ----------------------------------------------------------------------------
    def run(self) -> None:
        cand_cases = {c["key"]: c for c in self.cand_meta.get("cases", [])}
        previous: dict[str, tuple[list[Any], list[Any]]] = {}
        for ref_case in self.ref_meta["cases"]:
            name, seed, key = ref_case["name"], ref_case["seed"], ref_case["key"]
            derived = ref_case.get("derived")
            if ref_case.get("status") != "ok":
                self.case_reports.append(
                    CaseReport(
                        case=name,
                        seed=seed,
                        derived=derived,
                        status="rejected by the reference",
                        reason=ref_case.get("reason"),
                    )
                )
                continue
            cand_case = cand_cases.get(key, {"status": "not run"})
            status = cand_case.get("status")
            if status == "failed":
                failure = cand_case["failure"]
                kind = _kind_of(failure)
                declared = failure.get("message", "").startswith(REFUSALS)
                # A derived shape the kernel does not compile for (a tl.arange of a length that is not a power of
                # two, too much shared memory) is refused as surely as one it raises on; under the interpreter,
                # which compiles nothing, the same kernel raises.
                clean_refusal = (
                    kind is FindingKind.exception and (derived is not None or (self.refusals_ok and declared))
                ) or (kind is FindingKind.compile_error and derived is not None)
                if clean_refusal:
                    self.add(
                        FindingKind.unsupported_shape,
                        f"{name}: the candidate refused this derived case ({derived}): {failure['message']}",
                        name,
                        seed,
                        severity=Severity.warning,
                    )
                else:
                    self.add(kind, f"{name}: {failure['message']}", name, seed, where=failure.get("where"))
                self.case_reports.append(
                    CaseReport(
                        case=name,
                        seed=seed,
                        derived=derived,
                        status="refused" if clean_refusal else "failed",
                        reason=kind.value,
                    )
                )
                continue
            if status != "ok":
                self.case_reports.append(
                    CaseReport(
                        case=name,
                        seed=seed,
                        derived=derived,
                        status="not run",
                        reason=cand_case.get("reason"),
                    )
                )
                continue
            before = len([f for f in self.findings if f.severity is Severity.error])
            self.judge_case(ref_case, cand_case, previous)
            after = len([f for f in self.findings if f.severity is Severity.error])
            self.case_reports.append(
                CaseReport(
                    case=name,
                    seed=seed,
                    derived=derived,
                    status="passed" if after == before else "failed",
                    seconds=cand_case.get("seconds"),
                )
            )
        self.explain_derived_failures()
        self.check_launches()

    def explain_derived_failures(self) -> None:
        """Where every base case passed and a derived one got wrong values, its finding also says what that case
        changed and what in a kernel usually breaks there (the next edit, not only the numbers)."""
        base = [r for r in self.case_reports if r.derived is None]
        if not base or any(r.status != "passed" for r in base):
            return
        failed = {r.case: r.derived for r in self.case_reports if r.derived is not None and r.status == "failed"}
        layouts = {c["name"]: c.get("layout") for c in self.ref_meta["cases"]}
        explained: set[str] = set()
        for f in self.findings:
            if f.case not in failed or f.case in explained or f.kind not in _VALUE_FINDINGS:
                continue
            explained.add(f.case)
            f.message += f". Every base case passed; this one {_derived_hint(layouts.get(f.case), failed[f.case])}"

    def judge_case(self, ref_case: dict, cand_case: dict, previous: dict) -> None:
        name, seed, key = ref_case["name"], ref_case["seed"], ref_case["key"]
        ref = self.ref_data["cases"][key]
        cand = self.cand_data.get(key) or {}
        ref_out: list[torch.Tensor] = ref["out"]
        ref_out64 = ref["out64"]
        cand_out: list[Any] = cand.get("out") or []
        cand_out2 = cand.get("out2")
        metas = cand_case.get("outputs", [])

        self.launches.update(cand_case.get("record", {}).get("launches", []))
        self.judge_torch_work(ref_case, cand_case, name, seed)

        if len(cand_out) != len(ref_out):
            self.add(
                FindingKind.shape_mismatch,
                f"{name}: the candidate returned {len(cand_out)} output(s); the reference returns {len(ref_out)}",
                name,
                seed,
            )
        elif "nesting" in ref_case and "nesting" in cand_case and ref_case["nesting"] != cand_case["nesting"]:
            # The same number of leaves, nested otherwise: a caller unpacking the reference's result would break.
            self.add(
                FindingKind.shape_mismatch,
                f"{name}: the candidate returns {cand_case.get('described') or cand_case['nesting']} where the "
                f"reference returns {ref_case.get('described') or ref_case['nesting']}: return the same nesting (a "
                "tuple and a list count as one), so that code unpacking the reference's result unpacks this one",
                name,
                seed,
            )
        for i, (r, c) in enumerate(zip(ref_out, cand_out, strict=False)):
            label = f"{name} output {i}" if len(ref_out) > 1 else name
            meta = metas[i] if i < len(metas) else {}
            if c is None or not isinstance(c, torch.Tensor):
                self.add(
                    FindingKind.shape_mismatch,
                    f"{label}: the candidate returned a {meta.get('type', 'non-tensor')} where the reference "
                    "returns a tensor",
                    name,
                    seed,
                )
                continue
            ref_dev = self.ref_meta_device(ref_case, i)
            if meta.get("device") and ref_dev and meta["device"].split(":")[0] != ref_dev.split(":")[0]:
                self.add(
                    FindingKind.device_mismatch,
                    f"{label}: output on {meta['device']}; the reference's is on {ref_dev}",
                    name,
                    seed,
                )
            if c.dtype != r.dtype:
                self.add(
                    FindingKind.dtype_mismatch,
                    f"{label}: dtype {str(c.dtype).replace('torch.', '')}; the reference returns "
                    f"{str(r.dtype).replace('torch.', '')}",
                    name,
                    seed,
                )
            second = _nth(cand_out2, i)
            r64 = _nth(ref_out64, i)
            self.compare_one(label, name, seed, f"out{i}", c, r, r64, second, _nth(ref.get("alt64"), i))

        judge_configs(self, ref_case, cand_case, ref, cand)  # every other autotune config, run once each
        self.judge_aliasing(ref_case, cand_case, name, seed)
        self.judge_mutation(ref, ref_case, cand, cand_case, name, seed)
        self.judge_buffers(ref, cand, cand_case, name, seed)
        self.judge_streams(cand_case, name, seed, len(ref_out))
        self.judge_program_races(cand_case, name, seed)
        self.judge_same_address(ref, cand, cand_case, name, seed, previous)
        self.judge_stale(name, seed, ref_out, cand_out, previous)
        if ref.get("grads") is not None:
            self.judge_grads(ref, cand, name, seed)

    def ref_meta_device(self, ref_case: dict, i: int) -> str | None:
        outs = ref_case.get("outputs") or []
        return outs[i]["device"] if i < len(outs) else None

    def compare_one(
        self,
        label: str,
        name: str,
        seed: int,
        output: str,
        c: torch.Tensor,
        r: torch.Tensor,
        r64: torch.Tensor | None,
        second: torch.Tensor | None,
        alt64: torch.Tensor | None = None,
    ) -> bool:
        """Compare one output with the reference's; ``alt64``: the reference's float64 result where the comparison
        is against its own dtype, whose run differs from float64 but agrees with itself (see validate_jobs)."""
        tol = compare.tolerance_for(r.dtype, self.tolerances)
        cmp = compare.compare_tensor(c, r, r64, tol, second)
        neither = ""
        if cmp.problem in (FindingKind.mismatch, FindingKind.nan_mismatch) and alt64 is not None:
            # The own dtype may be what lost the answer (an intermediate that overflows, cancellation): float64,
            # rounded to the dtype, is then the truth, held to the dtype's tolerance with no allowance beyond
            # that rounding. A result that far from the own-dtype run and this close to float64 is not luck.
            truth = compare.compare_tensor(c, alt64.to(r.dtype), alt64, tol, second)
            if truth.problem is None:
                own = compare.compare_tensor(r, alt64.to(r.dtype), alt64, tol)
                self.add(
                    FindingKind.reference_precision,
                    f"{label}: matches the reference's float64 result (relative norm error "
                    f"{truth.rel_norm_err:.2e}), not its run in {str(r.dtype).replace('torch.', '')}, which is "
                    f"{own.rel_norm_err:.2e} from float64 here (an intermediate that overflows, or digits lost, in "
                    "that dtype): judged against float64",
                    name,
                    seed,
                    severity=Severity.info,
                )
                cmp = truth
            else:
                neither = f" (nor the reference's float64 result: relative norm error {truth.rel_norm_err:.3g})"
        self.rows.append(
            ComparisonRow(
                case=name,
                seed=seed,
                output=output,
                shape=list(r.shape),
                dtype=str(r.dtype).replace("torch.", ""),
                ok=cmp.ok,
                numel=cmp.numel,
                mismatches=cmp.mismatches,
                nan_mismatches=cmp.nan_mismatches,
                max_abs_err=cmp.max_abs_err,
                max_rel_err=cmp.max_rel_err,
                rel_norm_err=cmp.rel_norm_err,
                torch_rel_norm_err=cmp.torch_rel_norm_err,
                atol=tol.atol if r.is_floating_point() else None,
                rtol=tol.rtol if r.is_floating_point() else None,
                first_bad=[BadElement(index=b.index, got=b.got, expected=b.expected) for b in cmp.first_bad or []],
            )
        )
        if cmp.problem is not None:
            kind = cmp.problem
            if output.startswith("grad") and kind is FindingKind.mismatch:
                kind = FindingKind.backward_mismatch
            hint = ""
            if (
                kind in (FindingKind.mismatch, FindingKind.backward_mismatch)
                and self.cand_meta.get("tf32_dots")
                and (c.dtype == torch.float32)
            ):
                hint = (
                    ". Its fp32 tl.dot ran as TF32 (Triton's default input_precision, 10 mantissa bits, as on the "
                    'GPU): pass input_precision="ieee" to tl.dot for fp32 accuracy'
                )
            self.add(kind, compare.describe(cmp.problem, cmp, label) + neither + hint, name, seed)
        elif cmp.bitwise_diff:
            self.add(
                FindingKind.nondeterministic,
                f"{label}: a repeat call differs bitwise at {cmp.bitwise_diff} elements, within tolerance "
                "(e.g. atomics changing the summation order)",
                name,
                seed,
                severity=Severity.info,
            )
        return cmp.ok

    def judge_torch_work(self, ref_case: dict, cand_case: dict, name: str, seed: int) -> None:
        ops = cand_case.get("record", {}).get("ops", {})
        counted = {k: v for k, v in ops.items() if k not in self.allow}
        for op, use in ops.items():
            entry = self.torch_ops.setdefault(op, [0, 0.0])
            entry[0] += use["calls"]
            entry[1] += use["work"]
        cand_work = sum(v["work"] for v in counted.values())
        allowed = {k: v for k, v in ops.items() if k in self.allow}
        allowed_work = sum(v["work"] for v in allowed.values())
        if cand_work <= 0 and allowed_work <= 0:
            return
        ref_work = float(ref_case.get("torch_work") or 0.0)
        if ref_work <= 0:
            outputs = ref_case.get("outputs") or []
            ref_work = float(sum(_prod(o["shape"]) for o in outputs)) or 1.0
        if allowed_work / ref_work >= TORCH_WORK_WARNING:
            # Allowed, so no failure; but a pass then does not say a Triton kernel did this part of the work.
            ops_named = ", ".join(f"{op_label(k)} ×{v['calls']}" for k, v in allowed.items())
            self.add(
                FindingKind.torch_compute,
                f"{name}: torch ops allowed by allow_torch_ops did {allowed_work / ref_work:.0%} of the reference's "
                f"own torch work ({ops_named}): the pass does not say a Triton kernel did that part",
                name,
                seed,
                severity=Severity.warning,
            )
        if cand_work <= 0:
            return
        ratio = cand_work / ref_work
        self.torch_share = max(self.torch_share, ratio)
        top = sorted(counted.items(), key=lambda kv: -kv[1]["work"])[:4]
        listing = ", ".join(f"{op_label(k)} ×{v['calls']}" for k, v in top)
        if ratio >= TORCH_WORK_ERROR:
            severity = Severity.error
            verdict = "torch compute ops did the kernel's work"
        elif ratio >= TORCH_WORK_WARNING:
            severity = Severity.warning
            verdict = "torch compute ops did part of the kernel's work"
        else:
            severity = Severity.info
            verdict = "torch compute ops ran beside the Triton kernels"
        self.add(
            FindingKind.torch_compute,
            f"{name}: {verdict} ({ratio:.0%} of the reference's own torch work): {listing}. Move that work "
            "into the Triton kernel (or pass allow_torch_ops for an op you mean to keep in torch)",
            name,
            seed,
            severity=severity,
        )

    def judge_aliasing(self, ref_case: dict, cand_case: dict, name: str, seed: int) -> None:
        ref_pairs = {tuple(p) for p in ref_case.get("aliases") or []}
        for o, i in cand_case.get("aliases") or []:
            if (o, i) not in ref_pairs:
                self.add(
                    FindingKind.output_aliases_input,
                    f"{name}: output {o} shares storage with input {i} (the reference returns a new tensor); "
                    "a caller that reuses the input would see it change",
                    name,
                    seed,
                )
        ref_overlaps = {tuple(p) for p in ref_case.get("overlaps") or []}
        for i, j in cand_case.get("overlaps") or []:
            if (i, j) not in ref_overlaps:
                self.add(
                    FindingKind.outputs_overlap,
                    f"{name}: outputs {i} and {j} are the same memory (the reference returns them apart); "
                    "a caller that writes to one would change the other",
                    name,
                    seed,
                )

    def judge_buffers(self, ref: dict, cand: dict, cand_case: dict, name: str, seed: int) -> None:
        """The module buffers the reference's forward updates (BatchNorm's running statistics in training mode),
        each started from the reference's value before the call, against the reference's update."""
        updated: dict[str, dict[str, Any]] = ref.get("buffers") or {}
        for n in cand_case.get("buffers_changed") or []:
            self.add(
                FindingKind.buffer_mismatch,
                f"{name}: the candidate's forward changes buffer {n}, which the reference's leaves as it was (a "
                "BatchNorm in eval mode, say, uses its running statistics and does not update them)",
                name,
                seed,
            )
        if not updated:
            return
        missing = cand_case.get("buffers_missing") or []
        if missing:
            self.add(
                FindingKind.buffer_mismatch,
                f"{name}: the reference's forward updates its buffers {', '.join(map(str, missing))}; the "
                "candidate's module has none of those names, shapes and dtypes, so whether it keeps them up to date "
                "was not checked",
                name,
                seed,
                severity=Severity.warning,
            )
        for n in cand_case.get("buffers_lost") or []:
            self.add(
                FindingKind.buffer_mismatch,
                f"{name}: the candidate's module no longer has buffer {n} after its forward (the reference's "
                "updates it there)",
                name,
                seed,
            )
        after: dict[str, torch.Tensor] = cand.get("buffers") or {}
        twice: dict[str, torch.Tensor] = cand.get("buffers_twice") or {}
        for n, values in updated.items():
            truth = values.get("after64_twice")
            if n in twice and truth is not None and n in after:
                # The repeat call on the same inputs updates the buffer once more, as the reference's second call.
                self.compare_one(
                    f"{name} buffer {n} after a second call", name, seed, f"buffer {n} (2nd call)", twice[n],
                    truth.to(values["after"].dtype), truth, None,
                )  # fmt: skip
            if n in missing or n not in after:
                continue
            if same_bits(after[n], values["before"]):
                self.add(
                    FindingKind.buffer_mismatch,
                    f"{name}: the reference's forward updates buffer {n}; the candidate's leaves it as it was (a "
                    "BatchNorm in training mode updates its running statistics and batch count on every call)",
                    name,
                    seed,
                )
                continue
            self.compare_one(
                f"{name} buffer {n}", name, seed, f"buffer {n}", after[n], values["after"], values.get("after64"), None
            )

    def judge_mutation(self, ref: dict, ref_case: dict, cand: dict, cand_case: dict, name: str, seed: int) -> None:
        pre = ref["inputs"]
        post_ref = ref["post"]
        changed = set(cand_case.get("changed_inputs") or [])
        digests_ref = ref_case.get("digests") or []
        digests_after = cand_case.get("digests_after") or []
        for i, original in enumerate(pre):
            if not isinstance(original, torch.Tensor):
                continue
            ref_changed = not same_bits(post_ref[i], original) if isinstance(post_ref[i], torch.Tensor) else False
            if i in changed:
                after = cand.get("post", {}).get(i)
                if not ref_changed:
                    self.add(
                        FindingKind.input_mutated,
                        f"{name}: the candidate wrote to input {i}, which the reference leaves unchanged",
                        name,
                        seed,
                    )
                elif after is not None:
                    self.compare_one(
                        f"{name} input {i} after the call",
                        name,
                        seed,
                        f"input{i}",
                        after,
                        post_ref[i],
                        None,
                        None,
                    )
            else:
                if ref_changed:
                    self.add(
                        FindingKind.mismatch,
                        f"{name}: the reference updates input {i} in place; the candidate leaves it unchanged",
                        name,
                        seed,
                    )
                elif i < len(digests_after) and i < len(digests_ref) and digests_after[i] != digests_ref[i]:
                    self.add(
                        FindingKind.input_mutated,
                        f"{name}: input {i} differs after the call from what was sent",
                        name,
                        seed,
                    )

    def judge_reference_precision(self) -> None:
        precision = _precision_cause(self.ref_meta)
        if precision is None:
            return
        cause, how = precision.cause, precision.estimate
        if precision.float64_ran:
            message = (
                f"The reference ran in float64, but its run in its own dtype is far from that result ({cause}): at "
                "these inputs its dtype loses the answer (an intermediate overflows or underflows), or it computes "
                "something else in float64. The outputs were compared with its run in its own dtype, PyTorch's own "
                f"error estimated from {how}; an output that matches the float64 result passes too"
            )
        else:
            message = (
                f"The reference could not run in float64 ({cause}). The outputs were compared with the reference in "
                f"its own dtype, and PyTorch's own error (the tolerance's allowance) was estimated from {how}; an "
                "output that misses it but matches the float64 result, where there is one, passes on that. Make "
                "the reference reach all its modules as registered attributes (so .double() converts them) and "
                "avoid hard-coded dtypes, for a float64 truth"
            )
        self.add(FindingKind.reference_precision, message, severity=Severity.warning)

    def judge_streams(self, cand_case: dict, name: str, seed: int, outputs: int) -> None:
        for i, differ, numel in cand_case.get("stream_race") or []:
            label = f"{name} output {i}" if outputs > 1 else name
            self.add(
                FindingKind.stream_race,
                f"{label}: read on the caller's current stream right after the call (as the caller's next op "
                f"would), {differ} of {numel} elements were not yet written; they were only after a device-wide "
                "synchronize. A kernel ran on another stream that the caller's stream does not wait for: launch "
                "on torch.cuda.current_stream(), or call torch.cuda.current_stream().wait_stream(side) before "
                "returning",
                name,
                seed,
            )

    def judge_program_races(self, cand_case: dict, name: str, seed: int) -> None:
        """Under the interpreter: programs of one launch touching an element another program stored or read."""
        for race in cand_case.get("program_races") or []:
            where = Location.model_validate(race["where"]) if race.get("where") else None
            message = (
                f"{name}: {race['kind']}: program {race['second']} touched element {race['element']} of "
                f"`{race['tensor']}` ({race['describe']}) after program {race['first']} "
                f"{'stored' if race['kind'] != 'write after read' else 'read'} it, in the same launch. The "
                "interpreter runs programs one after another, so this gave the sequential answer; on a GPU they "
                "run at once and in any order"
            )
            if race.get("atomics"):
                # An atomic counter or lock can order the two (a last-program reduction): said once, not failed.
                key = f"{race['kind']} {race['tensor']} {where}"
                if key in self.warned_races:
                    continue
                self.warned_races.add(key)
                self.add(
                    FindingKind.program_race,
                    f"{message}. The launch uses atomics: if one orders these accesses (a counter the last "
                    "program waits on, a lock), this is safe",
                    name,
                    seed,
                    severity=Severity.warning,
                    where=where,
                )
            else:
                self.add(
                    FindingKind.program_race,
                    f"{message}, and nothing in the launch orders them: combine partial results with tl.atomic_add, "
                    "or write them to separate slots and reduce in a second launch",
                    name,
                    seed,
                    where=where,
                )

    def judge_same_address(self, ref: dict, cand: dict, cand_case: dict, name: str, seed: int, previous: dict) -> None:
        """The call repeated with this seed's inputs written into the previous seed's input tensors."""
        what = "called again with these inputs written into the same input tensors as the previous call"
        failure = cand_case.get("same_address_failure")
        if failure is not None:
            self.add(
                _kind_of(failure),
                f"{name}: {what}, the candidate raised: {failure.get('message', '')}",
                name,
                seed,
                where=failure.get("where"),
            )
            return
        same = cand.get("same")
        if same is None:
            return
        ref_out, ref_out64 = ref["out"], ref["out64"]
        first = cand.get("out") or []
        prior = previous.get(name)
        for i, r in enumerate(ref_out):
            c = same[i] if i < len(same) else None
            if not isinstance(c, torch.Tensor) or c.shape != r.shape or c.dtype != r.dtype:
                continue  # the first call's checks report shape and dtype
            r64 = _nth(ref_out64, i)
            tol = compare.tolerance_for(r.dtype, self.tolerances)
            cmp = compare.compare_tensor(c, r, r64, tol)
            if cmp.problem is None:
                continue
            fresh = first[i] if i < len(first) else None
            if isinstance(fresh, torch.Tensor) and compare.compare_tensor(c, fresh, None, tol).problem is None:
                continue  # as (in)accurate as the call with fresh tensors, which is judged on its own
            label = f"{name} output {i}" if len(ref_out) > 1 else name
            old = prior[1][i] if prior is not None and i < len(prior[1]) else None
            again = isinstance(old, torch.Tensor) and same_bits(old, c)
            detail = (
                "exactly the previous call's result"
                if again
                else f"a wrong result ({compare.describe(cmp.problem, cmp, 'it').removeprefix('it: ')})"
            )
            self.add(
                FindingKind.stale_cache,
                f"{label}: {what} (same data_ptr, same shape, new values), the candidate returned {detail}: "
                "a result cached by address or shape",
                name,
                seed,
            )

    def judge_stale(self, name: str, seed: int, ref_out: list, cand_out: list, previous: dict) -> None:
        prior = previous.get(name)
        previous[name] = (ref_out, cand_out)
        if prior is None:
            return
        prior_ref, prior_cand = prior
        for i, (r, c) in enumerate(zip(ref_out, cand_out, strict=False)):
            if not isinstance(c, torch.Tensor) or i >= len(prior_cand):
                continue
            pc, pr = prior_cand[i], prior_ref[i]
            if not isinstance(pc, torch.Tensor) or pc.shape != c.shape or pr.shape != r.shape:
                continue
            if same_bits(pc, c) and not same_bits(pr, r):
                self.add(
                    FindingKind.stale_cache,
                    f"{name}: seed {seed} returned exactly the previous seed's output for new inputs "
                    "(a result cached across calls)",
                    name,
                    seed,
                )

    def judge_grads(self, ref: dict, cand: dict, name: str, seed: int) -> None:
        grads, grads64, got = ref["grads"], ref.get("grads64"), cand.get("grads")
        if got is None:
            self.add(
                FindingKind.backward_mismatch,
                f"{name}: the candidate's outputs do not require grad, so no backward ran; wrap the kernel in "
                "a torch.autograd.Function with a backward",
                name,
                seed,
            )
            return
        for j, r in enumerate(grads):
            if r is None:
                continue
            c = got[j] if j < len(got) else None
            if c is None:
                self.add(FindingKind.backward_mismatch, f"{name}: gradient {j} is missing (None)", name, seed)
                continue
            r64 = _nth(grads64, j)
            alt = _nth(ref.get("alt_grads64"), j)
            self.compare_one(f"{name} grad {j}", name, seed, f"grad{j}", c, r, r64, None, alt)

    def check_launches(self) -> None:
        judged = [c for c in self.cand_meta.get("cases", []) if c.get("status") == "ok"]
        if judged and not self.launches:
            self.add(
                FindingKind.no_triton_launch,
                "the candidate launched no @triton.jit kernel on any case: its result came from elsewhere "
                "(PyTorch, a library, or a cache)",
            )


def _judged(
    judge: _Judge, candidate: Path, ref_meta: dict[str, Any], ref_data: dict[str, Any], result: dict[str, Any]
) -> list[Finding]:
    """Run ``judge`` over the candidate's child's result; return the run's trust findings. A result in no shape
    that child writes (code in its process changed it) is an ``evasion`` error, never an error of the judge."""
    try:
        judge.run()
        return evidence.run_findings(candidate, ref_meta, ref_data, result, judge.launches)
    except Exception as exc:
        judge.findings.append(
            Finding(
                kind=FindingKind.evasion,
                severity=Severity.error,
                message=(
                    "the candidate's process returned a result the judge cannot read "
                    f"({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}): code in that process "
                    "changed what the judge's child wrote. Leave the judge's code alone"
                ),
            )
        )
        return []


def _precision_cause(ref_meta: dict[str, Any]) -> PrecisionCause | None:
    """Why float64 could not be the truth for the reference, as its job said (None: float64 was the truth)."""
    cause = ref_meta.get("precision_cause")
    if not cause:
        return None
    return PrecisionCause(
        float64_ran=bool(ref_meta.get("precision_float64_ran")),
        cause=cause,
        estimate=ref_meta.get("precision_estimate") or "nothing",
        output=ref_meta.get("precision_output"),
        rel_norm=ref_meta.get("precision_rel_norm"),
    )


def _size_notes(ref_meta: dict[str, Any]) -> list[str]:
    """Which derived sizes ran, which the reference rejected, and which the memory budget left out."""
    sizes = ref_meta.get("sizes") or {}
    parts = []
    if sizes.get("ran"):
        parts.append(f"ran {', '.join(sizes['ran'])}")
    if sizes.get("rejected"):
        parts.append(f"rejected by the reference {', '.join(sizes['rejected'])}")
    if sizes.get("over_budget"):
        budget = _budget_text((sizes.get("budget_mib") or ["?"])[0])
        parts.append(f"over the {budget} {', '.join(sizes['over_budget'])}")
    return [f"derived sizes: {'; '.join(parts)}"] if parts else []


def _budget_text(mib: str) -> str:
    """The derived inputs' memory budget, given in whole MiB (derive.budget_bytes keeps it so from 1 MiB on; one
    under half a MiB reads 0), as "N MiB input budget" in a readable unit."""
    try:
        value = float(mib)
    except ValueError:
        return f"{mib} MiB input budget"
    if value < 1:
        return "input budget of under 1 MiB"
    return f"{value / 1024:g} GiB input budget" if value >= 1024 else f"{value:g} MiB input budget"


def _split_key(key: str) -> tuple[str, int | None]:
    name, _, seed = key.rpartition("#")
    try:
        return name, int(seed)
    except ValueError:
        return key, None


def _prod(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def summarize(result: ValidateResult) -> str:
    passed = sum(1 for c in result.cases if c.status == "passed")
    judged = sum(1 for c in result.cases if c.status in ("passed", "failed"))
    errors = [f for f in result.findings if f.severity is Severity.error]
    where = "under the Triton interpreter (CPU)" if result.interpreter else f"on {result.device}"
    if result.ok:
        head = f"PASS: {passed}/{judged} cases {where}"
    else:
        kinds = sorted({f.kind.value for f in errors})
        if judged and passed == judged:
            # Every value was right: what fails the run is how it was reached (the findings).
            head = f"FAIL ({', '.join(kinds)}): values right in all {judged} cases {where}, but see the findings"
        else:
            head = f"FAIL ({', '.join(kinds)}): {passed}/{judged} cases passed {where}"
    return head


def default_cwd() -> Path:
    return Path(os.getcwd())


def _nth(tensors: list[Any] | None, i: int) -> Any:
    """The i-th of a saved list of outputs or gradients, or None where there is none."""
    return tensors[i] if tensors is not None and i < len(tensors) else None
