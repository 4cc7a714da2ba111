"""Where the pytorch-to-triton skill bundle is: shipped inside the package, else this checkout's copy.

``mcp_server/skill_data`` is a link to ``skills/pytorch-to-triton`` in the repository; a wheel carries the files
themselves (package data), so an installed package has the skill without the checkout.
"""

from __future__ import annotations

from pathlib import Path

from mcp_server.engine.errors import UsageError

SKILL_NAME = "pytorch-to-triton"
_PACKAGE = Path(__file__).resolve().parents[1]


def _candidates() -> tuple[Path, Path]:
    return _PACKAGE / "skill_data", _PACKAGE.parent / "skills" / SKILL_NAME


def skill_present() -> bool:
    return any((c / "SKILL.md").is_file() for c in _candidates())


def skill_dir() -> Path:
    for candidate in _candidates():
        if (candidate / "SKILL.md").is_file():
            return candidate.resolve()
    raise UsageError(
        "the pytorch-to-triton skill is not in this installation (no skill_data/SKILL.md in the package and no "
        "skills/pytorch-to-triton/ beside it); reinstall the package from a checkout: pip install ."
    )
