"""fp32 matmul on the GPU: how TF32 rounds, which input_precision passes the validator's fp32 tolerance, speed.

Run on a GPU machine: ``python benchmarks/fp32_matmul_precision.py --out results.json``. Three parts:

1. Rounding: ``tl.dot(A, I)`` and ``tl.dot(I, B)`` return the operand exactly as the tensor core saw it; we
   compare it bit for bit with :func:`mcp_server.engine.interp.tf32.round_tf32` in each rounding mode, and a
   random dot with the interpreter's emulation.
2. Tolerance: for K from 256 to 8192, a Triton matmul with each ``input_precision`` and cuBLAS with and without
   TF32, judged exactly as ``ptt validate`` judges an fp32 output (reference: torch.matmul in fp32 without TF32,
   truth in float64); plus the interpreter's emulation of the same dot, judged the same way.
3. Speed at 4096³ and 8192³ with ``triton.testing.do_bench``: Triton (small autotune) per precision vs cuBLAS.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import triton
import triton.language as tl

from mcp_server.engine import compare
from mcp_server.engine.interp import tf32


@triton.jit
def _square_dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr, P: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, input_precision=P))


@triton.jit
def _matmul(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
    P: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    width = GROUP * grid_n
    group = pid // width
    first_m = group * GROUP
    size_m = min(grid_m - first_m, GROUP)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(
            a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
            mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
            mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc, input_precision=P)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


CONFIGS = [(128, 128, 32, 3, 8), (128, 256, 32, 3, 8), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 128, 16, 4, 8)]


def matmul(a, b, precision, config=(128, 128, 32, 3, 8)):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty(M, N, device=a.device, dtype=torch.float32)
    bm, bn, bk, stages, warps = config
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _matmul[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BM=bm,
        BN=bn,
        BK=bk,
        GROUP=8,
        P=precision,
        num_stages=stages,
        num_warps=warps,
    )
    return c


def rounding_check() -> dict:
    torch.manual_seed(0)
    n = 64
    a = torch.randn(n, n) * torch.exp2(torch.randint(-20, 20, (n, n)).float())
    bits = a.view(torch.int32)
    # Exact ties in the first rows: low 13 bits 0x1000, with an even and an odd kept bit.
    ties = (bits[:4] & ~0x1FFF) | 0x1000
    ties[:2] &= ~0x2000
    ties[2:] |= 0x2000
    bits[:4] = ties
    eye = torch.eye(n)
    out: dict = {}
    for precision in ("tf32", "tf32x3", "ieee"):
        got_a = torch.empty(n, n, device="cuda")
        got_b = torch.empty(n, n, device="cuda")
        _square_dot[(1,)](a.cuda(), eye.cuda(), got_a, N=n, P=precision)
        _square_dot[(1,)](eye.cuda(), a.cuda(), got_b, N=n, P=precision)
        gpu_a = got_a.cpu().numpy()
        gpu_b = got_b.cpu().numpy()
        row: dict = {}
        for mode in ("rna", "rne", "trunc"):
            emu_a = tf32.dot(a.numpy(), eye.numpy(), np.zeros((n, n), np.float32), precision, mode)
            emu_b = tf32.dot(eye.numpy(), a.numpy(), np.zeros((n, n), np.float32), precision, mode)
            row[mode] = {
                "a_operand_bit_mismatches": int((emu_a.view(np.uint32) != gpu_a.view(np.uint32)).sum()),
                "b_operand_bit_mismatches": int((emu_b.view(np.uint32) != gpu_b.view(np.uint32)).sum()),
            }
        out[precision] = row
    # A random product: GPU vs the interpreter's emulation, in ulps of the result.
    x = torch.randn(64, 64)
    y = torch.randn(64, 64)
    for precision in ("tf32", "tf32x3"):
        got = torch.empty(64, 64, device="cuda")
        _square_dot[(1,)](x.cuda(), y.cuda(), got, N=64, P=precision)
        g = got.cpu().double()
        emu = torch.from_numpy(tf32.dot(x.numpy(), y.numpy(), np.zeros((64, 64), np.float32), precision)).double()
        full = x.double() @ y.double()
        ulp = torch.from_numpy(np.spacing(np.abs(g.float().numpy()))).double()
        out[f"random_64x64x64_{precision}"] = {
            "max_abs_gpu_minus_emulation": float((g - emu).abs().max()),
            "max_abs_gpu_minus_fp64": float((g - full).abs().max()),
            "max_ulps_gpu_vs_emulation": float(((g - emu).abs() / ulp).max()),
        }
    return out


def verdict(cand: torch.Tensor, ref: torch.Tensor, ref64: torch.Tensor) -> dict:
    tol = compare.tolerance_for(torch.float32)
    cmp = compare.compare_tensor(cand.cpu(), ref.cpu(), ref64.cpu(), tol)
    return {
        "ok": cmp.ok,
        "mismatches": cmp.mismatches,
        "max_rel_err": cmp.max_rel_err,
        "rel_norm_err": cmp.rel_norm_err,
        "torch_rel_norm_err": cmp.torch_rel_norm_err,
    }


def tolerance_table(ks, size, emulate_up_to) -> list[dict]:
    rows = []
    for dist in ("randn", "rand"):
        for k in ks:
            torch.manual_seed(k)
            gen = torch.randn if dist == "randn" else torch.rand
            a = gen(size, k, device="cuda")
            b = gen(k, size, device="cuda")
            torch.backends.cuda.matmul.allow_tf32 = False
            ref = a @ b
            ref64 = a.double() @ b.double()
            row = {"inputs": dist, "M": size, "N": size, "K": k}
            for precision in ("tf32", "tf32x3", "ieee"):
                row[f"triton_{precision}"] = verdict(matmul(a, b, precision), ref, ref64)
            row["cublas_fp32"] = verdict(a @ b, ref, ref64)
            torch.backends.cuda.matmul.allow_tf32 = True
            row["cublas_tf32"] = verdict(a @ b, ref, ref64)
            torch.backends.cuda.matmul.allow_tf32 = False
            if k <= emulate_up_to:
                an, bn = a.cpu().numpy(), b.cpu().numpy()
                for precision in ("tf32", "tf32x3"):
                    emu = tf32.dot(an, bn, np.zeros((size, size), np.float32), precision)
                    row[f"interpreter_emulation_{precision}"] = verdict(torch.from_numpy(emu), ref, ref64)
            rows.append(row)
            print(json.dumps({k_: (v["ok"] if isinstance(v, dict) else v) for k_, v in row.items()}), flush=True)
    return rows


def speed(sizes) -> list[dict]:
    from triton.testing import do_bench

    rows = []
    for s in sizes:
        torch.manual_seed(0)
        a = torch.randn(s, s, device="cuda")
        b = torch.randn(s, s, device="cuda")
        flops = 2 * s**3
        row: dict = {"M=N=K": s}
        for precision in ("tf32", "tf32x3", "ieee"):
            best = None
            for cfg in CONFIGS:
                try:
                    ms = do_bench(lambda a=a, b=b, p=precision, cfg=cfg: matmul(a, b, p, cfg), warmup=10, rep=50)
                except Exception as exc:  # out of resources for this config
                    print("config", cfg, precision, type(exc).__name__, flush=True)
                    continue
                if best is None or ms < best[0]:
                    best = (ms, cfg)
            row[f"triton_{precision}"] = {
                "ms": round(best[0], 4),
                "tflops": round(flops / best[0] / 1e9, 1),
                "config": list(best[1]),
            }
        for allow in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = allow
            ms = do_bench(lambda a=a, b=b: a @ b, warmup=10, rep=50)
            row["cublas_tf32" if allow else "cublas_fp32"] = {"ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1)}
        torch.backends.cuda.matmul.allow_tf32 = False
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--emulate-up-to", type=int, default=8192)
    args = parser.parse_args()
    started = time.time()
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "tolerance": "ptt validate's float32 default (compare.tolerance_for): atol 1e-5, rtol 1e-5, "
        "norm floor 1e-5, plus 4x PyTorch's own fp32 error vs float64",
        "rounding": rounding_check(),
    }
    print(json.dumps(result["rounding"], indent=1), flush=True)
    result["tolerance_by_k"] = tolerance_table([256, 512, 1024, 2048, 4096, 8192], args.size, args.emulate_up_to)
    result["speed"] = speed([4096, 8192])
    result["seconds"] = round(time.time() - started, 1)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
