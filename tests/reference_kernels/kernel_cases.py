"""Parametrisation helpers shared by the reference-kernel tests: test ids from case labels, the
(stage, case, dtype) grids the tests run, case lookup by label, and a comparison at a kernel's tolerance.
Imported by the test modules beside it (pytest puts this folder on sys.path); fixtures live in conftest.py."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
import torch


def slug(label: str) -> str:
    """A case label as a test id: each run of characters other than letters and digits becomes one '-'."""
    return re.sub(r"[^0-9A-Za-z]+", "-", label).strip("-")


def label_ids(cases: Iterable[Any]) -> list[str]:
    return [slug(c.label) for c in cases]


def case_id(stage: int, case: Any, dtype: torch.dtype) -> str:
    return f"stage{stage}-{slug(case.label)}-{str(dtype).removeprefix('torch.')}"


def as_params(triples: Iterable[tuple[int, Any, torch.dtype]]) -> list[Any]:
    """``pytest.param(stage, case, dtype)`` for each triple, with ids from ``case_id``."""
    return [pytest.param(s, c, d, id=case_id(s, c, d)) for (s, c, d) in triples]


def stage_params(
    spec: Any,
    cases: Sequence[Any],
    dtypes: Sequence[torch.dtype],
    fits: Callable[[int, Any], bool] | None = None,
) -> list[Any]:
    """Every case × every stage of ``spec`` (those ``fits(stage, case)`` admits) × every dtype."""
    return as_params(
        (stage, case, dtype)
        for case in cases
        for stage in sorted(spec.stages)
        if fits is None or fits(stage, case)
        for dtype in dtypes
    )


def case_named(cases: Iterable[Any], label: str) -> Any:
    """The case of ``cases`` with this label (StopIteration when there is none)."""
    return next(c for c in cases if c.label == label)


def assert_close_scaled(got: torch.Tensor, expected: torch.Tensor, tol: Any, what: str) -> None:
    """``got`` against the float64 ``expected`` at tolerance ``tol`` (a SPEC's ``Tolerance``), the absolute part
    scaled by the largest expected magnitude (attention's gradients grow with the sequence)."""
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(
        got.double(), expected, atol=tol.atol * scale, rtol=tol.rtol, msg=lambda m: f"{what}: {m}"
    )
