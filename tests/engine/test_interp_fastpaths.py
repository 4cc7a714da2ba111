"""mcp_server/engine/interp/fastpaths.py: the interpreter's dtype lookup, tuple names and integer overflow checks,
faster and the same."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.language import core, semantic
from triton.runtime import interpreter as interp

from mcp_server.engine.interp import fastpaths

SCALARS = [
    tl.int1, tl.int8, tl.int16, tl.int32, tl.int64, tl.uint8, tl.uint16, tl.uint32, tl.uint64,
    tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5, tl.float8e4nv, tl.float8e4b15,
]  # fmt: skip


def _original_np_dtype():
    fastpaths.install()  # idempotent: keeps the function Triton shipped
    assert fastpaths._triton_np_dtype is not None and interp._get_np_dtype is not fastpaths._triton_np_dtype
    return fastpaths._triton_np_dtype


def test_the_dtype_lookup_gives_what_triton_gives_for_scalars_blocks_and_pointers():
    original = _original_np_dtype()
    fast = fastpaths._np_dtype_lookup(original)
    types = [*SCALARS, *(tl.block_type(t, [4, 8]) for t in SCALARS), tl.pointer_type(tl.float32)]
    types.append(tl.block_type(tl.pointer_type(tl.float16), [16]))
    for t in types:
        assert fast(t) == original(t), t
        assert fast(t) == original(t), t  # from the table the second time


def test_the_dtype_lookup_refuses_what_triton_refuses():
    original = _original_np_dtype()
    fast = fastpaths._np_dtype_lookup(original)
    with pytest.raises(KeyError):
        original(tl.void)
    with pytest.raises(KeyError):
        fast(tl.void)


def test_tuple_names_are_the_ones_triton_formats_only_later():
    fastpaths.install()
    t = core.tuple_type([tl.int32, tl.float16], ["a", "b"])
    assert "_name" not in vars(t)  # nothing formatted at construction
    assert t.name == "[a:int32,b:fp16]" == str(t)
    assert core.tuple_type([tl.int32]).name == "[:int32]"
    t.name = "renamed"
    assert str(t) == "renamed"


@triton.jit
def _times(x_ptr, out_ptr, factor, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * factor)


def test_integer_overflow_checks_run_only_where_their_assert_can_fire(monkeypatch):
    fastpaths.install()
    patched = semantic.TritonSemantic.binary_op_sanitize_overflow_impl
    assert patched.__module__ == fastpaths.__name__, "the overflow check is not the patched one"
    x = torch.tensor([1, 2**20, 3, 2**30], dtype=torch.int32)
    out = torch.empty_like(x)
    # Without debug (the interpreter's default), as compiled for a GPU: int32 products wrap, nothing is checked.
    _times[(1,)](x, out, 4, BLOCK=4)
    assert out.tolist() == [4, 2**22, 12, 0]
    # With debug on, the check runs as Triton wrote it and its assert fires.
    monkeypatch.setattr(interp.interpreter_builder, "options", interp.InterpreterOptions(debug=True))
    with pytest.raises(Exception, match="int32 overflow detected for operation mul"):
        _times[(1,)](x, out, 4, BLOCK=4)
    _times[(1,)](x.clamp(max=2**20), out, 4, BLOCK=4)  # in range: passes the check
    assert out.tolist() == [4, 2**22, 12, 2**22]
