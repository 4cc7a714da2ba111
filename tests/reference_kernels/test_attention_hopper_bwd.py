"""reference_kernels.attention_hopper_bwd: the Gluon backward's gradients against SDPA (float64), with the two
consumer groups in step and one block apart; stage 3's dispatch to it and past it; the rule that picks it; and,
with no GPU, its compile for sm_90a (wgmma, TMA reduce-adds, row statistics by TMA and no global load, register
re-balancing, shared memory fits); the pass that scales and casts dQ."""

from __future__ import annotations

import math
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


# Every schedule of each head dim: (defer, alternate, kv_registers). The shipped one (None: the measured choice)
# is head_dim 64's last and head_dim 128's first.
SCHEDULES = {
    64: [(False, False, False), (True, False, False), (True, True, False), (True, True, True)],
    128: [(False, False, False), (True, False, False), (False, False, True)],
}


def _schedule_id(s: tuple) -> str:
    defer, alternate, kv = s
    return "-".join([("deferred" if defer else "in-step"), ("turns" if alternate else "halves")] + (["kv-regs"] * kv))


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("head_dim", "schedule"),
    [(d, s) for d in hb.HEAD_DIMS for s in SCHEDULES[d]],
    ids=[f"{d}-{_schedule_id(s)}" for d in hb.HEAD_DIMS for s in SCHEDULES[d]],
)
def test_the_gradients_match_sdpa_in_float64(head_dim, schedule, dtype, causal):
    defer, alternate, kv = schedule
    for b, h, s in SHAPES:
        args, expected = _case(b, h, s, head_dim, dtype, causal)
        got = at._attention_backward_hopper(*args, causal, defer=defer, alternate=alternate, kv_registers=kv)
        for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
            assert g.dtype == dtype and g.shape == e.shape
            assert_close_scaled(g, e, at.SPEC.tolerances[dtype], f"{name}, {b}×{h}×{s}×{head_dim} causal={causal}")


@pytest.mark.gpu
@needs_sm90
def test_every_schedule_gives_one_answer_and_repeats_it_bit_for_bit():
    # dQ is summed by reduce-adds in whatever order the programs reach it, so runs may differ in the last
    # bits of dQ; dK and dV are each one program's own sum and must repeat exactly.
    args, _ = _case(2, 4, 1024, 64, torch.bfloat16, True)
    runs = [at._attention_backward_hopper(*args, True, defer=d, alternate=a, kv_registers=kv) for d, a, kv in
            SCHEDULES[64]]  # fmt: skip
    again = at._attention_backward_hopper(*args, True)
    for i, name in enumerate(("dq", "dk", "dv")):
        for run in runs[1:]:
            torch.testing.assert_close(runs[0][i], run[i], atol=2e-2, rtol=2e-2, msg=lambda m, n=name: f"{n}: {m}")
        if name != "dq":
            assert torch.equal(runs[-1][i], again[i]), f"{name} differs between two runs"


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


def test_a_schedule_left_out_is_the_measured_choice_of_its_head_dim_and_turns_need_the_deferred_one():
    assert hb.schedule(64) == SCHEDULES[64][-1] == (True, True, True)
    assert hb.schedule(128) == SCHEDULES[128][0] == (False, False, False)
    # An option given is kept; the ones left out follow it where they depend on it.
    assert hb.schedule(64, defer=False) == (False, False, True)
    assert hb.schedule(64, kv_registers=False) == (True, True, False)
    assert hb.schedule(128, defer=True, kv_registers=True) == (True, False, True)
    for d in hb.HEAD_DIMS:
        with pytest.raises(ValueError, match="needs defer=True"):
            hb.schedule(d, defer=False, alternate=True)
    # Turns at head_dim 128 would need 246 144 bytes of shared memory (compiled for sm_90a without a GPU).
    with pytest.raises(ValueError, match="needs head_dim 64, not 128"):
        hb.schedule(128, defer=True, alternate=True)


def test_the_dq_cast_scales_every_sum_once_and_writes_nothing_past_the_end():
    # The kernel leaves dQ's fp32 sums unscaled; this pass applies the softmax scale while it casts. Three
    # whole blocks and a ragged tail, with a guard past the end that must stay as it was. (Under the interpreter
    # the cast rounds as the GPU does: mcp_server/engine/interp/rounding.py.)
    n = 3 * hb._CAST_BLOCK + 5
    src = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 100
    dst = torch.full((n + 7,), -1.0, dtype=torch.bfloat16)
    scale = 1.0 / math.sqrt(128)
    hb.scale_cast(src, dst[:n], scale)
    assert torch.equal(dst[:n], (src * scale).to(torch.bfloat16))
    assert torch.equal(dst[n:], torch.full((7,), -1.0, dtype=torch.bfloat16))
    # An unscaled cast (what the kernel stored) is not what comes out.
    assert not torch.equal(dst[:n], src.to(torch.bfloat16))


def test_inputs_off_the_gpu_never_take_it():
    q = torch.randn(1, 2, 256, 64, dtype=torch.float16)
    assert not hb.usable(q, q, q, q)


_COMPILE = SM90_COMPILE_PRELUDE + textwrap.dedent(
    """
    from reference_kernels import attention_hopper_bwd as hb
    out = []
    for d, causal in json.loads(sys.argv[1]):
        x = torch.empty(1, 2, 1024, d, dtype=torch.float16)
        acc = torch.empty(2048, d)
        rows = torch.empty(2, 1024)
        args = hb.launch_args(x, x, x, x, acc, x, x, rows, rows, causal)
        k = hb._attn_bwd_hopper.warmup(*args, num_warps=4, maxnreg=hb._MAXNREG, grid=(1,))
        out.append({"case": [d, causal], **report(k)})
    # The Triton pre-pass reads O and dO with plain global loads: the counters' twin.
    from reference_kernels import attention as at
    x = torch.empty(1, 2, 1024, 128, dtype=torch.float16)
    k = at._attn_bwd_preprocess_kernel.warmup(
        x, x, torch.empty(2, 1024), torch.empty(2, 1024, 128), 1024, HEAD_DIM=128, BLOCK_M=64, ZERO_DQ=True, grid=(1,)
    )
    out.append({"case": "pre-pass", **report(k)})
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_it_compiles_for_sm90a_without_a_gpu_with_reduce_adds_and_warp_groups_rebalanced():
    # The shipped schedule of each head dim, causal (the most code: masked, peeled and steady blocks).
    cases = [[64, True], [128, True]]
    rows = run_sm90_compile(_COMPILE, cases)
    assert [r["case"] for r in rows] == [*cases, "pre-pass"]
    rows, prepass = rows[:2], rows[2]
    for row in rows:
        assert row["shared"] <= at._SMEM_BYTES, row
        assert row["wgmma"] > 0 and row["reduce"] > 0, row
        # Consumers raised to 240 registers, the load warp lowered to 24.
        assert {str(hb._CONSUMER_REGS), str(hb._LOADER_REGS)} <= set(row["setmaxnreg"]), row
    # head_dim 64 keeps every value in registers, K and V included; at 128 the five accumulators leave little
    # room (measured on the H100, the in-step schedule there is still the faster one).
    assert rows[0]["spills"] and not any(rows[0]["spills"]), rows[0]
    # Inside the loop the consumers read each query block's log-sum-exp and delta from shared memory, where the
    # load warp's 1-D TMA copies put them: the kernel has no global load at all (the copies are its only source
    # of the row statistics; global loads there cost the main kernel 7–10 % on the H100).
    for row in rows:
        assert row["global_loads"] == 0 and row["tma_1d"] == 2, row
    # The counters see plain loads where a kernel has them (the pre-pass reads O and dO so, by no TMA copy).
    assert prepass["global_loads"] > 0 and prepass["tma_1d"] == 0, prepass
    # At 128 a little spills (72/120 bytes per thread, stores/loads). Two blocks per loop iteration made that
    # 972/1156 and the main kernel 2723 → 3669 µs at 2×32×4096×128 on the H100
    # (results/h100/attention_bwd_schedules_paired_loop.json), so the in-step loop keeps one block per iteration.
    assert rows[1]["spills"] and max(rows[1]["spills"]) <= 256, rows[1]
