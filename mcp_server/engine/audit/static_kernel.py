"""Rules inside one ``@triton.jit`` function, by abstract interpretation of its AST.

The function body is walked statement by statement with an environment name → :class:`Val`. Branches are
walked separately and joined; loop bodies twice, so that facts carried around the back edge (a pointer
bumped each iteration, a running max) are seen. Helpers called from a kernel are analysed on their own,
with their parameters unknown; only the sizes a kernel hands to a helper that masks or loops on them are
carried across the call (for the autotune key). Values returned by helpers are unknown: a known source of
misses, never of false findings.

``unmasked-access`` needs more than a missing mask: tile offsets (``tl.arange`` lanes) that no mask,
boundary check, modulo, ``tl.minimum`` or ``tl.where`` clamp bounds, plus evidence that the extent is not
exact:

- the same lanes are compared against a bound elsewhere in the kernel (the author knows they run over);
- a runtime argument that looks like a size is never used;
- the tile slides along a dimension (``pid * BLOCK + arange``, a pointer bumped in a loop) and that
  dimension is walked in tiles of a runtime size (``range(0, K, BLOCK_K)``, ``tl.cdiv(M, BLOCK_M)``) or the
  launch grid rounds up with ``triton.cdiv``.

Without such evidence a constexpr-sized tile is taken as exact (a row of ``N: tl.constexpr`` read whole).
Accesses under ``if start + BLOCK <= n:`` (or after ``if start + BLOCK > n: ...; return``), in a
``if EVEN_K:`` branch whose other branch masks the same pointer, or on a padded scratch buffer (read and
written, never masked) are not reported.

Rules decided here: unmasked-access, non-neutral-other, exp-without-max-shift, low-precision-accumulator,
unguarded-division, int32-offset-overflow, arange-non-pow2, arange-extent-not-constexpr,
hardcoded-tile-size, dot-small-tile, static-range-runtime-bound, break-continue-unsupported,
debug-leftover. The function also records what the autotune rules need (the shape arguments it masks
and loops on).
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from mcp_server.engine.audit.static_module import UNKNOWN, JitFunction, ModuleIndex
from mcp_server.engine.audit.static_values import (
    DTYPES,
    FINITE,
    LOW_PRECISION,
    NAN,
    NEG_BIG,
    NEG_INF,
    NOTHING,
    POS_BIG,
    POS_INF,
    UNDEF,
    UNKNOWN_PAD,
    ZERO,
    Val,
    binary_pad,
    broadcast,
    fold,
    is_pow2,
    join,
    pad_of_const,
    promote,
    subscript,
    unary_pad,
)
from mcp_server.engine.models import Severity

Report = Callable[..., None]  # report(rule, node, message, fix, severity=None)

# tl functions by what they are to this analysis; names are the last component of the resolved name, so
# tl.exp, tl.math.exp and libdevice.exp are all "exp".
_ALIASES = {"fast_expf": "exp", "expf": "exp", "exp2f": "exp2", "sqrt_rn": "sqrt", "div_rn": "fdiv"}
_PASSTHROUGH = {"multiple_of", "max_contiguous", "max_constancy", "constexpr", "assume"}
_SHAPE_CHANGING = {"reshape", "view", "broadcast_to", "expand_dims", "permute", "trans", "split", "join", "ravel"}
_UNARY_KEEP_SIGN = {"floor", "ceil", "erf", "tanh", "sigmoid", "cos", "sin"}
_DEBUG = {
    "device_print": Severity.warning,
    "print": Severity.warning,
    "static_print": Severity.info,
    "device_assert": Severity.info,
    "debug_barrier": Severity.info,
}
_LOOP_FUNCS = {"range", "static_range"}
_BIG_LITERAL = 16  # literal multipliers at least this big are element counts, not tile counts
# Literal arange extents from here up are tile sizes; below, usually structure (pairs, experts, lanes).
_TILE_LITERAL_MIN = 32


@dataclass
class AccessCandidate:
    call: ast.Call
    what: str
    uncovered: frozenset[int]
    tiled: frozenset[int]
    root: str | None
    masked: bool


@dataclass
class KernelFacts:
    """What the kernel analysis learnt that the autotune and launcher rules use."""

    shape_params: set[str] = field(default_factory=set)  # runtime args the kernel masks/loops/cdivs on
    # Runtime sizes walked in tiles: range(0, K, BLOCK_K) stops and tl.cdiv(M, BLOCK_M) numerators. A tile
    # that slides along such a size has a partial last tile unless the size is a multiple of the tile.
    tiled_sizes: set[str] = field(default_factory=set)
    persistent: bool = False  # programs loop over work (tl.num_programs / loop from program_id)
    extent_params: set[str] = field(default_factory=set)  # constexpr params used as tile extents
    shape_constexprs: set[str] = field(default_factory=set)  # constexpr params used as bounds (col < N)


@functools.lru_cache(maxsize=1)
def installed_triton_rejects_break() -> bool:
    """True when the installed Triton's code generator has no support for break/continue (3.6 has none)."""
    try:
        from triton.compiler.code_generator import CodeGenerator
    except Exception:  # no usable Triton: assume the versions this project supports (3.4-3.6)
        return True
    return not (hasattr(CodeGenerator, "visit_Break") and hasattr(CodeGenerator, "visit_Continue"))


class KernelAnalysis:
    def __init__(
        self,
        mod: ModuleIndex,
        fn: JitFunction,
        report: Report,
        meta_values: dict[str, list[tuple[object, str]]],
        cdiv_grid: bool,
        helper_facts: dict[str, KernelFacts] | None = None,
    ):
        self.mod = mod
        self.fn = fn
        self._report = report
        self.meta_values = meta_values  # constexpr name → [(value, "where it is set")]
        self.cdiv_grid = cdiv_grid
        self.helper_facts = helper_facts or {}
        self.facts = KernelFacts()
        self.env: dict[str, Val] = {}
        self.loop_depth = 0
        self.next_source = 0
        self.candidates: dict[int, AccessCandidate] = {}
        self.compared_sources: set[int] = set()
        self.source_extent: dict[int, str] = {}  # source → ast.dump of its extent expression
        self.source_names: dict[int, str] = {}  # source → the first name it was assigned to
        self.compared_tiled: set[int] = set()  # compared while slid by pid/loop: that dimension is bounded
        self.root_use: dict[str, set[str]] = {}  # pointer parameter → {"load", "store", "masked"}
        self.fit_guards = 0  # inside `if start + BLOCK <= n:`: the whole tile is known to fit
        self.ovf_sites: dict[int, ast.AST] = {}
        self.specialised: list[set[str]] = []
        body = fn.node
        self.extent_names = self._extent_names(body)
        self.facts.extent_params = self.extent_names & set(fn.constexprs)
        self.guard_names = self._guard_names(body)
        used = {n.id for n in ast.walk(body) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        self.unused_sizes = [
            p.name
            for p in fn.params
            if not p.constexpr
            and p.name not in used
            and not p.name.startswith("_")
            and not any(h in p.name.lower() for h in ("ptr", "stride", "desc"))
        ]
        # A launched kernel's arguments are scalars and pointers; a helper's may be tensors of any shape.
        helper = fn.called_from_jit and not fn.launched
        for p in fn.params:
            if p.constexpr:
                self.env[p.name] = Val(constexpr=p.name, const=p.default, shape=())
            else:
                self.env[p.name] = Val(runtime=frozenset({p.name}), root=p.name, shape=None if helper else ())

    # ----------------------------------------------------------------------------------------- entry

    def run(self) -> KernelFacts:
        self.exec_block(self.fn.node.body)
        self._finish_accesses()
        if self.ovf_sites:
            sites = sorted(self.ovf_sites.values(), key=lambda n: (n.lineno, n.col_offset))
            first = sites[0]
            n_more = len(sites) - 1
            more = f" (and {n_more} more offset computation{'s' if n_more > 1 else ''})" if n_more else ""
            self.report(
                "int32-offset-overflow",
                first,
                f"`{ast.unparse(first)}` multiplies an int32 program id by a block size or stride{more}; the "
                "offset wraps once a tensor passes 2**31 elements",
                "cast first: `pid = tl.program_id(0).to(tl.int64)` (or `.to(tl.int64)` on the index before "
                "multiplying by the stride)",
            )
        return self.facts

    def report(self, rule: str, node: ast.AST, message: str, fix: str, severity: Severity | None = None) -> None:
        self._report(rule, node, message, fix, severity=severity, kernel=self.fn.name)

    # ------------------------------------------------------------------------------------ pre-passes

    def _extent_names(self, fn: ast.AST) -> set[str]:
        """Constexpr names used as tile extents (tl.arange bounds, block shapes): multipliers in elements."""
        names: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                op = self.tl_op(node.func)
                if op == "arange":
                    names |= {n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)}
                elif op in ("make_block_ptr", "make_tensor_descriptor"):
                    for kw in node.keywords:
                        if kw.arg == "block_shape":
                            names |= {n.id for n in ast.walk(kw.value) if isinstance(n, ast.Name)}
        return names

    def _guard_names(self, fn: ast.AST) -> set[str]:
        """Names compared in a tl.where condition or an if test: divisions by them count as guarded."""
        names: set[str] = set()
        for node in ast.walk(fn):
            tests: list[ast.AST] = []
            if isinstance(node, (ast.If, ast.IfExp, ast.While)):
                tests.append(node.test)
            elif isinstance(node, ast.Call) and self.tl_op(node.func) == "where" and node.args:
                tests.append(node.args[0])
            for t in tests:
                for cmp in ast.walk(t):
                    if isinstance(cmp, ast.Compare):
                        names |= {n.id for n in ast.walk(cmp) if isinstance(n, ast.Name)}
        return names

    # ---------------------------------------------------------------------------------- resolution

    def tl_op(self, func: ast.AST) -> str | None:
        """'arange' for tl.arange / triton.language.arange / an imported arange; None for anything else."""
        name = self.mod.resolve(func)
        if not name:
            return None
        if name.startswith("triton.language."):
            last = name.rsplit(".", 1)[-1]
            return _ALIASES.get(last, last)
        if name == "triton.cdiv":
            return "cdiv"
        return None

    def dims_values(self, dim: object) -> list[tuple[int, str]]:
        """The integer values a tile dimension can take: a literal, a constexpr's default, its configs."""
        if isinstance(dim, int) and not isinstance(dim, bool):
            return [(dim, "")]
        if not isinstance(dim, str):
            return []
        out: list[tuple[int, str]] = []
        param = self.fn.constexprs.get(dim)
        if param is not None and isinstance(param.default, int) and not isinstance(param.default, bool):
            out.append((param.default, f"default of {dim}"))
        elif param is None and isinstance(self.mod.constants.get(dim), int):
            out.append((self.mod.constants[dim], f"module constant {dim}"))  # type: ignore[arg-type]
        for value, where in self.meta_values.get(dim, []):
            if isinstance(value, int) and not isinstance(value, bool):
                out.append((value, where))
        return out

    # ----------------------------------------------------------------------------------- statements

    def exec_block(self, stmts: list[ast.stmt]) -> None:
        guarded = 0
        for s in stmts:
            self.exec(s)
            # `if start + BLOCK > n: <masked tail>; return` leaves whole tiles for the rest of the block.
            if (
                isinstance(s, ast.If)
                and s.body
                and isinstance(s.body[-1], ast.Return)
                and not s.orelse
                and self._fit_branch(s.test) == "orelse"
            ):
                guarded += 1
                self.fit_guards += 1
        self.fit_guards -= guarded

    def exec(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            v = self.ev(s.value)
            for t in s.targets:
                if isinstance(t, ast.Name) and isinstance(s.value, ast.BinOp) and self._is_self_update(t, s.value):
                    self._check_accumulate(t.id, s.value.op, s)
                self.assign(t, v)
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                old = self.env.get(s.target.id, NOTHING)
                self._check_accumulate(s.target.id, s.op, s)
                new = self.binop(s.op, old, self.ev(s.value), s, s.target, s.value)
                if self.loop_depth and isinstance(s.op, (ast.Add, ast.Sub)) and old.sources:
                    new = replace(new, advanced=True)
                self.env[s.target.id] = new
            else:
                self.ev(s.value)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.ev(s.value))
        elif isinstance(s, ast.Expr):
            self.ev(s.value)
        elif isinstance(s, ast.Return):
            if s.value is not None:
                self.ev(s.value)
        elif isinstance(s, ast.If):
            self.exec_if(s)
        elif isinstance(s, ast.For):
            self.exec_for(s)
        elif isinstance(s, ast.While):
            self.ev(s.test)
            self.exec_loop(s.body)
        elif isinstance(s, (ast.Break, ast.Continue)):
            self.check_break(s)
        elif isinstance(s, ast.With):
            self.exec_block(s.body)

    def _is_self_update(self, target: ast.Name, value: ast.BinOp) -> bool:
        return isinstance(value.left, ast.Name) and value.left.id == target.id

    def assign(self, target: ast.expr, v: Val) -> None:
        if isinstance(target, ast.Name):
            for src in v.sources:
                self.source_names.setdefault(src, target.id)
            self.env[target.id] = v
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = v.items if v.items is not None and len(v.items) == len(target.elts) else None
            for i, t in enumerate(target.elts):
                self.assign(t, items[i] if items else NOTHING)

    def exec_if(self, s: ast.If) -> None:
        self.ev(s.test)
        fit = self._fit_branch(s.test)
        before = dict(self.env)
        spec_body, spec_else = self._specialisation(s)
        self.specialised.append(spec_else)
        self.fit_guards += fit == "body"
        self.exec_block(s.body)
        self.fit_guards -= fit == "body"
        self.specialised.pop()
        after_body = self.env
        self.env = dict(before)
        self.specialised.append(spec_body)
        self.fit_guards += fit == "orelse"
        self.exec_block(s.orelse)
        self.fit_guards -= fit == "orelse"
        self.specialised.pop()
        after_else = self.env
        self.env = self._join_envs(after_body, after_else)

    def _fit_branch(self, test: ast.expr) -> str | None:
        """Which branch of ``if start + BLOCK <= n:`` (a tile start against a runtime size) sees whole tiles."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        sides: set[str] = set()
        for part in parts:
            if not (isinstance(part, ast.Compare) and len(part.ops) == 1):
                return None
            # `start < n` says nothing about start + BLOCK: the test must involve the tile extent.
            if not {n.id for n in ast.walk(part) if isinstance(n, ast.Name)} & self.extent_names:
                return None
            left, right, op = self.ev(part.left), self.ev(part.comparators[0]), part.ops[0]

            def tile(v: Val) -> bool:
                return (v.pid or v.loopvar or v.tile_off) and not v.sources

            def size(v: Val) -> bool:
                return bool(v.runtime) and not (v.pid or v.loopvar or v.sources)

            below, above = isinstance(op, (ast.Lt, ast.LtE)), isinstance(op, (ast.Gt, ast.GtE))
            if tile(left) and size(right):
                sides.add("body" if below else "orelse" if above else "?")
            elif size(left) and tile(right):
                sides.add("body" if above else "orelse" if below else "?")
            else:
                return None
        if len(sides) != 1 or "?" in sides or (len(parts) > 1 and sides != {"body"}):
            return None
        return sides.pop()

    def _specialisation(self, s: ast.If) -> tuple[set[str], set[str]]:
        """For ``if EVEN_K: load(p) else: load(p, mask=...)`` on a constexpr flag: the masked pointers of each
        branch, which make the unmasked twin in the other branch a deliberate divisible-shape fast path."""
        names = {n.id for n in ast.walk(s.test) if isinstance(n, ast.Name)}
        constexprs = set(self.fn.constexprs) | set(self.mod.constants)
        if not names or not names <= constexprs or not s.orelse:
            return set(), set()
        return self._masked_pointers(s.body), self._masked_pointers(s.orelse)

    def _masked_pointers(self, stmts: list[ast.stmt]) -> set[str]:
        out: set[str] = set()
        for st in stmts:
            for node in ast.walk(st):
                if isinstance(node, ast.Call) and self.tl_op(node.func) in ("load", "store"):
                    op = self.tl_op(node.func)
                    kws = {k.arg for k in node.keywords}
                    mask_pos = 1 if op == "load" else 2
                    if ("mask" in kws or "boundary_check" in kws or len(node.args) > mask_pos) and node.args:
                        out.add(ast.unparse(node.args[0]))
        return out

    def _join_envs(self, a: dict[str, Val], b: dict[str, Val]) -> dict[str, Val]:
        out = dict(a)
        for k, v in b.items():
            out[k] = join(out[k], v) if k in out else v
        return out

    def exec_for(self, s: ast.For) -> None:
        loopvar = NOTHING
        it = s.iter
        if isinstance(it, ast.Call):
            op = self.tl_op(it.func)
            builtin_range = isinstance(it.func, ast.Name) and it.func.id == "range"
            if builtin_range or op in _LOOP_FUNCS:
                args = [self.ev(a) for a in it.args]
                for kw in it.keywords:
                    self.ev(kw.value)
                start, stop, step = NOTHING, NOTHING, None
                if len(args) == 1:
                    stop = args[0]
                elif len(args) >= 2:
                    start, stop = args[0], args[1]
                    step = args[2] if len(args) > 2 else None
                if op == "static_range":
                    self.check_static_range(it, args)
                static_step = step is not None and self._tile_extent(step)
                if stop.runtime and not stop.sources and not stop.pid:
                    self.facts.shape_params |= set(stop.runtime)
                    if static_step:
                        self.facts.tiled_sizes |= set(stop.runtime)
                if start.pid:
                    self.facts.persistent = True
                loopvar = Val(
                    loopvar=True,
                    pid=start.pid,
                    int64=start.int64,
                    tile_off=static_step,
                    elem=start.elem or static_step,
                    ovf_site=start.ovf_site,
                    shape=(),
                )
            else:
                self.ev(it)
        else:
            self.ev(it)
        self.assign(s.target, loopvar)
        self.exec_loop(s.body, s.target, loopvar)

    def exec_loop(self, body: list[ast.stmt], target: ast.expr | None = None, loopvar: Val = NOTHING) -> None:
        self.loop_depth += 1
        before = dict(self.env)
        self.exec_block(body)
        self.env = self._join_envs(before, self.env)
        if target is not None:
            self.assign(target, loopvar)
        self.exec_block(body)
        self.env = self._join_envs(before, self.env)
        self.loop_depth -= 1

    # ---------------------------------------------------------------------------------- expressions

    def ev(self, node: ast.AST | None) -> Val:
        if node is None:
            return NOTHING
        method = getattr(self, "ev_" + type(node).__name__, None)
        if method is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.ev(child)
            return NOTHING
        return method(node)

    def ev_Constant(self, node: ast.Constant) -> Val:
        return Val(const=node.value, shape=())

    def ev_Name(self, node: ast.Name) -> Val:
        if node.id in self.env:
            return self.env[node.id]
        if node.id in self.mod.constants:
            return Val(const=self.mod.constants[node.id], constexpr=node.id, shape=())
        return self._named(node)

    def _named(self, node: ast.AST) -> Val:
        name = self.mod.resolve(node)
        if name:
            last = name.rsplit(".", 1)[-1]
            if name.startswith("triton.language.") and last in DTYPES:
                return Val(dtype_lit=DTYPES[last])
            if name in ("math.inf", "numpy.inf"):
                return Val(const=math.inf, shape=())
            if name in ("math.pi", "math.e"):
                return Val(const=math.pi if last == "pi" else math.e, shape=())
        return NOTHING

    def ev_Attribute(self, node: ast.Attribute) -> Val:
        named = self._named(node)
        if named is not NOTHING:
            return named
        base = self.ev(node.value)
        if node.attr == "T" and base.shape is not None and len(base.shape) == 2:
            return replace(base, shape=base.shape[::-1], axes=tuple((s, 1 - a) for s, a in base.axes), pad_axes=None)
        return NOTHING

    def ev_Subscript(self, node: ast.Subscript) -> Val:
        base = self.ev(node.value)
        if base.items is not None:
            idx = node.slice
            if (
                isinstance(idx, ast.Constant)
                and isinstance(idx.value, int)
                and -len(base.items) <= idx.value < len(base.items)
            ):
                return base.items[idx.value]
            return NOTHING
        return subscript(base, node.slice)

    def ev_Tuple(self, node: ast.Tuple | ast.List) -> Val:
        items = tuple(self.ev(e) for e in node.elts)
        const = tuple(i.const for i in items)
        return Val(items=items, const=UNKNOWN if UNKNOWN in const else const)

    ev_List = ev_Tuple

    def ev_IfExp(self, node: ast.IfExp) -> Val:
        self.ev(node.test)
        return join(self.ev(node.body), self.ev(node.orelse))

    def ev_BoolOp(self, node: ast.BoolOp) -> Val:
        vals = [self.ev(v) for v in node.values]
        out = vals[0]
        for v in vals[1:]:
            out = join(out, v)
        return out

    def ev_UnaryOp(self, node: ast.UnaryOp) -> Val:
        v = self.ev(node.operand)
        if isinstance(node.op, ast.USub):
            const = -v.const if isinstance(v.const, (int, float)) and not isinstance(v.const, bool) else UNKNOWN
            return replace(
                v,
                const=const,
                pad=unary_pad("neg", v.pad),
                nonneg=v.nonpos,
                nonpos=v.nonneg,
                positive=False,
                shifted=False,
                maxed=const == -math.inf,
                constexpr=None,
            )
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return replace(v, const=UNKNOWN, constexpr=None)
        return v

    def ev_Compare(self, node: ast.Compare) -> Val:
        vals = [self.ev(node.left), *(self.ev(c) for c in node.comparators)]
        sources = frozenset().union(*(v.sources for v in vals))
        vacuous = len(vals) == 2 and any(
            len(v.sources) == 1 and not v.tiled and self.source_extent.get(next(iter(v.sources))) == ast.dump(other)
            for v, other in ((vals[0], node.comparators[0]), (vals[1], node.left))
        )  # `d < HALF` with d = tl.arange(0, HALF): always true, bounds nothing
        if not vacuous and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            self.compared_sources |= sources
            for v in vals:
                self.compared_tiled |= v.tiled
            if any(v.sources or v.pid or v.loopvar for v in vals):
                for v in vals:
                    if not (v.sources or v.pid or v.loopvar):
                        self.facts.shape_params |= set(v.runtime)
                        if v.constexpr is not None:
                            self.facts.shape_constexprs.add(v.constexpr)
        shape, axes = vals[0].shape, vals[0].axes
        for v in vals[1:]:
            shape, axes = broadcast(Val(shape=shape, axes=axes), v)
        return Val(is_mask=True, mask_sources=sources, shape=shape, axes=axes)

    # --------------------------------------------------------------------------------- binary ops

    def ev_BinOp(self, node: ast.BinOp) -> Val:
        a, b = self.ev(node.left), self.ev(node.right)
        if isinstance(node.op, ast.MatMult):
            return self.dot(node, a, b, None, None)
        return self.binop(node.op, a, b, node, node.left, node.right)

    def binop(self, op: ast.operator, a: Val, b: Val, node: ast.AST, lnode: ast.AST, rnode: ast.AST) -> Val:
        shape, axes = broadcast(a, b)
        common = dict(
            sources=a.sources | b.sources,
            axes=axes,
            shape=shape,
            tiled=a.tiled | b.tiled,
            bounded=a.bounded | b.bounded,
            pid=a.pid or b.pid,
            pid_small=(a.pid or b.pid) and (a.pid_small or not a.pid) and (b.pid_small or not b.pid),
            loopvar=a.loopvar or b.loopvar,
            int64=a.int64 or b.int64,
            runtime=a.runtime | b.runtime,
            advanced=a.advanced or b.advanced,
            data=a.data or b.data,
            raw=a.raw or b.raw,
            ovf_site=a.ovf_site or b.ovf_site,
            exp_site=a.exp_site or b.exp_site,
            dtype=promote(a, b),
            const=fold(op, a.const, b.const),
            pad_site=_pad_source(a, b).pad_site,
            pad_axes=_pad_source(a, b).pad_axes,
            elem=a.elem or b.elem,
        )
        if isinstance(op, (ast.Add, ast.Sub)):
            return self._additive(op, a, b, common)
        if isinstance(op, ast.Mult):
            return self._multiply(a, b, node, lnode, rnode, common)
        if isinstance(op, (ast.Div, ast.FloorDiv)):
            self.check_division(node, rnode, b)
            if isinstance(op, ast.FloorDiv):
                return Val(**common, tilecount=a.tilecount)  # type: ignore[arg-type]
            common["exp_site"] = a.exp_site  # 1 / (1 + exp(x)) is bounded: a denominator ends the risk
            return Val(
                **common,  # type: ignore[arg-type]
                pad=binary_pad("div", a, b),
                shifted=a.shifted and not b.data,
                maxed=a.maxed and not b.data,
                nonneg=a.nonneg and b.nonneg,
                positive=a.positive and b.positive,
                can_be_zero=a.can_be_zero,
            )
        if isinstance(op, ast.Mod):
            if b.runtime:
                self.facts.shape_params |= set(b.runtime)
            common["bounded"] = common["bounded"] | a.sources  # type: ignore[operator]
            return Val(**common)  # type: ignore[arg-type]
        if isinstance(op, (ast.BitAnd, ast.BitOr)):
            is_mask = a.is_mask or b.is_mask
            ms = (
                None
                if (a.is_mask and a.mask_sources is None) or (b.is_mask and b.mask_sources is None)
                else ((a.mask_sources or frozenset()) | (b.mask_sources or frozenset()))
            )
            return Val(**common, is_mask=is_mask, mask_sources=ms if is_mask else None)  # type: ignore[arg-type]
        if isinstance(op, ast.Pow):
            even = isinstance(b.const, int) and b.const % 2 == 0
            return Val(**common, nonneg=even or a.nonneg, can_be_zero=a.can_be_zero)  # type: ignore[arg-type]
        return Val(**common)  # type: ignore[arg-type]

    def _additive(self, op: ast.operator, a: Val, b: Val, common: dict) -> Val:
        sub = isinstance(op, ast.Sub)
        tiled = set(common["tiled"])
        if b.tile_off and not b.sources:
            tiled |= a.sources
        if a.tile_off and not a.sources:
            tiled |= b.sources
        common["tiled"] = frozenset(tiled)
        pad = binary_pad("sub" if sub else "add", a, b)
        positive_guard = any(
            (v.const is not UNKNOWN and isinstance(v.const, (int, float)) and v.const > 0)
            or (v.runtime and not v.data and not v.sources)
            or v.positive
            for v in (a, b)
        )
        if sub:
            shifted = b.maxed or b.raw or a.shifted
            nonneg, nonpos = a.nonneg and b.nonpos, a.nonpos and b.nonneg
            maxed = (a.maxed and not b.data) or common["const"] == -math.inf
            positive = False
        else:
            shifted = a.shifted or b.shifted
            nonneg, nonpos = a.nonneg and b.nonneg, a.nonpos and b.nonpos
            maxed = a.maxed or b.maxed or common["const"] == -math.inf
            positive = (a.positive and b.nonneg) or (b.positive and a.nonneg) or (positive_guard and nonneg)
        return Val(
            **common,
            tile_off=a.tile_off or b.tile_off,
            pad=pad,
            shifted=shifted,
            maxed=maxed,
            nonneg=nonneg,
            nonpos=nonpos,
            positive=positive,
            acc_init=a.acc_init,
            root=a.root or b.root,
        )

    def _tile_extent(self, v: Val) -> bool:
        """A compile-time tile size (a constexpr used as a tl.arange extent, or a literal > 1): pid times it
        is where a tile starts. A constexpr stride is not one."""
        if v.runtime:
            return False
        if v.constexpr is not None:
            return v.constexpr in self.extent_names
        return isinstance(v.const, int) and not isinstance(v.const, bool) and v.const > 1

    def _elem_scale(self, v: Val) -> bool:
        """A multiplier that turns a tile index into an element offset: a stride, a size, a tile extent."""
        if v.tilecount:
            return False
        if v.runtime and not v.pid and not v.sources and not v.data:
            return True
        if v.constexpr is not None and v.constexpr in self.extent_names:
            return True
        if isinstance(v.const, int) and not isinstance(v.const, bool) and v.const >= _BIG_LITERAL:
            return True
        return v.elem and not v.pid

    def _multiply(self, a: Val, b: Val, node: ast.AST, lnode: ast.AST, rnode: ast.AST, common: dict) -> Val:
        ovf = common["ovf_site"]
        elem = common["elem"]

        def static(v: Val) -> bool:
            return (v.constexpr is not None or v.const is not UNKNOWN) and not v.runtime

        for p, q in ((a, b), (b, a)):
            if p.pid_small and static(q):
                # program_id(1)/(2) < 65536: times a tile size it stays far below 2**31.
                elem = elem or self._elem_scale(q)
            elif p.pid and not p.int64 and not q.int64 and (self._elem_scale(q) or (q.elem and p.elem)):
                ovf = ovf or node
                elem = True
            elif (p.pid or p.loopvar) and self._elem_scale(q):
                elem = True
        common["ovf_site"] = ovf
        common["elem"] = elem
        tile_off = ((a.pid or a.loopvar) and self._tile_extent(b)) or ((b.pid or b.loopvar) and self._tile_extent(a))
        same = ast.dump(lnode) == ast.dump(rnode)
        # exp(x) * w with w data is a weighted term (an expectation), not the softmax normaliser.
        common["exp_site"] = (a.exp_site if not b.data else None) or (b.exp_site if not a.data else None)
        return Val(
            **common,
            tile_off=tile_off,
            pad=binary_pad("mul", a, b),
            shifted=(a.shifted and not b.data) or (b.shifted and not a.data),
            maxed=(a.maxed and not b.data) or (b.maxed and not a.data),
            nonneg=(a.nonneg and b.nonneg) or (a.nonpos and b.nonpos) or same,
            nonpos=(a.nonneg and b.nonpos) or (a.nonpos and b.nonneg),
            positive=a.positive and b.positive,
            can_be_zero=a.can_be_zero or b.can_be_zero,
        )

    # ------------------------------------------------------------------------------------------ calls

    def ev_Call(self, node: ast.Call) -> Val:
        func = node.func
        op = self.tl_op(func)
        if op is not None:
            return self.tl_call(op, node)
        if isinstance(func, ast.Name) and func.id in self.mod.jit and func.id != self.fn.name:
            return self.helper_call(node, self.mod.jit[func.id])
        if isinstance(func, ast.Name):
            if func.id in ("min", "max") and func.id not in self.env:
                return self.tl_call("minimum" if func.id == "min" else "maximum", node)
            if func.id == "print" and func.id not in self.env:
                return self.tl_call("print", node)
            if func.id == "float" and node.args:
                v = self.mod.literal(node)
                return Val(const=v, shape=()) if v is not UNKNOWN else NOTHING
            if func.id in ("int", "float"):
                return self.ev(node.args[0]) if node.args else NOTHING
        if isinstance(func, ast.Attribute) and self.mod.resolve(func) is None:
            return self.method_call(node, func)
        for a in node.args:
            self.ev(a)
        for kw in node.keywords:
            self.ev(kw.value)
        return NOTHING

    def helper_call(self, node: ast.Call, callee: JitFunction) -> Val:
        """A call to another jit function: its result is unknown, but the sizes it masks or loops on are
        this kernel's too (they decide the autotune key and the unmasked-access evidence)."""
        facts = self.helper_facts.get(callee.name)
        bound: list[tuple[str, Val]] = []
        for i, a in enumerate(node.args):
            v = self.ev(a)
            if i < len(callee.params) and not isinstance(a, ast.Starred):
                bound.append((callee.params[i].name, v))
        for kw in node.keywords:
            v = self.ev(kw.value)
            if kw.arg:
                bound.append((kw.arg, v))
        if facts is not None:
            for name, v in bound:
                if v.sources or v.pid:
                    continue
                if name in facts.shape_params:
                    self.facts.shape_params |= set(v.runtime)
                if name in facts.tiled_sizes:
                    self.facts.tiled_sizes |= set(v.runtime)
        return NOTHING

    def arg(self, node: ast.Call, pos: int, name: str) -> ast.expr | None:
        for kw in node.keywords:
            if kw.arg == name:
                return kw.value
        return node.args[pos] if len(node.args) > pos else None

    def method_call(self, node: ast.Call, func: ast.Attribute) -> Val:
        recv = self.ev(func.value)
        name = _ALIASES.get(func.attr, func.attr)
        if name in ("load", "store", "atomic_add", "gather", "scatter") and not recv.sources:
            for a in node.args:  # a tensor descriptor: TMA bounds-checks in hardware
                self.ev(a)
            return Val(data=True, raw=True, desc=True) if name == "load" else NOTHING
        if name in ("to", "cast"):
            return self.cast(node, recv, self.arg(node, 0, "dtype"))
        if name in ("sum", "max", "min", "argmax", "argmin", "cumsum", "reduce"):
            return self.reduction(name, node, recv, self.arg(node, 0, "axis"), self.arg(node, 99, "dtype"))
        if name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs") and not node.args:
            return self.unary(name, node, recv)
        if name in _SHAPE_CHANGING:
            for a in node.args:
                self.ev(a)
            return replace(recv, shape=None, axes=(), pad_axes=None, items=None)
        if name == "advance":
            return recv
        for a in node.args:
            self.ev(a)
        for kw in node.keywords:
            self.ev(kw.value)
        return NOTHING

    def tl_call(self, op: str, node: ast.Call) -> Val:
        handler = getattr(self, "op_" + op, None)
        if handler is not None:
            return handler(node)
        if op in _PASSTHROUGH:
            first = self.ev(node.args[0]) if node.args else NOTHING
            for a in node.args[1:]:
                self.ev(a)
            return first
        if op in _DEBUG:
            return self.debug(op, node)
        if op in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs") or op in _UNARY_KEEP_SIGN:
            x = self.ev(node.args[0]) if node.args else NOTHING
            return self.unary(op, node, x)
        if op in ("sum", "max", "min", "argmax", "argmin", "xor_sum", "cumsum", "cumprod", "reduce"):
            x = self.ev(self.arg(node, 0, "input"))
            return self.reduction(op, node, x, self.arg(node, 1, "axis"), self.arg(node, 99, "dtype"))
        if op in ("atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg"):
            self.access(node, f"tl.{op}", self.arg(node, 0, "pointer"), self.arg(node, 2, "mask"), None)
            return Val(data=True)
        if op in _SHAPE_CHANGING:
            x = self.ev(node.args[0]) if node.args else NOTHING
            for a in node.args[1:]:
                self.ev(a)
            if op == "trans" and x.shape is not None and len(x.shape) == 2:
                return replace(x, shape=x.shape[::-1], axes=tuple((s, 1 - a) for s, a in x.axes), pad_axes=None)
            return replace(x, shape=None, axes=(), pad_axes=None, items=None)
        for a in node.args:
            self.ev(a)
        for kw in node.keywords:
            self.ev(kw.value)
        return NOTHING

    # ---- index construction

    def op_program_id(self, node: ast.Call) -> Val:
        axis = self.mod.literal(self.arg(node, 0, "axis"))
        return Val(pid=True, pid_small=axis in (1, 2), shape=())

    def op_num_programs(self, node: ast.Call) -> Val:
        self.facts.persistent = True
        return Val(shape=())

    def op_cdiv(self, node: ast.Call) -> Val:
        vals = [self.ev(a) for a in node.args]
        for v in vals:
            if not v.sources and not v.pid:
                self.facts.shape_params |= set(v.runtime)
        if vals and not vals[0].sources and not vals[0].pid:
            self.facts.tiled_sizes |= set(vals[0].runtime)
        runtime = frozenset().union(*(v.runtime for v in vals)) if vals else frozenset()
        return Val(runtime=runtime, tilecount=True, shape=())

    def op_arange(self, node: ast.Call) -> Val:
        start_node, end_node = self.arg(node, 0, "start"), self.arg(node, 1, "end")
        start, end = self.ev(start_node), self.ev(end_node)
        sid = self.next_source
        self.next_source += 1
        if end_node is not None and (start.const == 0 or start_node is None):
            self.source_extent[sid] = ast.dump(end_node)
        dim: int | str | None = None
        if end.constexpr is not None and start.const == 0:
            dim = end.constexpr
        elif isinstance(start.const, int) and isinstance(end.const, int):
            dim = end.const - start.const
        for bound, v in ((start_node, start), (end_node, end)):
            if v.runtime and v.constexpr is None and v.const is UNKNOWN:
                self.report(
                    "arange-extent-not-constexpr",
                    node,
                    f"tl.arange bound `{ast.unparse(bound)}` is a runtime argument; Triton only accepts "
                    'tl.constexpr bounds ("arange\'s arguments must be of type tl.constexpr")',
                    f"annotate it `{ast.unparse(bound)}: tl.constexpr`, or pass a power-of-2 BLOCK constexpr "
                    "and mask against the runtime size",
                )
        self._check_pow2(node, dim, "tl.arange extent")
        literal = isinstance(end_node, ast.Constant) and isinstance(dim, int)
        if literal and isinstance(dim, int) and dim >= _TILE_LITERAL_MIN and is_pow2(dim):
            self.report(
                "hardcoded-tile-size",
                node,
                f"tile size {dim} is a literal in `{ast.unparse(node)}`, so it cannot be tuned per shape or GPU",
                f"take it as a parameter `BLOCK: tl.constexpr` and use `tl.arange(0, BLOCK)`; pass {dim} from the "
                "launcher or list it in @triton.autotune configs",
            )
        return Val(sources=frozenset({sid}), axes=((sid, 0),), shape=(dim,))

    def _check_pow2(self, node: ast.AST, dim: object, what: str) -> None:
        for value, where in self.dims_values(dim):
            if not is_pow2(value):
                origin = f" ({where})" if where else ""
                self.report(
                    "arange-non-pow2",
                    node,
                    f"{what} {value}{origin} is not a power of 2; Triton rejects it at compile time",
                    f"use {1 << max(0, value - 1).bit_length()} (triton.next_power_of_2) and mask the extra lanes",
                )
                return

    def op_zeros(self, node: ast.Call) -> Val:
        return self._filled(node, self.arg(node, 0, "shape"), self.arg(node, 1, "dtype"), Val(const=0))

    def op_full(self, node: ast.Call) -> Val:
        return self._filled(
            node, self.arg(node, 0, "shape"), self.arg(node, 2, "dtype"), self.ev(self.arg(node, 1, "value"))
        )

    def _filled(self, node: ast.Call, shape_node: ast.expr | None, dtype_node: ast.expr | None, value: Val) -> Val:
        shape_v = self.ev(shape_node)
        dtype = self.ev(dtype_node).dtype_lit
        shape: tuple | None = None
        if shape_v.items is not None:
            dims: list[object] = []
            for item, item_node in zip(shape_v.items, getattr(shape_node, "elts", []), strict=False):
                d = item.const if isinstance(item.const, int) else item.constexpr
                if isinstance(item_node, ast.Constant) and isinstance(d, int):
                    self._check_pow2(node, d, "tensor dimension")
                dims.append(d)
            shape = tuple(dims)  # type: ignore[arg-type]
        const = value.const
        return Val(
            shape=shape,
            dtype=dtype,
            const=const if isinstance(const, (int, float)) else UNKNOWN,
            acc_init=node if dtype in LOW_PRECISION else None,
            maxed=const == -math.inf,
            nonneg=isinstance(const, (int, float)) and const >= 0,
            positive=isinstance(const, (int, float)) and const > 0,
        )

    def op_make_block_ptr(self, node: ast.Call) -> Val:
        shape = self.ev(self.arg(node, 1, "shape"))
        for pos, name in ((0, "base"), (2, "strides"), (3, "offsets"), (5, "order")):
            self.ev(self.arg(node, pos, name))
        block = self.ev(self.arg(node, 4, "block_shape"))
        runtime = bool(shape.items and any(i.runtime and i.constexpr is None for i in shape.items))
        dims = tuple(i.const if isinstance(i.const, int) else i.constexpr for i in block.items) if block.items else None
        return Val(block_ptr=True, block_runtime_shape=runtime, shape=dims)  # type: ignore[arg-type]

    def op_advance(self, node: ast.Call) -> Val:
        base = self.ev(self.arg(node, 0, "base"))
        self.ev(self.arg(node, 1, "offsets"))
        return base

    def op_make_tensor_descriptor(self, node: ast.Call) -> Val:
        for a in node.args:
            self.ev(a)
        for kw in node.keywords:
            self.ev(kw.value)
        return Val(desc=True)

    def op_load_tensor_descriptor(self, node: ast.Call) -> Val:
        for a in node.args:
            self.ev(a)
        return Val(data=True, raw=True)

    def op_store_tensor_descriptor(self, node: ast.Call) -> Val:
        for a in node.args:
            self.ev(a)
        return NOTHING

    def op_where(self, node: ast.Call) -> Val:
        cond = self.ev(self.arg(node, 0, "condition"))
        x = self.ev(self.arg(node, 1, "x"))
        y = self.ev(self.arg(node, 2, "y"))
        shape, axes = broadcast(x, y)
        out = join(x, y)
        bounded = x.bounded | (x.sources & (cond.mask_sources or frozenset()))
        pad = x.pad if x.pad == y.pad else UNKNOWN_PAD if (x.pad or y.pad) else None
        pad_site, pad_axes = x.pad_site or y.pad_site, x.pad_axes or y.pad_axes
        if cond.is_mask and cond.mask_sources and (x.data or y.data):
            # Lanes where the mask is false take y: that is the padding from here on.
            pad = y.pad if y.pad is not None else pad_of_const(y.const) if not y.data else UNKNOWN_PAD
            pad_site = node if y.pad is None else y.pad_site
            pad_axes = _mask_axes(cond, shape)
        shifted = x.shifted and (y.shifted or (not y.data and (y.const is UNKNOWN or _le_zero(y.const))))
        shifted_exp = x.shifted_exp and (y.shifted_exp or y.const == 0)
        # A max with a constant stand-in (`tl.where(m == -inf, 0.0, m)`, so that -inf − -inf cannot make a
        # NaN) still shifts what it is subtracted from; a max swapped for data does not.
        maxed = (x.maxed or y.maxed) and (x.maxed or not x.data) and (y.maxed or not y.data)
        return replace(
            out,
            maxed=maxed,
            sources=x.sources | y.sources,
            int64=x.int64 or y.int64,  # int32 meeting int64 is promoted to int64
            shape=shape,
            axes=axes,
            bounded=bounded,
            pad=pad,
            pad_site=pad_site,
            pad_axes=pad_axes,
            shifted=shifted,
            shifted_exp=shifted_exp,
            can_be_zero=False,
            const=UNKNOWN,
            constexpr=None,
        )

    def op_minimum(self, node: ast.Call) -> Val:
        return self._extremum(node, is_max=False)

    def op_maximum(self, node: ast.Call) -> Val:
        return self._extremum(node, is_max=True)

    def _extremum(self, node: ast.Call, is_max: bool) -> Val:
        a, b = self.ev(node.args[0]) if node.args else NOTHING, self.ev(node.args[1]) if len(node.args) > 1 else NOTHING
        shape, axes = broadcast(a, b)
        out = join(a, b)

        def pos(v: Val) -> bool:
            return v.positive or (isinstance(v.const, (int, float)) and v.const > 0) or bool(v.runtime and not v.data)

        out = replace(out, int64=a.int64 or b.int64)
        if is_max:
            return replace(
                out,
                shape=shape,
                axes=axes,
                sources=a.sources | b.sources,
                maxed=a.maxed or b.maxed,
                positive=pos(a) or pos(b),
                nonneg=a.nonneg or b.nonneg or pos(a) or pos(b),
                can_be_zero=a.can_be_zero and b.can_be_zero,
                pad=UNKNOWN_PAD if (a.pad or b.pad) else None,
                const=UNKNOWN,
                constexpr=None,
            )
        # tl.minimum(offs, n - 1) clamps indices into range; tl.minimum(x, c) bounds data from above.
        return replace(
            out,
            shape=shape,
            axes=axes,
            sources=a.sources | b.sources,
            bounded=a.sources | b.sources,
            shifted=a.shifted or b.shifted or not (a.data and b.data),
            maxed=False,
            can_be_zero=a.can_be_zero or b.can_be_zero,
            pad=UNKNOWN_PAD if (a.pad or b.pad) else None,
            const=UNKNOWN,
            constexpr=None,
        )

    def op_fdiv(self, node: ast.Call) -> Val:
        a, b = self.ev(node.args[0]) if node.args else NOTHING, self.ev(node.args[1]) if len(node.args) > 1 else NOTHING
        if len(node.args) > 1:
            return self.binop(ast.Div(), a, b, node, node.args[0], node.args[1])
        return NOTHING

    def op_cast(self, node: ast.Call) -> Val:
        return self.cast(node, self.ev(self.arg(node, 0, "input")), self.arg(node, 1, "dtype"))

    def cast(self, node: ast.Call, x: Val, dtype_node: ast.expr | None) -> Val:
        for kw in node.keywords:
            if kw.arg != "dtype":
                self.ev(kw.value)
        dtype = self.ev(dtype_node).dtype_lit
        return replace(
            x,
            dtype=dtype or None,
            int64=dtype in ("int64", "fp64") or (x.int64 and dtype is None),
            const=x.const,
            acc_init=None,
        )

    # ---- memory accesses

    def op_load(self, node: ast.Call) -> Val:
        pointer = self.arg(node, 0, "pointer")
        mask_node = self.arg(node, 1, "mask")
        other_node = self.arg(node, 2, "other")
        ptr = self.access(node, "tl.load", pointer, mask_node, self.arg(node, 3, "boundary_check"), other_node)
        has_mask = mask_node is not None and not (isinstance(mask_node, ast.Constant) and mask_node.value is None)
        other = self.ev(other_node) if other_node is not None else None
        pad: str | None = None
        pad_axes = None
        if ptr.block_ptr:
            padding = self.mod.literal(self.arg(node, 4, "padding_option"))
            pad = {"zero": ZERO, "nan": NAN}.get(padding, UNKNOWN_PAD) if self.arg(node, 3, "boundary_check") else None
        elif has_mask:
            mask = self._last_mask
            pad = UNDEF if other is None else pad_of_const(other.const) if not other.data else UNKNOWN_PAD
            pad_axes = _mask_axes(mask, ptr.shape) if mask is not None else None
        return Val(
            data=True,
            raw=True,
            shape=ptr.shape,
            axes=(),
            pad=pad,
            pad_site=node if pad is not None else None,
            pad_axes=pad_axes,
            can_be_zero=True,
        )

    def op_store(self, node: ast.Call) -> Val:
        pointer, mask = self.arg(node, 0, "pointer"), self.arg(node, 2, "mask")
        self.access(node, "tl.store", pointer, mask, self.arg(node, 3, "boundary_check"))
        return NOTHING

    _last_mask: Val | None = None

    def access(
        self,
        node: ast.Call,
        what: str,
        pointer: ast.expr | None,
        mask_node: ast.expr | None,
        bc_node: ast.expr | None,
        skip: ast.expr | None = None,
    ) -> Val:
        ptr = self.ev(pointer)
        # Evaluate the other arguments (values stored) for the rules they hold; op_load evaluates other=.
        for i, a in enumerate(node.args):
            if i > 0 and a is not mask_node and a is not skip:
                self.ev(a)
        for kw in node.keywords:
            if kw.arg not in ("pointer", "mask") and kw.value is not skip:
                self.ev(kw.value)
        has_mask = mask_node is not None and not (isinstance(mask_node, ast.Constant) and mask_node.value is None)
        mask = self.ev(mask_node) if has_mask else None
        self._last_mask = mask
        if ptr.root is not None:
            use = self.root_use.setdefault(ptr.root, set())
            use.add("load" if what == "tl.load" else "store")
            if has_mask or (bc_node is not None):
                use.add("masked")
        if ptr.ovf_site is not None:
            self.ovf_sites[id(ptr.ovf_site)] = ptr.ovf_site
        if ptr.desc:
            return ptr
        has_bc = bc_node is not None and not (isinstance(bc_node, (ast.Tuple, ast.List)) and not bc_node.elts)
        if ptr.block_ptr:
            if not has_bc and ptr.block_runtime_shape:
                self.report(
                    "unmasked-access",
                    node,
                    f"{what} through a block pointer over a runtime shape has no boundary_check, so edge tiles "
                    "read or write past the tensor",
                    'add `boundary_check=(0, 1)` (the dims that can run over) and, for loads, `padding_option="zero"`',
                )
            return ptr
        uncovered = ptr.sources - ptr.bounded
        if mask is not None:
            if mask.mask_sources is None:
                return ptr
            uncovered -= mask.mask_sources
        tiled = ptr.tiled | (ptr.sources if ptr.advanced else frozenset())
        if self.fit_guards:
            uncovered -= tiled
        if not uncovered or pointer is None:
            return ptr
        text = ast.unparse(pointer)
        if any(text in spec for spec in self.specialised):
            return ptr
        seen = self.candidates.get(id(node))
        if seen is not None:  # second walk of a loop body: facts from the back edge add up
            uncovered, tiled = uncovered | seen.uncovered, tiled | seen.tiled
        self.candidates[id(node)] = AccessCandidate(node, what, frozenset(uncovered), tiled, ptr.root, has_mask)
        return ptr

    def _finish_accesses(self) -> None:
        """Report unmasked accesses whose extent the kernel shows to be dynamic (see module docstring)."""
        for cand in self.candidates.values():
            reason = None
            use = self.root_use.get(cand.root or "", set())
            scratch = {"load", "store"} <= use and "masked" not in use  # padded workspace, read and written
            if cand.uncovered & cand.tiled & self.compared_tiled:
                reason = "the tile's offsets are bounds-checked elsewhere in this kernel, so the last tile runs past"
            elif cand.uncovered & self.compared_sources and cand.root is not None and not scratch:
                reason = "the same lanes are bounds-checked elsewhere in this kernel, so they can run past the end"
            elif self.unused_sizes:
                reason = f"`{self.unused_sizes[0]}` looks like the size it should be masked against, and is unused"
            elif cand.uncovered & cand.tiled and (self.facts.tiled_sizes or self.cdiv_grid):
                bound = (
                    f"`{sorted(self.facts.tiled_sizes)[0]}` is walked in tiles"
                    if self.facts.tiled_sizes
                    else "the launch grid rounds up with triton.cdiv"
                )
                reason = f"the tile slides along a dimension and {bound}, so the last tile runs past the end"
            if reason is None:
                continue
            lanes = ", ".join(f"`{self.source_names.get(s, 'tl.arange')}`" for s in sorted(cand.uncovered))
            what = f"{cand.what} has no mask" if not cand.masked else f"the mask of {cand.what} does not bound {lanes}"
            self.report(
                "unmasked-access",
                cand.call,
                f"{what}: {reason}",
                "build a mask from the offsets (`mask = offs < n`) and pass `mask=mask` (loads also "
                "`other=` a value neutral for what follows)",
            )

    # ---- numerics

    def unary(self, op: str, node: ast.Call, x: Val) -> Val:
        if op in ("exp", "exp2"):
            unsafe = x.data and not (x.shifted or x.nonpos)
            return replace(
                x,
                pad=unary_pad("exp", x.pad),
                positive=True,
                nonneg=True,
                nonpos=False,
                maxed=False,
                shifted=False,
                can_be_zero=False,
                exp_site=node if unsafe else x.exp_site,
                shifted_exp=x.shifted,
                const=UNKNOWN,
                constexpr=None,
            )
        if op == "rsqrt":
            self.check_division(node, node.args[0] if node.args else node, x)
            return replace(x, pad=UNKNOWN_PAD if x.pad else None, positive=True, can_be_zero=False, const=UNKNOWN)
        if op in ("log", "log2"):
            return replace(
                x, pad=unary_pad("log", x.pad), nonneg=False, positive=False, can_be_zero=False, exp_site=None
            )
        if op == "abs":
            return replace(x, pad=unary_pad("abs", x.pad), nonneg=True, nonpos=False, shifted=False)
        if op == "sqrt":
            return replace(x, pad=unary_pad("sqrt", x.pad))
        # Bounded or sign-keeping functions (sigmoid, tanh, erf, cos, ...): safe to exponentiate afterwards.
        return replace(
            x, pad=UNKNOWN_PAD if x.pad else None, shifted=True, can_be_zero=False, maxed=False, exp_site=None
        )

    def reduction(
        self, op: str, node: ast.Call, x: Val, axis_node: ast.expr | None, dtype_node: ast.expr | None
    ) -> Val:
        axis = self.ev(axis_node) if axis_node is not None else None
        dtype = self.ev(dtype_node).dtype_lit if dtype_node is not None else None
        kind = {"sum": "sum", "max": "max", "argmax": "max", "min": "min", "argmin": "min"}.get(op)
        if kind == "sum":
            if x.exp_site is not None:
                self.report(
                    "exp-without-max-shift",
                    x.exp_site,
                    f"`{ast.unparse(x.exp_site)}` exponentiates data that is not shifted by its max, and the "
                    f"result is summed (line {node.lineno}): exp overflows to inf past 88 (fp32) and the sum "
                    "becomes inf or NaN",
                    "subtract the row max first: `m = tl.max(x, axis=0)`, `e = tl.exp(x - m)` (load masked lanes "
                    "with `other=-float('inf')` so they contribute 0)",
                )
            low = dtype if dtype is not None else x.dtype
            if low in LOW_PRECISION:
                self.report(
                    "low-precision-accumulator",
                    node,
                    f"`{ast.unparse(node)}` sums {low} values in {low}: rounding error grows with the length "
                    "and large sums overflow (fp16 max 65504)",
                    "sum in fp32: `tl.sum(x.to(tl.float32), axis=...)`, cast the result at the store",
                    severity=Severity.error if dtype is not None else Severity.warning,
                )
        if kind is not None:
            self._check_pad(kind, node, x, axis)
        rank_known = x.shape is not None
        shape = None
        if rank_known and axis is not None and isinstance(axis.const, int) and x.shape:
            ax = axis.const % len(x.shape)
            shape = tuple(d for i, d in enumerate(x.shape) if i != ax)
        elif axis is None or axis.const is None:
            shape = ()
        if op in ("argmax", "argmin"):
            return Val(shape=shape)
        if op in ("cumsum", "cumprod", "reduce", "xor_sum"):
            return replace(x, exp_site=None, pad=None, pad_site=None, raw=False, shape=x.shape)
        return Val(
            data=x.data,
            shape=shape,
            dtype=dtype or x.dtype,
            maxed=kind == "max",
            positive=x.positive or (kind == "sum" and x.shifted_exp),
            nonneg=x.nonneg,
            nonpos=x.nonpos,
            can_be_zero=x.data and not (x.positive or x.shifted_exp),
        )

    def _check_pad(self, kind: str, node: ast.Call, x: Val, axis: Val | None) -> None:
        pad = x.pad
        if pad is None or pad == UNKNOWN_PAD or x.pad_site is None:
            return
        if axis is not None and axis.const is not None:
            if not isinstance(axis.const, int):
                return
            rank = len(x.shape) if x.shape is not None else None
            if x.pad_axes is None:
                if rank != 1:
                    return
            elif rank and (axis.const % rank) not in x.pad_axes:
                return
        if kind == "sum":
            bad = pad not in (ZERO, FINITE)
            neutral, fix_other = "0", "other=0.0"
        elif kind == "max":
            bad = pad not in (NEG_INF, NEG_BIG, FINITE) and not (pad == ZERO and x.nonneg)
            neutral, fix_other = "-inf", "other=-float('inf')"
        else:
            bad = pad not in (POS_INF, POS_BIG, FINITE) and not (pad == ZERO and x.nonpos)
            neutral, fix_other = "+inf", "other=float('inf')"
        if not bad:
            return
        site = x.pad_site
        fn = f"tl.{kind}"
        if pad == UNDEF:
            msg = (
                f"masked load without other= feeds {fn} (line {node.lineno}): masked-off lanes are undefined "
                "and enter the reduction"
            )
        else:
            msg = (
                f"masked-off lanes hold {pad} and reach {fn} (line {node.lineno}), where the neutral value is "
                f"{neutral}: padding changes the result"
            )
        self.report(
            "non-neutral-other",
            site,
            msg,
            f"pass `{fix_other}` here (or `tl.where(mask, x, {neutral})` before the reduction)",
        )

    def check_division(self, node: ast.AST, divisor_node: ast.AST, d: Val) -> None:
        if not d.can_be_zero:
            return
        names = {n.id for n in ast.walk(divisor_node) if isinstance(n, ast.Name)}
        if names & self.guard_names:
            return
        text = ast.unparse(divisor_node)
        self.report(
            "unguarded-division",
            node,
            f"divides by `{text}`, loaded data or a reduction of it that can be 0 (an all-zero row or block), "
            "giving inf/NaN",
            f"add an epsilon (`{text} + eps`), clamp (`tl.maximum({text}, 1e-12)`) or guard with `tl.where`; if "
            "0 is impossible by construction, say so in a comment",
        )

    def _check_accumulate(self, name: str, op: ast.operator, node: ast.AST) -> None:
        old = self.env.get(name)
        if old is None or not self.loop_depth or not isinstance(op, (ast.Add, ast.Sub)):
            return
        if old.acc_init is not None and old.dtype in LOW_PRECISION:
            self.report(
                "low-precision-accumulator",
                old.acc_init,
                f"accumulator `{name}` is {old.dtype} and is added to in a loop (line {node.lineno}): each "
                "step rounds to 11 (fp16) or 8 (bf16) significant bits",
                "initialise it as fp32 (`tl.zeros(..., dtype=tl.float32)`) and cast once at the store",
            )

    def dot(self, node: ast.AST, a: Val, b: Val, acc: Val | None, out_dtype: ast.expr | None) -> Val:
        for operand, contraction_from_end in ((a, 1), (b, 2)):
            if operand.exp_site is not None:
                self.report(
                    "exp-without-max-shift",
                    operand.exp_site,
                    f"`{ast.unparse(operand.exp_site)}` exponentiates data not shifted by its max and feeds "
                    f"tl.dot (line {node.lineno}), which sums the products: overflow to inf/NaN",
                    "subtract the running max before exp (online softmax: `p = tl.exp(s - m_new[:, None])`)",
                )
            if operand.pad in (None, UNKNOWN_PAD, ZERO, FINITE) or operand.pad_axes is None or operand.pad_site is None:
                continue
            rank = len(operand.shape) if operand.shape is not None else 2
            if rank - contraction_from_end in operand.pad_axes:
                what = "undefined" if operand.pad == UNDEF else operand.pad
                self.report(
                    "non-neutral-other",
                    operand.pad_site,
                    f"masked-off lanes along the contraction dimension hold {what} and are summed by tl.dot "
                    f"(line {node.lineno})",
                    "pass `other=0.0` so the K tail contributes nothing",
                )
        out = self.ev(out_dtype).dtype_lit if out_dtype is not None else None
        if out in LOW_PRECISION:
            self.report(
                "low-precision-accumulator",
                node,
                f"tl.dot(..., out_dtype={out}) accumulates the K-loop products in {out}",
                "drop out_dtype (fp32 is the default) and cast the result once at the store",
            )
        elif acc is not None and acc.dtype in LOW_PRECISION:
            self.report(
                "low-precision-accumulator",
                acc.acc_init or node,
                f"tl.dot accumulates into a {acc.dtype} accumulator (line {node.lineno})",
                "initialise the accumulator with `tl.zeros(..., dtype=tl.float32)` and cast at the store",
            )
        self._check_dot_dims(node, a, b)
        shape = None
        if a.shape is not None and b.shape is not None and len(a.shape) >= 2 and len(b.shape) >= 2:
            shape = (*a.shape[:-1], b.shape[-1])
        return Val(data=True, dtype=out or "fp32", shape=shape)

    def _check_dot_dims(self, node: ast.AST, a: Val, b: Val) -> None:
        if a.shape is None or len(a.shape) < 2:
            return
        k_values = self.dims_values(a.shape[-1])
        small_k = [(v, w) for v, w in k_values if v < 16]
        if small_k:
            v, w = small_k[0]
            self.report(
                "dot-small-tile",
                node,
                f"tl.dot with K = {v}{f' ({w})' if w else ''}: Triton needs K >= 16 on NVIDIA GPUs "
                "(32 for 8-bit inputs) and will not compile it",
                "make the K tile (BLOCK_K) at least 16",
            )
            return
        mn = [*self.dims_values(a.shape[-2])]
        if b.shape is not None and len(b.shape) >= 2:
            mn += self.dims_values(b.shape[-1])
        small = [(v, w) for v, w in mn if v < 16]
        if small:
            v, w = small[0]
            self.report(
                "dot-small-tile",
                node,
                f"tl.dot on a tile dimension of {v}{f' ({w})' if w else ''}: below 16 the tensor-core "
                "instruction is padded and most of it is wasted",
                "use tiles of at least 16 in M and N, or do the product with broadcasting and tl.sum",
                severity=Severity.info,
            )

    def op_dot(self, node: ast.Call) -> Val:
        a = self.ev(self.arg(node, 0, "input"))
        b = self.ev(self.arg(node, 1, "other"))
        acc_node = self.arg(node, 2, "acc")
        acc = self.ev(acc_node) if acc_node is not None else None
        for kw in node.keywords:
            if kw.arg not in ("input", "other", "acc", "out_dtype"):
                self.ev(kw.value)
        return self.dot(node, a, b, acc, self.arg(node, 6, "out_dtype"))

    # ---- other rules

    def debug(self, op: str, node: ast.Call) -> Val:
        for a in node.args:
            self.ev(a)
        name = "print" if op == "print" else f"tl.{op}"
        notes = {
            "device_print": "prints from every program at run time and serialises the kernel",
            "print": "is tl.device_print inside a kernel: prints from every program and serialises it",
            "static_print": "prints at every compilation",
            "device_assert": "is compiled out unless TRITON_DEBUG=1, so it checks nothing in production",
            "debug_barrier": "synchronises all threads of the program; needed only around cross-thread shared data",
        }
        self.report(
            "debug-leftover",
            node,
            f"{name} left in the kernel: it {notes[op]}",
            f"remove the {name} call"
            + (" (or keep it and say in a comment what it synchronises)" if op == "debug_barrier" else ""),
            severity=_DEBUG[op],
        )
        return NOTHING

    def check_static_range(self, node: ast.Call, args: list[Val]) -> None:
        for a_node, v in zip(node.args, args, strict=True):
            if (v.runtime or v.pid or v.data) and v.constexpr is None and v.const is UNKNOWN:
                self.report(
                    "static-range-runtime-bound",
                    node,
                    f"tl.static_range bound `{ast.unparse(a_node)}` is not a tl.constexpr; static_range unrolls "
                    "at compile time and Triton rejects runtime bounds",
                    "use `range(...)`/`tl.range(...)` for a runtime trip count, or make the bound a tl.constexpr",
                )
                return

    def check_break(self, s: ast.stmt) -> None:
        if not installed_triton_rejects_break():
            return
        word = "break" if isinstance(s, ast.Break) else "continue"
        self.report(
            "break-continue-unsupported",
            s,
            f"`{word}` in @triton.jit code: the installed Triton rejects it "
            f'("unsupported AST node type: {word.capitalize()}")',
            "turn the early exit into the loop condition (`while i < n and not done:`) or mask the rest of the "
            "body with tl.where",
        )


def _pad_source(a: Val, b: Val) -> Val:
    """The operand whose padding decides the result's: an undefined one wins, then any padded one."""
    if b.pad == UNDEF and a.pad != UNDEF:
        return b
    return a if a.pad is not None else b


def _le_zero(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0


def _mask_axes(mask: Val | None, shape: tuple | None) -> frozenset[int] | None:
    """Axes of the access that the mask bounds, or None when they cannot be told."""
    if mask is None or mask.mask_sources is None or not mask.mask_sources:
        return None
    axes = {s: ax for s, ax in mask.axes}
    if any(s not in axes for s in mask.mask_sources):
        return None
    shift = 0
    if shape is not None and mask.shape is not None:
        shift = len(shape) - len(mask.shape)
    return frozenset(axes[s] + shift for s in mask.mask_sources)
