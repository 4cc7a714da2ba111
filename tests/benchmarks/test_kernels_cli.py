"""benchmarks/kernels_cli.py --validate: each stage is validated on the cases it takes (SPEC.stage_limit)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mcp_server.engine.validate import validate
from reference_kernels.softmax import SPEC

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "reference_kernels" / "softmax.py"


@pytest.fixture(scope="module")
def cli():
    spec = importlib.util.spec_from_file_location("kernels_cli", ROOT / "benchmarks/kernels_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_one_block_stage_leaves_out_the_long_row_and_says_why():
    assert SPEC.left_out(3) == {}
    assert SPEC.left_out(1) == {
        "long row → looped path": "rows of 33000 columns exceed stage 1's one-block limit of 32768 (stage 3 loops "
        "over column chunks)"
    }
    assert "long row → looped path" not in SPEC.stage_cases.stage1()
    assert list(SPEC.stage_cases.stage3()) == [c.label for c in SPEC.listed_cases()]


def test_validate_reads_a_stages_cases_through_inputs_and_passes():
    result = validate(
        f"{SOFTMAX}:reference_softmax",
        f"{SOFTMAX}:softmax_stage1",
        inputs=f"{SOFTMAX}:SPEC.stage_cases.stage1",
        seeds=1,
        derive_shapes=False,
    )
    assert result.ok, result.summary
    assert "long row → looped path" not in {c.case for c in result.cases}


def test_validate_runs_each_stage_on_the_cases_it_takes_and_names_the_rest(cli, monkeypatch, capsys):
    import mcp_server.cli.render
    import mcp_server.engine.validate

    asked = {}

    class Passed:
        ok = True

    def fake(reference, candidate, **kw):
        asked[candidate.rsplit(":", 1)[1]] = kw["inputs"]
        return Passed()

    monkeypatch.setattr(mcp_server.engine.validate, "validate", fake)
    monkeypatch.setattr(mcp_server.cli.render, "render_validate", lambda result: "PASS")
    assert cli.main(["softmax", "--validate"]) == 0
    assert asked == {
        "softmax_stage1": f"{SOFTMAX}:SPEC.stage_cases.stage1",
        "softmax_stage2": f"{SOFTMAX}:SPEC.stage_cases.stage2",
        "softmax_stage3": None,
    }
    out = capsys.readouterr().out
    assert out.count("left out: 'long row → looped path': rows of 33000 columns exceed stage") == 2
