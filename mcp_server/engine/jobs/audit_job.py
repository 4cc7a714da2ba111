"""The audit's child job: find the launcher and the reference in a file, then run the launcher on example
inputs and record every @triton.jit launch it makes, so the parent can compile exactly what ran.

The user's file is imported here (never in the parent). For each launch of a kernel defined in the audited
file the job records the argument types as Triton's JIT specialises them (pointer dtype, 16-byte
alignment, integers divisible by 16, integers equal to 1 folded to constants), the constexpr values, the
launch options, and for autotuned kernels the config the autotuner chose (on a GPU) or the configs its
pruning keeps (under the interpreter, which cannot time configs). Everything returned is plain data: the
parent trusts none of it beyond using it as compile parameters.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

from mcp_server.engine.frames import function_of
from mcp_server.engine.jobs import calls, common, grad_calls, launch_specs
from mcp_server.engine.runner.child import JobContext, UsageProblem, load_module, resolve

# Launch options that are not kernel parameters.
LAUNCH_OPTIONS = launch_specs.LAUNCH_OPTIONS
# Cases the launcher is run on to see its launches (each distinct specialisation is kept once).
MAX_CASES = 12
# Names that are never the launcher under audit.
_NOT_LAUNCHERS = ("reference", "ref_", "get_", "make_", "bytes_moved", "flops", "main", "test_")

_tls = threading.local()


# --- discovery ------------------------------------------------------------------------------------------


def _defined_here(module: Any, obj: Any) -> bool:
    return getattr(obj, "__module__", None) == module.__name__


def _attr_name(module: Any, obj: Any) -> str | None:
    """The module-level name bound to ``obj`` (its own name first)."""
    name = getattr(obj, "__name__", None)
    if name and getattr(module, name, None) is obj:
        return name
    for key, value in vars(module).items():
        if value is obj and not key.startswith("__"):
            return key
    return None


def _is_kernel(obj: Any) -> bool:
    from triton.runtime import KernelInterface

    return isinstance(obj, KernelInterface)


def discover_candidate(module: Any, hints: list[str]) -> tuple[str | None, str]:
    """The launcher to audit when the caller named none, and why it was chosen."""
    spec = getattr(module, "SPEC", None)
    best = getattr(spec, "best", None)
    if callable(best) and (name := _attr_name(module, best)):
        return name, "the SPEC's highest stage"
    model_new = getattr(module, "ModelNew", None)
    if isinstance(model_new, type) and issubclass(model_new, torch.nn.Module):
        return "ModelNew", "the KernelBench solution class"
    if callable(getattr(module, "candidate", None)) and not _is_kernel(module.candidate):
        return "candidate", "the function named `candidate`"
    public = [h for h in hints if not h.startswith("_") and callable(getattr(module, h, None))]
    if len(public) == 1:
        return public[0], "the file's only public launcher"
    functions = sorted(
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and _defined_here(module, value)
        and not name.startswith("_")
        and not name.startswith(_NOT_LAUNCHERS)
    )
    if len(functions) == 1:
        return functions[0], "the file's only public function"
    listing = ", ".join(public or functions) or "none found"
    return None, f"several or no candidate launchers ({listing}); name one as FILE:launcher"


def discover_reference(module: Any) -> tuple[str | None, str]:
    spec = getattr(module, "SPEC", None)
    ref = getattr(spec, "reference", None)
    if callable(ref) and (name := _attr_name(module, ref)):
        return name, "the SPEC's reference"
    model = getattr(module, "Model", None)
    if isinstance(model, type) and issubclass(model, torch.nn.Module):
        return "Model", "the KernelBench problem class"
    named = sorted(
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and _defined_here(module, value)
        and (name == "reference" or name.startswith(("reference_", "ref_")) or name.endswith("_reference"))
    )
    if len(named) == 1:
        return named[0], "the file's only reference_* function"
    return None, "no reference found in the file; pass one as path.py:fn"


# --- launch capture -------------------------------------------------------------------------------------


def _unwrap_jit(obj: Any) -> Any:
    """The JITFunction (or InterpretedFunction) behind Autotuner/Heuristics wrappers."""
    for _ in range(8):
        inner = getattr(obj, "fn", None)
        if inner is None or inspect.isfunction(inner):
            return obj
        obj = inner
    return obj


def _heuristics(obj: Any) -> dict[str, Any]:
    """The @triton.heuristics values between a wrapper and its JITFunction."""
    from triton.runtime.autotuner import Heuristics

    values: dict[str, Any] = {}
    for _ in range(8):
        if isinstance(obj, Heuristics):
            values.update(obj.values)
        inner = getattr(obj, "fn", None)
        if inner is None or inspect.isfunction(inner):
            break
        obj = inner
    return values


class Capture:
    """Launch records keyed by kernel and specialisation."""

    def __init__(self, path: str, module: Any, interpreter: bool):
        self.path = os.path.realpath(path)
        self.module = module
        self.interpreter = interpreter
        self.records: dict[tuple, dict[str, Any]] = {}
        self.elsewhere: dict[str, int] = {}
        self.case = ""

    # -- names in the module ----------------------------------------------------------------------
    def dotted_name(self, target: Any) -> str | None:
        """A name ``resolve`` finds in the module for ``target``: ``k``, or ``k.fn`` behind wrappers."""
        for key, value in vars(self.module).items():
            if key.startswith("__"):
                continue
            obj, path = value, key
            for _ in range(4):
                if obj is target:
                    return path
                if not _is_kernel(obj) or not hasattr(obj, "fn"):
                    break
                obj, path = obj.fn, f"{path}.fn"
        return None

    def autotuner_of(self, jit: Any) -> Any:
        """A module-level Autotuner that wraps ``jit`` (the launcher may bypass it under the interpreter)."""
        from triton.runtime.autotuner import Autotuner

        for value in vars(self.module).values():
            if isinstance(value, Autotuner) and _unwrap_jit(value) is jit:
                return value
        return None

    # -- one launch -------------------------------------------------------------------------------
    def kernel_info(self, jit: Any) -> tuple[str, str, int] | None:
        fn = function_of(jit)
        if fn is None:
            return None
        code = fn.__code__
        if os.path.realpath(code.co_filename) != self.path:
            label = f"{fn.__name__} ({os.path.basename(code.co_filename)})"
            self.elsewhere[label] = self.elsewhere.get(label, 0) + 1
            return None
        return fn.__name__, code.co_filename, code.co_firstlineno

    def pruned(self, tuner: Any, args: tuple, kwargs: dict[str, Any]) -> list[int]:
        """Indices of the configs the autotuner's pruning keeps for these arguments."""
        keys = {k for c in tuner.configs for k in c.kwargs}
        clean = {k: v for k, v in kwargs.items() if k not in keys and k not in LAUNCH_OPTIONS}
        saved = getattr(tuner, "nargs", None)
        try:
            tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
            kept = tuner.prune_configs(clean)
        except Exception:
            kept = list(tuner.configs)
        finally:
            tuner.nargs = saved
        ids = {id(c): i for i, c in enumerate(tuner.configs)}
        return [ids[id(c)] for c in kept if id(c) in ids]

    def variants(
        self, jit: Any, tuner: Any, args: tuple, kwargs: dict[str, Any], described: dict[str, Any], chosen: int | None
    ) -> list[dict[str, Any]]:
        """What to compile for one launch: the launch itself, or the autotuner's chosen / kept configs."""
        base = dict(described["constexprs"])
        if tuner is None:
            return [{"source": "launched", "config_index": None, "constexprs": base, **described["options"]}]
        indices = [chosen] if chosen is not None else self.pruned(tuner, args, kwargs)
        heuristics = _heuristics(tuner)
        bound = {**dict(zip(jit.arg_names, args, strict=False)), **kwargs}
        out = []
        for index in indices:
            config = tuner.configs[index]
            constexprs = {**base}
            for key, value in config.kwargs.items():
                ok, plain = launch_specs.plain(value)
                if ok:
                    constexprs[key] = plain
            for key, heur in heuristics.items():
                try:
                    ok, plain = launch_specs.plain(heur({**bound, **config.kwargs}))
                except Exception:
                    ok = False
                if ok:
                    constexprs[key] = plain
            out.append(
                {
                    "source": "autotune choice" if chosen is not None else "autotune candidate",
                    "config_index": index,
                    "constexprs": constexprs,
                    "num_warps": config.num_warps,
                    "num_stages": config.num_stages,
                }
            )
        return out

    def record(self, jit: Any, args: tuple, kwargs: dict[str, Any], tuner: Any = None, chosen: int | None = None):
        info = self.kernel_info(jit)
        if info is None:
            return
        name, file, line = info
        bypassed = False
        if tuner is None and self.interpreter:
            # The launcher called the kernel behind an autotuner directly: the interpreter cannot time
            # configs, so what it ran says nothing about the GPU's choice. Compile the autotuner's picks.
            tuner = self.autotuner_of(jit)
            bypassed = tuner is not None
        skip: set[str] = set()
        if tuner is not None:
            skip = {k for c in tuner.configs for k in c.kwargs} | set(_heuristics(tuner))
        described = launch_specs.describe_launch(jit, args, kwargs, skip)
        variants = self.variants(jit, tuner, args, kwargs, described, chosen)
        key = (
            name,
            tuple(sorted(described["signature"].items())),
            repr([sorted((k, repr(v)) for k, v in v_["constexprs"].items()) for v_ in variants]),
            repr([(v_.get("num_warps"), v_.get("num_stages"), v_["config_index"]) for v_ in variants]),
        )
        entry = self.records.get(key)
        if entry is None:
            entry = {
                "kernel": name,
                "file": file,
                "line": line,
                "jit_name": self.dotted_name(jit),
                "autotuned": tuner is not None,
                "n_configs": len(tuner.configs) if tuner is not None else 0,
                "bypassed_autotuner": bypassed,
                "variants": variants,
                "launches": 0,
                "cases": [],
                "signature": described["signature"],
                "unsupported": described["unsupported"],
                "aligned": described["aligned"],
                "ints_div16": described["ints_div16"],
                "degenerate": described["degenerate"],
                "pointer_dtypes": described["pointer_dtypes"],
            }
            self.records[key] = entry
        entry["launches"] += 1
        if self.case and self.case not in entry["cases"] and len(entry["cases"]) < 8:
            entry["cases"].append(self.case)

    # -- hooks ------------------------------------------------------------------------------------
    def install(self) -> Callable[[], None]:
        from triton.runtime import autotuner, jit

        common.install_launch_hooks()  # the interpreter's one-config autotuning
        classes: list[Any] = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover
            pass
        restore: list[tuple[Any, str, Any]] = []
        capture = self

        for cls in classes:
            original = cls.run

            def run(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
                if not kwargs.get("warmup", False) and getattr(_tls, "tuning", 0) == 0:
                    try:
                        capture.record(self, args, kwargs)
                    except Exception as exc:  # the capture must never break the user's launch
                        capture.elsewhere[f"capture error: {type(exc).__name__}: {exc}"] = 1
                return __original(self, *args, **kwargs)

            restore.append((cls, "run", original))
            cls.run = run

        original_tuned = autotuner.Autotuner.run

        def tuned_run(self: Any, *args: Any, __original: Any = original_tuned, **kwargs: Any) -> Any:
            if kwargs.get("warmup", False):
                return __original(self, *args, **kwargs)
            _tls.tuning = getattr(_tls, "tuning", 0) + 1
            try:
                out = __original(self, *args, **kwargs)
            finally:
                _tls.tuning -= 1
            if getattr(_tls, "tuning", 0) == 0:
                try:
                    chosen = None
                    best = getattr(self, "best_config", None)
                    if not capture.interpreter and best is not None:
                        chosen = next((i for i, c in enumerate(self.configs) if c is best), None)
                    capture.record(_unwrap_jit(self), args, kwargs, tuner=self, chosen=chosen)
                except Exception as exc:
                    capture.elsewhere[f"capture error: {type(exc).__name__}: {exc}"] = 1
            return out

        restore.append((autotuner.Autotuner, "run", original_tuned))
        autotuner.Autotuner.run = tuned_run

        def undo() -> None:
            for cls, attr, original in reversed(restore):
                setattr(cls, attr, original)

        return undo


# --- the job --------------------------------------------------------------------------------------------


def _call_target(target: Any, init: list[Any], device: str) -> Callable[..., Any]:
    if isinstance(target, type) and issubclass(target, torch.nn.Module):
        torch.manual_seed(0)
        model = target(*init).to(device)
        return model
    return target


def run(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    path = params["file"]
    module = load_module(path, ctx.user_files)
    out: dict[str, Any] = {"launches": [], "notes": [], "case_errors": []}

    cand = params.get("candidate")
    if cand:
        named = resolve(module, cand)  # a wrong name is the caller's to fix
        if calls.is_kernel(named):
            calls.check_candidate(named, [], cand, module)
        out["candidate"], out["candidate_why"] = cand, "named by the caller"
    else:
        out["candidate"], out["candidate_why"] = discover_candidate(module, list(params.get("launchers") or []))
    ref = params.get("reference")
    if ref:
        out["reference"], out["reference_why"] = None, "named by the caller"
    else:
        out["reference"], out["reference_why"] = discover_reference(module)
    if not params.get("capture") or not out["candidate"]:
        return out

    device = params.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    inputs_module = module
    if ref:
        inputs_module = load_module(ref["path"], ctx.user_files)
    try:
        cases, _ = common.resolve_cases(inputs_module, params.get("inputs"), ctx.user_files, device)
    except UsageProblem as exc:
        out["notes"].append(f"no example inputs to run the launcher with: {exc}")
        return out
    init: list[Any] = []
    if hasattr(inputs_module, "get_init_inputs"):
        init = list(inputs_module.get_init_inputs())
    target = _call_target(resolve(module, out["candidate"]), init, device)
    if cases:
        kernelbench = isinstance(target, torch.nn.Module)
        calls.check_candidate(
            target.forward if kernelbench else target,
            list(cases[0].args),
            f"{out['candidate']}.forward" if kernelbench else out["candidate"],
            module,
            what="the example",
        )

    capture = Capture(path, module, interpreter=os.environ.get("TRITON_INTERPRET") == "1")
    undo = capture.install()
    try:
        for case in cases[:MAX_CASES]:
            capture.case = case.name
            ctx.mark(f"audit capture case {case.name}")
            args = common.to_device(case.args, device)
            try:
                if params.get("backward"):
                    args = grad_calls.with_grad(args)
                    result = target(*args)
                    outs = [o for o in common.flatten_outputs(result) if isinstance(o, torch.Tensor)]
                    diff = [o for o in outs if o.requires_grad]
                    if diff:
                        torch.autograd.backward(diff, [torch.randn_like(o) for o in diff])
                else:
                    with torch.no_grad():
                        target(*args)
                common.sync(device)
            except Exception as exc:
                out["case_errors"].append(f"{case.name}: {type(exc).__name__}: {str(exc)[:300]}")
        if len(cases) > MAX_CASES:
            out["notes"].append(f"ran the launcher on the first {MAX_CASES} of {len(cases)} cases")
    finally:
        undo()
    out["launches"] = list(capture.records.values())
    out["elsewhere"] = capture.elsewhere
    out["interpreter"] = capture.interpreter
    return out
