"""Markdown for a terminal: a small renderer for the CLI's text mode (docs search, audit reports).

The structure is always rendered: fences, heading hashes, emphasis markers and link syntax go; code blocks
are indented under a bar, headings underlined, list bullets drawn. Styles (bold, italic, colour) are ANSI
escapes, added only when ``style`` is true — the CLI passes ``stdout.isatty()`` and honours ``NO_COLOR``,
so a pipe (an agent's shell, a log file) gets clean text. Inline code keeps its backticks without styles,
as they are the only mark of code left in plain text. ``--json`` output never comes through here.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

BOLD, ITALIC, UNDERLINE, DIM, CYAN, RESET = "\033[1m", "\033[3m", "\033[4m", "\033[2m", "\033[36m", "\033[0m"

_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_QUOTE = re.compile(r"^\s*>\s?(.*)$")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
# Inline: code spans first (their content is literal), then links, bold, italic.
_INLINE = re.compile(
    r"(?P<code>`+)(?P<code_text>.+?)(?P=code)"
    r"|\[(?P<link_text>[^\]]+)\]\((?P<link_url>[^)\s]+)\)"
    r"|\*\*(?P<bold>.+?)\*\*|__(?P<bold2>.+?)__"
    r"|(?<![\w*])\*(?P<em>[^*\s](?:[^*]*[^*\s])?)\*(?![\w*])"
    r"|(?<![\w_])_(?P<em2>[^_\s](?:[^_]*[^_\s])?)_(?![\w_])"
)
# A search hit's highlight (FTS5 wraps each matched token in **): a token, no spaces inside.
_HIGHLIGHT = re.compile(r"\*\*([\w.]+)\*\*")
# A fenced block squeezed onto one line (search snippets collapse whitespace): ```python code ```
_INLINE_FENCE = re.compile(r"```([\w+-]*)\s(.*?)(?:```|$)")


def use_style(stream: TextIO | None = None) -> bool:
    """Styles for a terminal that wants them: a TTY, NO_COLOR unset, TERM not 'dumb'."""
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _wrap(text: str, code: str, style: bool) -> str:
    return f"{code}{text}{RESET}" if style else text


def inline(text: str, style: bool, code_style: str = CYAN) -> str:
    """Render the inline Markdown of one line."""

    def sub(m: re.Match[str]) -> str:
        if m.group("code_text") is not None:
            body = m.group("code_text").strip()
            if style:
                # search highlights (**word**) may sit inside code: show them as bold code
                body = _HIGHLIGHT.sub(lambda h: f"{BOLD}{h.group(1)}{RESET}{code_style}", body)
                return f"{code_style}{body}{RESET}"
            return "`" + _HIGHLIGHT.sub(r"\1", body) + "`"
        if m.group("link_text") is not None:
            label, url = inline(m.group("link_text"), style), m.group("link_url")
            return label if label == url else f"{label} ({_wrap(url, UNDERLINE, style)})"
        if (bold := m.group("bold") or m.group("bold2")) is not None:
            return _wrap(inline(bold, style), BOLD, style)
        return _wrap(inline(m.group("em") or m.group("em2"), style), ITALIC, style)

    return _INLINE.sub(sub, text)


def code_line(text: str, style: bool, highlights: bool = False) -> str:
    """One line of a code block; ``highlights``: a search snippet's **token** marks (shown bold, or dropped)."""
    if highlights:
        text = _HIGHLIGHT.sub(lambda h: f"{BOLD}{h.group(1)}{RESET}{DIM}" if style else h.group(1), text)
    if style:
        return f"  {DIM}│{RESET} {DIM}{text}{RESET}"
    return f"  │ {text}"


def heading(text: str, level: int, style: bool) -> list[str]:
    body = inline(text, False)
    if style:
        return [f"{BOLD}{UNDERLINE if level <= 2 else ''}{body}{RESET}"]
    return [body, ("=" if level == 1 else "-") * len(body)] if level <= 2 else [body]


def render(markdown: str, style: bool = False) -> str:
    """A Markdown document (or a snippet) as terminal text."""
    out: list[str] = []
    in_code = False
    for raw in markdown.splitlines():
        fence = _FENCE.match(raw)
        if fence:
            in_code = not in_code
            continue
        if in_code:
            out.append(code_line(raw, style))
            continue
        if m := _HEADING.match(raw):
            out.extend(heading(m.group(2), len(m.group(1)), style))
        elif _RULE.match(raw):
            out.append("─" * 40)
        elif m := _BULLET.match(raw):
            out.append(f"{m.group(1)}  • {inline(m.group(2), style)}")
        elif m := _QUOTE.match(raw):
            out.append(f"  ┃ {inline(m.group(1), style)}")
        elif "```" in raw:
            out.extend(_flattened(raw, style))
        else:
            out.append(inline(raw, style))
    return "\n".join(out)


def _flattened(line: str, style: bool) -> list[str]:
    """A line holding fenced code inline (a snippet): the code on its own lines, the prose around it."""
    out: list[str] = []
    pos = 0
    for m in _INLINE_FENCE.finditer(line):
        before = line[pos : m.start()].strip()
        if before:
            out.append(inline(before, style))
        code = m.group(2).strip()
        if code:
            out.append(code_line(code, style, highlights=True))
        pos = m.end()
    rest = line[pos:].strip()
    if rest:
        out.append(inline(rest, style))
    return out
