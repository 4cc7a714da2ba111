"""Attention on Hopper against SDPA's own pick (cuDNN), timed alike in one process with triton.testing.do_bench.

    python benchmarks/attention_hopper.py [--rounds 5] [--out FILE.json]

Providers, forward, backward and forward + backward, fp16 and bf16, at the issue's shapes (seq ≥ 4096, head_dim 64
and 128, causal and not): `sdpa` (torch's scaled_dot_product_attention, backend of its choice), `stage3` (stage 3 as
shipped: the Gluon kernels of reference_kernels/attention_hopper.py and attention_hopper_bwd.py where they apply)
and `stage3_triton` (stage 3 with the Gluon kernels turned off: the Triton kernels only). Each round times every
provider once, in turn; the figure is the median over rounds of do_bench's median (L2 cleared before each call).
The backward alone is timed as autograd.grad over a kept graph. Every provider's output and gradients are
checked against SDPA (float64) first. Ratios are SDPA's time over the provider's (> 1: faster).
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing, interleaved_medians, report_head, rounds_parser, write_report  # noqa: E402
from reference_kernels import attention as at  # noqa: E402  (after the checkout is on the path)
from reference_kernels import attention_hopper as ah  # noqa: E402
from reference_kernels import attention_hopper_bwd as hb  # noqa: E402

SHAPES = [(2, 32, 4096, 128, False), (4, 32, 4096, 128, True), (2, 16, 8192, 64, False), (4, 16, 8192, 64, True)]


def _flops(b: int, h: int, s: int, d: int, causal: bool, mode: str) -> float:
    # The backward: five matmuls to the forward's two.
    f = 4.0 * b * h * s * s * d * {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}[mode]
    return f / 2 if causal else f


@contextlib.contextmanager
def _gluon(on: bool):
    """Stage 3 with its Gluon kernels (on) or with the Triton kernels only (off), forward and backward alike."""
    usable = ah.usable, hb.usable
    if not on:
        ah.usable = hb.usable = lambda *_: False
    try:
        yield
    finally:
        ah.usable, hb.usable = usable


def _providers(causal: bool) -> dict:
    """name → (attention function, whether stage 3 may use its Gluon kernels while it runs)."""
    return {
        "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), True),
        "stage3": (lambda q, k, v: at.attention_stage3(q, k, v, causal), True),
        "stage3_triton": (lambda q, k, v: at.attention_stage3(q, k, v, causal), False),
    }


def _check(providers: dict, q, k, v, do, causal: bool, what: str) -> None:
    """Every provider's output and gradients on one batch entry against SDPA in float64."""
    q, k, v, do = q[:1], k[:1], v[:1], do[:1]
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    grads = torch.autograd.grad(expected, leaves, do.double())
    for name, (fn, on) in providers.items():
        mine = [t.clone().requires_grad_(True) for t in (q, k, v)]
        with _gluon(on):
            out = fn(*mine)
            got = torch.autograd.grad(out, mine, do)
        for label, a, b in (("out", out, expected), *zip(("dq", "dk", "dv"), got, grads, strict=True)):
            err = ((a.double() - b).abs().max() / b.abs().max()).item()
            assert err < 2e-2, f"{name} {what}: {label} relative max error {err}"


def main() -> int:
    args = rounds_parser(__doc__).parse_args()
    if gpu_missing("attention_hopper", sm90=True):
        return 2
    device = torch.cuda.get_device_name()
    report = report_head(args.rounds, rows=[])
    print(f"{device}; ratio = sdpa time / provider time")
    for b, h, s, d, causal in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            gen = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
            providers = _providers(causal)
            gluon = {"forward": ah.usable(q, k, v), "backward": hb.usable(q, k, v, q)}
            do = torch.randn_like(q)
            _check(providers, q, k, v, do, causal, f"{b}×{h}×{s}×{d} causal={causal} {dtype}")
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]

            def fwd(fn, on):
                with _gluon(on):
                    fn(q, k, v)

            def fwd_bwd(fn, on):
                for t in leaves:
                    t.grad = None
                with _gluon(on):
                    fn(*leaves).backward(do)

            def bwd_of(fn, on):
                with _gluon(on):
                    out = fn(*leaves)

                def bwd():
                    with _gluon(on):
                        torch.autograd.grad(out, leaves, do, retain_graph=True)

                return bwd

            for mode in ("fwd", "bwd", "fwd+bwd"):
                if mode == "fwd":
                    calls = {name: functools.partial(fwd, fn, on) for name, (fn, on) in providers.items()}
                elif mode == "bwd":
                    calls = {name: bwd_of(fn, on) for name, (fn, on) in providers.items()}
                else:
                    calls = {name: functools.partial(fwd_bwd, fn, on) for name, (fn, on) in providers.items()}
                ms, _ = interleaved_medians(calls, args.rounds, rep=100)
                flops = _flops(b, h, s, d, causal, mode)
                row = {
                    "shape": [b, h, s, d],
                    "causal": causal,
                    "dtype": str(dtype).removeprefix("torch."),
                    "mode": mode,
                    "gluon": gluon,
                    "ms": ms,
                    "tflops": {n: flops / t / 1e9 for n, t in ms.items()},
                    "vs_sdpa": {n: ms["sdpa"] / t for n, t in ms.items()},
                }
                report["rows"].append(row)
                ratios = "  ".join(f"{n} {r:.3f}" for n, r in row["vs_sdpa"].items() if n != "sdpa")
                print(
                    f"{b}×{h}×{s}×{d} {'causal' if causal else 'full  '} {row['dtype']:8s} {mode:7s} "
                    f"sdpa {row['tflops']['sdpa']:.0f} TFLOP/s  {ratios}",
                    flush=True,
                )
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
