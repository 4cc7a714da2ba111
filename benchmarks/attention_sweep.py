"""Attention variants against torch SDPA in one process, timed alike with triton.testing.do_bench (median, L2
cleared), in interleaved rounds.

    python benchmarks/attention_sweep.py [--rounds 5] [--rep 40] [--dtype bfloat16] [--out FILE.json]

Providers per shape: SDPA with the backend torch picks (the bar), SDPA held to cuDNN and to flash, stage 3 as
shipped (autotuned), and stage 3's forward and backward kernels with fixed tiles (forward: tile, pipeline depth,
warps, register cap, warp-specialized key loop; backward: the dK/dV tiles with one dQ tile, then the dQ tiles with
one dK/dV tile, and the pointer path). Every variant is checked against SDPA's output (and gradients) on the same
inputs before it is timed; compiles run in parallel first. Each round times every provider once per shape; the
table gives the median over rounds and the spread (max/min − 1) of the bar's own samples. Writes every sample to
--out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.runtime.jit import JITFunction

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import attention as at  # noqa: E402

SHAPES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (2, 16, 8192, 64, False), (2, 16, 8192, 64, True)]
# Forward (BLOCK_M, BLOCK_N, num_stages, num_warps, maxnreg, warp-specialized key loop, hand-pipelined QKᵀ).
FWD = {
    64: [
        (128, 64, 3, 8, None, False, False),
        (128, 128, 2, 8, 128, False, False),
        (128, 64, 3, 4, None, False, False),
        (128, 64, 3, 8, None, False, True),
        (128, 128, 2, 8, 128, False, True),
        (128, 64, 2, 8, None, False, True),
        (128, 128, 2, 8, None, False, True),
        (128, 128, 3, 8, None, True, False),
        (128, 64, 3, 8, None, True, False),
    ],
    128: [
        (128, 64, 4, 8, None, False, False),
        (128, 64, 2, 8, 128, False, False),
        (128, 64, 3, 8, None, False, False),
        (128, 64, 3, 8, None, True, False),
        (128, 64, 2, 8, 128, False, True),
        (128, 64, 3, 8, None, False, True),
        (128, 64, 2, 8, None, False, True),
        (128, 128, 2, 8, None, False, True),
        (128, 64, 4, 8, None, True, False),
        (128, 64, 2, 8, 128, True, False),
    ],
}
# Two-kernel backward pairs (dK/dV tile, dQ tile), (BLOCK_M, BLOCK_N, num_stages, num_warps); dK/dV needs
# BLOCK_N % BLOCK_M == 0, dQ the reverse.
PAIRS = {
    64: [((64, 64, 3, 4), (128, 32, 3, 8)), ((32, 128, 3, 8), (64, 64, 3, 4))],
    128: [((64, 128, 2, 8), (128, 32, 3, 8)), ((32, 64, 3, 4), (128, 32, 3, 8))],
}
# One-pass backward (tile, dQ by TMA reduce or by pointer atomics).
FUSED = {
    64: [
        *(((t, True)) for t in [(64, 128, 2, 8), (32, 128, 2, 4), (64, 64, 2, 4), (64, 128, 3, 8), (32, 128, 3, 8)]),
        *(((t, True)) for t in [(128, 128, 2, 8), (64, 64, 3, 4)]),
        ((64, 128, 2, 8), False),
        ((64, 64, 2, 4), False),
    ],
    128: [
        *(((t, True)) for t in [(64, 128, 2, 8), (64, 64, 2, 8), (32, 64, 2, 4), (32, 128, 2, 8), (64, 64, 3, 8)]),
        *(((t, True)) for t in [(64, 128, 2, 16), (32, 64, 3, 4)]),
        ((64, 128, 2, 8), False),
        ((64, 64, 2, 8), False),
    ],
}


def fwd_config(t: tuple) -> triton.Config:
    bm, bn, s, w, r, ws, pipe = t
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPEC": ws, "PIPELINE": pipe}
    return triton.Config(meta, num_stages=s, num_warps=w, maxnreg=r)


def bwd_config(t: tuple) -> triton.Config:
    bm, bn, s, w = t
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w)


def tflops(ms: float, B: int, H: int, S: int, D: int, causal: bool, passes: float) -> float:
    flops = 4 * B * H * S * S * D * passes / (2 if causal else 1)
    return flops / ms / 1e9


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def providers(shape: tuple, dtype: torch.dtype, device: str = "cuda") -> tuple[dict, dict]:
    """name → (kind, fn) where kind is fwd / bwd / fwdbwd; inputs built once per shape."""
    B, H, S, D, causal = shape
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, D, device=device, dtype=dtype) for _ in range(4))
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]

    def sdpa(backend):
        def run():
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def run_fb():
            for t in leaves:
                t.grad = None
            if backend is None:
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            else:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            out.backward(do)

        return run, run_fb

    out = {}
    backends = [("sdpa", None), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)]
    for name, backend in backends[: 1 if device == "cpu" else 3]:
        f, fb = sdpa(backend)
        out[f"fwd {name}"] = ("fwd", f)
        out[f"fwd+bwd {name}"] = ("fwdbwd", fb)
    ref_o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    ref_o.backward(do)
    ref = {
        "o": ref_o.detach(),
        "dq": leaves[0].grad.clone(),
        "dk": leaves[1].grad.clone(),
        "dv": leaves[2].grad.clone(),
    }
    # The bar's backward alone, from a recorded graph.
    ref_graph = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    out["bwd sdpa"] = ("bwd", lambda: torch.autograd.grad(ref_graph, leaves, do, retain_graph=True))
    ours = [t.clone().requires_grad_(True) for t in (q, k, v)]

    def stage3_fb():
        for t in ours:
            t.grad = None
        at.attention_stage3(*ours, causal=causal).backward(do)

    out["fwd stage3"] = ("fwd", lambda: at.attention_stage3(q, k, v, causal=causal))
    out["fwd+bwd stage3"] = ("fwdbwd", stage3_fb)
    for t in FWD[D]:
        cfg = fwd_config(t)
        out[f"fwd {t}"] = ("fwd", lambda cfg=cfg: at._attention_stage3(q, k, v, causal, config=cfg)[0])
    o, lse = at._attention_stage3(q, k, v, causal, store_lse=True)
    for a, b in PAIRS[D]:
        cfgs = (bwd_config(a), bwd_config(b))
        out[f"bwd {a} / {b}"] = (
            "bwd",
            lambda cfgs=cfgs: at._attention_backward(q, k, v, o, lse, do, causal, configs=cfgs),
        )
    for t, reduce in FUSED[D]:
        cfg = bwd_config(t)
        out[f"bwd one-pass {t} reduce={reduce}"] = (
            "bwd",
            lambda cfg=cfg, r=reduce: at._attention_backward_fused(
                q, k, v, o, lse, do, causal, config=cfg, dq_reduce=r
            ),
        )
    return out, ref


def check(name: str, kind: str, fn, ref: dict) -> str | None:
    """None when the provider matches SDPA (relative L2 error), else the reason."""
    if name.endswith(("sdpa", "sdpa_cudnn", "sdpa_flash")) or kind == "fwdbwd":
        fn()
        return None
    got = fn()
    if kind == "fwd":
        err = rel(got, ref["o"])
        return None if err < 2e-2 else f"O rel err {err:.2e}"
    if name == "bwd sdpa":
        return None
    for g, key in zip(got, ("dq", "dk", "dv"), strict=True):
        err = rel(g, ref[key])
        if not err < 3e-2:
            return f"{key} rel err {err:.2e}"
    return None


def compile_all(table: dict) -> float:
    """Compile every fixed-tile variant on a thread pool (launches turned into compile-only warmups)."""
    started = time.perf_counter()
    original = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        return original(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = compile_only
    try:
        with ThreadPoolExecutor(os.cpu_count() or 4) as pool, triton.AsyncCompileMode(pool, ignore_errors=True):
            for shape_table in table.values():
                for name, (_, fn) in shape_table.items():
                    if name.startswith(("fwd (", "bwd (", "bwd one-pass")):
                        try:
                            fn()
                        except Exception as exc:  # reported again when the variant runs
                            print(f"  compile {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    finally:
        JITFunction.run = original
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rep", type=int, default=40, help="do_bench rep (ms) per sample")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", default="attention_sweep.json")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes on the CPU (TRITON_INTERPRET=1): the plumbing"
    )
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    where = "cpu" if args.smoke else "cuda"
    if args.smoke:
        global SHAPES
        SHAPES = [(1, 2, 128, 64, False), (1, 1, 128, 128, True)]
        dtype = torch.float16
        for tiles in (FWD, PAIRS, FUSED):
            for d in tiles:
                tiles[d] = tiles[d][:2]
        triton.testing.do_bench = lambda fn, **_: (fn(), 1.0)[1]
    device = "cpu (interpreter)" if args.smoke else torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}, triton {triton.__version__}, {args.dtype}", flush=True)
    table, refs = {}, {}
    for shape in SHAPES:
        table[shape], refs[shape] = providers(shape, dtype, where)
    print(f"compiled variants in {compile_all(table):.0f} s", flush=True)
    bad: dict = {}
    for shape, shape_table in table.items():
        for name, (kind, fn) in list(shape_table.items()):
            try:
                why = check(name, kind, fn, refs[shape])
            except Exception as exc:
                why = f"{type(exc).__name__}: {str(exc)[:160]}"
            if why:
                bad[f"{shape} {name}"] = why
                print(f"  drop {shape} {name}: {why}", flush=True)
                del shape_table[name]
    samples: dict = {str(s): {n: [] for n in t} for s, t in table.items()}
    for r in range(args.rounds):
        for shape, shape_table in table.items():
            for name, (_, fn) in shape_table.items():
                ms = triton.testing.do_bench(fn, warmup=10, rep=args.rep, return_mode="median")
                samples[str(shape)][name].append(ms)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    summary = {}
    for shape in SHAPES:
        B, H, S, D, causal = shape
        med = {n: statistics.median(v) for n, v in samples[str(shape)].items()}
        spread = {n: max(v) / min(v) - 1 for n, v in samples[str(shape)].items()}
        summary[str(shape)] = {"median_ms": med, "spread": spread}
        print(
            f"\n{B}x{H}x{S}x{D} {'causal' if causal else 'full'} ({device}, {args.dtype}); ratio = SDPA default / ours"
        )
        for kind, passes, bar in (("fwd", 1, "fwd sdpa"), ("bwd", 2.5, "bwd sdpa"), ("fwd+bwd", 3.5, "fwd+bwd sdpa")):
            rows = sorted((n for n in med if n.split(" ", 1)[0] == kind), key=med.get)
            for n in rows:
                print(
                    f"  {n:44s} {med[n]:8.3f} ms {tflops(med[n], B, H, S, D, causal, passes):6.0f} TFLOP/s "
                    f"ratio {med[bar] / med[n]:5.3f} spread {spread[n] * 100:4.1f} %"
                )
    Path(args.out).write_text(
        json.dumps(
            {
                "device": device,
                "dtype": args.dtype,
                "torch": torch.__version__,
                "triton": triton.__version__,
                "rounds": args.rounds,
                "rep_ms": args.rep,
                "dropped": bad,
                "samples": samples,
                "summary": summary,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
