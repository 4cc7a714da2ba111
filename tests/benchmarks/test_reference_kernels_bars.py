"""benchmarks/reference_kernels.py: the bars it judges from measured rows (the README's "met" column)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("bench_reference_kernels", ROOT / "benchmarks/reference_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(case: str, candidate_ms: float, flash_ms: float, eager_ms: float) -> dict:
    timings = [("candidate", candidate_ms), ("sdpa_flash", flash_ms), ("eager", eager_ms)]
    return {
        "case": case,
        "timings": [{"provider": p, "median_ms": ms} for p, ms in timings],
        "speedup_vs_eager": eager_ms / candidate_ms,
    }


def _attention_verdict(script, long_ms: float, short_ms: float):
    from reference_kernels.attention import SPEC

    long_case = next(c.label for c in SPEC.bench_cases if c.dims["S"] >= 4096)
    rows = [_row(long_case, long_ms, flash_ms=1.0, eager_ms=0.8), _row("not a bench case", short_ms, 1.0, 0.8)]
    return script.judge("attention", SPEC, {"rows": rows}, None, {})


def test_attention_is_judged_against_the_flash_backend_at_long_sequences(script):
    met, words = _attention_verdict(script, long_ms=1.05, short_ms=5.0)  # 0.95× flash; the short row is ignored
    assert met is True
    assert "flash backend at seq ≥ 4096 0.952×" in words and "own pick 0.76×" in words


def test_attention_slower_than_90_percent_of_the_flash_backend_misses_its_bar(script):
    met, words = _attention_verdict(script, long_ms=1.2, short_ms=0.5)
    assert met is False
    assert "0.833× (missed)" in words


def test_the_attention_harness_exposes_the_flash_baseline(script, tmp_path):
    text = script.harness("attention", "float16", tmp_path).read_text()
    compile(text, "harness.py", "exec")
    assert "def sdpa_flash(*args):" in text and "sdpa_flash_attention" in text
    assert script.baselines("attention", Path("h.py")) == {"sdpa_flash": "h.py:sdpa_flash"}
    assert script.baselines("softmax", Path("h.py")) == {}
