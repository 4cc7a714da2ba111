"""The worker pool's placement and queue, with stand-in workers (no process is started), and its pinning
of jobs to a GPU."""

from __future__ import annotations

import threading

import pytest

from mcp_server.engine import device as device_mod
from mcp_server.engine.device import DeviceInfo, probe
from mcp_server.engine.pool import Worker, WorkerPool, pin, visible_gpus
from mcp_server.engine.runner import Runner


def info(gpu: int | None = None, *, count: int = 2) -> DeviceInfo:
    if gpu is None:
        return DeviceInfo(device="cpu-interpreter", interpreter=True, torch="t", triton="t", python="3")
    return DeviceInfo(
        device="NVIDIA H200", interpreter=False, torch="t", triton="t", python="3", gpu_index=gpu, device_count=count
    )


@pytest.fixture
def gpu_pool(tmp_path):
    runners = [Runner(tmp_root=str(tmp_path / f"r{i}")) for i in range(2)]
    yield WorkerPool([Worker(f"cuda:{i}", info(i), runners[i], slots=2) for i in range(2)])


@pytest.fixture
def cpu_pool(tmp_path):
    yield WorkerPool([Worker("cpu-interpreter", info(), Runner(tmp_root=str(tmp_path / "r")), slots=1)])


def test_validations_spread_across_gpus(gpu_pool):
    a, b = gpu_pool.acquire("validate"), gpu_pool.acquire("validate")
    assert {a.worker.name, b.worker.name} == {"cuda:0", "cuda:1"}
    c, d = gpu_pool.acquire("validate"), gpu_pool.acquire("validate")  # two slots per GPU: they may share
    assert sorted(w.validating for w in gpu_pool.workers) == [2, 2]
    for lease in (a, b, c, d):
        lease.release()
    assert gpu_pool.status().running == 0


def test_a_bench_has_its_gpu_to_itself(gpu_pool):
    bench0 = gpu_pool.acquire("bench")
    bench1 = gpu_pool.acquire("bench")
    assert {bench0.worker.name, bench1.worker.name} == {"cuda:0", "cuda:1"}
    with pytest.raises(TimeoutError):
        gpu_pool.acquire("validate", timeout_s=0.05)  # both GPUs are benching
    bench0.release()
    v = gpu_pool.acquire("validate", timeout_s=5)
    assert v.worker is bench0.worker
    with pytest.raises(TimeoutError):
        gpu_pool.acquire("bench", timeout_s=0.05)  # cuda:0 runs a validation, cuda:1 a bench
    v.release()
    bench1.release()


def test_releasing_twice_is_harmless(gpu_pool):
    lease = gpu_pool.acquire("bench")
    lease.release()
    lease.release()
    assert not any(w.benching for w in gpu_pool.workers) and gpu_pool.status().running == 0


def test_waiting_callers_are_told_their_position_and_served_in_order(cpu_pool):
    holder = cpu_pool.acquire("validate")
    told: dict[int, list[int]] = {0: [], 1: [], 2: []}
    served: list[int] = []
    done = {k: threading.Event() for k in range(3)}

    def waiter(k: int) -> None:
        def on_queue(position: int, message: str) -> None:
            assert message.startswith(f"queued: position {position} of ")
            told[k].append(position)

        with cpu_pool.lease("validate", on_queue=on_queue):
            served.append(k)
            done[k].wait(10)

    def until(condition) -> None:
        tick = threading.Event()
        for _ in range(1000):
            if condition():
                return
            tick.wait(0.01)
        raise AssertionError(f"timed out: served {served}, told {told}")

    threads: list[threading.Thread] = []
    for k in range(3):
        threads.append(threading.Thread(target=waiter, args=(k,)))
        threads[-1].start()
        until(lambda k=k: len(told[k]) == 1)  # in the queue, so the order is known
    assert [told[k] for k in range(3)] == [[1], [2], [3]]
    assert cpu_pool.status().queued == 3
    holder.release()
    until(lambda: served == [0] and told[2] == [3, 2])
    done[0].set()
    until(lambda: served == [0, 1] and told[2] == [3, 2, 1])
    assert told[1] == [2, 1]
    done[1].set()
    until(lambda: served == [0, 1, 2])
    done[2].set()
    for t in threads:
        t.join(10)
    assert cpu_pool.status().running == 0 and cpu_pool.status().queued == 0


def test_a_caller_that_gives_up_leaves_the_queue(cpu_pool):
    holder = cpu_pool.acquire("validate")
    with pytest.raises(TimeoutError):
        cpu_pool.acquire("validate", timeout_s=0.05)
    assert cpu_pool.status().queued == 0
    holder.release()
    cpu_pool.acquire("validate", timeout_s=1).release()


def test_on_the_interpreter_a_bench_lease_is_an_ordinary_slot(cpu_pool):
    lease = cpu_pool.acquire("bench")
    assert cpu_pool.workers[0].validating == 1 and not cpu_pool.workers[0].benching
    lease.release()


def test_capacity_counts_slots_or_gpus(gpu_pool, cpu_pool):
    assert gpu_pool.capacity("validate") == 4 and gpu_pool.capacity("bench") == 2
    assert cpu_pool.capacity("validate") == 1 and cpu_pool.capacity("bench") == 1


def test_pinning_makes_probe_answer_the_gpu_and_job_env_select_it(tmp_path):
    runner = Runner(tmp_root=str(tmp_path / "r"))
    try:
        pin(runner, info(1))
        device = probe(runner)  # no probe child: the pinned answer
        assert device.gpu_index == 1 and device.job_env()["CUDA_VISIBLE_DEVICES"] == "1"
    finally:
        with device_mod._lock:
            device_mod._cache.pop(id(runner), None)


@pytest.mark.parametrize(
    ("env", "count", "expected"),
    [
        (None, 2, [0, 1]),
        ("2,3", 2, [2, 3]),
        (" 1 ", 1, [1]),
        ("GPU-1234abcd,GPU-5678", 2, None),
    ],
)
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, env, count, expected):
    if env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    base = info(None).model_copy(update={"interpreter": False, "device": "GPU", "device_count": count})
    assert visible_gpus(base) == expected


def test_ptt_device_picks_one_gpu():
    base = info(3)
    assert visible_gpus(base) == [3]
