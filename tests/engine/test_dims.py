"""--dims: a KernelBench file's module-level sizes replaced for one run, without editing the file."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from mcp_server.engine.dims import DIMS_ENV, check_dims, dims_env, parse_dims, rewrite
from mcp_server.engine.errors import UsageError
from mcp_server.engine.validate import validate

FX = Path(__file__).resolve().parents[1] / "fixtures" / "validate" / "dims"


def test_dims_parse_numbers_and_booleans_and_refuse_anything_else():
    assert parse_dims("batch_size=8, dim=0x10,scale=0.5,flag=True") == {
        "batch_size": 8,
        "dim": 16,
        "scale": 0.5,
        "flag": True,
    }
    assert parse_dims(None) == {} and parse_dims("") == {}
    for bad, words in (("batch_size", "NAME=VALUE"), ("1x=3", "not a Python name"), ("dim=big", "not a number")):
        with pytest.raises(UsageError, match=words):
            parse_dims(bad)


def test_a_name_no_file_assigns_is_a_usage_error_that_lists_the_names_there():
    with pytest.raises(UsageError) as err:
        check_dims({"batch": 8}, [FX / "problem.py"])
    assert "batch_size" in str(err.value) and "hidden" in str(err.value) and "batch," in str(err.value)
    check_dims({"batch_size": 8, "hidden": 4}, [FX / "problem.py"])  # the twin: known names pass


def test_the_rewrite_changes_only_the_named_top_level_assignments():
    tree = ast.parse("batch_size = 1 << 14\ndim = 16\n\ndef f():\n    dim = 3\n    return dim\n")
    assert rewrite(tree, {"dim": 4}) == ["dim"]
    scope: dict = {}
    exec(compile(tree, "<t>", "exec"), scope)
    assert scope["dim"] == 4 and scope["batch_size"] == 1 << 14 and scope["f"]() == 3
    assert json.loads(dims_env({"dim": 4})[DIMS_ENV]) == {"dim": 4} and dims_env({}) == {}


def test_validate_runs_a_problem_at_the_sizes_dims_gives_and_derived_sizes_follow():
    result = validate(
        f"{FX}/problem.py:Model",
        f"{FX}/solution.py:ModelNew",
        dims="batch_size=3,dim=20",
        seeds=1,
        derive_shapes=False,
    )
    assert result.ok, result.findings
    # 3 rows of hidden = 2 * dim = 40 columns: the module-level value computed from dim followed the override.
    assert {r.numel for r in result.rows} == {3 * 40}


def test_validate_refuses_a_misspelt_dim_before_running_anything():
    with pytest.raises(UsageError, match="no module-level assignment"):
        validate(f"{FX}/problem.py:Model", f"{FX}/solution.py:ModelNew", dims="batchsize=3")


def test_ptt_validate_takes_dims_on_the_command_line(capsys):
    from mcp_server.cli import run

    code = run(
        [
            "validate",
            f"{FX}/problem.py",
            f"{FX}/solution.py",
            "--dims",
            "batch_size=2,dim=8",
            "--seeds",
            "1",
            "--no-derive",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ok"] is True and {r["numel"] for r in data["rows"]} == {2 * 16}
