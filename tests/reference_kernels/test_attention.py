"""reference_kernels.attention: every stage against SDPA (float64, math backend), both stage-3 load
paths, every autotuned tile on the GPU, input checks."""

from __future__ import annotations

import math

import pytest
import torch
import triton
from kernel_cases import assert_close_scaled, label_ids

from reference_kernels import attention as at

SPEC = at.SPEC
HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"
SMALL_CASES = [c for c in SPEC.cases if c.small]
ALL_CASES = list(SPEC.cases)
# The other dtypes run on one small case per head-dim class (tiles and layouts differ by dtype only
# in the element type): GPU test time goes to code paths, not to recompiling them.
OTHER_DTYPE_CASES = [c for c in SPEC.cases if c.label in ("seq 40, causal → diagonal + tail", "d 128, seq 48, causal")]


@pytest.mark.parametrize("stage", sorted(SPEC.stages))
@pytest.mark.parametrize("case", SMALL_CASES, ids=label_ids(SMALL_CASES))
@pytest.mark.parametrize("dtype", SPEC.interpreter_dtypes, ids=str)
def test_every_stage_matches_the_reference_on_the_small_cases(check, stage, case, dtype):
    check(SPEC, stage, case, dtype, DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
@pytest.mark.parametrize("case", ALL_CASES, ids=label_ids(ALL_CASES))
def test_every_stage_matches_the_reference_on_the_gpu_for_every_case(check, stage, case):
    check(SPEC, stage, case, SPEC.dtypes[0], "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
@pytest.mark.parametrize("case", OTHER_DTYPE_CASES, ids=label_ids(OTHER_DTYPE_CASES))
@pytest.mark.parametrize("dtype", SPEC.dtypes[1:], ids=str)
def test_every_stage_matches_the_reference_on_the_gpu_in_the_other_dtypes(check, stage, case, dtype):
    check(SPEC, stage, case, dtype, "cuda")


def _sweep_inputs(head_dim: int):
    torch.manual_seed(0)
    # seq 352: with 128-row blocks two full blocks and a 96-row tail; with 64- and 128-key blocks
    # unmasked blocks, the diagonal and a partial last block; two heads, so descriptor reads run
    # past the first head's end.
    q, k, v = (torch.randn(1, 2, 352, head_dim, device="cuda").half() for _ in range(3))
    expected = at.reference_attention(q.double(), k.double(), v.double(), True)
    return q, k, v, expected


def _assert_matches(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert_close_scaled(got, expected, SPEC.tolerances[torch.float16], what)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", sorted(at._FWD_TILES))
def test_every_forward_tile_matches_the_reference_on_the_gpu(monkeypatch, untimed, head_dim):
    # Pretend the small sweep problem fills the GPU: the autotuners then compile the head-dim class's
    # whole tile list in parallel, and each tile below runs from the compile cache.
    monkeypatch.setattr(at, "_fills_gpu", lambda *_: True)
    untimed(at._attn_fwd_split_tuned, at._attn_fwd_tuned)
    q, k, v, expected = _sweep_inputs(head_dim)
    named = {"o_ptr": q, "N_CTX": q.shape[2]}
    # Stage 3 on the path the GPU gives it (descriptors on Hopper); the pointer path's tiles are a subset
    # and run in the non-contiguous and small cases.
    use_desc = at._descriptors_usable(q, k, v)
    _assert_matches(at._attention_stage3(q, k, v, True)[0], expected, "stage 3 autotuned")
    for cfg in at._prune_fwd(at._attn_fwd_split_tuned.configs, named, HEAD_DIM=head_dim, USE_DESC=use_desc):
        got, _ = at._attention_stage3(q, k, v, True, use_desc=use_desc, config=cfg)
        _assert_matches(got, expected, f"stage 3, use_desc={use_desc}, {cfg}")
    tiles = at._prune_fwd(at._attn_fwd_tuned.configs, named, HEAD_DIM=head_dim)
    _assert_matches(at._attention_stage12(q, k, v, True, tuned=True)[0], expected, "stage 2 autotuned")
    for cfg in tiles:
        _assert_matches(at._attention_stage12(q, k, v, True, tuned=True, config=cfg)[0], expected, f"stage 2, {cfg}")


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", sorted(at._BWD_DKDV_TILES))
def test_every_backward_tile_matches_the_reference_gradients_on_the_gpu(monkeypatch, untimed, head_dim):
    monkeypatch.setattr(at, "_fills_gpu", lambda *_: True)
    untimed(at._attn_bwd_dkdv_tuned, at._attn_bwd_dq_tuned)
    q, k, v, _ = _sweep_inputs(head_dim)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref = at.reference_attention(*leaves, True)
    do = torch.randn(ref.shape, device="cuda").half()
    ref.backward(do.double())
    # One forward tile for the saved lse (the forward tiles have their own test).
    small = triton.Config(at._STAGE1_CONFIG, num_warps=at._STAGE1_WARPS, num_stages=at._STAGE1_STAGES)
    o, lse = at._attention_stage3(q, k, v, True, store_lse=True, config=small)
    # The autotuned backward compiles the class's dK/dV and dQ tiles in parallel first.
    as_config = lambda t: triton.Config({"BLOCK_M": t[0], "BLOCK_N": t[1]}, num_stages=t[2], num_warps=t[3])
    pairs = zip(at._BWD_DKDV_TILES[head_dim], at._BWD_DQ_TILES[head_dim], strict=True)
    for what, configs in [("autotuned", None), *((f"{a} / {b}", (as_config(a), as_config(b))) for a, b in pairs)]:
        grads = at._attention_backward(q, k, v, o, lse, do, True, configs=configs)
        for name, got, leaf in zip("qkv", grads, leaves, strict=True):
            _assert_matches(got, leaf.grad, f"d{name}, {what}")


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", sorted(at._BWD_FUSED_TILES))
def test_every_one_pass_backward_tile_matches_the_reference_gradients_on_the_gpu(monkeypatch, untimed, head_dim):
    monkeypatch.setattr(at, "_fills_gpu", lambda *_: True)
    untimed(at._attn_bwd_fused_tuned)
    q, k, v, _ = _sweep_inputs(head_dim)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    do = torch.randn(q.shape, device="cuda").half()
    at.reference_attention(*leaves, True).backward(do.double())
    small = triton.Config(at._STAGE1_CONFIG, num_warps=at._STAGE1_WARPS, num_stages=at._STAGE1_STAGES)
    o, lse = at._attention_stage3(q, k, v, True, store_lse=True, config=small)
    as_config = lambda t: triton.Config({"BLOCK_M": t[0], "BLOCK_N": t[1]}, num_stages=t[2], num_warps=t[3])
    # The autotuned run times every tile into one dQ accumulator: the pre-hook must zero it each time.
    runs = [("autotuned", None, None)]
    runs += [(f"{t}, reduce={r}", as_config(t), r) for t in at._BWD_FUSED_TILES[head_dim] for r in (True, False)]
    for what, config, reduce in runs:
        grads = at._attention_backward_fused(q, k, v, o, lse, do, True, config=config, dq_reduce=reduce)
        for name, got, leaf in zip("qkv", grads, leaves, strict=True):
            _assert_matches(got, leaf.grad, f"d{name}, {what}")


def test_every_forward_tile_fits_shared_memory_and_splits_the_diagonal():
    for head_dim, tiles in at._FWD_TILES.items():
        for tile in (*tiles, at._SMALL_FWD_TILE):
            block_m, block_n, _, num_warps, _, _ = tile
            assert block_m % block_n == 0, tile
            # Q plus the K/V ring, with 1 KiB for the compiler's barriers and scratch.
            assert at._fwd_smem_bytes(tile, head_dim) + 1024 <= at._SMEM_BYTES, tile
            # The fp32 accumulator stays at ≤ 64 values per thread.
            assert block_m * head_dim <= 64 * 32 * num_warps, tile


def test_manual_attention_agrees_with_the_sdpa_reference():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 33, 32, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        # manual_attention computes in fp32 whatever the input dtype.
        expected = at.reference_attention(q, k, v, causal)
        torch.testing.assert_close(at.manual_attention(q, k, v, causal), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("use_desc", [True, False], ids=["tma-descriptors", "pointers"])
def test_stage3_agrees_through_tma_descriptors_and_through_pointers(use_desc, causal):
    if use_desc and HAS_GPU and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA descriptors need sm_90+")
    torch.manual_seed(0)
    # seq 72 with the interpreter's 32×16 tiles: unmasked blocks, a diagonal pair and a partial tail,
    # and (2 heads) rows past one head's end that belong to the next head in the descriptor view.
    q, k, v = (torch.randn(1, 2, 72, 64, device=DEVICE).half() for _ in range(3))
    got, _ = at._attention_stage3(q, k, v, causal, use_desc=use_desc)
    torch.testing.assert_close(got, at.reference_attention(q, k, v, causal), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("use_desc", [True, False], ids=["tma-descriptors", "pointers"])
@pytest.mark.parametrize("one_pass", [False, True], ids=["two-kernels", "one-pass"])
def test_backward_agrees_through_tma_descriptors_and_through_pointers(one_pass, use_desc, causal):
    if use_desc and HAS_GPU and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA descriptors need sm_90+")
    torch.manual_seed(0)
    # seq 72 with the interpreter's 16×32 (dK/dV, one pass) and 32×16 (dQ) tiles: masked diagonal blocks,
    # unmasked blocks, the one-pass wrap-around, a partial last block of queries and of keys, and rows of
    # the next head in the descriptor view.
    q, k, v, do = (torch.randn(1, 2, 72, 32, device=DEVICE).half() for _ in range(4))
    o, lse = at._attention_stage3(q, k, v, causal, store_lse=True)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    at.reference_attention(*leaves, causal).backward(do.double())
    backward = at._attention_backward_fused if one_pass else at._attention_backward
    grads = backward(q, k, v, o, lse, do, causal, use_desc=use_desc)
    for name, got, leaf in zip("qkv", grads, leaves, strict=True):
        torch.testing.assert_close(got.double(), leaf.grad, atol=2e-2, rtol=2e-2, msg=lambda m, n=name: f"d{n}: {m}")


def test_non_contiguous_inputs_take_the_pointer_path_and_stay_correct():
    torch.manual_seed(0)
    # [B, S, H, D] storage viewed as [B, H, S, D]: strided, so no descriptor.
    q, k, v = (torch.randn(1, 40, 2, 32, device=DEVICE).half().transpose(1, 2) for _ in range(3))
    assert not at._descriptors_usable(q, k, v)
    expected = at.reference_attention(q, k, v, True)
    for stage in sorted(SPEC.stages):
        torch.testing.assert_close(SPEC.stages[stage](q, k, v, causal=True), expected, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize(("shape", "zero"), [((2, 3, 70, 64), True), ((1, 2, 128, 128), True), ((1, 2, 40, 64), False)])
def test_the_delta_pass_zeroes_dqs_buffer_when_given_one_and_touches_nothing_else(shape, zero):
    # Stage 3's Hopper backward lets the delta pass zero dQ's fp32 buffer; a row it missed would add stale sums.
    o, do = torch.randn(*shape, device=DEVICE), torch.randn(*shape, device=DEVICE)
    lse = torch.empty(shape[0] * shape[1], shape[2], device=DEVICE)
    buf = torch.full(shape, float("nan"), device=DEVICE)
    delta = at._delta(o, do, lse, buf if zero else None)
    torch.testing.assert_close(delta, (o * do).sum(-1).view_as(lse), rtol=1e-5, atol=1e-5)
    assert (buf == 0).all() if zero else buf.isnan().all()


def test_causal_first_row_attends_only_to_the_first_key():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 32, 16, device=DEVICE).half() for _ in range(3))
    out = at.attention(q, k, v, causal=True)
    torch.testing.assert_close(out[0, 0, 0], v[0, 0, 0], atol=1e-3, rtol=0)


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (
            lambda d: [torch.randn(1, 2, 16, 64, device=d).half()] * 2 + [torch.randn(1, 2, 8, 64, device=d).half()],
            "one shape",
        ),
        (lambda d: [torch.randn(1, 2, 16, 64, device=d)] * 3, "float16 or bfloat16"),
        (lambda d: [torch.randn(1, 2, 16, 48, device=d).half()] * 3, "head_dim must be one of"),
        (lambda d: [torch.randn(2, 16, 64, device=d).half()] * 3, "4-D"),
    ],
    ids=["mismatched-shapes", "fp32", "head-dim-48", "3-d"],
)
def test_bad_inputs_raise_value_error_that_names_the_problem(make_args, message):
    with pytest.raises(ValueError, match=message):
        at.attention(*make_args(DEVICE))


def test_non_bool_causal_flag_raises_value_error():
    q = torch.randn(1, 1, 16, 16, device=DEVICE).half()
    with pytest.raises(ValueError, match="causal must be a bool"):
        at.attention(q, q, q, causal=1)


def test_spec_flops_halve_for_causal_and_bytes_count_q_k_v_and_o():
    dims = {"B": 2, "H": 3, "S": 128, "D": 64}
    assert SPEC.flops({**dims, "causal": 1}, torch.float16) * 2 == SPEC.flops({**dims, "causal": 0}, torch.float16)
    assert SPEC.bytes_moved(dims, torch.bfloat16) == 4 * 2 * 3 * 128 * 64 * 2
    q, k, v = SPEC.make_inputs({**dims, "causal": 0}, torch.float16, "cpu")
    assert SPEC.dims_of(q, k, v) == {**dims, "causal": 0}
    assert SPEC.dims_of(q, k, v, True) == {**dims, "causal": 1}
    assert SPEC.call_kwargs({**dims, "causal": 1}) == {"causal": True}
    assert math.isclose(SPEC.flops(dims, torch.float16), 4 * 2 * 3 * 128 * 128 * 64)


def test_bfloat16_matches_under_the_interpreter_whose_bf16_dots_compute_on_values(check):
    # Triton's own interpreter multiplies bf16 bit patterns as integers (garbage); the tests' and the engine's
    # patched one widens them (mcp_server/engine/interp/bf16math.py), so the bf16 kernel is checked here too.
    check(SPEC, max(SPEC.stages), OTHER_DTYPE_CASES[0], torch.bfloat16, "cpu")
