"""What four of the engine's interpreter fast paths save: block types built once per (element type, shape), a
tensor's shape constants made once per shape, operands of one shape kept as they are by binary ops, and broadcasts
to the shape a block already has skipped (mcp_server/engine/interp/fastpaths.py).

    python benchmarks/interp_fastpaths.py [--rounds 5] [--out FILE.json]

The forward of four reference kernels' stage 3 under the interpreter, with every patch of the engine on
(``interp.install()``) and with those four put back to Triton's own, rounds alternating: softmax, RMSNorm and
LayerNorm of a 512×1000 float32 tensor and cross-entropy of 256×3000 logits. Each figure is the median over rounds
of the four calls' wall time (time.perf_counter); both versions' outputs must be bit-identical.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from triton.language import core, semantic  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from benchmarks._common import write_report  # noqa: E402
from mcp_server.engine import interp  # noqa: E402
from mcp_server.engine.interp import fastpaths  # noqa: E402
from reference_kernels import cross_entropy, layernorm, rmsnorm, softmax  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds takes a whole number of at least 1")
    triton_broadcast = interpreter.InterpreterBuilder.create_broadcast
    interp.install()
    patched = (fastpaths._triton_block_type_init, fastpaths._triton_tensor_init, fastpaths._triton_broadcast_value)
    if None in patched or interpreter.InterpreterBuilder.create_broadcast is triton_broadcast:
        print("interp_fastpaths: this Triton's block types, tensors or broadcasts have another shape", file=sys.stderr)
        return 2
    fast = (
        core.block_type.__init__,
        core.tensor.__init__,
        semantic.TritonSemantic.broadcast_impl_value,
        interpreter.InterpreterBuilder.create_broadcast,
    )
    versions = {"fast paths": fast, "Triton's own": (*patched, triton_broadcast)}
    torch.manual_seed(0)
    x, w, b = torch.randn(512, 1000), torch.randn(1000), torch.randn(1000)
    logits, targets = torch.randn(256, 3000), torch.randint(0, 3000, (256,))

    def calls() -> list[torch.Tensor]:
        return [
            softmax.softmax_stage3(x),
            rmsnorm.rmsnorm_stage3(x, w),
            layernorm.layernorm_stage3(x, w, b),
            cross_entropy.cross_entropy_stage3(logits, targets),
        ]

    def use(name: str) -> None:
        (
            core.block_type.__init__,
            core.tensor.__init__,
            semantic.TritonSemantic.broadcast_impl_value,
            interpreter.InterpreterBuilder.create_broadcast,
        ) = versions[name]

    outputs = {}
    for name in versions:
        use(name)
        outputs[name] = calls()  # also the warm-up
    same = all(torch.equal(a, c) for a, c in zip(*outputs.values(), strict=True))
    seconds: dict[str, list[float]] = {name: [] for name in versions}
    for r in range(args.rounds):
        for name in list(versions)[r % 2 :] + list(versions)[: r % 2]:
            use(name)
            started = time.perf_counter()
            calls()
            seconds[name].append(time.perf_counter() - started)
    use("fast paths")
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    for name, s in medians.items():
        print(f"{name}: {s:.3f} s", flush=True)
    print(f"same bits: {same}", flush=True)
    report = {
        "timer": "time.perf_counter, one pass of the four calls",
        "rounds": args.rounds,
        "seconds": seconds,
        "median_s": medians,
        "same_bits": same,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__},
    }
    write_report(args.out, report)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
