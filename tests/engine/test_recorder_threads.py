"""jobs.recorder follows a call's work onto other Python threads: torch ops a thread runs while a call is recorded
count as the call's, and its allocations are poisoned alike, whether the thread is new, a pool's worker waiting
since before the call, or started through ``_thread``. Run here in this process on CPU tensors."""

from __future__ import annotations

import _thread
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.utils._python_dispatch as python_dispatch
import triton
import triton.language as tl

from mcp_server.engine.jobs import recorder

recorder.install_launch_hooks()  # as a job does before it loads user code: threads started from here are followed


def _xy() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1000), torch.randn(1000)


def test_torch_work_on_a_new_thread_counts_as_the_calls():
    x, y = _xy()
    out = {}
    with recorder.recording() as record:
        worker = threading.Thread(target=lambda: out.setdefault("sum", torch.add(x, y)))
        worker.start()
        worker.join()
    assert record.ops == {"add": [1, 1000.0]}
    torch.testing.assert_close(out["sum"], x + y)


def test_a_pool_worker_waiting_since_before_the_call_is_followed_too():
    pool = ThreadPoolExecutor(max_workers=1)
    pool.submit(int).result()  # the worker exists before any recording
    x, y = _xy()
    with recorder.recording() as record:
        pool.submit(torch.mul, x, y).result()
    assert record.ops == {"mul": [1, 1000.0]}
    # Between recorded calls the same worker's ops go nowhere.
    pool.submit(torch.mul, x, y).result()
    with recorder.recording() as idle:
        pass
    assert idle.ops == {}
    pool.shutdown()


def test_a_thread_started_through_the_low_level_module_is_followed():
    x, y = _xy()
    done: list[torch.Tensor] = []
    with recorder.recording() as record:
        _thread.start_new_thread(lambda: done.append(torch.sub(x, y)), ())
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            time.sleep(0.01)
    assert done and record.ops == {"sub": [1, 1000.0]}


def test_allocations_on_another_thread_are_poisoned_as_the_calls_own():
    pool = ThreadPoolExecutor(max_workers=1)
    with recorder.recording(poison=True):
        fresh = pool.submit(torch.empty, 16).result()
    assert fresh.isnan().all()
    pool.shutdown()


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def test_a_triton_kernel_launched_from_a_thread_is_a_launch_and_no_torch_work():
    x, y = _xy()
    out = torch.empty_like(x)
    with recorder.recording() as record:
        worker = threading.Thread(target=lambda: _add_kernel[(4,)](x, y, out, 1000, BLOCK=256))
        worker.start()
        worker.join()
    assert record.ops == {} and len(record.launches) == 1
    torch.testing.assert_close(out, x + y)


def test_following_threads_leaves_torchs_process_wide_mode_flags_alone():
    # Entering a dispatch mode sets flags the main thread reads too (inductor, dynamo); a followed thread does not.
    pool = ThreadPoolExecutor(max_workers=1)
    pool.submit(torch.ones, 2).result()
    assert python_dispatch._is_in_torch_dispatch_mode is False
    assert not python_dispatch.is_in_any_mode_without_ignore_compile_internals()
    pool.shutdown()


def _interference_after(thread_work, owner_while_working: str) -> dict[str, int]:
    """Start a thread while the candidate's code runs (as bench's switch says), let it work while the process is
    ``owner_while_working``'s, and read what the recorder counted."""
    recorder._interference.clear()
    go, done = threading.Event(), threading.Event()

    def linger():
        go.wait(5)
        thread_work()
        done.set()

    recorder.own("candidate")
    try:
        worker = threading.Thread(target=linger, daemon=True)
        worker.start()
        recorder.own(owner_while_working)
        go.set()
        assert done.wait(30)
        worker.join(5)
    finally:
        recorder.own("reference")
    counts = recorder.interference()
    recorder._interference.clear()
    return counts


def test_a_thread_the_candidate_left_working_while_another_providers_code_runs_is_counted():
    # Must fail: a thread the candidate started keeps launching while stage 1 (or a baseline) is timed, slowing it.
    x, y = _xy()
    out = torch.empty_like(x)
    launch = lambda: _add_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)
    launched = _interference_after(launch, "stage1")  # (under the interpreter the launch's own torch calls count too)
    assert set(launched) == {"candidate"} and launched["candidate"] >= 1
    assert _interference_after(lambda: torch.mul(x, y), "reference") == {"candidate": 1}
    # Twins: the same work while the candidate's own code runs (a call handing work to its threads), and a thread
    # that only allocates.
    assert _interference_after(launch, "candidate") == {}
    assert _interference_after(lambda: torch.empty(10), "stage1") == {}
