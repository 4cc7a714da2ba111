"""Input cases inside children: where a job's arguments come from, and the value transforms applied to them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mcp_server.engine.inputs import looks_like_type_list, materialise, parse_type_list
from mcp_server.engine.jobs.trees import check_plain, map_tensors
from mcp_server.engine.runner.child import UsageProblem, load_module, resolve


@dataclass
class Case:
    name: str
    args: list[Any]
    derived: str | None = None  # e.g. "1024→1023 (non-pow2 tail)"


# Part of the error for a reference module that gives no inputs (the parent looks for it to add a hint).
NO_INPUTS = "defines neither get_inputs() nor get_test_cases()"


def resolve_cases(module: Any, inputs_spec: str | None, user_files: set[str], device: str) -> tuple[list[Case], bool]:
    """The cases to run, and whether they came from a single get_inputs() (so shapes may be derived)."""
    if inputs_spec:
        if looks_like_type_list(inputs_spec):
            return [Case("inputs", materialise(parse_type_list(inputs_spec), device))], True
        path, _, name = inputs_spec.rpartition(":")
        if not path:
            raise UsageProblem(f"--inputs {inputs_spec!r}: write path.py:function or a type list.")
        value = resolve(load_module(path, user_files), name)()
        return _cases_from_value(value, f"{inputs_spec}()")
    if hasattr(module, "get_test_cases"):
        value = module.get_test_cases()
        if not isinstance(value, dict) or not value:
            raise UsageProblem(
                "get_test_cases() must return a non-empty dict mapping a case label to a list of arguments, "
                f"not {type(value).__name__}."
            )
        return _cases_from_value(value, "get_test_cases()")
    if hasattr(module, "get_inputs"):
        return _cases_from_value(module.get_inputs(), "get_inputs()")
    raise UsageProblem(
        f"{getattr(module, '__file__', 'the reference module')} {NO_INPUTS}, so there is nothing to call the "
        "kernels with. Add get_inputs() returning a list of "
        "arguments (KernelBench style) or get_test_cases() returning {label: [args]}, or pass --inputs "
        "'f32[1024,1024], …'."
    )


def _cases_from_value(value: Any, origin: str) -> tuple[list[Case], bool]:
    if isinstance(value, dict):
        cases = []
        for label, args in value.items():
            args = list(args) if isinstance(args, list | tuple) else [args]
            check_plain(args, f"{origin}[{label!r}]")
            cases.append(Case(str(label), args))
        return cases, False
    if isinstance(value, list | tuple):
        args = list(value)
        check_plain(args, origin)
        return [Case("base", args)], True
    if isinstance(value, torch.Tensor):
        return [Case("base", [value])], True
    raise UsageProblem(f"{origin} returned a {type(value).__name__}; return a list of arguments.")


# --- value transforms (the audit's correctness suite) ---------------------------------------------


def _scaled(t: torch.Tensor, magnitude: float) -> torch.Tensor:
    peak = t.float().abs().max().clamp_min(1e-30)
    return (t.float() / peak * magnitude).to(t.dtype)


def _inject(t: torch.Tensor, value: float) -> torch.Tensor:
    out = t.clone()
    flat = out.view(-1)
    if flat.numel():
        picks = torch.randperm(flat.numel(), device=flat.device)[: max(1, flat.numel() // 100)]
        flat[picks] = value if value == value else float("nan")
        if value == float("inf"):
            flat[picks[::2]] = -float("inf")
    return out


def _finfo(t: torch.Tensor) -> torch.finfo:
    return torch.finfo(t.dtype)


TRANSFORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "zeros": torch.zeros_like,
    "ones": torch.ones_like,
    "large": lambda t: _scaled(t, min(1e6, _finfo(t).max / 1e3)),
    "small": lambda t: _scaled(t, max(1e-6, _finfo(t).tiny * 1e4)),
    "negative": lambda t: -t.abs(),
    "alternating": lambda t: (
        (t.abs().reshape(-1) * (1 - 2 * (torch.arange(t.numel(), device=t.device) % 2))).reshape(t.shape).to(t.dtype)
    ),
    "near_overflow": lambda t: _scaled(t, _finfo(t).max / 4),
    "near_underflow": lambda t: _scaled(t, _finfo(t).tiny * 8),
    "inf": lambda t: _inject(t, float("inf")),
    "nan": lambda t: _inject(t, float("nan")),
}


def apply_transform(args: list[Any], name: str) -> list[Any]:
    if name not in TRANSFORMS:
        raise UsageProblem(f"Unknown input transform {name!r}; choose from {', '.join(TRANSFORMS)}.")
    fn = TRANSFORMS[name]
    return map_tensors(args, lambda t: fn(t) if t.is_floating_point() else t)
