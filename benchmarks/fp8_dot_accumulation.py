"""How an fp8 tl.dot accumulates on this GPU: the data an interpreter emulation of Hopper's reduced-precision fp8
accumulation would be fitted to.

Three probes, each with Triton's default accumulation (on sm_90, ``max_num_imprecise_acc`` 2**30: never promoted
to fp32), with ``max_num_imprecise_acc=32`` and with ``0``:

- random e4m3 operands (N(0, 1)) at K = 256 … 16384: the largest error against the exact (fp64) product
  relative to the product's largest magnitude, and the mean signed error relative to the same (a bias toward
  zero would point at truncation);
- swamping: one product of 1 followed by K − 1 products of 2**-j (j = 6 … 18): the GPU's sum against the exact
  1 + (K − 1)·2**-j shows below which size small products stop counting, and whether products inside one MMA
  step are summed before they meet the accumulator;
- the same with the large product last.

Writes one JSON file (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from benchmarks._common import gpu_missing


@triton.jit
def _dot(a_ptr, b_ptr, c_ptr, K: tl.constexpr, IMPRECISE: tl.constexpr, BK: tl.constexpr):
    r = tl.arange(0, 64)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in range(0, K, BK):
        ks = k + tl.arange(0, BK)
        a = tl.load(a_ptr + r[:, None] * K + ks[None, :])
        b = tl.load(b_ptr + ks[:, None] * 64 + r[None, :])
        if IMPRECISE < 0:
            acc = tl.dot(a, b, acc)
        else:
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE)
    tl.store(c_ptr + r[:, None] * 64 + r[None, :], acc)


MODES = {"default": -1, "imprecise_32": 32, "imprecise_0": 0}


def run(a: torch.Tensor, b: torch.Tensor, imprecise: int) -> torch.Tensor:
    c = torch.empty(64, 64, device="cuda")
    _dot[(1,)](a.cuda(), b.cuda(), c, K=a.shape[1], IMPRECISE=imprecise, BK=64)
    return c.cpu().double()


def random_errors() -> dict:
    found = {}
    gen = torch.Generator().manual_seed(0)
    for k in (256, 1024, 4096, 16384):
        a = torch.randn(64, k, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(k, 64, generator=gen).to(torch.float8_e4m3fn)
        exact = a.double() @ b.double()
        scale = exact.abs().max().item()
        for name, imprecise in MODES.items():
            err = run(a, b, imprecise) - exact
            found[f"K{k}_{name}"] = {
                "max_rel": err.abs().max().item() / scale,
                "mean_signed_rel": err.mean().item() / scale,
                "mean_toward_zero_rel": (-(err * exact.sign()).mean()).item() / scale,
            }
    return found


def swamping(big_last: bool) -> dict:
    found = {}
    k = 4096
    for j in range(6, 19):  # e4m3 holds 2**-9 at the least, so each factor 2**-(j/2) stays exact
        a = torch.full((64, k), 2.0 ** -(j // 2), dtype=torch.float64)
        b = torch.full((k, 64), 2.0 ** -(j - j // 2), dtype=torch.float64)
        where = k - 1 if big_last else 0
        a[:, where], b[where, :] = 1.0, 1.0
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        exact = (a.double() @ b.double())[0, 0].item()
        found[f"j{j}"] = {"exact": exact, **{name: run(a, b, imp)[0, 0].item() for name, imp in MODES.items()}}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if gpu_missing("fp8_dot_accumulation.py"):
        return 2
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "random": random_errors(),
        "swamping_big_first": swamping(False),
        "swamping_big_last": swamping(True),
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
