"""What the GPU measurement scripts share: their --rounds/--out arguments, refusing to run without the GPU they
need, timing entries in interleaved do_bench rounds, an error relative to the expected scale, the report's head
and one printed line of times and ratios, and writing the report."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

DO_BENCH_TIMER = "triton.testing.do_bench (L2 cleared), median over interleaved rounds"


def rounds_parser(doc: str, rounds: int = 5) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc`` with ``--rounds`` (default ``rounds``) and ``--out`` (the
    JSON report's path); scripts add their own arguments to it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--out", default=None, help="write every figure to this JSON file")
    return parser


def report_head(rounds: int, timer: str = DO_BENCH_TIMER, **fields: object) -> dict:
    """The start of a report: the GPU, torch's version, the timer, the rounds, then ``fields`` (in that order)."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "timer": timer, "rounds": rounds,
            **fields}  # fmt: skip


def times_line(ms: dict[str, float], ratios: dict[str, float], digits: int = 0) -> str:
    """``name t µs (ratio)`` for every entry of ``ms`` (milliseconds), two spaces apart."""
    return "  ".join(f"{name} {t * 1000:.{digits}f} µs ({ratios[name]:.3f})" for name, t in ms.items())


def gpu_missing(script: str, sm90: bool = False) -> bool:
    """True (after saying on stderr what is needed) when there is no CUDA GPU, or ``sm90`` and it is not one."""
    if not torch.cuda.is_available():
        print(f"{script}: needs a CUDA GPU{' (an sm_90 one: H100 or H200)' if sm90 else ''}", file=sys.stderr)
        return True
    if sm90 and torch.cuda.get_device_capability() != (9, 0):
        print(f"{script}: needs a CUDA GPU of compute capability 9.0 (H100, H200)", file=sys.stderr)
        return True
    return False


def interleaved_medians(
    calls: dict[str, Callable[[], object]],
    rounds: int,
    rep: int = 200,
    warmup: int = 25,
    rotate: bool = False,
    measure: Callable[[Callable[[], object]], float] | None = None,
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each entry run once, then every round times every entry once, in turn, with triton.testing.do_bench (L2
    cleared): the median over rounds (ms) of each, and every round's figure. ``rotate``: round r starts at entry
    r (mod their count), so that no entry always runs first or right after the same one. ``measure``: the timer
    instead of do_bench, given an entry and returning its figure (ms)."""
    if measure is None:
        from triton.testing import do_bench

        def measure(call: Callable[[], object]) -> float:
            return do_bench(call, warmup=warmup, rep=rep)

    for call in calls.values():
        call()
    torch.cuda.synchronize()
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names) if rotate and names else 0
        for name in names[shift:] + names[:shift]:
            times[name].append(measure(calls[name]))
    return {name: statistics.median(t) for name, t in times.items()}, times


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got − expected| / max |expected|; NaN if ``got`` holds one (so a ``< limit`` gate fails it)."""
    return ((got.double() - expected).abs().max() / expected.abs().max()).item()


def worst_error(got: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> float:
    """The largest ``relative_error`` over matching tensors (gradients, outputs); NaN if any holds one (so a
    ``< limit`` gate fails it)."""
    # torch's max keeps a NaN (Python's max would pass over it).
    return torch.tensor([relative_error(g, e) for g, e in zip(got, expected, strict=True)]).max().item()


def wrong_checks(device: str, checks: list[dict], tolerance: float, what: str = "checks") -> list[dict]:
    """The checks whose ``error`` is not under ``tolerance`` (a NaN is not), each printed as WRONG, then one line
    with how many ran and the worst error."""
    wrong = [row for row in checks if not row["error"] < tolerance]
    for row in wrong:
        print(f"WRONG {row}", flush=True)
    print(f"{device}: {len(checks)} {what}, worst error {max(row['error'] for row in checks):.2e}", flush=True)
    return wrong


def write_report(path: str | None, report: dict) -> None:
    """The report as JSON at ``path`` (its folder made), if one was given."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=1) + "\n")
