"""The Ray backend of `ptt eval --backend ray`: one task per pair, one GPU per task.

Each task runs :func:`evaluate_pair` — the same function as the local backend — in a Ray worker process,
through that process's own :class:`Runner`: user code runs in the runner's children, never in the Ray
worker itself and never in the driver. The driver ships each pair's file text with it (a worker on another
node need not share the file system) and writes results to the database as tasks end.

With GPUs in the cluster a task asks for ``num_gpus=1`` and its jobs are pinned to the GPU Ray gave it;
without, tasks take one CPU each and run under the Triton interpreter.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from mcp_server.engine.errors import EnvironmentUnavailable
from mcp_server.engine.evaluate.models import EvalSettings, PairResult, PairSpec
from mcp_server.engine.evaluate.pairs import evaluate_pair, with_sources

_worker_runner: Any = None  # one Runner per Ray worker process, kept across its tasks


def _task(pair_data: dict[str, Any], settings_data: dict[str, Any], key: str, use_gpu: bool) -> dict[str, Any]:
    """Runs in a Ray worker process."""
    global _worker_runner
    from mcp_server.engine.device import probe
    from mcp_server.engine.pool import pin
    from mcp_server.engine.runner import Runner

    if _worker_runner is None:
        _worker_runner = Runner()
    runner = _worker_runner
    pair = PairSpec.model_validate(pair_data)
    settings = EvalSettings.model_validate(settings_data)
    worker = f"ray:{socket.gethostname()}:pid{os.getpid()}"
    if use_gpu:
        import ray

        ids = ray.get_gpu_ids()
        if ids:
            # Ray names the GPU it gave this task; pin every job of this task to it (the fork server may
            # have started under another task's CUDA_VISIBLE_DEVICES).
            index = int(ids[0])
            pin(runner, probe(runner).model_copy(update={"gpu_index": index}))
            worker += f":gpu{index}"
    return evaluate_pair(pair, settings, runner, worker=worker, settings_key=key).model_dump(mode="json")


class RaySession:
    """A connection to a Ray cluster for one evaluation (a local instance when no address is given)."""

    def __init__(self, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise EnvironmentUnavailable(
                "--backend ray needs Ray: pip install 'pytorch-to-triton[ray]' (or use the local backend)"
            ) from None
        self.ray = ray
        self.started_here = not ray.is_initialized()
        if self.started_here:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            ray.init(**kwargs)
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        self.cpus = int(resources.get("CPU", 0))

    def describe(self) -> list[str]:
        nodes = len([n for n in self.ray.nodes() if n.get("Alive")])
        return [f"ray: {nodes} node(s), {self.gpus} GPU(s), {self.cpus} CPU(s)"]

    def run(
        self, pairs: list[PairSpec], settings: EvalSettings, key: str, record: Callable[[PairResult], None]
    ) -> None:
        ray = self.ray
        use_gpu = self.gpus > 0
        remote = ray.remote(_task).options(
            num_gpus=1 if use_gpu else 0,
            num_cpus=1,
            max_retries=0,  # a task that died took a pair with it: report it, do not rerun user code blindly
        )
        refs = {remote.remote(with_sources(p).model_dump(), settings.model_dump(), key, use_gpu): p for p in pairs}
        pending = list(refs)
        try:
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                for ref in finished:
                    pair = refs[ref]
                    try:
                        result = PairResult.model_validate(ray.get(ref))
                    except Exception as exc:  # the Ray worker itself died or raised
                        result = PairResult(
                            name=pair.name,
                            status="error",
                            correct=False,
                            summary=f"the Ray task failed: {type(exc).__name__}: {str(exc)[:400]}",
                            problem_sha=pair.problem_sha,
                            solution_sha=pair.solution_sha,
                            settings_key=key,
                        )
                    record(result)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def close(self) -> None:
        if self.started_here:
            self.ray.shutdown()
