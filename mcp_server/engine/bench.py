"""bench: timings an agent can trust — against eager, torch.compile and the hardware's measured ceilings.

The timing itself happens in an isolated child (see ``jobs.bench_job`` for the method). Here: refuse
honestly without a GPU, validate first, hold the per-GPU lock (one bench at a time per GPU, shared by the
CLI and the server), turn bytes/FLOPs into achieved GB/s, TFLOP/s and % of the measured roofline, raise
the flags, and draw the sweep.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mcp_server.engine.device import DeviceInfo, probe
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.jobs import registry
from mcp_server.engine.models import (
    BenchResult,
    BenchRow,
    DevicePeaks,
    ExtraCandidate,
    Finding,
    FindingKind,
    ProviderTiming,
    Severity,
    ValidateResult,
)
from mcp_server.engine.resolve import resolve_inputs
from mcp_server.engine.runner import Runner, shared_runner
from mcp_server.engine.specs import output_path, parse_spec, swapped_kernelbench_hint

NO_GPU = "bench needs a CUDA GPU; interpreter timings are meaningless (validate and compile work without one)"
Progress = Callable[[float, float | None, str], None]

# Two limits with one meaning each: how long the timing child may run, and how long to wait for the GPU while
# another bench holds it.
BENCH_TIMEOUT_S = 900.0
GPU_LOCK_WAIT_S = 900.0

# Flags.
SPREAD_LIMIT = 0.10
EFFICIENCY_LIMIT = 50.0
SUSPICIOUS_SPEEDUP = 10.0
ROOFLINE_SLACK = 1.05  # above 105 % of the roofline the model or the measurement is wrong
# Host time beyond the events above this (and above this fraction of the events' time) means other streams.
OUTSIDE_MIN_MS = 0.02
OUTSIDE_RATIO = 0.2
# Paired rounds below this say nothing about a tie (bench times five).
MIN_ROUNDS = 3
# Kernels with more FLOPs per byte than this are judged against the tensor-core rate of their dtype.
TENSOR_INTENSITY = 20.0


def cache_dir() -> Path:
    base = os.environ.get("PTT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pytorch-to-triton"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- device peaks -------------------------------------------------------------------------------------


# The way ceilings are measured; a cache written another way is measured again. 2: with the bench's own timer.
PEAKS_METHOD = 2


def _peaks_file(device: DeviceInfo) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{device.device}-torch{device.torch}").strip("-")
    return cache_dir() / "peaks" / f"{slug}-m{PEAKS_METHOD}.json"


def cached_peaks(device: DeviceInfo) -> DevicePeaks | None:
    path = _peaks_file(device)
    try:
        return DevicePeaks.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def device_peaks(device: DeviceInfo, runner: Runner, *, remeasure: bool = False) -> DevicePeaks:
    """Copy bandwidth and matmul rates, measured once per device and cached on disk."""
    if device.interpreter:
        raise EnvironmentUnavailable("measuring device peaks needs a CUDA GPU")
    if not remeasure and (peaks := cached_peaks(device)) is not None:
        return peaks
    with gpu_lock(device):
        outcome = runner.run(registry.BENCH_PEAKS.name, {}, timeout_s=300, env=device.job_env())
    with outcome:
        if not outcome.ok or outcome.result is None:
            detail = outcome.usage_error or (outcome.failure.message if outcome.failure else "no result")
            raise EnvironmentUnavailable(f"could not measure the device peaks: {detail}")
        raw = outcome.result
    peaks = DevicePeaks(
        device=raw["device"],
        copy_gbps=raw["copy_gbps"],
        matmul_tflops=raw["matmul_tflops"],
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        torch=device.torch,
    )
    path = _peaks_file(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(peaks.model_dump_json(indent=1))
    os.replace(tmp, path)
    return peaks


# --- the GPU lock -------------------------------------------------------------------------------------


class gpu_lock:
    """One bench at a time per GPU, across processes (an flock on a file per GPU)."""

    def __init__(self, device: DeviceInfo, progress: Progress | None = None, timeout_s: float = 3600.0):
        index = device.gpu_index or 0
        self.path = cache_dir() / "locks" / f"gpu{index}.lock"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.timeout_s = timeout_s
        self.waited_s = 0.0
        self._fh: Any = None

    def __enter__(self) -> gpu_lock:
        self._fh = open(self.path, "a+")
        started = time.perf_counter()
        told = False
        while True:
            try:
                fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told and self.progress is not None:
                    self._fh.seek(0)
                    holder = self._fh.read().strip() or "another process"
                    self.progress(0, None, f"queued: the GPU is busy with another bench ({holder}); waiting")
                    told = True
                if time.perf_counter() - started > self.timeout_s:
                    self._fh.close()
                    raise EnvironmentUnavailable(
                        f"gave up waiting {self.timeout_s:.0f} s for the GPU lock {self.path}"
                    ) from None
                time.sleep(0.2)
        self.waited_s = time.perf_counter() - started
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"pid {os.getpid()}")
        self._fh.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


# --- bench --------------------------------------------------------------------------------------------


def bench(
    candidate: str,
    reference: str | None = None,
    *,
    inputs: str | None = None,
    sizes: str | None = None,
    mode: str = "events",
    reps: int = 100,
    input_sets: int | None = None,
    l2_flush: bool = True,
    baselines: bool = True,
    compile_baseline: bool = True,
    validate_first: bool = True,
    force: bool = False,
    backward: bool = False,
    grad_inputs: list[int] | None = None,
    extra_candidates: dict[str, str | ExtraCandidate] | None = None,
    extra_baselines: list[str] | None = None,
    allow_torch_ops: Iterable[str] | None = (),
    check_scale: float = 0.0,
    validated_torch_share: float | None = None,
    plot: str | None = None,
    timeout_s: float = BENCH_TIMEOUT_S,
    lock_wait_s: float = GPU_LOCK_WAIT_S,
    progress: Progress | None = None,
    runner: Runner | None = None,
    cwd: Path | None = None,
) -> BenchResult:
    """Time ``candidate`` (and the reference's eager and torch.compile baselines) on the GPU.

    ``timeout_s`` bounds the timing child; ``lock_wait_s`` how long to wait for the GPU while another bench
    holds it (:class:`gpu_lock`).

    ``extra_candidates``: label → ``path.py:function`` (or :class:`ExtraCandidate`) of other implementations timed in
    the same rounds and checked like the candidate; each row pairs their rounds with the candidate's (their time over
    its, as for any peer) under their label.

    ``extra_baselines``: ``path.py:function`` specs of other implementations to beat (a library the user would
    otherwise pick), timed in the same runs on the same inputs; each row then carries the candidate's speed-up
    over each one in ``speedup_vs_baselines``, labelled by :func:`baseline_labels`.

    ``check_scale``: the errors a validation made apart measured (:func:`measured_error_scale`), which the check
    of timed outputs allows several times over; the validation ``validate_first`` runs adds its own.

    ``validated_torch_share``: the largest share of the reference's torch work a validation made apart saw the
    candidate run in torch (``ValidateResult.torch_share``); every timed call is recorded and may run that plus
    validate's warning level (jobs.timed_ops). The validation ``validate_first`` runs sets it.
    """
    started = time.perf_counter()
    if mode not in ("events", "cuda-graph"):
        raise UsageError(f"--mode must be 'events' or 'cuda-graph', not {mode!r}.")
    if reps < 10:
        raise UsageError("--reps must be at least 10 for a median and percentiles to mean something.")
    try:
        cand_spec = parse_spec(candidate, role="candidate", defaults=("ModelNew", "candidate"), cwd=cwd)
    except UsageError as exc:
        hint = (
            swapped_kernelbench_hint(reference, candidate, cwd, "ptt bench {solution} --reference {problem}")
            if reference
            else ""
        )
        raise UsageError(f"{exc}{hint}") from None
    ref_spec = parse_spec(reference, role="reference", defaults=("Model", "reference"), cwd=cwd) if reference else None
    files = [str(cand_spec.path)] + ([str(ref_spec.path)] if ref_spec else [])
    resolved = resolve_inputs(inputs, cwd=cwd)
    inputs = resolved.value
    files.extend(resolved.files)
    extras: dict[str, dict[str, str]] = {}
    extra_checks: dict[str, dict[str, Any]] = {}
    for label, given in (extra_candidates or {}).items():
        if label in ("candidate", "eager", "compile"):
            raise UsageError(f"extra candidate label {label!r} is reserved; use e.g. 'stage1'.")
        own = given if isinstance(given, ExtraCandidate) else ExtraCandidate(str(given))
        extra = parse_spec(own.spec, role=f"candidate {label}", cwd=cwd)
        extras[label] = {"path": str(extra.path), "name": extra.name}
        files.append(str(extra.path))
        if isinstance(given, ExtraCandidate):
            extra_checks[label] = {
                **validation_checks(own.validation),
                "allow_torch_ops": [op for op in own.allow_torch_ops if op],
            }
    candidates = list(extras)
    baseline_specs = baseline_labels(extra_baselines or [], taken=set(extras), cwd=cwd)
    for label, spec in baseline_specs.items():
        extras[label] = {"path": str(spec.path), "name": spec.name}
        files.append(str(spec.path))
    runner = runner or shared_runner()
    device = probe(runner)
    if device.interpreter:
        raise EnvironmentUnavailable(NO_GPU)

    findings: list[Finding] = []
    validation = None
    if validate_first and ref_spec is not None:
        from mcp_server.engine.validate import validate

        if progress:
            progress(0, None, "validating before timing")
        verdict = validate(
            str(ref_spec),
            str(cand_spec),
            backward=backward,
            inputs=inputs if not sizes else None,
            seeds=1,
            derive_shapes=False,
            allow_torch_ops=tuple(op for op in allow_torch_ops or () if op),
            runner=runner,
            cwd=cwd,
        )
        validation = verdict.summary
        check_scale = max(check_scale, measured_error_scale(verdict))
        validated_torch_share = verdict.torch_share
        if not verdict.ok:
            findings.append(
                Finding(
                    kind=FindingKind.failed_validation,
                    severity=Severity.error,
                    message=f"{verdict.summary}; not timed (pass force=True to time it anyway)",
                )
            )
            findings.extend(verdict.errors)
            if not force:
                return BenchResult(
                    ok=False,
                    device=device.device,
                    findings=findings,
                    candidate=str(cand_spec),
                    reference=str(ref_spec),
                    mode=mode,
                    l2_flush=l2_flush,
                    input_sets=0,
                    reps=reps,
                    validation=validation,
                    rows=[],
                    seconds=round(time.perf_counter() - started, 3),
                    summary="not timed: the candidate failed validation",
                )

    peaks = device_peaks(device, runner)
    with gpu_lock(device, progress, timeout_s=lock_wait_s) as lock:
        outcome = runner.run(
            registry.BENCH.name,
            {
                "candidate": {"path": str(cand_spec.path), "name": cand_spec.name},
                "reference": {"path": str(ref_spec.path), "name": ref_spec.name} if ref_spec else None,
                "inputs": inputs,
                "sizes": sizes,
                "mode": mode,
                "reps": reps,
                "input_sets": input_sets,
                "l2_flush": l2_flush,
                "baselines": baselines,
                "compile_baseline": compile_baseline,
                "backward": backward,
                "grad_inputs": grad_inputs,
                "extra_candidates": extras,
                # Extra candidates have their timed outputs checked like the candidate; baselines do not.
                "checked": candidates,
                "extra_checks": extra_checks,
                "check_scale": check_scale,
                "allow_torch_ops": [op for op in allow_torch_ops or () if op],
                "validated_torch_share": validated_torch_share,
            },
            timeout_s=timeout_s,
            env=device.job_env(),
            user_files=files,
            cwd=str(cwd or Path.cwd()),
            on_progress=progress,
        )
    with outcome:
        if outcome.usage_error:
            raise UsageError(outcome.usage_error)
        if outcome.failure is not None:
            f = outcome.failure
            findings.append(Finding(kind=f.kind, severity=Severity.error, message=f.detail(), where=f.where))
            return BenchResult(
                ok=False,
                device=device.device,
                findings=findings,
                candidate=str(cand_spec),
                reference=str(ref_spec) if ref_spec else None,
                mode=mode,
                l2_flush=l2_flush,
                input_sets=0,
                reps=reps,
                peaks=peaks,
                validation=validation,
                rows=[],
                seconds=round(time.perf_counter() - started, 3),
                queued_s=lock.waited_s,
                summary=f"bench failed: {f.kind.value}",
            )
        raw = outcome.result or {}

    rows = [_row(r, peaks, list(baseline_specs), candidates) for r in raw.get("rows", [])]
    findings.extend(flags(rows, list(baseline_specs), candidates))
    candidate_errors = [t.error for r in rows for t in r.timings if t.provider == "candidate" and t.error]
    findings.extend(error_finding(err) for err in candidate_errors)
    findings.extend(_peer_errors(rows, [*candidates, *baseline_specs]))
    result = BenchResult(
        ok=not candidate_errors and bool(rows),
        device=device.device,
        findings=findings,
        candidate=str(cand_spec),
        reference=str(ref_spec) if ref_spec else None,
        mode=mode,
        backward=backward,
        l2_flush=l2_flush,
        input_sets=max((r.get("input_sets", 1) for r in raw.get("rows", [])), default=0),
        reps=reps,
        peaks=peaks,
        validation=validation,
        baselines={label: str(spec) for label, spec in baseline_specs.items()},
        rows=rows,
        notes=list(raw.get("notes") or []),
        seconds=round(time.perf_counter() - started, 3),
        queued_s=round(lock.waited_s, 3),
    )
    result.summary = summarize(result)
    if plot:
        result.plot = draw(result, plot)
    return result


def error_finding(error: str) -> Finding:
    """The finding for a provider's timing error, which the child writes as ``kind: message`` (an exception's
    kind, or the timed-output check's); an error of no known kind is an ``exception``."""
    head, sep, rest = error.partition(":")
    kinds = {k.value: k for k in FindingKind}
    if sep and head.strip() in kinds:
        return Finding(kind=kinds[head.strip()], severity=Severity.error, message=rest.strip())
    return Finding(kind=FindingKind.exception, severity=Severity.error, message=error)


def _peer_errors(rows: list[BenchRow], labels: list[str]) -> list[Finding]:
    """A warning per extra candidate or baseline whose timing failed: its first error and the sizes it failed on (the
    candidate's timings stand; comparisons with it are left out)."""
    out = []
    for label in labels:
        failed = [(r.case, t.error) for r in rows for t in r.timings if t.provider == label and t.error]
        if not failed:
            continue
        first = error_finding(failed[0][1])
        sizes = ", ".join(case for case, _ in failed[:5]) + (f" (+{len(failed) - 5} more)" if len(failed) > 5 else "")
        out.append(
            first.model_copy(
                update={
                    "severity": Severity.warning,
                    "message": f"{label} (timed beside the candidate) failed on {sizes}: {first.message} — its "
                    "timings and the comparisons with it are left out; the candidate's stand",
                }
            )
        )
    return out


def validation_checks(validation: ValidateResult | None) -> dict[str, Any]:
    """What a validation allows the check of timed outputs: its error scale (:func:`measured_error_scale`) and the
    torch work it saw; without one, no error scale and validate's own level of torch work."""
    if validation is None:
        return {"check_scale": 0.0, "validated_torch_share": None}
    return {"check_scale": measured_error_scale(validation), "validated_torch_share": validation.torch_share}


def measured_error_scale(verdict: ValidateResult) -> float:
    """The largest relative-norm error a validation measured, PyTorch's own in its dtype or the candidate's on an
    output it passed (a failed output's error would excuse anything): the scale the check of timed outputs
    allows several times over (jobs.timed_check)."""
    errors = (
        e for r in verdict.rows for e in (r.torch_rel_norm_err, r.rel_norm_err if r.ok else 0.0) if math.isfinite(e)
    )
    return max(errors, default=0.0)


def baseline_labels(specs: list[str], *, taken: set[str] = frozenset(), cwd: Path | None = None) -> dict[str, Any]:
    """Parse ``path.py:function`` baseline specs and label each by its function name (``file.function`` when two
    share a name). A spec without a function name, a repeated spec, or a label already used is a usage error."""
    parsed = []
    for text in specs:
        head, sep, tail = str(text).strip().rpartition(":")
        if not sep or not head or not tail or "/" in tail or "\\" in tail:
            raise UsageError(f"baseline {text!r} names no function; pass it as path.py:function (e.g. peer.py:fast)")
        parsed.append(parse_spec(text, role="baseline", cwd=cwd))
    out: dict[str, Any] = {}
    names = [p.name for p in parsed]
    for spec in parsed:
        label = spec.name if names.count(spec.name) == 1 else f"{spec.path.stem}.{spec.name}"
        if label in out and str(out[label]) == str(spec):
            raise UsageError(f"baseline {spec} is given twice; pass each baseline once")
        if label in out or label in taken or label in ("candidate", "eager", "compile"):
            raise UsageError(
                f"baseline label {label!r} (from {spec}) clashes with another provider; rename the function"
            )
        out[label] = spec
    return out


def _row(
    raw: dict[str, Any], peaks: DevicePeaks, baselines: list[str] | None = None, extras: list[str] | None = None
) -> BenchRow:
    timings = []
    for t in raw["timings"]:
        if t.get("error"):
            timings.append(
                ProviderTiming(
                    provider=t["provider"],
                    median_ms=math.nan,
                    p20_ms=math.nan,
                    p80_ms=math.nan,
                    min_ms=math.nan,
                    spread=0.0,
                    samples=0,
                    error=t["error"],
                    compile_s=t.get("compile_s"),
                    checked_calls=t.get("checked_calls"),
                    check_margin=t.get("check_margin"),
                    torch_share=t.get("torch_share"),
                )
            )
        else:
            timings.append(ProviderTiming(**{k: v for k, v in t.items() if k in ProviderTiming.model_fields}))
    row = BenchRow(
        case=raw["case"], timings=timings, bytes=int(raw["bytes"]), flops=int(raw["flops"]), model=raw["model"]
    )
    by = {t.provider: t for t in timings if not t.error}
    cand = by.get("candidate")
    if cand is None:
        return row
    ms = honest_ms(cand)
    if ms > 0:
        row.bandwidth_gbps = row.bytes / ms / 1e6
        row.pct_of_bandwidth = 100 * row.bandwidth_gbps / peaks.copy_gbps
        floor_mem = row.bytes / (peaks.copy_gbps * 1e6)
        floor_compute = 0.0
        if row.flops:
            row.tflops = row.flops / ms / 1e9
            rate = _compute_rate(row, raw.get("dtype"), peaks)
            row.pct_of_compute = 100 * row.tflops / rate
            floor_compute = row.flops / (rate * 1e9)
        row.bound = "compute" if floor_compute > floor_mem else "memory"
        row.pct_of_roofline = 100 * max(floor_mem, floor_compute) / ms
    _compare(row, by, cand, baselines, extras)
    return row


def _compare(
    row: BenchRow,
    by: dict[str, ProviderTiming],
    cand: ProviderTiming,
    baselines: list[str] | None,
    extras: list[str] | None = None,
) -> None:
    """The row's ratios to eager, torch.compile, each baseline and each extra candidate, with their paired rounds. A
    peer the GPU stayed busy after is not compared: it leaves no work of its own there (an extra candidate's may be a
    thread the candidate left running, which would make it look slower; flags says so)."""
    ms = honest_ms(cand)
    if ms <= 0:
        return
    for name, attr in (("eager", "speedup_vs_eager"), ("compile", "speedup_vs_compile")):
        if name in by and not outside_stream(by[name]):
            setattr(row, attr, by[name].median_ms / ms)
            _pair_rounds(row, name, by[name], cand)
    for labels, ratios in ((baselines, row.speedup_vs_baselines), (extras, row.speedup_vs_extras)):
        for label in labels or []:
            if label in by and by[label].median_ms > 0 and not outside_stream(by[label]):
                ratios[label] = by[label].median_ms / ms
                _pair_rounds(row, label, by[label], cand)


def provider_view(bench: BenchResult, label: str) -> BenchResult | None:
    """``bench`` as if the extra candidate ``label`` had been its candidate: that provider's timings under the name
    ``candidate``, with eager's and torch.compile's and its ratios to them (no roofline figures: the row's dtype is
    not kept). None when no row timed it."""
    rows = []
    for row in bench.rows:
        own = next((t for t in row.timings if t.provider == label), None)
        if own is None:
            continue
        peers = [t for t in row.timings if t.provider in ("eager", "compile")]
        view = BenchRow(
            case=row.case,
            timings=[own.model_copy(update={"provider": "candidate"}), *peers],
            bytes=row.bytes,
            flops=row.flops,
            model=row.model,
        )
        if own.error is None:
            _compare(view, {t.provider: t for t in peers if not t.error}, own, None)
        rows.append(view)
    if not rows:
        return None
    ok = all(t.error is None for r in rows for t in r.timings if t.provider == "candidate")
    return bench.model_copy(update={"rows": rows, "candidate": f"{label} of {bench.candidate}", "ok": ok})


def _pair_rounds(row: BenchRow, peer: str, timing: ProviderTiming, cand: ProviderTiming) -> None:
    """The peer's time over the candidate's round by round (the candidate's with its work on other streams added, as
    :func:`honest_ms` adds it), and what they say together (:func:`standing`)."""
    extra = (cand.outside_stream_ms or 0.0) if outside_stream(cand) else 0.0
    if len(timing.round_ms) != len(cand.round_ms) or any(c + extra <= 0 for c in cand.round_ms):
        return
    ratios = [p / (c + extra) for p, c in zip(timing.round_ms, cand.round_ms, strict=True)]
    if verdict := standing(ratios):
        row.round_ratios[peer] = ratios
        row.standing[peer] = verdict


def standing(ratios: list[float]) -> str | None:
    """faster (every round's ratio above 1.0), slower (every one below), or tie; None under MIN_ROUNDS rounds.
    With five rounds, a candidate no faster or slower than its peer wins or loses all of them one time in 16."""
    if len(ratios) < MIN_ROUNDS:
        return None
    if min(ratios) > 1.0:
        return "faster"
    if max(ratios) < 1.0:
        return "slower"
    return "tie"


def _compute_rate(row: BenchRow, dtype: str | None, peaks: DevicePeaks) -> float:
    intensity = row.flops / max(row.bytes, 1)
    rates = peaks.matmul_tflops
    if intensity >= TENSOR_INTENSITY and dtype in rates:
        return rates[dtype]
    if intensity >= TENSOR_INTENSITY and dtype == "float32":
        return rates.get("tf32", rates.get("float32", 1.0))
    return rates.get("float32", 1.0)


def outside_stream(t: ProviderTiming) -> bool:
    """Did the host see the call take longer than the events did (work on other streams)?"""
    extra = t.outside_stream_ms or 0.0
    return extra > max(OUTSIDE_MIN_MS, OUTSIDE_RATIO * t.median_ms)


def honest_ms(t: ProviderTiming) -> float:
    """The events' median, plus the time the host saw beyond them when a call left work on another stream (a
    candidate's figure; a baseline's is its events' median, and a comparison with a baseline that shows such work is
    withheld: its calls leave none of their own, so the GPU was busy with something else, which slowed it)."""
    return t.median_ms + (t.outside_stream_ms or 0.0) if outside_stream(t) else t.median_ms


def flags(rows: list[BenchRow], baselines: list[str] | None = None, extras: list[str] | None = None) -> list[Finding]:
    out: list[Finding] = []

    def add(kind: FindingKind, case: str, message: str) -> None:
        out.append(Finding(kind=kind, severity=Severity.warning, message=f"{case}: {message}", case=case))

    for row in rows:
        by = {t.provider: t for t in row.timings if not t.error}
        cand = by.get("candidate")
        if cand is None:
            continue
        for peer, kind, ratio, name, said in (
            ("eager", FindingKind.slower_than_eager, row.speedup_vs_eager, "eager", " — slower than PyTorch"),
            ("compile", FindingKind.slower_than_compile, row.speedup_vs_compile, "torch.compile", ""),
        ):
            if ratio is not None and ratio < 1.0:
                out.append(_slower(row, peer, kind, ratio, name, said))
        if row.pct_of_roofline is not None and row.pct_of_roofline < EFFICIENCY_LIMIT:
            add(
                FindingKind.low_efficiency,
                row.case,
                f"{row.pct_of_roofline:.0f} % of the {row.bound} roofline (under {EFFICIENCY_LIMIT:.0f} %)",
            )
        for t in by.values():
            if t.spread > SPREAD_LIMIT:
                add(
                    FindingKind.high_spread,
                    row.case,
                    f"{t.provider}: p20–p80 spread {t.spread:.0%} of the median (over {SPREAD_LIMIT:.0%}); "
                    "the figure is unstable — more reps, a bigger size, or cuda-graph mode",
                )
            peer = t.provider in {"eager", "compile", *(baselines or [])}
            if outside_stream(t) and (peer or t.provider in (extras or [])):
                why = (
                    "a baseline leaves no work of its own there, so other work ran on the GPU while it was timed "
                    "(another process, or a thread the candidate started) and slowed it"
                    if peer
                    else "work on another stream of its own, or a thread the candidate left running, which would "
                    "make it look slower than it is"
                )
                add(
                    FindingKind.timer_disagreement,
                    row.case,
                    f"{t.provider}: the GPU stays busy {t.outside_stream_ms:.4f} ms per call after its end event "
                    f"({t.median_ms:.4f} ms by the events) — {why}; the comparison with it is withheld",
                )
            elif outside_stream(t):
                add(
                    FindingKind.timer_disagreement,
                    row.case,
                    f"{t.provider}: the GPU stays busy {t.outside_stream_ms:.4f} ms per call after its end event "
                    f"({t.median_ms:.4f} ms by the events) — work left on another stream; the reported time "
                    "includes it",
                )
        if cand.host_launch_ms is not None and cand.host_launch_ms > honest_ms(cand):
            out.append(
                Finding(
                    kind=FindingKind.launch_bound,
                    severity=Severity.info,
                    case=row.case,
                    message=f"{row.case}: launching one call takes the host {cand.host_launch_ms:.4f} ms (in bench's "
                    f"process, whose launch hooks add a little), the GPU runs it in {honest_ms(cand):.4f} ms — in a "
                    "loop the host is the bottleneck (fewer launches, a lighter launcher, or CUDA graphs)",
                )
            )
        if row.speedup_vs_eager is not None and row.speedup_vs_eager > SUSPICIOUS_SPEEDUP:
            add(
                FindingKind.suspicious_speedup,
                row.case,
                f"{row.speedup_vs_eager:.1f}× eager: check the candidate does all the work (validate it)",
            )
        if row.pct_of_roofline is not None and row.pct_of_roofline > 100 * ROOFLINE_SLACK:
            add(
                FindingKind.suspicious_speedup,
                row.case,
                f"{row.pct_of_roofline:.0f} % of the roofline: faster than the hardware allows — the bytes/FLOPs model "
                "overcounts, or work is skipped or cached",
            )
    timed = [
        (r.bytes + r.flops, honest_ms(t), r.case)
        for r in rows
        for t in r.timings
        if t.provider == "candidate" and not t.error and r.bytes
    ]
    timed.sort()
    if len(timed) >= 2:
        (w0, t0, c0), (w1, t1, c1) = timed[0], timed[-1]
        if w1 >= 4 * w0 and t1 < 1.2 * t0:
            out.append(
                Finding(
                    kind=FindingKind.flat_scaling,
                    severity=Severity.warning,
                    message=f"{c0} → {c1}: {w1 / w0:.0f}× the work in {t1 / t0:.2f}× the time — launch-bound, or not "
                    "doing the work (cuda-graph mode shows which)",
                )
            )
    return out


def _slower(row: BenchRow, peer: str, kind: FindingKind, ratio: float, name: str, said: str) -> Finding:
    """A median ratio under 1.0: a warning when the candidate lost every round (or rounds were not paired), an
    info finding naming the tie when some round went the other way (every round won while the median of all calls
    says lost is a tie too)."""
    spread = row.round_range(peer)
    if row.standing.get(peer) in ("tie", "faster"):
        return Finding(
            kind=kind,
            severity=Severity.info,
            case=row.case,
            message=f"{row.case}: {ratio:.3f}× {name}, a tie: the rounds read {spread}, so a rerun may land on "
            "either side of 1.0 — a win is one that holds in every round",
        )
    lost = f" (slower in every round: {spread})" if row.standing.get(peer) == "slower" else ""
    return Finding(
        kind=kind, severity=Severity.warning, case=row.case, message=f"{row.case}: {ratio:.2f}× {name}{said}{lost}"
    )


def summarize(result: BenchResult) -> str:
    parts = []
    for row in result.rows:
        bits = []
        if row.speedup_vs_eager is not None:
            bits.append(f"{row.speedup_vs_eager:.2f}× eager")
        if row.speedup_vs_compile is not None:
            tie = " (a tie)" if row.standing.get("compile") == "tie" else ""
            bits.append(f"{row.speedup_vs_compile:.2f}× compile{tie}")
        for label, ratio in row.speedup_vs_baselines.items():
            bits.append(f"{ratio:.2f}× {label}")
        if row.pct_of_roofline is not None:
            bits.append(f"{row.pct_of_roofline:.0f}% roofline")
        parts.append(f"{row.case}: " + ", ".join(bits))
    return "; ".join(parts)


def draw(result: BenchResult, path: str) -> str:
    """Time and achieved bandwidth per size and provider (like Triton's perf_report)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError("--plot needs matplotlib: pip install 'pytorch-to-triton[plot]'") from exc
    labels = [r.case for r in result.rows]
    order = ["candidate", "eager", "compile"]
    providers = sorted(
        {t.provider for r in result.rows for t in r.timings if not t.error},
        key=lambda p: order.index(p) if p in order else len(order),
    )
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for provider in providers:
        times, gbps = [], []
        for r in result.rows:
            t = next((t for t in r.timings if t.provider == provider and not t.error), None)
            ms = honest_ms(t) if t else math.nan
            times.append(ms)
            gbps.append(r.bytes / ms / 1e6 if t and ms > 0 else math.nan)
        axes[0].plot(labels, times, marker="o", label=provider)
        axes[1].plot(labels, gbps, marker="o", label=provider)
    axes[0].set_ylabel("median time (ms)")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("achieved GB/s")
    if result.peaks:
        axes[1].axhline(result.peaks.copy_gbps, linestyle="--", color="grey", label="copy bandwidth")
    for ax in axes:
        ax.set_xlabel("case")
        ax.tick_params(axis="x", rotation=30)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(f"{Path(result.candidate.split(':')[0]).name} on {result.device}")
    fig.tight_layout()
    out = output_path(path, "--plot")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return str(out)


def result_from_json(text: str) -> BenchResult:
    return BenchResult.model_validate(json.loads(text))
