"""reference_kernels.attention_hopper: the Gluon forward against SDPA (float64) and the Triton kernels' lse,
with one tile or many per program; stage 3's dispatch to it, backward included; the rule that picks it;
and, with no GPU, its compile for sm_90a (wgmma, register re-balancing, no spills, shared memory fits)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from kernel_cases import SM90_COMPILE_PRELUDE, assert_close_scaled, run_sm90_compile

from reference_kernels import attention as at
from reference_kernels import attention_hopper as ah

ROOT = Path(__file__).resolve().parents[2]
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not SM90, reason="needs an sm_90 GPU (H100 or H200): wgmma is sm_90a only")

# (batch, heads, seq, causal): sequence tails inside a block and inside a 64-row half, one block, several.
SHAPES = [(1, 2, 1000, False), (2, 3, 777, True), (1, 1, 64, True), (1, 1, 200, False), (3, 5, 1500, True)]


def _inputs(b: int, h: int, s: int, d: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
    return tuple(torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))


def _assert_matches(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert_close_scaled(got, expected, at.SPEC.tolerances[dtype], what)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("head_dim", ah.HEAD_DIMS)
def test_the_forward_matches_sdpa_and_writes_the_lse_the_triton_backward_reads(head_dim, dtype):
    for b, h, s, causal in SHAPES:
        q, k, v = _inputs(b, h, s, head_dim, dtype)
        o = torch.empty_like(q)
        lse = torch.empty((b * h, s), device="cuda", dtype=torch.float32)
        ah.forward(q, k, v, causal, o, lse)
        what = f"{b}×{h}×{s}×{head_dim} causal={causal}"
        _assert_matches(o, at.reference_attention(q.double(), k.double(), v.double(), causal), dtype, what)
        # The Triton kernels (TMA path) give the row log-sum-exp their backward expects.
        _, lse_triton = at._attention_stage3(q, k, v, causal, use_desc=True, store_lse=True)
        torch.testing.assert_close(lse, lse_triton, atol=1e-3, rtol=0, msg=lambda m, w=what: f"lse, {w}: {m}")


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("head_dim", ah.HEAD_DIMS)
@pytest.mark.parametrize(
    ("causal", "dynamic"),
    [(False, None), (False, True), (True, None)],
    ids=["full-round-robin", "full-claimed", "causal-claimed"],
)
def test_a_persistent_program_with_several_tiles_gives_bit_identical_results(head_dim, causal, dynamic):
    # 8 query blocks × 6 heads = 48 tiles; 1, 5 and 47 programs cycle the K/V ring, the Q slots and the tile-id
    # slots through many tiles (and phases) per program. The reference run: one program per tile (causal) or
    # the default grid; every tile is computed alike whichever program takes it.
    q, k, v = _inputs(2, 3, 1000, head_dim, torch.bfloat16)
    runs = {}
    for n in (None, 1, 5, 47):
        o = torch.empty_like(q)
        lse = torch.empty((6, 1000), device="cuda", dtype=torch.float32)
        if n is None:
            ah.forward(q, k, v, causal, o, lse, dynamic=False if causal else dynamic)
        else:
            ah.forward(q, k, v, causal, o, lse, n_programs=n, dynamic=dynamic)
        runs[n] = (o, lse)
    for n in (1, 5, 47):
        assert torch.equal(runs[n][0], runs[None][0]), f"{n} programs: output differs"
        assert torch.equal(runs[n][1], runs[None][1]), f"{n} programs: lse differs"
    expected = at.reference_attention(q.double(), k.double(), v.double(), causal)
    _assert_matches(runs[1][0], expected, torch.bfloat16, "one program for every tile")


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_stage3_takes_the_gluon_forward_when_the_tiles_fill_the_gpu_and_its_gradients_hold(monkeypatch, causal):
    calls = []
    real = ah.forward
    monkeypatch.setattr(ah, "forward", lambda *a, **kw: calls.append(a[3]) or real(*a, **kw))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    heads = -(-sms // 8) + 1  # 8 query blocks of 128 per head: more tiles than SMs
    q, k, v = (t.requires_grad_(True) for t in _inputs(1, heads, 1024, 64, torch.float16))
    o = at.attention_stage3(q, k, v, causal)
    assert calls == [causal], "stage 3 did not run the Gluon forward"
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    expected = at.reference_attention(*leaves, causal)
    _assert_matches(o.detach(), expected.detach(), torch.float16, "output")
    do = torch.randn_like(o)
    o.backward(do)
    expected.backward(do.double())
    for name, got, leaf in zip("qkv", (q.grad, k.grad, v.grad), leaves, strict=True):
        _assert_matches(got, leaf.grad, torch.float16, f"d{name}")


def test_the_rule_takes_sm90_16_bit_head_dims_64_and_128_aligned_and_filling_the_gpu():
    ok = dict(capability=(9, 0), dtype=torch.bfloat16, head_dim=128, aligned=True, n_tiles=132, sms=132)
    assert ah.applies(**ok)
    assert ah.applies(**{**ok, "dtype": torch.float16, "head_dim": 64})
    for change in (
        {"capability": (8, 0)},
        {"capability": (10, 0)},
        {"dtype": torch.float32},
        {"head_dim": 32},
        {"head_dim": 256},
        {"aligned": False},
        {"n_tiles": 131},
    ):
        assert not ah.applies(**{**ok, **change}), change


def test_inputs_off_the_gpu_never_take_it():
    q = torch.randn(1, 200, 1024, 64, dtype=torch.float16)
    assert not ah.usable(q, q, q)


def test_a_causal_launch_with_fixed_tiles_refuses_a_persistent_grid():
    q = torch.empty(1, 1, 128, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="n_programs needs dynamic=True"):
        ah.forward(q, q, q, True, torch.empty_like(q), None, n_programs=3, dynamic=False)


def test_causal_tiles_are_claimed_at_run_time_by_one_program_per_sm_and_full_ones_go_round_robin():
    q = torch.empty(2, 16, 4096, 64, dtype=torch.float16)  # 32 tiles per head, 1024 in all
    assert ah.programs(q, causal=True, sms=132) == 132
    assert ah.programs(q, causal=False, sms=132) == 132
    assert ah.programs(q, causal=True, sms=132, dynamic=False) == 1024
    assert ah.programs(q[:, :2, :512], causal=True, sms=132) == 16  # 16 tiles, fewer than SMs: one program each
    # The flags the kernel is compiled with: PERSISTENT (round-robin) and DYNAMIC (claimed), and a counter.
    lse = torch.empty(32, 4096)
    *_, persistent, dynamic, _, _ = ah.launch_args(q, q, q, q, lse, True)
    assert (persistent, dynamic) == (False, True)
    *_, persistent, dynamic, _, _ = ah.launch_args(q, q, q, q, lse, False)
    assert (persistent, dynamic) == (True, False)
    args = ah.launch_args(q, q, q, q, lse, True)
    counter = args[5]
    assert counter.dtype == torch.int32 and counter.tolist() == [0], "each launch needs its own zeroed counter"
    assert args[5] is not ah.launch_args(q, q, q, q, lse, True)[5]


_COMPILE = SM90_COMPILE_PRELUDE + textwrap.dedent(
    """
    from reference_kernels import attention_hopper as ah
    out = []
    for d, causal, dtype in json.loads(sys.argv[1]):
        q = torch.empty(1, 2, 1000, d, dtype=getattr(torch, dtype))
        lse = torch.empty(2, 1000)
        k = ah._attn_fwd_hopper.warmup(*ah.launch_args(q, q, q, q, lse, causal), num_warps=4,
                                       maxnreg=ah._MAXNREG, grid=(1,))
        out.append({"case": [d, causal, dtype], **report(k)})
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_it_compiles_for_sm90a_without_a_gpu_with_warp_groups_rebalanced_and_spills_bounded():
    # The variant with the most live registers: head_dim 128, causal masks, claimed tiles (a loop around the
    # tile). ptxas spills 112/120 bytes per thread there, in a tile's prologue and the masked blocks' branch,
    # none in the unmasked loop; the ceiling catches any growth. One compile keeps this near 6 CPU-seconds.
    cases = [[128, True, "float16"]]
    for row in run_sm90_compile(_COMPILE, cases):
        assert row["spills"] and max(row["spills"]) <= 128, row
        assert row["shared"] <= at._SMEM_BYTES, row
        assert row["wgmma"] > 0, row
        # Consumers raised to 240 registers, the load warp lowered to 24.
        assert {str(ah._CONSUMER_REGS), str(ah._LOADER_REGS)} <= set(row["setmaxnreg"]), row
