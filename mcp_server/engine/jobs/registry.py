"""Every job a child can run: its name, entry point, and the typed parameters and result it exchanges.

The parent (``runner.Runner.run``) checks parameters against the job's model before the child starts and
the child's result against the result model when it comes back; a malformed result is a crash of the
job, never data the engine trusts. Import this module, not the job modules (they import torch):

    from mcp_server.engine.jobs import registry
    runner.run(registry.VALIDATE_CANDIDATE.name, params)

Parameter models accept fields they do not declare (a caller may pass more than a job reads); declared
fields are type-checked. Result models declare what the engine reads and keep the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class _Params(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Result(BaseModel):
    model_config = ConfigDict(extra="allow")


class CallableRef(BaseModel):
    """``path.py:name`` as the child receives it."""

    model_config = ConfigDict(extra="forbid")
    path: str
    name: str


# --- parameters ---------------------------------------------------------------------------------------


class ProbeParams(_Params):
    pass


class ValidateReferenceParams(_Params):
    reference: CallableRef
    inputs: str | None = None
    inputs_from: str | None = None
    seeds: list[int]
    build_seed: int = 0  # a KernelBench model's construction seed (validate._model_seeds)
    weights_seed: int = 0  # the seed that moves its weights off their initial values
    derive: bool = True
    max_derived: int = 6
    backward: bool = False
    device: str | None = None
    transform: str | None = None


class ValidateCandidateParams(_Params):
    candidate: CallableRef
    cases_file: str
    kernelbench: bool = False
    build_seed: int = 0
    weights_seed: int = 0
    backward: bool = False
    determinism: bool = True
    device: str | None = None
    trace: bool = False  # record the CUDA kernels each call ran (jobs.trace)


class CompileParams(_Params):
    kernel: CallableRef
    signature: Any = None
    args: Any = None
    constexprs: dict[str, Any] = {}
    target: str | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    config: Any = None
    ir: list[str] = []


class FrontendParams(_Params):
    kernels: list[dict[str, Any]]


class BenchParams(_Params):
    candidate: CallableRef
    reference: CallableRef | None = None
    mode: str | None = None
    reps: int | None = None
    backward: bool = False


class BenchPeaksParams(_Params):
    pass


class AuditParams(_Params):
    file: str
    reference: CallableRef | None = None
    backward: bool = False
    device: str | None = None


# --- results ------------------------------------------------------------------------------------------


class ProbeResult(_Result):
    torch: str
    triton: str
    python: str
    cuda_available: bool
    interpreter: bool
    caches_writable: dict[str, bool] = {}


class ValidateReferenceResult(_Result):
    cases: list[dict[str, Any]]
    kernelbench: bool
    precision: str
    tolerances: dict[str, Any] | None = None
    device: str
    derivable: bool


class ValidateCandidateResult(_Result):
    cases: list[dict[str, Any]]
    weights: str
    device: str
    autotune_notes: list[str] = []
    trace: dict[str, Any] | None = None
    launch_specs: dict[str, Any] | None = None


class FrontendResult(_Result):
    kernels: list[dict[str, Any]]


class AnyResult(_Result):
    pass


# --- the registry -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSpec:
    name: str
    entry: str  # "module:function" run in the child
    params: type[BaseModel]
    result: type[BaseModel]

    def check_params(self, params: dict[str, Any] | BaseModel) -> dict[str, Any]:
        """The parameters as JSON-ready data; raises ValueError naming the bad field."""
        try:
            model = params if isinstance(params, self.params) else self.params.model_validate(params)
        except ValidationError as exc:
            raise ValueError(f"bad parameters for job {self.name}: {exc}") from None
        return model.model_dump(mode="json", exclude_unset=True)

    def check_result(self, result: dict[str, Any]) -> dict[str, Any]:
        try:
            self.result.model_validate(result)
        except ValidationError as exc:
            raise ValueError(str(exc)) from None
        return result


_PKG = "mcp_server.engine.jobs"
PROBE = JobSpec("probe", f"{_PKG}.probe:run", ProbeParams, ProbeResult)
VALIDATE_REFERENCE = JobSpec(
    "validate.reference", f"{_PKG}.validate_jobs:reference", ValidateReferenceParams, ValidateReferenceResult
)
VALIDATE_CANDIDATE = JobSpec(
    "validate.candidate", f"{_PKG}.validate_jobs:candidate", ValidateCandidateParams, ValidateCandidateResult
)
COMPILE = JobSpec("compile", f"{_PKG}.compile_job:run", CompileParams, AnyResult)
FRONTEND = JobSpec("compile.frontend", f"{_PKG}.frontend_job:run", FrontendParams, FrontendResult)
BENCH = JobSpec("bench", f"{_PKG}.bench_job:run", BenchParams, AnyResult)
BENCH_PEAKS = JobSpec("bench.peaks", f"{_PKG}.bench_job:peaks", BenchPeaksParams, AnyResult)
AUDIT = JobSpec("audit", f"{_PKG}.audit_job:run", AuditParams, AnyResult)

JOBS: dict[str, JobSpec] = {
    spec.name: spec
    for spec in (PROBE, VALIDATE_REFERENCE, VALIDATE_CANDIDATE, COMPILE, FRONTEND, BENCH, BENCH_PEAKS, AUDIT)
}
_BY_ENTRY = {spec.entry: spec for spec in JOBS.values()}


def lookup(name_or_entry: str) -> JobSpec | None:
    """The job registered under a name (``"validate.candidate"``) or an entry (``"module:function"``)."""
    return JOBS.get(name_or_entry) or _BY_ENTRY.get(name_or_entry)
