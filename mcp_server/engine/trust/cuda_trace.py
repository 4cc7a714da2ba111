"""Judging what a candidate's calls ran on the GPU, from the CUDA trace taken in its child (jobs.trace).

Kernels are sorted three ways: the candidate's Triton kernels (by the names its launches recorded), data
movement (fills, copies, memsets, gathers: allocation poisoning, ``.contiguous()``), and everything else,
which is compute by ATen, cuBLAS, cuDNN or a compiler other than the candidate's own ``@triton.jit``. The
dispatch recorder explains up to ``KERNELS_PER_OP`` compute kernels per torch op it saw (those ops are
judged as ``torch_compute`` already, ``allow_torch_ops`` included); compute kernels beyond that ran where
the recorder could not see them. Their share of the call's GPU time decides the finding.

Without a trace (the interpreter, where tensors live on the host), ``host_read_finding`` judges the tensor data the
calls handed to Python by the rule device→host copies are judged by.
"""

from __future__ import annotations

import re
from typing import Any

from mcp_server.engine.models import Finding, FindingKind, Severity

KERNELS_PER_OP = 3
HIDDEN_ERROR = 0.5
HIDDEN_WARNING = 0.1
MOVEMENT = re.compile(
    r"fill|copy|memset|memcpy|CatArray|cat_|index_elementwise|gather|scatter|transpose|permute|flip|roll"
    r"|Fill|Copy|_to_copy|distribution_elementwise",
    re.I,
)
MIN_ROUND_TRIP_BYTES = 4096


def _base(label: str) -> str:
    return label.split(" (", 1)[0]


def classify(name: str, triton_names: set[str]) -> str:
    if name in triton_names or any(name.startswith(t + "_") or name == t for t in triton_names):
        return "triton"
    if MOVEMENT.search(name):
        return "movement"
    return "compute"


def judge_window(
    label: str,
    window: dict[str, Any],
    launches: list[str],
    recorded_calls: int,
    io_bytes: int,
    case: str,
    seed: int | None,
) -> list[Finding]:
    """Findings for one call: hidden compute kernels and device→host copies of data."""
    triton_names = {_base(x) for x in launches}
    findings: list[Finding] = []
    total = 0.0
    compute: list[tuple[str, int, float]] = []
    for name, (count, us) in (window.get("kernels") or {}).items():
        total += us
        if classify(name, triton_names) == "compute":
            compute.append((name, int(count), float(us)))
    n_compute = sum(c for _, c, _ in compute)
    explained = KERNELS_PER_OP * recorded_calls
    if n_compute > explained and total > 0:
        compute_us = sum(us for _, _, us in compute)
        hidden_us = compute_us * (n_compute - explained) / n_compute
        share = hidden_us / total
        if share >= HIDDEN_WARNING:
            top = sorted(compute, key=lambda x: -x[2])[:3]
            listing = "; ".join(f"{_short(n)} ×{c}" for n, c, _ in top)
            severity = Severity.error if share >= HIDDEN_ERROR else Severity.warning
            findings.append(
                Finding(
                    kind=FindingKind.torch_compute,
                    severity=severity,
                    message=(
                        f"{case}: the CUDA trace shows {n_compute} non-Triton compute kernel(s) ({share:.0%} of the "
                        f"call's GPU time) that the torch op recorder did not see ({recorded_calls} op call(s)): "
                        f"{listing}. The work ran in PyTorch or a library with recording switched off"
                    ),
                    case=case,
                    seed=seed,
                )
            )
    dtoh = int(window.get("dtoh_bytes") or 0)
    if dtoh:
        big = _whole_tensor(dtoh, io_bytes)
        findings.append(
            Finding(
                kind=FindingKind.host_round_trip,
                severity=Severity.error if big else Severity.info,
                message=(
                    f"{case}: {dtoh} bytes went from the GPU to the host during the call"
                    + (
                        f" (as much as an input or output tensor, {io_bytes} bytes): the data was taken to the host, "
                        "where the kernel cannot have computed it"
                        if big
                        else " (small: a size or flag read back with .item() or .tolist())"
                    )
                ),
                case=case,
                seed=seed,
            )
        )
    return findings


def host_read_finding(read: int, io_bytes: int, case: str, seed: int | None) -> Finding:
    """Without a trace (the interpreter, where tensors live on the host): ``read`` bytes of tensor data handed to
    Python during the call (``.tolist()``, ``.numpy()``, ``.item()``, serialization), judged as a device→host copy
    would be."""
    big = _whole_tensor(read, io_bytes)
    return Finding(
        kind=FindingKind.host_round_trip,
        severity=Severity.error if big else Severity.info,
        message=(
            f"{case}: the call handed {read} bytes of tensor data to Python (.tolist(), .numpy(), .item(), "
            "serialization, DLPack, apply_/map_, a tensor over a numpy array's memory written or given to a kernel, "
            "tl.device_print, …: the routes the interpreter's caveats list)"
            + (
                f", as much as an input or output tensor ({io_bytes} bytes): the answer was worked out on the host, "
                "not by the kernel"
                if big
                else " (small: a size or flag)"
            )
        ),
        case=case,
        seed=seed,
    )


def _whole_tensor(moved: int, io_bytes: int) -> bool:
    """Whether ``moved`` bytes read back are data (at least half the smallest input or output, ``io_bytes``, and
    ``MIN_ROUND_TRIP_BYTES``), not a size or a flag."""
    return moved >= (max(MIN_ROUND_TRIP_BYTES, io_bytes // 2) if io_bytes else MIN_ROUND_TRIP_BYTES)


def _short(name: str) -> str:
    return name if len(name) <= 90 else name[:87] + "…"
