"""Tile and backend sweeps behind the reference kernels' stage-3 rules, one GPU run each.

    python benchmarks/tuning_sweep.py [cross_entropy] [rmsnorm_bwd] [attention_backends] [semi_markov_crf]
        [--json out.json]

- cross_entropy: stage 3's split-row kernels over block bytes × values per thread, forward and forward +
  backward (random upstream gradient), against stage 2, eager and torch.compile on the SPEC's bench shapes.
- rmsnorm_bwd: stage 3's one-block backward over warps × pipeline stages, backward alone and forward +
  backward against torch.compile.
- attention_backends: stage 3's forward against torch SDPA pinned to each backend torch offers here
  (flash, cuDNN, memory-efficient) and SDPA's own choice.
- semi_markov_crf: every stage against the PyTorch reference at the bar's shapes, forward and forward +
  backward, with each first call (compilation) timed apart.

Times are triton.testing.do_bench medians (L2 cleared between reps); every figure in one table comes from
one run. The full method (rotated inputs, interleaved baselines, host cross-check) is ``ptt bench``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def ms(fn: Callable[[], Any], rep: int = 100) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    return lambda: fn(*args, **kwargs)


def fwd_bwd(fn: Callable[..., torch.Tensor], args: list[Any], grad_idx: tuple[int, ...]) -> Callable[[], None]:
    leaves = [a.detach().requires_grad_(True) if i in grad_idx else a for i, a in enumerate(args)]
    out = fn(*leaves)
    upstream = torch.randn_like(out)

    def run() -> None:
        for i in grad_idx:
            leaves[i].grad = None
        fn(*leaves).backward(upstream)

    return run


def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    print(f"\n## {title}")
    print(" | ".join(header))
    for r in rows:
        print(" | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in r))


def cross_entropy() -> dict[str, Any]:
    from reference_kernels import cross_entropy as ce

    ref = ce.SPEC.reference
    compiled = torch.compile(ref, dynamic=False)
    variants = [(b, v) for b in (4096, 8192, 16384, 32768) for v in (16, 32)]
    out: dict[str, Any] = {}
    rows = []
    for case in ce.SPEC.bench_cases:
        torch.manual_seed(0)
        logits, targets = ce.SPEC.make_inputs(case.dims, torch.bfloat16, "cuda")
        res: dict[str, float] = {
            "eager fwd": ms(call(ref, logits, targets)),
            "compile fwd": ms(call(compiled, logits, targets)),
            "stage2 fwd": ms(call(ce.cross_entropy_stage2, logits, targets)),
            "eager fb": ms(fwd_bwd(ref, [logits, targets], (0,))),
            "compile fb": ms(fwd_bwd(compiled, [logits, targets], (0,))),
            "stage2 fb": ms(fwd_bwd(ce.cross_entropy_stage2, [logits, targets], (0,))),
        }
        for block_bytes, vpt in variants:
            ce._BLOCK_BYTES, ce._VALUES_PER_THREAD = block_bytes, vpt
            ce._split_plan.cache_clear()
            res[f"s3 {block_bytes}B/{vpt} fwd"] = ms(call(ce.cross_entropy_stage3, logits, targets))
            res[f"s3 {block_bytes}B/{vpt} fb"] = ms(fwd_bwd(ce.cross_entropy_stage3, [logits, targets], (0,)))
        out[case.label] = res
        best_f = min((k for k in res if k.startswith("s3") and k.endswith("fwd")), key=res.get)
        best_b = min((k for k in res if k.startswith("s3") and k.endswith("fb")), key=res.get)
        rows.append(
            [
                case.label,
                res["compile fwd"],
                res["stage2 fwd"],
                best_f,
                res[best_f],
                res["compile fwd"] / res[best_f],
                res["compile fb"],
                res["stage2 fb"],
                best_b,
                res[best_b],
                res["compile fb"] / res[best_b],
            ]
        )
        torch.cuda.empty_cache()
    table(
        "cross_entropy bf16 (ms; × = compile / best stage 3)",
        ["case", "compile f", "s2 f", "best s3 f", "ms", "×", "compile fb", "s2 fb", "best s3 fb", "ms", "×"],
        rows,
    )
    keys = [k for k in next(iter(out.values())) if k.startswith("s3")]
    table(
        "cross_entropy stage 3 variants (ms)",
        ["variant", *out.keys()],
        [[k, *(out[c][k] for c in out)] for k in keys],
    )
    return out


def rmsnorm_bwd() -> dict[str, Any]:
    from reference_kernels import rmsnorm as rn

    compiled = torch.compile(rn.SPEC.reference, dynamic=False)
    real_plan = rn._bwd_plan
    out: dict[str, Any] = {}
    rows = []
    for m, n in ((8192, 8192), (16384, 8192), (16384, 4096)):
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        _, rstd = rn._fwd(x, w, 1e-6, "one_block")
        _, meta = real_plan(m, n, rn._num_sms(x))
        res: dict[str, float] = {
            "compile fb": ms(fwd_bwd(compiled, [x, w], (0, 1))),
            "stage3 fb": ms(fwd_bwd(rn.rmsnorm_stage3, [x, w], (0, 1))),
            f"bwd as shipped {meta}": ms(call(rn._bwd, dy, x, w, rstd, "one_block")),
        }
        trials = ((16, 1, 1), (16, 2, 1), (16, 3, 1), (16, 4, 1), (8, 2, 2), (8, 3, 2), (32, 2, 1))
        for warps, stages, per_sm in trials:
            trial = {**meta, "num_warps": warps, "STAGES": stages}
            parts = min(m, per_sm * rn._num_sms(x))
            rn._bwd_plan = lambda *a, trial=trial, parts=parts: (parts, trial)
            try:
                res[f"bwd w{warps} s{stages} p{per_sm}"] = ms(call(rn._bwd, dy, x, w, rstd, "one_block"))
            except Exception as exc:  # a config that cannot compile (shared memory, registers)
                res[f"bwd w{warps} s{stages} p{per_sm}"] = float("nan")
                print(f"  {m}x{n} w{warps} s{stages}: {type(exc).__name__}: {str(exc)[:120]}")
            finally:
                rn._bwd_plan = real_plan
        out[f"{m}x{n}"] = res
        rows.extend([[f"{m}x{n}", k, v] for k, v in res.items()])
        torch.cuda.empty_cache()
    table("rmsnorm backward, bf16 (ms)", ["shape", "variant", "ms"], rows)
    return out


def attention_backends() -> dict[str, Any]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from reference_kernels import attention as at

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    out: dict[str, Any] = {}
    rows = []
    shapes = ((4, 32, 4096, 64, False), (8, 32, 4096, 64, True), (2, 32, 4096, 128, False), (4, 32, 4096, 128, True))
    for b, h, s, d, causal in shapes:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        res: dict[str, float] = {"stage3": ms(call(at.attention_stage3, q, k, v, causal=causal))}
        res["sdpa default"] = ms(call(F.scaled_dot_product_attention, q, k, v, is_causal=causal))
        for name, backend in backends.items():
            try:
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    res[f"sdpa {name}"] = ms(call(F.scaled_dot_product_attention, q, k, v, is_causal=causal))
            except Exception as exc:
                res[f"sdpa {name}"] = float("nan")
                print(f"  {name}: {type(exc).__name__}: {str(exc)[:120]}")
        label = f"B{b} H{h} S{s} d{d}{' causal' if causal else ''}"
        out[label] = res
        rows.append([label, *(f"{v:.4f} ({flops / v / 1e9:.0f} TF/s)" for v in res.values())])
        header = ["case", *res.keys()]
    table("attention forward, bf16 (ms)", header, rows)
    return out


def semi_markov_crf() -> dict[str, Any]:
    """The CRF's bar: every stage against its PyTorch reference (a Python loop over T, no torch.compile: it
    would unroll 1024 steps) at the bench shapes, forward and forward + backward; first calls timed apart."""
    import time

    from reference_kernels import semi_markov_crf as crf

    spec = crf.SPEC
    out: dict[str, Any] = {}
    rows = []
    for case in spec.bench_cases:
        torch.manual_seed(0)
        args = list(spec.make_inputs(case.dims, torch.float32, "cuda"))
        kwargs = spec.call_kwargs(case.dims)
        res: dict[str, float] = {}
        for label, fn in (("eager", spec.reference), *((f"stage{n}", f) for n, f in sorted(spec.stages.items()))):
            started = time.perf_counter()
            fn(*args, **kwargs)
            torch.cuda.synchronize()
            res[f"{label} first call s"] = time.perf_counter() - started
            res[f"{label} fwd"] = ms(call(fn, *args, **kwargs), rep=20 if label == "eager" else 100)
        for label, fn in (("eager", spec.reference), ("stage3", spec.stages[3])):
            run = fwd_bwd(lambda *a, fn=fn, kw=kwargs: fn(*a, **kw).sum(), args, tuple(spec.grad_inputs))
            res[f"{label} fb"] = ms(run, rep=20 if label == "eager" else 100)
        out[case.label] = res
        rows.append(
            [case.label, res["eager fwd"], res["stage3 fwd"], res["eager fwd"] / res["stage3 fwd"], res["eager fb"],
             res["stage3 fb"], res["eager fb"] / res["stage3 fb"]]
        )  # fmt: skip
        print({k: round(v, 4) for k, v in res.items()}, flush=True)
    table(
        "semi_markov_crf fp32 (ms; × = PyTorch reference / stage 3)",
        ["case", "eager f", "s3 f", "×", "eager fb", "s3 fb", "×"],
        rows,
    )
    return out


SECTIONS = {
    "cross_entropy": cross_entropy,
    "rmsnorm_bwd": rmsnorm_bwd,
    "attention_backends": attention_backends,
    "semi_markov_crf": semi_markov_crf,
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--json")
    args = parser.parse_args()
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    if not torch.cuda.is_available():
        print("tuning_sweep needs a CUDA GPU")
        return 3
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    results = {"device": torch.cuda.get_device_name()}
    for name in args.sections or SECTIONS:
        results[name] = SECTIONS[name]()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
