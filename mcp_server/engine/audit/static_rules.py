"""The rule registry of the static audit: every check's id, category, default severity and summary.

Ids are stable (tests, docs and suppression comments name them). A finding may carry a lower or higher
severity than its rule's default where the message says why (e.g. ``dot-small-tile`` is an error for
K < 16, which does not compile, and info for M or N < 16, which only wastes the tensor cores).
"""

from __future__ import annotations

from mcp_server.engine.audit.static_models import Rule
from mcp_server.engine.models import Severity

_E, _W, _I = Severity.error, Severity.warning, Severity.info

RULES: list[Rule] = [
    # ---- inside @triton.jit functions
    Rule(
        id="unmasked-access",
        category="memory",
        severity=_E,
        summary="tl.load/tl.store/atomic with tile offsets that can run past the tensor and no mask or boundary_check",
    ),
    Rule(
        id="non-neutral-other",
        category="correctness",
        severity=_E,
        summary="masked lanes padded with a value that changes the reduction consuming them (other=0 before "
        "tl.max, -inf or no other= before tl.sum/tl.dot)",
    ),
    Rule(
        id="exp-without-max-shift",
        category="numerics",
        severity=_E,
        summary="tl.exp/tl.exp2 of data not shifted by its max flows into a sum (softmax/logsumexp overflow)",
    ),
    Rule(
        id="low-precision-accumulator",
        category="numerics",
        severity=_E,
        summary="accumulation in fp16/bf16: fp16 tl.zeros accumulator, tl.dot(out_dtype=fp16), tl.sum of fp16 values",
    ),
    Rule(
        id="unguarded-division",
        category="numerics",
        severity=_W,
        summary="division (or rsqrt) by a loaded value or a reduction that can be 0, with no epsilon or tl.where guard",
    ),
    Rule(
        id="int32-offset-overflow",
        category="memory",
        severity=_W,
        summary="program_id (int32) multiplied by a block size or stride before any int64 cast: wraps past "
        "2**31 elements",
    ),
    Rule(
        id="arange-non-pow2",
        category="correctness",
        severity=_E,
        summary="tl.arange extent (or tl.zeros/tl.full shape) that is not a power of 2: does not compile",
    ),
    Rule(
        id="arange-extent-not-constexpr",
        category="correctness",
        severity=_E,
        summary="tl.arange bound that is a runtime argument instead of a tl.constexpr: does not compile",
    ),
    Rule(
        id="hardcoded-tile-size",
        category="practice",
        severity=_W,
        summary="tile size written as a literal in tl.arange instead of a tl.constexpr parameter (untunable)",
    ),
    Rule(
        id="dot-small-tile",
        category="correctness",
        severity=_E,
        summary="tl.dot with K < 16 (does not compile on NVIDIA) or M/N < 16 (wastes the tensor cores)",
    ),
    Rule(
        id="static-range-runtime-bound",
        category="correctness",
        severity=_E,
        summary="tl.static_range over a runtime bound: static_range needs tl.constexpr bounds",
    ),
    Rule(
        id="break-continue-unsupported",
        category="correctness",
        severity=_E,
        summary="break/continue in @triton.jit code, which the installed Triton rejects",
    ),
    Rule(
        id="debug-leftover",
        category="practice",
        severity=_W,
        summary="tl.device_print/print, tl.static_print, tl.device_assert or tl.debug_barrier left in a kernel",
    ),
    # ---- autotuning
    Rule(
        id="missing-autotune",
        category="performance",
        severity=_I,
        summary="launched kernel with neither @triton.autotune nor @triton.heuristics: one config for all "
        "shapes and GPUs",
    ),
    Rule(
        id="autotune-key-incomplete",
        category="performance",
        severity=_W,
        summary="autotune key= leaves out the shape arguments the kernel masks or loops on",
    ),
    Rule(
        id="autotune-unknown-name",
        category="correctness",
        severity=_E,
        summary="autotune Config sets (or key= names) something that is not an argument of the kernel",
    ),
    Rule(
        id="autotune-fixed-num-warps",
        category="performance",
        severity=_I,
        summary="every autotune Config uses the same num_warps",
    ),
    Rule(
        id="autotune-conflicting-meta",
        category="correctness",
        severity=_E,
        summary="launcher passes a meta-parameter the autotuner also sets (ValueError: Conflicting meta-parameters)",
    ),
    # ---- launchers (Python functions that launch a kernel)
    Rule(
        id="torch-compute-in-launcher",
        category="performance",
        severity=_W,
        summary="torch compute (matmul, softmax, @, .sum(), .exp(), …) in a launcher, doing the kernel's job",
    ),
    Rule(
        id="try-except-fallback",
        category="correctness",
        severity=_E,
        summary="try: around a kernel launch whose except computes the result with torch instead",
    ),
    Rule(
        id="host-sync-in-launcher",
        category="performance",
        severity=_W,
        summary=".item()/.cpu()/.tolist()/.numpy()/torch.cuda.synchronize() in a launcher: stalls the stream",
    ),
    Rule(
        id="hardcoded-grid",
        category="correctness",
        severity=_E,
        summary="launch grid of literal sizes (kernel[(1024,)]) instead of triton.cdiv over the input size",
    ),
]

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
