"""Which frame of a failing job is the user's: installed code is never chosen, wherever it is installed.

A venv made with --system-site-packages, or one that reaches a base environment's packages through a .pth file
(common on GPU machines with a preinstalled torch), runs Triton from a site-packages folder that is not this
interpreter's own. An error Triton raises there must still point at the user's kernel line.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from triton.runtime.errors import InterpreterError

from mcp_server.engine.frames import library_file
from mcp_server.engine.runner.child import _interpreted_kernel_location


def _base_env_and_project(tmp_path: Path) -> tuple[Path, Path]:
    site = tmp_path / "base" / "lib" / "python3.12" / "site-packages"
    (site / "fakelang").mkdir(parents=True)
    (site / "fakelang" / "__init__.py").write_text("")
    (site / "fakelang" / "semantic.py").write_text(
        "def broadcast(a, b):\n    raise ValueError('Cannot make_shape_compatible: incompatible dimensions')\n"
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "kernels_of_mine.py").write_text(
        "from fakelang.semantic import broadcast\n\n\ndef kernel(a, b):\n    return broadcast(a, b)  # the bad line\n"
    )
    return site, project


@pytest.fixture
def base_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    site, project = _base_env_and_project(tmp_path)
    # Appended, as a .pth line or --system-site-packages puts it: after this interpreter's own site-packages.
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    monkeypatch.delitem(sys.modules, "fakelang", raising=False)
    monkeypatch.delitem(sys.modules, "fakelang.semantic", raising=False)
    return site, project


def test_a_package_in_another_site_packages_on_sys_path_is_library_code(base_env):
    site, project = base_env
    assert library_file(str(site / "fakelang" / "semantic.py"))
    assert not library_file(str(project / "kernels_of_mine.py"))


def test_a_project_folder_on_sys_path_stays_user_code(base_env, monkeypatch: pytest.MonkeyPatch):
    _, project = base_env
    monkeypatch.syspath_prepend(str(project))
    assert not library_file(str(project / "kernels_of_mine.py"))


def test_triton_and_torch_are_library_code_wherever_they_were_imported_from():
    import torch
    import triton

    assert library_file(triton.language.semantic.__file__)
    assert library_file(torch.__file__)


def test_an_interpreter_error_raised_in_a_base_environment_points_at_the_users_line(base_env):
    _, project = base_env
    path = project / "kernels_of_mine.py"
    spec = importlib.util.spec_from_file_location("kernels_of_mine", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        try:
            module.kernel(1, 2)
        except ValueError as inner:
            raise InterpreterError(repr(inner)) from inner
    except InterpreterError as exc:
        where = _interpreted_kernel_location(exc, set())
    assert where is not None
    assert (where.file, where.line) == (str(path), 5), where
    assert where.source_line is not None and "the bad line" in where.source_line
