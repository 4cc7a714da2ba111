"""Seven of the interpreter's per-operation costs, removed without changing what it computes.

Profiling a reference-kernel test under Triton 3.6's interpreter (the semi-Markov CRF's, 71 s) put 7 % of the time
in ``interpreter._get_np_dtype``, which builds a 19-entry dict of NumPy dtypes on every call (184 k calls), and
8 % in ``tuple_type.__init__``, which formats a display name for every ``tl.tuple`` (1.3 M: each tensor's shape is
one) that is almost never shown. :func:`install` swaps in a lookup built once and makes the name lazy (computed on
first use, the same string).

The third: every ``+``, ``-`` and ``*`` of 32-bit (or narrower) integer tensors is checked for overflow by
``binary_op_sanitize_overflow_impl``, which widens both sides to int64, redoes the operation, compares it with the
type's bounds and hands the result to ``device_assert``; and ``device_assert`` does nothing unless the kernel runs
with ``debug`` (the interpreter's options never set it). Compiled for a GPU those ops are dead and removed; under
the interpreter they run in NumPy on every program: a row kernel of 1000 programs took 1.48 s a call with them and
0.98 s without (``benchmarks/interp_overflow_checks.py``, the engine's other patches on). The check now returns at
once where ``debug`` is off, as ``device_assert`` would have discarded it; with ``debug`` on it runs as before.

The fourth to seventh: every op builds a ``block_type`` for its result, validating and formatting the shape anew
(one built before hands its fields on now), and a ``tl.tensor`` with new constants for its size and every dimension
(made once per shape now); and every binary op between two blocks broadcasts both operands, even to the shape they
have (operands of one shape now go in as they are, and any other broadcast to the shape a block has hands back the
same array). Together: the forward of four stage-3 row kernels under the interpreter 1.19 → 0.93 s
(``benchmarks/interp_fastpaths.py``).

Each patch checks that the Triton in hand has the shape it expects and leaves it alone otherwise.
"""

from __future__ import annotations

from typing import Any

_installed = False
# How many block types (element type name, shape) and tensor shapes each cache keeps; a kernel uses a few dozen.
_MAX_KEPT = 4096
_triton_np_dtype: Any = None  # Triton's own lookup, kept for the tests
_triton_overflow_check: Any = None  # Triton's own integer overflow check, kept for benchmarks/interp_overflow_checks.py
_triton_block_type_init: Any = None  # Triton's own block_type constructor, kept for the tests
_triton_tensor_init: Any = None  # Triton's own tensor constructor, kept for the tests and the benchmark
_triton_broadcast_value: Any = None  # Triton's own operand broadcast, kept for the tests and the benchmark


def _np_dtype_lookup(original: Any) -> Any:
    import numpy as np
    import triton.language as tl

    table: dict[Any, Any] = {}

    # Block types cannot be keys (Triton gives them __eq__ but no __hash__): they are looked up by element type,
    # as Triton itself does.
    def _get_np_dtype(tt_dtype: Any) -> Any:
        if isinstance(tt_dtype, tl.pointer_type):
            return np.dtype(np.uint64)
        if isinstance(tt_dtype, tl.block_type):
            element = tt_dtype.element_ty
            if isinstance(element, tl.pointer_type):
                return np.dtype(np.uint64)
            tt_dtype = element
        try:
            return table[tt_dtype]
        except KeyError:
            found = table[tt_dtype] = original(tt_dtype)  # raises as Triton does for a type it has no array for
            return found

    return _get_np_dtype


def _lazy_tuple_names(core: Any) -> None:
    cls = core.tuple_type

    def __init__(self: Any, types: Any, fields: Any = None) -> None:
        self.types = types
        self.fields = fields or [""] * len(types)

    def name(self: Any) -> str:
        cached = self.__dict__.get("_name")
        if cached is None:
            pairs = zip(self.fields, self.types, strict=False)
            cached = self.__dict__["_name"] = "[" + ",".join(f"{k}:{v}" for k, v in pairs) + "]"
        return cached

    def set_name(self: Any, value: str) -> None:
        self.__dict__["_name"] = value

    cls.__init__ = __init__
    cls.name = property(name, set_name)


def _overflow_checks_only_under_debug(semantic: Any) -> bool:
    """Skip the overflow check's arithmetic where its assert would be dropped; True when patched."""
    import inspect

    cls = getattr(semantic, "TritonSemantic", None)
    check = getattr(cls, "binary_op_sanitize_overflow_impl", None)
    assert_ = getattr(cls, "device_assert", None)
    try:
        # The shape relied on: the check ends in device_assert, which returns at once without options.debug.
        shaped = "self.device_assert(" in inspect.getsource(check) and (
            "if not self.builder.options.debug:\n            return" in inspect.getsource(assert_)
        )
    except (OSError, TypeError):
        shaped = False
    if not shaped:
        return False
    global _triton_overflow_check
    _triton_overflow_check = check

    def binary_op_sanitize_overflow_impl(self: Any, lhs: Any, rhs: Any, binary_op: Any) -> Any:
        if not self.builder.options.debug:
            return None
        return check(self, lhs, rhs, binary_op)

    cls.binary_op_sanitize_overflow_impl = binary_op_sanitize_overflow_impl
    return True


def _block_types_built_once(core: Any) -> bool:
    """A ``block_type`` of an element type and a shape of plain ints already built hands its fields to the next one;
    True when patched. Every tensor an interpreted op makes has a new block type, whose construction unwraps and
    validates the shape and formats its name each time."""
    cls = getattr(core, "block_type", None)
    try:
        probe = cls(core.float32, [2, 4])
        shaped = {"element_ty", "shape", "numel", "name"} <= set(vars(probe)) and probe.shape == (2, 4)
    except Exception:
        shaped = False
    if not shaped:
        return False
    global _triton_block_type_init
    original = _triton_block_type_init = cls.__init__
    # (the element type's name, the shape) → the fields but the element type. Those fields (shape, size, display
    # name) follow from the two alone; the element type is the caller's own object, as Triton keeps it. Keyed by
    # name, not identity: the interpreter makes new pointer types at every launch.
    built: dict[tuple[str, tuple[int, ...]], dict[str, Any]] = {}

    # The containers Triton takes a shape in: a list, or its own ``tl.tuple`` (which core.py calls ``tuple``; a
    # Python tuple fails its isinstance check).
    triton_tuple = core.tuple

    def __init__(self: Any, element_ty: Any, shape: Any) -> None:
        kind = type(shape)
        items = shape if kind is list else shape.values if kind is triton_tuple else None
        if items is not None and all(type(s) is int for s in items):
            key = (str(element_ty), tuple(items))
            fields = built.get(key)
            if fields is None:
                original(self, element_ty, shape)  # raises for a shape Triton refuses, and nothing is kept
                if len(built) < _MAX_KEPT:
                    built[key] = {k: v for k, v in vars(self).items() if k != "element_ty"}
                return
            self.element_ty = element_ty
            self.__dict__.update(fields)
            return
        original(self, element_ty, shape)

    cls.__init__ = __init__
    return True


def _tensor_shapes_made_once(core: Any) -> bool:
    """A ``tl.tensor``'s size and shape constants, made once per shape; True when patched. Triton's constructor makes a
    ``constexpr`` per dimension and for the size, and a ``tl.tuple`` whose type it derives from them, for every value
    an op returns. Each tensor still gets a shape tuple of its own (its own list of values), holding constants and a
    tuple type that tensors of its shape share; neither is changed after it is made (``tl.tuple._setitem`` replaces
    an entry of the list and the type)."""
    import math

    cls = getattr(core, "tensor", None)
    original = getattr(cls, "__init__", None)
    made: dict[tuple[int, ...], tuple[Any, list[Any], Any]] = {}

    def __init__(self: Any, handle: Any, ty: Any) -> None:
        if ty.is_block():
            dims = ty.shape
            key = tuple(dims.values) if type(dims) is core.tuple else tuple(dims)
        else:
            key = ()
        entry = made.get(key)
        if entry is None:
            if len(made) >= _MAX_KEPT or not all(type(d) is int for d in key):
                original(self, handle, ty)
                return
            consts = [core.constexpr(d) for d in key]
            entry = made[key] = (core.constexpr(math.prod(key)), consts, core.tuple(consts).type)
        self.handle = handle
        self.shape = core.tuple(entry[1], entry[2])
        self.numel = entry[0]
        self.type = ty
        self.dtype = ty.scalar

    def same(a: Any, b: Any) -> bool:
        return (
            list(vars(a)) == list(vars(b))
            and a.handle is b.handle
            and a.type is b.type
            and a.dtype is b.dtype
            and a.numel == b.numel
            and [d.value for d in a.shape] == [d.value for d in b.shape]
            and a.shape.type == b.shape.type
        )

    try:
        shaped = True
        for ty in (core.block_type(core.float32, [2, 8]), core.float16):
            want, got = cls.__new__(cls), cls.__new__(cls)
            original(want, None, ty)
            __init__(got, None, ty)
            shaped = shaped and same(want, got)
    except Exception:
        shaped = False
    made.clear()
    if not shaped:
        return False
    global _triton_tensor_init
    _triton_tensor_init = original
    cls.__init__ = __init__
    return True


def _broadcasts_to_the_same_shape_skipped(interp: Any) -> bool:
    """The interpreter's broadcast of a value to the shape it already has returns the same array without NumPy's
    ``broadcast_to``; True when patched. Triton's semantic compares the operands' shape (a tuple) with the result's
    (a list), which never match, so both operands of every binary op between blocks are broadcast, equal shapes
    included; compiled, such broadcasts fold away."""
    builder = getattr(interp, "InterpreterBuilder", None)
    handle = getattr(interp, "TensorHandle", None)
    original = getattr(builder, "create_broadcast", None)
    if original is None or handle is None:
        return False

    def create_broadcast(self: Any, arg: Any, shape: Any) -> Any:
        data = arg.data
        if data.shape == tuple(shape):
            return handle(data, arg.dtype.scalar)
        return original(self, arg, shape)

    builder.create_broadcast = create_broadcast
    return True


def _same_shape_operands_kept(core: Any, semantic: Any) -> bool:
    """Two blocks of one shape go into a binary op as they are, without the two broadcasts (each a new block type,
    tensor and array handle) that Triton's ``broadcast_impl_value`` makes of them; True when patched. A broadcast to
    the shape a block has is the block: the compiler folds it away, and in the interpreter it is a view of the same
    array."""
    cls = getattr(semantic, "TritonSemantic", None)
    original = getattr(cls, "broadcast_impl_value", None)
    if original is None:
        return False
    triton_tuple = core.tuple

    def broadcast_impl_value(self: Any, lhs: Any, rhs: Any) -> Any:
        lhs_ty, rhs_ty = lhs.type, rhs.type
        if lhs_ty.is_block() and rhs_ty.is_block():
            a, b = lhs_ty.shape, rhs_ty.shape
            if type(a) is triton_tuple and type(b) is triton_tuple and a.values == b.values:
                return lhs, rhs
        return original(self, lhs, rhs)

    global _triton_broadcast_value
    _triton_broadcast_value = original
    cls.broadcast_impl_value = broadcast_impl_value
    return True


def install() -> None:
    """Patch once per process (idempotent)."""
    global _installed, _triton_np_dtype
    if _installed:
        return
    _installed = True
    from triton.language import core
    from triton.runtime import interpreter as interp

    if callable(getattr(interp, "_get_np_dtype", None)):
        _triton_np_dtype = interp._get_np_dtype
        interp._get_np_dtype = _np_dtype_lookup(_triton_np_dtype)
    cls = getattr(core, "tuple_type", None)
    try:
        eager = cls is not None and "name" in vars(cls([core.int32]))  # the name is built in __init__
    except Exception:  # a tuple_type of another shape: left as it is
        eager = False
    if eager:
        _lazy_tuple_names(core)
    from triton.language import semantic

    _overflow_checks_only_under_debug(semantic)
    _block_types_built_once(core)
    _tensor_shapes_made_once(core)
    _broadcasts_to_the_same_shape_skipped(interp)
    _same_shape_operands_kept(core, semantic)
