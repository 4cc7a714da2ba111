"""The skill's frontmatter, its size, its links, and the tools it teaches."""

from __future__ import annotations

import re
from pathlib import Path

from skill_bundle import BUNDLE, REPO, fenced_blocks, markdown_files

SKILL = BUNDLE / "SKILL.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
REFERENCE_KERNEL = re.compile(r"reference_kernels/(\w+)\.py")
TRIGGERS = ("triton", "convert to triton", "gpu kernel", "pytorch to triton", "audit triton", "review kernel")
# Hyphenated names in backticks that are not static-audit rule ids: prompts, a device name, a page source.
NOT_RULE_IDS = ("pytorch-to-triton", "audit-triton", "cpu-interpreter", "installed-triton")
MCP_TOOLS = (
    "device_info",
    "compile_kernel",
    "validate_against_reference",
    "bench",
    "audit",
    "search_triton_docs",
    "stage_start",
    "stage_submit",
    "stage_status",
)


def frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the opening and closing ``---``, as YAML plain scalars."""
    lines = text.splitlines()
    assert lines[0] == "---", "SKILL.md must start with a --- line"
    end = lines.index("---", 1)
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        key, sep, value = line.partition(":")
        assert sep and key.strip() and not key.startswith(" "), f"not a top-level key: {line!r}"
        value = value.strip()
        # A YAML plain scalar cannot contain ": " or " #" nor start with an indicator character.
        assert ": " not in value and " #" not in value, f"{key} needs quoting in YAML: {value!r}"
        assert value and value[0] not in "\"'&*!|>%@`{[", f"{key} starts with a YAML indicator: {value!r}"
        fields[key.strip()] = value
    return fields


def test_skill_frontmatter_has_name_and_description() -> None:
    fields = frontmatter(SKILL.read_text(encoding="utf-8"))
    assert fields["name"] == "pytorch-to-triton"
    description = fields["description"]
    assert 100 < len(description) <= 1024
    for phrase in TRIGGERS:
        assert f'"{phrase}"' in description, phrase


def test_skill_body_is_short() -> None:
    assert len(SKILL.read_text(encoding="utf-8").splitlines()) < 150


def test_skill_teaches_every_tool_and_both_prompts() -> None:
    text = SKILL.read_text(encoding="utf-8")
    for name in (*MCP_TOOLS, "pytorch-to-triton", "audit-triton"):
        assert f"`{name}`" in text, name


def prose(path: Path) -> str:
    """The Markdown text without fenced blocks and inline code, where `kernel[grid](args)` is no link."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for block in fenced_blocks(path):
        end = block.line + block.code.count("\n")  # the closing fence's line number (1-based)
        for i in range(block.line - 1, min(end, len(lines))):
            lines[i] = ""
    return INLINE_CODE.sub("", "\n".join(lines))


def test_every_relative_link_points_to_an_existing_file() -> None:
    broken = []
    checked = 0
    for path in markdown_files():
        for target in LINK.findall(prose(path)):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            checked += 1
            if not (path.parent / target.split("#", 1)[0]).is_file():
                broken.append(f"{path.relative_to(BUNDLE)} -> {target}")
    assert checked >= 20 and not broken, broken


def test_every_reference_kernel_the_bundle_names_exists() -> None:
    named = {m for p in markdown_files() for m in REFERENCE_KERNEL.findall(p.read_text(encoding="utf-8"))}
    assert {"vector_add", "softmax", "matmul", "attention", "semi_markov_crf"} <= named
    missing = sorted(n for n in named if not (REPO / "reference_kernels" / f"{n}.py").is_file())
    assert not missing, missing


def test_every_reference_file_has_its_stage_guides() -> None:
    expected = {"stage1", "stage2", "stage3", "audit", "patterns", "triton-docs", "backward", "tools"}
    assert expected <= {p.stem for p in (BUNDLE / "references").glob("*.md")}


def test_every_fenced_block_names_its_language() -> None:
    unlabeled = [f"{b.file.name}:{b.line}" for p in markdown_files() for b in fenced_blocks(p) if not b.language]
    assert not unlabeled, unlabeled


def test_audit_guide_covers_every_finding_kind_and_only_real_ones() -> None:
    from mcp_server.engine.models import FindingKind

    text = (BUNDLE / "references" / "audit.md").read_text(encoding="utf-8")
    table = [line for line in text.splitlines() if line.startswith("| `")]
    named = {kind for line in table for kind in re.findall(r"`([a-z_]+)`", line.split("|")[1])}
    real = {k.value for k in FindingKind}
    assert named <= real, sorted(named - real)
    assert real <= named, f"finding kinds missing from the audit guide's table: {sorted(real - named)}"


def test_audit_rule_ids_named_in_the_bundle_exist() -> None:
    from mcp_server.engine.audit import ALL_RULES

    rule_ids = {rule.id for rule in ALL_RULES}
    # The generated tool catalogue quotes parameter values (`cuda-graph`), not rule ids.
    named = {
        rule
        for path in markdown_files()
        if path.name != "tools.md"
        for rule in re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", path.read_text(encoding="utf-8"))
        if rule not in NOT_RULE_IDS
    }
    assert len(named) >= 10
    assert named <= rule_ids, sorted(named - rule_ids)
