"""Static audit of Triton code: AST analysis of a file's kernels and launchers, with no GPU and no execution.

The user's file is parsed, never imported or run (it is untrusted). Every ``@triton.jit`` function
(autotuned and heuristics-wrapped ones included, however ``triton``/``tl`` were imported) is walked by
the abstract interpreter (``analysis.kernel``), whose events the kernel rules check; then the autotune rules
run per kernel and the launcher rules per Python function that launches a kernel (``kernel[grid](...)``).
The rules, one module per family, are in ``rules``; :data:`RULES` lists them.

A finding can be silenced on its line with ``# ptt-audit: ignore[rule-id]`` (or ``# ptt-audit: ignore`` for
every rule), for the cases where the code is right for a reason the analysis cannot see.

Usage::

    report = analyze_file("my_kernels.py")
    for f in report.findings:
        print(f)  # my_kernels.py:12:9: error [unmasked-access] tl.load has no mask: ...
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

from mcp_server.engine.audit.analysis.kernel import KernelFacts, KernelInterpreter
from mcp_server.engine.audit.analysis.launches import LaunchFacts
from mcp_server.engine.audit.analysis.module import ModuleIndex
from mcp_server.engine.audit.rules import RULES, RULES_BY_ID, STATIC, ModuleContext
from mcp_server.engine.audit.static_models import AuditFinding, StaticAnalysisError, StaticReport
from mcp_server.engine.models import Severity
from mcp_server.engine.pyast import parse_python

_SUPPRESS = re.compile(r"#\s*ptt-audit:\s*ignore(?:\[([^\]]*)\])?")


def analyze_file(path: str | Path, rules: Iterable[str] | None = None) -> StaticReport:
    """Audit a Python file's Triton kernels and launchers without importing it.

    Raises :class:`StaticAnalysisError` (with ``file:line``) when the file is missing, not text, or not
    valid Python.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise StaticAnalysisError(str(path), "no such file") from None
    except IsADirectoryError:
        raise StaticAnalysisError(str(path), "is a directory; pass a .py file") from None
    except OSError as e:
        raise StaticAnalysisError(str(path), f"cannot read: {e.strerror or e}") from None
    try:
        text = importlib.util.decode_source(data)
    except (UnicodeDecodeError, SyntaxError, LookupError) as e:
        raise StaticAnalysisError(str(path), f"not a UTF-8 (or declared-encoding) Python source: {e}") from None
    return analyze_source(text, str(path), rules=rules)


def analyze_source(text: str, filename: str = "<source>", rules: Iterable[str] | None = None) -> StaticReport:
    """Audit Python source text; ``filename`` is used in locations. ``rules`` limits the rules run."""
    selected = _select(rules)
    try:
        tree = parse_python(text, filename=filename)
    except SyntaxError as e:
        where_text = (e.text or "").strip()
        detail = f"{e.msg}" + (f": `{where_text}`" if where_text else "")
        raise StaticAnalysisError(filename, f"SyntaxError: {detail}", e.lineno, e.offset) from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise StaticAnalysisError(filename, f"cannot parse: {e}") from None

    mod = ModuleIndex(tree, text, filename)
    found: dict[tuple, AuditFinding] = {}
    notes: list[str] = []

    def report(
        rule: str,
        node: ast.AST,
        message: str,
        fix: str,
        severity: Severity | None = None,
        kernel: str | None = None,
    ) -> None:
        if rule not in selected:
            return
        spec = RULES_BY_ID[rule]
        where = mod.loc(node)
        key = (rule, where.line, where.column)
        if key in found:
            return
        found[key] = AuditFinding(
            rule=rule,
            category=spec.category,
            severity=severity or spec.severity,
            message=message,
            fix=fix,
            where=where,
            kernel=kernel,
        )

    launches = LaunchFacts(mod)
    # Two passes: the first (silent) learns what each helper masks and loops on, so that the second sees
    # the sizes a kernel hands to its helpers.
    facts: dict[str, KernelFacts] = {}
    for final in (False, True):
        sink = report if final else _ignore
        learnt: dict[str, KernelFacts] = {}
        for jf in mod.jit.values():
            try:
                learnt[jf.name] = KernelInterpreter(mod, jf, sink, STATIC, launches, facts).run()
            except (RecursionError, Exception) as e:  # one odd kernel must not sink the report
                if final:
                    notes.append(f"{jf.name} (line {jf.node.lineno}) was only partly analysed: {type(e).__name__}: {e}")
                learnt[jf.name] = KernelFacts()
        facts = learnt
    ctx = ModuleContext(mod, facts, report, {lf.node.name for lf in mod.launchers})
    for jf in mod.jit.values():
        STATIC.emit("kernel", ctx, jf, facts[jf.name])
    STATIC.emit("module", ctx)
    try:
        for lf in mod.launchers:
            STATIC.emit("launcher", ctx, lf)
    except (RecursionError, Exception) as e:
        notes.append(f"launchers were only partly analysed: {type(e).__name__}: {e}")

    findings = [f for f in found.values() if not _suppressed(f, mod.lines)]
    findings.sort(key=lambda f: (f.where.line or 0, f.where.column or 0, f.rule))
    if not mod.jit:
        notes.insert(0, "no @triton.jit function in this file: nothing to audit")
    return StaticReport(
        file=filename,
        kernels=sorted(mod.jit, key=lambda n: mod.jit[n].node.lineno),
        launchers=[lf.name for lf in mod.launchers],
        findings=findings,
        rules_run=[r.id for r in RULES if r.id in selected],
        notes=notes,
    )


def _ignore(*args: object, **kwargs: object) -> None:
    return None


def _select(rules: Iterable[str] | None) -> set[str]:
    if rules is None:
        return set(RULES_BY_ID)
    chosen = set(rules)
    unknown = sorted(chosen - set(RULES_BY_ID))
    if unknown:
        raise ValueError(f"unknown audit rule(s) {', '.join(unknown)}; known: {', '.join(RULES_BY_ID)}")
    return chosen


def _suppressed(f: AuditFinding, lines: list[str]) -> bool:
    line = f.where.line
    if not line or line > len(lines):
        return False
    m = _SUPPRESS.search(lines[line - 1])
    if m is None:
        return False
    if m.group(1) is None:
        return True
    return f.rule in {r.strip() for r in m.group(1).split(",")}


__all__ = [
    "RULES",
    "AuditFinding",
    "StaticAnalysisError",
    "StaticReport",
    "analyze_file",
    "analyze_source",
]
