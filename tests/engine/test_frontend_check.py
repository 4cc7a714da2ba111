"""Under the interpreter, validate also asks the GPU compiler's front end whether it takes each launched kernel.

A kernel body runs as Python under the interpreter, so code no GPU compiles gives right answers there; each of
these fixtures passes every case on its values and must still fail, and each twin must pass with no finding.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.trust.frontend import _rebinding, frontend_findings
from mcp_server.engine.validate import validate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PROBLEM = FIXTURES / "validate" / "attacks" / "problem.py"
KERNELS = FIXTURES / "validate" / "interp_only" / "kernels.py"

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="on a GPU every launched kernel is compiled for real"
)


def _validate(runner, candidate: str, reference: str = f"{PROBLEM}:reference"):
    return validate(reference, candidate, runner=runner, seeds=1, determinism=False, timeout_s=60)


def _compile_errors(result):
    return [f for f in result.findings if f.kind is FindingKind.compile_error and f.severity is Severity.error]


@pytest.mark.parametrize(
    ("name", "line", "says"),
    [
        ("candidate_helper", 31, "Cannot access global variable _fma_python"),  # a plain Python function
        ("candidate_break", 48, "Break"),
        ("candidate_built_break", 76, "Break"),  # built inside a function: found by its code, not its name
    ],
)
def test_a_kernel_only_the_interpreter_runs_fails_at_the_line_the_compiler_refuses(runner, name, line, says):
    result = _validate(runner, f"{KERNELS}:{name}")
    assert all(c.status == "passed" for c in result.cases)  # the values are right…
    assert not result.ok  # …and the verdict fails on the compiler's refusal
    (finding,) = _compile_errors(result)
    assert says in finding.message and "cuda:90" in finding.message
    assert finding.where is not None and finding.where.file.endswith("kernels.py") and finding.where.line == line
    assert result.summary.startswith("FAIL (compile_error)")
    # The derived sizes' launches are refused too: said once, as the error, not again as derived-case warnings.
    assert not [f for f in result.findings if f.kind is FindingKind.unsupported_shape]


def test_a_refusal_only_in_a_derived_case_is_that_cases_warning_as_on_a_gpu(runner):
    # fp8 tl.dot needs K >= 32 on the GPU; the derived case with K = 1 runs under the interpreter only. (One size
    # for M, K and N: the kernel's refusals of the sizes that are not powers of two stay under the findings' cap.)
    interp = FIXTURES / "interp"
    result = _validate(
        runner, f"{interp / 'fp8_kernels.py'}:dequant_matmul", f"{interp / 'fp8_square_matmul_problem.py'}:reference"
    )
    assert result.ok
    (refused,) = [f for f in result.findings if "GPU compiler refuses" in f.message]
    assert refused.kind is FindingKind.unsupported_shape and refused.severity is Severity.warning
    assert "K >= 32" in refused.message and refused.message.startswith("derived")


@pytest.mark.parametrize("name", ["candidate", "candidate_built", "candidate_dtype"])
def test_the_twins_the_compiler_takes_pass_with_nothing_to_report(runner, name):
    result = _validate(runner, f"{KERNELS}:{name}")
    assert result.ok, result.findings
    assert not [f for f in result.findings if f.kind is FindingKind.compile_error]


def test_tensor_descriptor_arguments_are_typed_as_triton_types_them(runner):
    fixture = FIXTURES / "validate" / "interp_only" / "descriptor.py"
    result = _validate(runner, f"{fixture}:candidate", f"{fixture}:reference")
    assert result.ok, result.findings
    assert not [f for f in result.findings if f.kind is FindingKind.compile_error]


def test_a_kernel_built_from_a_string_has_no_source_for_the_check_and_fails(runner):
    result = _validate(runner, f"{FIXTURES / 'validate' / 'interp_only' / 'exec_kernel.py'}:candidate")
    assert all(c.status == "passed" for c in result.cases)
    assert any("has no source file" in f.message for f in _compile_errors(result))


def test_a_helper_rebound_at_run_time_is_evasion_and_a_constant_set_before_launch_a_warning():
    function = {"name": "_combine", "ran": "function f.py:20", "file": "kernel f.py:6", "path": "/p/f.py"}
    assert _rebinding("k (f.py:11)", function).severity is Severity.error
    constant = {"name": "SCALE", "ran": "constexpr 2", "file": "constexpr 1", "path": "/p/f.py"}
    finding = _rebinding("k (f.py:11)", constant)
    assert finding.severity is Severity.warning and "the file's value" in finding.message


def test_a_launch_the_check_never_saw_is_a_warning_not_a_pass_it_did_not_give():
    findings = frontend_findings(None, {"kernels": [], "not_kept": 0}, {"k (kernel.py:3)"}, {}, [], ".")
    (finding,) = findings
    assert finding.severity is Severity.warning and "k (kernel.py:3)" in finding.message
    assert frontend_findings(None, {"kernels": [], "not_kept": 0}, set(), {}, [], ".") == []
    # Past the kept specialisations: how many were not checked is said, and unseen names are not said again.
    (past,) = frontend_findings(None, {"kernels": [], "not_kept": 3}, {"k (kernel.py:3)"}, {}, [], ".")
    assert past.severity is Severity.warning and "3 launches past them were not checked" in past.message


def test_triton_languages_own_builtins_are_not_user_code_and_a_replacement_is():
    import triton
    import triton.language as tl

    from mcp_server.engine.interp import install
    from mcp_server.engine.jobs import launch_specs

    install()
    launch_specs.record_interpreted()  # what the spaces hold before user code: a dataclass's exec'd methods
    fma, mul = tl.fma, tl.tensor.__mul__

    @triton.jit
    def _uses_the_standard_library(x_ptr, n, B: tl.constexpr):
        o = tl.arange(0, B)
        v = tl.load(x_ptr + o, mask=o < n)
        tl.store(x_ptr + o, tl.sum(v, 0) + tl.exp(v) + tl.fma(v, v, v) * v, mask=o < n)

    _uses_the_standard_library[(1,)](__import__("torch").randn(16), 16, B=16)
    assert launch_specs.patched_language() == []  # the interpreter's own swaps are library code
    space: dict = {}
    exec("def mul(a, b):\n    return a\n", space)  # code built by exec counts as the user's
    import numpy

    exp = numpy.exp
    try:
        tl.fma, tl.tensor.__mul__ = (lambda a, b, c: a), space["mul"]
        numpy.exp = lambda a: a  # the interpreter computes tl.exp with it
        assert launch_specs.patched_language() == [
            "numpy.exp",
            "triton.language.fma",
            "triton.language.tensor.__mul__",
        ]
    finally:
        tl.fma, tl.tensor.__mul__, numpy.exp = fma, mul, exp
    assert launch_specs.patched_language() == []


def test_a_kernel_whose_file_changed_between_its_run_and_the_check_is_evasion(runner, tmp_path):
    # The fixture writes a cheating kernel into its own file for the run and puts the valid one back: a copy.
    attacks = FIXTURES / "validate" / "attacks"
    for name in ("rewrites_source.py", "problem.py"):
        (tmp_path / name).write_text((attacks / name).read_text())
    result = validate(
        f"{tmp_path / 'problem.py'}:reference",
        f"{tmp_path / 'rewrites_source.py'}:candidate",
        runner=runner,
        seeds=1,
        derive_shapes=False,
        determinism=False,
    )
    assert all(c.status == "passed" for c in result.cases)  # the cheating source gave right values
    assert not result.ok
    assert any(f.kind is FindingKind.evasion and "source the interpreter ran" in f.message for f in result.findings)
    assert (tmp_path / "rewrites_source.py").read_text() == (attacks / "rewrites_source.py").read_text()


@pytest.mark.parametrize(
    ("fixture", "says"),
    [
        ("interpreter_only_file.py", "does not import without the interpreter"),
        ("interpreter_only_branch.py", "defines no function _fma_kernel at line 13"),
    ],
)
def test_a_file_whose_kernel_exists_only_under_the_interpreter_fails(runner, fixture, says):
    result = _validate(runner, f"{FIXTURES / 'validate' / 'attacks' / fixture}:candidate")
    assert all(c.status == "passed" for c in result.cases)
    assert any(says in f.message for f in _compile_errors(result)), result.findings


def test_a_check_that_does_not_finish_fails_the_verdict():
    class Outcome:
        usage_error, result = None, None
        failure = type("F", (), {"message": "timed out after 120 s"})()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Runner:
        def run(self, *args, **kwargs):
            return Outcome()

    spec = {"kernel": "k", "path": "/p/k.py", "line": 3}
    (finding,) = frontend_findings(Runner(), {"kernels": [spec], "not_kept": 0}, {"k (k.py:3)"}, {}, [], ".")
    assert finding.severity is Severity.error and "did not finish" in finding.message
