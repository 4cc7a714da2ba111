"""Which Triton kernels only move data: no value they store was computed from a value they loaded.

Read from the kernel's Python source (the same on the interpreter and on a GPU), by a small data-flow pass
over the ``@triton.jit`` function: a value is *data* once loaded (``tl.load``) and stays data through
moves (reshape, transpose, broadcast, casts, selects on a condition that is not itself data); any other
operation with data as an operand (arithmetic, comparisons, reductions, ``tl.dot``, math functions, a call
to another jit function, inline asm, atomics) makes it *computed*. Address arithmetic on program ids and
ranges touches no data and is ignored. A kernel whose stores are all data or constants is ``copy_only``.

Operations that leave their operand as it is (``x * 1.0``, ``x + 0``) are moves. Unknown constructs count as
computing, so the check errs toward passing. Used by validate: when every
Triton kernel a candidate launched is copy-only while the reference does arithmetic, the answer came from
somewhere else (``copy_only_kernel``). A reference that itself only moves data (copy, transpose, gather,
pad) is never held against a copy kernel.
"""

from __future__ import annotations

import ast
from pathlib import Path

from mcp_server.engine.pyast import parse_python

NONE, DATA, COMPUTED = 0, 1, 2
LOADS = {"load"}
STORES = {"store"}
ATOMICS = {
    "atomic_add",
    "atomic_max",
    "atomic_min",
    "atomic_and",
    "atomic_or",
    "atomic_xor",
    "atomic_xchg",
    "atomic_cas",
}
# tl functions (and tensor methods) that move or re-view values without arithmetic.
MOVES = {
    "reshape",
    "view",
    "trans",
    "permute",
    "broadcast_to",
    "broadcast",
    "expand_dims",
    "to",
    "cast",
    "join",
    "split",
    "interleave",
    "ravel",
    "flip",
    "make_block_ptr",
    "advance",
    "multiple_of",
    "max_contiguous",
    "max_constancy",
    "static_assert",
    "device_assert",
    "assume",
}
# tl functions whose result holds no loaded data.
CONSTANTS = {"zeros", "zeros_like", "full", "arange", "program_id", "num_programs", "cdiv", "constexpr"}
# Plain calls that neither load nor compute on data by themselves.
PLAIN_BUILTINS = {"range", "len", "int", "float", "min", "max", "print", "isinstance", "static_range"}
# Operations on torch's side that move data without arithmetic (a reference made only of these is a copy).
MOVE_LIKE_TORCH_OPS = {
    "embedding",
    "index",
    "index_select",
    "gather",
    "_unsafe_index",
    "index_put",
    "index_copy",
    "take",
    "flip",
    "roll",
    "repeat_interleave",
    "tril",
    "triu",
    "masked_fill",
    "where",
    "narrow_copy",
    "unfold",
    "pad",
    "reflection_pad1d",
    "reflection_pad2d",
    "replication_pad1d",
    "replication_pad2d",
    "scatter",
    "masked_scatter",
    "masked_select",
    "nonzero",
    "pixel_shuffle",
    "pixel_unshuffle",
    "channel_shuffle",
    "diagonal",
    "diag_embed",
    "diag",
    "select_scatter",
    "slice_scatter",
    "as_strided_scatter",
    "im2col",
    "tile",
}


def reference_computes(op_names: set[str]) -> bool:
    """Whether the reference's recorded torch ops include arithmetic (not only data movement)."""
    return any(op.rstrip("_") not in MOVE_LIKE_TORCH_OPS for op in op_names)


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


class _Flow:
    def __init__(self) -> None:
        self.kinds: dict[str, int] = {}
        self.stored: list[int] = []
        self.computes = False

    def expr(self, node: ast.AST | None) -> int:
        if node is None or isinstance(node, ast.Constant):
            return NONE
        if isinstance(node, ast.Name):
            return self.kinds.get(node.id, NONE)
        if isinstance(node, ast.Attribute):  # x.T, x.dtype, tl.float32
            return self.expr(node.value) if node.attr == "T" else NONE
        if isinstance(node, ast.Subscript):
            return self.expr(node.value)
        if isinstance(node, ast.Tuple | ast.List):
            return max((self.expr(e) for e in node.elts), default=NONE)
        if isinstance(node, ast.IfExp):
            return max(self.expr(node.body), self.expr(node.orelse))
        if (same := _identity_operand(node)) is not None:
            return self.expr(same)
        if isinstance(node, ast.BinOp | ast.BoolOp | ast.Compare | ast.UnaryOp):
            parts = list(ast.iter_child_nodes(node))
            return COMPUTED if any(self.expr(p) != NONE for p in parts if isinstance(p, ast.expr)) else NONE
        if isinstance(node, ast.Call):
            return self.call(node)
        parts = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
        return COMPUTED if any(self.expr(c) != NONE for c in parts) else NONE

    def call(self, node: ast.Call) -> int:
        name = _callee(node)
        args = list(node.args) + [k.value for k in node.keywords]
        if name in LOADS:
            return DATA
        if name in CONSTANTS:
            return NONE
        if name in STORES:
            value = _argument(node, 1, "value")
            self.stored.append(self.expr(value))
            return NONE
        if name in ATOMICS:
            value = _argument(node, 1, "val")
            if self.expr(value) != NONE or name == "atomic_add":
                self.computes = True
            return COMPUTED
        if isinstance(node.func, ast.Name) and name not in PLAIN_BUILTINS:
            # Another jit function (or something unknown): it may load, compute and store; assume it does.
            self.computes = True
            return COMPUTED
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
        receiver_kind = self.expr(receiver) if receiver is not None and not _is_module(receiver) else NONE
        if name == "where" and node.args:
            cond = self.expr(node.args[0])
            rest = max((self.expr(a) for a in node.args[1:]), default=NONE)
            return COMPUTED if cond != NONE else rest
        if name in MOVES:
            return max([receiver_kind] + [self.expr(a) for a in args])
        kinds = [receiver_kind] + [self.expr(a) for a in args]
        return COMPUTED if any(k != NONE for k in kinds) else NONE

    def assign(self, target: ast.AST, kind: int) -> None:
        if isinstance(target, ast.Name):
            # A name keeps the strongest kind it has held (loops and branches merge conservatively).
            self.kinds[target.id] = max(kind, self.kinds.get(target.id, NONE))
        elif isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self.assign(elt, kind)

    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            kind = self.expr(stmt.value)
            for t in stmt.targets:
                self.assign(t, kind)
        elif isinstance(stmt, ast.AnnAssign):
            self.assign(stmt.target, self.expr(stmt.value))
        elif isinstance(stmt, ast.AugAssign):
            kind = self.expr(stmt.value)
            current = self.expr(stmt.target)
            self.assign(stmt.target, COMPUTED if (kind != NONE or current != NONE) else NONE)
        elif isinstance(stmt, ast.Expr):
            self.expr(stmt.value)
        elif isinstance(stmt, ast.For | ast.While):
            if isinstance(stmt, ast.While) and self.expr(stmt.test) != NONE:
                self.computes = True  # control flow that depends on data is a computation
            for _ in range(2):  # loop-carried values reach their fixed point in two passes
                self.block(stmt.body)
            self.block(stmt.orelse)
        elif isinstance(stmt, ast.If):
            if self.expr(stmt.test) != NONE:
                self.computes = True
            self.block(stmt.body)
            self.block(stmt.orelse)
        elif isinstance(stmt, ast.With):
            self.block(stmt.body)
        elif isinstance(stmt, ast.Return):
            if self.expr(stmt.value) != NONE:
                self.computes = True
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self.expr(child)


def _is_number(node: ast.AST, value: int) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and node.value == value


def _same(a: ast.AST | None, b: ast.AST | None) -> bool:
    return a is not None and b is not None and ast.dump(a) == ast.dump(b)


def _identity_operand(node: ast.AST) -> ast.expr | None:
    """The operand an operation leaves as it is, if it is one (``x * 1.0``, ``1 * x``, ``x / 1``, ``x + 0``,
    ``0 + x``, ``x - 0``, ``x ** 1``, ``+x``, ``tl.maximum(x, x)``, ``tl.where(c, x, x)``, ``tl.where(x == x, x, k)``,
    ``tl.fma(x, 1, 0)``): a copy dressed as arithmetic stays a copy."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return node.operand
    if isinstance(node, ast.Call) and not node.keywords:
        name, args = _callee(node), node.args
        if name in ("maximum", "minimum") and len(args) == 2 and _same(args[0], args[1]):
            return args[0]
        if name == "where" and len(args) == 3:
            cond = args[0]
            if _same(args[1], args[2]):
                return args[1]
            reflexive = isinstance(cond, ast.Compare) and len(cond.ops) == 1
            reflexive = reflexive and isinstance(cond.ops[0], ast.Eq | ast.GtE | ast.LtE)  # type: ignore[attr-defined]
            if reflexive and _same(cond.left, cond.comparators[0]) and _same(cond.left, args[1]):  # type: ignore[attr-defined]
                return args[1]  # x == x holds wherever x is a number
        if name == "fma" and len(args) == 3 and _is_number(args[1], 1) and _is_number(args[2], 0):
            return args[0]
        return None
    if not isinstance(node, ast.BinOp):
        return None
    left, right, op = node.left, node.right, node.op
    if isinstance(op, ast.Mult | ast.Add):
        unit = 1 if isinstance(op, ast.Mult) else 0
        if _is_number(right, unit):
            return left
        if _is_number(left, unit):
            return right
    if isinstance(op, ast.Div | ast.FloorDiv | ast.Pow) and _is_number(right, 1):
        return left
    if isinstance(op, ast.Sub | ast.BitOr | ast.BitXor | ast.LShift | ast.RShift) and _is_number(right, 0):
        return left
    return None


def _argument(node: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(node.args) > index:
        return node.args[index]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _is_module(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("tl", "triton", "language", "libdevice", "math")


def copy_only(fn: ast.FunctionDef) -> bool:
    """True when no value the kernel stores (or returns) was computed from loaded data."""
    flow = _Flow()
    flow.block(fn.body)
    return not flow.computes and COMPUTED not in flow.stored


def find_kernel(path: Path, name: str, line: int | None = None) -> ast.FunctionDef | None:
    try:
        tree = parse_python(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    matches = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    if line is not None:
        for fn in matches:
            first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
            if first <= line <= fn.lineno:
                return fn
    return matches[0] if len(matches) == 1 else None


def parse_launch(label: str) -> tuple[str, str | None, int | None]:
    """``"name (file.py:12)"`` -> (name, file name, line)."""
    name, _, where = label.partition(" (")
    where = where.rstrip(")")
    file, _, line = where.rpartition(":")
    try:
        return name, file or None, int(line)
    except ValueError:
        return name, None, None


def copy_only_launches(launches: set[str], modules: list[Path]) -> list[str] | None:
    """The launched kernels' names when every one is copy-only; None when any computes or is unknown."""
    if not launches:
        return None
    by_name: dict[str, list[Path]] = {}
    for path in modules:
        by_name.setdefault(path.name, []).append(path)
    names = []
    for label in sorted(launches):
        name, file, line = parse_launch(label)
        paths = by_name.get(file or "", [])
        if len(paths) != 1:
            return None  # a kernel from elsewhere (a library) or an ambiguous file: assume it computes
        fn = find_kernel(paths[0], name, line)
        if fn is None or not copy_only(fn):
            return None
        names.append(name)
    return names
