"""reference_kernels.matmul_hopper: the Gluon matmul against a float64 product (tile tails, every epilogue), stage
3's dispatch to it, the rule that picks it, and, with no GPU, its compile for sm_90a (wgmma, register
re-balancing, no spills, shared memory fits)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from kernel_cases import SM90_COMPILE_PRELUDE, run_sm90_compile

from reference_kernels import attention as at
from reference_kernels import matmul as mm
from reference_kernels import matmul_hopper as mh

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not SM90, reason="needs an sm_90 GPU (H100 or H200): wgmma is sm_90a only")

# (M, N, K): whole tiles; tails in M, N and K at once; K shorter than one block; a tall and a wide problem.
SHAPES = [(4096, 4096, 512), (4000, 4104, 1000), (33000, 384, 72), (2048, 16896, 40)]


def _expected(a, b, bias, activation: str) -> torch.Tensor:
    out = a.double() @ b.double()
    if bias is not None:
        out = out + bias.double()
    return {
        "none": lambda x: x,
        "relu": torch.relu,
        "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
        "silu": torch.nn.functional.silu,
    }[activation](out)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_the_gluon_matmul_matches_a_float64_product_with_every_epilogue_and_tile_tail(dtype):
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
        b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
        bias = torch.randn(n, device="cuda", dtype=dtype, generator=g)
        for used, activation in ((None, "none"), (bias, "none"), (bias, "relu"), (bias, "gelu"), (bias, "silu")):
            # A canary in C: every element must be written, tails included.
            c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
            assert mh.usable(a, b, c, used), (m, n, k)
            mh.matmul(a, b, c, used, mm.ACTIVATIONS[activation])
            expected = _expected(a, b, used, activation)
            err = ((c.double() - expected).abs().max() / expected.abs().max()).item()
            assert err < 1e-2, f"{m}×{n}×{k} {activation} bias={used is not None}: relative max error {err}"


@pytest.mark.gpu
@needs_sm90
def test_stage3_hands_the_problems_the_gluon_kernel_serves_to_it_and_keeps_the_rest():
    a = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    mine = mh.matmul(a, b, torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16), None, 0)
    # Same kernel, same order of sums: bit for bit.
    torch.testing.assert_close(mm.matmul_stage3(a, b), mine, rtol=0, atol=0)
    # A transposed B (not row-major) and a small problem (fewer tiles than SMs) take the Triton kernel, still right.
    for x, y in ((a, b.t().contiguous().t()), (a[:256], b[:, :256])):
        c = torch.empty(x.shape[0], y.shape[1], device="cuda", dtype=x.dtype)
        assert not mh.usable(x, y, c, None)
        expected = x.double() @ y.double()
        err = ((mm.matmul_stage3(x, y).double() - expected).abs().max() / expected.abs().max()).item()
        assert err < 1e-2, err


def test_stage3_dispatches_only_when_left_to_choose(monkeypatch):
    # Routing alone, on the CPU: a stand-in Gluon kernel that claims every problem and marks its result.
    calls = []

    def fake(a, b, c, bias, act):
        calls.append(act)
        return c.fill_(7)

    monkeypatch.setattr(mh, "usable", lambda *_: True)
    monkeypatch.setattr(mh, "matmul", fake)
    a = torch.randn(64, 32)
    b = torch.randn(32, 48)
    assert torch.equal(mm._matmul_stage3(a, b, None, mm.ACTIVATIONS["relu"]), torch.full((64, 48), 7.0))
    assert calls == [mm.ACTIVATIONS["relu"]]
    # A caller that picks the path or the tile (the tests' sweeps) gets the Triton kernel it asked for.
    out = mm._matmul_stage3(a.half(), b.half(), None, 0, use_tma=False)
    assert calls == [mm.ACTIVATIONS["relu"]], "use_tma given: the Triton kernel must run"
    torch.testing.assert_close(out.float(), a.half().float() @ b.half().float(), atol=2e-2, rtol=2e-2)
    monkeypatch.setattr(mh, "usable", lambda *_: False)
    out = mm._matmul_stage3(a.half(), b.half(), None, 0)
    assert calls == [mm.ACTIVATIONS["relu"]], "a problem the Gluon kernel does not serve must not reach it"
    torch.testing.assert_close(out.float(), a.half().float() @ b.half().float(), atol=2e-2, rtol=2e-2)


def test_the_rule_takes_sm90_fp16_bf16_aligned_problems_that_fill_the_gpu():
    ok = dict(capability=(9, 0), dtype=torch.bfloat16, M=4096, N=4096, K=4096, sms=132, aligned=True)
    assert mh.applies(**ok)
    assert mh.applies(**{**ok, "dtype": torch.float16})
    # 132 SMs: 12 × 11 tiles of 128×256 fill them, one tile row fewer does not.
    assert mh.applies(**{**ok, "M": 12 * 128, "N": 11 * 256})
    assert not mh.applies(**{**ok, "M": 11 * 128, "N": 11 * 256})
    for bad in (
        {"capability": (8, 0)},
        {"capability": (10, 0)},
        {"dtype": torch.float32},
        {"K": 0},
        {"aligned": False},
    ):
        assert not mh.applies(**{**ok, **bad}), bad


def test_shared_layouts_are_computed_once_per_block_and_match_gluons_choice():
    from triton.experimental.gluon import language as gl

    from reference_kernels._gluon import shared_layout

    layout = shared_layout(torch.bfloat16, 64, 256)
    assert layout is shared_layout(torch.bfloat16, 64, 256)
    assert layout == gl.NVMMASharedLayout.get_default_for([64, 256], gl.bfloat16)
    # fp32 blocks (the attention backward's dQ staging) and fp16 ones differ from the bf16 one where they must.
    assert shared_layout(torch.float32, 64, 64) == gl.NVMMASharedLayout.get_default_for([64, 64], gl.float32)
    assert shared_layout(torch.float16, 128, 64) != shared_layout(torch.float32, 128, 64)
    # A vector block (the attention backward's [64] row statistics) takes the rank-1 layout.
    vector = shared_layout(torch.float32, 64)
    assert vector == gl.NVMMASharedLayout.get_default_for([64], gl.float32) and vector.rank == 1
    assert vector is shared_layout(torch.float32, 64)
    with pytest.raises(KeyError):
        shared_layout(torch.float64, 64, 64)


def test_tensors_off_the_gpu_never_take_it():
    a = torch.randn(4096, 4096, dtype=torch.float16)
    assert not mh.usable(a, a, a, None)


_COMPILE = SM90_COMPILE_PRELUDE + textwrap.dedent(
    """
    from reference_kernels import matmul_hopper as mh
    out = []
    for has_bias, act, split in json.loads(sys.argv[1]):
        a = torch.empty(4096, 4096, dtype=torch.bfloat16)
        bias = torch.empty(4096, dtype=torch.bfloat16) if has_bias else None
        stages = 4 if split else mh.STAGES
        args = mh.launch_args(a, a, a, bias, act, stages=stages, epilogue_split=split)
        k = mh._matmul_hopper.warmup(*args, num_warps=4, maxnreg=mh._MAXNREG, grid=(1,))
        out.append({"case": [has_bias, act, split], **report(k)})
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_it_compiles_for_sm90a_without_a_gpu_with_wgmma_rebalanced_registers_and_no_spills():
    # The shipped kernel plain and with the longest epilogue (bias + gelu), and the four-slot kernel with its
    # split epilogue (the most shared memory).
    cases = [[False, 0, False], [True, mm.ACTIVATIONS["gelu"], False], [True, mm.ACTIVATIONS["silu"], True]]
    rows = run_sm90_compile(_COMPILE, cases)
    assert [r["case"] for r in rows] == cases
    for row in rows:
        assert row["shared"] <= at._SMEM_BYTES, row
        # Two consumer warpgroups × four 64×256×16 products per 64-wide K block.
        assert row["wgmma"] == 8, row
        assert {str(mh._CONSUMER_REGS), str(mh._LOADER_REGS)} <= set(row["setmaxnreg"]), row
        assert row["spills"] and not any(row["spills"]), row
