"""Row-kernel launch choices against Liger-Kernel, timed alike in one process (triton.testing.do_bench, median).

    python benchmarks/rows_sweep.py [--out FILE.json]

Softmax backward at long rows: the looped kernel (stage 3 today past 16384 columns) against the one-block kernel
at 16 and 32 warps; softmax forward at 32768 columns at 16 and 32 warps; layernorm forward at 4096 columns at 4, 8
and 16 warps (stage 3 picks 4). Each variant is checked against PyTorch before it is timed. bf16.
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import layernorm as ln  # noqa: E402
from reference_kernels import softmax as sm  # noqa: E402


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a.float() - b.float()).norm() / b.float().norm()).item() < 2e-2)


def liger():
    try:
        from liger_kernel.transformers import functional

        return functional
    except Exception:
        return None


def softmax_rows(rows: list, lf) -> None:
    for m, n in [(4096, 16384), (4096, 32768), (4096, 65536)]:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        y = torch.softmax(x.float(), -1).to(x.dtype)
        dy = torch.randn_like(y)
        want = (y.float() * (dy.float() - (y.float() * dy.float()).sum(-1, keepdim=True))).to(x.dtype)
        dx = torch.empty_like(y)
        variants = {"stage3": lambda: sm._bwd(y, dy, sm._paths(3, n, y.dtype)[1])}
        block = sm._block_n(n)
        for warps in (16, 32):
            args = (y, dy, dx, m, n, n, n, n)
            variants[f"one-block w{warps}"] = lambda a=args, w=warps: (
                sm._softmax_bwd_kernel[(m,)](*a, BLOCK_N=block, ROWS=1, num_warps=w),
                dx,
            )[1]
        if lf is not None:
            from liger_kernel.ops.softmax import _softmax_backward
            from liger_kernel.ops.utils import calculate_settings

            settings = calculate_settings(n)
            variants["liger"] = lambda s=settings: _softmax_backward(dy, y, s[0], s[1], False)
        timed(rows, f"softmax bwd {m}×{n}", variants, want)
        want_f = y
        fwd = {"stage3": lambda: sm._fwd(x, sm._paths(3, n, x.dtype)[0])}
        yy = torch.empty_like(x)
        for warps in (16, 32):
            fwd[f"one-block w{warps}"] = lambda w=warps: (
                sm._softmax_fwd_kernel[(m,)](x, yy, m, n, n, n, BLOCK_N=block, ROWS=1, num_warps=w),
                yy,
            )[1]
        if lf is not None:
            fwd["liger"] = lambda: lf.liger_softmax(x)
        timed(rows, f"softmax fwd {m}×{n}", fwd, want_f)


def layernorm_rows(rows: list, lf) -> None:
    for m, n in [(4096, 4096), (8192, 4096), (16384, 4096), (4096, 8192)]:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        want = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float()).to(x.dtype)
        y = torch.empty_like(x)
        mean = torch.empty(m, device="cuda")
        rstd = torch.empty(m, device="cuda")
        variants = {"stage3": lambda: ln.layernorm_stage3(x, w, b)}
        for warps in (4, 8, 16):
            variants[f"rows1 w{warps}"] = lambda wp=warps: (
                ln._layernorm_fwd_kernel[(m,)](
                    x, w, b, y, mean, rstd, m, n, n, n, 1e-5, BLOCK_N=ln._block_n(n), ROWS=1, num_warps=wp
                ),
                y,
            )[1]
        if lf is not None:
            variants["liger"] = lambda: lf.liger_layer_norm(x, w, b, 1e-5)
        timed(rows, f"layernorm fwd {m}×{n}", variants, want)


def timed(rows: list, label: str, variants: dict, want: torch.Tensor) -> None:
    row = {"case": label, "ms": {}, "errors": {}}
    for name, fn in variants.items():
        try:
            out = fn()
            torch.cuda.synchronize()
            if not close(out, want):
                row["errors"][name] = "mismatch"
                continue
            row["ms"][name] = bench(fn)
        except Exception as exc:
            row["errors"][name] = f"{type(exc).__name__}: {str(exc)[:120]}"
    # The baseline again at the end: its two figures bound the noise.
    if "stage3" in row["ms"]:
        row["ms"]["stage3 (again)"] = bench(variants["stage3"])
    rows.append(row)
    base = row["ms"].get("stage3")
    text = "  ".join(f"{k} {v:.4f}" + (f" ({base / v:.3f}×)" if base else "") for k, v in row["ms"].items())
    print(f"{label}: {text}  {row['errors'] or ''}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    lf = liger()
    rows: list = []
    softmax_rows(rows, lf)
    layernorm_rows(rows, lf)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
