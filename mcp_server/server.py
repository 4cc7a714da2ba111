"""The MCP server: thin adapters from MCP tools, prompts and resources to the engine.

Each tool checks its arguments, runs the engine in a worker thread (the engine blocks on child processes),
and returns the engine's pydantic result, so every tool has an output schema. Misuse becomes a tool error
whose text names the fix; a failing kernel is a normal result with ``ok: false``. User code never runs in
this process: the engine runs it in isolated children.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib
import logging
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from mcp_server.engine.device import DeviceInfo
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.models import BenchResult, CompileResult, DevicePeaks, ValidateResult
from mcp_server.engine.runner import RunnerError
from mcp_server.engine.specs import source_to_file

logger = logging.getLogger("pytorch_to_triton")
T = TypeVar("T")

INSTRUCTIONS = (
    "Tools to turn PyTorch code into fast, correct Triton kernels. Work in stages: write a simple correct "
    "kernel and call validate_against_reference until it passes; then autotune and bench; then optimise "
    "further and audit. Every verdict comes from isolated runs, never from the kernel's own claims. Without a "
    "GPU, kernels run under the Triton interpreter and results say device='cpu-interpreter'."
)

READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False, destructiveHint=False)

# --- shared parameter types -----------------------------------------------------------------------------

CallableSpecArg = Annotated[
    str | None,
    Field(description="A callable in a file, as path/to/file.py:name (relative to the server's working folder)."),
]
SourceArg = Annotated[
    str | None,
    Field(description="Python source text, used instead of a file path; the callable is named by the *_name argument."),
]
NameArg = Annotated[str | None, Field(description="Name of the callable inside the given source text.")]
InputsArg = Annotated[
    str | None,
    Field(
        description="Inputs: a type list such as 'bf16[4096,8192], f32[8192], i32=7', or path.py:function returning "
        "the argument list (or a dict of labelled cases). Default: the reference module's get_test_cases() or "
        "get_inputs()."
    ),
]
TimeoutArg = Annotated[float, Field(ge=1, le=3600, description="Seconds each isolated child may run.")]


def _spec(path_spec: str | None, source: str | None, name: str | None, role: str) -> str:
    if path_spec and source:
        raise ToolError(f"Give the {role} either as a file spec or as source text, not both.")
    if source:
        if not name:
            raise ToolError(f"{role}_name is required with {role}_source: name the callable defined in the source.")
        return f"{source_to_file(source, stem=role)}:{name}"
    if not path_spec:
        raise ToolError(f"The {role} is missing: pass {role}='path/to/file.py:name' or {role}_source + {role}_name.")
    return path_spec


async def _call(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """Run blocking engine work in a thread; turn misuse into tool errors with the engine's text."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    except UsageError as exc:
        raise ToolError(str(exc)) from None
    except (EnvironmentUnavailable, RunnerError) as exc:
        raise ToolError(f"This machine cannot do that: {exc}") from None


# --- tools ------------------------------------------------------------------------------------------------


class DeviceReport(DeviceInfo):
    peaks: DevicePeaks | None = Field(None, description="measured ceilings (bench measures them on first use)")


async def device_info() -> DeviceReport:
    """Describe the device kernels run on: the GPU (name, compute capability, SMs, L2, memory) or the Triton
    interpreter on CPU ('cpu-interpreter', where correctness checks work but timings mean nothing), plus the
    torch and triton versions and the default compile target. Call it first in a session."""
    from mcp_server.engine.bench import cached_peaks
    from mcp_server.engine.device import probe

    info = await _call(probe)
    peaks = None if info.interpreter else cached_peaks(info)
    return DeviceReport(**info.model_dump(), peaks=peaks)


async def compile_kernel(
    kernel: CallableSpecArg = None,
    kernel_source: SourceArg = None,
    kernel_name: NameArg = None,
    signature: Annotated[
        str | None,
        Field(
            description="Types in parameter order, e.g. '*fp32, *fp32, *fp32, i32' (pointers default to "
            "16-byte aligned; add ':16' to an integer to declare it divisible by 16)."
        ),
    ] = None,
    args: Annotated[
        str | None,
        Field(
            description="Example arguments to infer the signature from: 'f32[1024], f32[1024], 1024, "
            "BLOCK=256' or path.py:make_args."
        ),
    ] = None,
    constexprs: Annotated[dict[str, Any] | None, Field(description="Values for tl.constexpr parameters.")] = None,
    target: Annotated[
        str | None, Field(description="cuda:80, cuda:90 or cuda:100; default the local GPU's, else cuda:90.")
    ] = None,
    num_warps: Annotated[int | None, Field(ge=1, le=32)] = None,
    num_stages: Annotated[int | None, Field(ge=1, le=8)] = None,
    config: Annotated[
        int | None,
        Field(description="For an autotuned kernel, the index of one config; default all (up to 16)."),
    ] = None,
    ir: Annotated[
        list[Literal["ttir", "ttgir", "llir", "ptx", "sass"]] | None,
        Field(description="IR stages to return (bounded text; ask for one or two)."),
    ] = None,
    out_dir: Annotated[str | None, Field(description="Folder to write every IR stage to in full.")] = None,
    timeout_s: TimeoutArg = 300.0,
) -> CompileResult:
    """Compile a @triton.jit kernel ahead of time for a GPU target — no GPU needed. Returns per config: registers
    per thread, spill bytes, shared memory, an occupancy estimate and the limiter, compile time, and the IR
    stages asked for (e.g. ptx to check ld.global.v4 vectorisation, sass for HGMMA tensor-core use). Compile
    errors come back with file:line:column and Triton's message. Use it before validating, and after changing
    tile sizes to see register pressure."""
    from mcp_server.engine.compile import compile_kernel as run

    spec = _spec(kernel, kernel_source, kernel_name, "kernel")
    return await _call(
        run,
        spec,
        signature=signature,
        args=args,
        constexprs=constexprs,
        target=target,
        num_warps=num_warps,
        num_stages=num_stages,
        config=config,
        ir=list(ir or []),
        out_dir=out_dir,
        timeout_s=timeout_s,
    )


async def validate_against_reference(
    reference: CallableSpecArg = None,
    candidate: CallableSpecArg = None,
    reference_source: SourceArg = None,
    reference_name: NameArg = None,
    candidate_source: SourceArg = None,
    candidate_name: NameArg = None,
    inputs: InputsArg = None,
    seeds: Annotated[int, Field(ge=1, le=20, description="Fresh random input sets per case.")] = 3,
    derive_shapes: Annotated[
        bool, Field(description="Derive edge shapes (size−1, 1, odd) from a single get_inputs().")
    ] = True,
    backward: Annotated[bool, Field(description="Also compare gradients against autograd on the reference.")] = False,
    tolerances: Annotated[
        dict[str, tuple[float, float]] | None,
        Field(description="Per-dtype (atol, rtol) overrides, e.g. {'bfloat16': [0.01, 0.02]}."),
    ] = None,
    allow_torch_ops: Annotated[
        list[str] | None,
        Field(description="torch ops the candidate may use for real work, e.g. ['aten.cumsum']."),
    ] = None,
    timeout_s: TimeoutArg = 120.0,
) -> ValidateResult:
    """Judge a candidate (usually a Triton launcher) against a PyTorch reference. Both run in isolated processes;
    the candidate never sees expected values. Checks: values vs a float64 reference with a tolerance bounded by
    PyTorch's own error (all-zero outputs cannot pass), NaN/Inf positions, shape/dtype/device, input mutation,
    outputs aliasing inputs, unwritten output elements (allocations are poisoned), a repeat call (determinism),
    results cached across calls, at least one Triton launch, and torch ops doing the kernel's work. Accepts
    KernelBench files as they are (problem with Model/get_inputs/get_init_inputs, solution with ModelNew).
    ok=false with findings means the kernel is wrong: read each finding's kind and message, fix, call again."""
    from mcp_server.engine.validate import validate

    ref = _spec(reference, reference_source, reference_name, "reference")
    cand = _spec(candidate, candidate_source, candidate_name, "candidate")
    return await _call(
        validate,
        ref,
        cand,
        inputs=inputs,
        seeds=seeds,
        derive_shapes=derive_shapes,
        backward=backward,
        tolerances=tolerances,
        allow_torch_ops=tuple(allow_torch_ops or ()),
        timeout_s=timeout_s,
    )


async def bench(
    ctx: Context,
    candidate: CallableSpecArg = None,
    reference: CallableSpecArg = None,
    candidate_source: SourceArg = None,
    candidate_name: NameArg = None,
    inputs: InputsArg = None,
    sizes: Annotated[
        str | None,
        Field(description="Values for symbols in a type-list input: '1024,2048,4096' (symbol N) or 'M=1,N=2;M=3,N=4'."),
    ] = None,
    mode: Annotated[
        Literal["events", "cuda-graph"],
        Field(description="cuda-graph takes launch overhead out; use it for kernels under ~50 µs."),
    ] = "events",
    reps: Annotated[int, Field(ge=10, le=10000, description="Timed calls per provider and size.")] = 100,
    l2_flush: Annotated[bool, Field(description="Flush L2 before every timed call (keep true).")] = True,
    force: Annotated[bool, Field(description="Time the candidate even if it fails validation.")] = False,
    backward: Annotated[bool, Field(description="Time forward + backward through autograd.")] = False,
    plot: Annotated[bool, Field(description="Also return a PNG of time and GB/s per size and provider.")] = False,
    timeout_s: TimeoutArg = 900.0,
) -> BenchResult:
    """Time a validated candidate on the GPU against the reference in eager mode and under torch.compile, with
    L2 flushed and inputs rotated between calls, CUDA events cross-checked by the host clock, median and
    p20/p80. Reports speedups, achieved GB/s and TFLOP/s, % of the measured roofline and which bound applies,
    and flags: slower than eager/compile, < 50 % of the bound, spread > 10 %, > 10× speedups, flat scaling.
    Needs a CUDA GPU (without one it returns an error: interpreter timings are meaningless). Candidates that
    fail validation are not timed unless force=true. One bench runs per GPU at a time; others wait."""
    from mcp_server.engine.bench import bench as run

    spec = _spec(candidate, candidate_source, candidate_name, "candidate")

    def progress(done: float, total: float | None, message: str) -> None:
        with contextlib.suppress(Exception):
            anyio.from_thread.run(ctx.report_progress, done, total, message)

    with tempfile.TemporaryDirectory() as tmp:
        png = str(Path(tmp) / "bench.png") if plot else None
        result = await _call(
            run,
            spec,
            reference,
            inputs=inputs,
            sizes=sizes,
            mode=mode,
            reps=reps,
            l2_flush=l2_flush,
            force=force,
            backward=backward,
            plot=png,
            timeout_s=timeout_s,
            progress=progress,
        )
        if not (plot and result.plot):
            return result
        data = base64.b64encode(Path(result.plot).read_bytes()).decode()
    result.plot = None
    return CallToolResult(
        content=[
            TextContent(type="text", text=result.model_dump_json()),
            ImageContent(type="image", data=data, mime_type="image/png"),
        ],
        structured_content=result.model_dump(mode="json"),
    )


def build_server() -> MCPServer:
    from mcp_server import __version__

    server = MCPServer("pytorch-to-triton", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    server.add_tool(device_info, annotations=READ_ONLY, title="Device info")
    server.add_tool(compile_kernel, annotations=READ_ONLY, title="Compile a Triton kernel (AOT)")
    server.add_tool(validate_against_reference, annotations=READ_ONLY, title="Validate a kernel against PyTorch")
    server.add_tool(bench, annotations=READ_ONLY, title="Benchmark a kernel on the GPU")
    from mcp_server.cli import FEATURE_MODULES

    for module in FEATURE_MODULES:
        importlib.import_module(module).register_tools(server)
    return server


def run_server(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765, **http_options: Any) -> None:
    """stdio (one client, this process), or streamable HTTP (many clients; see mcp_server.http_serve)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if transport == "http":
        from mcp_server.http_serve import run_http

        run_http(host=host, port=port, **http_options)
        return
    if transport != "stdio":
        raise UsageError(f"--transport must be stdio or http, not {transport!r}.")
    build_server().run("stdio")


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent
