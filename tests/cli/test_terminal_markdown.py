"""The terminal Markdown renderer: markup goes, structure stays; ANSI styles only when asked."""

from __future__ import annotations

import io

from mcp_server.cli import markdown as tm

DOC = """# Title

Some *italic*, **bold** and `tl.load(ptr)` text, a [link](https://triton-lang.org/x.html).

## Section
- first item
- second with `code`

```python
x = tl.load(ptr + offs, mask=offs < n)
```
> quoted
"""


def test_plain_rendering_drops_markup_and_keeps_structure():
    text = tm.render(DOC, style=False)
    assert "\033[" not in text
    for markup in ("# Title", "## Section", "**", "*italic*", "```", "](", "- first"):
        assert markup not in text, markup
    lines = text.splitlines()
    assert lines[:2] == ["Title", "====="]
    assert "Some italic, bold and `tl.load(ptr)` text, a link (https://triton-lang.org/x.html)." in lines
    assert lines[lines.index("Section") : lines.index("Section") + 2] == ["Section", "-------"]
    assert "  • first item" in lines and "  • second with `code`" in lines
    assert "  │ x = tl.load(ptr + offs, mask=offs < n)" in lines
    assert "  ┃ quoted" in lines


def test_styled_rendering_uses_ansi_and_no_markup():
    text = tm.render(DOC, style=True)
    assert f"{tm.BOLD}bold{tm.RESET}" in text and f"{tm.ITALIC}italic{tm.RESET}" in text
    assert f"{tm.CYAN}tl.load(ptr){tm.RESET}" in text
    assert "**" not in text and "`" not in text and "```" not in text
    assert f"{tm.BOLD}{tm.UNDERLINE}Title{tm.RESET}" in text


def test_flattened_snippet_puts_code_on_its_own_line_and_highlights_query_words():
    snippet = "… Also written: `**tl.dot**`. ```python tl.dot(a, b, **input_precision**=None) ``` Returns the product …"
    lines = tm.render(snippet, style=False).splitlines()
    assert lines == [
        "… Also written: `tl.dot`.",
        "  │ tl.dot(a, b, input_precision=None)",
        "Returns the product …",
    ]
    styled = tm.render(snippet, style=True)
    assert f"{tm.BOLD}input_precision{tm.RESET}" in styled and "**" not in styled


def test_snake_case_and_arithmetic_are_not_emphasis():
    line = "use BLOCK_SIZE and num_warps; a * b * c stays"
    assert tm.render(line, style=False) == line


def test_style_only_for_a_tty_without_no_color(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert tm.use_style(Tty()) is True
    assert tm.use_style(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert tm.use_style(Tty()) is False


def test_code_blocks_keep_python_operators():
    doc = "```python\nf(**kwargs)\ny = a**2 + b ** 2\n```"
    assert tm.render(doc, style=False).splitlines() == ["  │ f(**kwargs)", "  │ y = a**2 + b ** 2"]
