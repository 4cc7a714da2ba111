"""`ptt audit`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE_FX = ROOT / "tests" / "fixtures" / "audit" / "suite"


@pytest.fixture
def ptt(capsys):
    from mcp_server.cli import main

    def call(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


@pytest.mark.slow
def test_ptt_audit_on_the_softmax_reference_kernel_raises_no_error_finding(ptt):
    code, out, err = ptt(
        "audit",
        str(ROOT / "reference_kernels" / "softmax.py"),
        "--sections",
        "static,compiled,correctness",
        "--suite",
        "base,zeros,nan",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] and not [f for f in report["findings"] if f["severity"] == "error"]
    assert report["candidate"].endswith("softmax.py:softmax_stage3")
    assert report["reference"].endswith("softmax.py:reference_softmax")
    kernels = report["compiled"]["kernels"]
    assert kernels and all(k["ok"] and k["registers"] for k in kernels)
    assert {r["tier"] for r in report["correctness"]["runs"]} == {"strict"}


@pytest.mark.slow
def test_ptt_audit_writes_the_markdown_report_and_exits_1_on_error_findings(ptt, tmp_path):
    out_file = tmp_path / "report.md"
    code, out, _ = ptt(
        "audit",
        f"{SUITE_FX / 'rowsum_fail.py'}:candidate",
        "--sections",
        "static,correctness",
        "--suite",
        "base",
        "--out",
        str(out_file),
    )
    assert code == 1
    text = out_file.read_text(encoding="utf-8")
    assert text.startswith("# Triton kernel audit") and "❌ FAIL" in text and "`mismatch`" in text
    assert "report written to" in out and "FAIL" in out.splitlines()[0]


def test_a_file_that_fails_to_import_is_an_error_finding_whose_cause_each_section_names_once(ptt, tmp_path):
    bad = tmp_path / "kernels.py"
    bad.write_text("import triton\n\nraise RuntimeError('no GPU config for this build')\n")
    code, out, _ = ptt("audit", str(bad), "--json")
    assert code == 1
    report = json.loads(out)
    assert not report["ok"] and any(f["severity"] == "error" for f in report["findings"])
    reasons = [report["correctness"]["reason"], report["performance"]["reason"], *report["compiled"]["notes"]]
    for reason in reasons:
        assert "no GPU config for this build" in reason and reason.count("could not be loaded") == 1, reason


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--sections", "static,speed"], "choose from static"),
        (["--suite", "base,huge"], "choose from base"),
    ],
)
def test_ptt_audit_misuse_exits_2_with_the_fix(ptt, args, words):
    code, _, err = ptt("audit", f"{SUITE_FX / 'rowsum_strict.py'}:candidate", *args)
    assert code == 2 and words in err
