"""The semi-Markov CRF's stage 3 against other versions of its module: forward and forward + backward, both
semirings, in rotated rounds, with each version's error against float64.

    git show REV:reference_kernels/semi_markov_crf.py > before.py
    python benchmarks/semi_markov_crf_ab.py --version before=before.py [--version NAME=FILE ...]
        [--rounds 5] [--out FILE.json]

Every ``--version`` file holds the whole module as it was (or as a prototype has it); its ``semi_markov_crf_stage3``
runs beside the shipped one ("now"). Each version is first checked at small shapes (ragged lengths included,
both semirings) against the float64 recursion: the score and the three gradients within 1e-3 of each one's
largest magnitude. Then, at the bar's shape (B=32, T=1024, K=32, C=24, fp32), each round times every entry once
with triton.testing.do_bench (L2 cleared), the order rotated by one per round; the figure is the median over
rounds. The report also gives every version's relative-norm error against float64 at that shape, beside PyTorch's
float32 autograd.
"""

# ruff: noqa: B023 - each loop iteration times its closures before the next one rebinds the names
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    gpu_missing,
    interleaved_medians,
    report_head,
    rounds_parser,
    worst_error,
    write_report,
    wrong_checks,
)
from reference_kernels import semi_markov_crf as crf  # noqa: E402

BAR = (32, 1024, 32, 24)
SMALL = [(3, 40, 6, 5, True), (2, 64, 32, 24, False), (4, 100, 12, 7, True)]
TOLERANCE = 1e-3


def parse_versions(parser, items: list[str]) -> dict[str, str]:
    """``NAME=FILE`` items as {name: file}; a malformed item, a repeated or reserved name, or a missing file
    ends the run through ``parser.error`` (exit 2) before anything looks for a GPU."""
    versions: dict[str, str] = {}
    for item in items:
        name, _, path = item.partition("=")
        if not name or not path or name in versions or name == "now":
            parser.error(f"--version {item!r}: give NAME=FILE, each NAME once and not 'now' (the shipped module)")
        if not Path(path).is_file() or not path.endswith(".py"):
            parser.error(f"--version {item!r}: {path} is not a .py file; write the module there first (git show REV:…)")
        versions[name] = path
    return versions


def load(name: str, path: str):
    """The module in ``path``, imported under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"semi_markov_crf_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(B: int, T: int, K: int, C: int, ragged: bool, seed: int) -> tuple[torch.Tensor, ...]:
    dims = {"B": B, "T": T, "K": K, "C": C, "ragged": int(ragged)}
    torch.manual_seed(seed)
    return crf._make_inputs(dims, torch.float32, "cuda")


def score_and_grads(fn, args: tuple, semiring: str, upstream: torch.Tensor) -> list[torch.Tensor]:
    leaves = [a.detach().clone().requires_grad_(True) for a in args[:3]]
    out = fn(*leaves, args[3], semiring)
    return [out.detach(), *torch.autograd.grad(out, leaves, upstream)]


def relative_norm(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.double() - expected).norm() / expected.norm()).item()


def main() -> int:
    parser = rounds_parser(__doc__, rounds=5)
    parser.add_argument("--version", action="append", default=[], metavar="NAME=FILE", help="another version")
    args = parser.parse_args()
    paths = parse_versions(parser, args.version)
    if gpu_missing("semi_markov_crf_ab"):
        return 2
    versions = {"now": crf, **{name: load(name, path) for name, path in paths.items()}}
    fns = {name: module.semi_markov_crf_stage3 for name, module in versions.items()}

    checks = []
    for i, (B, T, K, C, ragged) in enumerate(SMALL):
        small = inputs(B, T, K, C, ragged, seed=i)
        wide = tuple(a.double() if a.is_floating_point() else a for a in small)
        for semiring in ("log", "max"):
            upstream = torch.randn(B, device="cuda")
            truth = score_and_grads(crf.reference_semi_markov_crf, wide, semiring, upstream.double())
            for name, fn in fns.items():
                error = worst_error(score_and_grads(fn, small, semiring, upstream), truth)
                checks.append({"version": name, "shape": [B, T, K, C], "ragged": ragged, "semiring": semiring,
                               "error": error})  # fmt: skip
    report = report_head(args.rounds, versions={n: m.__file__ for n, m in versions.items()}, checks=checks)
    bad = wrong_checks(report["device"], checks, TOLERANCE)

    bar = inputs(*BAR, ragged=False, seed=99)
    wide = tuple(a.double() if a.is_floating_point() else a for a in bar)
    leaves = [a.clone().requires_grad_(True) for a in bar[:3]]
    upstream = torch.randn(BAR[0], device="cuda")
    for semiring in ("log", "max"):
        truth = score_and_grads(crf.reference_semi_markov_crf, wide, semiring, upstream.double())
        names = ["score", "d emissions", "d transitions", "d durations"]
        errors = {}
        for name, fn in {"pytorch float32": crf.reference_semi_markov_crf, **fns}.items():
            got = score_and_grads(fn, bar, semiring, upstream)
            errors[name] = {what: relative_norm(g, e) for what, g, e in zip(names, got, truth, strict=True)}
        calls = {}
        for name, fn in fns.items():
            calls[f"{name} fwd"] = lambda fn=fn: fn(*bar, semiring)
            calls[f"{name} fwd+bwd"] = lambda fn=fn: torch.autograd.grad(
                fn(*leaves, bar[3], semiring), leaves, upstream
            )
        med, times = interleaved_medians(calls, args.rounds, rep=100, warmup=10, rotate=True)
        over_now = {key: t / med[f"now {key.split()[-1]}"] for key, t in med.items()}
        report[semiring] = {"median_ms": med, "over_now": over_now, "rounds_ms": times,
                            "relative_norm_error_vs_float64": errors}  # fmt: skip
        print(semiring, "  ".join(f"{k} {t:.3f} ms ({over_now[k]:.3f})" for k, t in med.items()), flush=True)
        for name, errs in errors.items():
            print(semiring, name, "  ".join(f"{w} {e:.1e}" for w, e in errs.items()), flush=True)
    write_report(args.out, report)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
