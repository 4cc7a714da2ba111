"""Reading the skill bundle: its Markdown files and the fenced code blocks in them (shared by the tests)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "skills" / "pytorch-to-triton"
FRAGMENT_MARK = "<!-- fragment -->"
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    file: Path
    number: int  # 1-based among the file's Python blocks
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    fragment: bool

    @property
    def label(self) -> str:
        return f"{self.file.relative_to(BUNDLE).as_posix()} python block {self.number} (line {self.line})"


def markdown_files() -> list[Path]:
    return sorted(BUNDLE.rglob("*.md"))


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order; Python blocks are numbered from 1."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    python_count = 0
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, language = m.group(2), m.group(3).lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        number = 0
        if language in ("python", "py"):
            python_count += 1
            number = python_count
        fragment = start > 0 and lines[start - 1].strip() == FRAGMENT_MARK
        blocks.append(Block(path, number, start + 1, language, "\n".join(body) + "\n", fragment))
    return blocks


def python_blocks() -> list[Block]:
    return [b for f in markdown_files() for b in fenced_blocks(f) if b.language in ("python", "py")]
