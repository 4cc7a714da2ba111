"""How `ptt eval` scales with GPUs: the same batch on one GPU, then on every GPU of this machine.

    python benchmarks/eval_scaling.py OUT.json [--problems 22] [--reps 500]
    python benchmarks/eval_scaling.py OUT.json --dry-run      # no GPU: tiny shapes, interpreter, no timing

Self-contained: it writes ≥ 20 KernelBench-style problems (elementwise, binary, row-wise softmax /
normalisations / reductions) with Triton solutions into a scratch folder, then runs three passes through
:func:`mcp_server.engine.evaluate.run_eval`, each with a fresh results database:

1. warm-up on all GPUs (fills the Triton and inductor caches and the device-peaks cache; reported, not
   compared), so that the two measured passes do the same work;
2. one GPU;
3. all GPUs.

Validation uses get_inputs() (4096×4096 fp32); timing uses get_bench_cases() (16384×8192 fp32, 512 MiB per
tensor), so each bench moves gigabytes per call and its timed part is a noticeable share of a pair. The
speed-up is wall(1 GPU) / wall(all GPUs); near-linear is the target (each GPU's pairs run in their own
children; the host's CPUs compile for all of them). Job tensors go through /dev/shm when it exists.
About 5 minutes on 2×H200.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# --- the problem set -------------------------------------------------------------------------------------

UNARY = {  # name: (torch expression of x, Triton expression of x)
    "relu": ("torch.relu(x)", "tl.maximum(x, 0.0)"),
    "leaky_relu": ("torch.nn.functional.leaky_relu(x, 0.1)", "tl.where(x > 0, x, 0.1 * x)"),
    "silu": ("torch.nn.functional.silu(x)", "x / (1.0 + tl.exp(-x))"),
    "sigmoid": ("torch.sigmoid(x)", "1.0 / (1.0 + tl.exp(-x))"),
    "square": ("x * x", "x * x"),
    "abs": ("torch.abs(x)", "tl.abs(x)"),
    "hardtanh": ("torch.clamp(x, -1.0, 1.0)", "tl.minimum(tl.maximum(x, -1.0), 1.0)"),
    "elu": ("torch.nn.functional.elu(x)", "tl.where(x > 0, x, tl.exp(x) - 1.0)"),
}
BINARY = {  # name: (torch expression of x, y, Triton expression)
    "add": ("x + y", "x + y"),
    "mul": ("x * y", "x * y"),
    "axpby": ("2.0 * x - 0.5 * y", "2.0 * x - 0.5 * y"),
    "maximum": ("torch.maximum(x, y)", "tl.maximum(x, y)"),
    "sigmoid_gate": ("x * torch.sigmoid(y)", "x / (1.0 + tl.exp(-y))"),
    "squared_diff": ("(x - y) * (x - y)", "(x - y) * (x - y)"),
}
ROWWISE = {  # name: (torch forward body, masked-load neutral value, Triton body, output is a row vector)
    "softmax": (
        "torch.softmax(x, dim=-1)",
        "float('-inf')",
        "m = tl.max(x, 0)\n    e = tl.exp(x - m)\n    y = e / tl.sum(e, 0)",
        True,
    ),
    "log_softmax": (
        "torch.log_softmax(x, dim=-1)",
        "float('-inf')",
        "m = tl.max(x, 0)\n    s = tl.sum(tl.exp(x - m), 0)\n    y = x - m - tl.log(s)",
        True,
    ),
    "rmsnorm": (
        "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)",
        "0.0",
        "ms = tl.sum(x * x, 0) / n_cols\n    y = x / tl.sqrt(ms + 1e-6)",
        True,
    ),
    "layernorm": (
        "torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-5)",
        "0.0",
        "mean = tl.sum(x, 0) / n_cols\n    d = tl.where(mask, x - mean, 0.0)\n"
        "    y = d / tl.sqrt(tl.sum(d * d, 0) / n_cols + 1e-5)",
        True,
    ),
    "l2_normalize": (
        "torch.nn.functional.normalize(x, dim=-1)",
        "0.0",
        "y = x / tl.maximum(tl.sqrt(tl.sum(x * x, 0)), 1e-12)",
        True,
    ),
    "row_sum": ("x.sum(dim=-1)", "0.0", "y = tl.sum(x, 0)", False),
    "row_max": ("x.amax(dim=-1)", "float('-inf')", "y = tl.max(x, 0)", False),
    "row_mean": ("x.mean(dim=-1)", "0.0", "y = tl.sum(x, 0) / n_cols", False),
}

PROBLEM = '''"""{doc}"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, {args}):
        return {expr}


def get_inputs():
    return [{validate_inputs}]


def get_bench_cases():
    # Made on the GPU directly: 512 MiB of randn per tensor would take the CPU seconds per bench.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {{"{bench_label}": [{bench_inputs}]}}


def get_init_inputs():
    return []
'''

ELEMENTWISE_SOLUTION = '''"""Triton solution: {doc}"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024  # 4 KiB of fp32 per program per operand


@triton.jit
def _kernel({ptrs}, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
{loads}
    tl.store(out_ptr + offs, {expr}, mask=mask)


class ModelNew(nn.Module):
    def forward(self, {args}):
{contig}
        out = torch.empty_like(x)
        n = x.numel()
        _kernel[(triton.cdiv(n, BLOCK),)]({args}, out, n, BLOCK=BLOCK)
        return out
'''

ROWWISE_SOLUTION = '''"""Triton solution: {doc} (one program per row; the row fits one block)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other={other}).to(tl.float32)
    {body}
    {store}


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, n_cols = x.shape
        out = {alloc}
        block = triton.next_power_of_2(n_cols)
        _kernel[(rows,)](x, out, n_cols, x.stride(0), BLOCK=block, num_warps=16 if block >= 8192 else 8)
        return out
'''


def write_problems(folder: Path, count: int, validate_shape: tuple[int, int], bench_shape: tuple[int, int]) -> int:
    problems, solutions = folder / "problems", folder / "solutions"
    problems.mkdir(parents=True)
    solutions.mkdir(parents=True)
    vm, vn = validate_shape
    bm, bn = bench_shape
    label = f"{bm}x{bn}"
    entries = []
    for name, (torch_expr, tl_expr) in UNARY.items():
        entries.append((name, "x", torch_expr, ELEMENTWISE_SOLUTION, {"expr": tl_expr}))
    for name, (torch_expr, tl_expr) in BINARY.items():
        entries.append((name, "x, y", torch_expr, ELEMENTWISE_SOLUTION, {"expr": tl_expr}))
    for name, (torch_expr, other, body, vector) in ROWWISE.items():
        store = "tl.store(out_ptr + row * n_cols + cols, y, mask=mask)" if vector else "tl.store(out_ptr + row, y)"
        alloc = "torch.empty_like(x)" if vector else "torch.empty(rows, device=x.device, dtype=x.dtype)"
        entries.append(
            (name, "x", torch_expr, ROWWISE_SOLUTION, {"other": other, "body": body, "store": store, "alloc": alloc})
        )
    entries = entries[:count]
    for index, (name, args, torch_expr, template, extra) in enumerate(entries, 1):
        stem = f"{index}_{name}"
        names = [a.strip() for a in args.split(",")]
        doc = f"{name}: {torch_expr}"
        (problems / f"{stem}.py").write_text(
            PROBLEM.format(
                doc=doc,
                args=args,
                expr=torch_expr,
                validate_inputs=", ".join(f"torch.randn({vm}, {vn})" for _ in names),
                bench_label=label,
                bench_inputs=", ".join(f"torch.randn({bm}, {bn}, device=device)" for _ in names),
            )
        )
        if template is ELEMENTWISE_SOLUTION:
            code = template.format(
                doc=doc,
                ptrs=", ".join(f"{a}_ptr" for a in names),
                loads="\n".join(f"    {a} = tl.load({a}_ptr + offs, mask=mask)" for a in names),
                expr=extra["expr"],
                args=args,
                contig="\n".join(f"        {a} = {a}.contiguous()" for a in names),
            )
        else:
            code = template.format(doc=doc, **extra)
        (solutions / f"{stem}.py").write_text(code)
    return len(entries)


# --- the passes ------------------------------------------------------------------------------------------


def run_pass(label: str, folder: Path, pool, settings, out_dir: Path) -> dict:
    from mcp_server.engine.evaluate import run_eval

    def progress(done: float, total: float | None, message: str) -> None:
        sys.stderr.write(f"  [{label}] {message}\n")

    started = time.perf_counter()
    report = run_eval(
        folder / "problems",
        folder / "solutions",
        db=out_dir / f"{label}.db",
        redo=True,
        settings=settings,
        pool=pool,
        progress=progress,
    )
    wall = time.perf_counter() - started
    rows = report.problems
    per_worker: dict[str, int] = {}
    for r in rows:
        per_worker[r.worker or "-"] = per_worker.get(r.worker or "-", 0) + 1

    def mean(values: list[float | None]) -> float | None:
        values = [v for v in values if v is not None]
        return round(statistics.fmean(values), 3) if values else None

    return {
        "pass": label,
        "workers": [w.name for w in pool.workers],
        "wall_s": round(wall, 2),
        "problems": len(rows),
        "correct": report.overall.correct,
        "measured": sum(1 for r in rows if r.timing == "measured"),
        "pairs_per_worker": per_worker,
        "mean_validate_s": mean([r.validate_s for r in rows]),
        "mean_bench_s": mean([r.bench_s for r in rows]),
        "mean_pair_s": mean([r.seconds for r in rows]),
        "fast_p": [p.model_dump() for p in report.overall.fast_p],
        "failures": {r.name: r.summary for r in rows if not r.correct},
        "timing_notes": {r.name: r.timing_note for r in rows if r.timing_note},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where to write the JSON results")
    parser.add_argument("--problems", type=int, default=len(UNARY) + len(BINARY) + len(ROWWISE))
    parser.add_argument("--reps", type=int, default=500, help="timed calls per provider (default 500)")
    parser.add_argument("--skip-warmup", action="store_true", help="caches are warm already")
    parser.add_argument("--work-dir", help="keep the generated problems and databases here")
    parser.add_argument("--dry-run", action="store_true", help="no GPU needed: tiny shapes, validation only")
    args = parser.parse_args()
    if args.problems < 1:
        parser.error("--problems must be at least 1")

    shm = None
    if Path("/dev/shm").is_dir() and "PTT_TMPDIR" not in os.environ:
        shm = tempfile.mkdtemp(prefix="ptt-scaling-", dir="/dev/shm")
        os.environ["PTT_TMPDIR"] = shm
    from mcp_server.engine.evaluate import EvalSettings
    from mcp_server.engine.pool import WorkerPool, discover
    from mcp_server.engine.runner import Runner

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="ptt-eval-scaling-")).resolve()
    if work.exists() and any(work.iterdir()):
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    shapes = ((64, 96), (64, 96)) if args.dry_run else ((4096, 4096), (16384, 8192))
    n = write_problems(work, args.problems, *shapes)
    settings = EvalSettings(seeds=1, derive_shapes=False, reps=args.reps, timeout_s=300, bench=not args.dry_run)

    with Runner() as probe_runner:
        everything = discover(probe_runner)
        try:
            if everything.interpreter and not args.dry_run:
                sys.stderr.write("eval_scaling: no CUDA GPU here; run it on the multi-GPU machine (or --dry-run)\n")
                return 3
            gpus = len(everything.workers)
            device = everything.device.device
            sys.stderr.write(f"eval_scaling: {n} problems on {gpus} × {device}; work dir {work}\n")
            passes = []
            if not args.skip_warmup:
                passes.append(run_pass("warmup-all", work, everything, settings, work))
            # The one-GPU pool reuses the first worker (its fork server is as warm as in the last pass).
            one = WorkerPool(everything.workers[:1])
            passes.append(run_pass("one-gpu", work, one, settings, work))
            passes.append(run_pass("all-gpus", work, everything, settings, work))
        finally:
            everything.close()

    t1 = next(p["wall_s"] for p in passes if p["pass"] == "one-gpu")
    tn = next(p["wall_s"] for p in passes if p["pass"] == "all-gpus")
    speedup = t1 / tn if tn else None
    result = {
        "benchmark": "eval_scaling",
        "device": device,
        "gpus": gpus,
        "problems": n,
        "settings": settings.model_dump(),
        "validate_shape": shapes[0],
        "bench_shape": shapes[1],
        "dry_run": args.dry_run,
        "python": platform.python_version(),
        "passes": passes,
        "one_gpu_wall_s": t1,
        "all_gpus_wall_s": tn,
        "speedup": round(speedup, 3) if speedup else None,
        "efficiency": round(speedup / gpus, 3) if speedup else None,
        "work_dir": str(work),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\n{n} problems, {device}")
    print(f"{'pass':<12} {'GPUs':>4} {'wall s':>8} {'correct':>8} {'timed':>6} {'mean pair s':>12} {'bench s':>8}")
    for p in passes:
        print(
            f"{p['pass']:<12} {len(p['workers']):>4} {p['wall_s']:>8.1f} {p['correct']:>5}/{p['problems']:<2} "
            f"{p['measured']:>6} {p['mean_pair_s'] or 0:>12.2f} {p['mean_bench_s'] or 0:>8.2f}"
        )
    if speedup:
        print(f"speed-up {speedup:.2f}× on {gpus} GPUs (efficiency {100 * speedup / gpus:.0f} %)")
    print(f"JSON: {args.out}")
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    if shm:
        shutil.rmtree(shm, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
