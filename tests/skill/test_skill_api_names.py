"""Every ``tl.*``, ``triton.*`` and ``libdevice.*`` name the skill bundle mentions exists in the installed Triton.

Names are read from the whole text, prose and code alike (web addresses are skipped). ``tl`` resolves
as ``triton.language`` and ``libdevice`` as ``triton.language.extra.libdevice``; a component that is not
an attribute may be a submodule, which is then imported.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from skill_bundle import BUNDLE, markdown_files

ROOTS = {"tl": "triton.language", "triton": "triton", "libdevice": "triton.language.extra.libdevice"}
NAME = re.compile(r"(?<![\w.\-/])(tl|triton|libdevice)((?:\.[A-Za-z_]\w*)+)")
URL = re.compile(r"https?://\S+")


def mentioned_names() -> dict[str, list[str]]:
    """name -> places ("references/stage1.md:12") where the bundle mentions it."""
    found: dict[str, list[str]] = {}
    for path in markdown_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for m in NAME.finditer(URL.sub(" ", line)):
                place = f"{path.relative_to(BUNDLE).as_posix()}:{number}"
                found.setdefault(m.group(0), []).append(place)
    return found


def resolves(name: str) -> bool:
    root, *parts = name.split(".")
    path = ROOTS[root]
    obj: object = importlib.import_module(path)
    for part in parts:
        path = f"{path}.{part}"
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            pass
        except Exception:  # a property that needs a GPU driver: not something the bundle may name
            return False
        try:
            obj = importlib.import_module(path)
        except ImportError:
            return False
    return True


def test_the_bundle_names_a_good_share_of_the_api() -> None:
    names = mentioned_names()
    assert len(names) >= 40, sorted(names)
    for expected in ("tl.load", "tl.dot", "triton.autotune", "triton.Config", "tl.where", "tl.constexpr"):
        assert expected in names


def test_every_triton_name_in_the_bundle_exists_in_the_installed_triton() -> None:
    missing = {name: places for name, places in mentioned_names().items() if not resolves(name)}
    assert not missing, "names the installed Triton does not have:\n" + "\n".join(
        f"  {name}  ({', '.join(places[:3])})" for name, places in sorted(missing.items())
    )


def test_resolution_rejects_names_that_do_not_exist() -> None:
    # Names the seed documents used and that Triton 3.6 does not have.
    for wrong in ("tl.relu", "tl.async_copy", "tl.tma_async_copy", "tl.warp_specialize", "tl.debug_print"):
        assert not resolves(wrong), wrong
    assert resolves("libdevice.asin") and resolves("tl.extra.libdevice.erf") and resolves("triton.testing.do_bench")


def test_names_inside_words_and_paths_are_not_taken_for_api() -> None:
    text = "see triton-docs.md, reference_kernels/matmul.py and x.tl.load"
    assert not list(NAME.finditer(text))
    assert Path(BUNDLE).is_dir()
