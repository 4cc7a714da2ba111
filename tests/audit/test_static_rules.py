"""Each static audit rule against its defect fixture and the fixture's corrected twin.

Fixtures live in tests/fixtures/audit/: ``<rule_id>_bad.py`` (underscores for dashes) marks every line
that must be reported with ``# EXPECT: rule-id`` (``# EXPECT: rule-id (warning)`` when the finding's
severity differs from the rule's default); ``<rule_id>_good.py`` is the same code with the defect fixed.
``good_*.py`` are complete, well-written kernels that must raise nothing above info.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_server.engine.audit import RULES, analyze_file
from mcp_server.engine.audit.static_models import CATEGORIES
from mcp_server.engine.models import Severity

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
REFERENCE_KERNELS = Path(__file__).resolve().parents[2] / "reference_kernels"
RULE_IDS = [r.id for r in RULES]
DEFAULT_SEVERITY = {r.id: r.severity for r in RULES}
_EXPECT = re.compile(r"#\s*EXPECT:\s*([a-z0-9-]+)(?:\s*\((error|warning|info)\))?")


def _fixture(rule: str, kind: str) -> Path:
    return FIXTURES / f"{rule.replace('-', '_')}_{kind}.py"


def _expected(path: Path) -> set[tuple[str, int, Severity]]:
    out = set()
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        m = _EXPECT.search(line)
        if m:
            rule = m.group(1)
            out.add((rule, lineno, Severity(m.group(2)) if m.group(2) else DEFAULT_SEVERITY[rule]))
    return out


def _above_info(findings):
    return [f for f in findings if f.severity is not Severity.info]


def test_every_rule_has_a_defect_fixture_and_a_corrected_twin():
    missing = [str(_fixture(r, k).name) for r in RULE_IDS for k in ("bad", "good") if not _fixture(r, k).exists()]
    assert not missing


def test_rule_ids_are_unique_and_categories_and_summaries_are_well_formed():
    assert len(RULE_IDS) == len(set(RULE_IDS))
    for rule in RULES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.id), rule.id
        assert rule.category in CATEGORIES
        assert rule.summary and "\n" not in rule.summary


@pytest.mark.parametrize("rule", RULE_IDS)
def test_defect_fixture_reports_its_rule_at_the_marked_lines_and_nothing_else(rule):
    path = _fixture(rule, "bad")
    expected = _expected(path)
    assert any(r == rule for r, _, _ in expected), f"{path.name} marks no line for {rule}"
    report = analyze_file(path)
    assert not report.notes
    got = {(f.rule, f.where.line, f.severity) for f in report.findings}
    assert expected <= got, f"missing: {sorted(expected - got)}"
    # No other finding of this rule, and nothing else above info: each fixture holds one kind of defect.
    unexpected = {
        (f.rule, f.where.line, f.severity)
        for f in report.findings
        if (f.rule == rule or f.severity is not Severity.info) and (f.rule, f.where.line, f.severity) not in expected
    }
    assert not unexpected


@pytest.mark.parametrize("rule", RULE_IDS)
def test_corrected_twin_does_not_report_the_rule(rule):
    report = analyze_file(_fixture(rule, "good"))
    assert not report.notes
    assert [str(f) for f in report.findings if f.rule == rule] == []
    assert [str(f) for f in _above_info(report.findings)] == []


def test_findings_name_the_place_the_code_and_a_concrete_fix():
    report = analyze_file(_fixture("unmasked-access", "bad"))
    f = report.by_rule("unmasked-access")[0]
    assert f.where.file.endswith("unmasked_access_bad.py")
    assert f.where.column and f.where.column >= 1
    assert f.where.source_line.startswith("x = tl.load(x_ptr + offs)")
    assert f.kernel == "_scale_kernel"
    assert f.category == "memory"
    assert "mask" in f.fix
    assert str(f).startswith(f"{f.where.file}:{f.where.line}:{f.where.column}: error [unmasked-access]")


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("good_*.py")))
def test_well_written_kernels_raise_nothing_above_info(name):
    report = analyze_file(FIXTURES / name)
    assert report.kernels
    assert not report.notes
    assert [str(f) for f in _above_info(report.findings)] == []


def test_good_kernel_set_covers_vector_add_softmax_and_matmul():
    names = {p.name for p in FIXTURES.glob("good_*.py")}
    assert {"good_vector_add.py", "good_softmax.py", "good_matmul.py"} <= names


@pytest.mark.parametrize(
    "path", sorted(REFERENCE_KERNELS.glob("*.py")), ids=lambda p: p.name if isinstance(p, Path) else str(p)
)
@pytest.mark.slow
def test_reference_kernels_raise_no_error_findings(path):
    report = analyze_file(path)
    assert not [n for n in report.notes if "partly analysed" in n]
    assert [str(f) for f in report.errors] == []


def test_every_rule_runs_by_default_and_reports_with_its_registered_category():
    by_id = {r.id: r for r in RULES}
    for path in FIXTURES.glob("*_bad.py"):
        report = analyze_file(path)
        assert report.rules_run == RULE_IDS
        for f in report.findings:
            assert f.category == by_id[f.rule].category
