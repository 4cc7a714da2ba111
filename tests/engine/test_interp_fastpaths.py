"""mcp_server/engine/interp/fastpaths.py: the interpreter's dtype lookup, tuple names and integer overflow checks,
faster and the same."""

from __future__ import annotations

import sys

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


def test_block_types_built_again_have_the_fields_triton_gives_them_and_bad_shapes_still_fail():
    fastpaths.install()
    original = fastpaths._triton_block_type_init
    assert original is not None and core.block_type.__init__ is not original
    for element in (tl.float32, tl.float16, tl.pointer_type(tl.bfloat16)):
        for shape in ([4], [2, 8], [16, 1, 4]):
            want = core.block_type.__new__(core.block_type)
            original(want, element, shape)
            for _ in range(2):  # built, then from what the first build kept
                got = core.block_type(element, shape)
                assert vars(got) == vars(want) and got.element_ty is element
    # Same shape, another element type: its own fields, not the first one's.
    assert core.block_type(tl.float16, [4]).element_ty is tl.float16
    int8 = core.block_type.__new__(core.block_type)
    original(int8, tl.int8, [4])
    assert core.block_type(tl.int8, [4]).name == int8.name != core.block_type(tl.float32, [4]).name
    # Refused as Triton refuses them, each time: a 0-d shape, a size not a power of two, a Python tuple (Triton's
    # core module names its own class ``tuple``, so its isinstance check takes lists only).
    for bad in ([], [3], (4,)):
        for _ in range(2):
            with pytest.raises((TypeError, ValueError, AssertionError)):
                core.block_type(tl.float32, bad)
    # Shapes of constexprs take Triton's own path.
    assert core.block_type(tl.float32, [tl.constexpr(8)]).shape == (8,)


@triton.jit
def _outer_sum(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    same = x * y + x  # blocks of one shape
    grid = same[:, None] + y[None, :]  # [BLOCK, 1] + [1, BLOCK]: both broadcast
    tl.store(out_ptr + offs[:, None] * BLOCK + offs[None, :], grid)


def test_broadcasts_to_the_shape_a_block_has_skip_numpy_and_real_ones_still_broadcast(monkeypatch):
    import numpy as np

    fastpaths.install()
    shapes = []
    real = np.broadcast_to

    def counted(array, shape, *args, **kwargs):
        if sys._getframe(1).f_code.co_name == "create_broadcast":  # the interpreter's, not the engine's checks'
            shapes.append((tuple(np.shape(array)), tuple(shape)))
        return real(array, shape, *args, **kwargs)

    monkeypatch.setattr(np, "broadcast_to", counted)
    x, y = torch.randn(16), torch.randn(16)
    out = torch.empty(16, 16)
    _outer_sum[(1,)](x, y, out, BLOCK=16)
    want = (x * y + x)[:, None] + y[None, :]
    assert torch.equal(out, want)
    assert shapes and all(before != after for before, after in shapes), shapes  # only real broadcasts


def test_tensors_get_the_fields_triton_gives_them_and_a_shape_of_their_own():
    fastpaths.install()
    original = fastpaths._triton_tensor_init
    assert original is not None and core.tensor.__init__ is not original
    types = [tl.float32, tl.int1, core.block_type(tl.float16, [8]), core.block_type(tl.pointer_type(tl.int8), [2, 4])]
    for ty in types:
        want = core.tensor.__new__(core.tensor)
        original(want, "handle", ty)
        for _ in range(2):  # made, then from what the first one kept
            got = core.tensor("handle", ty)
            assert list(vars(got)) == list(vars(want)) and got.type is ty and got.dtype is want.dtype
            assert got.numel == want.numel and [d.value for d in got.shape] == [d.value for d in want.shape]
            assert str(got) == str(want) and got.shape.type == want.shape.type
    # Each tensor's shape is its own: replacing an entry of one (as tl.tuple._setitem does) leaves the others.
    ty = core.block_type(tl.float32, [4, 16])
    a, b = core.tensor("a", ty), core.tensor("b", ty)
    a.shape._setitem(0, tl.constexpr(99))
    assert [d.value for d in a.shape] == [99, 16]
    assert [d.value for d in b.shape] == [d.value for d in core.tensor("c", ty).shape] == [4, 16]


@triton.jit
def _pairs(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    pairs = tl.reshape(x, (x.shape[0] // 2, 2))  # the shape read in the kernel
    tl.static_assert(pairs.shape[1] == 2)
    tl.store(out_ptr + tl.arange(0, BLOCK // 2), tl.sum(pairs, axis=1))


def test_a_kernel_reading_its_tensors_shapes_runs_as_before():
    fastpaths.install()
    x = torch.randn(32)
    out = torch.empty(16)
    _pairs[(1,)](x, out, BLOCK=32)
    assert torch.allclose(out, x.view(16, 2).sum(1))


def test_operands_of_one_shape_enter_a_binary_op_as_they_are_and_others_are_broadcast():
    import numpy as np

    fastpaths.install()
    assert fastpaths._triton_broadcast_value is not None
    sem = interp.interpreter_semantic

    def block(values, ty=tl.float32):
        array = np.asarray(values, dtype=np.float32)
        return core.tensor(interp.TensorHandle(array, ty), core.block_type(ty, list(array.shape)))

    a, b = block([[1.0, 2.0]]), block([[3.0, 4.0]])
    same = sem.broadcast_impl_value(a, b)
    assert same[0] is a and same[1] is b  # the same objects: nothing made
    row, col = block([[1.0, 2.0]]), block([[10.0], [20.0]])
    left, right = sem.broadcast_impl_value(row, col)
    assert left.type.shape == right.type.shape == [2, 2]
    assert np.array_equal(left.handle.data, [[1.0, 2.0], [1.0, 2.0]])
    assert np.array_equal(right.handle.data, [[10.0, 10.0], [20.0, 20.0]])
    # A block and a scalar: Triton's own splat.
    scalar = sem.to_tensor(2.0)
    _, splat = sem.broadcast_impl_value(a, scalar)
    assert splat.type.shape == a.type.shape and np.array_equal(splat.handle.data, [[2.0, 2.0]])
