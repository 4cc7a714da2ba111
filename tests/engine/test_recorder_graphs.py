"""jobs.recorder and CUDA graphs: a replay dispatches nothing, so what a graph captured is recorded at capture and
counted again for a recorded call that replays it, wherever the capture happened (at import, in a warm-up call).
The hooks are installed here on a stand-in class with CUDAGraph's three methods (no GPU here); the GPU test in
test_bench.py runs them on torch.cuda.CUDAGraph inside bench."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mcp_server.engine.jobs import recorder


class _Graph:
    """CUDAGraph's capture_begin / capture_end / replay, doing nothing (the hooks wrap them)."""

    def capture_begin(self, *args, **kwargs):
        return None

    def capture_end(self):
        return None

    def replay(self):
        return None


recorder._follow_graphs(_Graph)


@pytest.fixture(autouse=True)
def _following():
    # As in a validate child (only the candidate's code runs there); a bench Switch made by another test in this
    # process may have left following off.
    recorder.follow_captures(True)
    yield
    recorder.follow_captures(True)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _capture(work) -> _Graph:
    graph = _Graph()
    graph.capture_begin()
    try:
        work()
    finally:
        graph.capture_end()
    return graph


def test_torch_work_captured_outside_any_call_counts_in_the_call_that_replays_it():
    x, y = torch.randn(1000), torch.randn(1000)
    graph = _capture(lambda: torch.add(x, y))  # as at import: no recording in progress
    with recorder.recording() as record:
        graph.replay()
        graph.replay()
    assert record.ops == {"add": [2, 2000.0]}
    graph.replay()  # between recorded calls: nothing to count
    with recorder.recording() as idle:
        pass
    assert idle.ops == {}


def test_a_captured_triton_launch_counts_as_a_launch_and_no_torch_work():
    recorder.install_launch_hooks()
    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.empty_like(x)
    graph = _capture(lambda: _add_kernel[(4,)](x, y, out, 1000, BLOCK=256))
    assert recorder._launches == []  # kept with the graph, not left for a later recording
    with recorder.recording() as record:
        graph.replay()
    assert record.ops == {} and len(record.launches) == 1 and record.launches[0].startswith("_add_kernel")


def test_a_capture_inside_a_recorded_call_counts_once_there_and_again_at_each_later_replay():
    x, y = torch.randn(1000), torch.randn(1000)
    with recorder.recording() as capture_call:
        graph = _capture(lambda: torch.mul(x, y))
    assert capture_call.ops == {"mul": [1, 1000.0]}
    with recorder.recording() as replay_call:
        graph.replay()
    assert replay_call.ops == {"mul": [1, 1000.0]}


def test_the_judges_own_capture_is_left_alone():
    x, y = torch.randn(1000), torch.randn(1000)
    with recorder.judge_capture():
        graph = _capture(lambda: torch.add(x, y))
    with recorder.recording() as record:
        graph.replay()
    assert record.ops == {}
    assert recorder._judge_capturing is False


def test_captures_are_followed_while_the_candidate_holds_the_process_and_not_while_a_baseline_does():
    from mcp_server.engine.jobs import shared_state

    x, y = torch.randn(1000), torch.randn(1000)
    switch = shared_state.Switch()  # bench's child starts on the reference's side
    baseline_graph = _capture(lambda: torch.add(x, y))
    switch.to("candidate")
    candidate_graph = _capture(lambda: torch.add(x, y))
    switch.to("reference")
    with recorder.recording() as record:
        baseline_graph.replay()
    assert record.ops == {}
    with recorder.recording() as record:
        candidate_graph.replay()
    assert record.ops == {"add": [1, 1000.0]}
