"""Calls with gradients, shared by the validate jobs, the every-config reruns and the audit job."""

from __future__ import annotations

from typing import Any

import torch

from mcp_server.engine.compare import unreadable
from mcp_server.engine.jobs import common
from mcp_server.engine.runner.child import UsageProblem


def plain_outputs(out: Any, what: str) -> list[torch.Tensor]:
    flat = common.flatten_outputs(out)
    for i, item in enumerate(flat):
        if not isinstance(item, torch.Tensor):
            hint = (
                "; one that writes into an argument (out= style) returns that argument, and the candidate then "
                "returns it too"
                if item is None
                else ""
            )
            raise UsageProblem(
                f"{what} returned a {type(item).__name__} as output {i}; the reference must return a tensor "
                f"or a tuple/list of tensors (wrap numbers with torch.tensor){hint}."
            )
        odd = unreadable(item)
        if odd is not None:
            raise UsageProblem(
                f"{what} returns {odd} (output {i}): its values cannot be compared element by element. Make it "
                "return a dense strided tensor of the dtype it means (.to_dense(), .dequantize() or .int_repr()), "
                "and write the candidate to return the same."
            )
    return flat


def grad_leaves(args: list[Any]) -> list[torch.Tensor]:
    return [t for t in common.iter_tensors(args) if t.is_floating_point() and t.requires_grad]


def with_grad(args: list[Any]) -> list[Any]:
    """Fresh copies of ``args``; floating tensors require grad."""
    return common.map_tensors(
        args,
        lambda t: t.detach().clone().requires_grad_(True) if t.is_floating_point() else t.detach().clone(),
    )


def backward(
    call: Any,
    args: list[Any],
    params: list[torch.Tensor],
    grad_out: list[torch.Tensor] | None,
    reference: bool = True,
):
    """Outputs, gradients w.r.t. floating inputs and params, and the upstream grads used."""
    result = call(*args)
    out = plain_outputs(result, "the reference") if reference else common.flatten_outputs(result)
    diff = [o for o in out if isinstance(o, torch.Tensor) and o.requires_grad]
    if not diff:
        return out, None, None
    if grad_out is None:
        grad_out = [torch.randn_like(o) for o in diff]
    leaves = grad_leaves(args) + params
    grads = torch.autograd.grad(
        diff, leaves, [g.to(o.dtype) for g, o in zip(grad_out, diff, strict=False)], allow_unused=True
    )
    return out, [None if g is None else g.detach() for g in grads], grad_out


def call_candidate(
    call: Any, args: list[Any], model_params: list[torch.Tensor], grad_out: Any, device: str
) -> tuple[list[Any], list[Any], list[Any] | None]:
    """One candidate call: forward only, or forward + backward against ``grad_out`` when it is given.

    Returns (the arguments it was called with, its flat outputs, the gradients or None)."""
    if grad_out is not None:
        args = with_grad(args)
        out, grads, _ = backward(call, args, model_params, common.to_device(grad_out, device), reference=False)
        return args, out, grads
    with torch.no_grad():
        return args, common.flatten_outputs(call(*args)), None
