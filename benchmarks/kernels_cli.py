"""`python benchmarks/kernels_cli.py [NAME] [--validate] [--bench] [--backward]`.

Without a name: the reference kernels, their stages and the bar each is held to. With a name: validate every
stage against the PyTorch reference and/or bench every stage against eager and torch.compile, through the
project's own tools (isolated children, the same method an agent gets).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import NAMES  # noqa: E402  (after the checkout is on the path)

KERNELS = ROOT / "reference_kernels"


def load(name: str) -> Any:
    if name not in NAMES:
        raise SystemExit(f"unknown kernel {name!r}; choose from: {', '.join(NAMES)}")
    return importlib.import_module(f"reference_kernels.{name}")


def specs(name: str) -> tuple[str, dict[int, str]]:
    """The reference and each stage as path.py:function specs."""
    spec = load(name).SPEC
    path = KERNELS / f"{name}.py"
    stages = {stage: f"{path}:{fn.__name__}" for stage, fn in sorted(spec.stages.items())}
    return f"{path}:{spec.reference.__name__}", stages


def listing() -> str:
    from mcp_server.cli.render import table

    rows = []
    for name in NAMES:
        spec = load(name).SPEC
        rows.append(
            [
                name,
                ", ".join(str(s) for s in sorted(spec.stages)),
                "fwd + bwd" if spec.has_backward else "fwd",
                spec.bar,
            ]
        )
    return table(["kernel", "stages", "passes", "bar on the GPU"], rows)


def perf_table(result: Any, stages: dict[int, str]) -> str:
    """The seed's performance table per stage: size, Triton ms, PyTorch ms, speedup, % of peak; plus compile."""
    from mcp_server.cli.render import table
    from mcp_server.engine.bench import honest_ms

    rows = []
    for row in result.rows:
        by = {t.provider: t for t in row.timings if not t.error}
        eager = honest_ms(by["eager"]) if "eager" in by else None
        compiled = honest_ms(by["compile"]) if "compile" in by else None
        for stage in stages:
            label = "candidate" if stage == max(stages) else f"stage{stage}"
            t = by.get(label)
            if t is None:
                continue
            ms = honest_ms(t)
            peak = 100 * (row.bytes / ms / 1e6) / result.peaks.copy_gbps if result.peaks and row.bytes else None
            rows.append(
                [
                    row.case,
                    stage,
                    f"{ms:.4f}",
                    f"{eager:.4f}" if eager else "-",
                    f"{eager / ms:.2f}×" if eager else "-",
                    f"{compiled:.4f}" if compiled else "-",
                    f"{compiled / ms:.2f}×" if compiled else "-",
                    f"{peak:.0f}%" if peak else "-",
                ]
            )
    return table(
        ["size", "stage", "Triton ms", "PyTorch ms", "speedup", "compile ms", "vs compile", "% of copy BW"],
        rows,
        right=(2, 3, 4, 5, 6, 7),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/kernels_cli.py", description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?")
    parser.add_argument("--validate", action="store_true", help="validate every stage against the reference")
    parser.add_argument("--bench", action="store_true", help="bench every stage (GPU only)")
    parser.add_argument("--backward", action="store_true", help="validate/bench forward + backward too")
    parser.add_argument("--plot", metavar="OUT.png")
    args = parser.parse_args(argv)
    if not args.name:
        print(listing())
        return 0
    from mcp_server.cli.render import render_validate
    from mcp_server.engine.errors import EnvironmentUnavailable, UsageError

    spec = load(args.name).SPEC
    reference, stages = specs(args.name)
    failed = False
    try:
        if args.validate or not args.bench:
            from mcp_server.engine.validate import validate

            for stage, candidate in stages.items():
                # A stage runs on the cases it takes (SPEC.stage_limit): the rest are named, not failed.
                left_out = spec.left_out(stage)
                result = validate(
                    reference,
                    candidate,
                    inputs=f"{reference.rpartition(':')[0]}:SPEC.stage_cases.stage{stage}" if left_out else None,
                    backward=args.backward and spec.has_backward,
                    seeds=2,
                    derive_shapes=False,
                )
                print(f"--- stage {stage}: {candidate.rsplit(':', 1)[1]}")
                for label, why in left_out.items():
                    print(f"left out: {label!r}: {why}")
                print(render_validate(result))
                failed |= not result.ok
        if args.bench:
            from mcp_server.engine.bench import bench

            best = max(stages)
            extra = {f"stage{s}": c for s, c in stages.items() if s != best}
            passes = [False, True] if args.backward and spec.has_backward else [False]
            for backward in passes:
                result = bench(
                    stages[best],
                    reference,
                    extra_candidates=extra,
                    backward=backward,
                    grad_inputs=list(spec.grad_inputs) or None,
                    validate_first=False,
                    plot=args.plot,
                )
                print(f"--- {args.name} {'forward + backward' if backward else 'forward'} on {result.device}")
                print(perf_table(result, stages))
                failed |= not result.ok
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EnvironmentUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
