"""Engine test helpers. The `runner` fixture (tests/conftest.py) is the session's shared runner: starting a
fork server costs seconds; each job is a fresh child."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"


@pytest.fixture
def fx():
    """Path of a validate fixture as a string spec: fx('add_good.py', 'candidate')."""

    def make(name: str, attr: str | None = None) -> str:
        path = FIXTURES / name
        return f"{path}:{attr}" if attr else str(path)

    return make
