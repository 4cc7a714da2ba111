"""What the interpreter shows that stock Triton's hides: TF32 dots, out-of-bounds addresses, every config.

Each check has a candidate that must fail it and a twin that must pass.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mcp_server.engine.interp import tf32
from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.validate import validate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "interp"
INTERPRETER = not torch.cuda.is_available()


def fx(name: str, attr: str) -> str:
    return f"{FIXTURES / name}:{attr}"


def errors(result):
    return [f for f in result.findings if f.severity is Severity.error]


# --- TF32 arithmetic (pure functions) ---------------------------------------------------------------


def _bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def _float(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def test_tf32_truncation_drops_the_13_low_mantissa_bits():
    x = np.array([_float(0x3F801FFF), _float(0xBF80_1000), 1.0, np.inf, -np.inf], dtype=np.float32)
    out = tf32.round_tf32(x, "trunc").view(np.uint32)
    assert out.tolist() == [0x3F800000, 0xBF800000, 0x3F800000, 0x7F800000, 0xFF800000]
    assert np.isnan(tf32.round_tf32(np.array([np.nan], dtype=np.float32), "trunc")[0])


def test_tf32_rna_rounds_ties_away_from_zero_and_rne_to_even():
    tie_even = _float(0x3F801000)  # kept bits end in 0, dropped bits exactly half
    tie_odd = _float(0x3F803000)  # kept bits end in 1
    x = np.array([tie_even, tie_odd, -tie_even], dtype=np.float32)
    assert tf32.round_tf32(x, "rna").view(np.uint32).tolist() == [0x3F802000, 0x3F804000, 0xBF802000]
    assert tf32.round_tf32(x, "rne").view(np.uint32).tolist() == [0x3F800000, 0x3F804000, 0xBF800000]


def test_tf32_dot_is_coarser_than_fp32_and_tf32x3_recovers_it():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 256)).astype(np.float32)
    b = rng.standard_normal((256, 32)).astype(np.float32)
    truth = a.astype(np.float64) @ b.astype(np.float64)
    zero = np.zeros((32, 32), np.float32)
    err = {p: np.abs(tf32.dot(a, b, zero, p) - truth).max() for p in ("tf32", "tf32x3", "ieee")}
    assert err["tf32"] > 50 * err["ieee"]
    assert err["tf32x3"] < 4 * err["ieee"]
    # A dot with the identity returns the operand exactly as the tensor core saw it.
    eye = np.eye(256, dtype=np.float32)
    seen = tf32.dot(a, eye, np.zeros((32, 256), np.float32), "tf32")
    assert np.array_equal(seen.view(np.uint32), tf32.round_tf32(a, tf32.ROUNDING).view(np.uint32))


# --- through validate, under the interpreter ------------------------------------------------------

needs_interpreter = pytest.mark.skipif(not INTERPRETER, reason="checks the interpreter's emulation")


@pytest.mark.slow
@needs_interpreter
def test_a_default_precision_fp32_matmul_fails_as_it_does_on_the_gpu(runner):
    result = validate(fx("matmul_problem.py", "reference"), fx("matmul_tf32.py", "candidate"), runner=runner)
    assert not result.ok
    assert FindingKind.mismatch in {f.kind for f in errors(result)}
    assert any("TF32" in c for c in result.interpreter_caveats)
    # The mismatch itself says why and names the fix (its twins below pass, with nothing to say).
    said = [f.message for f in errors(result) if f.kind is FindingKind.mismatch and not f.message.startswith("…")]
    assert said and all('input_precision="ieee"' in m for m in said), said


@pytest.mark.slow
@needs_interpreter
@pytest.mark.parametrize("twin", ["candidate_tf32x3", "candidate_ieee"])
def test_tf32x3_and_ieee_matmuls_pass_the_fp32_tolerance(runner, twin):
    result = validate(fx("matmul_problem.py", "reference"), fx("matmul_tf32.py", twin), runner=runner)
    assert result.ok, result.findings


@needs_interpreter
def test_an_unmasked_load_past_the_end_is_out_of_bounds_with_the_kernel_line(runner):
    result = validate(fx("../validate/add_problem.py", "reference"), fx("add_oob.py", "candidate"), runner=runner)
    assert not result.ok
    oob = [f for f in errors(result) if f.kind is FindingKind.out_of_bounds]
    assert oob, result.findings
    where = oob[0].where
    source = (FIXTURES / "add_oob.py").read_text().splitlines()
    assert where is not None and where.file.endswith("add_oob.py")
    assert source[where.line - 1].strip() == "x = tl.load(x_ptr + offs)"
    assert "`x_ptr`" in oob[0].message and "offsets 0..999" in oob[0].message


@needs_interpreter
def test_masked_twin_is_in_bounds(runner):
    result = validate(
        fx("../validate/add_problem.py", "reference"), fx("add_oob.py", "candidate_masked"), runner=runner
    )
    assert result.ok, result.findings
    assert result.interpreter and result.interpreter_caveats
    assert any("races" in c for c in result.interpreter_caveats)


def test_tensor_descriptor_loads_and_stores_pass_the_address_checks_and_a_plain_load_past_the_end_does_not(runner):
    # Descriptor loads hand the interpreter their cache and eviction options by keyword: the address checks once
    # refused them (a TypeError on every right kernel using descriptors, the matmul and attention reference kernels
    # among them).
    problem = fx("../validate/add_problem.py", "reference")
    right = validate(problem, fx("add_descriptor.py", "candidate"), runner=runner)
    assert right.ok, right.findings
    oob = validate(problem, fx("add_descriptor.py", "candidate_oob"), runner=runner)
    assert FindingKind.out_of_bounds in {f.kind for f in errors(oob)}, oob.findings


@pytest.mark.slow
def test_every_autotune_config_is_validated_and_the_failing_one_named(runner):
    result = validate(fx("rowsum_problem.py", "reference"), fx("rowsum_autotuned.py", "candidate"), runner=runner)
    assert not result.ok
    bad = [f.message for f in errors(result) if f.kind is FindingKind.mismatch]
    assert any("autotune config 1 of 2 of `_rowsum_one_block` (BLOCK=128" in m for m in bad)
    assert not any("autotune config 0 of 2" in m for m in bad)
    assert any(r.output.endswith("@config1") and not r.ok for r in result.rows)


@pytest.mark.slow
def test_a_kernel_right_in_every_config_passes(runner):
    result = validate(
        fx("rowsum_problem.py", "reference"), fx("rowsum_autotuned.py", "candidate_looped"), runner=runner
    )
    assert result.ok, result.findings
    assert any(r.output.endswith("@config1") and r.ok for r in result.rows)
    # The seed on which the one-row sum of config 1 (blocks of 128) was 9.5× PyTorch's own error off: a right
    # kernel, which the norm of a single value must not fail (compare.FEW_ELEMENTS).
    again = validate(
        fx("rowsum_problem.py", "reference"), fx("rowsum_autotuned.py", "candidate_looped"), seed=3729788, runner=runner
    )
    assert again.ok, again.findings


@pytest.mark.slow
def test_configs_the_kernels_own_pruning_drops_are_not_run(runner):
    # The 128-wide config would drop columns of the 300-long rows, but pruning never lets it run there.
    result = validate(
        fx("rowsum_problem.py", "reference"), fx("rowsum_autotuned.py", "candidate_pruned"), runner=runner
    )
    assert result.ok, result.findings
    tiny = [c for c in result.cases if c.case == "derived 300→1"]
    assert tiny and tiny[0].status == "passed"
    # Rows of one element keep both configs: the narrow one ran there and was judged.
    assert any(r.case == "derived 300→1" and r.output.endswith("@config1") for r in result.rows)


@needs_interpreter
def test_an_unmasked_store_past_the_end_is_out_of_bounds(runner):
    result = validate(fx("../validate/add_problem.py", "reference"), fx("add_oob.py", "candidate_store"), runner=runner)
    oob = [f for f in errors(result) if f.kind is FindingKind.out_of_bounds]
    assert oob and "out-of-bounds store" in oob[0].message and "`out_ptr`" in oob[0].message


@needs_interpreter
def test_pointers_read_from_a_table_are_not_taken_for_out_of_bounds(runner):
    result = validate(
        fx("../validate/add_problem.py", "reference"), fx("add_pointer_table.py", "candidate"), runner=runner
    )
    assert result.ok, result.findings


def test_a_gpu_crash_says_how_to_find_the_faulting_line():
    from mcp_server.engine.runner.child import classify_exception

    failure = classify_exception(RuntimeError("CUDA error: an illegal memory access was encountered"), set())
    assert failure.kind is FindingKind.crash
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck" in failure.message


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="with a GPU a Gluon kernel runs: the message is for machines without one"
)
def test_a_gluon_launch_without_a_gpu_is_named_with_the_fix_and_other_driver_errors_are_not():
    import importlib.util

    from mcp_server.engine.runner.child import classify_exception

    path = Path(__file__).resolve().parents[1] / "fixtures" / "validate" / "add_gluon.py"
    spec = importlib.util.spec_from_file_location("ptt_test_add_gluon", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(RuntimeError) as raised:
        module.candidate(torch.randn(10), torch.randn(10))
    failure = classify_exception(raised.value, {str(path)})
    assert failure.kind is FindingKind.exception
    assert failure.message.startswith("_add_kernel is a Gluon kernel (triton.experimental.gluon)")
    assert "where a GPU is" in failure.message and "0 active drivers" in failure.message
    # The same words raised anywhere else stay a plain exception.
    plain = classify_exception(RuntimeError("0 active drivers ([]). There should only be one."), set())
    assert plain.message == "RuntimeError: 0 active drivers ([]). There should only be one."
