"""Compiled-code rules: read from ptxas's resource report, the occupancy estimate, the PTX/SASS
instruction counts and the TTIR of one compiled kernel variant (see ``audit.compiled``, which plans and
runs the compiles and merges the hits over autotune candidates).

Each check takes the planned variant (``p.result`` is its :class:`CompiledKernel`; ``p.extra`` the places
read from the TTIR) and the target's SM number, and returns the hits it finds as
``(severity, message, fix, place)``. ``compile-failed`` runs on a variant that did not compile (event
``not-compiled``), every other check on one that did (event ``compiled``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_server.engine.audit.rules.registry import COMPILED
from mcp_server.engine.compile import SM_LIMITS
from mcp_server.engine.models import Location, Severity

if TYPE_CHECKING:
    from mcp_server.engine.audit.planned import Planned

_E, _W, _I = Severity.error, Severity.warning, Severity.info
Hit = tuple[Severity, str, str, Location | None]

LOW_OCCUPANCY = 0.25
SMEM_NEAR = 0.90
# A thread must own at least 8 contiguous bytes of an access for a 64-bit (v2) instruction to exist.
VECTOR_BYTES = 8

COMPILE_FAILED = COMPILED.rule(
    "compile-failed",
    "correctness",
    _E,
    "a kernel the launcher ran does not compile for the target GPU",
)
REGISTER_SPILL = COMPILED.rule(
    "register-spill",
    "memory",
    _W,
    "ptxas spills registers to local memory: each spilled value is a round trip through L1/L2",
)
LOCAL_MEMORY = COMPILED.rule(
    "local-memory",
    "memory",
    _W,
    "local memory (ld/st.local, LDL/STL) without spills: a per-thread array indexed at run time",
)
LOW_OCCUPANCY_RULE = COMPILED.rule(
    "low-occupancy",
    "performance",
    _W,
    "under a quarter of the SM's warp slots can be active, limited by registers or shared memory",
)
NOT_VECTORIZED = COMPILED.rule(
    "not-vectorized",
    "memory",
    _W,
    "no 64/128-bit global loads or stores although pointers are 16-byte aligned and sizes multiples of 16",
)
DOT_NO_TENSOR_CORES = COMPILED.rule(
    "dot-no-tensor-cores",
    "performance",
    _W,
    "tl.dot not lowered to the target's tensor-core instructions (wgmma on sm_90, mma on sm_80)",
)
FP64_MATH = COMPILED.rule(
    "fp64-math",
    "performance",
    _W,
    "float64 arithmetic in a kernel whose data is not float64 (1/2 to 1/64 of the fp32 rate)",
)
SHARED_MEMORY_NEAR_LIMIT = COMPILED.rule(
    "shared-memory-near-limit",
    "memory",
    _W,
    "shared memory per program at 90 % or more of the per-block limit (error past it)",
)


def check_variant(p: Planned, arch: int) -> list[tuple[str, Severity, str, str, Location | None]]:
    """(rule, severity, message, fix, place) for one compiled variant, from every registered check."""
    k = p.result
    assert k is not None
    if not k.ok and p.extra.get("usage"):
        return []  # the captured launch could not be replayed: a note, not a finding
    out = []
    for check in COMPILED.checks_for("compiled" if k.ok else "not-compiled"):
        for severity, message, fix, where in check.fn(p, arch):
            out.append((check.rule, severity, message, fix, where))
    return out


def _name(p: Planned) -> str:
    assert p.result is not None
    return f"{p.result.kernel} [{p.result.variant}]"


def _limits(arch: int) -> tuple[int, int]:
    """(shared bytes a block may use, registers per SM) on the target."""
    limits = SM_LIMITS.get(arch) or SM_LIMITS.get(arch // 10 * 10) or SM_LIMITS[90]
    return limits[3] - limits[4], limits[2]


def _place(place: tuple[str, int, int] | None) -> Location | None:
    return Location(file=place[0], line=place[1], column=place[2]) if place else None


# fp32 data: plain tf32 truncates the inputs to 10 mantissa bits and fails an fp32 tolerance at every K
# measured (benchmarks/results/h100/fp32_matmul_precision.json); tf32x3 passes and runs on tensor cores.
_FP32_DOT_ADVICE = (
    "For fp32 data whose result must meet an fp32 tolerance, use input_precision='tf32x3' (tensor cores, passes "
    "fp32 validation; about 1.08x cuBLAS fp32 on an H100), not 'tf32', which fails it."
)


@COMPILED.check(COMPILE_FAILED, on="not-compiled")
def _compile_failed(p: Planned, arch: int) -> list[Hit]:
    return [
        (
            _E,
            f"{_name(p)} ran under the launcher but does not compile for sm_{arch}: {p.result.error}",  # type: ignore[union-attr]
            "Fix the construct the message names; it must compile for every GPU the kernel targets "
            "(`ptt compile` shows the error with its line).",
            p.extra.get("where"),
        )
    ]


@COMPILED.check(REGISTER_SPILL, on="compiled")
def _register_spill(p: Planned, arch: int) -> list[Hit]:
    k = p.result
    assert k is not None
    if not (k.spill_stores or 0) + (k.spill_loads or 0):
        return []
    return [
        (
            _W,
            f"{_name(p)}: ptxas spills {k.spill_stores or 0} B stores / {k.spill_loads or 0} B loads per thread at "
            f"{k.registers} registers — every spilled value goes to local memory and back",
            "Give each thread fewer live values: a smaller tile (BLOCK sizes) or more num_warps for the same "
            "tile, fewer values kept across a loop (recompute instead), or prune the configs that spill.",
            None,
        )
    ]


@COMPILED.check(LOCAL_MEMORY, on="compiled")
def _local_memory(p: Planned, arch: int) -> list[Hit]:
    k = p.result
    assert k is not None
    spill = (k.spill_stores or 0) + (k.spill_loads or 0)
    counts = k.instructions
    local = counts.get("local", 0) + (counts.get("LDL/STL", 0) if not spill else 0)
    if not local or spill:
        return []
    return [
        (
            _W,
            f"{_name(p)}: {local} local-memory accesses without register spills — a per-thread array indexed "
            "at run time lives in (slow) local memory",
            "Index register tiles only with compile-time positions (tl.static_range, tl.where over a "
            "constexpr range) and keep per-thread arrays small.",
            None,
        )
    ]


@COMPILED.check(LOW_OCCUPANCY_RULE, on="compiled")
def _low_occupancy(p: Planned, arch: int) -> list[Hit]:
    k = p.result
    assert k is not None
    occ = k.occupancy
    if occ is None or occ.fraction >= LOW_OCCUPANCY:
        return []
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
    why = " (tensor-core tiles often run at low occupancy; check that num_stages hides the latency)" if tensor else ""
    return [
        (
            severity,
            f"{_name(p)}: {occ.blocks_per_sm} program(s) × {k.num_warps} warps fit per SM = {occ.fraction:.0%} of "
            f"its warp slots, limited by {by}{why}",
            fixes.get(occ.limiter, "Launch more warps per program or more programs per SM."),
            None,
        )
    ]


@COMPILED.check(NOT_VECTORIZED, on="compiled")
def _not_vectorized(p: Planned, arch: int) -> list[Hit]:
    k = p.result
    assert k is not None
    rec = p.record
    if not (rec.get("aligned") and rec.get("ints_div16")):
        return []
    counts = k.instructions
    threads = 32 * max(1, k.num_warps)
    access = p.extra.get("access") or {}
    narrow = []
    for what, n, wide, key in (
        ("loads", counts.get("ld.global", 0), counts.get("ld.global.v4", 0) + counts.get("ld.global.v2", 0), "load"),
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
    if not narrow:
        return []
    loads, stores = counts.get("ld.global", 0), counts.get("st.global", 0)
    return [
        (
            _W,
            f"{_name(p)}: all {' and '.join(narrow)} are scalar ({loads} ld.global, {stores} st.global, none "
            "64/128-bit) although every pointer is 16-byte aligned, every integer argument a multiple of 16 "
            "and each thread owns several elements — the compiler could not prove the lanes contiguous",
            "Give each program a contiguous block: offsets `start + tl.arange(0, BLOCK)` with unit stride "
            "in the last dimension (no `% n`, no lanes strided by the grid); for offsets computed from "
            "data, state what holds with tl.multiple_of / tl.max_contiguous.",
            None,
        )
    ]


@COMPILED.check(DOT_NO_TENSOR_CORES, on="compiled")
def _dot_no_tensor_cores(p: Planned, arch: int) -> list[Hit]:
    k = p.result
    assert k is not None
    if not k.dots:
        return []
    tc = k.tensor_cores
    where = _place(p.extra.get("dot_where"))
    if arch >= 90 and tc in ("none", "mma.sync") and arch < 100:
        fell = (
            "mma.sync (Ampere's tensor-core path, a fraction of Hopper's wgmma rate)"
            if tc == "mma.sync"
            else ("FMA units (no tensor cores)")
        )
        return [
            (
                _W,
                f"{_name(p)}: {k.dots} tl.dot lowered to {fell}, not wgmma, on sm_{arch}",
                "For wgmma: fp16/bf16/fp8 operands, a tile M of at least 64 per 4 warps (num_warps a multiple of 4), "
                f"N and K multiples of 16. {_FP32_DOT_ADVICE}",
                where,
            )
        ]
    if tc == "none":
        return [
            (
                _W,
                f"{_name(p)}: {k.dots} tl.dot lowered to FMA units, no tensor-core instructions on sm_{arch}",
                f"Feed tl.dot fp16/bf16 operands and tiles of at least 16 in every dimension. {_FP32_DOT_ADVICE}",
                where,
            )
        ]
    return []


@COMPILED.check(FP64_MATH, on="compiled")
def _fp64_math(p: Planned, arch: int) -> list[Hit]:
    k = p.result
    assert k is not None
    counts = k.instructions
    fp64 = counts.get("fp64", 0) + counts.get("DFMA/DADD/DMUL", 0)
    if not fp64 or "fp64" in p.record.get("pointer_dtypes", []):
        return []
    return [
        (
            _W,
            f"{_name(p)}: {counts.get('fp64', 0)} fp64 PTX instructions ({counts.get('DFMA/DADD/DMUL', 0)} DFMA/DADD/"
            "DMUL in SASS) in a kernel whose tensors are not float64 — fp64 runs at 1/2 (H100) to 1/64 "
            "(consumer GPUs) of the fp32 rate",
            "Keep the math in fp32: remove .to(tl.float64) casts and tl.float64 constants/accumulators; "
            "accumulate in tl.float32.",
            _place(p.extra.get("f64_where")),
        )
    ]


@COMPILED.check(SHARED_MEMORY_NEAR_LIMIT, on="compiled")
def _shared_memory(p: Planned, arch: int) -> list[Hit]:
    k = p.result
    assert k is not None
    smem_limit, _ = _limits(arch)
    if k.shared_bytes < SMEM_NEAR * smem_limit:
        return []
    over = k.shared_bytes > smem_limit
    return [
        (
            _E if over else _W,
            f"{_name(p)}: {k.shared_bytes} B of shared memory per program, {k.shared_bytes / smem_limit:.0%} of "
            f"sm_{arch}'s {smem_limit} B per block"
            + (" — the launch fails with OutOfResources" if over else ": one program per SM, no headroom"),
            "Lower num_stages (each stage holds a copy of the input tiles) or the tile sizes.",
            None,
        )
    ]
