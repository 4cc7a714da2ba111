"""The compiled part of the audit: the kernels the launcher ran, compiled for the target GPU and read.

No GPU is needed. The launches come from :mod:`mcp_server.engine.jobs.audit_job` (argument types,
constexprs, launch options, the autotuner's choice or the configs its pruning keeps). Each chosen variant is
compiled with :func:`mcp_server.engine.compile.compile_kernel`, and the rules below read ptxas's resource
report, the occupancy estimate, the instruction counts over the full PTX/SASS, and the TTIR (for ``tl.dot``
and fp64 operations with their source lines); the rules themselves live in ``rules.compiled``.

Under the interpreter the autotuner cannot time configs, so an autotuned kernel's kept configs are all
candidates: a rule that holds for every compiled candidate keeps its severity, one that holds for some only
is reported as info (the autotuner may or may not pick those).
"""

from __future__ import annotations

import ast
import math
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mcp_server.engine.audit.models import CompiledKernel, CompiledSection
from mcp_server.engine.audit.planned import Planned
from mcp_server.engine.audit.rules.compiled import check_variant
from mcp_server.engine.audit.rules.registry import COMPILED
from mcp_server.engine.audit.static_models import AuditFinding
from mcp_server.engine.compile import cli_value, compile_kernel
from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import Location, Severity
from mcp_server.engine.pyast import parse_python
from mcp_server.engine.runner import Runner

_I = Severity.info

# At most this many compiles per audit (each is a child process and a full Triton + ptxas compile).
MAX_COMPILES = 16
# Per kernel: the specialisations with the largest tiles, aligned and not, each with its heaviest and
# lightest autotune candidate.
MAX_PER_KERNEL = 4
COMPILE_TIMEOUT_S = 300.0


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
        tree = parse_python(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {n.name: n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


# --- compiling ----------------------------------------------------------------------------------------


def _variant_text(p: Planned) -> str:
    const = ", ".join(f"{k}={v}" for k, v in p.variant["constexprs"].items())
    opts = f"{p.variant.get('num_warps') or 4} warps, {p.variant.get('num_stages') or 3} stages"
    return f"{const} · {opts}" if const else opts


def _command(file: str, p: Planned, signature: str, target: str) -> str:
    parts = [f"ptt compile '{file}:{p.record['jit_name']}'", f"--signature '{signature}'"]
    parts += [f"--constexpr {k}={cli_value(v)}" for k, v in p.variant["constexprs"].items()]
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
            for rule, severity, message, fix, where in check_variant(p, arch):
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
            rule_spec = COMPILED.rules[rule]
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
