"""compile_kernel: ahead-of-time compile of a @triton.jit kernel for a target GPU, no GPU needed.

The kernel's file is imported in a child (it is user code). Results carry per-config resource usage
(registers, spills, shared memory), an occupancy estimate for the target, and the IR stages asked for.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_server.engine.device import probe
from mcp_server.engine.dims import check_dims, dims_env, parse_dims
from mcp_server.engine.errors import UsageError
from mcp_server.engine.jobs import registry
from mcp_server.engine.jobs.compile_job import NO_TYPE, NO_VALUE
from mcp_server.engine.models import (
    BoundedText,
    CompiledConfig,
    CompileResult,
    Failure,
    Finding,
    FindingKind,
    Occupancy,
    Severity,
)
from mcp_server.engine.resolve import resolve_inputs
from mcp_server.engine.runner import Runner, shared_runner
from mcp_server.engine.specs import output_folder, parse_spec

IR_STAGES = ("ttir", "ttgir", "llir", "ptx", "sass")
# IR asked for is returned whole up to this many characters; the full text is always in a file (ir_files).
IR_TEXT_LIMIT = 400_000

# Per-SM limits by compute capability: (max warps, max blocks, registers, shared memory bytes usable
# by all blocks, per-block reserved shared bytes). From NVIDIA's CUDA occupancy tables.
SM_LIMITS: dict[int, tuple[int, int, int, int, int]] = {
    75: (32, 16, 65536, 65536, 0),
    80: (64, 32, 65536, 167936, 1024),
    86: (48, 16, 65536, 102400, 1024),
    89: (48, 24, 65536, 102400, 1024),
    90: (64, 32, 65536, 233472, 1024),
    100: (64, 32, 65536, 233472, 1024),
    120: (48, 32, 65536, 102400, 1024),
}
REGISTER_GRANULE = 256  # registers are allocated per warp in units of 256
# The most shared memory one block may use (opt-in maximum), by compute capability, from NVIDIA's tables:
# sm_80 163 KB, sm_86/89/120 99 KB, sm_90/100 227 KB, sm_75 64 KB. A config over it cannot launch.
SHARED_PER_BLOCK: dict[int, int] = {
    75: 65536,
    80: 166912,
    86: 101376,
    89: 101376,
    90: 232448,
    100: 232448,
    120: 101376,
}
REGISTERS_PER_BLOCK = 65536
MAX_REGISTERS_PER_THREAD = 255


def resource_failure(arch: int, num_warps: int, registers: int | None, shared_bytes: int) -> str | None:
    """Why a compiled config cannot launch on the target (shared memory or registers over the limit)."""
    limit = SHARED_PER_BLOCK.get(arch) or SHARED_PER_BLOCK.get(arch // 10 * 10)
    if limit is not None and shared_bytes > limit:
        return (
            f"needs {shared_bytes} B of shared memory per block; sm_{arch} allows at most {limit} B "
            f"({limit // 1024} KB): this config cannot launch there. Lower num_stages or the block sizes."
        )
    if registers is not None:
        per_warp = -(-registers * 32 // REGISTER_GRANULE) * REGISTER_GRANULE
        if registers > MAX_REGISTERS_PER_THREAD or per_warp * num_warps > REGISTERS_PER_BLOCK:
            return (
                f"needs {registers} registers per thread × {num_warps * 32} threads, over the "
                f"{REGISTERS_PER_BLOCK} registers of one block on sm_{arch}: this config cannot launch there. "
                "Use fewer warps or a smaller tile."
            )
    return None


def occupancy(arch: int, num_warps: int, registers: int | None, shared_bytes: int) -> Occupancy | None:
    limits = SM_LIMITS.get(arch) or SM_LIMITS.get(arch // 10 * 10)
    if limits is None or registers is None:
        return None
    max_warps, max_blocks, regs_per_sm, smem_per_sm, reserved = limits
    per_warp = -(-registers * 32 // REGISTER_GRANULE) * REGISTER_GRANULE
    by_regs = (regs_per_sm // per_warp) // num_warps if per_warp else max_blocks
    by_smem = smem_per_sm // (shared_bytes + reserved) if shared_bytes else max_blocks
    by_warps = max_warps // num_warps
    options = {"warps": by_warps, "registers": by_regs, "shared memory": by_smem, "blocks": max_blocks}
    limiter = min(options, key=lambda k: options[k])
    blocks = max(0, options[limiter])
    warps = blocks * num_warps
    return Occupancy(
        blocks_per_sm=blocks,
        warps_per_sm=warps,
        max_warps_per_sm=max_warps,
        fraction=round(warps / max_warps, 3),
        limiter=limiter,
    )


def _normalise_target(target: str | None, local: str) -> tuple[str, int]:
    text = (target or local).strip().lower()
    m = re.fullmatch(r"(?:cuda[:_]?|sm_?)?(\d{2,3})a?", text)
    if not m:
        raise UsageError(f"Unknown target {target!r}. Use cuda:80, cuda:90 or cuda:100 (or sm_90).")
    arch = int(m.group(1))
    if arch < 75:
        raise UsageError(f"Target sm_{arch} is older than Triton supports (7.5+). Use cuda:80, cuda:90 or cuda:100.")
    return f"cuda:{arch}", arch


def compile_kernel(
    kernel: str,
    *,
    signature: str | None = None,
    args: str | None = None,
    constexprs: dict[str, Any] | None = None,
    target: str | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    config: int | str | None = None,
    ir: list[str] | tuple[str, ...] = (),
    out_dir: str | None = None,
    dims: str | dict[str, Any] | None = None,
    timeout_s: float = 300.0,
    runner: Runner | None = None,
    cwd: Path | None = None,
) -> CompileResult:
    """Compile ``path.py:kernel`` for ``target`` (default: the local GPU's, else cuda:90).

    ``dims`` sets module-level sizes of the files it imports (the kernel's, and the ``args`` file's) for this
    run: the launcher and example inputs that argument types are read from then use them."""
    started = time.perf_counter()
    unknown = [s for s in ir if s not in IR_STAGES]
    if unknown:
        raise UsageError(f"Unknown IR stage(s) {', '.join(unknown)}; choose from {', '.join(IR_STAGES)}.")
    spec = parse_spec(kernel, role="kernel", cwd=cwd, kernels=True)
    if out_dir is not None:  # before the compile: a folder that cannot be made would lose its result
        out_dir = str(output_folder(out_dir, "--out-dir"))
    files = [str(spec.path)]
    resolved = resolve_inputs(args, cwd=cwd, role="args")
    args = resolved.value
    files.extend(resolved.files)
    overrides = parse_dims(dims)
    if overrides:
        check_dims(overrides, [Path(f) for f in files])
    extra_env = dims_env(overrides)
    runner = runner or shared_runner()
    device = probe(runner)
    target_name, arch = _normalise_target(target, device.target)
    notes: list[str] = []
    constexprs = dict(constexprs or {})
    launcher: FromLauncher | None = None
    if not signature and not args:
        launcher = _signature_from_launcher(spec.path, spec.name, runner, cwd, timeout_s, extra_env)
        if launcher.signature is not None:
            signature = launcher.signature
            constexprs = {**launcher.constexprs, **constexprs}
            notes.append(launcher.how)
    outcome = runner.run(
        registry.COMPILE.name,
        {
            "kernel": {"path": str(spec.path), "name": spec.name},
            "signature": signature,
            "args": args,
            "constexprs": constexprs,
            "target": target_name,
            "num_warps": num_warps,
            "num_stages": num_stages,
            "config": config,
            "ir": list(ir),
        },
        timeout_s=timeout_s,
        # Compilation needs the real JIT, not the interpreter, and no GPU.
        env={"TRITON_INTERPRET": None, **extra_env},
        user_files=files,
        cwd=str(cwd or Path.cwd()),
    )
    with outcome:
        if outcome.usage_error:
            said = outcome.usage_error
            if launcher is not None and launcher.missing and said.startswith((NO_TYPE, NO_VALUE)):
                said += f" Given no --signature or --args, compile ran the file's launcher: {launcher.missing}."
            raise UsageError(said)
        if outcome.failure is not None:
            failure = outcome.failure
            return CompileResult(
                ok=False,
                device=device.device,
                kernel=spec.name,
                target=target_name,
                autotuned=False,
                configs=[],
                seconds=round(time.perf_counter() - started, 3),
                findings=[
                    Finding(
                        kind=failure.kind,
                        severity=Severity.error,
                        message=failure.message,
                        where=failure.where,
                    )
                ],
            )
        raw = outcome.result or {}
        configs = [_config(entry, arch, outcome.job_dir, list(ir), out_dir) for entry in raw.get("configs", [])]
    findings = [
        Finding(kind=c.failure.kind, severity=Severity.error, message=c.failure.message, where=c.failure.where)
        for c in configs
        if c.failure is not None
    ]
    if raw.get("autotuned") and raw.get("n_configs", 0) > len(configs):
        notes.append(f"compiled {len(configs)} of {raw['n_configs']} autotune configs (choose one with config=N)")
    notes.extend(raw.get("selection_notes") or [])
    if raw.get("autotuned") and raw.get("imported_as_gpu"):
        notes.append(
            "the file was imported as on a GPU (torch.cuda.is_available() answered True), so configs it declares "
            "only for GPUs are compiled"
        )
    plain_ints = raw.get("int_params_without_divisibility") or []
    if plain_ints:
        notes.append(
            f"the signature gives no divisibility for {', '.join(plain_ints)}: Triton's JIT marks an integer "
            "argument that is a multiple of 16 (tt.divisibility=16) and folds one equal to 1 into a constant, "
            "which changes vectorisation, registers and spills. Write `name=i32:16` for arguments that are "
            "multiples of 16 at run time and `--constexpr name=1` for those equal to 1"
            + (
                ", or give no signature and let compile read the types from the file's launcher"
                if spec.dynamic_names or spec.top_level & {"get_inputs", "get_test_cases"}
                else ""
            )
        )
    note = "; ".join(notes)
    return CompileResult(
        ok=all(c.ok for c in configs) and bool(configs),
        device=device.device,
        kernel=raw.get("kernel", spec.name),
        target=target_name,
        autotuned=bool(raw.get("autotuned")),
        configs=configs,
        seconds=round(time.perf_counter() - started, 3),
        findings=findings,
        note=note,
    )


def cli_value(value: Any) -> str:
    """A constexpr value as `ptt compile --constexpr` reads it back (JSON, else a plain string)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return shlex.quote(text)


@dataclass(frozen=True)
class FromLauncher:
    """What the file's launcher gave compile: argument types (None when it gave none) and constexpr values, with
    a note saying where they came from; ``missing``: why it gave no types, or no value for some constexprs."""

    signature: str | None = None
    constexprs: dict[str, Any] = field(default_factory=dict)
    how: str = ""
    missing: str = ""


def _signature_from_launcher(
    path: Path, name: str, runner: Runner, cwd: Path | None, timeout_s: float, extra_env: dict[str, str]
) -> FromLauncher:
    """Argument types of ``name`` as the file's launcher passes them on its example inputs.

    Uses the audit's capture (the launcher runs under the interpreter; each launch's arguments are typed as
    Triton's JIT specialises them: pointer alignment, integers divisible by 16, integers equal to 1 folded
    to constants). No types when the file has no launcher or example inputs, or never launches the kernel."""
    outcome = runner.run(
        registry.AUDIT.name,
        {"file": str(path), "candidate": None, "reference": None, "inputs": None, "capture": True},
        timeout_s=timeout_s,
        env={"TRITON_INTERPRET": "1", **extra_env},
        user_files=[str(path)],
        cwd=str(cwd or Path.cwd()),
    )
    with outcome:
        if outcome.usage_error or outcome.failure is not None:
            why = outcome.usage_error or (outcome.failure.message if outcome.failure else "")
            return FromLauncher(missing=f"it could not run ({why.splitlines()[0] if why else 'no reason given'})")
        raw = outcome.result or {}
    launcher = raw.get("candidate")
    if not launcher:
        return FromLauncher(missing=f"{path.name} has no launcher to run ({raw.get('candidate_why') or 'none found'})")
    base = name.split(".")[0]
    records = [
        r
        for r in raw.get("launches") or []
        if (r.get("jit_name") or "").split(".")[0] == base or r.get("kernel") == base
    ]
    typed = [r for r in records if r.get("signature") and not r.get("unsupported")]
    if not typed:
        notes = [n for n in raw.get("notes") or [] if n.startswith("no example inputs")]
        if notes:
            missing = (
                f"{path.name} has no example inputs to run its launcher `{launcher}` with (it defines neither "
                "get_inputs() nor get_test_cases())"
            )
        elif raw.get("case_errors"):
            missing = f"its launcher `{launcher}` raised on the example inputs ({raw['case_errors'][0]})"
        elif records:
            missing = (
                f"its launcher `{launcher}` passes `{base}` arguments compile cannot type "
                f"({', '.join(map(str, records[0]['unsupported']))})"
            )
        else:
            missing = f"its launcher `{launcher}` did not launch `{base}` on the example inputs"
        return FromLauncher(missing=missing)
    record = max(typed, key=lambda r: r.get("launches", 0))
    signature = ", ".join(f"{k}={v}" for k, v in record["signature"].items())
    variants = record.get("variants") or [{}]
    tuned = set()
    if record.get("autotuned"):
        tuned = {k for v in variants for k in (v.get("constexprs") or {})} - set(record["signature"])
    folded = {
        k: v
        for k, v in (variants[0].get("constexprs") or {}).items()
        if k in record["signature"] or (k not in tuned and not record.get("autotuned"))
    }
    case = (record.get("cases") or ["its example inputs"])[0]
    how = f"argument types from the launcher `{launcher}` on {case}: {signature}" + (
        f" (constants {folded})" if any(k in record["signature"] for k in folded) else ""
    )
    missing = ""
    if tuned:
        one = {k: v for k, v in (variants[0].get("constexprs") or {}).items() if k in tuned}
        missing = (
            f"it launches `{base}` through an autotuner whose configs choose {', '.join(sorted(tuned))}, so it "
            "gives no one value for them; pass the values of one config with --constexpr (on "
            f"case {case!r} it launched {' '.join(f'--constexpr {k}={cli_value(v)}' for k, v in one.items())})"
        )
    return FromLauncher(signature, folded, how, missing)


def _config(entry: dict[str, Any], arch: int, job_dir: Path, ir: list[str], out_dir: str | None) -> CompiledConfig:
    failure = Failure.model_validate(entry["failure"]) if entry.get("failure") else None
    if failure is None:
        over = resource_failure(arch, entry.get("num_warps", 4), entry.get("registers"), entry.get("shared_bytes", 0))
        if over is not None:
            failure = Failure(kind=FindingKind.compile_error, message=over)
    texts: dict[str, BoundedText] = {}
    files: dict[str, str] = {}
    prefix = entry.get("ir_files_prefix")
    if prefix and entry.get("ir_available"):
        if out_dir is None and ir:
            # Keep the full text of what was asked for in a file that outlives the job, and say where.
            out_dir = tempfile.mkdtemp(prefix=f"ptt-ir-{entry.get('name', 'kernel')[:40]}-")
        dest = Path(out_dir) if out_dir else None  # made by compile_kernel, or by mkdtemp here
        for stage in entry.get("ir_available", []):
            src = job_dir / f"{prefix}.{stage}"
            if not src.exists():
                continue
            text = src.read_text(errors="replace")
            path = None
            if dest is not None:
                target = dest / f"{entry.get('name', 'kernel')}.{prefix}.{stage}"
                target.write_text(text)
                path = str(target)
                files[stage] = path
            if stage in ir:
                bounded = BoundedText.of(text, IR_TEXT_LIMIT, path)
                if bounded.truncated and path:
                    marker = f"characters truncated; the full text is in {path}]"
                    bounded = bounded.model_copy(update={"text": bounded.text.replace("characters truncated]", marker)})
                texts[stage] = bounded
    regs = entry.get("registers")
    return CompiledConfig(
        config_index=entry.get("config_index"),
        config=entry.get("config") or {},
        constexprs=entry.get("constexprs") or {},
        signature=entry.get("signature") or {},
        num_warps=entry.get("num_warps", 4),
        num_stages=entry.get("num_stages", 3),
        ok=failure is None,
        compile_s=entry.get("compile_s", 0.0),
        registers=regs,
        spill_stores=entry.get("spill_stores"),
        spill_loads=entry.get("spill_loads"),
        stack_bytes=entry.get("stack_bytes"),
        shared_bytes=entry.get("shared_bytes", 0),
        instructions=entry.get("instructions") or {},
        occupancy=occupancy(arch, entry.get("num_warps", 4), regs, entry.get("shared_bytes", 0))
        if failure is None
        else None,
        ir=texts,
        ir_files=files,
        failure=failure,
    )
