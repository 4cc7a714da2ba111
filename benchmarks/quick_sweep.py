"""Quick GPU sweep of the reference kernels for tuning: every stage vs eager and torch.compile, one run.

    python benchmarks/quick_sweep.py [NAME ...] [--json out.json] [--backward]

Times with triton.testing.do_bench (median, L2 flushed between reps). Prints ratios measured in this run;
the full method (rotated inputs, event cross-checks, roofline) is `ptt bench` / benchmarks/reference_kernels.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import NAMES  # noqa: E402  (importable once ROOT is on the path)


def copy_bandwidth_gbps() -> float:
    x = torch.empty(1 << 29, dtype=torch.uint8, device="cuda")  # 512 MiB, far beyond L2
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=50, rep=300, return_mode="median")
    return 2 * x.numel() / ms / 1e6


def _bench(fn, warmup=25, rep=100) -> float:
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def _fwd_bwd(fn, args, grad_idx):
    def run():
        leaves = [a.detach().requires_grad_(True) if i in grad_idx else a for i, a in enumerate(args)]
        out = fn(*leaves)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.ones_like(out))

    return run


def sweep(name: str, backward: bool, peak_gbps: float) -> list[dict]:
    module = importlib.import_module(f"reference_kernels.{name}")
    spec = module.SPEC
    dtype = spec.dtypes[0]
    rows = []
    compiled = torch.compile(spec.reference, dynamic=False)
    for case in spec.bench_cases:
        args = spec.make_inputs(case.dims, dtype, "cuda")
        kwargs = spec.call_kwargs(case.dims)
        row = {"kernel": name, "case": case.label, "dims": case.dims, "dtype": str(dtype).replace("torch.", "")}
        nbytes = spec.bytes_moved(case.dims, dtype)
        nflops = spec.flops(case.dims, dtype)
        try:
            t0 = time.perf_counter()
            compiled(*args, **kwargs)
            torch.cuda.synchronize()
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            row["compile_ms"] = _bench(lambda args=args, kwargs=kwargs: compiled(*args, **kwargs))
        except Exception as exc:
            row["compile_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        row["eager_ms"] = _bench(lambda args=args, kwargs=kwargs: spec.reference(*args, **kwargs))
        for stage, fn in sorted(spec.stages.items()):
            try:
                ms = _bench(lambda fn=fn, args=args, kwargs=kwargs: fn(*args, **kwargs))
                row[f"stage{stage}_ms"] = ms
            except Exception as exc:
                row[f"stage{stage}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        best = min((row[k] for k in row if k.startswith("stage") and k.endswith("_ms")), default=None)
        if best:
            row["best_ms"] = best
            row["best_gbps"] = nbytes / best / 1e6
            row["best_pct_copy_bw"] = 100 * row["best_gbps"] / peak_gbps
            row["best_tflops"] = nflops / best / 1e9
            row["vs_eager"] = row["eager_ms"] / best
            if "compile_ms" in row:
                row["vs_compile"] = row["compile_ms"] / best
        if backward and spec.grad_inputs:
            grad_idx = set(spec.grad_inputs)
            try:
                row["fb_eager_ms"] = _bench(_fwd_bwd(lambda *a, kw=kwargs: spec.reference(*a, **kw), args, grad_idx))
                row["fb_compile_ms"] = _bench(_fwd_bwd(lambda *a, kw=kwargs: compiled(*a, **kw), args, grad_idx))
                row["fb_best_ms"] = _bench(_fwd_bwd(lambda *a, kw=kwargs: spec.best(*a, **kw), args, grad_idx))
                row["fb_vs_compile"] = row["fb_compile_ms"] / row["fb_best_ms"]
            except Exception as exc:
                row["fb_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*", default=list(NAMES))
    parser.add_argument("--json")
    parser.add_argument("--backward", action="store_true")
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    peak = copy_bandwidth_gbps()
    print(f"device {torch.cuda.get_device_name()}  copy bandwidth {peak:.0f} GB/s", flush=True)
    rows = []
    for name in args.names:
        started = time.perf_counter()
        try:
            rows.extend(sweep(name, args.backward, peak))
        except Exception as exc:
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
        print(f"{name}: {time.perf_counter() - started:.1f} s", flush=True)
    print("\nkernel           case                              best ms  %copyBW  vs eager  vs compile  fb vs compile")
    for r in rows:
        print(
            f"{r['kernel']:<16} {r['case'][:32]:<32} {r.get('best_ms', float('nan')):9.4f} "
            f"{r.get('best_pct_copy_bw', float('nan')):7.1f} {r.get('vs_eager', float('nan')):9.2f} "
            f"{r.get('vs_compile', float('nan')):10.2f} {r.get('fb_vs_compile', float('nan')):13.2f}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "copy_gbps": peak, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
