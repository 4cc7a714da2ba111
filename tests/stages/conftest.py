"""Shared helpers for the stage-ledger tests: fixture paths, candidate files, a ledger in a temp folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "stages"
if str(FIXTURES) not in sys.path:  # stages_fakes / stages_workers, also in the processes tests spawn
    sys.path.insert(0, str(FIXTURES))

from stages_fakes import PLAIN_KERNEL  # noqa: E402  (importable only once the path is set)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger" / "ledger.db"


@pytest.fixture
def write(tmp_path: Path):
    """write('stage1.py', source) -> 'path/stage1.py:candidate'."""

    def make(name: str, source: str = PLAIN_KERNEL) -> str:
        path = tmp_path / name
        path.write_text(source, encoding="utf-8")
        return f"{path}:candidate"

    return make
