"""The trust findings of one validation, gathered in the parent from what it can check itself.

``static_findings`` reads the candidate's source before its child starts; ``run_findings`` judges what
came back: whether every launched Triton kernel only copies while the reference computes, and (on a GPU)
the CUDA trace of each call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mcp_server.engine.models import Finding, FindingKind, Severity
from mcp_server.engine.trust import cuda_trace, kernels, scan


def static_findings(candidate: Path, reference: Path | None) -> list[Finding]:
    return scan.scan(candidate, reference)


def _split(key: str) -> tuple[str, int | None]:
    name, _, seed = key.rpartition("#")
    try:
        return name, int(seed)
    except ValueError:
        return key, None


def _io_bytes(case: dict[str, Any]) -> int:
    sizes = []
    for group in ("inputs", "out"):
        for t in case.get(group) or []:
            if isinstance(t, torch.Tensor) and t.numel():
                sizes.append(t.numel() * t.element_size())
    return min(sizes) if sizes else 0


def run_findings(
    candidate: Path,
    ref_meta: dict[str, Any],
    ref_data: dict[str, Any],
    cand_meta: dict[str, Any],
    launches: set[str],
) -> list[Finding]:
    findings: list[Finding] = []
    ref_ops: set[str] = set()
    for case in ref_meta.get("cases") or []:
        ref_ops.update((case.get("record") or {}).get("ops", {}).keys())
    if launches and kernels.reference_computes(ref_ops):
        copies = kernels.copy_only_launches(launches, scan.local_modules(candidate))
        if copies:
            findings.append(
                Finding(
                    kind=FindingKind.copy_only_kernel,
                    severity=Severity.error,
                    message=(
                        f"every Triton kernel the candidate launched ({', '.join(sorted(set(copies)))}) only loads "
                        f"and stores, while the reference computes ({', '.join(sorted(ref_ops)[:5])}): the answer "
                        "was computed somewhere else and copied"
                    ),
                )
            )
    trace = cand_meta.get("trace")
    if isinstance(trace, dict) and trace.get("error"):
        findings.append(
            Finding(
                kind=FindingKind.torch_compute,
                severity=Severity.info,
                message=f"no CUDA trace of the calls could be taken ({trace['error']}); kernels were not cross-checked",
            )
        )
    # What the recorder noted in any call: (record key, kind, message from the names noted).
    noted = (
        (
            "host_reads_unhooked",
            FindingKind.evasion,
            lambda names: (
                f"{', '.join(sorted(names))} had been replaced when a call started or ended, taking away "
                "the judge's count of tensor data read by Python (put back each time)"
            ),
        ),
        (
            "dispatch_off",
            FindingKind.evasion,
            lambda names: (
                f"a call used {', '.join(names[:3])}, which turns PyTorch's dispatch modes off or takes "
                "them off the stack: torch work inside is hidden from the judge's count. Leave dispatch alone"
            ),
        ),
        (
            "raw_memory",
            FindingKind.host_compute,
            lambda names: (
                f"a call reached memory by its address ({'; '.join(names[:3])}): a tensor's data read or written "
                "that way is outside the judge's count of what Python reads. Compute in the Triton kernel"
            ),
        ),
        (
            "processes",
            FindingKind.process_escape,
            lambda names: (
                f"a call started {len(names)} kind(s) of process ({'; '.join(names[:3])}): work in another "
                "process is outside the judge's count of torch work and host reads. Compute in the call's own process, "
                "with the Triton kernel"
            ),
        ),
    )
    # What the candidate's child noted once for the whole job (at its imports too): (result key, message).
    job_noted = (
        (
            "kernels_replaced",
            lambda names: (
                f"the candidate put kernels in place of PyTorch's own ops ({'; '.join(names[:3])}"
                f"{f'; and {len(names) - 3} more' if len(names) > 3 else ''}): an op's kernel runs below the judge's "
                "count of torch work, and a fallthrough for the Python key hides the op from it. Register custom ops "
                "in a namespace of your own (torch.library.custom_op(\"mylib::name\")) and leave aten's and prims' "
                "kernels as they are"
            ),
        ),
        (
            "native_code",
            lambda names: (
                f"the candidate's code loaded native code ({'; '.join(names[:3])}): what it computes on a tensor's "
                "memory is outside the judge's count of torch work and of data read by Python. Write the "
                "computation as a Triton kernel"
            ),
        ),
    )
    for key, said in job_noted:
        listed = [str(n) for n in cand_meta.get(key) or []]
        if listed:
            findings.append(Finding(kind=FindingKind.evasion, severity=Severity.error, message=said(listed)))
    for key, kind, message in noted:
        names: list[str] = []
        for case in cand_meta.get("cases") or []:
            names.extend(n for n in (case.get("record") or {}).get(key) or [] if n not in names)
        if names:
            findings.append(Finding(kind=kind, severity=Severity.error, message=message(names)))
    windows = (trace or {}).get("windows") if isinstance(trace, dict) else None
    if not isinstance(windows, dict):
        # No CUDA trace (the interpreter): what the calls handed to Python is the evidence of host work.
        for case in cand_meta.get("cases") or []:
            read = int(((case.get("record") or {}).get("host_read_bytes")) or 0) if case.get("status") == "ok" else 0
            if read:
                name, seed = _split(case["key"])
                io_bytes = _io_bytes((ref_data.get("cases") or {}).get(case["key"]) or {})
                findings.append(cuda_trace.host_read_finding(read, io_bytes, name, seed))
    if isinstance(windows, dict):
        for case in cand_meta.get("cases") or []:
            if case.get("status") != "ok":
                continue
            key = case["key"]
            window = windows.get(f"{key}@0")
            if not isinstance(window, dict):
                continue
            record = case.get("record") or {}
            calls = sum(int(v.get("calls", 0)) for v in (record.get("ops") or {}).values())
            name, seed = _split(key)
            io_bytes = _io_bytes((ref_data.get("cases") or {}).get(key) or {})
            findings.extend(
                cuda_trace.judge_window(key, window, record.get("launches") or [], calls, io_bytes, name, seed)
            )
    return findings
