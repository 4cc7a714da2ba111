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

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import _liger  # noqa: E402
from reference_kernels import cross_entropy as ce  # noqa: E402


def timer_rounds(fns: dict, rounds: int, calls: int = 30) -> dict[str, float]:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    cache = torch.ones(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device="cuda")
    sink = torch.zeros((), dtype=torch.int64, device="cuda")

    def once(fn) -> float:
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        torch.cuda._sleep(20_000_000)
        for i in range(calls):
            torch.sum(cache, dim=0, dtype=torch.int64, out=sink)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))

    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            times[k].append(once(fns[k]))
    return {k: statistics.median(v) for k, v in times.items()}


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
        if errors[name]["loss"] > 1e-2 or errors[name]["grad"] > 2e-2:
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

    fwd = timer_rounds({k: forward(f) for k, f in providers.items()}, rounds)
    fwd_bwd = timer_rounds({k: forward_backward(f, leaves[k]) for k, f in providers.items()}, rounds)
    return {
        "shape": [n, v],
        "errors": errors,
        "fwd_ms": fwd,
        "fwd_bwd_ms": fwd_bwd,
        "fwd_vs_stage3": {k: t / fwd["stage3"] for k, t in fwd.items()},
        "fwd_bwd_vs_stage3": {k: t / fwd_bwd["stage3"] for k, t in fwd_bwd.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8192x32000,4096x128256")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    ns = parser.parse_args()
    if not torch.cuda.is_available():
        print("cross_entropy_peers: needs a CUDA GPU", file=sys.stderr)
        return 2
    liger = _liger.version()
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "liger_kernel": liger,
        "timer": "CUDA events, L2 flushed by a read, median of 30 calls; median over interleaved rounds",
        "rounds": ns.rounds,
        "rows": [],
    }
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
