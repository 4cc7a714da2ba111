"""`ptt validate` with a launcher that cannot take the inputs: exit 2, the signature on stderr, one JSON object
under --json, no traceback."""

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
