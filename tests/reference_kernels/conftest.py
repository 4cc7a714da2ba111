"""Reference-kernel tests: the Triton interpreter on machines without a CUDA GPU, and a shared checker.

Triton decides when ``@triton.jit`` runs (module import) whether a kernel is compiled or interpreted, so
``TRITON_INTERPRET=1`` must be in the environment before any ``reference_kernels`` module is imported.
pytest imports this file before the test modules beside it; a kernel module that tests elsewhere
imported earlier in the session is reloaded so that its kernels are rebuilt for the interpreter.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    os.environ["TRITON_INTERPRET"] = "1"
    for _name in sorted(sys.modules):
        # _spec holds only dataclasses; reloading it would give its classes a second identity.
        if _name.startswith("reference_kernels.") and _name != "reference_kernels._spec":
            importlib.reload(sys.modules[_name])

# Interpreter tests run on the CPU; GPU tests (marked `gpu`) on the current CUDA device.
CPU = "cpu"


def _assert_close(
    actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, what: str, scale_floor: float
) -> None:
    """Compare against a float64 reference with atol scaled by the reference's largest magnitude, but
    not below ``scale_floor``: 1 for O(1) quantities (so ill-conditioned near-zero values, like RMSNorm's
    dx over one column, are judged against the size of the terms that cancelled), lower for quantities
    that are small by construction (a mean loss's gradient is O(1/N)). NaNs must coincide."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    expected = expected.detach()
    finite = expected[torch.isfinite(expected)]
    scale = max(float(finite.abs().max()) if finite.numel() else 0.0, scale_floor)
    torch.testing.assert_close(
        actual.detach().to(torch.float64),
        expected,
        atol=atol * scale,
        rtol=rtol,
        equal_nan=True,
        msg=lambda m: f"{what}: {m}",
    )


def check_stage(
    spec: Any,
    stage: int,
    case: Any,
    dtype: torch.dtype,
    device: str,
    upstream: str = "random",
    tolerance: Any = None,
    scale_floor: float = 1.0,
) -> None:
    """Run one stage on one case and compare its output, and its gradients where the op has a backward,
    with autograd through the reference evaluated in float64 on the same (rounded) inputs.

    ``upstream``: "random" uses a random upstream gradient, "ones" the gradient ``loss.backward()`` gives.
    ``scale_floor``: see ``_assert_close``.
    """
    torch.manual_seed(0)
    args = spec.make_inputs(case.dims, dtype, device)
    kwargs = spec.call_kwargs(case.dims)
    tol = tolerance or spec.tolerances[dtype]

    def leaf(i: int, a: Any, cast: torch.dtype | None) -> Any:
        if not isinstance(a, torch.Tensor) or not a.is_floating_point():
            return a
        t = a.detach().clone() if cast is None else a.detach().to(cast)
        return t.requires_grad_(i in spec.grad_inputs)

    ours_in = [leaf(i, a, None) for i, a in enumerate(args)]
    ref_in = [leaf(i, a, torch.float64) for i, a in enumerate(args)]
    out = spec.stages[stage](*ours_in, **kwargs)
    ref = spec.reference(*ref_in, **kwargs)
    assert out.dtype == dtype, f"stage {stage} returned {out.dtype}, expected {dtype}"
    assert out.device.type == torch.device(device).type
    _assert_close(out, ref, tol.atol, tol.rtol, f"stage {stage} output, {case.label}, {dtype}", scale_floor)
    if not spec.grad_inputs:
        return
    if upstream == "ones":
        g = torch.ones_like(out)
    else:
        g = torch.randn(out.shape, device=device).to(dtype)
    out.backward(g)
    ref.backward(g.to(torch.float64))
    for i in spec.grad_inputs:
        assert ours_in[i].grad is not None, f"stage {stage}: no gradient for argument {i}"
        what = f"stage {stage} grad of argument {i}, {case.label}, {dtype}"
        _assert_close(ours_in[i].grad, ref_in[i].grad, tol.atol, tol.rtol, what, scale_floor)


@pytest.fixture
def check() -> Callable[..., None]:
    """The stage-vs-reference checker (see ``check_stage``)."""
    return check_stage


@pytest.fixture
def untimed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Makes autotuners run each config once instead of timing it. They still compile every config of a
    new key in parallel first: the config sweeps of the GPU tests need the compiled kernels, not the
    timings."""

    def apply(*tuners: Any) -> None:
        for tuner in tuners:
            monkeypatch.setattr(tuner, "do_bench", lambda fn, quantiles: (fn(), [1.0, 1.0, 1.0])[1])

    return apply
