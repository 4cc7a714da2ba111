"""Audit of Triton code: static AST rules, the compiled kernels, the correctness suite and the timings.

``audit(file, reference=…)`` runs every section and returns an :class:`AuditReport`;
``render_markdown(report)`` writes it as the review a person reads. The static part alone
(``analyze_file``) needs no GPU and runs nothing.
"""

from mcp_server.engine.audit.core import audit
from mcp_server.engine.audit.dynamic import SUITE, TRANSFORMS
from mcp_server.engine.audit.models import SECTIONS, AuditReport
from mcp_server.engine.audit.render import render_markdown
from mcp_server.engine.audit.rules import COMPILED_RULES, COMPILED_RULES_BY_ID, RULES
from mcp_server.engine.audit.static import analyze_file, analyze_source
from mcp_server.engine.audit.static_models import AuditFinding, Rule, StaticAnalysisError, StaticReport

# Every rule id an audit finding can carry besides the validate/bench finding kinds.
ALL_RULES = [*RULES, *COMPILED_RULES]

__all__ = [
    "ALL_RULES",
    "COMPILED_RULES",
    "COMPILED_RULES_BY_ID",
    "RULES",
    "SECTIONS",
    "SUITE",
    "TRANSFORMS",
    "AuditFinding",
    "AuditReport",
    "Rule",
    "StaticAnalysisError",
    "StaticReport",
    "analyze_file",
    "analyze_source",
    "audit",
    "render_markdown",
]
