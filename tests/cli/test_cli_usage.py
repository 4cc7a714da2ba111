"""`ptt validate` with a launcher that cannot take the inputs: exit 2, the signature on stderr, one JSON object
under --json, no traceback. A reference that cannot run is named by its own line, without the judge's frames."""

from __future__ import annotations

import json
from pathlib import Path

FX = Path(__file__).resolve().parents[1] / "fixtures" / "validate"


def test_a_launcher_of_the_wrong_arity_exits_2_with_its_signature(capsys):
    from mcp_server.cli import main

    code = main(["validate", f"{FX}/add_problem.py:reference", f"{FX}/usage_launchers.py:add_three", "--json"])
    out = capsys.readouterr()
    assert code == 2, (out.out, out.err)
    assert "add_three(x, y, bias) takes 3 required arguments" in out.err
    assert "f32[1000], f32[1000]" in out.err
    assert "Traceback" not in out.err + out.out
    data = json.loads(out.out)  # exactly one JSON document on stdout
    assert data["ok"] is False and data["error"]["kind"] == "usage" and data["error"]["exit_code"] == 2
    assert "add_three(x, y, bias)" in data["error"]["message"]


def test_inputs_too_large_for_memory_are_told_without_the_judges_traceback(capsys):
    from mcp_server.cli import main

    code = main(
        [
            "validate",
            f"{FX}/add_problem.py:reference",
            f"{FX}/add_good.py:candidate",
            "--inputs",
            "f32[70368744177664], f32[70368744177664]",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "could not run (oom)" in err
    assert "Traceback" not in err and "mcp_server" not in err


def test_a_reference_out_of_memory_at_its_own_line_is_told_without_the_judges_traceback(tmp_path, capsys):
    from mcp_server.cli import main

    (tmp_path / "huge.py").write_text(
        "import torch\ndef reference(x):\n    return x\ndef get_inputs():\n    return [torch.empty(1 << 46)]\n"
    )
    assert main(["validate", f"{tmp_path}/huge.py:reference", f"{FX}/add_good.py:candidate"]) == 2
    err = capsys.readouterr().err
    assert "could not run (oom at" in err and "huge.py:5" in err
    assert "Traceback" not in err and "mcp_server" not in err


def test_a_failures_detail_keeps_the_last_lines_only_where_they_are_the_only_evidence():
    from mcp_server.engine.models import Failure, FindingKind, Location

    tail = "Traceback (most recent call last): ..."
    for where in (Location(file="k.py", line=5), None):  # raised at the user's line, or in the judge's own code
        for kind in (FindingKind.oom, FindingKind.crash, FindingKind.exception):
            assert Failure(kind=kind, message="m", where=where, stderr_tail=tail, raised=True).detail() == "m"
    for kind in (FindingKind.oom, FindingKind.crash, FindingKind.timeout):  # a process killed or stopped
        assert tail in Failure(kind=kind, message="m", stderr_tail=tail, signal=9).detail()
