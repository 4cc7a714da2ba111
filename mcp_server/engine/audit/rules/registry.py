"""The rule registry: every audit rule's id, category and default severity, and the functions that check it.

A rule family module declares its rules with :meth:`Registry.rule` and registers one check function per
rule and event with :meth:`Registry.check`. The analysis that drives the checks (the abstract interpreter
for kernel rules, the module walk for autotune and launcher rules, the compiled-code reader) calls
:meth:`Registry.emit` at each event with what it knows there; a check reports through the context it is
handed and keeps no state between files.

Ids are stable (tests, docs and suppression comments name them). A finding may carry a lower or higher
severity than its rule's default where the message says why (e.g. ``dot-small-tile`` is an error for
K < 16, which does not compile, and info for M or N < 16, which only wastes the tensor cores).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_server.engine.audit.static_models import Category, Rule
from mcp_server.engine.models import Severity


@dataclass(frozen=True)
class Check:
    """One check function of one rule, called at one event of the analysis."""

    rule: str
    event: str
    fn: Callable[..., Any]


@dataclass
class Registry:
    """Rules of one part of the audit (static or compiled) and their checks, in registration order."""

    events: frozenset[str]
    rules: dict[str, Rule] = field(default_factory=dict)
    checks: dict[str, list[Check]] = field(default_factory=dict)

    def rule(self, id: str, category: Category, severity: Severity, summary: str) -> Rule:
        if id in self.rules:
            raise ValueError(f"audit rule {id!r} is registered twice")
        spec = Rule(id=id, category=category, severity=severity, summary=summary)
        self.rules[id] = spec
        return spec

    def check(self, rule: Rule, on: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: call the function at event ``on`` (see the analysis module for each event's arguments)."""
        if on not in self.events:
            raise ValueError(f"unknown event {on!r} for rule {rule.id}; known: {', '.join(sorted(self.events))}")
        if self.rules.get(rule.id) is not rule:
            raise ValueError(f"rule {rule.id!r} is not declared in this registry")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.checks.setdefault(on, []).append(Check(rule.id, on, fn))
            return fn

        return register

    def checks_for(self, event: str) -> list[Check]:
        return self.checks.get(event, [])

    def emit(self, event: str, *args: Any) -> None:
        """Run every check registered for ``event`` with ``args``."""
        for c in self.checks.get(event, ()):
            c.fn(*args)


# Events of the static analysis. Kernel events receive the kernel interpreter first
# (``mcp_server.engine.audit.analysis.kernel``, which documents each event's arguments); ``kernel`` and
# ``launcher`` receive a :class:`ModuleContext`.
KERNEL_EVENTS = frozenset(
    {
        "access",  # a tl.load/tl.store/atomic: (k, AccessEvent)
        "accumulate",  # `acc += x` / `acc = acc + x`: (k, name, op, stmt)
        "arange",  # tl.arange: (k, call, start_node, end_node, start, end, dim)
        "break",  # break/continue: (k, stmt)
        "debug",  # tl.device_print & co: (k, op, call)
        "division",  # x / d, rsqrt(d): (k, node, divisor_node, divisor)
        "dot",  # tl.dot / @: (k, node, a, b, acc, out_dtype)
        "filled_dim",  # a literal dimension of tl.zeros/tl.full: (k, call, dim)
        "finish",  # the whole body was walked: (k,)
        "reduction",  # tl.sum/max/min/...: (k, op, call, x, axis, dtype)
        "static_range",  # tl.static_range: (k, call, args)
    }
)
MODULE_EVENTS = frozenset({"kernel", "module", "launcher"})

STATIC = Registry(KERNEL_EVENTS | MODULE_EVENTS)
COMPILED = Registry(frozenset({"compiled", "not-compiled"}))


@dataclass
class ModuleContext:
    """What the autotune and launcher checks see: the module index, each kernel's facts, the report sink."""

    mod: Any  # analysis.module.ModuleIndex
    facts: dict[str, Any]  # kernel name → analysis.kernel.KernelFacts
    report: Callable[..., None]
    launcher_names: set[str] = field(default_factory=set)
