"""bf16 under the interpreter as on the GPU: downcasts round as ``cvt.rn.bf16.f32`` does (torch's bf16 rounds the
same way), not by dropping the low bits as Triton 3.6's interpreter does, and ``atomic_add`` on bf16 runs
instead of raising."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from interp_checks import fresh_interpreter, load_file

from mcp_server.engine.interp import atomics, rounding

ROOT = Path(__file__).resolve().parents[2]
INTERPRETER = not torch.cuda.is_available()


def _f32(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def _torch_bits(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _same(got: np.ndarray, expected: np.ndarray) -> bool:
    """Bit for bit, but any NaN matches any NaN (payloads differ between converters)."""
    g, e = (torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).float().numpy() for a in (got, expected))
    nan = np.isnan(e)
    return bool(np.array_equal(np.isnan(g), nan) and np.array_equal(got[~nan], expected[~nan]))


# Values on every edge: a carry into the exponent, ties with even and odd kept parts, the largest finite
# fp32 (rounds to infinity), infinities, a NaN whose payload sits only in the dropped bits (truncation turns it
# into infinity), fp32 subnormals, signed zero.
EDGES = _f32(
    0x3FFFFFFF, 0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000,
    0xC2A4C000, 0x00018000, 0x00007FFF, 0x80000000, 0x00000000,
)  # fmt: skip


def test_round_to_nearest_even_matches_torch_on_every_edge_and_on_random_values():
    rng = np.random.default_rng(0)
    random = rng.standard_normal(100_000).astype(np.float32) * np.float32(1e3)
    ties = (rng.integers(0, 2**31, 10_000, dtype=np.uint32) & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    for x in (EDGES, random, ties.view(np.float32)):
        assert _same(rounding.bf16_bits(x), _torch_bits(x))
    assert rounding.bf16_bits(EDGES).shape == EDGES.shape
    assert rounding.bf16_bits(np.float32(34.74)).shape == ()


def test_truncation_the_stock_interpreters_rounding_differs_from_the_gpus():
    # The twin that must fail: dropping the low bits (what stock Triton 3.6 does for every fp32 → bf16 cast, and
    # what "rtz" asks for) disagrees with the GPU's rounding on about half of all values, always toward zero.
    rng = np.random.default_rng(1)
    x = rng.standard_normal(10_000).astype(np.float32)
    cut, nearest = rounding.bf16_bits(x, "rtz"), _torch_bits(x)
    assert not _same(cut, nearest)
    assert 0.4 < np.mean(cut != nearest) < 0.6
    assert np.array_equal(cut, (x.view(np.uint32) >> 16).astype(np.uint16))
    # NaNs stay NaN under truncation too (a payload in the dropped half alone would read as infinity).
    kept = torch.from_numpy(rounding.bf16_bits(_f32(0x7F800001), "rtz").view(np.int16)).view(torch.bfloat16)
    assert torch.isnan(kept.float()).all()


def test_fp64_goes_through_fp32_as_torch_converts_it_and_an_unknown_mode_is_refused():
    x = np.array([1.5, -3.25, 1e-3, 34.74, 1e39, -1e-42, np.inf, np.nan], dtype=np.float64)
    assert _same(rounding.bf16_bits(x), _torch_bits(x))
    with pytest.raises(ValueError, match="'rtne' or 'rtz'"):
        rounding.bf16_bits(x, "rna")


@triton.jit
def _cast_kernel(src, dst, n, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n)
    if MODE == 0:
        y = x.to(tl.bfloat16)
    elif MODE == 1:
        y = x.to(tl.bfloat16, fp_downcast_rounding="rtne")
    else:
        y = x.to(tl.bfloat16, fp_downcast_rounding="rtz")
    tl.store(dst + offs, y, mask=offs < n)


def _kernel_casts(dtype: torch.dtype, device: str) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The inputs and the kernel's bf16 bits for each MODE (default, "rtne", and "rtz" from fp32: from fp64 it
    does not compile for the GPU)."""
    rng = np.random.default_rng(2)
    x = torch.from_numpy(np.concatenate([EDGES, rng.standard_normal(1000).astype(np.float32)])).to(dtype)
    n = x.numel()
    out = {}
    for mode in (0, 1, 2) if dtype == torch.float32 else (0, 1):
        dst = torch.empty(n, dtype=torch.bfloat16, device=device)
        _cast_kernel[(triton.cdiv(n, 256),)](x.to(device), dst, n, MODE=mode, BLOCK=256)
        out[mode] = dst.cpu().view(torch.int16).numpy().view(np.uint16)
    return x.numpy(), out


def _check_casts(dtype: torch.dtype, device: str) -> None:
    x, out = _kernel_casts(dtype, device)
    nearest = _torch_bits(x)
    assert _same(out[0], nearest) and _same(out[1], nearest)
    if dtype == torch.float32:
        assert _same(out[2], rounding.bf16_bits(x, "rtz"))
        assert not _same(out[2], nearest)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_a_kernels_bf16_cast_and_store_round_as_torch_does_and_rtz_truncates(dtype):
    _check_casts(dtype, "cpu")


def test_an_fp64_cast_toward_zero_is_refused_as_the_gpu_compiler_refuses_it():
    x = torch.tensor([1.5, 34.74], dtype=torch.float64)
    dst = torch.empty(2, dtype=torch.bfloat16)
    with pytest.raises(Exception, match="cast to fp32 first") as caught:
        _cast_kernel[(1,)](x, dst, 2, MODE=2, BLOCK=2)
    chain, seen = caught.value, []
    while chain is not None:
        seen.append(type(chain))
        chain = chain.__cause__ or chain.__context__
    assert rounding.UnsupportedCast in seen
    # Its twin from fp32 is a plain truncation.
    _cast_kernel[(1,)](x.float(), dst, 2, MODE=2, BLOCK=2)
    assert dst.float().tolist() == [1.5, 34.5]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_on_the_gpu_the_same_kernel_rounds_the_same_way(dtype):
    # The premise of the patch, on the hardware: the GPU's casts give the bits the patched interpreter gives.
    _check_casts(dtype, "cuda")


@pytest.mark.skipif(not INTERPRETER, reason="checks the interpreter the engine's children patch")
def test_the_engines_children_install_the_rounding():
    # A fresh process, as a child starts: only mcp_server.engine.interp.install() patches the interpreter.
    script = textwrap.dedent(
        """
        import numpy as np, torch, triton, triton.language as tl
        from mcp_server.engine.interp import install

        @triton.jit
        def cast(src, dst):
            tl.store(dst, tl.load(src).to(tl.bfloat16))

        def bits():
            dst = torch.empty(1, dtype=torch.bfloat16)
            cast[(1,)](torch.tensor([34.74]), dst)
            three = torch.empty(1, dtype=torch.bfloat16)
            cast[(1,)](torch.tensor([3], dtype=torch.int32), three)
            return hex(dst.view(torch.int16).item() & 0xFFFF) + "," + hex(three.view(torch.int16).item() & 0xFFFF)

        before = bits()
        install()
        print(before, bits())
        """
    )
    out = fresh_interpreter(script)
    # 34.74 lies between bf16's 34.5 (0x420a) and 34.75 (0x420b), nearer the second, where the GPU puts it; the
    # integer 3 is 0x4040 as a bf16, where the stock interpreter stores its bits (0x3).
    assert out.split() == ["0x420a,0x3", "0x420b,0x4040"]


# --- bf16 atomic adds (atomics.py) ---------------------------------------------------------------


def _sequential(start: list[float], adds: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """Each add in order, rounded to bf16 after every one: the final values and what each add found."""
    acc = [torch.tensor(v, dtype=torch.bfloat16) for v in start]
    found = []
    for slot, v in adds:
        found.append(acc[slot].item())
        acc[slot] = (acc[slot].float() + torch.tensor(v, dtype=torch.bfloat16).float()).to(torch.bfloat16)
    return [a.item() for a in acc], found


def test_lanes_sharing_an_address_add_in_lane_order_and_masked_lanes_touch_nothing():
    memory = {100: 0x3F80, 102: 0x4020, 104: 0xC040}  # 1.0, 2.5, -3.0 at three addresses

    def load(addrs):
        return np.array([memory[int(a)] for a in addrs], dtype=np.uint16)

    def store(addrs, bits):
        for a, b in zip(addrs, bits, strict=True):
            memory[int(a)] = int(b)

    vals = torch.tensor([0.5, 0.25, 1.0, 1.0, 0.1, 0.2, 0.3, 0.4], dtype=torch.bfloat16)
    ptrs = np.array([100 + 2 * (i % 3) for i in range(8)], dtype=np.uint64)
    mask = np.array([True] * 7 + [False])
    old = atomics.bf16_add(ptrs, vals.view(torch.int16).numpy().view(np.uint16), mask, load, store)
    final, found = _sequential([1.0, 2.5, -3.0], [(i % 3, vals[i].item()) for i in range(7)])
    as_float = torch.from_numpy(np.array([memory[a] for a in (100, 102, 104)], np.uint16).view(np.int16))
    assert as_float.view(torch.bfloat16).tolist() == final
    assert torch.from_numpy(old.view(np.int16)).view(torch.bfloat16).tolist() == [*found, 0.0]


@triton.jit
def _add_kernel(p, v, o, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(o + offs, tl.atomic_add(p + offs % 3, tl.load(v + offs)))


def test_a_kernels_bf16_atomic_add_runs_returns_what_each_lane_found_and_the_stock_interpreter_refuses_it():
    vals = torch.tensor([0.5, 0.25, 1.0, 1.0, 0.1, 0.2, 0.3, 0.4], dtype=torch.bfloat16)
    p = torch.tensor([1.0, 2.5, -3.0], dtype=torch.bfloat16)
    o = torch.empty(8, dtype=torch.bfloat16)
    _add_kernel[(1,)](p, vals, o, B=8)
    final, found = _sequential([1.0, 2.5, -3.0], [(i % 3, vals[i].item()) for i in range(8)])
    assert p.tolist() == final and o.tolist() == found
    # The twin: without the patch the interpreter's own atomic refuses bf16 outright.
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    patched, builder.create_atomic_rmw = builder.create_atomic_rmw, atomics._original
    try:
        with pytest.raises(Exception) as caught:
            _add_kernel[(1,)](p, vals, o, B=8)
    finally:
        builder.create_atomic_rmw = patched
    assert "Unsupported data type" in repr(caught.value) + repr(caught.value.__cause__)


@pytest.mark.gpu
def test_on_the_gpu_the_bf16_scatter_add_matches_an_fp32_sum_within_bf16_rounding():
    # The order of atomic adds is unspecified on the GPU; each of a bin's few adds rounds once.
    fixtures = ROOT / "tests" / "fixtures" / "interp"
    bf16_scatter = load_file(fixtures / "bf16_scatter.py")
    bf16_scatter_problem = load_file(fixtures / "bf16_scatter_problem.py")
    x, idx = (t.cuda() for t in bf16_scatter_problem.get_inputs())
    got = bf16_scatter.candidate(x, idx).float()
    expected = bf16_scatter_problem.reference(x, idx).float()
    assert torch.allclose(got, expected, rtol=2e-2, atol=2e-2), (got - expected).abs().max()


@triton.jit
def _int_cast_kernel(src, dst, B: tl.constexpr):
    offs = tl.arange(0, B)
    x = tl.load(src + offs)
    tl.store(dst + offs, x.to(tl.bfloat16))
    tl.store(dst + B + offs, (x > 0).to(tl.bfloat16))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8], ids=str)
def test_integers_and_masks_cast_to_bf16_by_value(dtype):
    # Stock Triton 3.6 stores an integer's bits as the bf16 (3 becomes 2.8e-40) and raises on a mask.
    values = [3, 2, 7, 200] if dtype == torch.uint8 else [3, -2, 7, 100]
    x = torch.tensor(values, dtype=dtype)
    out = torch.empty(8, dtype=torch.bfloat16)
    _int_cast_kernel[(1,)](x, out, B=4)
    assert out[:4].tolist() == x.to(torch.bfloat16).tolist()
    assert out[4:].tolist() == (x > 0).to(torch.bfloat16).tolist()
    # 257 lies between bf16's 256 and 258: a tie, to even (256); 259 rounds up to 260.
    big = torch.tensor([257, 259, -257, 1 << 20], dtype=torch.int32)
    _int_cast_kernel[(1,)](big, out, B=4)
    assert out[:4].tolist() == [256.0, 260.0, -256.0, float(1 << 20)]
