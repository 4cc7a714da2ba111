"""mcp_server.engine.interp.scalars: a runtime loop bound converts to a Python int without NumPy's deprecated
(1.25) and, from NumPy 2.4, failing conversion of a one-element array."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter as interp

from mcp_server.engine.interp import scalars

INTERPRETER = bool(triton.knobs.runtime.interpret)


class _Handle:
    def __init__(self, data: np.ndarray):
        self.data = data


class _Tensor:
    def __init__(self, data: np.ndarray):
        self.handle = _Handle(data)


@triton.jit
def _sum_first(x_ptr, out_ptr, n):
    acc = 0.0
    for i in range(0, n):  # a runtime bound: the interpreter converts n with __index__
        acc += tl.load(x_ptr + i)
    tl.store(out_ptr, acc)


def test_one_element_of_any_shape_converts_and_several_elements_do_not():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's deprecation is an error here, as it is from NumPy 2.4
        assert scalars.index(_Tensor(np.array([7], dtype=np.int32))) == 7
        assert scalars.index(_Tensor(np.array(5, dtype=np.int64))) == 5
        assert scalars.index(_Tensor(np.array([[3]], dtype=np.int32))) == 3
    with pytest.raises(TypeError):
        scalars.index(_Tensor(np.array([1, 2], dtype=np.int32)))


@pytest.mark.skipif(not INTERPRETER, reason="runs a kernel under the interpreter in this process")
def test_a_runtime_loop_bound_runs_with_the_conversion_as_an_error_only_when_patched(monkeypatch):
    scalars.install()  # the test process has it already (tests/conftest.py); idempotent
    x = torch.arange(10, dtype=torch.float32)
    out = torch.zeros(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        _sum_first[(1,)](x, out, 4)
        assert out.item() == 0 + 1 + 2 + 3
        # Triton's own patching: the same launch fails (NumPy < 2.4 warns, here an error; >= 2.4 raises).
        monkeypatch.setattr(interp, "_patch_lang_tensor", scalars._original)
        with pytest.raises(interp.InterpreterError):
            _sum_first[(1,)](x, out, 4)
