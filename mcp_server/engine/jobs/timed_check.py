"""What bench does so that a timing is of the work validate judged: fresh input values for every timed call, and
the outputs of timed calls, picked at random after they return, checked against the reference.

Validate and bench run in different children. A candidate that does its work for the few calls validate makes
and then skips part of it (a call counter is enough), or returns the result it kept for an input it has seen
(the bench rotates a few input sets), would be timed doing less than it was judged on. So:

- every timed call of every provider first gets new values in its floating inputs (drawn like the bench's
  other input sets: the set's mean and spread, non-negative where the set is), outside the timed interval;
  a result kept from an earlier call is then stale;
- after each call returns, a draw from the operating system's random source decides whether that call is
  checked (about two calls a round); its inputs and outputs (and, timing forward + backward, the gradients and
  the upstream gradient) are copied on the stream, after the call and before the next call's new values;
- at the end of the round each kept call is compared with the reference run on the same inputs.

The comparison is not validate's: the truth here is the reference in its own dtype, at the bench's sizes. It
catches work left undone, results from an earlier call and a cheaper precision, not rounding: an output fails
when NaN or infinity positions, integer values or shapes disagree beyond one element in a thousand, or when
its relative norm distance from the reference exceeds ``CHECK_FACTOR`` times the largest of the dtype's
validate norm floor (or the reference module's tolerance), the errors validate measured for this candidate, and the
reference's own error at the bench's size (its distance from itself run in float64 on one kept call's values per
case; a reference module runs as a float64 copy, its weights and buffers widened): a candidate more accurate
than PyTorch differs from it by PyTorch's own error, which can grow with size past what validate's smaller cases
showed. An output of fewer than ``compare.FEW_ELEMENTS`` values is held value by value instead (that limit times
each value, plus the dtype's atol), and its norm only to a gross error: a few rounding errors are too noisy for a
norm.
"""

from __future__ import annotations

import copy
import math
import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

from mcp_server.engine import compare
from mcp_server.engine.jobs import grad_calls
from mcp_server.engine.jobs.derive import value_stats
from mcp_server.engine.jobs.trees import (
    clone,
    flatten_outputs,
    foreign_tensor,
    iter_tensors,
    map_tensors,
    same_bits,
    storage_span,
    type_label,
)
from mcp_server.engine.models import FindingKind

# How many times the largest of the norm floor, validate's measured errors and the reference's own error at the
# bench's size a timed output may be off. On an H200
# every reference kernel's timed outputs, bf16 and fp16, forward and forward + backward, stayed within 0.82× the
# floor alone (benchmarks/results/h200/timed_checks.json); bf16 GEMM operands swapped for e4m3 land at 4.7×.
CHECK_FACTOR = 4.0
# Elements whose NaN/Inf position or integer value may disagree, as a fraction of an output.
MISMATCH_FRACTION = 1e-3
# Calls drawn for checking per provider and round, on average, and kept at most. A candidate that skips its work
# on a fraction f of its calls passes a round's checks with a chance of about e^(-CHECKS_PER_ROUND·f).
CHECKS_PER_ROUND = 2
MAX_KEPT_PER_ROUND = 2
# How a failed check starts the provider's error, which the parent turns back into the finding kind.
PREFIX = FindingKind.timed_output_mismatch.value


def module_tolerances(module: Any) -> dict[str, list[float]] | None:
    """The (atol, rtol) per dtype name a reference module declares: ``TOLERANCES``, or its ``SPEC.tolerances``."""
    tolerances = getattr(module, "TOLERANCES", None)
    spec = getattr(module, "SPEC", None)
    if tolerances is None and spec is not None and hasattr(spec, "tolerances"):
        tolerances = {str(k).replace("torch.", ""): [v.atol, v.rtol] for k, v in spec.tolerances.items()}
    return tolerances


class FreshValues:
    """New values for the floating tensors of one input set, in place and without a host sync: normal draws
    with each tensor's mean and standard deviation as the set first had them, folded to non-negative where
    every finite value was.

    The draws come from generators of the set's own, seeded from the operating system, and the state each refresh
    began from is kept: the values a call was given can be drawn again, so a call that changed its inputs (zeroed
    them, so that the reference's answer becomes whatever it returned) is told (``changed``). The set's other
    tensors (integers, flags) keep their values; a copy of them is kept for the same comparison. Tensors that share
    memory with another of the set (the same tensor passed twice, a view of another) are not compared: a later draw
    into the shared memory rewrites an earlier one."""

    def __init__(self, args: Any):
        tensors = list(iter_tensors(args))
        self.plan = [(t, *value_stats(t)) for t in tensors if t.is_floating_point() and t.numel()]
        spans = [(str(t.device), storage_span(t)) for t in tensors]
        # Per input tensor, in iter_tensors order: the index of its draw in the plan, a copy of its fixed value, or
        # None (shares memory: not compared).
        self.layout: list[int | torch.Tensor | None] = []
        for t, span in zip(tensors, spans, strict=True):
            if span[1] is not None and spans.count(span) > 1:
                self.layout.append(None)
            elif t.is_floating_point() and t.numel():
                self.layout.append(next(i for i, p in enumerate(self.plan) if p[0] is t))
            else:
                self.layout.append(t.detach().clone())
        self.generators: dict[torch.device, torch.Generator] = {}
        for t, *_ in self.plan:
            if t.device not in self.generators:
                self.generators[t.device] = torch.Generator(device=t.device)
                self.generators[t.device].manual_seed(secrets.randbits(63))
        self.last_state = self._states()

    def _states(self) -> dict[torch.device, torch.Tensor]:
        return {device: g.get_state() for device, g in self.generators.items()}

    def _draw(self, t: torch.Tensor, mean: float, std: float, nonneg: bool, out: torch.Tensor) -> None:
        g = self.generators[t.device]
        if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            out.normal_(mean, std, generator=g)
            if nonneg:
                out.abs_()
        else:  # fp8 and other types normal_ does not fill: draw in float32 and cast
            fresh = torch.randn(t.shape, device=t.device, generator=g) * std + mean
            out.copy_(fresh.abs() if nonneg else fresh)

    def refresh(self) -> None:
        self.last_state = self._states()
        with torch.no_grad():
            for t, mean, std, nonneg in self.plan:
                self._draw(t, mean, std, nonneg, t)

    def given(self, state: dict[torch.device, torch.Tensor]) -> list[torch.Tensor | None]:
        """Every tensor of the set (iter_tensors order) as the refresh that began at ``state`` left it (None where
        it shares memory with another)."""
        now = self._states()
        try:
            for device, s in state.items():
                self.generators[device].set_state(s)
            with torch.no_grad():
                draws = []
                for t, mean, std, nonneg in self.plan:
                    out = torch.empty_like(t, requires_grad=False)
                    self._draw(t, mean, std, nonneg, out)
                    draws.append(out)
        finally:
            for device, s in now.items():
                self.generators[device].set_state(s)
        return [draws[slot] if isinstance(slot, int) else slot for slot in self.layout]

    def changed(self, inputs: list[Any], state: dict[torch.device, torch.Tensor]) -> str | None:
        """Which tensor of ``inputs`` (a call's inputs as copied after it) is not what the refresh that began at
        ``state`` gave the call, bit for bit; None when none is."""
        got = list(iter_tensors(inputs))
        for i, (g, want) in enumerate(zip(got, self.given(state), strict=True)):
            if want is not None and not same_bits(g, want, on_device=True):
                return f"input tensor {i} ({type_label(want)})"
        return None


@dataclass
class Kept:
    """One timed call kept for checking: copies of its inputs, outputs and (forward + backward) gradients."""

    provider: str
    inputs: list[Any]
    outputs: list[torch.Tensor]
    upstream: list[torch.Tensor] | None = None
    # What is wrong with the call before any comparison (a tensor subclass returned), or None.
    problem: str | None = None
    # Where the call's input values came from (FreshValues, and the state its refresh began at), to tell whether the
    # call changed them; None for a problem that writes its inputs.
    source: Any = None
    state: Any = None


@dataclass
class Held:
    """A call's inputs, returned tensors, gradients and upstream gradient, by reference (not yet copied)."""

    args: list[Any]
    returned: list[Any]
    grads: list[torch.Tensor | None]
    upstream: list[torch.Tensor] | None


def graph_picks(n: int, n_sets: int, k: int = CHECKS_PER_ROUND) -> list[int]:
    """Up to ``k`` of the ``n`` calls a CUDA-graph round captures (call i on input set i mod ``n_sets``) to check,
    drawn from the operating system's random source, no two on one input set: two such calls would share the set's
    fresh values and, timing forward + backward, its gradients."""
    picks: list[int] = []
    for _ in range(min(k, n, n_sets)):
        left = [i for i in range(n) if all(i % n_sets != p % n_sets for p in picks)]
        picks.append(left[secrets.randbelow(len(left))])
    return picks


@dataclass
class Keeper:
    """Decides, after each timed call returns, whether it is checked; holds the copies until the round ends."""

    providers: set[str]
    backward: bool = False
    kept: list[Kept] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    # The problem writes its inputs (``writes_inputs``): a call's inputs are copied before it runs, since after it
    # they hold what it wrote. Otherwise they are copied after the call, and only for the calls kept.
    before: bool = False
    # Input set (by id) → the FreshValues that refreshes it.
    sources: dict[int, FreshValues] = field(default_factory=dict)

    def inputs_before(self, provider: str, args: list[Any]) -> list[Any] | None:
        """A copy of a call's inputs made before it runs, where the problem writes them; else None."""
        if not self.before or provider not in self.providers:
            return None
        return _copy_inputs(args)

    def after_call(
        self, provider: str, calls_in_round: int, args: list[Any], out: Any, fn: Any, before: list[Any] | None = None
    ) -> None:
        if provider not in self.providers:
            return
        if sum(k.provider == provider for k in self.kept) >= MAX_KEPT_PER_ROUND:
            return
        # The operating system's random source: nothing the candidate's process holds predicts the draw.
        if secrets.randbelow(max(1, calls_in_round)) >= CHECKS_PER_ROUND:
            return
        self.keep(provider, args, out, fn, before)

    def keep(self, provider: str, args: list[Any], out: Any, fn: Any, before: list[Any] | None = None) -> None:
        """Keep the call that just returned ``out`` (``before``: its inputs as ``inputs_before`` copied them)."""
        self.store(provider, self.hold(args, out, fn), before)

    def hold(self, args: list[Any], out: Any, fn: Any) -> Held:
        """What a check of the call that just returned needs, by reference: CUDA-graph mode holds a captured call
        this way and copies it after the replay that rewrote it."""
        if not self.backward:
            return Held(args, flatten_outputs(out), [], None)
        # Forward + backward: the wrapper's outputs that take gradients and the upstream gradient it used.
        returned, upstream = getattr(fn, "last", ([], None))
        return Held(args, list(returned), _grads(args), upstream)

    def store(self, provider: str, held: Held, before: list[Any] | None = None) -> None:
        foreign = [o for o in held.returned if foreign_tensor(o)]
        if foreign:
            # Copying it would run its own code: the result could be made there, after the timed call.
            self.kept.append(Kept(provider, [], [], problem=f"a timed call returned a {type_label(foreign[0])}"))
            return
        inputs = before if before is not None else _copy_inputs(held.args)
        outputs = [o.detach().clone() for o in held.returned if isinstance(o, torch.Tensor)]
        source = self.sources.get(id(held.args)) if before is None and not self.before else None
        state = source.last_state if source is not None else None
        if not self.backward:
            self.kept.append(Kept(provider, inputs, outputs, source=source, state=state))
            return
        grads = [g.detach().clone() if g is not None else torch.zeros(0) for g in held.grads]
        upstream = [u.clone() for u in held.upstream or []]
        self.kept.append(Kept(provider, inputs, outputs + grads, upstream, source=source, state=state))

    def take(self) -> list[Kept]:
        kept, self.kept = self.kept, []
        for k in kept:
            self.checked[k.provider] = self.checked.get(k.provider, 0) + 1
        return kept


def _copy_inputs(args: list[Any]) -> list[Any]:
    return map_tensors(args, lambda t: t.detach().clone().requires_grad_(t.requires_grad))


def writes_inputs(reference: Any, args: list[Any]) -> bool:
    """Whether the reference changes its input tensors (an optimizer step, an in-place update), run once on copies.
    A reference that fails here is taken not to (its eager baseline reports the failure)."""
    copies = clone(args)
    originals = list(iter_tensors(clone(copies)))
    try:
        with torch.no_grad():
            reference(*copies)
    except Exception:
        return False
    # Compared bit for bit on their device: NaN, fp8 and 0-d inputs included.
    return any(not same_bits(a, b, on_device=True) for a, b in zip(iter_tensors(copies), originals, strict=True))


def _grads(args: list[Any]) -> list[torch.Tensor | None]:
    """The gradients the last backward left on ``args``' leaves, in ``grad_calls.grad_leaves`` order."""
    return [t.grad for t in grad_calls.grad_leaves(args)]


def reference_outputs(reference: Any, kept: Kept, backward: bool) -> list[torch.Tensor]:
    """The reference's outputs on a kept call's inputs (and, forward + backward, its gradients for the same
    upstream gradient), in the order ``Keeper.keep`` stores the candidate's."""
    if not backward:
        with torch.no_grad():
            out = reference(*kept.inputs)
        return [o.detach() for o in flatten_outputs(out) if isinstance(o, torch.Tensor)]
    if not kept.upstream:  # the candidate's call had no output that takes gradients
        outs = [o for o in flatten_outputs(reference(*kept.inputs)) if isinstance(o, torch.Tensor)]
        return [o.detach() for o in outs if o.requires_grad]
    out, grads, _ = grad_calls.backward(reference, kept.inputs, [], kept.upstream, reference=False)
    outs = [o.detach() for o in out if isinstance(o, torch.Tensor) and o.requires_grad]
    return outs + [g if g is not None else torch.zeros(0) for g in grads or []]


def _wide(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return t.detach().double().requires_grad_(t.requires_grad)


def widened(kept: Kept) -> Kept:
    """A kept call's values in float64 (copies: made before the reference runs, which may write its inputs)."""
    return Kept(
        kept.provider,
        [map_tensors(a, _wide) for a in kept.inputs],
        [],
        [u.double() if u.is_floating_point() else u for u in kept.upstream] if kept.upstream else kept.upstream,
    )


def reference_errors(reference: Any, wide: Kept, backward: bool, want: list[torch.Tensor]) -> list[float]:
    """Per output of ``want`` (the reference on a kept call's values, in their own dtype), its relative norm
    distance from the reference run on the same values in float64 (``wide``, from ``widened``): PyTorch's own error
    at this size. A reference module runs as a float64 copy (its weights in their own dtype would refuse float64
    values, or round them back); the module itself is left as it is. Empty when the reference does not run in
    float64 (a module that cannot be copied, a copy that does not fit) or gives other outputs there. An error past
    ``compare.TRUSTED_TORCH_ERROR`` counts as 0, so the limit does not widen for it: a float64 run that computes
    something else (a ``.view()`` between dtypes), or an allowance of several times it that would admit a mostly
    wrong output, is where validate gives no verdict either."""
    try:
        exact_reference = copy.deepcopy(reference).double() if isinstance(reference, torch.nn.Module) else reference
        exact = reference_outputs(exact_reference, wide, backward)
    except Exception:
        return []
    if len(exact) != len(want):
        return []
    errors = []
    for w, e in zip(want, exact, strict=True):
        if not w.is_floating_point() or tuple(e.shape) != tuple(w.shape) or not e.is_floating_point():
            errors.append(0.0)
            continue
        _, err_sq, norm_sq = _float_distance(w, e)
        own = math.sqrt(err_sq / norm_sq) if norm_sq > 0 else 0.0
        errors.append(own if own <= compare.TRUSTED_TORCH_ERROR else 0.0)
    return errors


def _float_distance(got: torch.Tensor, want: torch.Tensor) -> tuple[int, float, float]:
    """(NaN/Inf positions that disagree, squared distance and squared norm of ``want`` over the positions finite
    in both), in float64 chunks so a large output needs no output-sized float64 temporaries."""
    g_all, w_all = got.detach().reshape(-1), want.detach().reshape(-1)
    special, err_sq, norm_sq = 0, 0.0, 0.0
    for lo in range(0, w_all.numel(), compare.CHUNK):
        gd, wd = g_all[lo : lo + compare.CHUNK].double(), w_all[lo : lo + compare.CHUNK].double()
        g_fin, w_fin = torch.isfinite(gd), torch.isfinite(wd)
        both_nan = gd.isnan() & wd.isnan()
        special += int((g_fin != w_fin).sum()) + int((~g_fin & ~w_fin & ~both_nan & (gd != wd)).sum())
        both = g_fin & w_fin
        err_sq += float(((gd - wd)[both] ** 2).sum())
        norm_sq += float((wd[both] ** 2).sum())
    return special, err_sq, norm_sq


def compare_outputs(
    got: list[torch.Tensor],
    want: list[torch.Tensor],
    overrides: dict[str, Any] | None,
    scale: float,
    margins: list[float] | None = None,
    own_errors: list[float] | None = None,
) -> str | None:
    """None when ``got`` is the reference's ``want`` up to what a correct kernel may differ by (module doc);
    otherwise what differs, naming the output. ``margins`` collects each floating output's relative norm
    distance as a fraction of its limit (how close a passing kernel came); ``own_errors``, per output, the
    reference's own error at this size (``reference_errors``)."""
    if len(got) != len(want):
        return f"{len(got)} tensor outputs where the reference gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        what = f"output {i}" if len(want) > 1 else "the output"
        if tuple(g.shape) != tuple(w.shape):
            return f"{what} has shape {tuple(g.shape)} where the reference's is {tuple(w.shape)}"
        n = w.numel()
        if n == 0:
            continue
        allowed = int(MISMATCH_FRACTION * n)  # none in outputs under a thousand elements
        if not (w.is_floating_point() or w.is_complex()):
            wrong = int((g.to(w.dtype) != w).sum())
            if wrong > allowed:
                return f"{what}: {wrong} of {n} values differ from the reference's"
            continue
        if w.is_complex():
            g, w = torch.view_as_real(g.to(w.dtype)), torch.view_as_real(w)
        special, err_sq, norm_sq = _float_distance(g, w)
        if special > allowed:
            return f"{what}: {special} of {n} NaN/Inf positions differ from the reference's"
        err, norm = math.sqrt(err_sq), math.sqrt(norm_sq)
        tol = compare.tolerance_for(w.dtype, {k: tuple(v) for k, v in (overrides or {}).items()})
        own = own_errors[i] if own_errors and i < len(own_errors) else 0.0
        limit = CHECK_FACTOR * max(tol.norm_floor, scale, own)
        rel = err / norm if norm > 0 else (0.0 if err == 0 else math.inf)
        if n < compare.FEW_ELEMENTS:
            # A few values: their norm is too noisy to hold to the limit (compare.FEW_ELEMENTS). Each is held to it
            # with the dtype's atol beside it, as validate's elementwise bound does, and the whole to a gross error.
            gd, wd = g.double(), w.double()
            fin = torch.isfinite(gd) & torch.isfinite(wd)
            bound = CHECK_FACTOR * (tol.atol + max(tol.rtol, scale, own) * wd.abs())
            over = int((fin & ((gd - wd).abs() > bound)).sum())
            if over:
                return (
                    f"{what}: {over} of {n} values further from the reference on the same inputs than a correct "
                    f"kernel stays ({CHECK_FACTOR:g}× the {w.dtype} atol plus the largest of its rtol, the errors "
                    "validate measured and the reference's own at this size, times the value)"
                )
            limit = max(limit, compare.GROSS_NORM_ERROR)
        if margins is not None:
            margins.append(rel / limit)
        if rel > limit:
            return (
                f"{what}: relative norm distance {rel:.3g} from the reference on the same inputs, over the "
                f"{limit:.3g} a correct kernel stays within ({CHECK_FACTOR:g}× the largest of the {w.dtype} norm "
                f"floor, the errors validate measured and the reference's own at this size)"
            )
    return None
