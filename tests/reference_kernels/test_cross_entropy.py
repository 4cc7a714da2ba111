"""cross_entropy reference kernel: every stage against PyTorch (loss and dlogits), stage 3's split rows,
and the input checks."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import as_params, case_named, stage_params

from reference_kernels import cross_entropy as mod

SPEC = mod.SPEC
SMALL = [c for c in SPEC.cases if c.small]
# A mean loss's gradient is O(1/N): judge it against its own size, not against 1.
SCALE_FLOOR = 1e-3
IGNORE = mod.IGNORE_INDEX
pytestmark = [
    # All rows ignored: the mean is 0 / 0 = NaN by design; numpy warns under the interpreter.
    pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning"),
]


@pytest.mark.parametrize(("stage", "case", "dtype"), stage_params(SPEC, SMALL, SPEC.interpreter_dtypes))
def test_each_stage_matches_torch_cross_entropy_and_its_gradient(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cpu", scale_floor=SCALE_FLOOR)


@pytest.mark.parametrize("stage", sorted(SPEC.stages))
def test_unit_upstream_gradient_as_from_loss_backward(stage, check):
    # g = 1 exactly, as loss.backward() gives; the other tests use a random g.
    case = case_named(SMALL, "ignore_index rows")
    check(SPEC, stage, case, torch.float32, "cpu", upstream="ones", scale_floor=SCALE_FLOOR)


def test_bfloat16_matches_within_an_ulp_under_the_interpreter(check):
    # One case in bf16: the patched interpreter rounds fp32 → bf16 to nearest even, as the GPU does.
    case = case_named(SMALL, "ignore_index rows")
    check(SPEC, 3, case, torch.bfloat16, "cpu", scale_floor=SCALE_FLOOR)


def test_custom_ignore_index_is_honoured():
    torch.manual_seed(0)
    logits = torch.randn(6, 50, requires_grad=True)
    targets = torch.tensor([1, 7, 7, 3, 7, 0])
    loss = mod.cross_entropy_stage3(logits, targets, ignore_index=7)
    loss.backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = torch.nn.functional.cross_entropy(ref_logits, targets, ignore_index=7)
    ref.backward()
    torch.testing.assert_close(loss, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(logits.grad, ref_logits.grad, atol=1e-7, rtol=1e-5)
    assert torch.all(logits.grad[targets == 7] == 0)


def test_out_of_range_target_gives_a_nan_loss_instead_of_reading_out_of_bounds():
    for stage in SPEC.stages.values():
        for bad in (10, -1):
            assert torch.isnan(stage(torch.randn(2, 10), torch.tensor([3, bad])))


def test_stage3_merges_a_row_split_into_blocks_including_a_block_of_only_minus_infinity():
    # 9000 float32 columns are several blocks; the first is masked out entirely (-inf, as a vocabulary
    # mask gives) and the last is a tail.
    n_blocks, meta, _, _ = mod._split_plan(4, 9000, 4)
    block = meta["BLOCK"]
    assert n_blocks >= 3 and 9000 % block
    torch.manual_seed(0)
    logits = 2.0 * torch.randn(4, 9000, dtype=torch.float64)
    logits[:, :block] = float("-inf")
    targets = torch.tensor([block + 10, 8999, IGNORE, block])
    ours_in = logits.float().requires_grad_(True)
    loss = mod.cross_entropy_stage3(ours_in, targets)
    loss.backward()
    ref_in = logits.clone().requires_grad_(True)
    ref = torch.nn.functional.cross_entropy(ref_in, targets)
    ref.backward()
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss.double(), ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ours_in.grad.double(), ref_in.grad, atol=1e-7, rtol=1e-4)
    assert torch.all(ours_in.grad[:, :block] == 0) and torch.all(ours_in.grad[2] == 0)


def test_stage3_without_gradients_returns_the_loss_only():
    torch.manual_seed(0)
    logits, targets = SPEC.make_inputs({"N": 4, "V": 300, "ignored": 1}, torch.float32, "cpu")
    with torch.no_grad():
        loss = mod.cross_entropy_stage3(logits, targets)
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, targets), atol=1e-6, rtol=1e-5)
    assert loss.grad_fn is None


@pytest.mark.parametrize("stage", sorted(SPEC.stages))
def test_a_second_backward_through_one_graph_accumulates_the_same_gradient(stage):
    torch.manual_seed(0)
    logits, targets = SPEC.make_inputs({"N": 3, "V": 100}, torch.float32, "cpu")
    logits.requires_grad_(True)
    loss = SPEC.stages[stage](logits, targets)
    loss.backward(retain_graph=True)
    loss.backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(ref_logits, targets).backward()
    torch.testing.assert_close(logits.grad, 2 * ref_logits.grad, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize(
    ("logits", "targets", "match"),
    [
        (torch.ones(4, 8), torch.ones(4), "int64 or int32"),
        (torch.ones(2, 4, 8), torch.zeros(2, 4, dtype=torch.int64), r"logits.view\(-1, V\)"),
        (torch.ones(4, 8), torch.zeros(5, dtype=torch.int64), r"targets \[N\]"),
        (torch.ones(4, 8, dtype=torch.float64), torch.zeros(4, dtype=torch.int64), "dtype"),
        (torch.ones(4, 8, device="meta"), torch.zeros(4, dtype=torch.int64, device="meta"), "CUDA device"),
    ],
    ids=["float targets", "3-d logits", "row count mismatch", "float64 logits", "meta device"],
)
def test_launcher_rejects_bad_input_with_actionable_text(logits, targets, match):
    for stage in SPEC.stages.values():
        with pytest.raises(ValueError, match=match):
            stage(logits, targets)


def test_launcher_rejects_a_non_integer_ignore_index():
    with pytest.raises(ValueError, match="ignore_index"):
        mod.cross_entropy_stage3(torch.ones(2, 4), torch.zeros(2, dtype=torch.int64), ignore_index=-100.0)


BF16, FP16, FP32 = SPEC.dtypes
# The GPU run, sized to compile each kernel variant about once (stage 3 tunes nothing; stage 2 autotunes
# one vocabulary size per kernel). Every case through stage 3 in bf16 covers its block sizes from one
# block per row to 32; fp16 and fp32 take one small case each; stage 2 runs one multi-chunk case with
# ignored rows.
GPU_PARAMS = [
    *((3, c, BF16) for c in SPEC.cases),
    (3, case_named(SPEC.cases, "multi-chunk vocabulary with tail"), FP16),
    (3, case_named(SPEC.cases, "ignore_index rows"), FP32),
    (2, case_named(SPEC.cases, "multi-chunk vocabulary with tail"), BF16),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("stage", "case", "dtype"), as_params(GPU_PARAMS))
def test_each_stage_matches_torch_cross_entropy_on_gpu(stage, case, dtype, check):
    check(SPEC, stage, case, dtype, "cuda", scale_floor=SCALE_FLOOR)


def _peak_extra_bytes(fn, logits: torch.Tensor, targets: torch.Tensor) -> int:
    """Peak memory allocated above the inputs during forward + backward, the gradient included."""
    leaf = logits.detach().clone().requires_grad_(True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(leaf, targets).backward()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


@pytest.mark.gpu
def test_stage3_peak_memory_is_at_most_half_of_eager_at_a_128k_vocabulary():
    torch.manual_seed(0)
    logits, targets = SPEC.make_inputs({"N": 4096, "V": 128256, "ignored": 100}, torch.bfloat16, "cuda")
    mod.cross_entropy_stage3(logits.detach().clone().requires_grad_(True), targets).backward()  # autotune first
    ours = _peak_extra_bytes(mod.cross_entropy_stage3, logits, targets)
    eager = _peak_extra_bytes(mod.reference_cross_entropy, logits, targets)
    assert ours <= eager / 2, f"stage 3 peak {ours / 2**20:.0f} MiB vs eager {eager / 2**20:.0f} MiB"
