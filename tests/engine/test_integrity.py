"""jobs.integrity: in the bench child, what the candidate's code replaced of the judge's own code is named, put back
and costs the candidate its timings. Run here on the CPU, in this process; each test puts back what it changed."""

from __future__ import annotations

import json

import pytest
import torch
import triton
import triton.language as tl

from mcp_server.engine.jobs import bench_job, integrity, recorder, shared_state, timed_check

# As bench does: the op recorder's hooks (Triton's launch paths, the thread starters) go in before the guard looks.
recorder.install_launch_hooks()


@pytest.fixture(autouse=True)
def candidate_holds_the_process():
    # The guard looks when the candidate hands the process back; bench turned CUDA-graph following on when it gave
    # the candidate the process (a Switch left in the reference's state elsewhere turns it off).
    recorder.follow_captures(True)
    yield
    recorder.follow_captures(True)


def test_the_judge_running_as_it_does_changes_nothing_the_guard_watches():
    guard = integrity.Guard()
    with recorder.recording():
        torch.ones(4) + 1
    recorder.AUTOTUNE_NOTES.append("a note")  # state the judge changes itself is not watched
    recorder.AUTOTUNE_NOTES.pop()
    timed_check.compare_outputs([torch.ones(8)], [torch.ones(8)], None, 0.0)
    # A candidate's threads and pools (the reference kernels compile autotuning configs in one) change nothing either.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(lambda v: v * 2, [1, 2])) == [2, 4]
    assert guard.check() == [] and guard.replaced == []


def test_code_run_through_exec_that_replaces_the_judges_code_is_named_and_put_back():
    guard = integrity.Guard()
    events_round, dumps = bench_job._Timer.events_round, json.dumps
    # What the static scan cannot read: a computed module name, run through exec.
    exec(
        "import sys\n"
        "job = sys.modules['mcp_' + 'server.engine.jobs.bench_job']\n"
        "job._Timer.events_round = lambda *a, **k: [1e-3]\n"
        "sys.modules['mcp_' + 'server.engine.jobs.timed_check'].CHECK_FACTOR = 1e9\n"
        "import json\njson.dumps = lambda *a, **k: '{}'\n"
    )
    found = guard.check()
    assert set(found) == {
        "mcp_server.engine.jobs.bench_job._Timer.events_round",
        "mcp_server.engine.jobs.timed_check.CHECK_FACTOR",
        "json.dumps",
    }
    assert bench_job._Timer.events_round is events_round and json.dumps is dumps and timed_check.CHECK_FACTOR == 4.0
    assert guard.check() == [] and len(guard.replaced) == 3  # put back once, remembered


def test_putting_back_an_unwrapped_thread_starter_is_named_and_undone():
    # A thread started by the raw starter would run torch ops the op recorder does not follow.
    import _thread
    import threading

    guard = integrity.Guard()
    wrapped = _thread.start_new_thread
    exec("import _thread, threading\n_thread.start_new_thread = threading.get_ident\n")
    assert guard.check() == ["_thread.start_new_thread"]
    assert _thread.start_new_thread is wrapped and threading._start_new_thread is wrapped


def test_unwrapping_tritons_launch_path_is_named_and_undone():
    # Must fail: JITFunction.run put back to Triton's own (the wrapper's default argument) launches kernels the
    # recorder does not count, on streams bench's end event does not wait for.
    from triton.runtime import autotuner, jit

    wrapped, tuned = jit.JITFunction.run, autotuner.Autotuner.run
    guard = integrity.Guard()
    # Twin: launching a kernel through the wrappers (under the interpreter here) replaces nothing.
    out = torch.zeros(8)
    _fill[(1,)](out, 8, BLOCK=8)
    assert out.eq(1).all() and guard.check() == []
    exec(
        "import triton.runtime.jit as j, triton.runtime.autotuner as a\n"
        "setattr(j.JITFunction, 'r' + 'un', j.JITFunction.run.__kwdefaults__['__original'])\n"
        "a.Autotuner.run = lambda self, *args, **kw: None\n"
    )
    assert set(guard.check()) == {"triton.runtime.jit.JITFunction.run", "triton.runtime.autotuner.Autotuner.run"}
    assert jit.JITFunction.run is wrapped and autotuner.Autotuner.run is tuned


@triton.jit
def _fill(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 1.0, mask=offs < n)


def test_the_recorders_flags_and_containers_changed_by_the_candidate_are_named_and_put_back():
    # Flags the judge itself flips as it runs are not identities the guard can take: at a handback they must be what
    # the judge leaves there (captures followed, no capture of the judge's own or recording under way).
    guard = integrity.Guard()
    graph_work, launches = recorder._graph_work, recorder._launches
    exec(
        "import sys\n"
        "rec = sys.modules['mcp_' + 'server.engine.jobs.recorder']\n"
        "rec.follow_captures(False)\n"
        "rec._judge_capturing = True\n"
        "rec._graph_work = {}\n"
        "rec._launches = []\n"
    )
    assert set(guard.check()) == {
        f"mcp_server.engine.jobs.recorder.{name}"
        for name in ("_following_captures", "_judge_capturing", "_graph_work", "_launches")
    }
    assert recorder._graph_work is graph_work and recorder._launches is launches
    assert recorder._following_captures and not recorder._judge_capturing
    assert guard.check() == []


def test_the_judges_own_capture_and_recordings_ended_before_a_handback_leave_nothing_to_name():
    guard = integrity.Guard()
    with recorder.recording(), recorder.judge_capture():
        torch.ones(4) * 2
    switch = shared_state.Switch()  # in the reference's state: following off until the candidate gets the process
    switch.guard = guard
    switch.to("candidate")
    with recorder.recording():
        torch.ones(4) + 1
    switch.to("reference")
    assert guard.replaced == []


def test_the_judges_op_sets_and_tolerances_cannot_change_in_place_and_a_replacement_is_put_back():
    from mcp_server.engine import compare

    # Mutated in place, a set or dict would keep its identity: the recorder's op sets and the default tolerances are
    # frozen, so the only way to change them is to replace them, which the guard sees.
    with pytest.raises(AttributeError):
        recorder.MOVEMENT_OPS.add("mm")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        compare.DEFAULT_TOLERANCES["float32"] = (1.0, 1.0)  # type: ignore[index]
    guard = integrity.Guard()
    movement, tolerances = recorder.MOVEMENT_OPS, compare.DEFAULT_TOLERANCES
    exec(
        "import sys\n"
        "rec = sys.modules['mcp_' + 'server.engine.jobs.recorder']\n"
        "rec.MOVEMENT_OPS = rec.MOVEMENT_OPS | {'mm', 'addmm'}\n"
        "cmp = sys.modules['mcp_' + 'server.engine.compare']\n"
        "cmp.DEFAULT_TOLERANCES = {'float32': (1.0, 1.0)}\n"
    )
    assert set(guard.check()) == {
        "mcp_server.engine.jobs.recorder.MOVEMENT_OPS",
        "mcp_server.engine.compare.DEFAULT_TOLERANCES",
    }
    assert recorder.MOVEMENT_OPS is movement and compare.DEFAULT_TOLERANCES is tolerances


def test_the_switch_looks_each_time_the_candidate_hands_the_process_back_and_all_its_timings_are_refused():
    switch = shared_state.Switch()
    switch.guard = integrity.Guard()
    switch.to("candidate")
    original = timed_check.compare_outputs
    timed_check.compare_outputs = lambda *a, **k: None  # a check that passes everything
    switch.to("reference")
    assert timed_check.compare_outputs is original
    assert switch.guard.replaced == ["mcp_server.engine.jobs.timed_check.compare_outputs"]
    # What changes while the reference's code runs (torch's own doing) is not held against the candidate.
    json_dumps = json.dumps
    json.dumps = lambda *a, **k: "{}"
    try:
        switch.to("candidate")
        switch.to("reference")
        assert switch.guard.replaced == ["mcp_server.engine.jobs.timed_check.compare_outputs"]
    finally:
        json.dumps = json_dumps
    rows = [{"timings": [{"provider": "candidate"}, {"provider": "stage1"}, {"provider": "eager"}]}]
    bench_job._refuse_all(rows, {"candidate", "stage1"}, switch.guard.replaced)
    errors = [t.get("error") for t in rows[0]["timings"]]
    assert errors[0].startswith("evasion: ") and "compare_outputs" in errors[0] and errors[1] == errors[0]
    assert errors[2] is None  # the baselines' timings stand
