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
