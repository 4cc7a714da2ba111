"""The compiled part of the audit: the kernels the launcher ran, compiled for the target GPU and read.

No GPU is needed. The launches come from :mod:`mcp_server.engine.jobs.audit_job` (argument types,
constexprs, launch options, the autotuner's choice or the configs its pruning keeps). Each chosen variant is
compiled with :func:`mcp_server.engine.compile.compile_kernel`, and the rules below read ptxas's resource
report, the occupancy estimate, the instruction counts over the full PTX/SASS, and the TTIR (for ``tl.dot``
and fp64 operations with their source lines).

Under the interpreter the autotuner cannot time configs, so an autotuned kernel's kept configs are all
candidates: a rule that holds for every compiled candidate keeps its severity, one that holds for some only
is reported as info (the autotuner may or may not pick those).
"""

from __future__ import annotations

import ast
import json
import math
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_server.engine.audit.models import CompiledKernel, CompiledSection
from mcp_server.engine.audit.static_models import AuditFinding, Rule
from mcp_server.engine.compile import SM_LIMITS, compile_kernel
from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import Location, Severity
from mcp_server.engine.runner import Runner

_E, _W, _I = Severity.error, Severity.warning, Severity.info

COMPILED_RULES: list[Rule] = [
    Rule(
        id="compile-failed",
        category="correctness",
        severity=_E,
        summary="a kernel the launcher ran does not compile for the target GPU",
    ),
    Rule(
        id="register-spill",
        category="memory",
        severity=_W,
        summary="ptxas spills registers to local memory: each spilled value is a round trip through L1/L2",
    ),
    Rule(
        id="local-memory",
        category="memory",
        severity=_W,
        summary="local memory (ld/st.local, LDL/STL) without spills: a per-thread array indexed at run time",
    ),
    Rule(
        id="low-occupancy",
        category="performance",
        severity=_W,
        summary="under a quarter of the SM's warp slots can be active, limited by registers or shared memory",
    ),
    Rule(
        id="not-vectorized",
        category="memory",
        severity=_W,
        summary="no 64/128-bit global loads or stores although pointers are 16-byte aligned and sizes multiples of 16",
    ),
    Rule(
        id="dot-no-tensor-cores",
        category="performance",
        severity=_W,
        summary="tl.dot not lowered to the target's tensor-core instructions (wgmma on sm_90, mma on sm_80)",
    ),
    Rule(
        id="fp64-math",
        category="performance",
        severity=_W,
        summary="float64 arithmetic in a kernel whose data is not float64 (1/2 to 1/64 of the fp32 rate)",
    ),
    Rule(
        id="shared-memory-near-limit",
        category="memory",
        severity=_W,
        summary="shared memory per program at 90 % or more of the per-block limit (error past it)",
    ),
]
COMPILED_RULES_BY_ID: dict[str, Rule] = {r.id: r for r in COMPILED_RULES}

# At most this many compiles per audit (each is a child process and a full Triton + ptxas compile).
MAX_COMPILES = 16
# Per kernel: the specialisations with the largest tiles, aligned and not, each with its heaviest and
# lightest autotune candidate.
MAX_PER_KERNEL = 4
LOW_OCCUPANCY = 0.25
SMEM_NEAR = 0.90
# A thread must own at least 8 contiguous bytes of an access for a 64-bit (v2) instruction to exist.
VECTOR_BYTES = 8
COMPILE_TIMEOUT_S = 300.0


@dataclass
class Planned:
    """One compile: a launch record and one of its variants."""

    record: dict[str, Any]
    variant: dict[str, Any]
    group: int  # variants of one launch record share a group (autotune candidates)
    pressure: float = 0.0
    tile: int = 1
    result: CompiledKernel | None = None
    ttir: str = ""
    ptx: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _tile(constexprs: dict[str, Any]) -> int:
    """Product of the power-of-two integer constexprs ≥ 2: a proxy for the elements a program holds."""
    out = 1
    for value in constexprs.values():
        if isinstance(value, int) and not isinstance(value, bool) and value >= 2 and value & (value - 1) == 0:
            out *= value
    return out


def _heaviest(items: list[Planned]) -> Planned:
    # Sizes folded to 1 (one row, one column) are corner cases: prefer a real size.
    return max(
        items,
        key=lambda q: (not q.record.get("degenerate"), q.pressure, q.tile, -(q.variant.get("config_index") or 0)),
    )


def _lightest(items: list[Planned]) -> Planned:
    return min(items, key=lambda q: (q.pressure, q.tile, q.variant.get("config_index") or 0))


def plan(launches: list[dict[str, Any]]) -> tuple[list[Planned], list[str]]:
    """Choose what to compile: per kernel the heaviest specialisation and the heaviest aligned one, each
    with its heaviest and lightest autotune candidate; at most MAX_COMPILES in all."""
    skipped: list[str] = []
    by_kernel: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for group, rec in enumerate(launches):
        if rec.get("unsupported"):
            skipped.append(f"{rec['kernel']}: not compiled — {'; '.join(rec['unsupported'][:3])}")
            continue
        if not rec.get("jit_name"):
            skipped.append(f"{rec['kernel']}: not compiled — no module-level name reaches it")
            continue
        by_kernel.setdefault(rec["kernel"], []).append((group, rec))
    planned: list[Planned] = []
    order = sorted(by_kernel, key=lambda k: -sum(r["launches"] for _, r in by_kernel[k]))
    for kernel in order:
        entries = []
        for group, rec in by_kernel[kernel]:
            for variant in rec["variants"]:
                tile = _tile(variant["constexprs"])
                warps = int(variant.get("num_warps") or 4)
                entries.append(Planned(rec, variant, group, pressure=tile / (32 * warps), tile=tile))

        groups: list[int] = []
        top = _heaviest(entries)
        groups.append(top.group)
        aligned = [p for p in entries if p.record.get("aligned") and p.record.get("ints_div16")]
        if aligned and (best_aligned := _heaviest(aligned)).group not in groups:
            groups.append(best_aligned.group)
        chosen: list[Planned] = []
        for group in groups:
            members = [p for p in entries if p.group == group]
            for pick in (_heaviest(members), _lightest(members)):
                if pick not in chosen:
                    chosen.append(pick)
        chosen = chosen[:MAX_PER_KERNEL]
        total = len({id(p.variant) for p in entries})
        if total > len(chosen):
            skipped.append(
                f"{kernel}: compiled {len(chosen)} of {total} launch variants (the heaviest tiles, aligned and "
                "not, with the heaviest and lightest autotune candidates)"
            )
        planned.extend(chosen)
    if len(planned) > MAX_COMPILES:
        skipped.append(f"compiled the first {MAX_COMPILES} of {len(planned)} planned variants")
        planned = planned[:MAX_COMPILES]
    return planned, list(dict.fromkeys(skipped))


# --- reading the IR -----------------------------------------------------------------------------------

_LOC_DEF = re.compile(r"^#(loc\d*)\s*=\s*loc\((.*)\)\s*$")
_LOC_FILE = re.compile(r'^"([^"]+)":(\d+):(\d+)$')
_LOC_NAMED = re.compile(r'^"[^"]*"\(#(loc\d*)\)$')
_LOC_REF = re.compile(r"loc\(#(loc\d*)\)\s*$")
_DOT = re.compile(r"=\s*tt\.dot(?:_scaled)?\b")
_ACCESS = re.compile(r"=?\s*\btt\.(load|store)\b[^:]*:\s*tensor<((?:\d+x)+)!tt\.ptr<(\w+)>")
_BITS = {"f64": 64, "i64": 64, "f32": 32, "i32": 32, "f16": 16, "bf16": 16, "i16": 16, "i8": 8, "i1": 8}
_F64_OP = re.compile(
    r"=\s*(?:arith\.(?:addf|subf|mulf|divf|remf|extf|maximumf|minimumf|negf|fma)|math\.\w+|tt\.precise_\w+)\b"
    r".*[x<\s]f64\b"
)


def _loc_table(ttir: str) -> dict[str, str]:
    table = {}
    for line in ttir.splitlines():
        if m := _LOC_DEF.match(line.strip()):
            table[m.group(1)] = m.group(2)
    return table


def _resolve_loc(ref: str, table: dict[str, str]) -> tuple[str, int, int] | None:
    for _ in range(16):
        body = table.get(ref)
        if body is None:
            return None
        if m := _LOC_FILE.match(body):
            return m.group(1), int(m.group(2)), int(m.group(3))
        if m := _LOC_NAMED.match(body):
            ref = m.group(1)
            continue
        return None
    return None


def first_location(ttir: str, pattern: re.Pattern[str]) -> tuple[int, tuple[str, int, int] | None]:
    """How many TTIR operations match, and the source place of the first."""
    table = _loc_table(ttir)
    count, where = 0, None
    for line in ttir.splitlines():
        if pattern.search(line):
            count += 1
            if where is None and (m := _LOC_REF.search(line)):
                where = _resolve_loc(m.group(1), table)
    return count, where


def widest_access(ttir: str) -> dict[str, int]:
    """Bytes of the largest tensor each of tt.load / tt.store moves (0 when there is none)."""
    out = {"load": 0, "store": 0}
    for m in _ACCESS.finditer(ttir):
        numel = math.prod(int(d) for d in m.group(2).rstrip("x").split("x"))
        bits = _BITS.get(m.group(3), 32 if not m.group(3).startswith("f8") else 8)
        out[m.group(1)] = max(out[m.group(1)], numel * bits // 8)
    return out


def def_lines(path: Path) -> dict[str, int]:
    """Line of each ``def`` in the file (parsed, not imported)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {n.name: n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


# --- compiling ----------------------------------------------------------------------------------------


def _variant_text(p: Planned) -> str:
    const = ", ".join(f"{k}={v}" for k, v in p.variant["constexprs"].items())
    opts = f"{p.variant.get('num_warps') or 4} warps, {p.variant.get('num_stages') or 3} stages"
    return f"{const} · {opts}" if const else opts


def _cli_value(value: Any) -> str:
    """A constexpr value as `ptt compile --constexpr` reads it back (JSON, else a plain string)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return shlex.quote(text)


def _command(file: str, p: Planned, signature: str, target: str) -> str:
    parts = [f"ptt compile '{file}:{p.record['jit_name']}'", f"--signature '{signature}'"]
    parts += [f"--constexpr {k}={_cli_value(v)}" for k, v in p.variant["constexprs"].items()]
    if p.variant.get("num_warps"):
        parts.append(f"--num-warps {p.variant['num_warps']}")
    if p.variant.get("num_stages"):
        parts.append(f"--num-stages {p.variant['num_stages']}")
    parts.append(f"--target {target}")
    return " ".join(parts)


def _compile_one(p: Planned, file: Path, target: str, lines: dict[str, int], runner: Runner, cwd: Path | None) -> None:
    rec, var = p.record, p.variant
    signature = ", ".join(f"{k}={v}" for k, v in rec["signature"].items())
    where = Location(file=str(file), line=lines.get(rec["kernel"], rec.get("line")))
    base = {
        "kernel": rec["kernel"],
        "where": where,
        "variant": _variant_text(p),
        "source": var["source"],
        "config_index": var.get("config_index"),
        "n_configs": rec.get("n_configs", 0),
        "launches": rec.get("launches", 0),
        "cases": rec.get("cases", []),
        "signature": signature,
        "constexprs": var["constexprs"],
        "num_warps": var.get("num_warps") or 4,
        "num_stages": var.get("num_stages") or 3,
        "command": _command(str(file), p, signature, target),
    }
    out_dir = Path(tempfile.mkdtemp(prefix="ptt-audit-ir-"))
    try:
        try:
            result = compile_kernel(
                f"{file}:{rec['jit_name']}",
                signature=signature,
                constexprs=var["constexprs"],
                target=target,
                num_warps=var.get("num_warps"),
                num_stages=var.get("num_stages"),
                out_dir=str(out_dir),
                timeout_s=COMPILE_TIMEOUT_S,
                runner=runner,
                cwd=cwd,
            )
        except UsageError as exc:
            p.result = CompiledKernel(**base, ok=False, error=f"could not be compiled from the captured launch: {exc}")
            p.extra["usage"] = True
            return
        if not result.ok or not result.configs:
            first = result.findings[0] if result.findings else None
            p.result = CompiledKernel(**base, ok=False, error=first.message if first else "compilation failed")
            p.extra["where"] = first.where if first else None
            return
        cfg = result.configs[0]
        for suffix, attr in ((".ttir", "ttir"), (".ptx", "ptx")):
            found = sorted(out_dir.glob(f"*{suffix}"))
            if found:
                setattr(p, attr, found[0].read_text(errors="replace"))
        dots, dot_where = first_location(p.ttir, _DOT)
        f64_ops, f64_where = first_location(p.ttir, _F64_OP)
        instructions = dict(cfg.instructions)
        instructions["tcgen05"] = len(re.findall(r"\btcgen05\.mma\b", p.ptx))
        p.extra.update(dot_where=dot_where, f64_ops=f64_ops, f64_where=f64_where, access=widest_access(p.ttir))
        p.result = CompiledKernel(
            **{**base, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
            ok=True,
            registers=cfg.registers,
            spill_stores=cfg.spill_stores,
            spill_loads=cfg.spill_loads,
            shared_bytes=cfg.shared_bytes,
            occupancy=cfg.occupancy,
            instructions=instructions,
            dots=dots,
            tensor_cores=_tensor_cores(instructions) if dots else "-",
        )
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _tensor_cores(counts: dict[str, int]) -> str:
    if counts.get("tcgen05"):
        return "tcgen05"
    if counts.get("wgmma") or counts.get("HGMMA"):
        return "wgmma"
    if counts.get("mma.sync") or counts.get("HMMA"):
        return "mma.sync"
    return "none"


def compiled_section(
    file: Path,
    launches: list[dict[str, Any]],
    *,
    target: str,
    runner: Runner,
    cwd: Path | None = None,
    notes: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[CompiledSection, list[AuditFinding]]:
    started = time.perf_counter()
    planned, skipped = plan(launches)
    lines = def_lines(file)
    arch = int(re.sub(r"\D", "", target) or 90)
    if progress:
        progress(f"compiling {len(planned)} kernel variant(s) for {target}")
    # Two compiles at a time: each is mostly one CPU core (LLVM, ptxas).
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda p: _compile_one(p, file, target, lines, runner, cwd), planned))
    findings = judge(planned, arch, str(file))
    kernels = [p.result for p in planned if p.result is not None]
    errors = any(f.severity is Severity.error for f in findings)
    warnings = any(f.severity is Severity.warning for f in findings)
    status = "failed" if errors else "warnings" if warnings else "passed"
    if not kernels:
        status = "skipped"
    section = CompiledSection(
        status=status,
        target=target,
        kernels=kernels,
        not_compiled=skipped,
        notes=list(notes or []),
        seconds=round(time.perf_counter() - started, 3),
    )
    return section, findings


# --- the rules ----------------------------------------------------------------------------------------


def _limits(arch: int) -> tuple[int, int]:
    """(shared bytes a block may use, registers per SM) on the target."""
    limits = SM_LIMITS.get(arch) or SM_LIMITS.get(arch // 10 * 10) or SM_LIMITS[90]
    return limits[3] - limits[4], limits[2]


def _check(p: Planned, arch: int) -> list[tuple[str, Severity, str, str, Location | None]]:
    """(rule, severity, message, fix, place) for one compiled variant."""
    k = p.result
    assert k is not None
    name = f"{k.kernel} [{k.variant}]"
    out: list[tuple[str, Severity, str, str, Location | None]] = []
    if not k.ok:
        if p.extra.get("usage"):
            return out
        out.append(
            (
                "compile-failed",
                _E,
                f"{name} ran under the launcher but does not compile for sm_{arch}: {k.error}",
                "Fix the construct the message names; it must compile for every GPU the kernel targets "
                "(`ptt compile` shows the error with its line).",
                p.extra.get("where"),
            )
        )
        return out
    counts = k.instructions
    spill = (k.spill_stores or 0) + (k.spill_loads or 0)
    if spill:
        out.append(
            (
                "register-spill",
                _W,
                f"{name}: ptxas spills {k.spill_stores or 0} B stores / {k.spill_loads or 0} B loads per thread at "
                f"{k.registers} registers — every spilled value goes to local memory and back",
                "Give each thread fewer live values: a smaller tile (BLOCK sizes) or more num_warps for the same "
                "tile, fewer values kept across a loop (recompute instead), or prune the configs that spill.",
                None,
            )
        )
    local = counts.get("local", 0) + (counts.get("LDL/STL", 0) if not spill else 0)
    if local and not spill:
        out.append(
            (
                "local-memory",
                _W,
                f"{name}: {local} local-memory accesses without register spills — a per-thread array indexed "
                "at run time lives in (slow) local memory",
                "Index register tiles only with compile-time positions (tl.static_range, tl.where over a "
                "constexpr range) and keep per-thread arrays small.",
                None,
            )
        )
    occ = k.occupancy
    if occ is not None and occ.fraction < LOW_OCCUPANCY:
        tensor = k.tensor_cores in ("wgmma", "mma.sync", "tcgen05")
        by = {
            "registers": f"{k.registers} registers per thread",
            "shared memory": f"{k.shared_bytes} B of shared memory per program",
        }.get(occ.limiter, f"the {occ.limiter} limit")
        fixes = {
            "registers": "Lower the registers per thread: a smaller tile or more warps per tile, fewer live "
            "values, or maxnreg in the autotune Config.",
            "shared memory": "Use fewer num_stages or smaller tiles so two or more programs fit per SM.",
        }
        severity = _I if tensor or occ.limiter not in fixes else _W
        why = (
            " (tensor-core tiles often run at low occupancy; check that num_stages hides the latency)" if tensor else ""
        )
        out.append(
            (
                "low-occupancy",
                severity,
                f"{name}: {occ.blocks_per_sm} program(s) × {k.num_warps} warps fit per SM = {occ.fraction:.0%} of "
                f"its warp slots, limited by {by}{why}",
                fixes.get(occ.limiter, "Launch more warps per program or more programs per SM."),
                None,
            )
        )
    rec = p.record
    threads = 32 * max(1, k.num_warps)
    access = p.extra.get("access") or {}
    if rec.get("aligned") and rec.get("ints_div16"):
        narrow = []
        for what, n, wide, key in (
            (
                "loads",
                counts.get("ld.global", 0),
                counts.get("ld.global.v4", 0) + counts.get("ld.global.v2", 0),
                "load",
            ),
            (
                "stores",
                counts.get("st.global", 0),
                counts.get("st.global.v4", 0) + counts.get("st.global.v2", 0),
                "store",
            ),
        ):
            # Only where a thread owns enough bytes of one access for a vector instruction to exist.
            if n and not wide and access.get(key, 0) / threads >= VECTOR_BYTES:
                narrow.append(what)
        if narrow:
            loads, stores = counts.get("ld.global", 0), counts.get("st.global", 0)
            out.append(
                (
                    "not-vectorized",
                    _W,
                    f"{name}: all {' and '.join(narrow)} are scalar ({loads} ld.global, {stores} st.global, none "
                    "64/128-bit) although every pointer is 16-byte aligned, every integer argument a multiple of 16 "
                    "and each thread owns several elements — the compiler could not prove the lanes contiguous",
                    "Give each program a contiguous block: offsets `start + tl.arange(0, BLOCK)` with unit stride "
                    "in the last dimension (no `% n`, no lanes strided by the grid); for offsets computed from "
                    "data, state what holds with tl.multiple_of / tl.max_contiguous.",
                    None,
                )
            )
    if k.dots:
        tc = k.tensor_cores
        place = p.extra.get("dot_where")
        where = Location(file=place[0], line=place[1], column=place[2]) if place else None
        if arch >= 90 and tc in ("none", "mma.sync") and arch < 100:
            fell = (
                "mma.sync (Ampere's tensor-core path, a fraction of Hopper's wgmma rate)"
                if tc == "mma.sync"
                else ("FMA units (no tensor cores)")
            )
            out.append(
                (
                    "dot-no-tensor-cores",
                    _W,
                    f"{name}: {k.dots} tl.dot lowered to {fell}, not wgmma, on sm_{arch}",
                    "For wgmma: fp16/bf16/fp8 operands (or tf32 for fp32: input_precision='tf32'), a tile M of at "
                    "least 64 per 4 warps (num_warps a multiple of 4), N and K multiples of 16.",
                    where,
                )
            )
        elif tc == "none":
            out.append(
                (
                    "dot-no-tensor-cores",
                    _W,
                    f"{name}: {k.dots} tl.dot lowered to FMA units, no tensor-core instructions on sm_{arch}",
                    "Feed tl.dot fp16/bf16 operands (or fp32 with input_precision='tf32', not 'ieee') and tiles of "
                    "at least 16 in every dimension.",
                    where,
                )
            )
    fp64 = counts.get("fp64", 0) + counts.get("DFMA/DADD/DMUL", 0)
    if fp64 and "fp64" not in rec.get("pointer_dtypes", []):
        place = p.extra.get("f64_where")
        where = Location(file=place[0], line=place[1], column=place[2]) if place else None
        out.append(
            (
                "fp64-math",
                _W,
                f"{name}: {counts.get('fp64', 0)} fp64 PTX instructions ({counts.get('DFMA/DADD/DMUL', 0)} DFMA/DADD/"
                "DMUL in SASS) in a kernel whose tensors are not float64 — fp64 runs at 1/2 (H100) to 1/64 "
                "(consumer GPUs) of the fp32 rate",
                "Keep the math in fp32: remove .to(tl.float64) casts and tl.float64 constants/accumulators; "
                "accumulate in tl.float32.",
                where,
            )
        )
    smem_limit, _ = _limits(arch)
    if k.shared_bytes >= SMEM_NEAR * smem_limit:
        over = k.shared_bytes > smem_limit
        out.append(
            (
                "shared-memory-near-limit",
                _E if over else _W,
                f"{name}: {k.shared_bytes} B of shared memory per program, {k.shared_bytes / smem_limit:.0%} of "
                f"sm_{arch}'s {smem_limit} B per block"
                + (" — the launch fails with OutOfResources" if over else ": one program per SM, no headroom"),
                "Lower num_stages (each stage holds a copy of the input tiles) or the tile sizes.",
                None,
            )
        )
    return out


def judge(planned: list[Planned], arch: int, file: str) -> list[AuditFinding]:
    """Findings over all compiled variants, one per (rule, launch record) with the variants it holds for."""
    per_group: dict[int, list[Planned]] = {}
    for p in planned:
        if p.result is not None:
            per_group.setdefault(p.group, []).append(p)
    findings: list[AuditFinding] = []
    seen: set[tuple[str, str, str]] = set()
    for members in per_group.values():
        hits: dict[str, list[tuple[Planned, Severity, str, str, Location | None]]] = {}
        for p in members:
            for rule, severity, message, fix, where in _check(p, arch):
                hits.setdefault(rule, []).append((p, severity, message, fix, where))
        candidates = [m for m in members if m.variant["source"] == "autotune candidate"]
        for rule, items in hits.items():
            p, severity, message, fix, where = max(items, key=lambda i: ["info", "warning", "error"].index(i[1].value))
            if candidates and len(items) < len(members):
                indices = ", ".join(str(i[0].variant.get("config_index")) for i in items)
                message = (
                    f"{message}. Only {len(items)} of the {len(members)} autotune candidates compiled here (config "
                    f"{indices}); the autotuner avoids such configs only if it times them slower"
                )
                severity = _I
            elif candidates:
                message = f"{message}. Every autotune candidate compiled here ({len(members)}) does"
            rule_spec = COMPILED_RULES_BY_ID[rule]
            assert p.result is not None
            key = (rule, p.result.kernel, message)
            if key in seen:
                continue
            seen.add(key)
            findings.append(
                AuditFinding(
                    rule=rule,
                    category=rule_spec.category,
                    severity=severity,
                    message=message,
                    fix=fix,
                    where=where or p.result.where,
                    kernel=p.result.kernel,
                    section="compiled",
                )
            )
    return _merge(findings)


def _merge(findings: list[AuditFinding]) -> list[AuditFinding]:
    """One finding per (rule, kernel, severity): the same problem in several specialisations is one fix."""
    out: dict[tuple[str, str | None, str], AuditFinding] = {}
    extra: dict[tuple[str, str | None, str], int] = {}
    for f in findings:
        key = (f.rule, f.kernel, f.severity.value)
        if key in out:
            extra[key] = extra.get(key, 0) + 1
        else:
            out[key] = f
    merged = []
    for key, f in out.items():
        if key in extra:
            n = extra[key]
            f = f.model_copy(update={"message": f"{f.message} (and {n} more specialisation{'s' * (n > 1)})"})
        merged.append(f)
    return merged


def occupancy_pct(k: CompiledKernel) -> str:
    if k.occupancy is None:
        return "-"
    return f"{k.occupancy.fraction:.0%} ({k.occupancy.limiter})"


def vector_text(k: CompiledKernel) -> str:
    """Wide (64/128-bit) global accesses out of all, e.g. 'ld 8/8 · st 8/8'; pipelined loads show as cp.async."""
    c = k.instructions
    if not c:
        return "-"
    ld, st = c.get("ld.global", 0), c.get("st.global", 0)
    ld_w = c.get("ld.global.v4", 0) + c.get("ld.global.v2", 0)
    st_w = c.get("st.global.v4", 0) + c.get("st.global.v2", 0)
    parts = []
    if c.get("tma"):
        parts.append(f"TMA ×{c['tma']}")
    if c.get("cp.async"):
        parts.append(f"cp.async ×{c['cp.async']}")
    if ld or not parts:
        parts.append(f"ld {ld_w}/{ld}")
    parts.append(f"st {st_w}/{st}")
    return " · ".join(parts)
