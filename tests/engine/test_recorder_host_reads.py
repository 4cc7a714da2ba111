"""jobs.recorder counts the tensor data a recorded call hands to Python, which is the evidence of host work under the
interpreter (trust.evidence): every route, once each, on any thread, never inside a Triton launch, and nothing
outside a recording. Run here in this process on CPU tensors."""

from __future__ import annotations

import io
import pickle
import threading

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from mcp_server.engine.jobs import recorder

recorder.install_launch_hooks()  # as a job does before it loads user code


@pytest.mark.parametrize(
    "read",
    [
        lambda x: x.tolist(),
        lambda x: x.numpy().sum(),
        lambda x: np.asarray(x),  # __array__, which calls numpy(): counted once
        lambda x: np.from_dlpack(x),
        lambda x: [float(v) for v in x],  # item access, element by element
        lambda x: bytes(x.untyped_storage()),
        lambda x: x.untyped_storage().tolist(),
        lambda x: torch.save(x, io.BytesIO()),  # the zip format: write_record
        lambda x: torch.save(x, io.BytesIO(), _use_new_zipfile_serialization=False),  # the old one: _write_file
        lambda x: pickle.dumps(x),  # the storage's __reduce__, which saves in the old format
        lambda x: x.untyped_storage().__reduce__(),
        lambda x: x.share_memory_(),  # the storage as a shared-memory file (share_memory_, then _share_*_cpu_)
        lambda x: torch._C._to_dlpack(x),  # a capsule, without the tensor's __dlpack__
        lambda x: torch.utils.dlpack.to_dlpack(x),
        lambda x: x.apply_(lambda v: v),  # Python called on every element
    ],
    ids=[
        "tolist", "numpy", "array", "dlpack", "items", "storage-bytes", "storage-tolist", "save", "save-legacy",
        "pickle", "storage-reduce", "shared-memory", "c-dlpack", "utils-dlpack", "apply",
    ],
)  # fmt: skip
def test_every_route_to_the_data_counts_its_bytes_once(read):
    x = torch.randn(256)
    with recorder.recording() as record:
        read(x)
    assert record.host_read_bytes == x.numel() * x.element_size()


class _Holder(torch.nn.Module):
    def __init__(self, t):
        super().__init__()
        self.register_buffer("t", t)

    def forward(self):
        return self.t


@pytest.mark.parametrize("to", ["buffer", "file"])
def test_torchscript_and_c_serializers_count_what_they_write(to, tmp_path):
    # Counted by the size of what they hand over (bytes returned, or the file written): the buffer and more.
    module = torch.jit.script(_Holder(torch.randn(1000)))
    with recorder.recording() as record:
        torch.jit.save(module, io.BytesIO() if to == "buffer" else str(tmp_path / "m.pt"))
    assert 4000 < record.host_read_bytes < 4000 + 8192
    with recorder.recording() as record:
        torch._C._pickle_save(torch.randn(1000))
    assert 4000 < record.host_read_bytes < 4000 + 8192


def test_python_called_on_pairs_and_triples_of_elements_counts_every_tensor_it_sees():
    x, y, z = torch.randn(100), torch.randn(100), torch.randn(100)
    with recorder.recording() as record:
        x.map_(y, lambda a, b: a * b + a)
    assert record.host_read_bytes == 800
    with recorder.recording() as record:
        x.map2_(y, z, lambda a, b, c: a + b * c)
    assert record.host_read_bytes == 1200


def test_sizes_views_and_reads_outside_a_recording_count_nothing_and_a_flag_counts_one_element():
    x = torch.randn(64, 32)
    x.tolist()  # no recording under way
    with recorder.recording() as record:
        _ = x.shape, x.stride(), x.numel(), x[:, :4].T, x.data_ptr()
    assert record.host_read_bytes == 0
    with recorder.recording() as record:
        bool(torch.isfinite(x[0, 0]))
    assert record.host_read_bytes == 1  # one bool


def test_a_read_on_another_thread_counts_as_the_calls():
    x = torch.randn(100)
    with recorder.recording() as record:
        worker = threading.Thread(target=x.tolist)
        worker.start()
        worker.join()
    assert record.host_read_bytes == 400


def test_a_wrapper_taken_off_or_shadowed_is_named_and_put_back():
    # The wrappers sit where the methods are defined: tolist and numpy on the C base type (which super() of a
    # tensor's type reaches), _write_file on the storage's.
    base = torch._C.TensorBase
    wrapper = base.__dict__["tolist"]
    assert "tolist" not in torch.Tensor.__dict__ and wrapper.__name__ == "tolist"
    x = torch.randn(100)
    with recorder.recording() as record:
        torch.Tensor.tolist = lambda self: []  # a shadow on torch.Tensor, inside the call: seen when the call ends
        x.tolist()
    assert record.host_reads_unhooked == ["torch.Tensor.tolist"] and "tolist" not in torch.Tensor.__dict__
    assert base.__dict__["tolist"] is wrapper
    numpy = base.__dict__["numpy"]
    recorder._set_class_attr(base, "numpy", numpy.__kwdefaults__["__original"])  # before the call: seen at its start
    with recorder.recording() as record:
        x.numpy()
    assert record.host_reads_unhooked == ["torch._C.TensorBase.numpy"] and record.host_read_bytes == 400
    assert base.__dict__["numpy"] is numpy
    # The storage's and torch.save's points alike.
    torch.UntypedStorage._write_file = print
    writer = torch._C.PyTorchFileWriter.__dict__["write_record"]
    torch._C.PyTorchFileWriter.write_record = print
    with recorder.recording() as record:
        pass
    assert sorted(record.host_reads_unhooked) == [
        "torch.UntypedStorage._write_file",
        "torch._C.PyTorchFileWriter.write_record",
    ]
    assert torch._C.PyTorchFileWriter.__dict__["write_record"] is writer
    assert "_write_file" not in torch.UntypedStorage.__dict__
    with recorder.recording() as record:
        x.tolist()
        super(type(x), x).tolist()
    assert record.host_reads_unhooked == [] and record.host_read_bytes == 800


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_what_the_interpreter_reads_inside_a_launch_is_not_the_calls():
    x = torch.randn(1000)
    out = torch.empty_like(x)
    with recorder.recording() as record:
        _double[(4,)](x, out, x.numel(), BLOCK=256)
    assert record.host_read_bytes == 0 and record.launches
    torch.testing.assert_close(out, 2 * x)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.from_numpy(np.zeros(1000, np.float32)),
        lambda: torch.frombuffer(bytearray(4000), dtype=torch.float32),
        lambda: torch.as_tensor(np.zeros(1000, np.float32)),
        lambda: torch.from_dlpack(np.zeros(1000, np.float32)),
    ],
)
def test_data_written_into_memory_a_python_object_holds_counts_as_read_and_a_fresh_tensor_does_not(make):
    # Must count: a copy into a tensor over a numpy array's (or a buffer's) memory, and that tensor handed to a Triton
    # kernel (which may write it). Twins: the same copy into a tensor torch made, a view of the shared tensor, and
    # a read of the shared tensor into a fresh one count nothing.
    shared, x = make(), torch.randn(1000)
    with recorder.recording() as record:
        shared.copy_(x)
    assert record.host_read_bytes == 4000
    with recorder.recording() as record:
        _double[(4,)](x, shared, x.numel(), BLOCK=256)
    assert record.host_read_bytes == 4000
    with recorder.recording() as record:
        torch.empty(1000).copy_(x)
        shared[:10].reshape(2, 5)
        shared.clone()
    assert record.host_read_bytes == 0
