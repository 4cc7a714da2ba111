"""Static rules follow what they can prove: constexpr branches that imply whole tiles, value bounds.

Fixtures live in tests/fixtures/audit/proven/: ``<rule_id>_good.py`` holds correct kernels that an
analysis without those proofs reported (each must raise no finding of its rule, nor anything above info);
``<rule_id>_bad.py`` is its twin where the proof fails, with every line that must be reported marked
``# EXPECT: rule-id``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_server.engine.audit import analyze_file
from mcp_server.engine.models import Severity

PROVEN = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "proven"
RULES = ["unmasked-access", "non-neutral-other", "int32-offset-overflow", "unguarded-division"]
_EXPECT = re.compile(r"#\s*EXPECT:\s*([a-z0-9-]+)")


def _fixture(rule: str, kind: str) -> Path:
    return PROVEN / f"{rule.replace('-', '_')}_{kind}.py"


@pytest.mark.parametrize("rule", RULES)
def test_a_correct_kernel_the_rule_can_prove_safe_raises_nothing(rule):
    report = analyze_file(_fixture(rule, "good"))
    assert report.kernels and not report.notes
    assert [str(f) for f in report.findings if f.rule == rule] == []
    assert [str(f) for f in report.findings if f.severity is not Severity.info] == []


@pytest.mark.parametrize("rule", RULES)
def test_the_twin_without_the_proof_still_reports_the_rule_at_each_marked_line(rule):
    path = _fixture(rule, "bad")
    expected = {
        (m.group(1), n) for n, line in enumerate(path.read_text().splitlines(), 1) if (m := _EXPECT.search(line))
    }
    assert {r for r, _ in expected} == {rule}
    report = analyze_file(path)
    assert not report.notes
    got = {(f.rule, f.where.line) for f in report.findings if f.rule == rule}
    assert got == expected
    assert [str(f) for f in report.findings if f.severity is not Severity.info and f.rule != rule] == []


def test_a_flag_proves_whole_tiles_only_when_every_launch_sets_it_from_a_divisibility_test(tmp_path):
    kernel = _fixture("unmasked-access", "good").read_text()
    # One more launch of the same kernel whose flag is not a divisibility test: the proof no longer holds.
    extra = (
        "\n\ndef scale_any(x: torch.Tensor) -> torch.Tensor:\n"
        "    out = torch.empty_like(x)\n"
        "    n = x.numel()\n"
        "    _scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, EVEN_N=True)\n"
        "    return out\n"
    )
    path = tmp_path / "two_launches.py"
    path.write_text(kernel + extra)
    lines = {f.where.line for f in analyze_file(path).by_rule("unmasked-access")}
    fast_path = ("x = tl.load(x_ptr + offs)", "tl.store(out_ptr + offs, x * 2.0)")
    expected = {n for n, text in enumerate(kernel.splitlines(), 1) if text.strip() in fast_path}
    assert len(expected) == 2 and lines == expected


def test_a_bounded_grid_stops_proving_once_a_launch_has_no_bound(tmp_path):
    source = _fixture("int32-offset-overflow", "good").read_text()
    path = tmp_path / "unbounded.py"
    path.write_text(source.replace("grid = (min(sms, triton.cdiv(n, 1024)),)", "grid = (triton.cdiv(n, 1024),)"))
    hits = analyze_file(path).by_rule("int32-offset-overflow")
    assert [f.kernel for f in hits] == ["_grid_stride_kernel"]
    assert "pid * BLOCK" in hits[0].message
