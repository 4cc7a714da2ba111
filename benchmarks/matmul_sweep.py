"""Matmul variants against cuBLAS in one process, timed alike with triton.testing.do_bench (median, L2 cleared).

    python benchmarks/matmul_sweep.py [--sizes 4096,8192] [--dtypes bfloat16,float16] [--out FILE.json]

Variants of one persistent TMA kernel (tile shape, pipeline depth, warps, warp specialization of the K-loop or of
the tile loop, a flattened tile loop, a halved epilogue store), plus stage 3 as shipped (autotuned) and torch.matmul.
Every variant is checked against torch.matmul before it is timed; compiles run in parallel first. Prints a table
and writes every figure to --out.
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The tile order and the epilogue are stage 3's own, so the variants differ from it only in the knobs swept.
from reference_kernels.matmul import _epilogue, _grouped_tile  # noqa: E402  (after the checkout is on the path)


@triton.jit
def _mm_persistent(
    a_desc, b_desc, c_desc, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, WS_OUTER: tl.constexpr, WS_INNER: tl.constexpr,
    SUBTILE: tl.constexpr,
):  # fmt: skip
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_c = start - NUM_SMS
    for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WS_OUTER):
        pid_m, pid_n = _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in tl.range(k_tiles, warp_specialize=WS_INNER):
            a = a_desc.load([off_m, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, off_n])
            acc = tl.dot(a, b, acc)
        tile_c += NUM_SMS
        pid_m, pid_n = _grouped_tile(tile_c, num_pid_m, num_pid_n, GROUP_M)
        _epilogue(c_desc, acc, None, pid_m, pid_n, M, N, 0, 0, False, 0, True, SUBTILE, BLOCK_M, BLOCK_N)


def variants() -> list[dict]:
    out = []
    for bm, bn, bk, stages, warps in [
        (128, 256, 64, 3, 8),
        (128, 256, 64, 4, 8),
        (256, 128, 64, 3, 8),
        (128, 128, 64, 4, 4),
        (128, 128, 64, 4, 8),
        (128, 128, 128, 3, 8),
    ]:
        for ws in ("none", "inner", "outer"):
            for flatten in (False, True):
                if ws == "inner" and flatten:
                    continue
                for subtile in (False, True):
                    if bn == 128 and subtile and warps == 4:
                        continue
                    out.append(
                        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_stages": stages,
                         "num_warps": warps, "WS": ws, "FLATTEN": flatten, "SUBTILE": subtile}
                    )  # fmt: skip
    return out


def name(v: dict) -> str:
    return (
        f"{v['BLOCK_M']}x{v['BLOCK_N']}x{v['BLOCK_K']} s{v['num_stages']} w{v['num_warps']} ws={v['WS']}"
        f"{' flat' if v['FLATTEN'] else ''}{' sub' if v['SUBTILE'] else ''}"
    )


def launcher(v: dict, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, num_sms: int):
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk = v["BLOCK_M"], v["BLOCK_N"], v["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bk, bn])
    c_desc = TensorDescriptor.from_tensor(c, [bm, bn // 2 if v["SUBTILE"] else bn])
    grid = (min(num_sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
    meta = dict(
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=v["GROUP_M"], NUM_SMS=num_sms, FLATTEN=v["FLATTEN"],
        WS_OUTER=v["WS"] == "outer", WS_INNER=v["WS"] == "inner", SUBTILE=v["SUBTILE"],
        num_stages=v["num_stages"], num_warps=v["num_warps"],
    )  # fmt: skip

    def call():
        _mm_persistent[grid](a_desc, b_desc, c_desc, M, N, K, **meta)
        return c

    def warm():
        _mm_persistent.warmup(a_desc, b_desc, c_desc, M, N, K, grid=grid, **meta)

    return call, warm


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--only", help="substring filter on variant names")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds for the final comparison")
    parser.add_argument("--out")
    args = parser.parse_args()
    from reference_kernels.matmul import matmul_stage3

    dev = torch.cuda.get_device_name()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    vs = [v for v in variants() if not args.only or any(s in name(v) for s in args.only.split("|"))]
    results = {"device": dev, "torch": torch.__version__, "triton": triton.__version__, "rows": []}
    print(f"{dev}: {len(vs)} variants", flush=True)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for size in map(int, args.sizes.split(",")):
            torch.manual_seed(0)
            a = torch.randn(size, size, device="cuda").div_(size**0.25).to(dtype)
            b = torch.randn(size, size, device="cuda").div_(size**0.25).to(dtype)
            c = torch.empty(size, size, device="cuda", dtype=dtype)
            ref = torch.matmul(a, b)
            calls = {}
            t0 = time.perf_counter()
            with ThreadPoolExecutor(os.cpu_count() or 4) as pool, triton.AsyncCompileMode(pool, ignore_errors=True):
                for v in vs:
                    call, warm = launcher(v, a, b, c, num_sms)
                    calls[name(v)] = call
                    warm()
            print(f"  compiled {len(vs)} in {time.perf_counter() - t0:.0f} s", flush=True)
            flops = 2 * size**3
            rows = []
            cublas = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=50, rep=300, return_mode="median")
            stage3 = None
            try:
                matmul_stage3(a, b)
                stage3 = triton.testing.do_bench(lambda: matmul_stage3(a, b), warmup=50, rep=300, return_mode="median")
            except Exception as exc:
                print(f"  stage3 failed: {exc}")
            for label, call in calls.items():
                try:
                    c.fill_(float("nan"))
                    out = call()
                    torch.cuda.synchronize()
                    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                    if not err < 1e-2:
                        rows.append({"variant": label, "error": f"rel err {err:.3g}"})
                        continue
                    ms = triton.testing.do_bench(call, warmup=50, rep=300, return_mode="median")
                    rows.append({"variant": label, "ms": ms, "vs_cublas": cublas / ms, "tflops": flops / ms / 1e9})
                except Exception as exc:
                    rows.append({"variant": label, "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
            # cuBLAS again at the end: the spread between its two figures is the noise floor.
            cublas2 = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=50, rep=300, return_mode="median")
            good = sorted((r for r in rows if "ms" in r), key=lambda r: r["ms"])
            if args.rounds:
                # Interleaved: cuBLAS, stage 3 and the three best variants in turn, round after round, so clock
                # and temperature drift falls on every provider alike; the median over rounds is reported.
                contenders = {"cuBLAS": lambda: torch.matmul(a, b), "stage3": lambda: matmul_stage3(a, b)}
                contenders |= {r["variant"]: calls[r["variant"]] for r in good[:3]}
                per: dict[str, list[float]] = {k: [] for k in contenders}
                for rnd in range(args.rounds):
                    order = list(contenders)[rnd % len(contenders) :] + list(contenders)[: rnd % len(contenders)]
                    for k in order:
                        per[k].append(triton.testing.do_bench(contenders[k], warmup=10, rep=100, return_mode="median"))
                med = {k: sorted(v)[len(v) // 2] for k, v in per.items()}
                print(f"  interleaved over {args.rounds} rounds (median ms; ratio = cuBLAS / it):")
                for k, v in med.items():
                    spread = (max(per[k]) - min(per[k])) / v
                    print(f"    {k:<46} {v:.4f} ms  {med['cuBLAS'] / v:.3f}×  (range {spread:.1%})")
                results.setdefault("interleaved", []).append(
                    {"dtype": dtype_name, "size": size, "rounds": per, "median_ms": med}
                )
            print(
                f"{dtype_name} {size}³: cuBLAS {cublas:.4f} / {cublas2:.4f} ms ({flops / cublas / 1e9:.0f} TFLOP/s); "
                f"stage3 {stage3 and f'{stage3:.4f} ms = {cublas / stage3:.3f}×'}"
            )
            for r in good[:8]:
                print(f"    {r['variant']:<46} {r['ms']:.4f} ms {r['vs_cublas']:.3f}× {r['tflops']:.0f} TFLOP/s")
            bad = [r for r in rows if "error" in r]
            for r in bad[:4]:
                print(f"    FAILED {r['variant']}: {r['error']}")
            if len(bad) > 4:
                print(f"    ... {len(bad) - 4} more failed")
            results["rows"].append(
                {"dtype": dtype_name, "size": size, "cublas_ms": [cublas, cublas2], "stage3_ms": stage3}
                | {"variants": rows}
            )
            sys.stdout.flush()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
