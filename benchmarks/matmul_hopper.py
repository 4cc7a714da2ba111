"""The Gluon matmul of reference_kernels/matmul_hopper.py against cuBLAS and the Triton stage 3, on Hopper.

    python benchmarks/matmul_hopper.py [--rounds 7] [--sizes 4096,8192] [--variants S,G,E;...] [--out FILE.json]

First every shape and epilogue the Gluon kernel serves is checked against a float64 product (the largest error
relative to the largest magnitude must stay under 1e-2): tile tails in M, N and K, bias with each activation,
fp16 and bf16. Then, at M = N = K of each size (fp16 and bf16), cuBLAS (torch.matmul), the Triton persistent
kernel (stage 3 with the Gluon kernel turned off, autotuned first) and the Gluon kernel are timed in interleaved
rounds with triton.testing.do_bench (L2 cleared); the figure is the median over rounds. Ratios are cuBLAS's time
over the provider's (> 1: faster than cuBLAS). ``--variants`` adds Gluon kernels with other knobs to the rounds,
each as STAGES,GROUP_M,EPILOGUE_SPLIT (0/1), each checked at a tail shape with bias and gelu first.
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    gpu_missing,
    interleaved_medians,
    relative_error,
    report_head,
    rounds_parser,
    times_line,
    write_report,
    wrong_checks,
)
from reference_kernels import matmul as mm  # noqa: E402  (after the checkout is on the path)
from reference_kernels import matmul_hopper as mh  # noqa: E402

# (M, N, K): whole tiles, tails in every dimension, a K shorter than one block.
CHECK_SHAPES = [(4096, 4096, 512), (4000, 4104, 1000), (33000, 384, 72), (2048, 16896, 40)]
TOLERANCE = 1e-2


def expected(a, b, bias, activation: str) -> torch.Tensor:
    out = a.double() @ b.double()
    if bias is not None:
        out = out + bias.double()
    if activation == "relu":
        out = torch.relu(out)
    elif activation == "gelu":
        out = torch.nn.functional.gelu(out, approximate="tanh")
    elif activation == "silu":
        out = torch.nn.functional.silu(out)
    return out


def check() -> list[dict]:
    rows = []
    for m, n, k in CHECK_SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            gen = torch.Generator(device="cuda").manual_seed(m + n + k)
            a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
            b = torch.randn(k, n, device="cuda", dtype=dtype, generator=gen)
            bias = torch.randn(n, device="cuda", dtype=dtype, generator=gen)
            for with_bias, activation in ((False, "none"), (True, "none"), (True, "relu"), (True, "gelu"),
                                          (True, "silu")):  # fmt: skip
                c = torch.empty(m, n, device="cuda", dtype=dtype)
                used = bias if with_bias else None
                served = mh.usable(a, b, c, used)
                got = mh.matmul(a, b, c, used, mm.ACTIVATIONS[activation]) if served else None
                err = relative_error(got, expected(a, b, used, activation)) if served else None
                rows.append({"shape": [m, n, k], "dtype": str(dtype).removeprefix("torch."), "bias": with_bias,
                             "activation": activation, "served": served, "error": err})  # fmt: skip
    return rows


def parse_variants(text: str) -> list[tuple[int, int, bool]]:
    """ "3,8,0;4,8,1" → [(3, 8, False), (4, 8, True)]; ValueError for anything else."""
    out = []
    for part in filter(None, text.split(";")):
        stages, group, split = (int(v) for v in part.split(","))
        out.append((stages, group, bool(split)))
    return out


def check_variant(variant: tuple[int, int, bool]) -> float:
    m, n, k = CHECK_SHAPES[1]
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    run_variant(a, b, c, bias, mm.ACTIVATIONS["gelu"], variant)
    return relative_error(c, expected(a, b, bias, "gelu"))


def run_variant(a, b, c, bias, act: int, variant: tuple[int, int, bool]) -> None:
    tiles = -(-a.shape[0] // mh.BLOCK_M) * -(-b.shape[1] // mh.BLOCK_N)
    grid = (min(torch.cuda.get_device_properties(a.device).multi_processor_count, tiles),)
    mh._matmul_hopper[grid](*mh.launch_args(a, b, c, bias, act, *variant), num_warps=4, maxnreg=mh._MAXNREG)


def main() -> int:
    parser = rounds_parser(__doc__, rounds=7)
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--variants", default="")
    ns = parser.parse_args()
    try:
        sizes = [int(v) for v in ns.sizes.split(",")]
        variants = parse_variants(ns.variants)
    except ValueError:
        print("matmul_hopper: give --sizes as comma-separated integers and --variants as STAGES,GROUP_M,SPLIT "
              f"triples joined by ';', not {ns.sizes!r} / {ns.variants!r}", file=sys.stderr)  # fmt: skip
        return 2
    if gpu_missing("matmul_hopper", sm90=True):
        return 2
    report = report_head(ns.rounds, checks=check(), rows=[])
    for variant in variants:
        report["checks"].append({"variant": list(variant), "served": True, "error": check_variant(variant)})
    served = [r for r in report["checks"] if r["served"]]
    failed = wrong_checks(report["device"], served, TOLERANCE, "checks served")
    for size in sizes:
        for dtype in (torch.float16, torch.bfloat16):
            a = torch.randn(size, size, device="cuda", dtype=dtype)
            b = torch.randn(size, size, device="cuda", dtype=dtype)
            c = torch.empty(size, size, device="cuda", dtype=dtype)
            usable = mh.usable
            mh.usable = lambda *_: False
            try:
                mm.matmul_stage3(a, b)  # autotune the Triton kernel alone
            finally:
                mh.usable = usable

            def triton_only():
                mh.usable = lambda *_: False
                try:
                    mm.matmul_stage3(a, b)
                finally:
                    mh.usable = usable

            calls = {
                "cublas": lambda: torch.matmul(a, b),
                "triton": triton_only,
                "gluon": lambda: mh.matmul(a, b, c, None, 0),
                "stage3": lambda: mm.matmul_stage3(a, b),
            }
            for variant in variants:
                calls["gluon s{}g{}{}".format(*variant[:2], " split" if variant[2] else "")] = lambda variant=variant: (
                    run_variant(a, b, c, None, 0, variant)
                )
            ms, times = interleaved_medians(calls, ns.rounds)
            flops = 2.0 * size**3
            row = {
                "size": size,
                "dtype": str(dtype).removeprefix("torch."),
                "ms": ms,
                "rounds_ms": times,
                "tflops": {n: flops / t / 1e9 for n, t in ms.items()},
                "vs_cublas": {n: ms["cublas"] / t for n, t in ms.items()},
            }
            report["rows"].append(row)
            print(f"{size}³ {row['dtype']}: {times_line(ms, row['vs_cublas'], digits=1)}", flush=True)
    write_report(ns.out, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
