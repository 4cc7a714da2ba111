"""reference_kernels.matmul: every stage against eager PyTorch, the TMA and pointer paths, every
autotuned config on the GPU, input checks."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import label_ids

from reference_kernels import matmul as mm

SPEC = mm.SPEC
HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"
SMALL_CASES = [c for c in SPEC.cases if c.small]
ALL_CASES = list(SPEC.cases)
# The other dtypes run on two small cases that take the TMA path, with and without the epilogue: the
# kernels differ by dtype only in the element type, so GPU test time goes to code paths instead.
OTHER_DTYPE_CASES = [c for c in SPEC.cases if c.label in ("64³ whole tiles, no epilogue", "bias + gelu(tanh)")]


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


@pytest.mark.gpu
def test_every_autotuned_config_matches_the_reference_on_the_gpu(untimed):
    untimed(mm._matmul_grouped_kernel, mm._matmul_persistent_kernel)
    torch.manual_seed(0)
    # 2056 × 2312 × 136: enough 128×128 tiles to fill the GPU (the whole config list is tuned), more
    # tiles than SMs for every tile shape (persistent programs loop), and tails in M, N and K; rows
    # stay 16-byte aligned for TMA.
    M, N, K = 2056, 2312, 136
    dims = {"M": M, "N": N, "K": K, "bias": 1}
    a, b, bias = SPEC.make_inputs(dims, torch.float16, "cuda")
    expected = mm.reference_matmul(a.double(), b.double(), bias.double(), "gelu")
    act = mm.ACTIVATIONS["gelu"]
    tol = SPEC.tolerances[torch.float16]

    def check(got: torch.Tensor, what: str) -> None:
        torch.testing.assert_close(got.double(), expected, atol=tol.atol, rtol=tol.rtol, msg=lambda m: f"{what}: {m}")

    named = {"M": M, "N": N}
    # The autotuned call compiles the whole list in parallel; each config then runs from the cache.
    check(mm._matmul_stage2(a, b, bias, act), "stage 2 autotuned")
    for cfg in mm._prune_stage2(mm._matmul_grouped_kernel.configs, named):
        check(mm._matmul_stage2(a, b, bias, act, config=cfg), f"stage 2, {cfg}")
    # Stage 3 on the path the GPU gives it (TMA on Hopper); the pointer path's configs are the same tiles
    # and run in the unaligned cases and the fallback test.
    check(mm._matmul_stage3(a, b, bias, act), "stage 3 autotuned")
    use_tma = mm._tma_usable(a, b, torch.empty_like(expected, dtype=a.dtype))
    for cfg in mm._prune_stage3(mm._matmul_persistent_kernel.configs, named, USE_TMA=use_tma):
        check(mm._matmul_stage3(a, b, bias, act, use_tma=use_tma, config=cfg), f"stage 3, use_tma={use_tma}, {cfg}")


def _persistent(use_tma: bool, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(0)
    # 96 × 80 × 64 with 32×32 interpreter tiles: partial tiles in N and several tiles per program;
    # rows of 64 / 80 fp16 elements are 16-byte aligned, as TMA requires.
    a = torch.randn(96, 64, device=device).to(dtype)
    b = torch.randn(64, 80, device=device).to(dtype)
    bias = torch.randn(80, device=device).to(dtype)
    expected = mm.reference_matmul(a, b, bias, "silu")
    got = mm._matmul_stage3(a, b, bias, mm.ACTIVATIONS["silu"], use_tma=use_tma)
    tol = SPEC.tolerances[dtype]
    torch.testing.assert_close(got, expected, atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize("use_tma", [True, False], ids=["tma-descriptors", "pointers"])
def test_persistent_kernel_agrees_through_tma_descriptors_and_through_pointers(use_tma):
    if use_tma and HAS_GPU and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA descriptors need sm_90+")
    _persistent(use_tma, torch.float16, DEVICE)


def _stream_k_args(M: int, N: int, programs: int, bm: int = 128, bn: int = 256, use_tma: bool = True) -> dict:
    return {"M": M, "N": N, "BLOCK_M": bm, "BLOCK_N": bn, "NUM_SMS": programs, "USE_TMA": use_tma}


def test_the_stream_k_tail_is_used_only_when_the_last_round_leaves_many_programs_idle():
    # H100 figures behind the threshold: 8192³ on 132 SMs leaves the last round 52 % full (stream-K wins),
    # 4096³ leaves it 88 % full (whole tiles win).
    assert mm._use_stream_k(_stream_k_args(8192, 8192, 132))
    assert not mm._use_stream_k(_stream_k_args(4096, 4096, 132))
    assert not mm._use_stream_k(_stream_k_args(8192, 8192, 128))  # whole rounds: nothing to share out
    assert not mm._use_stream_k(_stream_k_args(1024, 1024, 132))  # fewer tiles than programs
    assert not mm._use_stream_k(_stream_k_args(8192, 8192, 132, use_tma=False))  # pointer path: whole tiles


# Interpreter: 32×32 tiles, 16-deep K blocks, 3 programs. (M, N, K): 4 tiles (one whole round, one tail tile
# shared by all three: two partials for one owner); 7 tiles with a K tail (K = 40: 3 blocks, the last
# zero-filled by TMA); 10 tiles, K = 80 (5 blocks over 3 programs: each range crosses into a second tile).
STREAM_K_SHAPES = [(64, 64, 64), (224, 32, 40), (160, 64, 80)]


@pytest.mark.parametrize(("M", "N", "K"), STREAM_K_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in STREAM_K_SHAPES])
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_the_stream_k_tail_matches_the_reference_and_leaves_every_flag_lowered(M, N, K, activation):
    if HAS_GPU:
        pytest.skip("interpreter shapes (3 programs, 32×32 tiles); the GPU tests cover 8192-sized problems")
    torch.manual_seed(0)
    a, b, bias = SPEC.make_inputs({"M": M, "N": N, "K": K, "bias": 1}, torch.float16, "cpu")
    cfg = mm._INTERPRETER_CONFIG
    assert mm._use_stream_k(_stream_k_args(M, N, mm._INTERPRETER_NUM_SMS, cfg["BLOCK_M"], cfg["BLOCK_N"]))
    got = mm._matmul_stage3(a, b, bias, mm.ACTIVATIONS[activation], use_tma=True)
    expected = mm.reference_matmul(a.double(), b.double(), bias.double(), activation)
    tol = SPEC.tolerances[torch.float16]
    torch.testing.assert_close(got.double(), expected, atol=tol.atol, rtol=tol.rtol)
    flags = mm._stream_k_flags(a.device, mm._INTERPRETER_NUM_SMS)
    assert flags.tolist() == [0] * mm._INTERPRETER_NUM_SMS


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=str)
def test_the_stream_k_tail_matches_cublas_at_8192_and_on_a_second_stream(dtype):
    torch.manual_seed(0)
    # 8192 × 8192 × 512: 2048 tiles of 128×256, a tail that takes stream-K on a 132-SM H100 (and on any GPU
    # whose last round is at most 60 % full); run twice, the second time on another stream, and under a graph.
    a = torch.randn(8192, 512, device="cuda").to(dtype)
    b = torch.randn(512, 8192, device="cuda").to(dtype)
    expected = torch.matmul(a.float(), b.float())
    tol = SPEC.tolerances[dtype]
    first = mm.matmul_stage3(a, b)
    torch.testing.assert_close(first.float(), expected, atol=tol.atol, rtol=tol.rtol)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        again = mm.matmul_stage3(a, b)
    side.synchronize()
    assert torch.equal(again, first)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = mm.matmul_stage3(a, b)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, first)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=str)
def test_persistent_kernel_falls_back_to_pointers_for_unaligned_rows_on_the_gpu(dtype):
    torch.manual_seed(0)
    # N = 70: a row of B is 140 bytes, not a multiple of 16, so TMA cannot describe it.
    a = torch.randn(200, 96, device="cuda").to(dtype)
    b = torch.randn(96, 70, device="cuda").to(dtype)
    c = torch.empty(200, 70, device="cuda", dtype=dtype)
    assert not mm._tma_usable(a, b, c)
    tol = SPEC.tolerances[dtype]
    torch.testing.assert_close(mm.matmul_stage3(a, b), mm.reference_matmul(a, b), atol=tol.atol, rtol=tol.rtol)


def test_transposed_views_work_through_the_strided_pointer_paths():
    torch.manual_seed(0)
    a = torch.randn(40, 48, device=DEVICE).half().t()  # [48, 40], column-major
    b = torch.randn(24, 40, device=DEVICE).half().t()  # [40, 24]
    expected = mm.reference_matmul(a, b)
    for stage in sorted(SPEC.stages):
        torch.testing.assert_close(SPEC.stages[stage](a, b), expected, atol=2e-2, rtol=1e-2)


def test_empty_output_dimensions_return_an_empty_result():
    a = torch.randn(0, 16, device=DEVICE).half()
    b = torch.randn(16, 8, device=DEVICE).half()
    for stage in sorted(SPEC.stages):
        assert SPEC.stages[stage](a, b).shape == (0, 8)


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda d: (torch.randn(4, 8, device=d).half(), torch.randn(9, 4, device=d).half()), "inner dimensions"),
        (lambda d: (torch.randn(4, 8, device=d), torch.randn(8, 4, device=d)), "float16 or bfloat16"),
        (lambda d: (torch.randn(4, 8, device=d).half(), torch.randn(8, 4, device=d).bfloat16()), "float16 or bfloat16"),
        (lambda d: (torch.randn(2, 4, 8, device=d).half(), torch.randn(8, 4, device=d).half()), "2-D"),
        (
            lambda d: (
                torch.randn(4, 8, device=d).half(),
                torch.randn(8, 4, device=d).half(),
                torch.randn(5, device=d).half(),
            ),
            "bias must be a 1-D tensor of length N=4",
        ),
        (
            lambda d: (
                torch.randn(4, 8, device=d).half(),
                torch.randn(8, 4, device=d).half(),
                torch.randn(4, device=d),
            ),
            "bias must match a",
        ),
    ],
    ids=["inner-dim", "fp32", "mixed-dtypes", "3-d", "bias-length", "bias-dtype"],
)
def test_bad_inputs_raise_value_error_that_names_the_problem(make_args, message):
    args = make_args(DEVICE)
    with pytest.raises(ValueError, match=message):
        mm.matmul(*args)


def test_unknown_activation_raises_value_error_listing_the_choices():
    a = torch.randn(4, 8, device=DEVICE).half()
    b = torch.randn(8, 4, device=DEVICE).half()
    with pytest.raises(ValueError, match="activation must be one of"):
        mm.matmul(a, b, activation="tanh")


def test_spec_round_trips_dims_and_models_bytes_and_flops():
    for case in SPEC.cases + SPEC.bench_cases:
        dims = {"M": 3, "N": 5, "K": 7, "bias": case.dims["bias"], "act": case.dims["act"]}
        args = SPEC.make_inputs(dims, torch.float16, "cpu")
        assert SPEC.dims_of(*args) == {k: dims[k] for k in ("M", "N", "K", "bias")}
    _, _, bytes_moved, flops = SPEC.exports()
    a, b = torch.empty(64, 32, dtype=torch.float16), torch.empty(32, 16, dtype=torch.float16)
    assert bytes_moved(a, b, None) == (64 * 32 + 32 * 16 + 64 * 16) * 2
    assert flops(a, b, None) == 2 * 64 * 16 * 32


def test_bfloat16_matches_under_the_interpreter_whose_bf16_dots_compute_on_values(check):
    # Triton's own interpreter multiplies bf16 bit patterns as integers (garbage); the tests' and the engine's
    # patched one widens them (mcp_server/engine/interp/bf16math.py), so the bf16 kernel is checked here too.
    check(SPEC, max(SPEC.stages), OTHER_DTYPE_CASES[0], torch.bfloat16, "cpu")
