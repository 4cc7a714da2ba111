"""The GPU worker pool on real GPUs (skipped without one): one pinned worker per GPU, validations on each,
a bench through a GPU's own lease, and `ptt eval` with measured timings and fast_p."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_server.engine.device import probe
from mcp_server.engine.evaluate import EvalSettings, run_eval
from mcp_server.engine.pool import discover

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "validate"
EVAL_FX = ROOT / "tests" / "fixtures" / "eval"


@pytest.fixture(scope="module")
def gpu_pool():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PTT_DEVICE", raising=False)
        pool = discover()
    with pool:
        yield pool


def test_every_gpu_gets_a_worker_whose_jobs_are_pinned_to_it(gpu_pool):
    from mcp_server.engine.validate import validate

    assert not gpu_pool.interpreter
    indices = [w.device.gpu_index for w in gpu_pool.workers]
    assert len(set(indices)) == len(indices) and None not in indices
    for worker in gpu_pool.workers:
        assert probe(worker.runner).gpu_index == worker.device.gpu_index
        assert worker.device.job_env()["CUDA_VISIBLE_DEVICES"] == str(worker.device.gpu_index)
    leases = [gpu_pool.acquire("validate") for _ in gpu_pool.workers]
    try:
        assert {lease.worker.name for lease in leases} == {w.name for w in gpu_pool.workers}  # spread
        for lease in leases:
            verdict = validate(f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate", runner=lease.runner)
            assert verdict.ok and not verdict.interpreter, verdict.summary
    finally:
        for lease in leases:
            lease.release()


def test_a_bench_runs_through_its_gpus_lease(gpu_pool):
    from mcp_server.engine.bench import bench

    with gpu_pool.lease("bench") as lease:
        assert lease.worker.benching and lease.worker.validating == 0
        result = bench(f"{FX}/add_good.py:candidate", f"{FX}/add_problem.py:reference", reps=20, runner=lease.runner)
    assert result.ok and result.rows, result.summary


def test_eval_on_gpus_measures_timings_and_fast_p(gpu_pool, tmp_path):
    solutions = tmp_path / "solutions"
    shutil.copytree(EVAL_FX / "solutions", solutions)
    report = run_eval(
        EVAL_FX / "problems", solutions, pool=gpu_pool, settings=EvalSettings(seeds=1, derive_shapes=False, reps=20)
    )
    by = {r.name: r for r in report.problems}
    assert {k: r.status for k, r in by.items()} == {
        "1_add": "passed",
        "2_relu": "passed",
        "3_scale": "passed",
        "4_square": "failed",
        "5_negate": "failed",
        "6_row_sum": "missing",
    }
    for name in ("1_add", "2_relu", "3_scale"):
        r = by[name]
        assert r.timing == "measured" and r.candidate_ms and r.eager_ms and r.speedup_eager, r
        assert r.worker and r.worker.startswith("cuda:")
    assert report.timings_measured
    assert all(p.eager is not None for p in report.overall.fast_p)
    assert report.overall.fast_p[0].eager == pytest.approx(0.5)
