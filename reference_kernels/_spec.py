"""The SPEC contract every reference kernel module fills in.

A SPEC is the single source of truth for one op: tests, benchmarks, ``benchmarks/kernels_cli.py`` and
the ptt tools all read it. A module ends with::

    SPEC = KernelSpec(...)
    get_test_cases, get_bench_cases, bytes_moved, flops = SPEC.exports()

so the file is also a valid reference module for ``ptt validate`` / ``ptt bench``
(``get_test_cases() -> dict[label, list[args]]``, ``bytes_moved(*args)``, ``flops(*args)``).
Nothing here allocates at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import Any

import torch

Dims = Mapping[str, int]


@dataclass(frozen=True)
class Case:
    """One labelled problem size. ``label`` names the code path it exercises."""

    label: str
    dims: dict[str, int]
    # Cheap enough for the Triton interpreter on a CPU (CI). Large cases run on the GPU only.
    small: bool = True


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class KernelSpec:
    name: str
    summary: str
    # make_inputs(dims, dtype, device) -> tuple of call arguments; uses torch's global RNG so a caller
    # that seeds it gets reproducible inputs.
    make_inputs: Callable[[Dims, torch.dtype, str], tuple[Any, ...]]
    reference: Callable[..., Any]
    # stage number -> public function with the reference's signature. The highest stage is the best.
    stages: Mapping[int, Callable[..., Any]]
    cases: tuple[Case, ...]
    bench_cases: tuple[Case, ...]
    dtypes: tuple[torch.dtype, ...]
    # dtypes the CPU interpreter tests sweep over every stage and case (bf16 gets one case per kernel).
    interpreter_dtypes: tuple[torch.dtype, ...]
    tolerances: Mapping[torch.dtype, Tolerance]
    # Fewest bytes the op must move through device memory, and its floating-point operations.
    bytes_moved: Callable[[Dims, torch.dtype], int]
    flops: Callable[[Dims, torch.dtype], int]
    # dims_of(*args) -> dims: reads the sizes back off a call's arguments (inverse of make_inputs).
    dims_of: Callable[..., Dims]
    # Indices of arguments that take gradients; empty means forward only.
    grad_inputs: tuple[int, ...] = ()
    # The bar this kernel is held to on the GPU, in words, for the README table.
    bar: str = ""
    # Extra keyword arguments a dims mapping implies (e.g. causal=True), passed to every callable. They are
    # the parameters right after the inputs, in this order, so the exported cases pass them positionally
    # (the ptt tools call with positional arguments), and dims_of reads them back from there.
    call_kwargs: Callable[[Dims], dict[str, Any]] = field(default=lambda dims: {})
    # stage_limit(stage, dims) -> why that stage does not take a case of these dims (an early stage that keeps
    # a row in one block refuses longer rows), or None when it does. Tests and kernels_cli run each stage on the
    # cases it takes.
    stage_limit: Callable[[int, Dims], str | None] = field(default=lambda stage, dims: None)

    @property
    def has_backward(self) -> bool:
        return bool(self.grad_inputs)

    @property
    def best(self) -> Callable[..., Any]:
        return self.stages[max(self.stages)]

    def default_device(self) -> str:
        return "cuda" if torch.cuda.is_available() else "cpu"

    def default_dtype(self) -> torch.dtype:
        return self.dtypes[0] if torch.cuda.is_available() else self.interpreter_dtypes[0]

    def inputs_for(self, case: Case, dtype: torch.dtype | None = None, device: str | None = None) -> tuple:
        return self.make_inputs(case.dims, dtype or self.default_dtype(), device or self.default_device())

    def positional_args(self, case: Case) -> list[Any]:
        """A case as one positional argument list: its inputs, then its call_kwargs' values."""
        return [*self.inputs_for(case), *self.call_kwargs(case.dims).values()]

    def takes(self, stage: int, case: Case) -> bool:
        return self.stage_limit(stage, case.dims) is None

    def listed_cases(self) -> list[Case]:
        """The cases ``get_test_cases()`` gives: without a GPU, the small ones."""
        small_only = not torch.cuda.is_available()
        return [c for c in self.cases if c.small or not small_only]

    def left_out(self, stage: int) -> dict[str, str]:
        """The listed cases this stage does not take, each with why."""
        limits = {c.label: self.stage_limit(stage, c.dims) for c in self.listed_cases()}
        return {label: why for label, why in limits.items() if why is not None}

    def test_cases(self, stage: int | None = None) -> dict[str, list[Any]]:
        """``get_test_cases()``: the listed cases as positional argument lists; given a stage, only those that
        stage takes."""
        return {c.label: self.positional_args(c) for c in self.listed_cases() if stage is None or self.takes(stage, c)}

    @property
    def stage_cases(self) -> SimpleNamespace:
        """``stage_cases.stage<N>()``: ``get_test_cases()`` for stage N alone, so that ``--inputs
        path.py:SPEC.stage_cases.stage<N>`` validates a stage on the cases it takes."""
        return SimpleNamespace(**{f"stage{s}": partial(self.test_cases, s) for s in self.stages})

    def exports(self) -> tuple[Callable[[], dict], Callable[[], dict], Callable[..., int], Callable[..., int]]:
        """Module-level hooks that make the kernel file a reference module for the ptt tools."""

        def get_test_cases() -> dict[str, list[Any]]:
            return self.test_cases()

        def get_bench_cases() -> dict[str, list[Any]]:
            return {c.label: self.positional_args(c) for c in self.bench_cases}

        def bytes_moved(*args: Any) -> int:
            return int(self.bytes_moved(self.dims_of(*args), _dtype_of(args)))

        def flops(*args: Any) -> int:
            return int(self.flops(self.dims_of(*args), _dtype_of(args)))

        return get_test_cases, get_bench_cases, bytes_moved, flops


def row_limit(max_cols: int, looping_stage: int) -> Callable[[int, Dims], str | None]:
    """``stage_limit`` for a row kernel whose stages before ``looping_stage`` keep a row of ``dims["N"]`` columns
    in one block of at most ``max_cols`` (their launchers refuse longer rows)."""

    def limit(stage: int, dims: Dims) -> str | None:
        if stage < looping_stage and dims["N"] > max_cols:
            return (
                f"rows of {dims['N']} columns exceed stage {stage}'s one-block limit of {max_cols} "
                f"(stage {looping_stage} loops over column chunks)"
            )
        return None

    return limit


def _dtype_of(args: tuple[Any, ...]) -> torch.dtype:
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a.dtype
    return torch.float32
