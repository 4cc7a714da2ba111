"""The two halves of a validation, each run in its own child.

``reference`` loads the reference, builds the cases (seeds, derived shapes), and computes the expected
outputs in the native dtype and in float64. Its files are read by the parent and deleted before the
candidate runs, so the candidate's process can never see an expected value.

``candidate`` receives only the inputs, calls the candidate under the launch/op recorder with fresh
allocations poisoned, twice per case for determinism, and sends back what it produced.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from dataclasses import replace
from typing import Any

import torch

from mcp_server.engine import compare
from mcp_server.engine.interp import configs as autotune_configs
from mcp_server.engine.interp import races as interp_races
from mcp_server.engine.jobs import (
    calls,
    common,
    derive,
    grad_calls,
    integrity,
    launch_specs,
    recorder,
    timed_check,
    trace,
)
from mcp_server.engine.models import FLOAT64_DIFFERS, NATIVE_PRECISION
from mcp_server.engine.runner.child import (
    JobContext,
    UsageProblem,
    classify_exception,
    is_sticky_cuda_error,
    load_module,
    resolve,
)


def _device(params: dict[str, Any]) -> str:
    return params.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")


def _load_target(spec: dict[str, str], ctx: JobContext) -> tuple[Any, Any]:
    module = load_module(spec["path"], ctx.user_files)
    return module, resolve(module, spec["name"])


def _is_module_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)


def _init_inputs(module: Any) -> list[Any]:
    if hasattr(module, "get_init_inputs"):
        init = module.get_init_inputs()
        init = list(init) if isinstance(init, list | tuple) else [init]
        common.check_plain(init, "get_init_inputs()")
        return init
    return []


def _build(cls: type, init: list[Any], params: dict[str, Any]) -> torch.nn.Module:
    """The model as its constructor builds it from the run's construction seed. The seed is neither an input seed
    nor the one that moves the weights (the parent draws both from the run's seed through a hash), and the global
    generator's state is put back afterwards, so code run at construction learns neither the inputs nor the weights
    the model will be given."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(params["build_seed"])
        return cls(*init)


def _move_weights(model: torch.nn.Module, params: dict[str, Any]) -> None:
    """Move a model's floating parameters off their initial values (each by about a tenth of its size, and off
    zero), and its running statistics (BatchNorm's mean and variance) off zero and one: a LayerNorm's weight of ones
    and bias of zeros, or an eval-mode BatchNorm's statistics, would let a kernel that never reads them pass, and a
    kernel that keeps a copy of the weights it was built with, and ignores those it is given, read the same values."""
    moved = torch.Generator().manual_seed(params["weights_seed"])
    with torch.no_grad():
        for param in model.parameters():
            # Not a frozen one (requires_grad=False): that is a constant of the model's definition, such as a
            # causal mask of ones and zeros, which moving would turn into another problem.
            if param.is_floating_point() and param.numel() and param.requires_grad:
                noise = torch.randn(param.shape, generator=moved).to(param.dtype)
                param.add_(0.1 * (param.abs() + 0.1) * noise.to(param.device))
        for part in model.modules():
            stats = [getattr(part, "running_mean", None), getattr(part, "running_var", None)]
            if all(isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() for t in stats):
                mean, var = stats
                mean.add_(0.2 * torch.randn(mean.shape, generator=moved).to(mean))
                var.mul_(torch.exp(0.2 * torch.randn(var.shape, generator=moved)).to(var))


EVAL_CASE = "mode: eval"
# The derived sizes that also run in eval mode (where it computes otherwise): a non-power-of-2 tail and the large.
EVAL_SIZES = ("size−1", "large:")
EVAL_WHY = (
    "the model in eval mode (model.eval()), as for inference: BatchNorm normalizes with its running statistics and "
    "leaves them, Dropout passes values through"
)


def _set_mode(
    model: torch.nn.Module, mode: str | None, flags: dict[torch.nn.Module, bool] | None = None
) -> dict[torch.nn.Module, bool]:
    """Put back each submodule's own training flag (``flags``: as a previous call found them), then switch the whole
    model to eval mode where ``mode`` says so. Returns the flags as they were."""
    found = flags if flags is not None else {m: m.training for m in model.modules()}
    for part, training in found.items():
        part.training = training
    if mode == "eval":
        model.eval()
    return found


def _model_bytes(cls: type, init: list[Any]) -> float:
    """The bytes of the parameters and buffers of the model ``cls(*init)`` would build, counted on the meta device
    (no memory, no values); infinite where it cannot be built there."""
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            model = cls(*init)
        tensors = [*model.parameters(), *model.buffers()]
        return float(sum(t.numel() * t.element_size() for t in tensors))
    except Exception:
        return math.inf


def _same_in_both_modes(evaluated: dict[str, Any], trained: dict[str, Any] | None) -> bool:
    """Whether the reference's eval-mode case came out as its training-mode run on the same inputs did: the same
    outputs, bit for bit, and no buffer updated by either."""
    if trained is None or evaluated.get("buffers") or trained.get("buffers"):
        return False
    ours, theirs = evaluated.get("out") or [], trained.get("out") or []
    return len(ours) == len(theirs) and all(
        isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and common.same_bits(a, b)
        for a, b in zip(ours, theirs, strict=True)
    )


def _random_modules(model: torch.nn.Module) -> list[str]:
    """The reference model's parts that draw random numbers on every call: Dropout with p > 0 in training mode."""
    return [
        f"{name or 'the model'} ({type(part).__name__} p={part.p:g})"
        for name, part in model.named_modules()
        if isinstance(part, torch.nn.modules.dropout._DropoutNd) and part.p > 0 and part.training
    ]


def _tensor_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A model's state_dict as the tensors it names (a module's extra state, or a key that is not a string, is not a
    weight to copy)."""
    return {k: v.detach() for k, v in model.state_dict().items() if isinstance(k, str) and isinstance(v, torch.Tensor)}


def _instantiate(cls: type, init: list[Any], params: dict[str, Any], device: str) -> torch.nn.Module:
    """The reference's model: built (``_build``), its weights moved (``_move_weights``), on ``device``."""
    model = _build(cls, init, params)
    _move_weights(model, params)
    return model.to(device)


def _upcast(tree: Any) -> Any:
    return common.map_tensors(tree, lambda t: t.detach().double() if t.is_floating_point() else t.detach())


class Disagreement(str):
    """The float64 run of the reference ran and is far from its run in its own dtype: the text (opening with
    ``FLOAT64_DIFFERS``), with the output and how far apart, in relative norm."""

    def __new__(cls, text: str, output: int, rel_norm: float) -> Disagreement:
        made = super().__new__(cls, text)
        made.output, made.rel_norm = output, rel_norm
        return made


def precision_fields(cause: str, how: str) -> dict[str, Any]:
    """The reference job's account of why float64 could not be the truth (validate's ``PrecisionCause``)."""
    ran = isinstance(cause, Disagreement)
    return {
        "precision_cause": str(cause),
        "precision_estimate": how,
        "precision_float64_ran": ran,
        "precision_output": cause.output if ran else None,
        "precision_rel_norm": cause.rel_norm if ran else None,
    }


def _disagreement(out: list[Any], out64: list[Any], limit: float = compare.TRUSTED_TORCH_ERROR) -> str:
    """Why the float64 outputs cannot be the truth for ``out`` (the reference in its own dtype), or "": an
    output whose float64 run is further from it, in relative norm over the elements finite in both, than any
    rounding explains, or non-finite where the own-dtype run is finite at more than 1 % of the elements (a
    reference that computes something else in float64, say through a .view() between dtypes, would otherwise
    lend the comparison an allowance that admits anything). In chunks, as the comparison itself runs."""
    for i, (o, o64) in enumerate(zip(out, out64, strict=False)):
        if not (isinstance(o, torch.Tensor) and isinstance(o64, torch.Tensor)) or not o.is_floating_point():
            continue
        if o.shape != o64.shape:
            return f"output {i} has shape {tuple(o64.shape)} in float64 and {tuple(o.shape)} in its own dtype"
        own, wide = o.detach().reshape(-1), o64.detach().reshape(-1)
        chunks = [(lo, min(lo + compare.CHUNK, own.numel())) for lo in range(0, own.numel(), compare.CHUNK)]

        def pair(lo: int, hi: int, own: torch.Tensor = own, wide: torch.Tensor = wide) -> tuple[Any, Any, Any]:
            a, b = own[lo:hi].to(wide.device, torch.float64), wide[lo:hi].double()
            return a, b, torch.isfinite(a) & torch.isfinite(b)

        lost, peak = 0, 0.0
        for lo, hi in chunks:
            a, b, both = pair(lo, hi)
            lost += int((torch.isfinite(a) & ~torch.isfinite(b)).sum())
            if both.any():
                peak = max(peak, float(a[both].abs().max()), float(b[both].abs().max()))
        gap = norm = 0.0
        if peak > 0:  # scaled first: squares of values near float64's ends would round to 0 or infinity
            for lo, hi in chunks:
                a, b, both = pair(lo, hi)
                norm += float(((b[both] / peak) ** 2).sum())
                gap += float((((a - b)[both] / peak) ** 2).sum())
        far = math.sqrt(gap / norm) if norm > 0 else (math.inf if gap > 0 else 0.0)
        if far > limit or lost > max(1, own.numel() // 100):
            return Disagreement(
                f"{FLOAT64_DIFFERS} on output {i} (relative norm "
                f"{far:.3g}, {lost} values finite only in its own dtype), more than rounding explains: it "
                "computes something else in float64, or its own dtype loses the answer (an intermediate that "
                "overflows)",
                i,
                far,
            )
    return ""


# How far a second run of the reference in its own dtype may be from the first for that dtype to count as
# stable: its allowance (k times that) then stays within what the comparison trusts.
STABLE = compare.TRUSTED_TORCH_ERROR / compare.TORCH_ERROR_FACTOR


def _buffers(model: torch.nn.Module, prefix: str = "", seen: set[int] | None = None) -> dict[str, torch.Tensor]:
    """A module's buffers by name (BatchNorm's running statistics and its batch count, say), read from the
    modules' own tables: a module's named_buffers(), named_modules() or attribute lookup may be its own code."""
    seen = set() if seen is None else seen
    if id(model) in seen:
        return {}
    seen.add(id(model))
    found: dict[str, torch.Tensor] = {}
    for name, value in (object.__getattribute__(model, "_buffers") or {}).items():
        if isinstance(value, torch.Tensor):
            found[prefix + name] = value
    for name, child in (object.__getattribute__(model, "_modules") or {}).items():
        if isinstance(child, torch.nn.Module):
            found.update(_buffers(child, f"{prefix}{name}.", seen))
    return found


def _float64_pass(
    call: Any,
    kernelbench: bool,
    pre: list[Any],
    out: list[Any],
    device: str,
    grad_out: Any,
    backward: bool,
    starts: dict[str, torch.Tensor],
) -> tuple[Any, Any, str, str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """The reference in float64 (on the device, else the CPU): (outputs, grads, where, why not, buffers), where
    "why not" comes with outputs when they are further from ``out`` (the own-dtype result) than rounding explains.

    ``starts``: the values the call found in the buffers it updated. The float64 copy starts from them, and
    ``buffers`` holds what it left in each after its call and after a second call on the same inputs (the truth
    for the candidate's updates)."""
    causes: list[str] = []
    for where in dict.fromkeys((device, "cpu")):
        try:
            args64 = _upcast(common.to_device(pre, where))
            if kernelbench:
                call64 = copy.deepcopy(call).to(where).double()
                own = _buffers(call64)
                with torch.no_grad():
                    for n, b in starts.items():
                        own[n].copy_(b)
                params64 = list(call64.parameters()) if backward else []
            else:
                call64, params64 = call, []
            grads64 = None
            if backward and grad_out is not None:
                args64 = common.map_tensors(args64, lambda t: t.requires_grad_(True) if t.is_floating_point() else t)
                out64, grads64, _ = grad_calls.backward(
                    call64, args64, params64, [g.to(where).double() for g in grad_out]
                )
            else:
                with torch.no_grad():
                    out64 = grad_calls.plain_outputs(call64(*args64), "the reference in float64")
        except UsageProblem:
            raise
        except Exception as exc:
            if is_sticky_cuda_error(exc):
                raise
            causes.append(
                f"on {where} it raised {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            )
            continue
        low = sorted(
            {str(o.dtype).replace("torch.", "") for o in out64 if o.is_floating_point() and o.dtype != torch.float64}
        )
        if low:
            causes.append(
                f"on {where} its float64 copy still returned {'/'.join(low)} outputs, so part of it computes in "
                "lower precision (e.g. submodules reached through a closure or a global, which .double() on a "
                "copy of the model misses, or explicit casts)"
            )
            continue
        buffers64: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        if kernelbench and starts:
            own = _buffers(call64)
            once = {n: own[n].detach().to("cpu", copy=True) for n in starts}
            # And after a second call on the same inputs (the candidate's repeat is judged on it too).
            with torch.no_grad():
                call64(*args64)
            own = _buffers(call64)
            buffers64 = {n: (once[n], own[n].detach().to("cpu", copy=True)) for n in starts}
        return out64, grads64, where, _disagreement(out, out64), buffers64
    return None, None, device, "; ".join(causes), {}


def _nudge(t: torch.Tensor) -> torch.Tensor:
    """Each finite nonzero element moved by one unit in the last place, up or down at random. fp8 inputs stay
    as they are: one of their steps is a change of several percent, not a rounding."""
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}.get(t.element_size())
    if ints is None or not t.is_floating_point():
        return t
    step = torch.randint(0, 2, t.shape, device=t.device, dtype=ints) * 2 - 1
    moved = (t.contiguous().view(ints) + step).view(t.dtype)
    keep = (t == 0) | ~torch.isfinite(moved) | ~torch.isfinite(t)
    return torch.where(keep, t, moved)


def _second_opinion(
    call: Any, kernelbench: bool, pre: list[Any], out: list[torch.Tensor], device: str, seed: int
) -> tuple[list[torch.Tensor] | None, str]:
    """An estimate of PyTorch's own error when float64 is out of reach: another run of the reference in its
    own dtype that rounds differently (on the CPU when the device is a GPU, else on nudged inputs)."""
    if device.startswith("cuda"):
        try:
            call_cpu = copy.deepcopy(call).to("cpu") if kernelbench else call
            torch.manual_seed(seed + 7919)
            with torch.no_grad():
                other = grad_calls.plain_outputs(call_cpu(*common.to_device(pre, "cpu")), "the reference on the CPU")
            if [list(o.shape) for o in other] == [list(o.shape) for o in out]:
                return [o.detach().double() for o in other], "the reference in its own dtype on the CPU"
        except UsageProblem:
            raise
        except Exception as exc:
            if is_sticky_cuda_error(exc):
                raise
    try:
        nudged = common.map_tensors(common.to_device(pre, device), _nudge)
        torch.manual_seed(seed + 7919)
        with torch.no_grad():
            other = grad_calls.plain_outputs(call(*nudged), "the reference")
        if [list(o.shape) for o in other] == [list(o.shape) for o in out]:
            return [o.detach().double() for o in other], "the reference on inputs nudged by one unit in the last place"
    except UsageProblem:
        raise
    except Exception as exc:
        if is_sticky_cuda_error(exc):
            raise
    return None, "nothing (no second run of the reference succeeded)"


def reference(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    device = _device(params)
    module, target = _load_target(params["reference"], ctx)
    kernelbench = _is_module_class(target)
    if not kernelbench and not callable(target):
        raise UsageProblem(
            f"`{params['reference']['name']}` in {params['reference']['path']} is a "
            f"{type(target).__name__}, not a callable. Point at a function or an nn.Module class."
        )
    inputs_module = module
    if params.get("inputs_from"):
        inputs_module = load_module(params["inputs_from"], ctx.user_files)
    seeds: list[int] = params["seeds"]
    init = _init_inputs(module) if kernelbench else []
    base_model = _instantiate(target, init, params, device) if kernelbench else None

    tolerances = timed_check.module_tolerances(module)

    saved: dict[str, Any] = {"cases": {}, "state": None, "init": init}
    model_inits: dict[int, list[Any]] = {}
    if base_model is not None:
        saved["state"] = {k: v.to("cpu") for k, v in _tensor_state(base_model).items()}
    report: list[dict[str, Any]] = []
    precision = "float64"
    precision_causes: dict[str, Any] = {}
    skip: dict[str, str] = dict(params.get("skip") or {})

    def run_case(
        key: str,
        name: str,
        seed: int,
        args: list[Any],
        derived: str | None,
        model: torch.nn.Module | None = None,
        expect: Any = None,
        layout: str | None = None,
    ) -> list[list[int]] | None:
        """Run one case; return its output shapes (None when a derived variant was rejected)."""
        nonlocal precision
        if derived is not None and key in skip:
            # An earlier attempt lost the CUDA context on this case (a device-side assert, say).
            report.append(
                {"key": key, "name": name, "seed": seed, "derived": derived, "status": "rejected", "reason": skip[key]}
            )
            return None
        model = model if model is not None else base_model
        call = model if kernelbench else target
        model_params = list(model.parameters()) if (kernelbench and params.get("backward")) else []
        ctx.mark(f"reference case {key}")
        entry: dict[str, Any] = {"key": key, "name": name, "seed": seed, "derived": derived}
        if layout:
            entry["layout"] = layout
        args = common.to_device(args, device)
        pre = common.clone(args)
        found = {n: b.detach().clone() for n, b in _buffers(model).items()} if kernelbench else {}
        try:
            torch.manual_seed(seed + 7919)
            with common.recording() as record:
                if params.get("backward"):
                    out, grads, grad_out = grad_calls.backward(call, grad_calls.with_grad(args), model_params, None)
                    post = args
                else:
                    post = derive.relayout(common.clone(args), layout)
                    with torch.no_grad():
                        out = grad_calls.plain_outputs(call(*post), "the reference")
                common.sync(device)
        except UsageProblem:
            raise
        except BaseException as exc:
            if derived is None:
                failure = classify_exception(exc, ctx.user_files)
                raise UsageProblem(
                    f"The reference raised on case {name!r} (seed {seed}): {failure.message}"
                    + (f" at {failure.where}" if failure.where else "")
                    + ". Fix the reference or its inputs; a reference that fails cannot judge a candidate."
                ) from None
            if is_sticky_cuda_error(exc):
                raise
            entry.update(status="rejected", reason=f"{type(exc).__name__}: {str(exc)[:200]}")
            report.append(entry)
            return None
        shapes = [list(o.shape) for o in out]
        if expect is not None and shapes != expect:
            # Broadcasting made the substitution change what the reference computes: not the same problem.
            entry.update(
                status="rejected",
                reason=f"the reference's output shapes {shapes} did not follow the substitution (expected {expect})",
            )
            report.append(entry)
            return None
        if not params.get("backward"):
            grads = grad_out = None
        left = _buffers(model) if kernelbench else {}
        # The buffers the call updated: their values before it (the candidate starts from them too), after it, and
        # after the float64 copy's call from the same values.
        updated = {n: b for n, b in found.items() if n in left and not common.same_bits(left[n], b, on_device=True)}
        buffers = {
            n: {"before": b.to("cpu"), "after": left[n].detach().to("cpu", copy=True), "after64": None}
            for n, b in updated.items()
        }
        out64, grads64, where64, cause, buffers64 = _float64_pass(
            call, kernelbench, pre, out, device, grad_out, bool(params.get("backward")), updated
        )
        for n, (once, twice) in buffers64.items():
            buffers[n].update(after64=once, after64_twice=twice)
        other = alt64 = alt_grads64 = None
        if out64 is not None and cause:
            # Far from its own-dtype run: either the float64 run computes something else (a .view() between
            # dtypes), or the own dtype loses the answer (cancellation, or an intermediate that overflows, which
            # loses it the same way on every run). Only a reference that agrees with itself in its own dtype is
            # judged against that dtype; otherwise float64 stays the truth, and the comparison withholds a
            # verdict on an output that far off. The float64 run is kept as a second truth (``alt64``): a
            # candidate that reaches it within the dtype's tolerance has the answer the own dtype lost.
            other, how = _second_opinion(call, kernelbench, pre, out, device, seed)
            if other is not None and not _disagreement(out, other, STABLE):
                alt64, alt_grads64 = out64, grads64
                out64 = grads64 = None
            else:
                other, cause = None, ""
        if out64 is not None:
            if where64 != device and not precision.startswith("native"):
                precision = "float64 (on the CPU)"
        else:
            if other is None:
                other, how = _second_opinion(call, kernelbench, pre, out, device, seed)
            out64 = other
            precision = NATIVE_PRECISION.format(cause=cause, how=how)
            if not precision_causes:
                precision_causes.update(precision_fields(cause, how))
        entry.update(
            status="ok",
            outputs=[
                {"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", ""), "device": str(o.device)}
                for o in out
            ],
            aliases=common.aliases(out, post),
            overlaps=common.overlapping_outputs(out),
            **common.nesting_fields(out),
            record=record.as_json(),
            torch_work=record.torch_work,
            digests=[common.tensor_digest(t) if isinstance(t, torch.Tensor) else None for t in pre],
        )
        saved["cases"][key] = {
            "inputs": common.to_cpu(pre),
            "out": common.to_cpu(out),
            "out64": common.to_cpu(out64) if out64 is not None else None,
            "post": common.to_cpu(post),
            "grad_out": common.to_cpu(grad_out) if grad_out is not None else None,
            "grads": common.to_cpu(grads) if grads is not None else None,
            "grads64": common.to_cpu(grads64) if grads64 is not None else None,
            "alt64": common.to_cpu(alt64) if alt64 is not None else None,
            "alt_grads64": common.to_cpu(alt_grads64) if alt_grads64 is not None else None,
        }
        if found:
            # Every buffer as the call found it: the candidate's start from the same values, whatever calls it made
            # before (a repeat for determinism updates a BatchNorm's statistics again).
            saved["cases"][key]["buffers_before"] = {n: b.to("cpu") for n, b in found.items()}
        if buffers:
            saved["cases"][key]["buffers"] = buffers
            entry["buffers_updated"] = sorted(buffers)
        if model is not base_model:
            saved["cases"][key]["init"] = model_inits.get(id(model))
            saved["cases"][key]["state"] = {k: v.to("cpu") for k, v in _tensor_state(model).items()}
        report.append(entry)
        return shapes

    derivable = False
    base_args: list[Any] | None = None
    base_shapes: list[list[int]] | None = None
    base_key = ""
    for seed in seeds:
        torch.manual_seed(seed)
        cases, derivable = common.resolve_cases(inputs_module, params.get("inputs"), ctx.user_files, device)
        if params.get("transform"):
            for case in cases:
                case.args = common.apply_transform(case.args, params["transform"])
        for case in cases:
            shapes = run_case(f"{case.name}#{seed}", case.name, seed, case.args, None)
            if base_args is None:
                base_args, base_shapes, base_key = case.args, shapes, f"{case.name}#{seed}"

    def run_in_eval(key: str, name: str, args: list[Any], why: str, model: Any, expect: Any) -> bool:
        """Run a case with the model switched to eval mode (each submodule's own flag put back after); True when
        it ran and is kept."""
        target_model = model if model is not None else base_model
        flags = _set_mode(target_model, "eval")
        try:
            ok = run_case(key, name, seeds[0], args, why, model, expect) is not None
        finally:
            _set_mode(target_model, None, flags)
        if ok:
            saved["cases"][key]["mode"] = "eval"
        return ok

    # A module in training mode is also used for inference: its eval mode computes otherwise (BatchNorm from its
    # running statistics, Dropout as the identity), and a kernel written for one mode only is wrong there.
    eval_matters = False
    if kernelbench and base_args is not None and any(m.training for m in base_model.modules()):  # type: ignore[union-attr]
        key = f"mode eval#{seeds[0]}"
        eval_matters = run_in_eval(key, EVAL_CASE, base_args, EVAL_WHY, None, base_shapes)
        if eval_matters and _same_in_both_modes(saved["cases"][key], saved["cases"].get(base_key)):
            # Nothing in the model depends on the mode: the case would repeat the base case.
            del saved["cases"][key]
            report[:] = [r for r in report if r.get("key") != key]
            eval_matters = False

    sizes: dict[str, list[str]] = {"ran": [], "rejected": [], "over_budget": [], "budget_mib": []}
    derive_on = params.get("derive", True) and base_args is not None

    def run_variant(variant: derive.Variant) -> bool:
        """Run one derived size; True when the reference accepted it."""
        key = f"{variant.label}#{seeds[0]}"
        args = derive.apply_variant(base_args, variant)
        model = None
        if kernelbench:
            rebuilt = variant
            if (
                not variant.ints
                and _model_bytes(target, derive.apply_variant(init, replace(variant, ints=True))) <= budget
            ):
                # A large size the model's constructor also takes, where the model at that size fits the budget
                # (LayerNorm's 4097 features, not Linear's 2^20 × 4096 weight): rebuilt there, as at other sizes.
                rebuilt = replace(variant, ints=True)
            init_v = derive.apply_variant(init, rebuilt)
            if init_v != init:
                try:
                    model = _instantiate(target, init_v, params, device)
                except Exception as exc:
                    if is_sticky_cuda_error(exc):
                        raise
                    report.append(
                        {
                            "key": key,
                            "name": variant.label,
                            "seed": seeds[0],
                            "derived": variant.why,
                            "status": "rejected",
                            "reason": f"Model({init_v}) raised {type(exc).__name__}: {exc}",
                        }
                    )
                    sizes["rejected"].append(f"{variant.old}→{variant.new}")
                    return False
                model_inits[id(model)] = init_v
        expect = [[variant.new if d == variant.old else d for d in shape] for shape in base_shapes or []]
        ok = run_case(key, variant.label, seeds[0], args, variant.why, model, expect) is not None
        if ok and eval_matters and variant.why.startswith(EVAL_SIZES):
            # Eval mode at a size of a kernel's tail or past its block too, not only at the problem's own.
            label = f"{variant.label}, {EVAL_CASE}"
            run_in_eval(f"{label}#{seeds[0]}", label, args, f"{variant.why}; {EVAL_WHY}", model, expect)
        sizes["ran" if ok else "rejected"].append(f"{variant.old}→{variant.new}")
        return ok

    if derive_on and derivable:
        torch.manual_seed(seeds[0] + 1)
        budget = derive.budget_bytes(base_args, device)
        model_sizes = (
            derive.model_only_sizes(
                init, base_args, base_shapes or [], [list(t.shape) for t in _tensor_state(base_model).values()]
            )
            if kernelbench and base_model is not None
            else []
        )
        plan, over = derive.plan_variants(base_args, int(params.get("max_derived", 6)), budget, model_sizes)
        sizes["over_budget"] = [f"{v.old}→{v.new}" for v in over]
        sizes["budget_mib"] = [f"{budget / derive.MIB:.0f}"]
        accepted: dict[int, bool] = {}
        tried: dict[int, set[int]] = {}
        for variant in plan:
            ok = run_variant(variant)
            accepted[variant.old] = accepted.get(variant.old, False) or ok
            tried.setdefault(variant.old, set()).add(variant.new)
        for old, ok in accepted.items():
            if ok:
                continue
            # The reference rejected every variant of this size: try multiples it may accept.
            found = 0
            for variant in derive.plan_fallbacks(old, tried[old], base_args, budget):
                found += run_variant(variant)
                if found >= 2:
                    break

    if derive_on and params.get("layouts", True) and not params.get("backward"):
        for kind, why in derive.LAYOUTS.items():
            if derive.layout_changes(base_args, kind):
                run_case(
                    f"layout {kind}#{seeds[0]}", f"layout: {kind}", seeds[0], base_args, why, None, base_shapes, kind
                )

    torch.save(saved, ctx.path("reference.pt"))
    return {
        "cases": report,
        "kernelbench": kernelbench,
        "precision": precision,
        "tolerances": tolerances,
        "device": device,
        "derivable": derivable,
        "random_modules": _random_modules(base_model) if base_model is not None else [],
        "sizes": sizes,
        **precision_causes,
    }


# About 25 ms on a GPU at 2 GHz: far longer than it takes the host to return from the call and enqueue a read.
SIDE_STREAM_DELAY_CYCLES = 50_000_000


def _start_buffers(
    model: torch.nn.Module, start: dict[str, torch.Tensor], updated: list[str], entry: dict[str, Any]
) -> list[str]:
    """Write the values the reference's buffers held before its call into the candidate's buffers of the same names,
    shapes and dtypes; return those names. Those the reference's call ``updated`` that the candidate lacks go in
    ``entry["buffers_missing"]``."""
    own = _buffers(model)
    kept = [n for n, t in start.items() if n in own and own[n].shape == t.shape and own[n].dtype == t.dtype]
    with torch.no_grad():
        for n in kept:
            own[n].copy_(start[n])
    missing = sorted(set(updated) - set(kept))
    if missing:
        entry["buffers_missing"] = missing
    return kept


def _unmatched_weights(own: dict[str, Any], state: dict[str, Any], most: int = 6) -> dict[str, list[str]]:
    """Why a candidate module was not given the reference's weights: the state_dict entries only the reference has,
    only the candidate has, and those both have in other shapes (at most ``most`` names each)."""
    shared = set(own) & set(state)
    return {
        "reference_only": sorted(set(state) - shared)[:most],
        "candidate_only": sorted(set(own) - shared)[:most],
        "reshaped": [
            f"{k} {list(own[k].shape)} (the reference's {list(state[k].shape)})"
            for k in sorted(shared)
            if own[k].shape != state[k].shape
        ][:most],
    }


class _SideStreams(recorder.LaunchStreams):
    """Installed as ``recorder.LAUNCH_STREAMS`` in the candidate's child on a GPU.

    The launch hook notes the current stream just before each Triton launch. On a stream other than the
    caller's, the first launch of an armed call is preceded by a sleep on that stream: a kernel there now
    finishes long after the call returns, so a caller's stream that does not wait for it reads the outputs
    before they are written, every time (without the sleep a small kernel usually wins the race).
    """

    def __init__(self) -> None:
        super().__init__()
        self.caller: tuple[int, int] | None = None
        self.delay = False

    @classmethod
    def install(cls, device: str) -> _SideStreams:
        side = cls()
        if device.startswith("cuda"):
            recorder.LAUNCH_STREAMS = side
        return side

    def arm(self, delay: bool) -> None:
        self.clear()
        if recorder.LAUNCH_STREAMS is self:
            self.caller = self.key_of(torch.cuda.current_stream())
            self.delay = delay

    def disarm(self) -> None:
        self.delay = False

    def added(self, key: tuple[int, int]) -> None:
        if self.delay and self.caller is not None and key != self.caller:
            with trace.own("side-stream delay"):
                torch.cuda._sleep(SIDE_STREAM_DELAY_CYCLES)


def _copy(t: torch.Tensor) -> torch.Tensor:
    return common.plain(t.detach().to("cpu", copy=True))


def _held(out: list[Any]) -> list[Any]:
    """What a call's caller holds once it has returned and the device is idle, copied then: what is judged, so that
    work the candidate left running (a thread of its own, a timer) cannot complete it before the judge looks. A
    tensor subclass other than a Parameter is judged as what it is, not a tensor (common.foreign_tensor)."""
    return [_copy(o) if isinstance(o, torch.Tensor) and not common.foreign_tensor(o) else None for o in out]


def _consumer_read(out: list[Any]) -> list[Any]:
    """Copies of the GPU outputs made on the caller's current stream, as the caller's next op would."""
    return [o.detach().clone() if isinstance(o, torch.Tensor) and o.is_cuda else None for o in out]


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _raced(out: list[Any], early: list[Any]) -> list[list[int]]:
    """[output, elements that changed after the early read, numel] for outputs the early read missed."""
    found = []
    for i, (o, e) in enumerate(zip(out, early, strict=False)):
        if e is None or not isinstance(o, torch.Tensor):
            continue
        if o.dtype != torch.bool and o.element_size() in _SAME_SIZE_INT:
            bits = _SAME_SIZE_INT[o.element_size()]
            if torch.equal(o.detach().view(bits), e.view(bits)):
                continue
        same = o.detach() == e
        if o.is_floating_point() or o.is_complex():
            same |= torch.isnan(o.detach()) & torch.isnan(e)
        differ = int((~same).sum())
        if differ:
            found.append([i, differ, o.numel()])
    return found


def _same_address_call(call: Any, held: list[Any], inputs: list[Any], device: str) -> list[Any] | None:
    """Write ``inputs`` into the tensors of an earlier call (same data_ptr, same shape) and call again.

    None when the two argument lists differ in structure (shapes, dtypes, or non-tensor values).
    """
    old_leaves, new_leaves = _leaves(held), _leaves(inputs)
    if len(old_leaves) != len(new_leaves):
        return None
    for a, b in zip(old_leaves, new_leaves, strict=True):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return None
        if isinstance(a, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return None
        elif a != b:
            return None
    with torch.no_grad():
        for a, b in zip(old_leaves, new_leaves, strict=True):
            if isinstance(a, torch.Tensor):
                a.copy_(b.to(a.device))
    with common.recording(poison=True), torch.no_grad():
        out = common.flatten_outputs(call(*held))
    common.sync(device)
    return _held(out)


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, list | tuple):
        return [leaf for item in tree for leaf in _leaves(item)]
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree, key=str) for leaf in _leaves(tree[key])]
    return [tree]


def candidate(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    device = _device(params)
    common.install_launch_hooks()
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if interpreted:
        launch_specs.record_interpreted()
        launch_specs.take()
    bundle = torch.load(params["cases_file"], weights_only=True)
    # Read once, before any user code runs: the cases' inputs are not there for it to compute answers from ahead.
    with contextlib.suppress(OSError):
        os.unlink(params["cases_file"])
    autotune_configs.start_case()  # (its hook on the autotuner goes in before the guard looks)
    ctx.guard = integrity.Guard()  # the judge's code as it is before the candidate's is imported
    module, target = _load_target(params["candidate"], ctx)
    kernelbench = params.get("kernelbench", False)
    weights = "n/a"
    # Why the candidate's module was not given the reference's weights, where it was not (its first model).
    unmatched: dict[str, list[str]] = {}
    label = params["candidate"]["name"]
    first_inputs = list(bundle["cases"][0]["inputs"]) if bundle["cases"] else None
    if calls.is_kernel(target):
        calls.check_candidate(target, first_inputs or [], label, module)
    if kernelbench:
        if not _is_module_class(target):
            raise UsageProblem(
                f"The reference is an nn.Module class (KernelBench layout) but `{params['candidate']['name']}` "
                "is not one. Point the candidate at the ModelNew class."
            )
        models: dict[str, torch.nn.Module] = {}

        def model_for(init: list[Any], state: dict[str, Any] | None) -> tuple[torch.nn.Module, str]:
            key = repr(init)
            if key not in models:
                model = _build(target, init, params)
                own = _tensor_state(model)
                how = "seeded construction" if own or state else "none (the model holds no weights)"
                if state and set(own) == set(state) and all(own[k].shape == state[k].shape for k in own):
                    model.load_state_dict({k: v.to(device) for k, v in state.items()}, strict=False)
                    how = "copied from the reference"
                else:
                    # Its own weights, moved as the reference's were (from the same construction, the same values).
                    _move_weights(model, params)
                    if state and not unmatched:
                        unmatched.update(_unmatched_weights(own, state))
                model = model.to(device)
                models[key] = model
                model_how[key] = how
            return models[key], model_how[key]

        model_how: dict[str, str] = {}
        base_model, weights = model_for(bundle["init"], bundle.get("state"))
        reference_state = set(bundle.get("state") or {})
        if first_inputs is not None:
            calls.check_candidate(base_model.forward, first_inputs, f"{label}.forward", module)
    else:
        if not callable(target):
            raise UsageProblem(
                f"`{params['candidate']['name']}` in {params['candidate']['path']} is a "
                f"{type(target).__name__}, not a callable."
            )
        if first_inputs is not None:
            calls.check_candidate(target, first_inputs, label, module)
        base_model = None
        reference_state: set[str] = set()

    saved: dict[str, Any] = {}
    report: list[dict[str, Any]] = []
    stop_reason = None
    # The input tensors of a case's first seed: its second seed writes its inputs into them and calls again.
    held: dict[str, list[Any]] = {}
    same_done: set[str] = set()
    side = _SideStreams.install(device)
    mode_flags: dict[int, dict[torch.nn.Module, bool]] = {}  # each model's training flags as it was built
    for case in bundle["cases"]:
        key = case["key"]
        entry: dict[str, Any] = {"key": key}
        if stop_reason is not None:
            entry.update(status="not_run", reason=stop_reason)
            report.append(entry)
            continue
        ctx.mark(f"candidate case {key}")
        launch_specs.set_case(key, own=case.get("name") is not None and not case.get("layout"))
        if kernelbench:
            model = base_model
            if case.get("init") is not None:
                try:
                    model, _ = model_for(case["init"], case.get("state"))
                except Exception as exc:
                    failure = classify_exception(exc, ctx.user_files)
                    entry.update(status="failed", failure=failure.model_dump(mode="json"))
                    report.append(entry)
                    continue
            call: Any = model
            model_params = list(model.parameters()) if params.get("backward") else []  # type: ignore[union-attr]
        else:
            call, model_params = target, []
        if kernelbench:
            mode_flags[id(model)] = _set_mode(model, case.get("mode"), mode_flags.get(id(model)))
        inputs = common.to_device(case["inputs"], device)
        # The buffers start where the reference's started; those its call updated are read after the first call,
        # the others the reference has are watched for a change it does not make.
        updated = list(case.get("updated") or [])
        started = _start_buffers(model, case.get("buffers") or {}, updated, entry) if kernelbench else []
        kept = [n for n in started if n in updated]
        found = {
            n: b.detach().clone()
            for n, b in (_buffers(model).items() if kernelbench else ())
            if n in reference_state and n not in kept
        }
        before = [common.tensor_digest(t) if isinstance(t, torch.Tensor) else None for t in inputs]
        buffers_read: list[dict[str, torch.Tensor]] = []
        runs: list[list[Any]] = []
        returned: list[list[Any]] = []
        autotune_configs.start_case()
        races: list[list[int]] = []
        # A layout case repeats nothing a base case does not: one call (poison still marks unwritten outputs).
        repeats = 2 if params.get("determinism", True) and not case.get("layout") else 1
        try:
            for repeat in range(repeats):
                args = derive.relayout(common.clone(inputs), case.get("layout"))
                started = time.perf_counter()
                # Kernels are compiled by the last call: delay side streams there (see _SideStreams).
                side.arm(delay=repeat == repeats - 1)
                with trace.window(f"{key}@{repeat}"), common.recording(poison=True, second=repeat == 1) as record:
                    grad_out = case.get("grad_out") if params.get("backward") else None
                    args, out, grads = grad_calls.call_candidate(call, args, model_params, grad_out, device)
                early = _consumer_read(out)
                side.disarm()
                common.sync(device)
                elapsed = time.perf_counter() - started
                races.extend(_raced(out, early))
                del early
                returned.append(_held(out))
                runs.append(out)
                if repeat == 0:
                    first_record, first_args, first_elapsed = record, args, elapsed
                    first_grads = common.map_tensors(grads, _copy) if grads is not None else None
                    # The inputs as the call left them, read now for the same reason as its outputs.
                    after = [common.tensor_digest(t) if isinstance(t, torch.Tensor) else None for t in args]
                    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
                    post = {i: _copy(args[i]) for i in changed}
                if kept or found:
                    # After each call: the buffers it updates (the reference's update once, then twice), and
                    # whether one the reference leaves alone changed.
                    now = _buffers(call)
                    read = {n: _copy(now[n]) for n in kept if n in now}
                    buffers_read.append(read)
                    lost = sorted(set(kept) - set(read))
                    moved = [n for n, b in found.items() if n not in now or not common.same_bits(now[n], b, True)]
                    if lost:
                        entry["buffers_lost"] = lost
                    if moved:
                        entry["buffers_changed"] = sorted(set(entry.get("buffers_changed", [])) | set(moved))
        except BaseException as exc:
            side.disarm()
            failure = classify_exception(exc, ctx.user_files)
            entry.update(status="failed", failure=failure.model_dump(mode="json"))
            report.append(entry)
            if is_sticky_cuda_error(exc):
                stop_reason = f"not run: the CUDA context was lost on case {key}"
            continue
        same_out = None
        name = case.get("name")
        if name is not None and held.get(name) is not None and name not in same_done:
            same_done.add(name)
            try:
                same_out = _same_address_call(call, held[name], inputs, device)
                if same_out is None:
                    entry["same_address"] = "skipped: the inputs' structure differs from the previous call's"
            except BaseException as exc:
                failure = classify_exception(exc, ctx.user_files)
                entry["same_address_failure"] = failure.model_dump(mode="json")
                if is_sticky_cuda_error(exc):
                    stop_reason = f"not run: the CUDA context was lost on case {key}"
        if name is not None and name not in held:
            held[name] = first_args
        if races:
            entry["stream_race"] = races
        if interpreted:
            program_races = interp_races.take()
            if program_races:
                entry["program_races"] = program_races
        first = runs[0]
        entry.update(
            status="ok",
            outputs=[
                {"type": common.type_label(o)}
                | (
                    {
                        "shape": list(o.shape),
                        "dtype": str(o.dtype).replace("torch.", ""),
                        "device": str(o.device),
                    }
                    if isinstance(o, torch.Tensor) and not common.foreign_tensor(o)
                    else {"repr": object.__repr__(o)[:80]}
                )
                for o in first
            ],
            aliases=common.aliases(first, first_args),
            overlaps=common.overlapping_outputs(first),
            **common.nesting_fields(first),
            record=first_record.as_json(),
            torch_work=first_record.torch_work,
            digests_after=after,
            changed_inputs=changed,
            seconds=first_elapsed,
        )
        # Every other config of each autotuned kernel it launched, one run each (compared in the parent).
        entry["configs"], variant_outputs = autotune_configs.each_config(
            call, inputs, case, params, device, model_params, ctx
        )
        saved[key] = {
            "configs": variant_outputs,
            # Copies made when each call returned (_held): an in-place candidate returns its input, which the next
            # seed's same-address call rewrites, and work a candidate leaves running must not complete them later.
            "out": returned[0],
            "out2": returned[1] if len(returned) > 1 else None,
            "post": post,
            "same": same_out,
            "grads": first_grads,
        }
        if kept and buffers_read:
            saved[key]["buffers"] = buffers_read[0]
            if len(buffers_read) > 1:
                saved[key]["buffers_twice"] = buffers_read[1]
        report.append(entry)
    torch.save(saved, ctx.path("candidate.pt"))
    result = {"cases": report, "weights": weights, "device": device, "autotune_notes": common.AUTOTUNE_NOTES}
    if unmatched:
        result["weights_unmatched"] = unmatched
    if params.get("trace"):
        result["trace"] = trace.collect()
    if interpreted:
        result["launch_specs"] = launch_specs.take()
    replaced = recorder.replaced_kernels()
    if replaced:
        result["kernels_replaced"] = replaced
    native = recorder.native_loads()
    if native:
        result["native_code"] = native
    if interpreted:
        from mcp_server.engine.interp import tf32

        result["tf32_dots"] = tf32.USED[0]
    return result
