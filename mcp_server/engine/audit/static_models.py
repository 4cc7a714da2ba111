"""Typed results of the static audit: one finding per defect, a report per file, and the rule type.

A finding names the rule that produced it, the place (``file:line:column``, 1-based like compilers and
editors print them) and the concrete change that fixes it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mcp_server.engine.models import FindingKind, Location, Severity

Category = Literal["correctness", "performance", "memory", "numerics", "practice"]
CATEGORIES: tuple[Category, ...] = ("correctness", "performance", "memory", "numerics", "practice")


class Rule(BaseModel):
    """One static check: what it detects, in one line, and how bad a hit is by default."""

    model_config = ConfigDict(frozen=True)

    id: str
    category: Category
    severity: Severity
    summary: str


class AuditFinding(BaseModel):
    rule: str
    category: Category
    severity: Severity
    message: str  # one line: what is wrong and why it matters
    fix: str  # the concrete change
    where: Location
    kernel: str | None = None  # the @triton.jit function concerned (the launched one, for launcher rules)
    # Which part of the audit found it: the AST rules, the compiled code, the correctness suite or the bench.
    section: Literal["static", "compiled", "correctness", "performance"] = "static"
    kind: FindingKind | None = None  # for findings of validate/bench: their kind

    def __str__(self) -> str:
        return f"{self.where}: {self.severity.value} [{self.rule}] {self.message}"


class StaticReport(BaseModel):
    file: str
    kernels: list[str] = Field(default_factory=list)  # @triton.jit functions, helpers included
    launchers: list[str] = Field(default_factory=list)  # Python functions that launch a kernel
    findings: list[AuditFinding] = Field(default_factory=list)
    rules_run: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # e.g. "no @triton.jit function in this file"

    @property
    def errors(self) -> list[AuditFinding]:
        return [f for f in self.findings if f.severity is Severity.error]

    def by_rule(self, rule: str) -> list[AuditFinding]:
        return [f for f in self.findings if f.rule == rule]


class StaticAnalysisError(Exception):
    """The file cannot be analysed (missing, not UTF-8, not valid Python). The message names the place."""

    def __init__(self, file: str, message: str, line: int | None = None, column: int | None = None):
        self.file = file
        self.line = line
        self.column = column
        self.message = message
        where = Location(file=file, line=line, column=column)
        super().__init__(f"{where}: {message}")
