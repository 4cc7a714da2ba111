"""Pydantic models shared by the engine and both adapters (CLI, MCP server).

Every tool result has ``ok``, ``device`` ("NVIDIA H200", or "cpu-interpreter" when kernels ran under the
Triton interpreter) and ``findings``. A finding's ``kind`` comes from :class:`FindingKind`, the one
documented enum of everything that can be wrong with a candidate.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

INTERPRETER_DEVICE = "cpu-interpreter"
# ``ValidateResult.reference_precision`` where float64 could not be the truth: the cause, and what PyTorch's own
# error was estimated from. A cause that opens with FLOAT64_DIFFERS means the float64 run did run, and its result
# is far from the run in the reference's own dtype (which agrees with a second run of itself).
NATIVE_PRECISION = "native (not float64: {cause}); PyTorch's own error estimated from {how}"
FLOAT64_DIFFERS = "its float64 run differs from its run in its own dtype"


def interpreter_caveats() -> list[str]:
    """What a run under the Triton interpreter cannot show about the same kernel on a GPU."""
    tf32 = (
        "TF32: fp32 tl.dot is NOT rounded to TF32 here (PTT_INTERPRET_TF32=0); on the GPU the default "
        "input_precision='tf32' keeps 10 mantissa bits and usually fails an fp32 tolerance"
        if os.environ.get("PTT_INTERPRET_TF32", "1") == "0"
        else "TF32: fp32 tl.dot with input_precision 'tf32' (the default) and 'tf32x3' is emulated as an H100 "
        "computes it; 'bf16x3'/'bf16x6' dots run in full fp32"
    )
    return [
        tf32,
        "races between programs: programs run one after another; a plain load or store of an element another "
        "program of the launch stored (or a store over one it read) is a program_race unless a releasing atomic "
        "after the first access and an acquiring one before the second order them; the interleavings a GPU "
        "would produce, and whether those two atomics share an address, cannot show",
        "memory ordering: every load and store is immediately visible; atomics' sem/scope, barriers and "
        "cross-program synchronisation are not exercised",
        "GPU arithmetic: approximate exp/log/div/sqrt, fused multiply-adds and the order of sums inside "
        "tl.dot and reductions differ from numpy's in the last bits",
        "fp8: casts to and from float8_e4m3fn / float8_e5m2 give an H100's bits and tl.dot of fp8 operands "
        "accumulates as an H100's does by default (a model matching its largest error to four digits, not "
        "proven bit for bit); with max_num_imprecise_acc between 1 and K the dot sums in fp32 here, where an "
        "H100 keeps an error of about 4e-5 of the result's scale; other fp8 formats are not emulated",
        "host reads: tensor data handed to Python during a call is counted through torch.Tensor's .tolist(), "
        ".numpy(), __dlpack__ and DLPack exports, item access (.item(), a storage's items), torch.save, pickle and "
        "TorchScript's serializers, a storage's shared-memory file, and apply_/map_/map2_, wherever the method is "
        "defined (the C tensor and storage types too), data written into (or given to a kernel in) a tensor over "
        "memory a Python object holds (torch.from_numpy, frombuffer, as_tensor, from_dlpack, from_file), the "
        "values a kernel's tl.device_print prints, and raw "
        "memory reached through ctypes' cast, string_at, "
        "memmove or a ctypes type's from_address, or the interpreter's own loads and stores; a read around them "
        "(other ctypes routes, a counting wrapper's own state) is found only by the source scan, and the job's own "
        "memory file is hidden only where the sandbox has a private /proc, where a GPU's CUDA trace sees every "
        "device→host copy",
        "GPU compilation: each launched kernel, with the arguments it was launched with, goes through the GPU "
        "compiler's front end here (code the interpreter runs as Python and no GPU compiles is a compile_error); "
        "its later stages do not run, so shared memory, registers, spills and occupancy are not checked "
        "(`ptt compile` covers every config for a target)",
        "performance: interpreter timings say nothing about the GPU (bench needs one)",
    ]


class Severity(str, Enum):
    error = "error"  # the verdict fails
    warning = "warning"  # passes, but a person should look
    info = "info"  # worth knowing


class FindingKind(str, Enum):
    """What can be wrong with a candidate. Documented once, here; the README's table is generated from it."""

    mismatch = "mismatch"  # values outside tolerance vs the float64 reference
    nan_mismatch = "nan_mismatch"  # NaN/Inf positions differ from the reference's
    shape_mismatch = "shape_mismatch"  # output shape (or number of outputs) differs
    dtype_mismatch = "dtype_mismatch"  # output dtype differs
    device_mismatch = "device_mismatch"  # output on another device than the reference's
    input_mutated = "input_mutated"  # an input changed in a way the reference does not change it
    output_aliases_input = "output_aliases_input"  # an output shares storage with an input
    outputs_overlap = "outputs_overlap"  # two outputs share elements' memory where the reference's do not
    buffer_mismatch = "buffer_mismatch"  # a module buffer the reference's forward updates is not updated alike
    no_triton_launch = "no_triton_launch"  # no @triton.jit kernel of the candidate was launched
    torch_compute = "torch_compute"  # torch compute ops did (part of) the kernel's work
    nondeterministic = "nondeterministic"  # a second identical call disagreed
    uninitialized_output = "uninitialized_output"  # output elements were never written (poison survived)
    stale_cache = "stale_cache"  # the candidate returned a previous call's result for new inputs
    stream_race = "stream_race"  # outputs read on the caller's stream before a sync were not yet written
    program_race = "program_race"  # (interpreter) one program reads or overwrites what another stored, unordered
    reference_precision = "reference_precision"  # the reference could not run in float64 (warning)
    unsupported_shape = "unsupported_shape"  # the candidate refused a derived shape with a clean exception
    loose_tolerance = "loose_tolerance"  # values compared at a tolerance looser than their dtype's default
    backward_mismatch = "backward_mismatch"  # gradients differ from autograd's on the reference
    timeout = "timeout"
    out_of_bounds = "out_of_bounds"  # a load/store/atomic outside every tensor argument (interpreter check)
    crash = "crash"  # signal, os._exit, sticky CUDA error (illegal address, device assert)
    oom = "oom"
    exception = "exception"  # a Python exception raised by the candidate
    compile_error = "compile_error"  # Triton could not compile the kernel
    load_error = "load_error"  # the user's file could not be imported
    # trust: evidence the candidate's own Python cannot switch off (engine.trust, runner.sandbox)
    evasion = "evasion"  # source switches off or tampers with what the judge records (dispatch, tracing, ctypes)
    process_escape = "process_escape"  # source starts or signals processes
    reads_reference = "reads_reference"  # source reaches the reference's module or the runner's job files
    host_compute = "host_compute"  # tensor data computed on the host in numpy during the call
    copy_only_kernel = "copy_only_kernel"  # every launched kernel only loads and stores; the reference computes
    # Input/output-sized data copied device→host during a call (CUDA trace), or handed to Python (the interpreter).
    host_round_trip = "host_round_trip"
    # bench: what the timings say
    slower_than_eager = "slower_than_eager"  # the candidate loses to the reference in eager mode
    slower_than_compile = "slower_than_compile"  # … or to the reference under torch.compile
    low_efficiency = "low_efficiency"  # under 50 % of the bound that applies (bandwidth or compute)
    high_spread = "high_spread"  # (p80 − p20) / median over 10 %: the number is not stable
    suspicious_speedup = "suspicious_speedup"  # over 10× faster, or above the roofline: verify the work is done
    flat_scaling = "flat_scaling"  # time does not grow with the problem size
    timer_disagreement = "timer_disagreement"  # host wall clock ≫ CUDA events: work on other streams
    launch_bound = "launch_bound"  # launching a call takes the host longer than the GPU takes to run it
    failed_validation = "failed_validation"  # bench refused: the candidate is not correct
    timed_output_mismatch = "timed_output_mismatch"  # a timed call's result is not the reference's: not timed


class Location(BaseModel):
    """A place in the user's code."""

    file: str
    line: int | None = None
    column: int | None = None
    source_line: str | None = None

    def __str__(self) -> str:
        out = self.file
        if self.line is not None:
            out += f":{self.line}"
            if self.column is not None:
                out += f":{self.column}"
        return out


class Finding(BaseModel):
    kind: FindingKind
    severity: Severity
    message: str
    where: Location | None = None
    # The case/seed it was seen on, when it concerns one run.
    case: str | None = None
    seed: int | None = None


class BoundedText(BaseModel):
    """Text cut to a size an agent can read; the full text, when kept, is in ``path``."""

    model_config = ConfigDict(frozen=True)

    text: str
    truncated: bool = False
    total_chars: int = 0
    path: str | None = None

    @classmethod
    def of(cls, text: str, limit: int = 4000, path: str | None = None) -> BoundedText:
        if len(text) <= limit:
            return cls(text=text, truncated=False, total_chars=len(text), path=path)
        head = text[: limit // 2]
        tail = text[-limit // 2 :]
        cut = len(text) - len(head) - len(tail)
        return cls(
            text=f"{head}\n… [{cut} characters truncated] …\n{tail}",
            truncated=True,
            total_chars=len(text),
            path=path,
        )


class Failure(BaseModel):
    """How a job in an isolated child ended when it did not end well."""

    kind: FindingKind
    message: str
    where: Location | None = None
    stderr_tail: str = ""
    exit_code: int | None = None
    signal: int | None = None
    # An exception the job caught and classified (its message names it), not a process that died or was stopped.
    raised: bool = False

    def detail(self) -> str:
        """The message, and the process's last lines of output where they are the only evidence (a crash, a
        timeout, a kill for memory); an exception (out of memory or an illegal address raised in Python, too) is
        named by its message and the user's line, and the child's traceback would add only the judge's own frames."""
        if (
            self.stderr_tail
            and not self.raised
            and self.kind in (FindingKind.crash, FindingKind.timeout, FindingKind.oom)
        ):
            return f"{self.message}\nstderr (last lines):\n{self.stderr_tail}"
        return self.message


class ToolResult(BaseModel):
    ok: bool
    device: str
    findings: list[Finding] = Field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.error]


# --- validate ---------------------------------------------------------------------------------------


class BadElement(BaseModel):
    index: list[int]
    got: float | str = Field(description="a number, or 'nan' / 'inf' / '-inf'")
    expected: float | str

    @field_validator("got", "expected", mode="before")
    @classmethod
    def _non_finite_as_text(cls, value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return value


class ComparisonRow(BaseModel):
    """One output (or gradient) of one case and seed, compared with the float64 reference."""

    case: str
    seed: int
    output: str
    shape: list[int]
    dtype: str
    ok: bool
    numel: int
    mismatches: int = 0
    nan_mismatches: int = Field(
        0, description="elements that are NaN or Inf where the reference's are not, or the reverse"
    )
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rel_norm_err: float = 0.0
    torch_rel_norm_err: float = Field(0.0, description="PyTorch's own error in this dtype, vs float64")
    atol: float | None = None
    rtol: float | None = None
    first_bad: list[BadElement] = Field(default_factory=list)


class CaseReport(BaseModel):
    case: str
    seed: int
    derived: str | None = Field(None, description="why this shape was derived from get_inputs()")
    status: str = Field(description="passed | failed | refused | not run | rejected by the reference")
    reason: str | None = None
    seconds: float | None = None


class OpUse(BaseModel):
    op: str
    calls: int
    work: float = Field(description="elements touched, or FLOPs for matrix products")


class PrecisionCause(BaseModel):
    """Why float64 could not be the truth for the reference (``ValidateResult.reference_precision``'s parts)."""

    float64_ran: bool = Field(
        description="true: the float64 run ran and is far from the run in the reference's own dtype; false: it "
        "could not run (raised, or kept a lower dtype)"
    )
    cause: str
    estimate: str = Field(description="what PyTorch's own error was estimated from")
    output: int | None = Field(None, description="the output the float64 run is far on (float64_ran)")
    rel_norm: float | None = Field(None, description="how far, in relative norm (float64_ran)")


class ValidateResult(ToolResult):
    reference: str
    candidate: str
    mode: str = Field(description="callable | kernelbench")
    seeds: list[int]
    cases: list[CaseReport]
    rows: list[ComparisonRow]
    kernels_launched: list[str] = Field(default_factory=list)
    torch_ops: list[OpUse] = Field(default_factory=list)
    torch_share: float = Field(
        0.0,
        description="the largest share of the reference's own torch work the candidate's counted torch ops did in "
        "one call (bench allows its timed calls this much plus a margin)",
    )
    reference_precision: str = "float64"
    reference_precision_cause: PrecisionCause | None = None
    weights: str | None = Field(None, description="KernelBench: how the candidate's weights were set")
    backward_checked: bool = False
    interpreter: bool = False
    seconds: float = 0.0
    summary: str = ""
    notes: list[str] = Field(default_factory=list, description="e.g. which autotune config the interpreter ran")
    interpreter_caveats: list[str] = Field(
        default_factory=list, description="under the interpreter: what this run cannot show about the GPU"
    )

    @model_validator(mode="after")
    def _list_interpreter_caveats(self) -> ValidateResult:
        if (self.interpreter or self.device == INTERPRETER_DEVICE) and not self.interpreter_caveats:
            self.interpreter_caveats = interpreter_caveats()
        return self


# --- compile ----------------------------------------------------------------------------------------


class Occupancy(BaseModel):
    """How many programs (CTAs) of this kernel fit on one SM of the target, and what limits it."""

    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    fraction: float = Field(description="active warps / the SM's maximum")
    limiter: str = Field(description="registers | shared memory | warps | blocks")


class CompiledConfig(BaseModel):
    config_index: int | None = Field(None, description="index into the autotune configs; None if not autotuned")
    config: dict[str, object] = Field(default_factory=dict)
    constexprs: dict[str, object] = Field(default_factory=dict)
    signature: dict[str, str] = Field(default_factory=dict)
    num_warps: int
    num_stages: int
    ok: bool
    compile_s: float
    registers: int | None = Field(None, description="registers per thread (ptxas)")
    spill_stores: int | None = Field(None, description="bytes")
    spill_loads: int | None = Field(None, description="bytes")
    stack_bytes: int | None = None
    shared_bytes: int = 0
    occupancy: Occupancy | None = None
    instructions: dict[str, int] = Field(
        default_factory=dict,
        description="counts over the full PTX: ld.global.v4 (128-bit loads), wgmma (tensor cores), local "
        "(spills/local arrays), fp64, atom, tma …; and over the SASS (HGMMA, LDL/STL …) when sass is asked for",
    )
    ir: dict[str, BoundedText] = Field(default_factory=dict)
    ir_files: dict[str, str] = Field(default_factory=dict)
    failure: Failure | None = None


class CompileResult(ToolResult):
    kernel: str
    target: str
    autotuned: bool
    configs: list[CompiledConfig]
    seconds: float
    note: str = ""


# --- bench ------------------------------------------------------------------------------------------


class DevicePeaks(BaseModel):
    """Ceilings measured once per device (and cached on disk): what 100 % means in bench results."""

    device: str
    copy_gbps: float = Field(description="device-to-device copy, bytes read + written per second / 1e9")
    matmul_tflops: dict[str, float] = Field(description="dense matmul rate per dtype (8192³ through torch)")
    measured_at: str
    torch: str


class ProviderTiming(BaseModel):
    provider: str = Field(description="candidate | eager | compile | reference kernels' stage name")
    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    spread: float = Field(description="(p80 − p20) / median")
    host_launch_ms: float | None = Field(None, description="host time to launch one call (Python + driver)")
    outside_stream_ms: float | None = Field(
        None,
        description="per call, how long the device stays busy after the CUDA end event completes (work on other "
        "streams); ~0 normally",
    )
    samples: int
    round_ms: list[float] = Field(
        default_factory=list,
        description="the median of each timing round; every provider is timed in every round, in rotating order",
    )
    compile_s: float | None = Field(None, description="first call (compilation, autotuning), excluded from timing")
    checked_calls: int | None = Field(
        None, description="timed calls whose outputs were checked against the reference (random picks)"
    )
    check_margin: float | None = Field(
        None,
        description="the checked outputs' largest relative-norm distance from the reference, as a fraction of the "
        "limit (over 1 fails)",
    )
    torch_share: float | None = Field(
        None,
        description="candidates: the largest share of the reference's own torch work a timed call ran in torch "
        "compute ops (every timed call is recorded)",
    )
    error: str | None = None


@dataclass(frozen=True)
class ExtraCandidate:
    """Another implementation timed beside the candidate and checked like it (a stage-1 attempt), held to rules of its
    own: ``spec`` is its ``path.py:function``; its timed calls may differ from the reference by the errors
    ``validation`` measured and run the torch work it saw (with none, no error scale and validate's error level of
    torch work), beside ``allow_torch_ops``. A plain spec in ``extra_candidates`` shares the candidate's rules. Either
    way its code runs under a PyTorch and Triton state of its own, which the candidate's changes do not reach
    (jobs.shared_state)."""

    spec: str
    validation: ValidateResult | None = None
    allow_torch_ops: tuple[str, ...] = ()


class BenchRow(BaseModel):
    case: str
    timings: list[ProviderTiming]
    bytes: int
    flops: int
    model: str = Field(description="where bytes/flops came from: user model | SPEC | default estimate")
    bandwidth_gbps: float | None = None
    tflops: float | None = None
    pct_of_bandwidth: float | None = None
    pct_of_compute: float | None = None
    bound: str | None = Field(None, description="memory | compute: which floor is higher")
    pct_of_roofline: float | None = Field(None, description="floor time / measured time")
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speedup_vs_baselines: dict[str, float] = Field(
        default_factory=dict, description="per extra baseline (label): its time / the candidate's time"
    )
    speedup_vs_extras: dict[str, float] = Field(
        default_factory=dict,
        description="per extra candidate timed alongside (label, e.g. stage1): its time / the candidate's, each with "
        "its work on other streams counted",
    )
    round_ratios: dict[str, list[float]] = Field(
        default_factory=dict,
        description="per peer (eager, compile, a baseline's or extra candidate's label): its time / the candidate's "
        "in each timing round, the two medians of the same round paired",
    )
    standing: dict[str, str] = Field(
        default_factory=dict,
        description="per peer: faster or slower when the candidate won or lost in every round, tie when the rounds "
        "disagree (the median ratio alone could land on either side of 1.0 on a rerun)",
    )

    def round_range(self, peer: str) -> str:
        """'0.981–1.012× over 5 rounds' for a peer with paired rounds, else ''."""
        ratios = self.round_ratios.get(peer)
        if not ratios:
            return ""
        return f"{min(ratios):.3f}–{max(ratios):.3f}× over {len(ratios)} rounds"


class BenchResult(ToolResult):
    candidate: str
    reference: str | None
    mode: str = Field(description="events | cuda-graph")
    backward: bool = Field(False, description="timings are forward + backward")
    l2_flush: bool
    input_sets: int = Field(description="inputs rotated among this many sets")
    reps: int
    peaks: DevicePeaks | None = None
    validation: str | None = Field(None, description="summary of the validation run before timing")
    baselines: dict[str, str] = Field(
        default_factory=dict, description="extra baselines timed alongside: label → path.py:function"
    )
    rows: list[BenchRow]
    plot: str | None = Field(None, description="path of the PNG plot, when asked for")
    notes: list[str] = Field(default_factory=list, description="what this run could not check, and why")
    seconds: float = 0.0
    queued_s: float = Field(0.0, description="time spent waiting for the GPU lock")
    summary: str = ""
