"""Races between programs, which the interpreter hides by running a launch's programs one after another.

On a GPU the programs of one launch run in any order and at once; nothing orders a plain store of one program
before a plain load or store of another but an atomic (a counter, a lock). Under the interpreter they run in
order, so a kernel whose programs accumulate into shared memory with ``tl.load`` + ``tl.store``, or read what a
neighbour wrote, gives the sequential answer here and a different one on the GPU.

So within each launch every element of a tensor argument remembers the program that last changed it with a
plain store and the program that last read it. An access is a hazard when another program got there first:
a load of an element another program stored (read after write), a store over another program's stored value
(write after write) or over a value another program read (write after read). A store that leaves the bits as
they were (a second program writing the same value) changes nothing and is no hazard; elements written by
atomics are left to the atomics. A pair is ordered, and no hazard, when the first program ran a releasing atomic
(``sem`` release or acq_rel) after its access and the second an acquiring one (acquire or acq_rel) before its
own: a flag or ticket handed over (whether the two atomics touch the same address is not checked). The first
hazard of each launch is kept with the kernel line, the tensor, the element and the two programs; :func:`take`
hands them to the job. Tensors over ``LIMIT`` elements are not tracked (the four arrays cost 32 bytes an
element).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mcp_server.engine.interp import bounds

LIMIT = 1 << 21
_ATOMIC = -2

_launch = {"id": 0, "reported": False, "seq": 0, "pid": -1, "pid_start": 0}
# Per tracked tensor: the program that last stored each element and when, the one that last read it and when.
_tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
# Per program of this launch: when it last released, when it last acquired (operation counts).
_released: dict[int, int] = {}
_acquired: dict[int, int] = {}
_hazards: list[dict[str, Any]] = []
_atomic_launches: set[int] = set()


def start_launch() -> None:
    """A new launch: earlier launches are ordered before it, so nothing they did is a hazard now."""
    _tables.clear()
    _released.clear()
    _acquired.clear()
    _launch.update(id=_launch["id"] + 1, reported=False, pid=-1)


def _pid() -> int:
    """The running program, and a tick of the launch's operation count (programs run one after another)."""
    from triton.runtime.interpreter import interpreter_builder

    x, y, z = interpreter_builder.grid_idx
    pid = int(x) + (int(y) << 21) + (int(z) << 42)
    _launch["seq"] += 1
    if pid != _launch["pid"]:
        _launch["pid"], _launch["pid_start"] = pid, _launch["seq"]
    return pid


def _ordered(first: np.ndarray, when: np.ndarray) -> np.ndarray:
    """Whether each earlier access (by program ``first`` at count ``when``) is ordered before the running
    program's: the earlier program released after it, and the running program acquired since it started."""
    if _acquired.get(_launch["pid"], -1) < _launch["pid_start"]:
        return np.zeros(first.shape, dtype=bool)
    released = np.array([_released.get(int(p), -1) for p in first], dtype=np.int64)
    return released > when


def _describe(pid: int) -> str:
    return f"({pid & ((1 << 21) - 1)}, {(pid >> 21) & ((1 << 21) - 1)}, {pid >> 42})"


def _elements(ptrs: Any, mask: Any, itemsize: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(span index, element indices, lane positions) of the active lanes, per tracked tensor argument."""
    spans = bounds.current_spans()
    if not spans:
        return []
    addr = np.asarray(ptrs, dtype=np.uint64).reshape(-1)
    lanes = np.arange(addr.size)
    if mask is not None:
        active = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(ptrs)).reshape(-1)
        addr, lanes = addr[active], lanes[active]
    if addr.size == 0:
        return []
    starts = np.array([s.start for s in spans], dtype=np.uint64)
    pos = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
    out = []
    for index in np.unique(pos):
        if index < 0:
            continue
        span = spans[int(index)]
        count = (span.end - span.start) // span.itemsize
        if count > LIMIT or span.itemsize != itemsize:
            continue
        sel = pos == index
        elems = ((addr[sel] - np.uint64(span.start)) // np.uint64(span.itemsize)).astype(np.int64)
        keep = elems < count
        out.append((int(index), elems[keep], lanes[sel][keep]))
    return out


def _table(index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if index not in _tables:
        span = bounds.current_spans()[index]
        count = (span.end - span.start) // span.itemsize
        _tables[index] = tuple(np.full(count, -1, dtype=np.int64) for _ in range(4))  # type: ignore[assignment]
    return _tables[index]


def _report(kind: str, index: int, elem: int, first: int, second: int) -> None:
    if _launch["reported"] or len(_hazards) >= 16:
        return
    _launch["reported"] = True
    span = bounds.current_spans()[index]
    where = bounds.kernel_location()
    _hazards.append(
        {
            "kind": kind,
            "tensor": span.name,
            "describe": span.describe,
            "element": int(elem),
            "first": _describe(first),
            "second": _describe(second),
            "where": where.model_dump(mode="json") if where is not None else None,
            "launch": _launch["id"],
        }
    )


def on_load(ptrs: Any, mask: Any, itemsize: int) -> None:
    pid = _pid()
    for index, elems, _ in _elements(ptrs, mask, itemsize):
        writer, stored, reader, read = _table(index)
        w = writer[elems]
        other = np.flatnonzero((w >= 0) & (w != pid))
        bad = other[~_ordered(w[other], stored[elems[other]])]
        if bad.size:
            _report("read after write", index, elems[bad[0]], int(w[bad[0]]), pid)
        reader[elems] = pid
        read[elems] = _launch["seq"]


def on_store(ptrs: Any, mask: Any, itemsize: int, old: np.ndarray, new: np.ndarray) -> None:
    """``old``/``new``: the bits at every lane before and after (same shape as ``ptrs``)."""
    pid = _pid()
    changed_all = (np.asarray(old) != np.asarray(new)).reshape(-1)
    for index, elems, lanes in _elements(ptrs, mask, itemsize):
        changed = changed_all[lanes]
        elems = elems[changed]
        if elems.size == 0:
            continue
        writer, stored, reader, read = _table(index)
        w, r = writer[elems], reader[elems]
        ww = np.flatnonzero((w >= 0) & (w != pid))
        ww = ww[~_ordered(w[ww], stored[elems[ww]])]
        war = np.flatnonzero((r >= 0) & (r != pid))
        war = war[~_ordered(r[war], read[elems[war]])]
        if ww.size:
            _report("write after write", index, elems[ww[0]], int(w[ww[0]]), pid)
        elif war.size:
            _report("write after read", index, elems[war[0]], int(r[war[0]]), pid)
        writer[elems] = pid
        stored[elems] = _launch["seq"]


def on_atomic(ptrs: Any, mask: Any, itemsize: int, sem: str = "acq_rel") -> None:
    """An atomic of the running program; ``sem`` one of relaxed, acquire, release, acq_rel."""
    pid = _pid()
    _atomic_launches.add(_launch["id"])
    if sem in ("release", "acq_rel"):
        _released[pid] = _launch["seq"]
    if sem in ("acquire", "acq_rel"):
        _acquired[pid] = _launch["seq"]
    for index, elems, _ in _elements(ptrs, mask, itemsize):
        writer = _table(index)[0]
        writer[elems] = _ATOMIC


def take() -> list[dict[str, Any]]:
    """The hazards found since the last call, each marked with whether its launch used atomics."""
    out = [{**h, "atomics": h["launch"] in _atomic_launches} for h in _hazards]
    _hazards.clear()
    _atomic_launches.clear()
    return out
