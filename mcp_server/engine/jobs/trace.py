"""A CUDA-level record of what each candidate call ran (child side; judged by ``engine.trust.cuda_trace``).

The runner starts the profiler (CUPTI activity records of kernels and memory copies) in the child before
the job imports any user code (``runner.child.main`` calls :func:`start` when the job asks for a trace).
A job marks each call with :func:`window`; :func:`collect` stops the profiler and sums, per window, the
kernels that ran (name, count, GPU time) and the bytes copied device→host and host→device. Unlike the
dispatch-mode recorder, this sees kernels launched by torch under any dispatch switch, by a library, or by
``torch.compile``; the candidate could only stop it through the profiler API, which the static scan flags.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

PREFIX = "ptt_call:"
# GPU work the job itself issues inside a call window (the side-stream delay), left out of the call's record.
OWN = "ptt_own:"
_state: dict[str, Any] = {"prof": None, "error": None, "dir": None}


def start(job_dir: str) -> None:
    """Start recording CUDA activity (no-op without CUDA). Errors are kept and reported by collect()."""
    try:
        import torch

        if not torch.cuda.is_available():
            return
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
        _state.update(prof=prof, dir=job_dir)
    except Exception as exc:  # CUPTI unavailable, profiler busy, …
        _state["error"] = f"{type(exc).__name__}: {exc}"


def active() -> bool:
    return _state["prof"] is not None


def window(label: str) -> contextlib.AbstractContextManager[None]:
    """Mark one call (enter it outside the op recorder: the marker itself is a torch op)."""
    return _span(PREFIX + label)


def own(label: str) -> contextlib.AbstractContextManager[None]:
    """Mark work the job itself launches inside a window: its kernels are not counted as the call's."""
    return _span(OWN + label)


@contextlib.contextmanager
def _span(name: str) -> Iterator[None]:
    """A profiler annotation named ``name`` while the trace runs; nothing otherwise."""
    if _state["prof"] is None:
        yield
        return
    import torch

    with torch.profiler.record_function(name):
        yield


def collect() -> dict[str, Any] | None:
    """Stop the profiler; per window: kernels {name: [count, gpu_us]}, dtoh_bytes, htod_bytes."""
    prof = _state["prof"]
    if prof is None:
        return {"error": _state["error"]} if _state["error"] else None
    _state["prof"] = None
    try:
        prof.__exit__(None, None, None)
        path = os.path.join(_state["dir"], "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh).get("traceEvents", [])
        os.unlink(path)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return summarise(events)


def summarise(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Group GPU activity by the call window it was launched in (chrome-trace events as the profiler writes them).

    A kernel belongs to the window whose host-side span holds its launch (the CUDA runtime call with the
    same correlation id), not the one its GPU start falls in: work queued behind a long kernel starts on the
    GPU after the call has returned and still counts. Activity launched inside an ``own`` span is left out.
    """
    windows, owned = [], []
    launched: dict[Any, float] = {}
    for ev in events:
        name = str(ev.get("name", ""))
        cat = ev.get("cat")
        if cat == "user_annotation" and name.startswith((PREFIX, OWN)):
            start = float(ev.get("ts", 0))
            span = (start, start + float(ev.get("dur", 0)), name.split(":", 1)[1])
            (windows if name.startswith(PREFIX) else owned).append(span)
        elif cat in ("cuda_runtime", "cuda_driver"):
            corr = (ev.get("args") or {}).get("correlation")
            if corr is not None:
                launched[corr] = float(ev.get("ts", 0))
    windows.sort()
    out: dict[str, dict[str, Any]] = {label: {"kernels": {}, "dtoh_bytes": 0, "htod_bytes": 0} for *_, label in windows}
    for ev in events:
        cat = ev.get("cat")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        ts = launched.get((ev.get("args") or {}).get("correlation"), float(ev.get("ts", 0)))
        if any(a <= ts <= b for a, b, _ in owned):
            continue
        label = next((w[2] for w in windows if w[0] <= ts <= w[1]), None)
        if label is None:
            continue
        entry = out[label]
        name = str(ev.get("name", ""))
        if cat == "gpu_memcpy":
            size = int((ev.get("args") or {}).get("bytes", 0) or 0)
            if "DtoH" in name or "Device -> Pageable" in name or "Device -> Pinned" in name:
                entry["dtoh_bytes"] += size
            elif "HtoD" in name:
                entry["htod_bytes"] += size
            continue
        if cat == "gpu_memset":
            name = "memset"
        slot = entry["kernels"].setdefault(name[:300], [0, 0.0])
        slot[0] += 1
        slot[1] += float(ev.get("dur", 0))
    return {"windows": out}
