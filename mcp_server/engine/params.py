"""One parameter set per tool, shared by both faces.

Each tool's parameters are declared here once: name, type, default, bounds and the description an agent (MCP)
and a user (``ptt --help``) read. The MCP face (:mod:`mcp_server.tools`) turns a set into a tool signature and
the CLI face (:mod:`mcp_server.cli`) into argparse options, so the two cannot take different parameters for the
same tool; ``tests/test_faces_parity.py`` checks both against this table.

A parameter lives on both faces unless ``faces`` says otherwise. Face-only parameters are presentation or
transport: source text instead of a file (MCP), ``--json`` and output files (CLI).

To add an option to a tool: add a :class:`Param` to its set below and pass it on in the tool's engine call in
``mcp_server/tools/<feature>.py`` and ``mcp_server/cli/<feature>.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_server.engine.audit import SECTIONS, SUITE
from mcp_server.engine.bench import BENCH_TIMEOUT_S, GPU_LOCK_WAIT_S
from mcp_server.engine.errors import UsageError

REQUIRED: Any = ...  # the default of a parameter that has none
BOTH = frozenset({"cli", "mcp"})
MCP_ONLY = frozenset({"mcp"})
CLI_ONLY = frozenset({"cli"})

IR_STAGE_NAMES = ("ttir", "ttgir", "llir", "ptx", "sass")


@dataclass(frozen=True)
class Param:
    """One parameter of a tool.

    ``flag``: the CLI spelling (default ``--name-with-dashes``; a bool that defaults to True becomes
    ``--no-name``; ``""`` makes it positional). ``cli``: extra argparse keywords where the command line spells
    the value differently (``metavar``, ``action='append'``, a ``default`` of its own). ``parse``: turns the
    command-line value into the engine's (e.g. ``"a,b"`` into a tuple). ``path``: how the value names a file
    (``"spec"``: ``path.py[:name]``; ``"inputs"``: a type list or ``path.py:fn``; ``"file"``: a plain path), so a
    server can confine it to the folders it serves (:mod:`mcp_server.http_serve`).
    """

    name: str
    type: Any
    default: Any = REQUIRED
    help: str = ""
    limits: dict[str, Any] = field(default_factory=dict)
    faces: frozenset[str] = BOTH
    flag: str | None = None
    cli: dict[str, Any] = field(default_factory=dict)
    parse: Any = None
    path: Literal["spec", "inputs", "file"] | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class ToolParams:
    """The parameters of one tool: its MCP name, its ``ptt`` command and the shared set."""

    tool: str | None
    command: tuple[str, ...] | None
    params: tuple[Param, ...]

    def on(self, face: str) -> tuple[Param, ...]:
        return tuple(p for p in self.params if face in p.faces)

    def names(self, face: str) -> set[str]:
        return {p.name for p in self.on(face)}


# --- shared pieces --------------------------------------------------------------------------------------------

SPEC_HELP = "A callable in a file, as path/to/file.py:name (relative to the working folder)."
INPUTS_HELP = (
    "Inputs: a type list such as 'bf16[4096,8192], f32[8192], i32=7', or path.py:function returning the "
    "argument list (or a dict of labelled cases). Default: the reference module's get_test_cases() or get_inputs()."
)
TARGET_HELP = "Compile target: cuda:80, cuda:90 or cuda:100; default the local GPU's, else cuda:90."


def spec(name: str, help: str = SPEC_HELP, *, positional: bool = True) -> Param:
    """A ``path.py:name`` argument: positional on the command line; on MCP optional, since source text may
    stand in for it (see :func:`source`)."""
    return Param(name, str | None, None, help, flag="" if positional else None, path="spec")


def source(role: str, help: str | None = None) -> tuple[Param, Param]:
    """MCP only: ``<role>_source`` (Python source text instead of a file) and ``<role>_name``."""
    return (
        Param(
            f"{role}_source",
            str | None,
            None,
            help or "Python source text, used instead of a file path; the callable is named by the *_name argument.",
            faces=MCP_ONLY,
        ),
        Param(f"{role}_name", str | None, None, "Name of the callable inside the given source text.", faces=MCP_ONLY),
    )


def timeout(default: float, help: str = "Seconds each isolated child may run.") -> Param:
    return Param(
        "timeout_s", float, default, help, limits={"ge": 1, "le": 3600}, flag="--timeout", cli={"metavar": "SECONDS"}
    )


def _csv(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _name_values(items: list[str] | None) -> dict[str, Any] | None:
    """``["BLOCK=256", "MODE=fast"]`` -> ``{"BLOCK": 256, "MODE": "fast"}`` (JSON values where they parse)."""
    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--constexpr expects NAME=VALUE, got {item!r}.")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _tolerances(items: list[str] | None) -> dict[str, tuple[float, float]] | None:
    """``["bf16=1e-2,2e-2"]`` -> ``{"bfloat16": (0.01, 0.02)}``."""
    from mcp_server.engine.inputs import DTYPE_ALIASES

    if not items:
        return None
    out = {}
    for item in items:
        dtype, sep, rest = item.partition("=")
        parts = rest.split(",")
        name = DTYPE_ALIASES.get(dtype.strip().lower())
        if not sep or name is None or len(parts) != 2:
            raise UsageError(f"--tol expects DTYPE=ATOL,RTOL (e.g. bf16=1e-2,2e-2), got {item!r}.")
        try:
            out[name] = (float(parts[0]), float(parts[1]))
        except ValueError:
            raise UsageError(f"--tol {item!r}: ATOL and RTOL must be numbers.") from None
    return out


def _config(text: str | None) -> int | str | None:
    return int(text) if text and text.isdigit() else text


JSON = Param("json", bool, False, "Print the result model as JSON.", faces=CLI_ONLY)
INPUTS = Param("inputs", str | None, None, INPUTS_HELP, path="inputs")
DIMS = Param(
    "dims",
    str | None,
    None,
    "New values for module-level sizes of the reference/candidate files (KernelBench's batch_size, dim...), "
    "e.g. 'batch_size=8,dim=1024': the files run as if written with them, without editing them.",
    cli={"metavar": "NAME=VALUE,..."},
)
ALLOW_TORCH_OPS = Param(
    "allow_torch_ops",
    list[str] | None,
    None,
    "torch ops the candidate may use for real work (e.g. ['mm'] to keep cuBLAS GEMMs, or ['aten.cumsum']); "
    "without it such work is a torch_compute error. Recorded with the result.",
    flag="--allow-torch-op",
    cli={
        "action": "append",
        "metavar": "OP",
        "help": "a torch op the candidate may use for real work, e.g. mm or aten.cumsum (repeatable)",
    },
    parse=lambda ops: tuple(ops or ()),
)


# --- the tools ------------------------------------------------------------------------------------------------

DEVICE = ToolParams(
    "device_info",
    ("device",),
    (
        Param("peaks", bool, False, "Measure (or show the cached) copy bandwidth and matmul rates."),
        Param("remeasure", bool, False, "Measure the peaks again even if cached."),
        JSON,
    ),
)

COMPILE = ToolParams(
    "compile_kernel",
    ("compile",),
    (
        spec("kernel", "The @triton.jit kernel, as path/to/file.py:kernel_name."),
        *source("kernel"),
        Param(
            "signature",
            str | None,
            None,
            "Types in parameter order, e.g. '*fp32, *fp32, *fp32, i32' (pointers default to 16-byte aligned; add "
            "':16' to an integer to declare it divisible by 16), or name=*fp32 ….",
        ),
        Param(
            "args",
            str | None,
            None,
            "Example arguments to infer the signature from: 'f32[1024], f32[1024], 1024, BLOCK=256' or "
            "path.py:make_args.",
            path="inputs",
        ),
        Param(
            "constexprs",
            dict[str, Any] | None,
            None,
            "Values for tl.constexpr parameters.",
            flag="--constexpr",
            cli={"action": "append", "metavar": "NAME=VALUE", "help": "a tl.constexpr value (repeatable)"},
            parse=_name_values,
        ),
        Param("target", str | None, None, TARGET_HELP),
        Param("num_warps", int | None, None, "Warps per program.", limits={"ge": 1, "le": 32}),
        Param("num_stages", int | None, None, "Software-pipelining stages.", limits={"ge": 1, "le": 8}),
        Param(
            "config",
            int | None,
            None,
            "For an autotuned kernel, the index of one config; default all (up to 16).",
            cli={"type": str, "metavar": "INDEX|all"},
            parse=_config,
        ),
        Param(
            "ir",
            list[Literal[IR_STAGE_NAMES]] | None,  # type: ignore[valid-type]
            None,
            "IR stages to return (bounded text; ask for one or two).",
            cli={"type": str, "metavar": ",".join(IR_STAGE_NAMES), "help": "IR stages to print, comma-separated"},
            parse=_csv,
        ),
        Param("out_dir", str | None, None, "Folder to write every IR stage to in full.", path="file"),
        DIMS,
        timeout(300.0),
        JSON,
    ),
)

VALIDATE = ToolParams(
    "validate_against_reference",
    ("validate",),
    (
        spec("reference", "The PyTorch reference, as path.py:name (or a KernelBench problem file)."),
        spec("candidate", "The candidate, as path.py:name (or a KernelBench solution file with ModelNew)."),
        *source("reference"),
        *source("candidate"),
        INPUTS,
        DIMS,
        Param("seeds", int, 3, "Fresh random input sets per case.", limits={"ge": 1, "le": 20}),
        Param(
            "seed",
            int | None,
            None,
            "Seed of the first input set (the others follow it); default a fresh one each run, so no candidate can "
            "know its inputs beforehand. Give the first of a result's seeds to replay that run's inputs.",
            limits={"ge": 0, "le": 2**62 - 1},
        ),
        Param(
            "derive_shapes",
            bool,
            True,
            "Derive edge shapes (size−1, 1, odd) from a single get_inputs().",
            flag="--no-derive",
        ),
        Param(
            "max_derived",
            int,
            6,
            "Most derived sizes to try (each dimension also gets one large size on top).",
            limits={"ge": 0, "le": 64},
        ),
        Param("backward", bool, False, "Also compare gradients against autograd on the reference."),
        Param(
            "determinism", bool, True, "Call the candidate twice and compare (determinism).", flag="--no-determinism"
        ),
        Param(
            "tolerances",
            dict[str, tuple[float, float]] | None,
            None,
            "Per-dtype (atol, rtol) overrides, e.g. {'bfloat16': [0.01, 0.02]}.",
            flag="--tol",
            cli={
                "action": "append",
                "metavar": "DTYPE=ATOL,RTOL",
                "help": "tolerance override, e.g. bf16=1e-2,2e-2 (repeatable)",
            },
            parse=_tolerances,
        ),
        ALLOW_TORCH_OPS,
        timeout(120.0),
        JSON,
    ),
)

BENCH = ToolParams(
    "bench",
    ("bench",),
    (
        spec("candidate", "The launcher to time, as path.py:name (or a KernelBench solution file)."),
        spec(
            "reference",
            "The PyTorch reference, as path.py:name: its eager and torch.compile runs are the baselines.",
            positional=False,
        ),
        *source("candidate"),
        INPUTS,
        Param(
            "sizes",
            str | None,
            None,
            "Values for symbols in a type-list input: '1024,2048,4096' (symbol N) or 'M=1,N=2;M=3,N=4'.",
        ),
        Param(
            "mode",
            Literal["events", "cuda-graph"],
            "events",
            "cuda-graph takes launch overhead out; use it for kernels under ~50 µs.",
        ),
        Param("reps", int, 100, "Timed calls per provider and size.", limits={"ge": 10, "le": 10000}),
        Param(
            "input_sets",
            int | None,
            None,
            "Input sets rotated between calls; default enough to beat L2.",
            limits={"ge": 1, "le": 1000},
        ),
        Param("l2_flush", bool, True, "Flush L2 before every timed call (keep it on).", flag="--no-l2-flush"),
        Param("baselines", bool, True, "Also time the reference in eager mode and under torch.compile."),
        Param(
            "extra_baselines",
            list[str] | None,
            None,
            "Other implementations to beat, as path.py:function (e.g. a Liger-Kernel wrapper), timed in the same "
            "runs on the same inputs; each row reports the candidate's speed-up over each.",
            flag="--baseline",
            cli={
                "action": "append",
                "metavar": "PATH.py:FN",
                "help": "another implementation to time against, as path.py:function (repeatable)",
            },
            path="spec",
        ),
        ALLOW_TORCH_OPS,
        Param("validate_first", bool, True, "Validate against the reference before timing.", flag="--no-validate"),
        Param("force", bool, False, "Time the candidate even if it fails validation."),
        Param("backward", bool, False, "Time forward + backward through autograd."),
        Param(
            "plot",
            bool,
            False,
            "Also return a PNG of time and GB/s per size and provider.",
            cli={
                "type": str,
                "metavar": "OUT.png",
                "default": None,
                "action": "store",
                "help": "write a plot of time and GB/s per size to this file",
            },
        ),
        timeout(BENCH_TIMEOUT_S, "Seconds the timing child may run."),
        Param(
            "lock_wait_s",
            float,
            GPU_LOCK_WAIT_S,
            "Seconds to wait for the GPU (one bench runs per GPU at a time) before giving up.",
            limits={"ge": 0, "le": 86400},
            flag="--lock-wait",
            cli={"metavar": "SECONDS"},
        ),
        JSON,
    ),
)

AUDIT = ToolParams(
    "audit",
    ("audit",),
    (
        Param(
            "file",
            str | None,
            None,
            "The file to audit, as path/to/kernels.py or path/to/kernels.py:launcher (the Python function that "
            "launches the kernels; default: the SPEC's best stage, ModelNew, `candidate`, or the only public "
            "launcher).",
            flag="",
            path="spec",
        ),
        Param("file_source", str | None, None, "Python source text of the file instead of a path.", faces=MCP_ONLY),
        Param(
            "launcher_name",
            str | None,
            None,
            "With file_source: the launcher's name inside the source.",
            faces=MCP_ONLY,
        ),
        Param(
            "reference",
            str | None,
            None,
            "The PyTorch reference as path.py:fn (default: the file's SPEC.reference, Model or reference*).",
            path="spec",
        ),
        INPUTS,
        DIMS,
        ALLOW_TORCH_OPS,
        Param("target", str | None, None, TARGET_HELP),
        Param(
            "sections",
            list[Literal[SECTIONS]] | None,  # type: ignore[valid-type]
            None,
            "Sections to run; default all four.",
            cli={"type": str, "help": f"comma-separated subset of {','.join(SECTIONS)} (default: all)"},
            parse=_csv,
        ),
        Param(
            "suite",
            list[Literal[SUITE]] | None,  # type: ignore[valid-type]
            None,
            "Correctness runs; default all eleven (base cases + ten value transforms).",
            cli={"type": str, "help": f"correctness runs, comma-separated subset of {','.join(SUITE)} (default: all)"},
            parse=_csv,
        ),
        Param("backward", bool, False, "Also check gradients and compile the backward kernels."),
        Param("sizes", str | None, None, "Bench sizes for symbols in a type-list input (see bench)."),
        Param("markdown", bool, True, "Fill in the `markdown` field with the report as Markdown.", faces=MCP_ONLY),
        timeout(300.0),
        JSON,
        Param(
            "out",
            str | None,
            None,
            "Write the Markdown report to this file.",
            faces=CLI_ONLY,
            cli={"metavar": "REPORT.md"},
        ),
    ),
)

DOCS_SEARCH = ToolParams(
    "search_triton_docs",
    ("docs", "search"),
    (
        Param(
            "query",
            str,
            REQUIRED,
            "What to look up, e.g. 'tl.dot input_precision'.",
            limits={"min_length": 1, "max_length": 400},
            flag="",
            cli={"nargs": "+"},
            parse=" ".join,
        ),
        Param("k", int, 8, "How many snippets to return.", limits={"ge": 1, "le": 30}, flag="-k"),
        JSON,
    ),
)

# --- the stage ledger -----------------------------------------------------------------------------------------

CONVERSION = Param(
    "name", str, REQUIRED, "The conversion's name, e.g. 'softmax' (letters, digits, '.', '_', '-').", flag=""
)
LEDGER = Param(
    "ledger",
    str | None,
    None,
    "Ledger file; default $PTT_LEDGER, else .ptt/ledger.db in the working folder.",
    path="file",
)
LEDGER_SOURCE_HELP = "Python source text instead of a file; kept under the ledger's folder, named by *_name."

STAGE_START = ToolParams(
    "stage_start",
    ("stages", "start"),
    (
        CONVERSION,
        spec("reference", "The PyTorch reference, as path.py:fn (or a KernelBench problem file)."),
        *source("reference", LEDGER_SOURCE_HELP),
        INPUTS,
        Param("notes", str | None, None, "Free text kept with the conversion."),
        LEDGER,
        JSON,
    ),
)

STAGE_SUBMIT = ToolParams(
    "stage_submit",
    ("stages", "submit"),
    (
        CONVERSION,
        spec("candidate", "The candidate, as path.py:fn (or a KernelBench solution file with ModelNew)."),
        *source("candidate", LEDGER_SOURCE_HELP),
        Param(
            "stage",
            int,
            REQUIRED,
            "The stage this attempt claims: 1, 2 or 3.",
            limits={"ge": 1, "le": 3},
            cli={"choices": (1, 2, 3), "required": True},
        ),
        Param(
            "no_autotune_reason",
            str | None,
            None,
            "Stages 2-3 only, when the kernel is deliberately not @triton.autotune'd: why (e.g. 'fixed shapes, "
            "tuned by hand'). Recorded with the attempt.",
            cli={"metavar": "TEXT"},
        ),
        ALLOW_TORCH_OPS,
        LEDGER,
        JSON,
    ),
)

STAGE_STATUS = ToolParams(
    "stage_status",
    ("stages", "status"),
    (
        Param("name", str | None, None, "One conversion; default all.", flag="", cli={"nargs": "?"}),
        LEDGER,
        Param(
            "plot",
            str | None,
            None,
            "Also write a plot of speed per attempt (needs matplotlib).",
            faces=CLI_ONLY,
            cli={"metavar": "PNG"},
        ),
        JSON,
    ),
)

STAGE_SHOW = ToolParams(
    None,
    ("stages", "show"),
    (
        CONVERSION,
        Param("full", bool, False, "With the tools' complete results (use with --json).", faces=CLI_ONLY),
        LEDGER,
        JSON,
    ),
)

STAGE_BEST = ToolParams(
    "stage_best",
    ("stages", "best"),
    (
        CONVERSION,
        Param(
            "stage",
            int | None,
            None,
            "Default: the highest stage passed.",
            limits={"ge": 1, "le": 3},
            cli={"choices": (1, 2, 3)},
        ),
        LEDGER,
        Param(
            "write",
            str | None,
            None,
            "Write the source to this file instead of printing it.",
            faces=CLI_ONLY,
            cli={"metavar": "PATH"},
        ),
        Param("force", bool, False, "Overwrite the --write file if it exists.", faces=CLI_ONLY),
        JSON,
    ),
)

# Every tool that has both faces (the parity test walks this), and the command-only ones.
TOOLS: tuple[ToolParams, ...] = (
    DEVICE,
    COMPILE,
    VALIDATE,
    BENCH,
    AUDIT,
    DOCS_SEARCH,
    STAGE_START,
    STAGE_SUBMIT,
    STAGE_STATUS,
    STAGE_BEST,
)
