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
@pytest.mark.parametrize(("causal", "name"), [(False, "round-robin"), (False, "split"), (True, "claimed")])
def test_persistent_programs_with_several_tiles_give_the_one_program_per_tile_results(head_dim, causal, name):
    # 8 query blocks × 6 heads = 48 tiles of 8 key blocks; 1, 5 and 47 programs cycle the K/V ring, the Q slots
    # and the tile-id slots through many tiles (and phases) per program, and 5 and 47 programs of the split
    # schedule share tiles (384 pairs in runs of 76–77 and 8–9). Every tile is computed alike whichever program
    # takes it, so the other schedules repeat one program per tile bit for bit; a shared tile's two shares are
    # summed in another order, so split's results agree within rounding.
    q, k, v = _inputs(2, 3, 1000, head_dim, torch.bfloat16)
    runs = {}
    for n in (None, 1, 5, 47):
        o = torch.empty_like(q)
        lse = torch.empty((6, 1000), device="cuda", dtype=torch.float32)
        if n is None:
            ah.forward(q, k, v, causal, o, lse, name="per-tile")
        else:
            ah.forward(q, k, v, causal, o, lse, n_programs=n, name=name)
        runs[n] = (o, lse)
    for n in (1, 5, 47):
        if name == "split" and n > 1:
            torch.testing.assert_close(runs[n][0], runs[None][0], atol=2e-2, rtol=0, msg=f"{n} programs: output")
            torch.testing.assert_close(runs[n][1], runs[None][1], atol=1e-4, rtol=0, msg=f"{n} programs: lse")
        else:
            assert torch.equal(runs[n][0], runs[None][0]), f"{n} programs: output differs"
            assert torch.equal(runs[n][1], runs[None][1]), f"{n} programs: lse differs"
    expected = at.reference_attention(q.double(), k.double(), v.double(), causal)
    for n in (5, 47):
        _assert_matches(runs[n][0], expected, torch.bfloat16, f"{n} programs")


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


def test_a_per_tile_launch_refuses_a_persistent_grid_and_unknown_schedules_are_named():
    q = torch.empty(1, 1, 128, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="n_programs needs a persistent schedule"):
        ah.forward(q, q, q, True, torch.empty_like(q), None, n_programs=3, name="per-tile")
    with pytest.raises(ValueError, match="n_programs must be at least 1, not 0"):
        ah.forward(q, q, q, False, torch.empty_like(q), None, n_programs=0)
    with pytest.raises(ValueError, match="'cyclic' is not one of per-tile, round-robin, claimed, split"):
        ah.schedule(False, "cyclic")
    with pytest.raises(ValueError, match="non-causal"):
        ah.schedule(True, "split")


def test_causal_tiles_are_claimed_at_run_time_and_full_ones_split_evenly_at_head_dim_64():
    assert ah.schedule(True, head_dim=64) == ah.schedule(True, head_dim=128) == "claimed"
    assert ah.schedule(False, head_dim=64) == "split"
    assert ah.schedule(False, head_dim=128) == "round-robin"
    assert ah.schedule(False, "split", head_dim=128) == "split"
    q = torch.empty(2, 16, 4096, 64, dtype=torch.float16)  # 32 tiles per head, 1024 in all
    for causal in (True, False):
        assert ah.programs(q, causal, sms=132) == 132
    assert ah.programs(q, True, sms=132, name="per-tile") == 1024
    assert ah.programs(q[:, :2, :512], True, sms=132) == 16  # 16 tiles, fewer than SMs: one program each
    # The flags the kernel is compiled with (round-robin, claimed, split) and what each launch carries.
    lse = torch.empty(32, 4096)
    for causal, name, flags in [
        (True, None, (False, True, False)),
        (False, None, (False, False, True)),
        (False, "round-robin", (True, False, False)),
        (False, "split", (False, False, True)),
        (True, "per-tile", (False, False, False)),
    ]:
        args = ah.launch_args(q, q, q, q, lse, causal, name, 132)
        assert tuple(args[-5:-2]) == flags, (causal, name)
    wide = torch.empty(2, 16, 4096, 128, dtype=torch.float16)
    assert tuple(ah.launch_args(wide, wide, wide, wide, lse, False)[-5:-2]) == (True, False, False)
    counter = ah.launch_args(q, q, q, q, lse, True)[5]
    assert counter.dtype == torch.int32 and counter.tolist() == [0], "each claimed launch needs a zeroed counter"
    assert counter is not ah.launch_args(q, q, q, q, lse, True)[5]
    # The K/V ring's depth: as many slots as shared memory holds at each head dim, or the one asked for.
    stages = {d: ah.launch_args(x, x, x, x, lse, True)[-8] for d, x in ((64, q), (128, wide))}
    assert stages == {64: 6, 128: 3} == ah.STAGES
    assert ah.launch_args(q, q, q, q, lse, True, stages=4)[-8] == 4
    ws_acc, ws_ml, flags = ah.launch_args(q, q, q, q, lse, False, "split", 132)[6:9]
    # Two groups' 64 rows per boundary between neighbouring programs, and a zeroed flag for each.
    assert ws_acc.shape == (2 * 133 * 64, 64) and ws_ml.shape == (2 * 133, 128)
    assert flags.dtype == torch.int32 and flags.shape == (2 * 133,) and not flags.any()


_COMPILE = SM90_COMPILE_PRELUDE + textwrap.dedent(
    """
    from reference_kernels import attention_hopper as ah
    out = []
    for d, causal, dtype, name in json.loads(sys.argv[1]):
        q = torch.empty(1, 2, 1000, d, dtype=getattr(torch, dtype))
        lse = torch.empty(2, 1000)
        k = ah._attn_fwd_hopper.warmup(*ah.launch_args(q, q, q, q, lse, causal, name, 4), num_warps=4,
                                       maxnreg=ah._MAXNREG, grid=(1,))
        out.append({"case": [d, causal, dtype, name], **report(k)})
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_it_compiles_for_sm90a_without_a_gpu_with_warp_groups_rebalanced_and_spills_bounded():
    # The variants with the most live registers at head_dim 128: causal masks with claimed tiles (a loop around
    # the tile), where ptxas spills 112/120 bytes per thread, all in a tile's prologue and the masked blocks'
    # branch (the ceiling catches any growth), and the split schedule's merge, which spills nothing.
    # At head_dim 64 the six-slot K/V ring (the most shared memory there) with claimed causal tiles: 8/16 bytes
    # spill, the same as with three slots.
    cases = [[128, True, "float16", "claimed"], [128, False, "bfloat16", "split"], [64, True, "bfloat16", "claimed"]]
    rows = run_sm90_compile(_COMPILE, cases)
    assert rows[0]["spills"] and max(rows[0]["spills"]) <= 128, rows[0]
    assert rows[1]["spills"] and not any(rows[1]["spills"]), rows[1]
    assert rows[2]["spills"] and max(rows[2]["spills"]) <= 16, rows[2]
    for row in rows:
        assert row["shared"] <= at._SMEM_BYTES, row
        assert row["wgmma"] > 0, row
        # Consumers raised to 240 registers, the load warp lowered to 24.
        assert {str(ah._CONSUMER_REGS), str(ah._LOADER_REGS)} <= set(row["setmaxnreg"]), row
