"""Softmax backward for rows past the one-block budget (32769-65536 columns, 16-bit): stage 3's packed kernel
against the looped kernel, the fp32 one-block kernel and Liger-Kernel, timed alike in one process.

    python benchmarks/softmax_bwd_sweep.py [--out FILE.json]

Timer: triton.testing.do_bench (L2 cleared before each call), median; every variant once per round, 5 rounds in
rotating order, median over rounds. Each variant's error is measured against float64 on the same inputs, and
the register count and spills of the one-block kernels are read from their compiled kernels.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import softmax as sm  # noqa: E402

SHAPES = [(4096, 65536), (2048, 65536), (4096, 40000), (1024, 49152)]
ROUNDS = 5


def liger_backward():
    try:
        from liger_kernel.ops.softmax import _softmax_backward
        from liger_kernel.ops.utils import calculate_settings
    except Exception:
        return None

    def run(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        block, warps = calculate_settings(y.shape[-1])
        return _softmax_backward(dy, y, block, warps, False)

    return run


def variants(y: torch.Tensor, dy: torch.Tensor, liger) -> tuple[dict, dict]:
    m, n = y.shape
    dx = torch.empty_like(y)
    block = triton.next_power_of_2(n)
    v = {
        "stage3 (packed)": lambda: sm._bwd(y, dy, sm._paths(3, n, y.dtype)[1]),
        "looped": lambda: sm._bwd(y, dy, "looped"),
    }
    compiled = {}
    args = (y, dy, dx, m, n, n, n, n)
    for warps in (16, 32):
        v[f"one-block fp32 w{warps}"] = lambda w=warps: (
            sm._softmax_bwd_kernel[(m,)](*args, BLOCK_N=block, ROWS=1, num_warps=w),
            dx,
        )[1]
        k = sm._softmax_bwd_kernel[(m,)](*args, BLOCK_N=block, ROWS=1, num_warps=warps)
        compiled[f"one-block fp32 w{warps}"] = {"regs": k.n_regs, "spills": k.n_spills}
    k = sm._softmax_bwd_row_kernel[(m,)](
        y, dy, dx, n, n, n, n, BLOCK_N=block, PACKED=True, num_warps=sm._bwd_packed_warps(block)
    )
    compiled["stage3 (packed)"] = {"regs": k.n_regs, "spills": k.n_spills}
    if liger is not None:
        v["liger"] = lambda: liger(dy, y)
    return v, compiled


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    liger = liger_backward()
    rows = []
    for m, n in SHAPES:
        for dtype in (torch.bfloat16, torch.float16):
            torch.manual_seed(0)
            y = torch.softmax(3 * torch.randn(m, n, device="cuda"), -1).to(dtype)
            dy = torch.randn(m, n, device="cuda").to(dtype)
            y64, dy64 = y.double(), dy.double()
            want = y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))
            v, compiled = variants(y, dy, liger)
            err = {}
            for name, fn in v.items():
                out = fn()
                torch.cuda.synchronize()
                err[name] = float((out.double() - want).norm() / want.norm())
            del want, y64, dy64
            times: dict[str, list[float]] = {name: [] for name in v}
            for r in range(ROUNDS):
                order = list(v)[r % len(v) :] + list(v)[: r % len(v)]
                for name in order:
                    times[name].append(triton.testing.do_bench(v[name], warmup=25, rep=100, return_mode="median"))
            med = {name: statistics.median(t) for name, t in times.items()}
            case = f"{m}×{n} {str(dtype).removeprefix('torch.')}"
            rows.append({"case": case, "median_ms": med, "rounds_ms": times, "rel_err_vs_fp64": err, "ptxas": compiled})
            print(case, flush=True)
            for name in sorted(med, key=med.get):
                vs = f"  liger/this {med['liger'] / med[name]:.3f}" if "liger" in med else ""
                print(f"  {name:22s} {med[name]:.4f} ms{vs}  rel err {err[name]:.2e}  {compiled.get(name, '')}")
    if args.out:
        out = {"device": torch.cuda.get_device_name(), "timer": "triton.testing.do_bench median", "rows": rows}
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
