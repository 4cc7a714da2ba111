"""`ptt eval --backend ray` on a local Ray instance (CPU tasks under the Triton interpreter): the same verdicts
as the local backend, user code only in the runner's children of the Ray workers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_server.engine.evaluate import EvalSettings, run_eval

EVAL_FX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"


def _ray():
    """Ray, imported by the test that uses it: every pytest-xdist worker imports this module to collect it, and
    only one of them runs its test."""
    try:
        import ray
    except ImportError as exc:  # the ray extra is optional: say why the test did not run
        pytest.skip(f"ray is not installed ({exc}); pip install 'pytorch-to-triton[ray]'")
    return ray


@pytest.fixture(scope="module")
def local_ray():
    ray = _ray()
    # CPU tasks under the interpreter, also on a GPU machine (the workers inherit this environment). One CPU:
    # one Ray worker takes the tasks in turn, so one worker process starts a Runner and its fork servers.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PTT_DEVICE", "interpreter")
        ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False)
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.mark.slow
def test_the_ray_backend_gives_the_same_verdicts_and_resumes(local_ray, tmp_path):
    solutions = tmp_path / "solutions"
    shutil.copytree(EVAL_FX / "solutions", solutions)
    only = ["1_add", "4_square", "5_negate", "6_row_sum"]
    report = run_eval(
        EVAL_FX / "problems",
        solutions,
        backend="ray",
        settings=EvalSettings(seeds=1, derive_shapes=False),
        only=only,
    )
    got = {r.name: (r.status, r.failure_kinds) for r in report.problems}
    assert got == {
        "1_add": ("passed", []),
        "4_square": ("failed", ["mismatch"]),
        "5_negate": ("failed", ["crash", "evasion"]),  # the segfault killed a runner child, not the Ray worker
        "6_row_sum": ("missing", []),
    }
    assert report.backend == "ray" and report.workers[0].startswith("ray: 1 node(s), 0 GPU(s), 1 CPU(s)")
    ran = [r for r in report.problems if r.status != "missing"]
    assert all(r.worker and r.worker.startswith("ray:") and r.device == "cpu-interpreter" for r in ran)
    assert all(pt.eager is None for pt in report.overall.fast_p[1:])
    assert local_ray.is_initialized()  # a session the caller started is left running

    again = run_eval(
        EVAL_FX / "problems", solutions, backend="ray", settings=EvalSettings(seeds=1, derive_shapes=False), only=only
    )
    assert (again.evaluated_now, again.resumed) == (0, 4)
