"""The abstract interpreter of one ``@triton.jit`` function: value tracking over its AST, no rules.

The function body is walked statement by statement with an environment name → :class:`Val`. Branches are
walked separately and joined; loop bodies twice (the second time from the widened join), so that facts
carried around the back edge (a pointer bumped each iteration, a running max) are seen. Helpers called from
a kernel are analysed on their own, with their parameters unknown; only the sizes a kernel hands to a
helper that masks or loops on them are carried across the call (for the autotune key). Values returned by
helpers are unknown: a known source of misses, never of false findings.

The walk raises events (a memory access, a reduction, a division, a ``tl.dot``, ...; the list is
``rules.registry.KERNEL_EVENTS``) and the rule checks registered for them decide what to report, reading
the values and the path facts the interpreter keeps:

- ``fit_guards``: inside ``if start + BLOCK <= n:`` (or after ``if start + BLOCK > n: ...; return``);
- ``specialised``: inside ``if EVEN_K:`` whose other branch masks these pointers;
- ``exact_tiles``: inside a branch that holds only when a size is a multiple of the tile (``if EVEN_N:``
  where every launch or heuristic sets ``EVEN_N`` from ``n % BLOCK == 0``, or ``if n % BLOCK == 0:``);
- ``compared_sources`` / ``compared_tiled``: lanes compared against a bound somewhere in the kernel.

It also records what the autotune and launcher rules need (:class:`KernelFacts`: the shape arguments it
masks and loops on).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mcp_server.engine.audit.analysis.launches import LaunchFacts, divisibility
from mcp_server.engine.audit.analysis.module import UNKNOWN, JitFunction, ModuleIndex
from mcp_server.engine.audit.analysis.values import (
    DTYPES,
    LOW_PRECISION,
    NAN,
    NOTHING,
    UNDEF,
    UNKNOWN_PAD,
    ZERO,
    Val,
    binary_pad,
    bounds,
    broadcast,
    exact,
    fold,
    interval,
    join,
    pad_bounds,
    pad_of_const,
    promote,
    subscript,
    unary_pad,
    with_bounds,
)
from mcp_server.engine.models import Severity

if TYPE_CHECKING:
    from mcp_server.engine.audit.rules.registry import Registry

Report = Callable[..., None]  # report(rule, node, message, fix, severity=None)

# tl functions by what they are to this analysis; names are the last component of the resolved name, so
# tl.exp, tl.math.exp and libdevice.exp are all "exp".
_ALIASES = {"fast_expf": "exp", "expf": "exp", "exp2f": "exp2", "sqrt_rn": "sqrt", "div_rn": "fdiv"}
_PASSTHROUGH = {"multiple_of", "max_contiguous", "max_constancy", "constexpr", "assume"}
_SHAPE_CHANGING = {"reshape", "view", "broadcast_to", "expand_dims", "permute", "trans", "split", "join", "ravel"}
_UNARY_KEEP_SIGN = {"floor", "ceil", "erf", "tanh", "sigmoid", "cos", "sin"}
_DEBUG = {"device_print", "print", "static_print", "device_assert", "debug_barrier"}
_LOOP_FUNCS = {"range", "static_range"}
_BIG_LITERAL = 16  # literal multipliers at least this big are element counts, not tile counts


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


@dataclass
class AccessEvent:
    """A tl.load/tl.store/atomic as the ``access`` event hands it to the checks."""

    node: ast.Call
    what: str  # "tl.load", "tl.store", "tl.atomic_add", ...
    pointer: ast.expr | None
    ptr: Val
    mask: Val | None
    has_mask: bool
    bc_node: ast.expr | None  # boundary_check=


class KernelInterpreter:
    def __init__(
        self,
        mod: ModuleIndex,
        fn: JitFunction,
        report: Report,
        checks: Registry,
        launches: LaunchFacts,
        helper_facts: dict[str, KernelFacts] | None = None,
    ):
        self.mod = mod
        self.fn = fn
        self._report = report
        self.checks = checks
        self.rule_state: dict[str, Any] = {}  # per-rule scratch of the checks, for this kernel
        self.launches = launches
        self.meta_values = launches.meta.get(fn.name, {})  # constexpr name → [(value, "where it is set")]
        self.cdiv_grid = launches.cdiv.get(fn.name, False)
        self.helper_facts = helper_facts or {}
        self.facts = KernelFacts()
        self.env: dict[str, Val] = {}
        self.loop_depth = 0
        self.next_source = 0
        self.compared_sources: set[int] = set()
        self.source_extent: dict[int, str] = {}  # source → ast.dump of its extent expression
        self.source_names: dict[int, str] = {}  # source → the first name it was assigned to
        self.compared_tiled: set[int] = set()  # compared while slid by pid/loop: that dimension is bounded
        self.fit_guards = 0  # inside `if start + BLOCK <= n:`: the whole tile is known to fit
        # Inside branches that hold only when a size is a multiple of these tile constexprs: their tiles are whole.
        self.exact_stack: list[set[str]] = []
        self.source_tile: dict[int, str] = {}  # source → the constexpr that is its tl.arange extent
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
        self.divisible_flags = launches.divisible_flags(fn.name)
        for p in fn.params:
            if p.constexpr:
                values = launches.constexpr_values(fn.name, p.name)
                lo, hi = (min(values), max(values)) if values else (None, None)
                self.env[p.name] = Val(constexpr=p.name, const=p.default, shape=(), lo=lo, hi=hi)
            else:
                self.env[p.name] = Val(runtime=frozenset({p.name}), root=p.name, shape=None if helper else ())

    # ----------------------------------------------------------------------------------------- entry

    def run(self) -> KernelFacts:
        self.exec_block(self.fn.node.body)
        self.emit("finish")
        return self.facts

    def emit(self, event: str, *args: Any) -> None:
        """Hand an event of the walk to the rule checks registered for it (see ``rules.registry``)."""
        self.checks.emit(event, self, *args)

    def state(self, key: str, factory: Callable[[], Any]) -> Any:
        """The scratch state a check keeps for this kernel (created on first use)."""
        if key not in self.rule_state:
            self.rule_state[key] = factory()
        return self.rule_state[key]

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

    @property
    def exact_tiles(self) -> set[str]:
        """Tile constexprs known to divide their size on the current path."""
        return set().union(*self.exact_stack)

    def exec_block(self, stmts: list[ast.stmt]) -> None:
        guarded = 0
        exact = 0
        for s in stmts:
            self.exec(s)
            # `if not EVEN_N: <masked tail>; return`: the rest of the block sees whole tiles.
            if isinstance(s, ast.If) and s.body and isinstance(s.body[-1], ast.Return) and not s.orelse:
                tiles = self._exact_branch(s.test)[1]
                if tiles:
                    self.exact_stack.append(tiles)
                    exact += 1
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
        del self.exact_stack[len(self.exact_stack) - exact :]

    def exec(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            v = self.ev(s.value)
            for t in s.targets:
                if isinstance(t, ast.Name) and isinstance(s.value, ast.BinOp) and self._is_self_update(t, s.value):
                    self.emit("accumulate", t.id, s.value.op, s)
                self.assign(t, v)
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                old = self.env.get(s.target.id, NOTHING)
                self.emit("accumulate", s.target.id, s.op, s)
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
            self.emit("break", s)
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
        exact_body, exact_else = self._exact_branch(s.test)
        self.specialised.append(spec_else)
        self.exact_stack.append(exact_body)
        self.fit_guards += fit == "body"
        self.exec_block(s.body)
        self.fit_guards -= fit == "body"
        self.exact_stack.pop()
        self.specialised.pop()
        after_body = self.env
        self.env = dict(before)
        self.specialised.append(spec_body)
        self.exact_stack.append(exact_else)
        self.fit_guards += fit == "orelse"
        self.exec_block(s.orelse)
        self.fit_guards -= fit == "orelse"
        self.exact_stack.pop()
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

    def _exact_branch(self, test: ast.expr) -> tuple[set[str], set[str]]:
        """Tile constexprs whose extent divides its size in the body / the else branch of ``if test:``:
        ``if EVEN_N:`` on a flag every launch sets from ``n % BLOCK_N == 0`` (or a heuristic does),
        ``if n % BLOCK_N == 0:``, ``if n % BLOCK_N:`` (else branch), ``not`` of those, ``and`` of them."""
        negate = False
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            negate, test = not negate, test.operand
        tiles: set[str] = set()
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negate:
            for part in test.values:
                tiles |= self._exact_branch(part)[0]
            return tiles, set()
        if isinstance(test, ast.Name) and test.id in self.divisible_flags and test.id in self.fn.constexprs:
            tiles = set(self.divisible_flags[test.id])
        elif (divisor := divisibility(test)) is not None:
            tiles = self._tile_names(divisor)
        elif isinstance(test, ast.BinOp) and isinstance(test.op, ast.Mod):  # `if n % BLOCK:` a remainder
            tiles, negate = self._tile_names(test.right), not negate
        elif (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.NotEq)
            and (divisor := divisibility(ast.Compare(test.left, [ast.Eq()], test.comparators))) is not None
        ):
            tiles, negate = self._tile_names(divisor), not negate
        return (set(), tiles) if negate else (tiles, set())

    def _tile_names(self, divisor: ast.expr) -> set[str]:
        return {divisor.id} if isinstance(divisor, ast.Name) and divisor.id in self.fn.constexprs else set()

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
                start, stop, step = Val(const=0, lo=0, hi=0), NOTHING, None
                if len(args) == 1:
                    stop = args[0]
                elif len(args) >= 2:
                    start, stop = args[0], args[1]
                    step = args[2] if len(args) > 2 else None
                if op == "static_range":
                    self.emit("static_range", it, args)
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
                if step is None or (step.lo is not None and step.lo > 0):  # counts up from start, below stop
                    hi = None if stop.hi is None or start.lo is None else max(start.lo, stop.hi - 1)
                    loopvar = replace(loopvar, lo=start.lo, hi=hi)
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
        entry = _widen(before, self._join_envs(before, self.env))
        # Walk again from the widened entry until the bounds hold around the back edge (twice at most).
        for _ in range(2):
            self.env = dict(entry)
            if target is not None:
                self.assign(target, loopvar)
            self.exec_block(body)
            after = self.env
            wider = _widen(entry, self._join_envs(entry, after))
            if all(
                bounds(wider[k]) == bounds(entry[k]) and pad_bounds(wider[k]) == pad_bounds(entry[k]) for k in entry
            ):
                break
            entry = wider
        self.env = _widen(before, self._join_envs(before, after))
        for name, start in before.items():
            # `acc = tl.zeros(...)` then `acc += tl.exp(x - m)`: a loop that runs no iteration leaves no element
            # to normalise, so the sum of the accumulator is still >= 1 wherever it is used.
            end = self.env.get(name)
            if end is not None and after.get(name, NOTHING).shifted_exp and start.const == 0 and not start.data:
                self.env[name] = replace(end, shifted_exp=True)
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
        lo, hi = exact(node.value)
        return Val(const=node.value, shape=(), lo=lo, hi=hi)

    def ev_Name(self, node: ast.Name) -> Val:
        if node.id in self.env:
            return self.env[node.id]
        if node.id in self.mod.constants:
            lo, hi = exact(self.mod.constants[node.id])
            return Val(const=self.mod.constants[node.id], constexpr=node.id, shape=(), lo=lo, hi=hi)
        return self._named(node)

    def _named(self, node: ast.AST) -> Val:
        name = self.mod.resolve(node)
        if name:
            last = name.rsplit(".", 1)[-1]
            if name.startswith("triton.language.") and last in DTYPES:
                return Val(dtype_lit=DTYPES[last])
            if name in ("math.inf", "numpy.inf"):
                return Val(const=math.inf, shape=(), lo=math.inf, hi=math.inf)
            if name in ("math.pi", "math.e"):
                c = math.pi if last == "pi" else math.e
                return Val(const=c, shape=(), lo=c, hi=c)
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
            neg = replace(
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
            return with_bounds(neg, interval("neg", bounds(v)), interval("neg", pad_bounds(v)))
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return replace(v, const=UNKNOWN, constexpr=None, lo=None, hi=None, pad_lo=None, pad_hi=None)
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
        out = self._binop(op, a, b, node, lnode, rnode)
        name = _INTERVAL_OPS.get(type(op))
        if name is None:
            return with_bounds(out, (None, None), (None, None))
        return with_bounds(out, interval(name, bounds(a), bounds(b)), interval(name, pad_bounds(a), pad_bounds(b)))

    def _binop(self, op: ast.operator, a: Val, b: Val, node: ast.AST, lnode: ast.AST, rnode: ast.AST) -> Val:
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
            self.emit("division", node, rnode, b)
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
        # acc + exp(x - max): each lane is at least the exp's, so the sum over lanes stays >= 1.
        shifted_exp = not sub and ((a.shifted_exp and b.nonneg) or (b.shifted_exp and a.nonneg))
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
            shifted_exp=shifted_exp,
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

        # Proven bounds on both factors (a bounded grid, `pid % GROUPS`, constexprs every launch sets to a
        # literal): a product that stays inside int32 cannot wrap.
        lo, hi = interval("mul", bounds(a), bounds(b))
        fits = lo is not None and hi is not None and lo >= -(2**31) and hi < 2**31
        for p, q in ((a, b), (b, a)):
            if p.pid_small and static(q):
                # program_id(1)/(2) < 65536: times a tile size it stays far below 2**31.
                elem = elem or self._elem_scale(q)
            elif p.pid and not p.int64 and not q.int64 and (self._elem_scale(q) or (q.elem and p.elem)):
                ovf = ovf or (None if fits else node)
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
                lo, hi = exact(v)
                return Val(const=v, shape=(), lo=lo, hi=hi) if v is not UNKNOWN else NOTHING
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
            for a in node.args:
                self.ev(a)
            self.emit("debug", op, node)
            return NOTHING
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
        grid = self.launches.grid_bound(self.fn.name, axis) if axis in (0, 1, 2) else None
        if grid is None:  # CUDA's limits: 2**31 - 1 programs along axis 0, 65535 along axes 1 and 2
            grid = 65535 if axis in (1, 2) else 2**31 - 1
        return Val(pid=True, pid_small=axis in (1, 2), shape=(), lo=0, hi=max(0, grid - 1))

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
        self.emit("arange", node, start_node, end_node, start, end, dim)
        if end.constexpr is not None and isinstance(end_node, ast.Name):
            self.source_tile[sid] = end.constexpr
        lo = 0 if start_node is None else start.lo
        hi = None if end.hi is None else end.hi - 1
        return Val(sources=frozenset({sid}), axes=((sid, 0),), shape=(dim,), lo=lo, hi=hi)

    def op_zeros(self, node: ast.Call) -> Val:
        return self._filled(node, self.arg(node, 0, "shape"), self.arg(node, 1, "dtype"), Val(const=0, lo=0, hi=0))

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
                    self.emit("filled_dim", node, d)
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
            lo=value.lo,
            hi=value.hi,
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
        pad_range = interval("hull", pad_bounds(x), pad_bounds(y))
        if cond.is_mask and cond.mask_sources and (x.data or y.data):
            # Lanes where the mask is false take y: that is the padding from here on.
            pad = y.pad if y.pad is not None else pad_of_const(y.const) if not y.data else UNKNOWN_PAD
            pad_site = node if y.pad is None else y.pad_site
            pad_axes = _mask_axes(cond, shape)
            pad_range = interval("hull", bounds(y), pad_bounds(y))
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
            lo=None if x.lo is None or y.lo is None else min(x.lo, y.lo),
            hi=None if x.hi is None or y.hi is None else max(x.hi, y.hi),
            pad_lo=pad_range[0] if pad is not None else None,
            pad_hi=pad_range[1] if pad is not None else None,
        )

    def op_minimum(self, node: ast.Call) -> Val:
        return self._extremum(node, is_max=False)

    def op_maximum(self, node: ast.Call) -> Val:
        return self._extremum(node, is_max=True)

    def _extremum(self, node: ast.Call, is_max: bool) -> Val:
        a, b = self.ev(node.args[0]) if node.args else NOTHING, self.ev(node.args[1]) if len(node.args) > 1 else NOTHING
        op = "maximum" if is_max else "minimum"
        out = self._extremum_facts(a, b, is_max)
        real, padded = interval(op, bounds(a), bounds(b)), interval(op, pad_bounds(a), pad_bounds(b))
        if out.pad is not None and padded[0] is not None and padded[0] == padded[1]:
            out = replace(out, pad=pad_of_const(padded[0]))  # tl.maximum(x, 1.0) of lanes padded with 1.0: 1.0
        return with_bounds(out, real, padded)

    def _extremum_facts(self, a: Val, b: Val, is_max: bool) -> Val:
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
        out = replace(
            x,
            dtype=dtype or None,
            int64=dtype in ("int64", "fp64") or (x.int64 and dtype is None),
            const=x.const,
            acc_init=None,
        )
        if dtype is None or not dtype.startswith(("int", "uint")):
            return out
        # Float to int truncates toward zero: floor/ceil of the bounds still bound it (wrapping is not modelled,
        # so only bounds inside the target type are kept).
        limit = 2**63 if dtype == "int64" else 2**31
        return with_bounds(out, _int_bounds(bounds(x), limit), _int_bounds(pad_bounds(x), limit))

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
        pad_lo, pad_hi = bounds(other) if other is not None and not other.data and pad is not None else (None, None)
        return Val(
            data=True,
            raw=True,
            shape=ptr.shape,
            axes=(),
            pad=pad,
            pad_site=node if pad is not None else None,
            pad_axes=pad_axes,
            can_be_zero=True,
            pad_lo=pad_lo,
            pad_hi=pad_hi,
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
        self.emit("access", AccessEvent(node, what, pointer, ptr, mask, has_mask, bc_node))
        return ptr

    # ---- numerics

    def unary(self, op: str, node: ast.Call, x: Val) -> Val:
        out = self._unary(op, node, x)
        return with_bounds(out, interval(op, bounds(x)), interval(op, pad_bounds(x)))

    def _unary(self, op: str, node: ast.Call, x: Val) -> Val:
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
            self.emit("division", node, node.args[0] if node.args else node, x)
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
        self.emit("reduction", op, node, x, axis, dtype)
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
            return replace(
                x,
                exp_site=None,
                pad=None,
                pad_site=None,
                raw=False,
                shape=x.shape,
                lo=None,
                hi=None,
                pad_lo=None,
                pad_hi=None,
            )
        lo, hi = _reduced_bounds(kind, x)
        return Val(
            data=x.data,
            shape=shape,
            dtype=dtype or x.dtype,
            maxed=kind == "max",
            positive=x.positive or (kind == "sum" and x.shifted_exp),
            nonneg=x.nonneg,
            nonpos=x.nonpos,
            can_be_zero=x.data and not (x.positive or x.shifted_exp),
            lo=lo,
            hi=hi,
        )

    def dot(self, node: ast.AST, a: Val, b: Val, acc: Val | None, out_dtype: ast.expr | None) -> Val:
        out = self.ev(out_dtype).dtype_lit if out_dtype is not None else None
        self.emit("dot", node, a, b, acc, out)
        shape = None
        if a.shape is not None and b.shape is not None and len(a.shape) >= 2 and len(b.shape) >= 2:
            shape = (*a.shape[:-1], b.shape[-1])
        return Val(data=True, dtype=out or "fp32", shape=shape)

    def op_dot(self, node: ast.Call) -> Val:
        a = self.ev(self.arg(node, 0, "input"))
        b = self.ev(self.arg(node, 1, "other"))
        acc_node = self.arg(node, 2, "acc")
        acc = self.ev(acc_node) if acc_node is not None else None
        for kw in node.keywords:
            if kw.arg not in ("input", "other", "acc", "out_dtype"):
                self.ev(kw.value)
        return self.dot(node, a, b, acc, self.arg(node, 6, "out_dtype"))


def _int_bounds(b: tuple[float | None, float | None], limit: int) -> tuple[float | None, float | None]:
    lo, hi = b
    if lo is None or hi is None or math.isinf(lo) or math.isinf(hi) or lo < -limit or hi >= limit:
        return None, None
    return math.floor(lo), math.ceil(hi)


def _reduced_bounds(kind: str | None, x: Val) -> tuple[float | None, float | None]:
    """Bounds of a max/min/sum over lanes of ``x`` (masked-off lanes take part in the reduction too)."""
    real, padded = bounds(x), pad_bounds(x)
    hull = interval("hull", real, padded)
    if kind in ("max", "min"):
        return hull
    if kind == "sum" and real[0] is not None and real[0] > 0 and hull[0] is not None and hull[0] >= 0:
        # Every real lane adds at least lo and no lane subtracts: a row with one real element sums to >= lo (a
        # row with none has nothing its sum could be used for).
        return real[0], None
    return None, None


def _widen(before: dict[str, Val], after: dict[str, Val]) -> dict[str, Val]:
    """``after`` with every bound that moved from ``before`` dropped (a loop may move it any number of times)."""
    out = dict(after)
    for name, v in after.items():
        old = before.get(name)
        if old is None:
            if v.lo is not None or v.hi is not None or v.pad_lo is not None or v.pad_hi is not None:
                out[name] = replace(v, lo=None, hi=None, pad_lo=None, pad_hi=None)
            continue
        lo = v.lo if v.lo == old.lo else None
        hi = v.hi if v.hi == old.hi else None
        pad_lo = v.pad_lo if v.pad_lo == old.pad_lo else None
        pad_hi = v.pad_hi if v.pad_hi == old.pad_hi else None
        if (lo, hi, pad_lo, pad_hi) != (v.lo, v.hi, v.pad_lo, v.pad_hi):
            out[name] = replace(v, lo=lo, hi=hi, pad_lo=pad_lo, pad_hi=pad_hi)
    return out


_INTERVAL_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Mod: "mod", ast.FloorDiv: "floordiv"}


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
