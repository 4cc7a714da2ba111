"""The ledger's operations: start a conversion, submit an attempt, read status, details and the best source.

``submit`` is the only way a stage passes: it runs the tools the gate needs (validate always; bench for
stages 2-3, the best passing stage-1 attempt timed in the same run; audit for stage 3), evaluates the gate
on their results (see :mod:`.gates`) and records everything in one transaction.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import fmean
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.models import INTERPRETER_DEVICE, BenchResult, ExtraCandidate, ValidateResult
from mcp_server.engine.specs import parse_spec
from mcp_server.engine.stages.evidence import AuditUnavailable, EvidenceFns, real_evidence
from mcp_server.engine.stages.gates import (
    STAGE1,
    autotune_info,
    case_speeds,
    code_key,
    evaluate,
    geomean,
    stage1_in_bench,
    summarize_audit,
)
from mcp_server.engine.stages.ledger import Ledger, ledger_exists, ledger_path, now
from mcp_server.engine.stages.models import (
    AttemptSummary,
    AuditSummary,
    AutotuneInfo,
    BestAttempt,
    ConversionDetail,
    ConversionStatus,
    GateEvidence,
    GateVerdict,
    LedgerStatus,
    NextGate,
    SubmitResult,
)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
M = TypeVar("M", bound=BaseModel)
LedgerArg = Ledger | str | os.PathLike[str] | None

_STAGE_AIMS = {
    1: "Write a simple, correct Triton kernel and submit it at stage 1 (it passes on a passing validation).",
    2: "Stage 1 passed. Autotune the kernel (@triton.autotune over tile sizes and num_warps, keyed on the sizes) "
    "and make it faster than stage 1 on the benchmark sizes, in a new file (the stage-1 file is the baseline); "
    "then submit at stage 2.",
    3: "Stage 2 passed. Tune for the hardware until bench shows at least torch.compile's speed on every size and "
    "the audit has no error findings; then submit at stage 3.",
}


# --- helpers ------------------------------------------------------------------------------------------------


@contextmanager
def _opened(ledger: LedgerArg) -> Iterator[Ledger]:
    if isinstance(ledger, Ledger):
        yield ledger
        return
    opened = Ledger.open(ledger)
    try:
        yield opened
    finally:
        opened.close()


@contextmanager
def _existing(ledger: LedgerArg) -> Iterator[Ledger]:
    """Open a ledger that must already exist (reads never create one)."""
    if not isinstance(ledger, Ledger) and not ledger_exists(ledger_path(ledger)):
        raise UsageError(
            f"There is no stage ledger at {ledger_path(ledger)}. Start a conversion first "
            "(ptt stages start NAME REFERENCE.py:fn, or the stage_start tool), or pass --ledger / $PTT_LEDGER."
        )
    with _opened(ledger) as led:
        yield led


def _load(model: type[M], text: str | None) -> M | None:
    """A stored result, or None when absent or no longer readable by this version's models."""
    if not text:
        return None
    try:
        return model.model_validate_json(text)
    except ValidationError:
        return None


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not NAME_RE.match(name):
        raise UsageError(
            f"Conversion name {name!r} is not usable: use 1-100 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (e.g. softmax, layernorm-bf16)."
        )
    return name


def _conversion(led: Ledger, name: str) -> sqlite3.Row:
    row = led.conversion(_check_name(name))
    if row is None:
        known = [r["name"] for r in led.conversions()]
        listing = f" Known: {', '.join(known[:20])}." if known else " The ledger has none yet."
        raise UsageError(
            f"No conversion named {name!r} in {led.path}.{listing} Start it with "
            f"`ptt stages start {name} REFERENCE.py:fn` (or the stage_start tool)."
        )
    return row


def _check_stage(stage: int | None) -> None:
    if stage is not None and stage not in (1, 2, 3):
        raise UsageError(f"stage must be 1, 2 or 3, got {stage}.")


def _resolve_inputs(inputs: str | None) -> str | None:
    from mcp_server.engine.resolve import resolve_inputs

    return resolve_inputs(inputs, check=True).value  # a bad type-list item is a UsageError naming it


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- reading attempts ----------------------------------------------------------------------------------------


class _Attempt:
    """A stored attempt with its results parsed once."""

    def __init__(self, row: sqlite3.Row):
        self.row = row
        self.id: int = row["id"]
        self.number: int = row["number"]
        self.stage: int = row["stage"]
        self.verdict = _load(GateVerdict, row["gate_json"]) or GateVerdict(
            stage=self.stage, state=row["verdict"], checks=[], reasons=["(the stored verdict is unreadable)"]
        )
        self.validation = _load(ValidateResult, row["validate_json"])
        self.bench = _load(BenchResult, row["bench_json"])
        self.baseline_bench = _load(BenchResult, row["baseline_bench_json"])
        self.audit = _load(AuditSummary, row["audit_json"])
        self.autotune = _load(AutotuneInfo, row["autotune_json"])
        self.baseline_id: int | None = row["baseline_attempt_id"]
        # Timings of this attempt when it was only timed as another attempt's stage-1 baseline.
        self.timed_as_baseline: BenchResult | None = None

    @property
    def passed(self) -> bool:
        return self.verdict.state == "passed"

    @property
    def timing(self) -> BenchResult | None:
        own = self.bench if self.bench is not None and self.bench.device != INTERPRETER_DEVICE else None
        return own or self.timed_as_baseline

    def speed_vs_eager(self) -> float | None:
        timing = self.timing
        return geomean(r.speedup_vs_eager for r in timing.rows) if timing else None

    def summary(self, by_id: dict[int, _Attempt], full: bool = False) -> AttemptSummary:
        row = self.row
        baseline = by_id.get(self.baseline_id) if self.baseline_id else None
        speeds = case_speeds(self.timing, self.baseline_bench if self.timing is self.bench else None)
        pct = [s.pct_of_roofline for s in speeds if s.pct_of_roofline is not None]
        evidence = None
        if full:
            unavailable = _load(_Unavailable, row["unavailable_json"]) or _Unavailable()
            evidence = GateEvidence(
                validation=self.validation,
                autotune=self.autotune,
                no_autotune_reason=row["no_autotune_reason"],
                bench=self.bench,
                bench_unavailable=unavailable.bench,
                bench_error=unavailable.bench_error,
                baseline_attempt=baseline.number if baseline else None,
                baseline_bench=self.baseline_bench,
                baseline_unavailable=unavailable.baseline,
                audit=self.audit,
                audit_unavailable=unavailable.audit,
            )
        return AttemptSummary(
            number=self.number,
            stage=self.stage,
            candidate=row["candidate"],
            sha256=row["source_sha256"],
            source_chars=len(row["source"]),
            no_autotune_reason=row["no_autotune_reason"],
            allow_torch_ops=[op for op in (row["allow_torch_ops"] or "").split(",") if op],
            device=row["device"],
            verdict=self.verdict,
            validation=self.validation.summary if self.validation else "",
            speedup_vs_eager=geomean(s.speedup_vs_eager for s in speeds),
            speedup_vs_compile=geomean(s.speedup_vs_compile for s in speeds),
            speedup_vs_stage1=geomean(s.speedup_vs_stage1 for s in speeds),
            pct_of_roofline=fmean(pct) if pct else None,
            speeds=speeds,
            timing=(
                "own bench"
                if self.timing is not None and self.timing is self.bench
                else ("timed as a stage-1 baseline" if self.timing is not None else None)
            ),
            baseline_attempt=baseline.number if baseline else None,
            audit_errors=len(self.audit.errors) if self.audit else None,
            submitted_at=row["submitted_at"],
            finished_at=row["finished_at"],
            evidence=evidence,
        )


class _Unavailable(BaseModel):
    bench: str | None = None
    bench_error: str | None = None
    baseline: str | None = None
    audit: str | None = None


def _attempts(led: Ledger, conversion_id: int) -> list[_Attempt]:
    attempts = [_Attempt(r) for r in led.attempts(conversion_id)]
    by_id = {a.id: a for a in attempts}
    for a in attempts:  # in order, so the latest baseline timing wins
        if a.baseline_id not in by_id:
            continue
        timing = a.baseline_bench or _stage1_view(a.bench)
        if timing is not None and timing.device != INTERPRETER_DEVICE:
            by_id[a.baseline_id].timed_as_baseline = timing
    return attempts


def _stage1_view(bench: BenchResult | None) -> BenchResult | None:
    """The stage-1 attempt's timings from a bench that timed it beside a later attempt, as its own bench."""
    if bench is None or not stage1_in_bench(bench):
        return None
    from mcp_server.engine.bench import provider_view  # the ledger reads without the bench's imports

    return provider_view(bench, STAGE1)


def _same_code_benches(attempts: list[_Attempt], source: str, function: str, device: str) -> dict[int, BenchResult]:
    """The earlier attempts' benches of the same code (gates.code_key) on ``device``, by attempt number."""
    key = code_key(source, function)
    return {
        a.number: a.bench
        for a in attempts
        if a.bench is not None
        and a.bench.device == device
        and a.row["candidate"].rpartition(":")[2] == function
        and code_key(a.row["source"], function) == key
    }


def _best_of_stage(attempts: list[_Attempt], stage: int) -> tuple[_Attempt, str] | None:
    """The best passing attempt of a stage: the fastest vs eager where timed, else the latest."""
    passing = [a for a in attempts if a.stage == stage and a.passed]
    if not passing:
        return None
    timed = [a for a in passing if a.speed_vs_eager() is not None]
    if timed:
        chosen = max(timed, key=lambda a: (a.speed_vs_eager() or 0.0, a.number))
        return chosen, (
            f"fastest passing stage-{stage} attempt ({chosen.speed_vs_eager():.3f}× vs eager, geometric mean)"
        )
    chosen = passing[-1]
    return chosen, f"latest passing stage-{stage} attempt (no timings recorded for this stage)"


def _stage_reached(attempts: list[_Attempt]) -> int:
    return max((a.stage for a in attempts if a.passed), default=0)


def _next_gate(attempts: list[_Attempt], reached: int) -> NextGate:
    if reached == 3:
        return NextGate(stage=3, state="passed")
    stage = reached + 1
    at_stage = [a for a in attempts if a.stage == stage]
    if not at_stage:
        return NextGate(stage=stage, state="not attempted")
    latest = at_stage[-1]
    state = latest.verdict.state if latest.verdict.state != "passed" else "passed"
    return NextGate(stage=stage, state=state, reasons=latest.verdict.reasons)


def _next_step(attempts: list[_Attempt], reached: int, gate: NextGate) -> str:
    if reached == 3:
        return "All three stages passed. `best` (ptt stages best NAME --stage N) returns each stage's best source."
    if gate.state == "not attempted":
        return _STAGE_AIMS[gate.stage]
    latest = next(a for a in reversed(attempts) if a.stage == gate.stage)
    first = gate.reasons[0] if gate.reasons else "see the verdict's checks"
    if gate.state == "failed":
        return (
            f"Stage {gate.stage} failed on attempt #{latest.number}: {first}. "
            f"Fix it and submit again at stage {gate.stage}."
        )
    return (
        f"Stage {gate.stage} is pending on attempt #{latest.number}: {first}. Nothing it could check failed; "
        f"submit again at stage {gate.stage} where it can be measured (a CUDA GPU, the audit installed)."
    )


def _status_of(row: sqlite3.Row, attempts: list[_Attempt]) -> ConversionStatus:
    reached = _stage_reached(attempts)
    gate = _next_gate(attempts, reached)
    by_id = {a.id: a for a in attempts}
    valid = [a.summary(by_id) for a in attempts if a.validation is not None and a.validation.ok]

    def best(values: list[float | None]) -> float | None:
        xs = [v for v in values if v is not None]
        return max(xs) if xs else None

    return ConversionStatus(
        name=row["name"],
        reference=row["reference"],
        inputs=row["inputs"],
        notes=row["notes"],
        created_at=row["created_at"],
        stage_reached=reached,
        attempts=len(attempts),
        best_speedup_vs_eager=best([s.speedup_vs_eager for s in valid]),
        best_speedup_vs_compile=best([s.speedup_vs_compile for s in valid]),
        best_pct_of_roofline=best([s.pct_of_roofline for s in valid]),
        next_gate=gate,
        next_step=_next_step(attempts, reached, gate),
    )


# --- the operations -------------------------------------------------------------------------------------------


def start(
    name: str,
    reference: str,
    inputs: str | None = None,
    *,
    notes: str | None = None,
    ledger: LedgerArg = None,
) -> ConversionStatus:
    """Begin a conversion (idempotent for the same reference and inputs). ``reference`` is ``path.py:fn`` (or
    a KernelBench problem file); specs are stored as absolute paths."""
    name = _check_name(name)
    ref = str(parse_spec(reference, role="reference", defaults=("Model", "reference")))
    inp = _resolve_inputs(inputs)
    with _opened(ledger) as led:
        row, created = led.add_conversion(name, ref, inp, (notes or "").strip())
        if not created and (row["reference"], row["inputs"]) != (ref, inp):
            raise UsageError(
                f"A conversion named {name!r} already exists in {led.path} with reference {row['reference']} and "
                f"inputs {row['inputs'] or '(the reference module’s)'}. Use another name for a different target, "
                "or submit to this one as it is."
            )
        return _status_of(row, _attempts(led, row["id"]))


def _materialise(led: Ledger, attempt: _Attempt) -> tuple[str, str]:
    """A spec that runs this attempt's submitted source: its file if unchanged, else the ledger's copy."""
    spec = attempt.row["candidate"]
    path_text, _, name = spec.rpartition(":")
    path = Path(path_text)
    try:
        if path.is_file() and _sha256(path.read_bytes()) == attempt.row["source_sha256"]:
            return spec, ""
    except OSError:
        pass
    copy = led.path.parent / "sources" / attempt.row["source_sha256"][:16] / path.name
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(attempt.row["source"].encode("utf-8"))
    return f"{copy}:{name}", f"{path} changed since attempt #{attempt.number}; timed the ledger's copy at {copy}"


def _bench_with_stage1(
    fns: EvidenceFns,
    ev: GateEvidence,
    led: Ledger,
    baseline: _Attempt | None,
    ref: str,
    candidate: str,
    inputs: str | None,
    validation: ValidateResult,
) -> None:
    """Bench the candidate with the stage-1 attempt ``baseline`` timed beside it (gates.STAGE1): one run, the same
    inputs, paired rounds. Where that run fails as a whole (no rows), the candidate is benched alone and the stage-1
    attempt goes untimed, with the reason."""
    extra = None
    note = ""
    if baseline is not None:
        base_spec, note = _materialise(led, baseline)
        own = baseline.validation if baseline.validation and baseline.validation.device == validation.device else None
        allowed = tuple(op for op in (baseline.row["allow_torch_ops"] or "").split(",") if op)
        extra = {STAGE1: ExtraCandidate(base_spec, own, allowed)}
    try:
        ev.bench = fns.bench(
            reference=ref, candidate=candidate, inputs=inputs, validation=validation, extra_candidates=extra
        )
        if extra and ev.bench is not None and not ev.bench.rows:
            failed = ev.bench.summary or "it timed nothing"
            ev.baseline_unavailable = f"the bench with it beside this attempt failed ({failed}); timed this one alone"
            ev.bench = fns.bench(reference=ref, candidate=candidate, inputs=inputs, validation=validation)
    except EnvironmentUnavailable as exc:
        ev.bench_unavailable = str(exc)
    except UsageError as exc:
        ev.bench_error = str(exc)
    timed = ev.bench is not None and any(t.provider == STAGE1 and not t.error for r in ev.bench.rows for t in r.timings)
    if note and not timed and not ev.baseline_unavailable:
        ev.baseline_unavailable = note  # why its error may not be the recorded attempt's own


def submit(
    name: str,
    candidate: str,
    stage: int,
    *,
    no_autotune_reason: str | None = None,
    allow_torch_ops: Iterable[str] = (),
    ledger: LedgerArg = None,
    runner: Any = None,
    evidence: EvidenceFns | None = None,
) -> SubmitResult:
    """Run what ``stage``'s gate needs on ``candidate`` (``path.py:fn``), record the attempt and its verdict.

    Raises UsageError for misuse (unknown conversion, bad spec, bad stage); a kernel that fails is a recorded
    attempt with ``ok=False`` and the reasons in ``verdict.reasons``.
    """
    _check_stage(stage)
    reason = (no_autotune_reason or "").strip() or None
    allowed = tuple(dict.fromkeys(op.strip() for op in allow_torch_ops or () if op and op.strip()))
    fns = evidence or real_evidence(runner, allow_torch_ops=allowed)
    with _opened(ledger) as led:
        conv = _conversion(led, name)
        spec = parse_spec(candidate, role="candidate", defaults=("ModelNew", "candidate"))
        data = spec.path.read_bytes()
        source = data.decode("utf-8")  # parse_spec has read it as UTF-8 already
        submitted_at = now()
        ref, inputs = conv["reference"], conv["inputs"]

        validation = fns.validate(reference=ref, candidate=str(spec), inputs=inputs)
        ev = GateEvidence(validation=validation, no_autotune_reason=reason)
        baseline: _Attempt | None = None
        if stage >= 2:
            ev.autotune = autotune_info(source, str(spec.path))
            chosen = _best_of_stage(_attempts(led, conv["id"]), 1)
            baseline = chosen[0] if chosen else None
            ev.baseline_attempt = baseline.number if baseline else None
            if validation.ok and validation.device != INTERPRETER_DEVICE:
                _bench_with_stage1(fns, ev, led, baseline, ref, str(spec), inputs, validation)
        if ev.bench is not None and ev.bench.device != INTERPRETER_DEVICE:
            earlier = _attempts(led, conv["id"])
            ev.same_code_benches = _same_code_benches(earlier, source, spec.name, ev.bench.device)
            numbers = {a.id: a.number for a in earlier}
            ev.same_code_stage1 = {
                a.number: numbers[a.baseline_id]
                for a in earlier
                if a.number in ev.same_code_benches and a.baseline_id in numbers and stage1_in_bench(a.bench)
            }
        if stage == 3:
            try:
                ev.audit = summarize_audit(fns.audit(reference=ref, candidate=str(spec), inputs=inputs))
            except (AuditUnavailable, ImportError, EnvironmentUnavailable) as exc:
                ev.audit_unavailable = str(exc)
            except UsageError:
                raise
            except Exception as exc:  # a broken audit must not lose the evidence gathered so far, nor pass
                ev.audit_unavailable = f"the audit raised {type(exc).__name__}: {exc}"

        if _sha256(spec.path.read_bytes()) != _sha256(data):
            raise UsageError(
                f"{spec.path} changed while it was being checked, so the results may not describe the recorded "
                "source. Nothing was recorded: submit again once the file is saved."
            )
        verdict = evaluate(stage, ev)
        unavailable = _Unavailable(
            bench=ev.bench_unavailable,
            bench_error=ev.bench_error,
            baseline=ev.baseline_unavailable,
            audit=ev.audit_unavailable,
        )
        fields = {
            "stage": stage,
            "candidate": str(spec),
            "source": source,
            "source_sha256": _sha256(data),
            "no_autotune_reason": reason,
            "allow_torch_ops": ",".join(allowed),
            "autotune_json": ev.autotune.model_dump_json() if ev.autotune else None,
            "device": validation.device,
            "validate_json": validation.model_dump_json(),
            "bench_json": ev.bench.model_dump_json() if ev.bench else None,
            "audit_json": ev.audit.model_dump_json() if ev.audit else None,
            "unavailable_json": unavailable.model_dump_json(exclude_none=True),
            "verdict": verdict.state,
            "gate_json": verdict.model_dump_json(),
            "submitted_at": submitted_at,
            "finished_at": now(),
            "baseline_attempt_id": baseline.id if baseline else None,
            "baseline_bench_json": ev.baseline_bench.model_dump_json() if ev.baseline_bench else None,
        }
        number = led.add_attempt(conv["id"], fields)
        attempts = _attempts(led, conv["id"])
        status = _status_of(conv, attempts)

    findings = list(validation.findings) + (list(ev.bench.findings) if ev.bench else [])
    return SubmitResult(
        ok=verdict.passed,
        device=validation.device,
        findings=findings,
        name=conv["name"],
        attempt=number,
        stage=stage,
        candidate=str(spec),
        sha256=fields["source_sha256"],
        verdict=verdict,
        stage_reached=status.stage_reached,
        validation=validation.summary,
        speeds=case_speeds(ev.bench, ev.baseline_bench),
        autotune=ev.autotune,
        audit=ev.audit,
        allow_torch_ops=list(allowed),
        next_step=status.next_step,
        ledger=str(led.path),
    )


def status(
    name: str | None = None, *, ledger: LedgerArg = None, plot: str | os.PathLike[str] | None = None
) -> LedgerStatus:
    """Every conversion (or one): stage reached, attempts, best speedups, the next gate and why it is not met.
    ``plot`` writes a PNG of speed per attempt (needs matplotlib)."""
    path = ledger.path if isinstance(ledger, Ledger) else ledger_path(ledger)
    if not isinstance(ledger, Ledger) and not ledger_exists(path):
        if name is not None:
            raise UsageError(f"There is no stage ledger at {path}, so no conversion {name!r}. Start it first.")
        return LedgerStatus(ledger=str(path), exists=False)
    with _opened(ledger) as led:
        rows = [_conversion(led, name)] if name is not None else led.conversions()
        table = [(row, _attempts(led, row["id"])) for row in rows]
    out = LedgerStatus(ledger=str(path), exists=True, conversions=[_status_of(r, a) for r, a in table])
    if plot is not None:
        from mcp_server.engine.stages.plot import plot_attempts

        out.plot = plot_attempts(
            {r["name"]: [a.summary({x.id: x for x in att}) for a in att] for r, att in table}, Path(plot)
        )
    return out


def show(name: str, *, ledger: LedgerArg = None, full: bool = False) -> ConversionDetail:
    """One conversion with every attempt (``full``: with the tools' complete results)."""
    with _existing(ledger) as led:
        row = _conversion(led, name)
        attempts = _attempts(led, row["id"])
        by_id = {a.id: a for a in attempts}
        return ConversionDetail(
            ledger=str(led.path),
            conversion=_status_of(row, attempts),
            attempts=[a.summary(by_id, full=full) for a in attempts],
        )


def best(name: str, stage: int | None = None, *, ledger: LedgerArg = None) -> BestAttempt:
    """The source of the best passing attempt of ``stage`` (default: the highest stage passed), to roll back."""
    _check_stage(stage)
    with _existing(ledger) as led:
        row = _conversion(led, name)
        attempts = _attempts(led, row["id"])
        reached = _stage_reached(attempts)
        if reached == 0:
            raise UsageError(f"Conversion {name!r} has no passing attempt yet: nothing to roll back to.")
        wanted = stage if stage is not None else reached
        chosen = _best_of_stage(attempts, wanted)
        if chosen is None:
            passed = sorted({a.stage for a in attempts if a.passed})
            raise UsageError(
                f"Conversion {name!r} has no passing stage-{wanted} attempt; stages passed: "
                f"{', '.join(map(str, passed))}. Ask for one of those."
            )
        attempt, why = chosen
        path = Path(attempt.row["candidate"].rpartition(":")[0])
        try:
            unchanged = path.is_file() and _sha256(path.read_bytes()) == attempt.row["source_sha256"]
        except OSError:
            unchanged = False
        summary = attempt.summary({a.id: a for a in attempts})
        return BestAttempt(
            ledger=str(led.path),
            name=row["name"],
            stage=wanted,
            attempt=attempt.number,
            candidate=attempt.row["candidate"],
            sha256=attempt.row["source_sha256"],
            source=attempt.row["source"],
            file_unchanged=unchanged,
            chosen_by=why,
            speedup_vs_eager=summary.speedup_vs_eager,
            speedup_vs_compile=summary.speedup_vs_compile,
            submitted_at=attempt.row["submitted_at"],
        )
