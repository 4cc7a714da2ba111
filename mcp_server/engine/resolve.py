"""One rule for an ``inputs`` text, whichever face or engine function receives it.

``inputs`` is either a type list (``'bf16[4096,N], f32[8192], i32=7'``, kept as text: its symbols may be bound
later by ``sizes``) or a file spec (``path.py:make_inputs``, resolved to an absolute path the isolated child
can import). :func:`mcp_server.engine.inputs.looks_like_type_list` tells them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mcp_server.engine.inputs import looks_like_type_list, parse_type_list
from mcp_server.engine.specs import parse_spec


@dataclass(frozen=True)
class ResolvedInputs:
    """``value``: the text to hand on (None: the reference's own inputs); ``files``: user files it reads."""

    value: str | None
    files: list[str] = field(default_factory=list)
    type_list: bool = False


def resolve_inputs(
    text: str | None, *, check: bool = False, cwd: Path | None = None, role: str = "inputs"
) -> ResolvedInputs:
    """Classify and resolve an ``inputs`` text. ``check``: parse a type list now (UsageError naming the bad
    item) — for type lists without symbols, e.g. where no ``sizes`` can follow. ``role`` names the option in
    errors (compile calls it ``args``)."""
    if not text or not text.strip():
        return ResolvedInputs(None)
    text = text.strip()
    if looks_like_type_list(text):
        if check:
            parse_type_list(text)
        return ResolvedInputs(text, type_list=True)
    spec = parse_spec(text, role=role, cwd=cwd)
    return ResolvedInputs(str(spec), [str(spec.path)])
