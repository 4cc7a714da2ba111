"""Validate each row kernel's best stage against its reference over a range of seeds: a right kernel must pass every
one (a verdict that fails it on some seeds is the worst bug a validator can have).

    python benchmarks/seed_sweep.py [--seeds 6000:6080] [--kernels layernorm,rmsnorm,...] [--out FILE.json]

Each seed is one ``validate`` run (``seeds=1, seed=N``: the reference's inputs drawn from N, derived cases
included), forward and backward where the op trains, on this machine's device (the interpreter without a GPU).
Every error finding of a failed run is printed with its seed, which replays it (``ptt validate … --seed N``).
Exit 1 when any run failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_report  # noqa: E402

# Kernel module → (reference, the stage judged, whether the op trains).
KERNELS = {
    "layernorm": ("reference_layernorm", "layernorm_stage3", True),
    "rmsnorm": ("reference_rmsnorm", "rmsnorm_stage3", True),
    "softmax": ("reference_softmax", "softmax_stage3", True),
    "swiglu": ("reference_swiglu", "swiglu_stage2", True),
    "cross_entropy": ("reference_cross_entropy", "cross_entropy_stage3", True),
    "vector_add": ("reference_vector_add", "vector_add_stage2", False),
}


def _seed_range(text: str) -> range:
    first, sep, last = text.partition(":")
    if not sep or not first.isdigit() or not last.isdigit() or int(last) <= int(first):
        raise argparse.ArgumentTypeError(f"--seeds takes FIRST:END with FIRST < END, both whole numbers; got {text!r}")
    return range(int(first), int(last))


def _kernels(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in KERNELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--kernels takes names from {', '.join(KERNELS)}; got {text!r}")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_seed_range, default=_seed_range("6000:6080"))
    parser.add_argument("--kernels", type=_kernels, default=list(KERNELS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from mcp_server.engine.device import probe
    from mcp_server.engine.validate import validate

    report: dict = {"device": probe().device, "seeds": [args.seeds.start, args.seeds.stop], "kernels": {}}
    failed = 0
    for name in args.kernels:
        reference, stage, trains = KERNELS[name]
        path = ROOT / "reference_kernels" / f"{name}.py"
        started, failures = time.perf_counter(), []
        for seed in args.seeds:
            result = validate(f"{path}:{reference}", f"{path}:{stage}", backward=trains, seeds=1, seed=seed)
            if not result.ok:
                errors = [f for f in result.findings if f.severity.value == "error"]
                failures.append({"seed": seed, "findings": [f"{f.kind.value}: {f.message[:400]}" for f in errors]})
                for f in errors:
                    print(f"  {name} seed {seed}: {f.kind.value}: {f.message[:400]}", flush=True)
        seconds = time.perf_counter() - started
        failed += len(failures)
        report["kernels"][name] = {
            "stage": stage,
            "backward": trains,
            "passed": len(args.seeds) - len(failures),
            "runs": len(args.seeds),
            "failures": failures,
            "seconds": round(seconds, 1),
        }
        passed = len(args.seeds) - len(failures)
        print(f"{name} ({stage}): {passed}/{len(args.seeds)} pass, {seconds:.0f} s", flush=True)
    write_report(args.out, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
