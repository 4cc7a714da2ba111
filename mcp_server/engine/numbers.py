"""How results print a measured number: the one rule the CLI's tables and the audit's Markdown share."""

from __future__ import annotations


def fmt_number(x: float | None, digits: int = 3) -> str:
    """``-`` for none, ``0`` for zero, scientific notation outside [1e-3, 1e4), else ``digits`` significant."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"
