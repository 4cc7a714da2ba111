"""Every reference kernel's SPEC as the ptt tools see it: exported cases carry their call options
positionally, and the bytes/FLOPs hooks read them back."""

from __future__ import annotations

import importlib
import inspect

import pytest

from reference_kernels import NAMES


def _specs():
    return [importlib.import_module(f"reference_kernels.{name}").SPEC for name in NAMES]


@pytest.mark.parametrize("spec", _specs(), ids=lambda s: s.name)
def test_exported_cases_pass_call_options_to_the_parameters_they_name(spec):
    # The tools call reference and candidate with positional arguments only: a case's options (causal,
    # activation, semiring) must land on the parameters of those names, or a "causal" case runs non-causal.
    _, _, bytes_moved, flops = spec.exports()
    for case in (c for c in spec.cases if c.small):
        args = spec.positional_args(case)
        options = spec.call_kwargs(case.dims)
        for fn in (spec.reference, *spec.stages.values()):
            bound = inspect.signature(fn).bind(*args).arguments
            assert {name: bound.get(name) for name in options} == options, (spec.name, case.label, fn.__name__)
        assert flops(*args) == spec.flops(case.dims, args[0].dtype), (spec.name, case.label)
        assert bytes_moved(*args) == spec.bytes_moved(case.dims, args[0].dtype), (spec.name, case.label)
