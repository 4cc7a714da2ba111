"""Cross-entropy's stage 3 against torch.compile and Liger-Kernel, forward and forward + backward, in one process.

    python benchmarks/cross_entropy_peers.py [--shapes 8192x32000,4096x128256] [--rounds 5] [--out FILE.json]

bf16 logits (spread 2), int64 targets, mean reduction. Forward: the loss under no_grad. Forward + backward: the
loss, then its backward into the logits. Liger-Kernel writes the gradient into its input during the forward, so
it gets a private copy of the logits (made once, outside timing; reference_kernels/_liger.py). torch.compile
compiles the reference once per shape and mode, static shapes. Each provider's loss and gradient are checked
against float32 PyTorch first. Timer: CUDA events around each call, L2 flushed before it by reading a buffer twice
its size, calls queued behind a GPU sleep; per provider the median of 30 calls, the figure the median over
interleaved rounds. Ratios are the peer's time over stage 3's (> 1: stage 3 is faster).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# The checkout (reference_kernels) and this folder (row_kernels_sweep's timer).
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from row_kernels_sweep import Timer  # noqa: E402

from benchmarks._common import gpu_missing, report_head, rounds_parser  # noqa: E402
from reference_kernels import _liger  # noqa: E402
from reference_kernels import cross_entropy as ce  # noqa: E402

# Largest errors a provider may show: the loss's absolute error and the gradient's relative norm error.
ERROR_LIMITS = {"loss": 1e-2, "grad": 2e-2}


def correct(errors: dict[str, float]) -> bool:
    """Whether a provider's errors are within ERROR_LIMITS; a NaN error fails."""
    return all(errors[k] <= limit for k, limit in ERROR_LIMITS.items())


def row(n: int, v: int, rounds: int, liger: bool) -> dict:
    torch.manual_seed(0)
    logits, targets = ce.SPEC.make_inputs({"N": n, "V": v}, torch.bfloat16, "cuda")
    want_loss = torch.nn.functional.cross_entropy(logits.float(), targets)
    leaf = logits.detach().clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(leaf.float(), targets).backward()
    want_grad = leaf.grad.float()
    providers = {"stage3": ce.cross_entropy_stage3}
    torch._dynamo.reset()
    compiled = torch.compile(ce.reference_cross_entropy, dynamic=False)
    providers["compile"] = compiled
    if liger:
        providers["liger"] = _liger.liger_cross_entropy
    x = logits.detach().clone().requires_grad_(True)
    # Liger's backward lands in its private copy of x.
    leaves = {k: _liger._private_logits(x) if k == "liger" else x for k in providers}
    errors = {}
    for name, fn in providers.items():
        leaves[name].grad = None
        loss = fn(x, targets)
        loss.backward()
        grad = leaves[name].grad.float()
        errors[name] = {
            "loss": abs(float(loss) - float(want_loss)),
            "grad": float((grad - want_grad).norm() / want_grad.norm()),
        }
        if not correct(errors[name]):
            raise SystemExit(f"cross_entropy_peers: {name} at {n}x{v} is wrong: {errors[name]}")

    def forward(fn):
        def call():
            with torch.no_grad():
                fn(logits, targets)

        return call

    def forward_backward(fn, leaf):
        def call():
            # A fresh gradient each call, as in a training step with zeroed grads (no accumulation kernel).
            leaf.grad = None
            fn(x, targets).backward()

        return call

    timer = Timer(calls=30, sleep_cycles=20_000_000, warmup=2)
    fwd = timer.rounds({k: forward(f) for k, f in providers.items()}, rounds)
    fwd_bwd = timer.rounds({k: forward_backward(f, leaves[k]) for k, f in providers.items()}, rounds)
    return {
        "shape": [n, v],
        "errors": errors,
        "fwd_ms": fwd,
        "fwd_bwd_ms": fwd_bwd,
        "fwd_vs_stage3": {k: t / fwd["stage3"] for k, t in fwd.items()},
        "fwd_bwd_vs_stage3": {k: t / fwd_bwd["stage3"] for k, t in fwd_bwd.items()},
    }


def main() -> int:
    parser = rounds_parser(__doc__)
    parser.add_argument("--shapes", default="8192x32000,4096x128256")
    ns = parser.parse_args()
    if gpu_missing("cross_entropy_peers"):
        return 2
    liger = _liger.version()
    timer = "CUDA events, L2 flushed by a read, median of 30 calls; median over interleaved rounds"
    report = report_head(ns.rounds, timer, liger_kernel=liger, rows=[])
    for shape in ns.shapes.split(","):
        n, v = (int(s) for s in shape.split("x"))
        result = row(n, v, ns.rounds, liger is not None)
        report["rows"].append(result)
        for mode in ("fwd", "fwd_bwd"):
            ratios = {k: round(r, 3) for k, r in result[f"{mode}_vs_stage3"].items() if k != "stage3"}
            print(f"{n}x{v} {mode}: stage3 {result[f'{mode}_ms']['stage3']:.3f} ms, peer/stage3 {ratios}", flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
