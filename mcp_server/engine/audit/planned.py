"""One planned compile of the audit's compiled section: what ``audit.compiled`` plans and the compiled-code
rules (``rules.compiled``) read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_server.engine.audit.models import CompiledKernel


@dataclass
class Planned:
    """One compile: a launch record and one of its variants."""

    record: dict[str, Any]
    variant: dict[str, Any]
    group: int  # variants of one launch record share a group (autotune candidates)
    pressure: float = 0.0
    tile: int = 1
    result: CompiledKernel | None = None
    ttir: str = ""
    ptx: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
