"""Audit of Triton code. Static part: AST rules over kernels and launchers, no GPU, no execution."""

from mcp_server.engine.audit.static import analyze_file, analyze_source
from mcp_server.engine.audit.static_models import AuditFinding, Rule, StaticAnalysisError, StaticReport
from mcp_server.engine.audit.static_rules import RULES

__all__ = [
    "RULES",
    "AuditFinding",
    "Rule",
    "StaticAnalysisError",
    "StaticReport",
    "analyze_file",
    "analyze_source",
]
