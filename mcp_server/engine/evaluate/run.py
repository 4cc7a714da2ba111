"""Batch evaluation: every (problem, solution) pair, across the local worker pool or a Ray cluster,
resumable from the results database, ending in the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Literal

from mcp_server.engine.errors import UsageError
from mcp_server.engine.evaluate.models import EvalReport, EvalSettings, PairResult, PairSpec
from mcp_server.engine.evaluate.pairs import discover_pairs, eval_folders, evaluate_pair
from mcp_server.engine.evaluate.report import build_report, draw_fast_p
from mcp_server.engine.evaluate.store import DEFAULT_DB_NAME, ResultStore
from mcp_server.engine.pool import WorkerPool
from mcp_server.engine.specs import looked_up

Progress = Callable[[float, float | None, str], None]
Backend = Literal["local", "ray"]


def _describe(r: PairResult) -> str:
    if r.status == "passed":
        if r.speedup_eager is not None:
            extra = f"{r.speedup_eager:.2f}× eager"
            if r.speedup_compile is not None:
                extra += f", {r.speedup_compile:.2f}× compile"
            return f"{r.name} correct, {extra}"
        return f"{r.name} correct"
    if r.status == "failed":
        return f"{r.name} FAILED ({', '.join(r.failure_kinds) or 'wrong'})"
    return f"{r.name} {r.status}"


def run_eval(
    problems_dir: str | Path,
    solutions_dir: str | Path,
    *,
    db: str | Path | None = None,
    redo: bool = False,
    settings: EvalSettings | None = None,
    backend: Backend = "local",
    pool: WorkerPool | None = None,
    ray_address: str | None = None,
    only: list[str] | None = None,
    plot: str | Path | None = None,
    progress: Progress | None = None,
    stop_after: int | None = None,
) -> EvalReport:
    """Evaluate every pair not already in the database (all of them with ``redo``) and report on all.

    ``pool`` (local backend): default the process-wide pool over this machine's GPUs. ``stop_after`` ends the
    run after that many pairs were evaluated (what a kill does, for tests and dry runs).
    """
    started = time.perf_counter()
    settings = settings or EvalSettings()
    problems_dir, solutions_dir = eval_folders(problems_dir, solutions_dir)
    pairs, notes = discover_pairs(problems_dir, solutions_dir, only)
    db_path = looked_up(Path(db), "--db", "Pass a file path with --db.")[0] if db else solutions_dir / DEFAULT_DB_NAME
    if backend not in ("local", "ray"):
        raise UsageError(f"--backend must be 'local' or 'ray', not {backend!r}")

    with ResultStore(db_path) as store:
        if backend == "ray":
            from mcp_server.engine.evaluate import ray_backend

            session = ray_backend.RaySession(ray_address)
            timings_possible, workers = session.gpus > 0, session.describe()
        else:
            from mcp_server.engine.pool import shared_pool

            pool = pool or shared_pool()
            timings_possible, workers = not pool.interpreter, [w.name for w in pool.workers]
            session = None
        key = settings.key(timings_possible)
        results: dict[str, PairResult] = {}
        todo: list[PairSpec] = []
        resumed = missing = 0
        for pair in pairs:
            previous = None if redo else store.reusable(pair, key)
            if previous is not None:
                results[pair.name] = previous
                resumed += 1
            elif pair.solution is None:
                results[pair.name] = evaluate_pair(pair, settings, None, settings_key=key)
                store.put(results[pair.name])
                missing += 1
            else:
                todo.append(pair)
        total = len(todo)
        done = 0

        def record(result: PairResult) -> None:
            nonlocal done
            store.put(result)
            results[result.name] = result
            done += 1
            if progress:
                progress(done, total, f"{done}/{total} · {_describe(result)}")

        if progress:
            where = ", ".join(workers)
            progress(0, total or None, f"evaluating {total} pair(s) on {where} ({len(pairs) - total} already done)")
        limit = total if stop_after is None else min(total, stop_after)
        try:
            if session is not None:
                session.run(todo[:limit], settings, key, record)
            else:
                assert pool is not None
                _run_local(pool, todo[:limit], settings, key, record)
        finally:
            if session is not None:
                session.close()

        ordered = [results[p.name] for p in pairs if p.name in results]
        if len(ordered) < len(pairs):
            notes.append(
                f"{len(pairs) - len(ordered)} pair(s) not evaluated yet (the run stopped early); rerun to finish"
            )
        report = build_report(
            ordered,
            timings_possible=timings_possible,
            problems_dir=str(problems_dir),
            solutions_dir=str(solutions_dir),
            db=str(db_path),
            backend=backend,
            workers=workers,
            evaluated_now=done + missing,
            resumed=resumed,
            wall_s=time.perf_counter() - started,
            notes=notes,
        )
    if plot:
        report.plot = draw_fast_p(report, plot)
    return report


def _run_local(
    pool: WorkerPool,
    pairs: list[PairSpec],
    settings: EvalSettings,
    key: str,
    record: Callable[[PairResult], None],
) -> None:
    """One pair per lease: on a GPU the whole GPU (validation, then timing with nothing else on it)."""

    def one(pair: PairSpec) -> PairResult:
        kind = "validate" if pool.interpreter or not settings.bench else "bench"
        with pool.lease(kind) as lease:
            return evaluate_pair(pair, settings, lease.runner, worker=lease.worker.name, settings_key=key)

    kind = "validate" if pool.interpreter or not settings.bench else "bench"
    with pool.executor(kind) as ex:
        pending: set[Future[PairResult]] = {ex.submit(one, pair) for pair in pairs}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    record(future.result())
        except BaseException:
            for future in pending:
                future.cancel()
            raise
