"""One fork server for the engine tests (starting one costs seconds; each job is a fresh child)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_server.engine.runner import Runner

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"


@pytest.fixture(scope="session")
def runner() -> Iterator[Runner]:
    with Runner() as r:
        yield r


@pytest.fixture
def fx():
    """Path of a validate fixture as a string spec: fx('add_good.py', 'candidate')."""

    def make(name: str, attr: str | None = None) -> str:
        path = FIXTURES / name
        return f"{path}:{attr}" if attr else str(path)

    return make
