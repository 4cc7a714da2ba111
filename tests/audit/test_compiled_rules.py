"""The compiled-code rules: each fires on its fixture and stays silent on the fixture's twin.

Fixtures live in tests/fixtures/audit/compiled/: ``<rule_id>_bad.py`` (underscores for dashes) launches a
kernel with the defect, ``<rule_id>_good.py`` the same kernel fixed. Each is audited with the compiled
section only: the launcher runs under the interpreter to capture its launches, then the kernel is compiled
for sm_90 (no GPU needed).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mcp_server.engine.audit import COMPILED_RULES, RULES, audit
from mcp_server.engine.audit.compiled import Planned, first_location, plan
from mcp_server.engine.audit.models import AuditReport
from mcp_server.engine.models import Severity

COMPILED = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "compiled"
PAIRED = [r.id for r in COMPILED_RULES]


def _fixture(rule: str, kind: str):
    return COMPILED / f"{rule.replace('-', '_')}_{kind}.py"


@pytest.fixture(scope="module")
def reports(runner) -> dict[str, AuditReport]:
    """Every fixture audited once (two at a time: each compile is a child process)."""
    paths = [_fixture(rule, kind) for rule in PAIRED for kind in ("bad", "good")]

    def one(path):
        return path.name, audit(str(path), sections=["compiled"], target="cuda:90", runner=runner)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, paths))


def _compiled(report: AuditReport, rule: str):
    return [f for f in report.findings if f.rule == rule and f.section == "compiled"]


@pytest.mark.slow
@pytest.mark.parametrize("rule", PAIRED)
def test_the_compiled_rule_fires_on_its_fixture_and_not_on_the_twin(reports, rule):
    bad = reports[_fixture(rule, "bad").name]
    good = reports[_fixture(rule, "good").name]
    assert bad.compiled.kernels and all(k.ok != (rule == "compile-failed") for k in bad.compiled.kernels)
    hits = _compiled(bad, rule)
    assert hits, [(f.rule, f.message) for f in bad.findings]
    expected = Severity.error if rule == "compile-failed" else Severity.warning
    assert all(f.severity is expected for f in hits) and bad.ok is (expected is not Severity.error)
    assert hits[0].fix and hits[0].kernel and hits[0].where.file.endswith(_fixture(rule, "bad").name)
    assert good.compiled.kernels and all(k.ok for k in good.compiled.kernels)
    assert not _compiled(good, rule), [(f.rule, f.message) for f in _compiled(good, rule)]


@pytest.mark.slow
def test_the_twins_raise_no_compiled_warning_at_all(reports):
    for rule in PAIRED:
        good = reports[_fixture(rule, "good").name]
        loud = [f.rule for f in good.findings if f.section == "compiled" and f.severity is not Severity.info]
        assert loud == [], (rule, loud)


@pytest.mark.slow
def test_fp64_and_dot_findings_point_at_the_source_line(reports):
    (fp64,) = _compiled(reports["fp64_math_bad.py"], "fp64-math")
    line = _fixture("fp64-math", "bad").read_text().splitlines()[fp64.where.line - 1]
    assert "tl.float64" in line or "x * 3.0" in line
    (dot,) = _compiled(reports["dot_no_tensor_cores_bad.py"], "dot-no-tensor-cores")
    assert "tl.dot" in _fixture("dot-no-tensor-cores", "bad").read_text().splitlines()[dot.where.line - 1]
    # The advice for fp32 data is the precision that passes an fp32 tolerance, never plain tf32.
    assert "tf32x3" in dot.fix and "input_precision='tf32')" not in dot.fix


@pytest.mark.slow
def test_the_capture_records_the_jit_specialisation_and_the_launch_options(reports):
    (k,) = reports["not_vectorized_good.py"].compiled.kernels
    assert k.signature == "x_ptr=*fp32:16, y_ptr=*fp32:16, n=i32:16"
    assert k.constexprs == {"BLOCK": 1024} and k.source == "launched" and k.launches == 1
    (spill,) = reports["register_spill_bad.py"].compiled.kernels
    assert spill.num_warps == 1 and spill.spill_stores and spill.registers == 255
    (smem,) = reports["shared_memory_near_limit_bad.py"].compiled.kernels
    assert smem.num_stages == 7 and smem.tensor_cores == "wgmma"
    assert "ptt compile" in k.command and "--signature 'x_ptr=*fp32:16" in k.command


@pytest.mark.slow
def test_a_kernel_that_does_not_compile_is_an_error_at_the_line_the_compiler_names(reports):
    (failed,) = _compiled(reports["compile_failed_bad.py"], "compile-failed")
    assert "K >= 16" in failed.message
    assert "tl.dot" in _fixture("compile-failed", "bad").read_text().splitlines()[failed.where.line - 1]


@pytest.mark.slow
def test_tensor_core_kernels_at_low_occupancy_are_only_info(reports):
    occ = _compiled(reports["shared_memory_near_limit_bad.py"], "low-occupancy")
    assert occ and all(f.severity is Severity.info for f in occ)


def test_compiled_rule_ids_are_distinct_from_the_static_ones():
    assert not {r.id for r in COMPILED_RULES} & {r.id for r in RULES}
    for rule in PAIRED:
        assert _fixture(rule, "bad").exists() and _fixture(rule, "good").exists()


def test_plan_keeps_the_heaviest_and_lightest_autotune_candidates_of_each_specialisation():
    def variant(i, rows, warps):
        return {"source": "autotune candidate", "config_index": i, "constexprs": {"BLOCK": 256, "ROWS": rows},
                "num_warps": warps, "num_stages": 3}  # fmt: skip

    record = {
        "kernel": "k",
        "jit_name": "k",
        "launches": 3,
        "unsupported": [],
        "aligned": True,
        "ints_div16": True,
        "variants": [variant(0, 8, 4), variant(1, 16, 4), variant(2, 64, 16), variant(3, 64, 4)],
    }
    chosen, notes = plan([record, {**record, "unsupported": ["`desc` is a TensorDescriptor"]}])
    assert [p.variant["config_index"] for p in chosen] == [3, 0]
    assert any("TensorDescriptor" in n for n in notes) and all(isinstance(p, Planned) for p in chosen)


def test_ttir_locations_resolve_through_named_aliases():
    ttir = "\n".join(
        [
            "    %y = arith.mulf %x, %c : tensor<8xf64> loc(#loc5)",
            '#loc1 = loc("/k.py":12:7)',
            '#loc5 = loc("y"(#loc1))',
        ]
    )
    count, where = first_location(ttir, re.compile(r"=\s*arith\.mulf.*f64"))
    assert count == 1 and where == ("/k.py", 12, 7)
