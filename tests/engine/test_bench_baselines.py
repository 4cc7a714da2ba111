"""bench's extra baselines (``path.py:function`` peers timed in the same runs): labels, errors, speed-ups."""

from __future__ import annotations

import pytest

from mcp_server.engine import bench as B
from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import DevicePeaks

PEAKS = DevicePeaks(device="t", copy_gbps=4000.0, matmul_tflops={"float32": 50.0}, measured_at="now", torch="x")


def _timing(provider: str, ms: float) -> dict:
    return {"provider": provider, "median_ms": ms, "p20_ms": ms, "p80_ms": ms, "min_ms": ms, "spread": 0.0,
            "samples": 10}  # fmt: skip


@pytest.fixture
def peers(tmp_path):
    (tmp_path / "peer_a.py").write_text("def fast(x):\n    return x\n\ndef other(x):\n    return x\n")
    (tmp_path / "peer_b.py").write_text("def fast(x):\n    return x\n\ndef compile(x):\n    return x\n")
    return tmp_path


def test_baselines_are_labelled_by_function_name_and_by_file_when_two_share_one(peers):
    labels = B.baseline_labels([f"{peers}/peer_a.py:other"], cwd=peers)
    assert list(labels) == ["other"] and labels["other"].name == "other"
    both = B.baseline_labels(["peer_a.py:fast", "peer_b.py:fast"], cwd=peers)
    assert list(both) == ["peer_a.fast", "peer_b.fast"]


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["peer_a.py"], "names no function"),
        (["peer_a.py:missing"], "missing"),
        (["nowhere.py:fast"], "does not exist"),
        (["peer_a.py:fast", "peer_a.py:fast"], "given twice"),
        (["peer_b.py:compile"], "clashes"),
    ],
)
def test_bad_baselines_are_usage_errors_that_name_the_fix(peers, specs, message):
    with pytest.raises(UsageError, match=message):
        B.baseline_labels(specs, cwd=peers)


def test_a_baseline_label_taken_by_an_extra_candidate_is_refused(peers):
    with pytest.raises(UsageError, match="clashes"):
        B.baseline_labels(["peer_a.py:other"], taken={"other"}, cwd=peers)


def test_bad_baselines_are_refused_before_any_gpu_is_needed(peers):
    with pytest.raises(UsageError, match="names no function"):
        B.bench(f"{peers}/peer_a.py:fast", extra_baselines=[f"{peers}/peer_b.py"])


def test_rows_carry_the_speedup_over_each_baseline_and_the_summary_names_it():
    raw = {
        "case": "c",
        "timings": [_timing("candidate", 1.0), _timing("liger", 1.25), _timing("slowpeer", 0.5), _timing("eager", 2.0)],
        "bytes": 1_000_000,
        "flops": 0,
        "model": "test",
    }
    row = B._row(raw, PEAKS, ["liger", "slowpeer", "absent"])
    assert row.speedup_vs_baselines == pytest.approx({"liger": 1.25, "slowpeer": 0.5})
    assert row.speedup_vs_eager == pytest.approx(2.0)
    # Without the baseline list, the same timings give no baseline ratios (extra candidates are not peers).
    assert B._row(raw, PEAKS).speedup_vs_baselines == {}
    result = B.BenchResult(
        ok=True, device="t", findings=[], candidate="c.py:f", reference=None, mode="events", l2_flush=True,
        input_sets=1, reps=10, rows=[row],
    )  # fmt: skip
    assert "1.25× liger" in B.summarize(result) and "0.50× slowpeer" in B.summarize(result)
