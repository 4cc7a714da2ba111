"""Outputs the judge cannot read as values, or reads only in part: each comes back as a verdict whose finding says
what the candidate returned and what the reference returns (never a traceback from the judge), a reference that
returns one is a usage error naming the fix, and unsigned integer outputs are judged as other integers are."""

from __future__ import annotations

import pytest

from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.validate import validate


def errors(result):
    return [f for f in result.findings if f.severity is Severity.error]


@pytest.mark.filterwarnings("ignore:.*quantize_per_tensor", "ignore:TypedStorage is deprecated")
@pytest.mark.parametrize(
    ("name", "kind", "says", "seeds"),
    [
        # Two seeds: the later seeds' checks (same address, stale results) compare the outputs' bytes, a sparse
        # tensor's as its dense values and a quantized one's as its integers.
        ("sparse", FindingKind.shape_mismatch, "returned a sparse_coo tensor", 2),
        ("quantized", FindingKind.dtype_mismatch, "returned a quantized qint8 tensor", 2),
        ("uint32_bits", FindingKind.dtype_mismatch, "dtype uint32; the reference returns float32", 2),
        ("uint64_bits", FindingKind.dtype_mismatch, "dtype uint64; the reference returns float32", 2),
        ("complex_", FindingKind.dtype_mismatch, "returned complex64 values where the reference returns float32", 2),
    ],
)
def test_an_output_the_judge_cannot_read_as_the_references_fails_saying_what_came_back(
    runner, fx, name, kind, says, seeds
):
    result = validate(fx("add_problem.py", "reference"), fx("add_odd_outputs.py", name), runner=runner, seeds=seeds)
    assert not result.ok and result.cases and all(c.status == "failed" for c in result.cases)
    found = [f.message for f in errors(result) if f.kind is kind]
    assert any(says in m for m in found), [f"{f.kind.value}: {f.message}" for f in result.findings]
    if name in ("sparse", "quantized"):
        assert any("return a dense strided float32 tensor, as the reference does" in m for m in found), found


def test_an_unsigned_integer_output_passes_when_right_and_fails_when_wrong(runner, fx):
    # uint32 xor: PyTorch's CPU kernels have few ops for uint32 (no +, <, max), and the judge needs none of them.
    problem = fx("uint_xor_problem.py", "reference")
    right = validate(problem, fx("uint_xor_kernels.py", "candidate"), runner=runner, seeds=2)
    assert right.ok, [f"{f.kind.value}: {f.message}" for f in right.findings]
    assert {r.dtype for r in right.rows} == {"uint32"} and any(c.derived for c in right.cases)
    wrong = validate(problem, fx("uint_xor_kernels.py", "drops_top_bit"), runner=runner, seeds=2)
    assert not wrong.ok and {f.kind for f in errors(wrong)} == {FindingKind.mismatch}


@pytest.mark.filterwarnings("ignore:.*quantize_per_tensor", "ignore:TypedStorage is deprecated")
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("quantized", "returns a quantized qint8 tensor"),
        ("sparse_mask", "returns a sparse_coo tensor"),
        ("sparse_sum", "returns a sparse_coo tensor"),
    ],
)
def test_a_reference_whose_output_holds_no_values_is_a_usage_error_naming_the_fix(runner, fx, name, says):
    with pytest.raises(UsageError) as info:
        validate(fx("odd_references.py", name), fx("add_good.py", "candidate"), runner=runner, seeds=1)
    text = str(info.value)
    assert says in text and "dense strided tensor" in text and "Traceback" not in text, text


def test_findings_that_differ_only_in_their_case_are_said_once_naming_every_case():
    # Must merge: the same finding for every case (three seeds of base, two derived sizes). Twins stay apart: a
    # message with different figures, another kind, a finding without a case.
    from mcp_server.engine.device import DeviceInfo
    from mcp_server.engine.models import Finding, FindingKind, Severity
    from mcp_server.engine.validate import _Judge

    device = DeviceInfo(device="cpu", interpreter=True, torch="t", triton="t", python="p")
    judge = _Judge({}, {}, {}, None, None, (), device)
    same = "torch compute ops did the kernel's work (100%)"
    for case, seed in (("base", 1), ("base", 2), ("derived 8→7", 1), ("base", 3), ("derived 8→9", 1)):
        judge.add(FindingKind.torch_compute, f"{case}: {same}", case, seed)
    half = "derived 8→17: torch compute ops did the kernel's work (50%)"
    judge.add(FindingKind.torch_compute, half, "derived 8→17", 1)
    judge.add(FindingKind.mismatch, f"derived 8→9: {same}", "derived 8→9", 1)
    judge.add(FindingKind.evasion, "a call used the dispatch switch", severity=Severity.error)
    found = [(f.kind, f.message) for f in judge.merged_findings()]
    assert found == [
        (FindingKind.torch_compute, f"base (3 seeds), derived 8→7, derived 8→9: {same}"),
        (FindingKind.torch_compute, half),
        (FindingKind.mismatch, f"derived 8→9: {same}"),
        (FindingKind.evasion, "a call used the dispatch switch"),
    ]
    assert all(isinstance(f, Finding) for f in judge.capped_findings())


def test_outputs_overlap_only_where_some_element_is_the_same_memory():
    import torch

    from mcp_server.engine.jobs.trees import elements_overlap, overlapping_outputs

    buf = torch.zeros(64, 2)
    flat = torch.zeros(128)
    assert overlapping_outputs([flat, flat]) == [(0, 1)]
    assert overlapping_outputs([flat, 3, flat.view(8, 16)]) == [(0, 2)]
    # Interleaved columns and halves of one allocation: no element in common.
    assert not elements_overlap(buf[:, 0], buf[:, 1])
    assert not elements_overlap(flat[:64], flat[64:])
    # One element in common, in views that are neither dense nor the same shape.
    assert elements_overlap(buf[:, 0], buf.view(-1)[1:].as_strided((1,), (1,), 126))
    assert elements_overlap(flat[::2], flat[62:64])
    assert not elements_overlap(flat[::2], flat[63:64])
    # A view in other dtype over the same bytes, and one reaching one byte into an element.
    assert elements_overlap(flat.view(torch.int32)[5:6], flat[5:6])
    assert elements_overlap(flat.view(torch.uint8)[23:24], flat[5:6])
    assert not elements_overlap(flat.view(torch.uint8)[24:25], flat[5:6])
    assert not elements_overlap(flat.view(torch.uint8)[0:4][::2], flat[1:2])
    # Empty tensors and separate allocations never do.
    assert overlapping_outputs([flat[:0], flat[:0], torch.zeros(3)]) == []
    assert not elements_overlap(torch.zeros(4), torch.zeros(4))


@pytest.mark.parametrize(
    ("reference", "candidate", "fails"),
    [
        ("reference", "same_buffer", True),
        ("reference", "view_beside", True),
        ("reference", "halves", False),
        ("reference", "interleaved", False),
        ("reference_shared", "same_buffer", False),
    ],
)
def test_two_outputs_in_the_same_memory_fail_where_the_reference_returns_them_apart(
    runner, fx, reference, candidate, fails
):
    result = validate(fx("twin_problem.py", reference), fx("twin_outputs.py", candidate), runner=runner, seeds=1)
    overlap = [f for f in errors(result) if f.kind is FindingKind.outputs_overlap]
    if fails:
        assert not result.ok and overlap, result.findings
        assert "outputs 0 and 1 are the same memory (the reference returns them apart)" in overlap[0].message
    else:
        assert result.ok and not overlap, [f"{f.kind.value}: {f.message}" for f in result.findings]
