"""The stage tests' helpers (stages_fakes) live with their fixtures; make them importable here too."""

from __future__ import annotations

import sys
from pathlib import Path

STAGE_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stages"
if str(STAGE_FIXTURES) not in sys.path:
    sys.path.insert(0, str(STAGE_FIXTURES))
