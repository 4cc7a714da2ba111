"""The order in which `make test` hands test files to its workers: longest first.

Under pytest-xdist's ``--dist loadfile`` a file is one unit of work, given to whichever worker runs low, in
collection order (the Makefile turns off xdist's own order, by number of tests). With the long files first a
worker's last unit is a short one, and no worker is left running a long file alone at the end. The lengths are
seconds per file from a recorded run (tests/file_durations.json); a file not in it counts DEFAULT_TEST_S per
test. The order changes how long a run takes, never what runs.
"""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_TEST_S = 0.2
# `PTT_RECORD_DURATIONS=1 make test` on a machine without a GPU (CI's kind: a GPU host's second pass would record
# only the gpu tests of a file) rewrites it (tests/conftest.py).
DURATIONS_FILE = Path(__file__).with_name("file_durations.json")


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_files_first(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """Indices of ``nodeids``: whole files by ``seconds`` (longest first; a file not in it by its number of tests
    × DEFAULT_TEST_S; ties in collection order), each file's tests in their own order."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        f = file_of(nodeid)
        counts[f] = counts.get(f, 0) + 1
        first.setdefault(f, i)

    def weight(f: str) -> float:
        return seconds.get(f, counts[f] * DEFAULT_TEST_S)

    rank = {f: r for r, f in enumerate(sorted(counts, key=lambda f: (-weight(f), first[f])))}
    return sorted(range(len(nodeids)), key=lambda i: (rank[file_of(nodeids[i])], i))


def recorded_durations(path: Path) -> dict[str, float]:
    """The table at ``path`` ({file: seconds}); empty when it is missing or not such a table."""
    try:
        table = json.loads(path.read_text())
        return {str(k): float(v) for k, v in table.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def merge_durations(path: Path, seconds: dict[str, float], root: Path) -> None:
    """Write ``seconds`` ({file: seconds} of one run) over the table at ``path``: files this run did not see keep
    their entry, files no longer under ``root`` leave the table."""
    table = {**recorded_durations(path), **{f: round(s, 1) for f, s in seconds.items()}}
    table = {f: s for f, s in table.items() if (root / f).is_file()}
    path.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
