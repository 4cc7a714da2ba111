"""jobs.recorder.LaunchStreams: the streams Triton kernels were launched on, read by raw handle on every launch and
built into a stream object once per stream. No GPU here: the raw-handle reader and torch.cuda's stream functions
are stand-ins; the GPU tests of test_bench.py and test_validate_gpu.py run the real ones (a side-stream candidate
timed honestly, a side-stream race caught)."""

from __future__ import annotations

import pytest
import torch

from mcp_server.engine.jobs import recorder


class _Stream:
    def __init__(self, index: int, handle: int):
        self.device_index, self.cuda_stream = index, handle


@pytest.fixture
def gpu(monkeypatch):
    """A stand-in current device and stream; counts the stream objects built."""
    state = {"index": 0, "handle": 7, "built": 0}

    def current_stream(index=None):
        state["built"] += 1
        return _Stream(state["index"] if index is None else index, state["handle"])

    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["index"])
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(recorder.LaunchStreams, "_raw", staticmethod(lambda index: state["handle"]))
    return state


def test_a_stream_object_is_built_once_per_stream_however_many_launches(gpu):
    streams = recorder.LaunchStreams()
    for _ in range(50):
        streams.launched()
    assert gpu["built"] == 1
    gpu["handle"] = 9
    streams.launched()
    streams.launched()
    assert gpu["built"] == 2
    assert sorted(streams) == [(0, 7), (0, 9)]
    assert [s.cuda_stream for s in streams.values()] == [7, 9]


def test_the_same_handle_on_another_device_is_another_stream(gpu):
    streams = recorder.LaunchStreams()
    streams.launched()
    gpu["index"] = 1
    streams.launched()
    assert sorted(streams) == [(0, 7), (1, 7)]
    assert streams[(1, 7)].device_index == 1


def test_added_runs_once_for_each_new_stream_before_the_launch_it_precedes(gpu):
    seen = []

    class Watch(recorder.LaunchStreams):
        def added(self, key):
            seen.append((key, key in self))

    streams = Watch()
    for handle in (7, 7, 9, 7, 9, 11):
        gpu["handle"] = handle
        streams.launched()
    assert seen == [((0, 7), True), ((0, 9), True), ((0, 11), True)]


def test_a_streams_key_is_what_the_hook_reads_for_it(gpu):
    streams = recorder.LaunchStreams()
    streams.launched()
    (key,) = streams
    assert recorder.LaunchStreams.key_of(streams[key]) == key
