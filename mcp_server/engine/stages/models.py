"""Typed results of the stage ledger: gate checks and verdicts, attempts, conversions, the ledger's status.

They live here, beside the ledger, until they settle; both adapters return them as they are.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mcp_server.engine.models import BenchResult, ToolResult, ValidateResult

CheckState = Literal["met", "unmet", "pending"]
VerdictState = Literal["passed", "failed", "pending"]


class AutotuneInfo(BaseModel):
    """What a static read of the candidate file says about autotuning (nothing is imported or run)."""

    kernels: list[str] = Field(default_factory=list, description="@triton.jit functions in the candidate file")
    launched: list[str] = Field(default_factory=list, description="kernels launched as kernel[grid](...) in it")
    autotuned: list[str] = Field(default_factory=list, description="kernels carrying @triton.autotune")
    missing: list[str] = Field(default_factory=list, description="kernels that need @triton.autotune and lack it")
    exempt: dict[str, str] = Field(
        default_factory=dict, description="launched kernels with nothing to tune, and why (see the stage-2 rule)"
    )
    note: str = ""

    @property
    def ok(self) -> bool:
        return (bool(self.autotuned) or bool(self.exempt)) and not self.missing


class AuditSummary(BaseModel):
    """The audit's verdict as the stage-3 gate reads it: the error findings, one line each."""

    device: str | None = None
    errors: list[str] = Field(default_factory=list, description="one line per error-severity finding")
    warnings: int = 0
    findings: int = 0
    report: dict[str, Any] | None = Field(None, description="the audit's own result, as JSON")


class GateEvidence(BaseModel):
    """Everything a gate looks at. Built by ``submit`` from tool results; tests build it by hand."""

    validation: ValidateResult | None = None
    autotune: AutotuneInfo | None = None
    no_autotune_reason: str | None = None
    bench: BenchResult | None = None
    bench_unavailable: str | None = Field(None, description="why the candidate could not be timed here")
    bench_error: str | None = Field(None, description="the bench refused the candidate (its message)")
    baseline_attempt: int | None = Field(None, description="the stage-1 attempt the gain is measured against")
    baseline_bench: BenchResult | None = None
    baseline_unavailable: str | None = Field(None, description="why the stage-1 baseline has no timing")
    audit: AuditSummary | None = None
    audit_unavailable: str | None = Field(None, description="why there is no audit (never counts as passed)")
    same_code_benches: dict[int, BenchResult] = Field(
        default_factory=dict,
        description="earlier benches of the same code (the same syntax tree and function) on the same device, by "
        "attempt number: the comparison with torch.compile pools their timing rounds with this bench's",
    )
    same_code_stage1: dict[int, int] = Field(
        default_factory=dict,
        description="of those attempts, the stage-1 attempt each timed beside it, by attempt number: the gain over "
        "stage 1 pools the rounds of those that timed the same stage-1 attempt as this one",
    )


class GateCheck(BaseModel):
    name: str = Field(description="validation | autotune | gain_over_stage1 | vs_torch_compile | audit")
    state: CheckState
    detail: str


class GateVerdict(BaseModel):
    stage: int
    state: VerdictState = Field(
        description="passed: every check met; failed: one is unmet; pending: none unmet, "
        "but one cannot be measured here (no GPU, no audit)"
    )
    checks: list[GateCheck]
    reasons: list[str] = Field(default_factory=list, description="one line per check that is not met")

    @property
    def passed(self) -> bool:
        return self.state == "passed"


class CaseSpeed(BaseModel):
    """One benchmark size of one attempt."""

    case: str
    median_ms: float | None = None
    baseline_ms: float | None = Field(None, description="the stage-1 baseline's median, same run")
    speedup_vs_stage1: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    pct_of_roofline: float | None = None


class AttemptSummary(BaseModel):
    """One recorded attempt, without its source text (``best`` returns that)."""

    number: int = Field(description="attempt number within the conversion, from 1")
    stage: int
    candidate: str
    sha256: str
    source_chars: int
    no_autotune_reason: str | None = None
    allow_torch_ops: list[str] = Field(
        default_factory=list, description="torch ops the attempt was allowed to use for real work"
    )
    device: str
    verdict: GateVerdict
    validation: str = Field("", description="the validation's one-line summary")
    speedup_vs_eager: float | None = Field(None, description="geometric mean over the benchmark sizes")
    speedup_vs_compile: float | None = Field(None, description="geometric mean over the benchmark sizes")
    speedup_vs_stage1: float | None = Field(None, description="geometric mean over the benchmark sizes")
    pct_of_roofline: float | None = Field(None, description="mean over the benchmark sizes")
    speeds: list[CaseSpeed] = Field(default_factory=list)
    timing: str | None = Field(None, description="own bench | timed as a stage-1 baseline | None: never timed")
    baseline_attempt: int | None = None
    audit_errors: int | None = None
    submitted_at: str
    finished_at: str
    evidence: GateEvidence | None = Field(None, description="the full tool results, when asked for")


class NextGate(BaseModel):
    stage: int
    state: Literal["not attempted", "failed", "pending", "passed"]
    reasons: list[str] = Field(default_factory=list, description="from the latest attempt at this stage")


class ConversionStatus(BaseModel):
    name: str
    reference: str
    inputs: str | None = None
    notes: str = ""
    created_at: str
    stage_reached: int = Field(description="highest stage with a passing attempt (0: none yet)")
    attempts: int
    best_speedup_vs_eager: float | None = None
    best_speedup_vs_compile: float | None = None
    best_pct_of_roofline: float | None = None
    next_gate: NextGate
    next_step: str = Field(description="what to do next, in one or two sentences")


class LedgerStatus(BaseModel):
    ok: bool = True
    ledger: str
    exists: bool
    conversions: list[ConversionStatus] = Field(default_factory=list)
    plot: str | None = Field(None, description="PNG of speed per attempt, when asked for")


class ConversionDetail(BaseModel):
    ok: bool = True
    ledger: str
    conversion: ConversionStatus
    attempts: list[AttemptSummary]


class SubmitResult(ToolResult):
    """ok is true only when the gate passed. findings: the validation's and the bench's."""

    name: str
    attempt: int
    stage: int
    candidate: str
    sha256: str
    verdict: GateVerdict
    stage_reached: int
    validation: str = ""
    speeds: list[CaseSpeed] = Field(default_factory=list)
    autotune: AutotuneInfo | None = None
    audit: AuditSummary | None = None
    allow_torch_ops: list[str] = Field(
        default_factory=list, description="torch ops this attempt was allowed to use for real work"
    )
    next_step: str
    ledger: str


class BestAttempt(BaseModel):
    ok: bool = True
    ledger: str
    name: str
    stage: int
    attempt: int
    candidate: str = Field(description="where the file was when submitted (path:name)")
    sha256: str
    source: str = Field(description="the candidate file's content as submitted")
    file_unchanged: bool = Field(description="whether the file at that path still has this content")
    chosen_by: str = Field(description="why this attempt is the best of its stage")
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    submitted_at: str
