"""The passes around the Gluon attention backward's main kernel, on Hopper: the delta pass (rowsum(O ∘ dO)),
dQ's fp32 buffer fill, and the scale-and-cast of dQ; and stage 3's whole backward with the buffer zeroed by the
delta pass (as shipped) against the same backward with a fill of its own, next to SDPA's backward; and the delta
pass (zeroing dQ's buffer) and dQ's scale-and-cast at other tiles: rows or elements per program, and warps.

    python benchmarks/attention_bwd_passes.py [--rounds 7] [--dtype bfloat16|float16] [--out FILE.json]

Both whole backwards are first checked against float64 autograd at small shapes, fp16 and bf16, causal and not
(the largest error over dQ, dK and dV relative to each gradient's largest magnitude must stay under 1e-2). Then,
in --dtype (bf16 unless told), each round times every entry once with triton.testing.do_bench (L2 cleared), in
turn; the figure is the median over rounds. SDPA's backward is autograd.grad over a kept graph.
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._attention import TOLERANCE, backward_checks  # noqa: E402
from benchmarks._common import (  # noqa: E402
    gpu_missing,
    interleaved_medians,
    report_head,
    rounds_parser,
    write_report,
    wrong_checks,
)
from reference_kernels import attention as at  # noqa: E402  (after the checkout is on the path)
from reference_kernels import attention_hopper_bwd as hb  # noqa: E402

SHAPES = [(2, 32, 4096, 128, False), (1, 16, 8192, 128, False), (4, 32, 4096, 128, True), (2, 16, 8192, 64, False)]
# (rows per program, warps) of the delta pass beside the shipped (at._DELTA_ROWS, 4).
DELTA_TILES = [(64, 4), (64, 8), (128, 4), (128, 8)]
# (elements per program, warps) of dQ's scale-and-cast beside the shipped (hb._CAST_BLOCK, hb._CAST_WARPS).
CAST_TILES = [(8192, 8), (8192, 4), (16384, 8), (16384, 16)]


def own_fill(q, k, v, o, lse, do, causal):
    """Stage 3's Hopper backward with dQ's buffer zeroed by a fill of its own after the delta pass."""
    return hb.backward(q, k, v, do, lse, at._delta(o, do, lse), causal)


def main() -> int:
    parser = rounds_parser(__doc__, rounds=7)
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    ns = parser.parse_args()
    dtype = getattr(torch, ns.dtype)
    if gpu_missing("attention_bwd_passes", sm90=True):
        return 2
    checks = backward_checks({"shipped": at._attention_backward_hopper, "own fill": own_fill}, hb.HEAD_DIMS)
    report = report_head(ns.rounds, checks=checks, rows=[], dtype=ns.dtype)
    failed = bool(wrong_checks(report["device"], report["checks"], TOLERANCE))
    for b, h, s, d, causal in SHAPES:
        q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(4))
        o, lse = at._attention_stage3(q, k, v, causal, store_lse=True)
        buf = torch.empty((b, h, s, d), dtype=torch.float32, device="cuda")
        dq = torch.empty_like(q)
        n = dq.numel()
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        calls = {
            "delta": lambda: at._delta(o, do, lse),
            "delta + zero dQ": lambda: at._delta(o, do, lse, buf),
            **{
                f"delta + zero dQ, {rows} rows {warps} warps": lambda rows=rows, warps=warps: (
                    at._attn_bwd_preprocess_kernel[(triton.cdiv(s, rows), b * h)](
                        o, do, torch.empty_like(lse), buf, s, HEAD_DIM=d, BLOCK_M=rows, ZERO_DQ=True, num_warps=warps
                    )
                )
                for rows, warps in DELTA_TILES
            },
            **{
                f"scale + cast dQ, {block} elements {warps} warps": lambda block=block, warps=warps: (
                    hb._scale_cast_kernel[(triton.cdiv(n, block),)](
                        buf, dq, 1.0 / math.sqrt(d), n, BLOCK=block, num_warps=warps
                    )
                )
                for block, warps in CAST_TILES
            },
            "fill dQ": lambda: torch.zeros((b * h * s, d), dtype=torch.float32, device="cuda"),
            "scale + cast dQ": lambda: hb.scale_cast(buf, dq, 1.0 / math.sqrt(d)),
            "stage3 backward": lambda: at._attention_backward_hopper(q, k, v, o, lse, do, causal),
            "stage3 backward, own fill": lambda: own_fill(q, k, v, o, lse, do, causal),
            "sdpa backward": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
        }
        ms, times = interleaved_medians(calls, ns.rounds)
        row = {"shape": [b, h, s, d], "causal": causal, "ms": ms, "rounds_ms": times}
        row["sdpa_over"] = {
            key: ms["sdpa backward"] / ms[key] for key in ("stage3 backward", "stage3 backward, own fill")
        }
        report["rows"].append(row)
        cells = "  ".join(f"{name} {t * 1000:.1f}" for name, t in ms.items())
        print(f"{b}×{h}×{s}×{d} {'causal' if causal else 'full  '} µs: {cells}", flush=True)
    write_report(ns.out, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
