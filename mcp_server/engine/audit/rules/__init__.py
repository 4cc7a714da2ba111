"""The audit's rules, one module per family, each rule registered with its check functions.

Static rules (read from the AST, no GPU) are checked at the events of the abstract interpreter
(``analysis.kernel``) and of the module walk; compiled-code rules at each compiled kernel variant.

=============  ====================================================================================
family         rules
=============  ====================================================================================
memory         unmasked-access, int32-offset-overflow
padding        non-neutral-other
numerics       exp-without-max-shift, low-precision-accumulator, unguarded-division
shapes         arange-non-pow2, arange-extent-not-constexpr, hardcoded-tile-size, dot-small-tile
language       static-range-runtime-bound, break-continue-unsupported, undefined-name, debug-leftover
autotune       missing-autotune, autotune-key-incomplete, autotune-unknown-name,
               autotune-fixed-num-warps, autotune-conflicting-meta
launcher       torch-compute-in-launcher, try-except-fallback, host-sync-in-launcher, hardcoded-grid
compiled       compile-failed, register-spill, local-memory, low-occupancy, not-vectorized,
               dot-no-tensor-cores, fp64-math, shared-memory-near-limit
=============  ====================================================================================
"""

from __future__ import annotations

from mcp_server.engine.audit.rules import (  # noqa: F401  (importing a family registers its rules)
    autotune,
    compiled,
    language,
    launcher,
    memory,
    numerics,
    padding,
    shapes,
)
from mcp_server.engine.audit.rules.registry import COMPILED, STATIC, Check, ModuleContext, Registry
from mcp_server.engine.audit.static_models import Rule

# The order rules are listed in (reports' rules_run, docs): kernel rules by how much a hit costs, then the
# autotune and launcher rules.
_STATIC_ORDER = (
    "unmasked-access",
    "non-neutral-other",
    "exp-without-max-shift",
    "low-precision-accumulator",
    "unguarded-division",
    "int32-offset-overflow",
    "arange-non-pow2",
    "arange-extent-not-constexpr",
    "hardcoded-tile-size",
    "dot-small-tile",
    "static-range-runtime-bound",
    "break-continue-unsupported",
    "undefined-name",
    "debug-leftover",
    "missing-autotune",
    "autotune-key-incomplete",
    "autotune-unknown-name",
    "autotune-fixed-num-warps",
    "autotune-conflicting-meta",
    "torch-compute-in-launcher",
    "try-except-fallback",
    "host-sync-in-launcher",
    "hardcoded-grid",
)
if set(_STATIC_ORDER) != set(STATIC.rules) or len(_STATIC_ORDER) != len(STATIC.rules):
    raise RuntimeError("every static rule must be listed once in _STATIC_ORDER")

RULES: list[Rule] = [STATIC.rules[r] for r in _STATIC_ORDER]
RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
COMPILED_RULES: list[Rule] = list(COMPILED.rules.values())
COMPILED_RULES_BY_ID: dict[str, Rule] = dict(COMPILED.rules)

__all__ = [
    "COMPILED",
    "COMPILED_RULES",
    "COMPILED_RULES_BY_ID",
    "RULES",
    "RULES_BY_ID",
    "STATIC",
    "Check",
    "ModuleContext",
    "Registry",
]
