"""Failure modes that only a real GPU shows: sticky CUDA errors, device placement, JIT compile errors, CUDA OOM."""

from __future__ import annotations

import pytest

from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.validate import validate

pytestmark = pytest.mark.gpu


def _kinds(result):
    return {f.kind for f in result.findings if f.severity is Severity.error}


def test_an_illegal_address_is_a_crash_and_the_next_job_gets_a_fresh_context(runner, fx):
    crashed = validate(fx("add_problem.py", "reference"), fx("gpu_illegal_address.py", "candidate"), runner=runner)
    assert FindingKind.crash in _kinds(crashed)
    message = next(f.message for f in crashed.findings if f.kind is FindingKind.crash)
    assert "illegal" in message.lower() or "sticky" in message.lower()
    assert validate(fx("add_problem.py", "reference"), fx("add_good.py", "candidate"), runner=runner).ok


def test_an_output_left_on_the_cpu_is_a_device_mismatch(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("gpu_returns_cpu.py", "candidate"), runner=runner)
    assert FindingKind.device_mismatch in _kinds(result)


def test_a_jit_compile_error_comes_back_with_the_kernel_line(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("gpu_compile_error.py", "candidate"), runner=runner)
    finding = next(f for f in result.findings if f.kind is FindingKind.compile_error)
    assert finding.where is not None and finding.where.file.endswith("gpu_compile_error.py")
    assert finding.where.line == 10


def test_cuda_out_of_memory_is_oom(runner, fx):
    result = validate(fx("add_problem.py", "reference"), fx("add_ooms.py", "candidate"), runner=runner)
    assert FindingKind.oom in _kinds(result)


def test_bf16_softmax_passes_on_the_gpu(runner):
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "mcp_server" / "examples"
    result = validate(
        f"{examples / 'softmax_problem.py'}:reference", f"{examples / 'softmax_triton.py'}:softmax", runner=runner
    )
    assert result.ok, result.findings
    assert {r.dtype for r in result.rows} == {"bfloat16"}


def test_a_kernel_on_a_side_stream_the_caller_does_not_wait_for_is_a_stream_race(runner, fx):
    ref = fx("add_problem.py", "reference")
    racy = validate(ref, fx("gpu_side_stream.py", "racy"), runner=runner)
    assert FindingKind.stream_race in _kinds(racy), [f.message for f in racy.findings]
    waits = validate(ref, fx("gpu_side_stream.py", "waits"), runner=runner)
    assert waits.ok, [f.message for f in waits.findings]


def test_cross_entropy_with_class_targets_passes_on_the_gpu_with_the_class_dimension_shrunk(runner, fx):
    result = validate(fx("ce_problem.py", "reference"), fx("ce_kernels.py", "good"), runner=runner, seeds=1)
    assert result.ok, [f.message for f in result.findings]
    status = {c.case: c.status for c in result.cases}
    assert status["derived 10→9"] == "passed" and status["derived 10→1"] == "passed"


def test_a_derived_case_that_poisons_the_cuda_context_of_the_reference_is_dropped_and_listed(runner, fx):
    # torch.gather out of range is a device-side assert on CUDA: the reference's child cannot go on.
    result = validate(fx("gather_problem.py", "reference"), fx("gather_good.py", "candidate"), runner=runner, seeds=1)
    assert result.ok, [f.message for f in result.findings]
    rejected = {c.case for c in result.cases if c.status == "rejected by the reference"}
    assert {"derived 100→99", "derived 100→1"} <= rejected
    assert any(c.case == "derived 100→129" and c.status == "passed" for c in result.cases)


def test_a_reference_that_cannot_run_in_float64_still_gets_an_error_estimate_on_the_gpu(runner, fx):
    result = validate(
        fx("kb_closure_problem.py"), fx("kb_linear_tanh.py", "ModelNew"), runner=runner, seeds=1, derive_shapes=False
    )
    assert result.ok, [f.message for f in result.findings]
    warning = next(f for f in result.findings if f.kind is FindingKind.reference_precision)
    assert "estimated from the reference" in warning.message  # its closure keeps it off the CPU: nudged inputs
    assert any(r.torch_rel_norm_err > 0 for r in result.rows)


def test_an_fp8_gemm_writing_fp8_passes_with_fp32_sums_and_a_twin_short_of_a_k_block_fails(runner, fx):
    # Hopper's default fp8 accumulation is less precise: its result differs from the exact sums' rounding at
    # some elements, by more than one fp8 step where an element is small against the row's sums, and validate
    # says so (measured: 13 of 16384 elements in one case); with max_num_imprecise_acc=0 the sums are fp32's.
    import torch
    from interp_checks import load_file

    gemm, ref = load_file(fx("gpu_fp8_gemm.py")), load_file(fx("gpu_fp8_gemm_problem.py"))
    a, b = (t.cuda() for t in ref.get_inputs())
    expected = ref.reference(a, b).float()
    assert int((gemm.candidate_default_acc(a, b).float() != expected).sum()) > 0
    assert torch.allclose(gemm.candidate(a, b).float(), expected, rtol=0.125, atol=2.0**-9)
    problem = fx("gpu_fp8_gemm_problem.py", "reference")
    result = validate(problem, fx("gpu_fp8_gemm.py", "candidate"), runner=runner)
    assert result.ok, result.findings
    assert FindingKind.mismatch in _kinds(validate(problem, fx("gpu_fp8_gemm.py", "candidate_short"), runner=runner))


def test_an_output_a_thread_finishes_after_the_call_returned_is_judged_as_returned_on_the_gpu(runner):
    # The thread launches the kernel 50 ms after the call returns, and the next call waits for it: on the GPU the
    # launch is quick, so a copy taken after the next call would hold the right values. The judge copies each output
    # when its call returns (after a synchronize), which holds the unwritten allocation. The twin passes.
    from pathlib import Path

    attacks = Path(__file__).resolve().parent.parent / "fixtures" / "validate" / "attacks"
    options = {"runner": runner, "seeds": 2, "derive_shapes": False, "timeout_s": 60}
    late = validate(f"{attacks / 'problem.py'}:reference", f"{attacks / 'late_thread.py'}:candidate", **options)
    assert not late.ok and FindingKind.uninitialized_output in _kinds(late), late.findings
    assert validate(f"{attacks / 'problem.py'}:reference", f"{attacks / 'good.py'}:candidate", **options).ok
