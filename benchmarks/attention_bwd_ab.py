"""The Gluon attention backward against another version of its module, on Hopper: whole backward and forward +
backward, next to SDPA's own pick, in rotated rounds.

    git show REV:reference_kernels/attention_hopper_bwd.py > /tmp/before.py
    python benchmarks/attention_bwd_ab.py --before /tmp/before.py [--rounds 10] [--out FILE.json]

``--before`` is a file holding the module as it was (any version with the same ``usable``, and a ``backward``
that takes a zeroed ``dq_acc``);
stage 3 runs with it in place of ``reference_kernels.attention_hopper_bwd`` for the "before" entries. Both
versions are first checked against float64 autograd at small shapes, fp16 and bf16, causal and not (the largest
error over dQ, dK and dV relative to each gradient's largest magnitude must stay under 1e-2). Then, bf16 at the
shapes below, each round times every entry once with triton.testing.do_bench (L2 cleared), the order rotated by
one per round, so that no entry always runs first; the figure is the median over rounds. The backward alone is
autograd.grad over a kept graph. Ratios are SDPA's time over each version's (> 1: faster than SDPA).
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

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


def load(path: str):
    """The module in ``path``, imported under a name of its own."""
    spec = importlib.util.spec_from_file_location("attention_hopper_bwd_before", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--before {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def using(module):
    """Stage 3 with ``module`` as its Hopper backward."""
    kept = at.attention_hopper_bwd
    at.attention_hopper_bwd = module
    try:
        yield
    finally:
        at.attention_hopper_bwd = kept


def stage3_with(module) -> Callable[..., tuple]:
    """Stage 3's Hopper backward, called as ``backward_checks`` calls a version, with ``module`` in place."""

    def run(*args):
        with using(module):
            return at._attention_backward_hopper(*args)

    return run


def main() -> int:
    parser = rounds_parser(__doc__, rounds=10)
    parser.add_argument("--before", required=True, help="a file holding the other version of the module")
    args = parser.parse_args()
    if gpu_missing("attention_bwd_ab", sm90=True):
        return 2
    versions = {"before": load(args.before), "now": hb}
    checks = backward_checks({name: stage3_with(module) for name, module in versions.items()}, hb.HEAD_DIMS)
    report = report_head(args.rounds, before=args.before, checks=checks, rows=[])
    bad = wrong_checks(report["device"], report["checks"], TOLERANCE)
    for b, h, s, d, causal in SHAPES:
        q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        fns = {
            "sdpa": (lambda: F.scaled_dot_product_attention(*leaves, is_causal=causal), hb),
            **{name: (lambda: at.attention_stage3(*leaves, causal), module) for name, module in versions.items()},
        }
        calls = {}
        for name, (fn, module) in fns.items():
            with using(module):
                out = fn()

            def bwd(out=out, module=module) -> None:
                with using(module):
                    torch.autograd.grad(out, leaves, do, retain_graph=True)

            def fwd_bwd(fn=fn, module=module) -> None:
                with using(module):
                    torch.autograd.grad(fn(), leaves, do)

            calls[f"{name} bwd"], calls[f"{name} fwd+bwd"] = bwd, fwd_bwd
        ms, rounds_ms = interleaved_medians(calls, args.rounds, rep=150, rotate=True)
        us = {key: t * 1e3 for key, t in ms.items()}
        times = {key: [t * 1e3 for t in ts] for key, ts in rounds_ms.items()}
        vs_sdpa = {key: us[f"sdpa {key.split()[1]}"] / t for key, t in us.items() if not key.startswith("sdpa")}
        report["rows"].append({"shape": [b, h, s, d], "causal": causal, "us": us, "vs_sdpa": vs_sdpa,
                               "rounds_us": times})  # fmt: skip
        label = f"{b}×{h}×{s}×{d}{' causal' if causal else ''}"
        print(label, "  ".join(f"{key} {t:.0f} µs" for key, t in us.items()), flush=True)
        print(label, "vs sdpa:", "  ".join(f"{key} {r:.3f}" for key, r in vs_sdpa.items()), flush=True)
    write_report(args.out, report)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
