"""reference_kernels.attention_hopper_bwd: the Gluon backward's gradients against SDPA (float64), with the two
consumer groups in step and one block apart; stage 3's dispatch to it and past it; the rule that picks it; and,
with no GPU, its compile for sm_90a (wgmma, TMA reduce-adds, register re-balancing, shared memory fits)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from kernel_cases import SM90_COMPILE_PRELUDE, assert_close_scaled, run_sm90_compile

from reference_kernels import attention as at
from reference_kernels import attention_hopper_bwd as hb

ROOT = Path(__file__).resolve().parents[2]
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not SM90, reason="needs an sm_90 GPU (H100 or H200): wgmma is sm_90a only")

# (batch, heads, seq): one key block (a causal program with only its two diagonal query blocks), three (query
# blocks wrapping around in the full case, the Q/dO ring and dSᵀ buffers cycling), and ten.
SHAPES = [(1, 1, 128), (2, 3, 384), (1, 2, 1280)]


def _case(b: int, h: int, s: int, d: int, dtype: torch.dtype, causal: bool) -> tuple:
    g = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=g) for _ in range(4))
    o, lse = at._attention_stage3(q, k, v, causal, store_lse=True)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    expected = torch.autograd.grad(at.reference_attention(*leaves, causal), leaves, do.double())
    return (q, k, v, o, lse, do), expected


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("defer", [False, True], ids=["in-step", "deferred"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("head_dim", hb.HEAD_DIMS)
def test_the_gradients_match_sdpa_in_float64(head_dim, dtype, causal, defer):
    for b, h, s in SHAPES:
        args, expected = _case(b, h, s, head_dim, dtype, causal)
        got = at._attention_backward_hopper(*args, causal, defer=defer)
        for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
            assert g.dtype == dtype and g.shape == e.shape
            assert_close_scaled(g, e, at.SPEC.tolerances[dtype], f"{name}, {b}×{h}×{s}×{head_dim} causal={causal}")


@pytest.mark.gpu
@needs_sm90
def test_both_schedules_give_one_answer_and_repeat_it_bit_for_bit():
    # dQ is summed by reduce-adds in whatever order the programs reach it, so runs may differ in the last
    # bits of dQ; dK and dV are each one program's own sum and must repeat exactly.
    args, _ = _case(2, 4, 1024, 64, torch.bfloat16, True)
    in_step = at._attention_backward_hopper(*args, True, defer=False)
    deferred = at._attention_backward_hopper(*args, True, defer=True)
    again = at._attention_backward_hopper(*args, True, defer=True)
    for name, a, b, c in zip(("dq", "dk", "dv"), in_step, deferred, again, strict=True):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2, msg=lambda m, n=name: f"{n}: {m}")
        if name != "dq":
            assert torch.equal(b, c), f"{name} differs between two runs"


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize(("seq", "gluon"), [(1024, True), (1000, False)], ids=["multiple-of-128", "tail"])
def test_stage3_takes_the_gluon_backward_where_it_applies_and_the_triton_one_elsewhere(monkeypatch, seq, gluon):
    calls = []
    real = hb.backward
    monkeypatch.setattr(hb, "backward", lambda *a, **kw: calls.append(a[6]) or real(*a, **kw))
    g = torch.Generator(device="cuda").manual_seed(seq)
    q, k, v, do = (torch.randn(1, 3, seq, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
    # A non-contiguous dO (a transposed copy's view) is made contiguous before the rule is asked.
    do = do.transpose(2, 3).contiguous().transpose(2, 3)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    at.attention_stage3(*leaves, True).backward(do)
    assert calls == ([True] if gluon else [])
    ref = [t.double().requires_grad_(True) for t in (q, k, v)]
    at.reference_attention(*ref, True).backward(do.double())
    for name, got, leaf in zip("qkv", leaves, ref, strict=True):
        assert_close_scaled(got.grad, leaf.grad, at.SPEC.tolerances[torch.float16], f"d{name}")


def test_the_rule_takes_sm90_16_bit_head_dims_64_and_128_whole_128_key_blocks_and_aligned_tensors():
    ok = dict(capability=(9, 0), dtype=torch.bfloat16, head_dim=128, seq=4096, rows=4096 * 64, aligned=True)
    assert hb.applies(**ok)
    assert hb.applies(**{**ok, "dtype": torch.float16, "head_dim": 64, "seq": 128})
    for change in (
        {"capability": (8, 0)},
        {"capability": (10, 0)},
        {"dtype": torch.float32},
        {"head_dim": 32},
        {"head_dim": 256},
        {"seq": 4000},
        {"seq": 64},
        {"seq": 0},
        {"rows": 2**31},
        {"aligned": False},
    ):
        assert not hb.applies(**{**ok, **change}), change


def test_inputs_off_the_gpu_never_take_it():
    q = torch.randn(1, 2, 256, 64, dtype=torch.float16)
    assert not hb.usable(q, q, q, q)


_COMPILE = SM90_COMPILE_PRELUDE + textwrap.dedent(
    """
    from reference_kernels import attention_hopper_bwd as hb
    out = []
    for d, causal, defer in json.loads(sys.argv[1]):
        x = torch.empty(1, 2, 1024, d, dtype=torch.float16)
        acc = torch.empty(2048, d)
        rows = torch.empty(2, 1024)
        args = hb.launch_args(x, x, x, x, acc, x, x, rows, rows, causal, defer)
        k = hb._attn_bwd_hopper.warmup(*args, num_warps=4, maxnreg=hb._MAXNREG, grid=(1,))
        out.append({"case": [d, causal, defer], **report(k)})
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_it_compiles_for_sm90a_without_a_gpu_with_reduce_adds_and_warp_groups_rebalanced():
    # The shipped schedule of each head dim, causal (the most code: masked, peeled and steady blocks).
    cases = [[64, True, True], [128, True, False]]
    rows = run_sm90_compile(_COMPILE, cases)
    assert [r["case"] for r in rows] == cases
    for row in rows:
        assert row["shared"] <= at._SMEM_BYTES, row
        assert row["wgmma"] > 0 and row["reduce"] > 0, row
        # Consumers raised to 240 registers, the load warp lowered to 24.
        assert {str(hb._CONSUMER_REGS), str(hb._LOADER_REGS)} <= set(row["setmaxnreg"]), row
    # head_dim 64 keeps every value in registers; at 128 the five accumulators leave little room (measured
    # on the H100, the in-step schedule there is still the faster one).
    assert rows[0]["spills"] and not any(rows[0]["spills"]), rows[0]
