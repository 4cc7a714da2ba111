"""Typed results of the full audit: one section per source of evidence, five report categories, findings.

Sections: ``static`` (the AST rules), ``compiled`` (the kernels that ran, compiled for a GPU target and read),
``correctness`` (the validation suite: base cases, value transforms, size variations, determinism) and
``performance`` (bench: the candidate against eager and torch.compile, % of the device's peak). Every
finding, whatever its source, is an :class:`AuditFinding` with a rule id, a place and a fix.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mcp_server.engine.audit.static_models import AuditFinding, Category
from mcp_server.engine.models import Location, Occupancy, Severity

Section = Literal["static", "compiled", "correctness", "performance"]
SECTIONS: tuple[Section, ...] = ("static", "compiled", "correctness", "performance")
SectionStatus = Literal["passed", "warnings", "failed", "skipped", "not requested"]
# "special": every value passes, but NaN/Inf sit elsewhere than PyTorch's at injected NaN/Inf inputs.
Tier = Literal["strict", "loose", "special", "fail", "not run"]
CategoryStatus = Literal["pass", "warn", "fail", "not checked"]

# The report's five categories, in the order the report lists them, and the static rule category each
# one collects.
CATEGORY_TITLES: dict[Category, str] = {
    "correctness": "Correctness",
    "performance": "Performance",
    "memory": "Memory access",
    "numerics": "Numerical stability",
    "practice": "Best practices",
}


class StaticSection(BaseModel):
    status: SectionStatus
    kernels: list[str] = Field(default_factory=list)
    launchers: list[str] = Field(default_factory=list)
    rules_run: int = 0
    notes: list[str] = Field(default_factory=list)


class CompiledKernel(BaseModel):
    """One compiled variant of a kernel that the launcher ran: what it costs on the target GPU."""

    kernel: str
    where: Location
    variant: str = Field(description="constexprs and launch options, e.g. 'BLOCK_N=256, ROWS=16 · 4 warps'")
    source: str = Field(description="launched | autotune choice | autotune candidate")
    config_index: int | None = Field(None, description="index into the kernel's autotune configs")
    n_configs: int = 0
    launches: int = Field(0, description="launches with this specialisation while the launcher ran")
    cases: list[str] = Field(default_factory=list, description="input cases that launched it")
    signature: str = Field(description="as given to compile: 'x_ptr=*fp32:16, n=i32:16' (:16 = divisible by 16)")
    constexprs: dict[str, object] = Field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3
    ok: bool = True
    error: str | None = None
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    shared_bytes: int = 0
    occupancy: Occupancy | None = None
    instructions: dict[str, int] = Field(default_factory=dict)
    dots: int = Field(0, description="tl.dot operations in the kernel's TTIR")
    tensor_cores: str = Field("-", description="wgmma | mma.sync | tcgen05 | none | - (no tl.dot)")
    command: str = Field(description="the ptt compile command that reproduces this row")


class CompiledSection(BaseModel):
    status: SectionStatus
    target: str | None = None
    kernels: list[CompiledKernel] = Field(default_factory=list)
    not_compiled: list[str] = Field(default_factory=list, description="kernels that ran but were not compiled, and why")
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class SuiteRun(BaseModel):
    """One run of the correctness suite: the base cases, one value transform, or the derived sizes."""

    name: str
    transform: str | None = None
    inputs: str = Field(description="what the inputs were")
    tier: Tier
    cases_passed: int = 0
    cases_judged: int = 0
    cases_passed_loose: int | None = Field(None, description="cases passing at the loose tolerance, when retried")
    max_abs_err: float | None = None
    max_rel_norm_err: float | None = None
    kinds: list[str] = Field(default_factory=list, description="finding kinds that failed it")
    reason: str | None = Field(None, description="why it did not run, or the first failure")
    seconds: float = 0.0


class CorrectnessSection(BaseModel):
    status: SectionStatus
    reference: str | None = None
    candidate: str | None = None
    runs: list[SuiteRun] = Field(default_factory=list)
    determinism: str = Field("not checked", description="bitwise | within tolerance | differs | not checked")
    backward_checked: bool = False
    allow_torch_ops: list[str] = Field(
        default_factory=list, description="torch ops the candidate may run (e.g. cuBLAS GEMMs kept as torch.mm)"
    )
    tolerances: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="the strict (default) (atol, rtol) per dtype"
    )
    loose_factor: float = 10.0
    reason: str | None = None
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class PerfRow(BaseModel):
    size: str
    triton_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    standing_vs_compile: str | None = Field(
        None, description="faster, slower or tie over bench's paired timing rounds (bench.standing)"
    )
    pct_of_peak: float | None = None
    bound: str | None = None
    spread: float | None = None
    bandwidth_gbps: float | None = None
    tflops: float | None = None


class PerformanceSection(BaseModel):
    status: SectionStatus
    rows: list[PerfRow] = Field(default_factory=list)
    peaks: str | None = None
    reason: str | None = None
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class CategorySummary(BaseModel):
    category: Category
    title: str
    status: CategoryStatus
    errors: int = 0
    warnings: int = 0
    info: int = 0
    note: str | None = Field(None, description="why the category is not fully checked")


class AuditReport(BaseModel):
    """The audit of one file: ``ok`` is true when no finding has error severity."""

    ok: bool
    complete: bool = Field(description="every requested section ran to the end")
    device: str
    file: str
    candidate: str | None = None
    reference: str | None = None
    target: str | None = None
    sections: list[Section]
    static: StaticSection
    compiled: CompiledSection
    correctness: CorrectnessSection
    performance: PerformanceSection
    categories: list[CategorySummary]
    findings: list[AuditFinding] = Field(default_factory=list, description="errors first, then warnings, then info")
    recommendations: list[str] = Field(default_factory=list)
    reproduce: list[str] = Field(default_factory=list, description="ptt commands that reproduce each section")
    notes: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    date: str = ""
    seconds: float = 0.0
    summary: str = ""
    markdown: str | None = Field(None, description="the report as Markdown (filled in by the MCP tool)")

    @property
    def errors(self) -> list[AuditFinding]:
        return [f for f in self.findings if f.severity is Severity.error]
