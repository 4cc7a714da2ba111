"""mcp_server.engine.interp.nested: inside a launch, a jit helper that sees only language modules the launch
has patched is called without patching them again; any other call takes Triton's own path. Both give the
kernel's result; the count of patches tells the paths apart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from mcp_server.engine.interp import nested

INTERPRETER = bool(triton.knobs.runtime.interpret)
pytestmark = pytest.mark.skipif(not INTERPRETER, reason="runs kernels under the interpreter in this process")

# A helper module that sees triton.language.core and not triton.language: a launch of a kernel that imports
# only triton.language has not patched what this helper calls.
CORE_HELPER = """
import triton
from triton.language import core


@triton.jit
def core_twice(x):
    return core.maximum(x, x) * 2
"""
BLIND_HELPER = """
import triton


@triton.jit
def blind_twice(x):
    return x * 2
"""


@triton.jit
def _twice(x):
    return tl.maximum(x, x) * 2


@triton.jit
def _sum_of_doubles(x_ptr, out_ptr, STEPS: tl.constexpr, HELPER: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * 4 + tl.arange(0, 4)
    x = tl.load(x_ptr + offs)
    acc = x * 0  # not tl.zeros: a standard-library helper, which sees triton.language.core
    for _ in range(STEPS):
        if HELPER == 0:
            acc += _twice(x)
        elif HELPER == 1:
            acc += helpers.core_twice(x)  # noqa: F821 - set by the test below
        else:
            acc += helpers.blind_twice(x)  # noqa: F821
    tl.store(out_ptr + offs, acc)


def _module(tmp_path: Path, name: str, text: str):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def patches(monkeypatch, tmp_path):
    """Counts the interpreter's language patches; the helper modules are importable as ``helpers``."""
    from triton.runtime import interpreter

    nested.install()
    core = _module(tmp_path, "nested_core_helper", CORE_HELPER)
    blind = _module(tmp_path, "nested_blind_helper", BLIND_HELPER)
    helpers = type("Helpers", (), {"core_twice": core.core_twice, "blind_twice": blind.blind_twice})
    monkeypatch.setitem(globals(), "helpers", helpers)
    calls = []
    original = interpreter._patch_lang

    def counting(fn):
        calls.append(fn.__name__)
        return original(fn)

    monkeypatch.setattr(interpreter, "_patch_lang", counting)
    yield calls
    for name in ("nested_core_helper", "nested_blind_helper"):
        sys.modules.pop(name, None)


def _run(helper: int, steps: int = 3, programs: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(programs * 4, dtype=torch.float32) - 3
    out = torch.empty_like(x)
    _sum_of_doubles[(programs,)](x, out, STEPS=steps, HELPER=helper)
    return out, x * 2 * steps


@pytest.mark.slow
def test_a_helper_the_launch_already_patched_for_is_called_without_patching_again(patches):
    out, expected = _run(helper=0)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert patches == ["_sum_of_doubles"]  # the launch's patch only; stock Triton adds one per helper call


def test_a_helper_that_sees_another_language_module_is_patched_as_triton_does_once_per_launch(patches):
    out, expected = _run(helper=1, steps=3, programs=2)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert patches == ["_sum_of_doubles", "core_twice"]  # the first call patches core; it stays patched
    _run(helper=1)
    assert patches == ["_sum_of_doubles", "core_twice"] * 2  # a new launch starts from its own patch again


def test_a_standard_library_helper_patches_core_once_per_launch(patches):
    @triton.jit
    def fill(out_ptr):
        offs = tl.arange(0, 4)
        tl.store(out_ptr + offs, tl.zeros((4,), tl.float32) + tl.sum(tl.full((4,), 1.0, tl.float32), 0))

    out = torch.empty(4)
    fill[(3,)](out)
    torch.testing.assert_close(out, torch.full((4,), 4.0))
    assert patches[0] == "fill" and len(patches) == 2  # one of zeros/sum/full patches core, then no more


def test_a_helper_that_sees_no_language_module_fails_as_it_does_in_triton(patches):
    with pytest.raises(Exception, match=r"triton\.language must be visible"):
        _run(helper=2)
