"""Autotune rules: configs and keys against the kernel's arguments and the launch sites.

Each check runs once per ``@triton.jit`` function (event ``kernel``: the module context, the function and
what its analysis learnt) or once per file (event ``module``).
"""

from __future__ import annotations

import difflib

from mcp_server.engine.audit.analysis.kernel import KernelFacts
from mcp_server.engine.audit.analysis.launches import config_names
from mcp_server.engine.audit.analysis.module import UNKNOWN, JitFunction
from mcp_server.engine.audit.rules.registry import STATIC, ModuleContext
from mcp_server.engine.models import Severity

MISSING_AUTOTUNE = STATIC.rule(
    "missing-autotune",
    "performance",
    Severity.info,
    "launched kernel with neither @triton.autotune nor @triton.heuristics: one config for all shapes and GPUs",
)
AUTOTUNE_KEY_INCOMPLETE = STATIC.rule(
    "autotune-key-incomplete",
    "performance",
    Severity.warning,
    "autotune key= leaves out the shape arguments the kernel masks or loops on",
)
AUTOTUNE_UNKNOWN_NAME = STATIC.rule(
    "autotune-unknown-name",
    "correctness",
    Severity.error,
    "autotune Config sets (or key= names) something that is not an argument of the kernel",
)
AUTOTUNE_FIXED_NUM_WARPS = STATIC.rule(
    "autotune-fixed-num-warps",
    "performance",
    Severity.info,
    "every autotune Config uses the same num_warps",
)
AUTOTUNE_CONFLICTING_META = STATIC.rule(
    "autotune-conflicting-meta",
    "correctness",
    Severity.error,
    "launcher passes a meta-parameter the autotuner also sets (ValueError: Conflicting meta-parameters)",
)


@STATIC.check(MISSING_AUTOTUNE, on="kernel")
def _missing(ctx: ModuleContext, jf: JitFunction, facts: KernelFacts) -> None:
    top_level = jf.launched or not jf.called_from_jit
    if top_level and not jf.autotunes and not jf.has_heuristics:
        ctx.report(
            MISSING_AUTOTUNE.id,
            jf.node,
            f"kernel {jf.name} has no @triton.autotune: one tile size and num_warps for every shape and GPU",
            "wrap it in `@triton.autotune(configs=[triton.Config({'BLOCK': b}, num_warps=w) ...], key=[<size "
            "args>])` and drop the fixed values from the launch",
            kernel=jf.name,
        )


@STATIC.check(AUTOTUNE_UNKNOWN_NAME, on="kernel")
def _unknown_names(ctx: ModuleContext, jf: JitFunction, facts: KernelFacts) -> None:
    params = set(jf.param_names)
    for at in jf.autotunes:
        unknown = [k for k in at.key if k not in params] if at.key is not None else []
        if unknown:
            ctx.report(
                AUTOTUNE_UNKNOWN_NAME.id,
                at.key_node or at.node,
                f"autotune key names {', '.join(map(repr, unknown))}, not an argument of {jf.name}; Triton "
                "silently leaves it out of the key",
                _did_you_mean(unknown[0], jf.param_names)
                or f"key on argument names of {jf.name}: {', '.join(sorted(params - set(jf.constexprs)))}",
                severity=Severity.warning,
                kernel=jf.name,
            )
        for cfg in at.configs or []:
            bad = [k for k in (cfg.meta or {}) if k not in params]
            if bad:
                ctx.report(
                    AUTOTUNE_UNKNOWN_NAME.id,
                    cfg.node,
                    f"triton.Config sets {', '.join(map(repr, bad))}, not an argument of {jf.name}: the launch "
                    'fails with "Keyword argument ... was specified but unrecognised"',
                    _did_you_mean(bad[0], list(jf.constexprs))
                    or f"rename it to a tl.constexpr parameter of {jf.name} or add it to the signature",
                    kernel=jf.name,
                )
    bad_heur = [h for h in jf.heuristics if h not in params]
    if bad_heur:
        ctx.report(
            AUTOTUNE_UNKNOWN_NAME.id,
            jf.node,
            f"@triton.heuristics sets {', '.join(map(repr, bad_heur))}, not an argument of {jf.name}",
            f"add `{bad_heur[0]}: tl.constexpr` to the signature or remove the heuristic",
            kernel=jf.name,
        )


@STATIC.check(AUTOTUNE_KEY_INCOMPLETE, on="kernel")
def _key_incomplete(ctx: ModuleContext, jf: JitFunction, facts: KernelFacts) -> None:
    params = set(jf.param_names)
    shape_args = {p for p in facts.shape_params if p in params and p not in jf.constexprs and "stride" not in p.lower()}
    for at in jf.autotunes:
        if at.key is None or any(k not in params for k in at.key):
            continue  # with a misspelt key, autotune-unknown-name already says what to fix
        missing = sorted(shape_args - set(at.key))
        if not missing:
            continue
        # A padded tile size in the key (BLOCK_N = next_pow2(n_cols)) stands in for its shape.
        proxies = shape_args | facts.extent_params | facts.shape_constexprs
        none_kept = not (proxies & set(at.key))
        ctx.report(
            AUTOTUNE_KEY_INCOMPLETE.id,
            at.key_node or at.node,
            f"autotune key {at.key} leaves out {', '.join(missing)}, which {jf.name} masks or loops on: "
            + (
                "the config tuned for the first shape is reused for every other"
                if none_kept
                else "configs are not re-tuned when only those change"
            ),
            f"add them: key={sorted(set(at.key) | set(missing))}",
            severity=None if none_kept else Severity.info,
            kernel=jf.name,
        )


@STATIC.check(AUTOTUNE_FIXED_NUM_WARPS, on="kernel")
def _fixed_num_warps(ctx: ModuleContext, jf: JitFunction, facts: KernelFacts) -> None:
    for at in jf.autotunes:
        if at.configs is None or len(at.configs) < 2:
            continue
        warps = {4 if c.num_warps is None else c.num_warps for c in at.configs}
        if UNKNOWN not in warps and len(warps) == 1:
            ctx.report(
                AUTOTUNE_FIXED_NUM_WARPS.id,
                at.node,
                f"all {len(at.configs)} configs of {jf.name} use num_warps={warps.pop()}; the best warp "
                "count changes with the tile size",
                "give the configs a spread of num_warps (e.g. 2, 4, 8) paired with their tile sizes",
                kernel=jf.name,
            )


@STATIC.check(AUTOTUNE_CONFLICTING_META, on="module")
def _conflicting_meta(ctx: ModuleContext) -> None:
    for launcher in ctx.mod.launchers:
        for site in launcher.launches:
            if site.kernel is None or not site.autotuned:
                continue
            tuned: set[str] = set()
            for at in site.kernel.autotunes:
                tuned |= config_names(ctx.mod, at) or set()
            passed = {kw.arg for kw in site.call.keywords if kw.arg}
            clash = sorted(passed & tuned)
            if clash:
                ctx.report(
                    AUTOTUNE_CONFLICTING_META.id,
                    site.call,
                    f"the launch passes {', '.join(clash)}, which the autotune configs of {site.kernel.name} also "
                    'set: Triton raises "Conflicting meta-parameters"',
                    f"drop {', '.join(f'{c}=' for c in clash)} from the launch and let the autotuner choose",
                    kernel=site.kernel.name,
                )


def _did_you_mean(name: str, candidates: list[str]) -> str | None:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.3)
    return f"did you mean {close[0]!r}? use the parameter's exact name" if close else None
