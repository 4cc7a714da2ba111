"""What the GPU measurement scripts share: refusing to run without the GPU they need, timing entries in
interleaved do_bench rounds, an error relative to the expected scale, and writing the report."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch


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
    calls: dict[str, Callable[[], object]], rounds: int, rep: int = 200
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each entry run once, then every round times every entry once, in turn, with triton.testing.do_bench (L2
    cleared): the median over rounds (ms) of each, and every round's figure."""
    from triton.testing import do_bench

    for call in calls.values():
        call()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(do_bench(call, warmup=25, rep=rep))
    return {name: statistics.median(t) for name, t in times.items()}, times


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got − expected| / max |expected|; NaN if ``got`` holds one (so a ``< limit`` gate fails it)."""
    return ((got.double() - expected).abs().max() / expected.abs().max()).item()


def write_report(path: str | None, report: dict) -> None:
    """The report as JSON at ``path`` (its folder made), if one was given."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=1) + "\n")
