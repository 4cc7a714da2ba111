"""Usage errors are usage errors: a kernel given for its launcher, or a launcher whose parameters cannot take
the inputs, is reported once as a UsageError (exit 2) with the signature; an error in a kernel's body points at
the kernel's line. Each check has a fixture that must fail it and a twin that must pass."""

from __future__ import annotations

import pytest
import torch

from mcp_server.engine.audit import audit
from mcp_server.engine.errors import UsageError
from mcp_server.engine.validate import validate

HAS_GPU = torch.cuda.is_available()
QUICK = {"seeds": 1, "derive_shapes": False}


def _line_of(path: str, marker: str) -> int:
    with open(path) as fh:
        return next(i for i, line in enumerate(fh, 1) if marker in line)


def test_a_kernel_given_as_the_candidate_is_a_usage_error_naming_the_launchers(runner, fx):
    with pytest.raises(UsageError) as err:
        validate(fx("add_problem.py", "reference"), fx("usage_launchers.py", "_add_kernel"), runner=runner, **QUICK)
    text = str(err.value)
    assert "`_add_kernel` is a @triton.jit kernel" in text
    assert "Pass the Python function that launches it" in text
    assert "add, add_into, add_three" in text  # the public launchers, found through _launch


def test_the_launcher_of_that_kernel_passes(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("usage_launchers.py", "add"), runner=runner, **QUICK)
    assert result.ok, result.findings


def test_a_launcher_that_wants_more_inputs_is_one_usage_error_with_its_signature(runner, fx):
    with pytest.raises(UsageError) as err:
        validate(fx("add_problem.py", "reference"), fx("usage_launchers.py", "add_three"), runner=runner)
    text = str(err.value)
    assert "add_three(x, y, bias) takes 3 required arguments" in text
    assert "the reference's inputs are 2: f32[1000], f32[1000]" in text
    assert "'bias'" in text and text.count("TypeError") == 0


def test_a_launcher_with_an_optional_extra_parameter_passes(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("usage_launchers.py", "add_into"), runner=runner, **QUICK)
    assert result.ok, result.findings


def test_a_modelnew_whose_forward_wants_more_inputs_is_a_usage_error(runner, fx):
    with pytest.raises(UsageError) as err:
        validate(fx("kb_problem.py"), fx("usage_kb_forward.py"), runner=runner, **QUICK)
    text = str(err.value)
    assert "ModelNew.forward(x, residual) takes 2 required arguments" in text
    assert "inputs are 1: f32[16,200]" in text


def test_a_modelnew_whose_forward_takes_the_inputs_passes(runner, fx):
    result = validate(fx("kb_problem.py"), fx("kb_good.py"), runner=runner, **QUICK)
    assert result.ok, result.findings


def test_an_error_in_a_kernels_body_points_at_the_kernel_line(runner, fx):
    spec = fx("kernel_line_error.py", "candidate")
    result = validate(fx("add_problem.py", "reference"), spec, runner=runner, **QUICK)
    assert not result.ok
    located = [f for f in result.findings if f.where is not None and f.severity.value == "error"]
    assert located, result.findings
    line = _line_of(spec.rsplit(":", 1)[0], "# the bad line")
    for finding in located:
        assert finding.where.file.endswith("kernel_line_error.py") and finding.where.line == line, finding
        assert finding.where.column == 30  # `x + pad`, as `ptt compile` shows it
        assert "make_shape_compatible" in finding.message or "incompatible" in finding.message


def test_an_error_in_an_imported_kernel_module_points_at_that_file(runner, fx):
    result = validate(
        fx("add_problem.py", "reference"), fx("kernel_line_helper.py", "candidate"), runner=runner, **QUICK
    )
    assert not result.ok
    kernels = fx("_kernel_line_kernels.py")
    located = [f for f in result.findings if f.where is not None]
    assert located, result.findings
    assert {(f.where.file, f.where.line) for f in located} == {(kernels, _line_of(kernels, "# the bad line"))}


def test_audit_refuses_a_kernel_named_as_the_launcher(runner, fx):
    with pytest.raises(UsageError, match=r"is a @triton\.jit kernel"):
        audit(fx("usage_launchers.py", "_add_kernel"), sections=("compiled",), runner=runner)


def test_an_out_style_reference_returning_none_is_told_to_return_its_argument(runner, fx):
    candidate = fx("out_arg_kernels.py", "candidate")
    with pytest.raises(UsageError, match="out= style"):
        validate(fx("out_arg_problem.py", "reference_returning_none"), candidate, runner=runner, **QUICK)
    returning = validate(fx("out_arg_problem.py", "reference"), candidate, runner=runner, **QUICK)
    assert returning.ok, returning.findings
