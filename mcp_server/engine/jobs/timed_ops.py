"""Torch compute in timed calls: bench records every timed call of a checked provider with the dispatch recorder
validate uses, and withholds the timing of one whose calls ran more torch compute than its validation allowed.

A candidate can do its work in Triton for validate's calls and hand the timed calls to a library (cuBLAS through
``torch.matmul``, cuDNN through SDPA): a call counter, or the bench's own module in ``sys.modules``, tells it
which process it is in. Its outputs are right, so the timed-output check (``jobs.timed_check``) passes them.

Every timed call is recorded, not a sample: a candidate can tell a recorded call from another (a dispatch mode
makes its own torch calls measurably slower), so a sampled recorder would see only honest calls. The recorder
costs host time, not GPU time (a round's calls are queued behind a GPU sleep); that host time is measured per
dispatched op and left out of the round's pace, which sizes the next round's sleep. ``host_launch_ms`` is measured
apart, on unrecorded calls (``bench_job._Timer.host_check``).

A call's share is its counted torch work (``recorder.op_work``; allocation, views and copies are not counted,
nor the ops the user allows) over the reference's own torch work on the same case, as validate computes it.
Under a dispatch mode ``torch.compile`` runs its function eagerly, so a candidate that compiles torch code is
timed as validate judged it: eagerly, with its ops counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from mcp_server.engine.jobs import recorder
from mcp_server.engine.jobs.trees import flatten_outputs
from mcp_server.engine.models import FindingKind

# How a provider's error starts when its timed calls ran too much torch compute (the parent reads the kind back).
PREFIX = FindingKind.torch_compute.value


def share_limit(validated: float | None) -> float:
    """What share of the reference's torch work a timed call may run in torch: the validation's own largest share
    plus validate's warning level, or validate's error level when no validation is known."""
    if validated is None:
        return recorder.TORCH_WORK_ERROR
    return validated + recorder.TORCH_WORK_WARNING


def _counted(ops: dict[str, list[float]], allow: set[str]) -> dict[str, list[float]]:
    return {op: use for op, use in ops.items() if op not in allow}


@dataclass
class OpAudit:
    """The largest share of the reference's torch work any timed call of each covered provider ran in torch."""

    providers: set[str]
    allow: set[str]
    # The share a timed call may reach (``share_limit``).
    limit: float
    ref_work: float = 0.0
    # Host seconds the recorder adds to one dispatched op (measured by ``calibrate``).
    op_cost_s: float = 0.0
    worst: dict[str, float] = field(default_factory=dict)
    worst_ops: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # Per provider judged by a validation of its own (an extra candidate's): its allowed ops and its share limit.
    own: dict[str, tuple[set[str], float]] = field(default_factory=dict)

    def covers(self, provider: str) -> bool:
        return provider in self.providers

    def start_case(self, reference: Any, args: list[Any], fallback: float) -> None:
        """A new case, whose calls are judged against the reference's torch work on it: one reference call
        recorded (its outputs' size when it runs no counted op, as validate does). ``fallback`` (the candidate's
        output size) stands in without a reference, or when the reference fails (its eager baseline says so)."""
        self.worst, self.worst_ops = {}, {}
        self.ref_work = fallback or 1.0
        if reference is None:
            return
        try:
            with recorder.recording() as rec:
                out = reference(*args)
        except Exception:
            return
        work = rec.torch_work or float(sum(o.numel() for o in flatten_outputs(out) if isinstance(o, torch.Tensor)))
        self.ref_work = work or self.ref_work

    def calibrate(self, device: Any, n: int = 200) -> None:
        """The recorder's host cost per dispatched op: allocations timed with and without it."""

        def timed(record: bool) -> float:
            t0 = time.perf_counter()
            if record:
                with recorder.recording():
                    for _ in range(n):
                        torch.empty(1, device=device)
            else:
                for _ in range(n):
                    torch.empty(1, device=device)
            return time.perf_counter() - t0

        timed(True), timed(False)  # warm both paths
        self.op_cost_s = max(0.0, min(timed(True) for _ in range(3)) - min(timed(False) for _ in range(3))) / n

    @contextmanager
    def call(self, provider: str) -> Iterator[list[float]]:
        """Record one call of ``provider``; yields a one-element list that then holds the recorder's host cost
        (seconds) for that call."""
        cost = [0.0]
        with recorder.recording() as rec:
            yield cost
        self.add(provider, rec.ops)
        cost[0] = rec.dispatched * self.op_cost_s

    def _rules(self, provider: str) -> tuple[set[str], float]:
        return self.own.get(provider, (self.allow, self.limit))

    def add(self, provider: str, ops: dict[str, list[float]]) -> None:
        counted = _counted(ops, self._rules(provider)[0])
        share = sum(use[1] for use in counted.values()) / (self.ref_work or 1.0)
        if share > self.worst.get(provider, -1.0):
            self.worst[provider] = share
            self.worst_ops[provider] = counted

    def error(self, provider: str) -> str | None:
        """The provider's timing error when a timed call ran more torch compute than allowed, else None."""
        share = self.worst.get(provider, 0.0)
        limit = self._rules(provider)[1]
        if share <= limit:
            return None
        top = sorted(self.worst_ops[provider].items(), key=lambda kv: -kv[1][1])[:4]
        listing = ", ".join(f"{recorder.op_label(op)} ×{int(use[0])}" for op, use in top)
        return (
            f"{PREFIX}: a timed call ran torch compute ops worth {share:.0%} of the reference's own torch work "
            f"({listing}), over the {limit:.0%} its validation allows. The timing is not reported: it would "
            "be PyTorch's or a library's speed, not the kernel's (pass allow_torch_ops for an op you mean to keep "
            "in torch)"
        )


def run(audit: OpAudit | None, provider: str, fn: Any, args: list[Any]) -> tuple[Any, float]:
    """``fn(*args)``, recorded when ``audit`` covers ``provider``: its output, and the recorder's host cost (s)."""
    if audit is None or not audit.covers(provider):
        return fn(*args), 0.0
    with audit.call(provider) as cost:
        out = fn(*args)
    return out, cost[0]
