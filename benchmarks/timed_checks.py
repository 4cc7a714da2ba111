"""What bench's checks of timed calls cost and allow, on every reference kernel: one GPU run.

    python benchmarks/timed_checks.py [NAME ...] [--dtypes bfloat16,float16] [--out FILE]

For each kernel, dtype and mode (forward; forward + backward where the op trains) the best stage is benched
twice in the same run, on the SPEC's bench cases: as the candidate, whose timed calls are recorded (jobs.timed_ops)
and checked against the reference (jobs.timed_check), and as an extra baseline, which is neither. Without a
validation first, so the check allows only its dtype floor (the strictest it gets). Per case it writes:

- ``check_margin``: the checked outputs' largest relative-norm distance from the reference as a fraction of the
  check's limit (a right kernel far under 1 leaves room to tighten the limit);
- ``torch_share``: the largest share of the reference's torch work a timed call ran in torch;
- ``recorded_over_plain``: the candidate's median over the same kernel's as a baseline (the recorder's cost in
  GPU time: ~1.0 when the host stays ahead of the GPU), and both host launch times.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reference_kernels import harness  # noqa: E402
from mcp_server.engine.bench import bench, honest_ms  # noqa: E402
from mcp_server.engine.runner import Runner  # noqa: E402

KERNELS = ("softmax", "layernorm", "rmsnorm", "swiglu", "cross_entropy", "matmul", "attention")


def _timing(row, provider):
    return next((t for t in row.timings if t.provider == provider), None)


def measure(name: str, dtype: str, backward: bool, folder: Path, runner: Runner) -> dict:
    import importlib

    spec = importlib.import_module(f"reference_kernels.{name}").SPEC
    module = harness(name, dtype, folder)
    best = max(spec.stages)
    # The same function under another name, so the baseline's label differs from the candidate's.
    with module.open("a") as fh:
        fh.write(f"\n\ndef plain(*args):\n    return stage{best}(*args)\n")
    started = time.perf_counter()
    result = bench(
        f"{module}:stage{best}",
        f"{module}:reference",
        extra_baselines=[f"{module}:plain"],
        validate_first=False,
        baselines=False,
        compile_baseline=False,
        backward=backward,
        grad_inputs=list(spec.grad_inputs) or None,
        reps=20,
        runner=runner,
        timeout_s=900,
    )
    rows = []
    for row in result.rows:
        cand, plain = _timing(row, "candidate"), _timing(row, "plain")
        entry = {"case": row.case}
        if cand is None or cand.error:
            entry["error"] = cand.error if cand else "no candidate timing"
        else:
            entry |= {
                "check_margin": cand.check_margin,
                "checked_calls": cand.checked_calls,
                "torch_share": cand.torch_share,
                "candidate_ms": honest_ms(cand),
                "candidate_p20_p80_ms": [cand.p20_ms, cand.p80_ms],
                "host_launch_ms": cand.host_launch_ms,
            }
            if plain is not None and not plain.error:
                entry |= {
                    "plain_ms": honest_ms(plain),
                    "plain_p20_p80_ms": [plain.p20_ms, plain.p80_ms],
                    "plain_host_launch_ms": plain.host_launch_ms,
                    "recorded_over_plain": honest_ms(cand) / honest_ms(plain),
                }
        rows.append(entry)
    out = {"kernel": name, "dtype": dtype, "mode": "fwd+bwd" if backward else "fwd", "stage": best}
    out |= {"device": result.device, "ok": result.ok, "seconds": round(time.perf_counter() - started, 1)}
    out["errors"] = [f"{f.kind.value}: {f.message[:300]}" for f in result.errors]
    out["rows"] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(KERNELS))
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import importlib

    report = []
    with Runner() as runner, tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            spec = importlib.import_module(f"reference_kernels.{name}").SPEC
            available = {str(d).replace("torch.", "") for d in spec.dtypes}
            for dtype in [d for d in args.dtypes.split(",") if d in available]:
                for backward in (False, True) if spec.has_backward else (False,):
                    entry = measure(name, dtype, backward, Path(tmp), runner)
                    report.append(entry)
                    worst = max((r.get("check_margin") or 0.0 for r in entry["rows"]), default=0.0)
                    ratios = [r["recorded_over_plain"] for r in entry["rows"] if "recorded_over_plain" in r]
                    print(
                        f"{name} {dtype} {entry['mode']}: ok={entry['ok']} worst margin {worst:.3f}, "
                        f"recorded/plain {min(ratios, default=0):.3f}–{max(ratios, default=0):.3f} "
                        f"({entry['seconds']:.0f} s) {entry['errors'][:1]}",
                        flush=True,
                    )
                    if args.out:
                        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
