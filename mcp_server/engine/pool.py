"""A worker pool over the local GPUs: where a job runs, and who waits for whom.

One worker per GPU, each with its own :class:`Runner` (its fork servers) whose jobs are pinned to that GPU
with ``CUDA_VISIBLE_DEVICES`` (:meth:`DeviceInfo.job_env` with the worker's ``gpu_index``). Without a GPU
the pool has one ``cpu-interpreter`` worker that runs several jobs at once.

Two kinds of lease:

- ``validate``: up to ``slots`` at once per worker (validations may share a GPU); the least busy worker
  takes the next one, so validations spread across GPUs.
- ``bench``: one GPU to itself — no validation or other bench of this process runs on it meanwhile (other
  work on the GPU would be in the timings). Across processes, :class:`~mcp_server.engine.bench.gpu_lock`
  still serializes benches per GPU. On the interpreter a bench lease is a plain slot (bench refuses there).

Callers wait in one FIFO queue: nobody overtakes the caller at the head, so a bench waiting for its GPU to
drain is not starved by validations arriving after it. A waiting caller's ``on_queue(position, message)``
is called whenever its position changes ("queued: position 3 of 5 …").
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from mcp_server.engine import device as device_mod
from mcp_server.engine.device import DeviceInfo, probe
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.runner import Runner, shared_runner

JobKind = Literal["validate", "bench"]
QueueCallback = Callable[[int, str], None]

# Validations per GPU at once: a validation is mostly process start, CUDA init and host-side comparison,
# so a few overlap well on one GPU; more would only queue on the GPU's memory.
DEFAULT_GPU_SLOTS = 4


def default_cpu_slots() -> int:
    """Interpreter jobs are CPU-bound: about one per two cores, at least two."""
    return max(2, (os.cpu_count() or 2) // 2)


class WorkerStatus(BaseModel):
    name: str = Field(description="cuda:N, or cpu-interpreter")
    device: str
    gpu_index: int | None = None
    slots: int = Field(description="validations this worker runs at once")
    validating: int
    benching: bool
    jobs_done: int


class PoolStatus(BaseModel):
    interpreter: bool
    workers: list[WorkerStatus]
    queued: int = Field(description="callers waiting for a worker")
    running: int


@dataclass
class Worker:
    name: str
    device: DeviceInfo
    runner: Runner
    slots: int
    owns_runner: bool = False
    validating: int = 0
    benching: bool = False
    jobs_done: int = 0

    def can_take(self, kind: JobKind) -> bool:
        if self.benching:
            return False
        if kind == "bench" and not self.device.interpreter:
            return self.validating == 0
        return self.validating < self.slots

    def status(self) -> WorkerStatus:
        return WorkerStatus(
            name=self.name,
            device=self.device.device,
            gpu_index=self.device.gpu_index,
            slots=self.slots,
            validating=self.validating,
            benching=self.benching,
            jobs_done=self.jobs_done,
        )


@dataclass
class Lease:
    """A place on a worker; give it back with :meth:`release` (or use it as a context manager)."""

    pool: WorkerPool
    worker: Worker
    kind: JobKind
    waited_s: float = 0.0
    _released: bool = field(default=False, repr=False)

    @property
    def runner(self) -> Runner:
        return self.worker.runner

    @property
    def device(self) -> DeviceInfo:
        return self.worker.device

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.pool._release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Ticket:
    __slots__ = ("kind",)

    def __init__(self, kind: JobKind):
        self.kind = kind


class WorkerPool:
    """Thread-safe. Jobs run in the workers' runners; the pool only decides where and when."""

    def __init__(self, workers: list[Worker]):
        if not workers:
            raise ValueError("a pool needs at least one worker")
        self.workers = workers
        self._cond = threading.Condition()
        self._queue: deque[_Ticket] = deque()
        self._generation = 0  # bumped on every change a waiter may care about

    # -- facts -------------------------------------------------------------------------------------
    @property
    def interpreter(self) -> bool:
        return self.workers[0].device.interpreter

    @property
    def device(self) -> DeviceInfo:
        return self.workers[0].device

    def capacity(self, kind: JobKind) -> int:
        """How many leases of this kind can be held at once."""
        if kind == "bench" and not self.interpreter:
            return len(self.workers)
        return sum(w.slots for w in self.workers)

    def status(self) -> PoolStatus:
        with self._cond:
            return PoolStatus(
                interpreter=self.interpreter,
                workers=[w.status() for w in self.workers],
                queued=len(self._queue),
                running=sum(w.validating + int(w.benching) for w in self.workers),
            )

    # -- leases ------------------------------------------------------------------------------------
    def acquire(
        self, kind: JobKind = "validate", *, on_queue: QueueCallback | None = None, timeout_s: float | None = None
    ) -> Lease:
        """Wait (FIFO) for a worker that can take a job of this kind; raise TimeoutError after ``timeout_s``."""
        if kind not in ("validate", "bench"):
            raise UsageError(f"unknown job kind {kind!r}: 'validate' or 'bench'")
        started = time.perf_counter()
        ticket = _Ticket(kind)
        told = 0
        with self._cond:
            self._queue.append(ticket)
            self._bump()
            try:
                while True:
                    if self._queue[0] is ticket:
                        worker = self._pick(kind)
                        if worker is not None:
                            self._queue.popleft()
                            if kind == "bench" and not worker.device.interpreter:
                                worker.benching = True
                            else:
                                worker.validating += 1
                            self._bump()
                            return Lease(self, worker, kind, waited_s=time.perf_counter() - started)
                    generation = self._generation
                    position = self._queue.index(ticket) + 1
                    if on_queue is not None and position != told:
                        told = position
                        message = self._queue_message(position, kind)
                        self._cond.release()
                        try:
                            on_queue(position, message)
                        finally:
                            self._cond.acquire()
                        if self._generation != generation:
                            continue
                    remaining = None if timeout_s is None else timeout_s - (time.perf_counter() - started)
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"waited {timeout_s:g} s for a worker ({kind}); the pool is busy")
                    self._cond.wait(remaining)
            except BaseException:
                with contextlib.suppress(ValueError):
                    self._queue.remove(ticket)
                self._bump()
                raise

    @contextlib.contextmanager
    def lease(
        self, kind: JobKind = "validate", *, on_queue: QueueCallback | None = None, timeout_s: float | None = None
    ) -> Iterator[Lease]:
        lease = self.acquire(kind, on_queue=on_queue, timeout_s=timeout_s)
        try:
            yield lease
        finally:
            lease.release()

    def _pick(self, kind: JobKind) -> Worker | None:
        able = [w for w in self.workers if w.can_take(kind)]
        if not able:
            return None
        # Spread: the least busy worker, then the one that has done least.
        return min(able, key=lambda w: (w.validating + int(w.benching), w.jobs_done))

    def _queue_message(self, position: int, kind: JobKind) -> str:
        busy = sum(w.validating + int(w.benching) for w in self.workers)
        where = "GPU" if not self.interpreter else "worker"
        what = "a GPU to itself (bench)" if kind == "bench" and not self.interpreter else "a free slot"
        return (
            f"queued: position {position} of {len(self._queue)}, waiting for {what}; "
            f"{busy} job(s) running on {len(self.workers)} {where}(s)"
        )

    def _release(self, lease: Lease) -> None:
        with self._cond:
            worker = lease.worker
            if lease.kind == "bench" and not worker.device.interpreter:
                worker.benching = False
            else:
                worker.validating -= 1
            worker.jobs_done += 1
            self._bump()

    def _bump(self) -> None:
        self._generation += 1
        self._cond.notify_all()

    # -- running many ------------------------------------------------------------------------------
    def executor(self, kind: JobKind) -> ThreadPoolExecutor:
        """Threads enough to keep every place of this kind busy (each thread still takes a lease)."""
        return ThreadPoolExecutor(max_workers=self.capacity(kind), thread_name_prefix=f"ptt-pool-{kind}")

    def close(self) -> None:
        for worker in self.workers:
            if worker.owns_runner:
                worker.runner.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- building a pool ----------------------------------------------------------------------------------


def pin(runner: Runner, device: DeviceInfo) -> None:
    """Make ``probe(runner)`` answer ``device`` (with its ``gpu_index``) for every engine call on this runner."""
    with device_mod._lock:
        device_mod._cache[id(runner)] = device


def visible_gpus(base: DeviceInfo) -> list[int] | None:
    """The GPU indices jobs may be pinned to; None when they cannot be named by index (UUIDs, MIG)."""
    if base.interpreter:
        return []
    if base.gpu_index is not None:  # PTT_DEVICE=cuda:N
        return [base.gpu_index]
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None and listed.strip():
        items = [item.strip() for item in listed.split(",") if item.strip()]
        if not all(item.isdigit() for item in items):
            return None
        return [int(item) for item in items][: max(base.device_count, 1)]
    return list(range(max(base.device_count, 1)))


def discover(
    runner: Runner | None = None,
    *,
    gpus: list[int] | None = None,
    gpu_slots: int = DEFAULT_GPU_SLOTS,
    cpu_slots: int | None = None,
    base_env: dict[str, str | None] | None = None,
) -> WorkerPool:
    """A pool over this machine's devices, probed once through ``runner`` (default: the shared runner).

    ``gpus`` restricts the pool to those indices (e.g. ``[0]`` to measure one GPU against all of them).
    ``base_env`` is added to every job's environment (e.g. fresh cache folders); GPU workers get their own
    runners, the interpreter worker reuses ``runner`` unless ``base_env`` is given.
    """
    if gpu_slots < 1 or (cpu_slots is not None and cpu_slots < 1):
        raise UsageError("a pool needs at least one slot per worker")
    runner = runner or shared_runner()
    base = probe(runner)
    if base.interpreter:
        if gpus:
            raise EnvironmentUnavailable(f"GPUs {gpus} were asked for, but no CUDA GPU is visible here")
        own = base_env is not None
        worker_runner = Runner(base_env=base_env) if own else runner
        if own:
            pin(worker_runner, base)
        slots = cpu_slots or default_cpu_slots()
        return WorkerPool([Worker("cpu-interpreter", base, worker_runner, slots, owns_runner=own)])

    available = visible_gpus(base)
    if available is None:
        # Devices named by UUID or MIG instance: one worker on what the jobs see by default.
        if gpus:
            raise UsageError("CUDA_VISIBLE_DEVICES names devices by UUID; --gpus cannot pick among them")
        return WorkerPool([Worker("cuda", base, runner, gpu_slots)])
    chosen = available if gpus is None else gpus
    missing = [g for g in chosen if g not in available]
    if missing:
        raise UsageError(f"GPU(s) {missing} are not visible here; visible: {available}")
    if not chosen:
        raise UsageError("no GPU was chosen")

    def start(index: int) -> Worker:
        env = {**(base_env or {}), "CUDA_VISIBLE_DEVICES": str(index)}
        gpu_runner = Runner(base_env=env)
        try:
            info = probe(gpu_runner)  # starts this worker's fork server and names its GPU
        except BaseException:
            gpu_runner.close()
            raise
        pinned = info.model_copy(update={"gpu_index": index, "device_count": len(chosen)})
        pin(gpu_runner, pinned)
        return Worker(f"cuda:{index}", pinned, gpu_runner, gpu_slots, owns_runner=True)

    with ThreadPoolExecutor(max_workers=len(chosen)) as ex:
        futures = [ex.submit(start, i) for i in chosen]
        workers, errors = [], []
        for f in futures:
            try:
                workers.append(f.result())
            except Exception as exc:
                errors.append(exc)
    if errors:
        for w in workers:
            w.runner.close()
        raise EnvironmentUnavailable(f"could not start a worker on every GPU: {errors[0]}")
    return WorkerPool(workers)


_shared: WorkerPool | None = None
_shared_lock = threading.Lock()


def shared_pool(**kwargs: object) -> WorkerPool:
    """The process-wide pool (discovered on first use; later calls ignore ``kwargs``)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = discover(**kwargs)  # type: ignore[arg-type]
        return _shared


def set_shared_pool(pool: WorkerPool | None) -> None:
    """Install a pool as the process-wide one (the HTTP server does, with its options; tests do)."""
    global _shared
    with _shared_lock:
        _shared = pool
