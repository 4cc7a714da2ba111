"""Typed records of a batch evaluation: what one pair needs, what it gave, and the report over all pairs."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, Field

# The thresholds of the report (KernelBench's fast_p), and the finer grid of the plot.
P_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0)
Baseline = Literal["eager", "compile"]
BASELINES: tuple[Baseline, ...] = ("eager", "compile")
BASELINE_LABEL = {"eager": "eager PyTorch", "compile": "torch.compile"}

PairStatus = Literal["passed", "failed", "missing", "error"]
TimingState = Literal["measured", "not measured", "not timed", "failed"]

FAST_P_DEFINITION = (
    "fast_p (against a baseline B) = (number of problems whose solution is correct AND whose speedup "
    "t_B / t_solution > p) / (number of problems). Every problem counts in the denominator: a missing, failing, "
    "crashing or untimed solution is not fast. t_B and t_solution are median GPU times of the same bench run "
    "(CUDA events, L2 flushed and inputs rotated between calls, eager and torch.compile timed interleaved with "
    "the solution); over several bench cases the times are summed. fast_0 is the correctness rate. A correct "
    "solution that could not be timed against B counts as not fast, so fast_p is then a lower bound (the "
    "report says how many). Without a GPU nothing is timed, and fast_p for p > 0 is not measurable. At p = 1 the "
    "report also counts the fast solutions whose bench rounds tie with B (some round had B faster): a rerun may "
    "count them slow."
)


class EvalSettings(BaseModel):
    """How each pair is judged; part of the resume key (changing a setting re-evaluates)."""

    seeds: int = Field(3, ge=1, description="fresh random input sets per validation")
    derive_shapes: bool = Field(True, description="also validate edge shapes derived from get_inputs()")
    reps: int = Field(100, ge=10, description="timed calls per provider in the bench")
    timeout_s: float = Field(300.0, gt=0, description="seconds each isolated child may run")
    bench: bool = Field(True, description="time correct solutions when a GPU is there")
    allow_torch_ops: tuple[str, ...] = Field(
        (), description="torch ops solutions may use for real work (e.g. 'mm' to keep cuBLAS GEMMs)"
    )

    def key(self, timings_possible: bool) -> str:
        data = self.model_dump(mode="json")
        data["timed"] = bool(timings_possible and self.bench)
        if not data["allow_torch_ops"]:
            del data["allow_torch_ops"]  # keys of databases written before the option existed stay valid
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class PairSpec(BaseModel):
    """One problem and its solution (None when the solutions folder has none)."""

    name: str = Field(description="the problem's path under PROBLEMS_DIR, without .py (e.g. level1/19_ReLU)")
    problem: str
    solution: str | None = None
    problem_sha: str
    solution_sha: str | None = None
    # Set when the pair is shipped to another machine (Ray): the files' text, written out there.
    problem_source: str | None = None
    solution_source: str | None = None

    @property
    def group(self) -> str:
        head, sep, _ = self.name.partition("/")
        return head if sep else ""


class PairResult(BaseModel):
    name: str
    status: PairStatus = Field(description="passed | failed (wrong, crashed, timed out) | missing | error")
    correct: bool
    summary: str = ""
    failure_kinds: list[str] = Field(default_factory=list, description="finding kinds of the failed validation")
    device: str = ""
    worker: str | None = Field(None, description="where it ran: cuda:N, cpu-interpreter, ray:…")
    timing: TimingState = "not timed"
    timing_note: str | None = None
    candidate_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = Field(None, description="eager_ms / candidate_ms")
    speedup_compile: float | None = Field(None, description="compile_ms / candidate_ms")
    standing_eager: str | None = Field(
        None,
        description="faster or slower when bench's paired timing rounds agree at every size, tie when they do not; "
        "None where rounds were not paired",
    )
    standing_compile: str | None = None
    bench_flags: list[str] = Field(default_factory=list, description="bench warnings (high_spread, …)")
    validate_s: float | None = None
    bench_s: float | None = None
    seconds: float = 0.0
    problem_sha: str = ""
    solution_sha: str | None = None
    settings_key: str = ""
    finished_at: str = ""

    def speedup(self, baseline: Baseline) -> float | None:
        return self.speedup_eager if baseline == "eager" else self.speedup_compile


class FastP(BaseModel):
    p: float
    eager: float | None = Field(None, description="fraction of all problems; None: not measurable here")
    compile: float | None = None
    eager_count: int | None = None
    compile_count: int | None = None
    eager_ties: int | None = Field(
        None, description="at p = 1: of the problems counted fast, those whose timing rounds tie with the baseline"
    )
    compile_ties: int | None = None


class GroupSummary(BaseModel):
    group: str = Field(description="top folder of the problems (e.g. level1); '' for the whole set")
    problems: int
    correct: int
    correctness_rate: float
    fast_p: list[FastP]
    unmeasured_eager: int = Field(0, description="correct but not timed against eager: counted as not fast")
    unmeasured_compile: int = 0


class ProblemRow(PairResult):
    fast_eager: list[bool | None] = Field(default_factory=list, description="per P_VALUES; None: not measurable")
    fast_compile: list[bool | None] = Field(default_factory=list)


class EvalReport(BaseModel):
    ok: bool = Field(description="every problem has a correct solution")
    device: str = Field(description="the device(s) the results came from")
    problems_dir: str
    solutions_dir: str
    db: str
    backend: str
    workers: list[str] = Field(default_factory=list)
    p_values: list[float] = Field(default_factory=lambda: list(P_VALUES))
    definition: str = FAST_P_DEFINITION
    timings_measured: bool
    overall: GroupSummary
    groups: list[GroupSummary] = Field(default_factory=list, description="per top folder, when there are several")
    problems: list[ProblemRow]
    evaluated_now: int = 0
    resumed: int = Field(0, description="results reused from the database")
    wall_s: float = 0.0
    plot: str | None = None
    notes: list[str] = Field(default_factory=list)
