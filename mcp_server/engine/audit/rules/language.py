"""Language rules inside kernels: constructs the installed Triton rejects, debugging left behind."""

from __future__ import annotations

import ast
import builtins
import functools
from typing import Any

from mcp_server.engine.audit.analysis.module import UNKNOWN
from mcp_server.engine.audit.analysis.values import Val
from mcp_server.engine.audit.rules.registry import STATIC
from mcp_server.engine.models import Severity

STATIC_RANGE_RUNTIME_BOUND = STATIC.rule(
    "static-range-runtime-bound",
    "correctness",
    Severity.error,
    "tl.static_range over a runtime bound: static_range needs tl.constexpr bounds",
)
BREAK_CONTINUE_UNSUPPORTED = STATIC.rule(
    "break-continue-unsupported",
    "correctness",
    Severity.error,
    "break/continue in @triton.jit code, which the installed Triton rejects",
)
DEBUG_LEFTOVER = STATIC.rule(
    "debug-leftover",
    "practice",
    Severity.warning,
    "tl.device_print/print, tl.static_print, tl.device_assert or tl.debug_barrier left in a kernel",
)

UNDEFINED_NAME = STATIC.rule(
    "undefined-name",
    "correctness",
    Severity.error,
    "a name in @triton.jit code that nothing in the file defines or imports: the kernel cannot compile",
)

# Names every module has without binding them.
_MODULE_NAMES = frozenset({"__name__", "__file__", "__doc__", "__spec__", "__package__", "__loader__", "__builtins__"})
# A file that reaches names this check cannot see (a star import, names made at run time) is not checked.
_DYNAMIC = frozenset({"exec", "eval", "globals", "vars", "__import__"})

_DEBUG = {
    "device_print": (Severity.warning, "prints from every program at run time and serialises the kernel"),
    "print": (Severity.warning, "is tl.device_print inside a kernel: prints from every program and serialises it"),
    "static_print": (Severity.info, "prints at every compilation"),
    "device_assert": (Severity.info, "is compiled out unless TRITON_DEBUG=1, so it checks nothing in production"),
    "debug_barrier": (
        Severity.info,
        "synchronises all threads of the program; needed only around cross-thread shared data",
    ),
}


@functools.lru_cache(maxsize=1)
def installed_triton_rejects_break() -> bool:
    """True when the installed Triton's code generator has no support for break/continue (3.6 has none)."""
    try:
        from triton.compiler.code_generator import CodeGenerator
    except Exception:  # no usable Triton: assume the versions this project supports (3.4-3.6)
        return True
    return not (hasattr(CodeGenerator, "visit_Break") and hasattr(CodeGenerator, "visit_Continue"))


@functools.lru_cache(maxsize=1)  # one file's kernels are checked one after another
def _names_made_at_run_time(mod: Any) -> bool:
    return any(
        (isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names))
        or (isinstance(n, ast.Name) and n.id in _DYNAMIC)
        for n in mod.nodes
    )


@STATIC.check(UNDEFINED_NAME, on="kernel")
def _undefined_names(ctx: Any, jf: Any, facts: Any) -> None:
    """A name a kernel reads that no parameter, local, import or module-level binding in the file provides, nor
    Python's builtins: Triton's code generator raises NameError when it compiles the kernel."""
    mod = ctx.mod
    if _names_made_at_run_time(mod):
        return
    known = set(mod.aliases) | mod.bound_names | set(dir(builtins)) | _MODULE_NAMES
    seen: set[str] = set()
    for part in (*jf.node.body, jf.node.args):
        for node in ast.walk(part):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known | seen:
                seen.add(node.id)
                ctx.report(
                    UNDEFINED_NAME.id,
                    node,
                    f"`{node.id}` in kernel {jf.name} is defined nowhere in this file (no parameter, local, import "
                    "or module-level name has it): Triton fails to compile the kernel with a NameError",
                    "define or import it, or pass it to the kernel as a parameter (a tl.constexpr for a value "
                    "fixed at compile time)",
                    kernel=jf.name,
                )


@STATIC.check(STATIC_RANGE_RUNTIME_BOUND, on="static_range")
def _static_range(k, node: ast.Call, args: list[Val]) -> None:
    for a_node, v in zip(node.args, args, strict=True):
        if (v.runtime or v.pid or v.data) and v.constexpr is None and v.const is UNKNOWN:
            k.report(
                STATIC_RANGE_RUNTIME_BOUND.id,
                node,
                f"tl.static_range bound `{ast.unparse(a_node)}` is not a tl.constexpr; static_range unrolls "
                "at compile time and Triton rejects runtime bounds",
                "use `range(...)`/`tl.range(...)` for a runtime trip count, or make the bound a tl.constexpr",
            )
            return


@STATIC.check(BREAK_CONTINUE_UNSUPPORTED, on="break")
def _break(k, s: ast.stmt) -> None:
    if not installed_triton_rejects_break():
        return
    word = "break" if isinstance(s, ast.Break) else "continue"
    k.report(
        BREAK_CONTINUE_UNSUPPORTED.id,
        s,
        f"`{word}` in @triton.jit code: the installed Triton rejects it "
        f'("unsupported AST node type: {word.capitalize()}")',
        "turn the early exit into the loop condition (`while i < n and not done:`) or mask the rest of the "
        "body with tl.where",
    )


@STATIC.check(DEBUG_LEFTOVER, on="debug")
def _debug(k, op: str, node: ast.Call) -> None:
    severity, note = _DEBUG[op]
    name = "print" if op == "print" else f"tl.{op}"
    k.report(
        DEBUG_LEFTOVER.id,
        node,
        f"{name} left in the kernel: it {note}",
        f"remove the {name} call"
        + (" (or keep it and say in a comment what it synchronises)" if op == "debug_barrier" else ""),
        severity=severity,
    )
