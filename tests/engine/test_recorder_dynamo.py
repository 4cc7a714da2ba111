"""jobs.recorder: the op recorder's dispatch mode imports no torch._dynamo (seconds in every job child) until
something else has, and is dynamo-disabled, as torch makes it, from then on."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mcp_server.engine.jobs import recorder


def _mode(seen: list[str]) -> type:
    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    return Mode


def test_the_recorders_handler_is_wrapped_by_torch_and_seeded():
    # torch wraps every dispatch mode's handler in a lazy `import torch._dynamo`; the recorder seeds its cache.
    raw = recorder._Recorder.__dict__["__torch_dispatch__"].__wrapped__
    assert hasattr(raw, "__dynamo_disable")


@pytest.mark.slow
def test_dispatch_imports_no_dynamo_until_something_else_does_then_is_disabled_for_it(monkeypatch):
    seen: list[str] = []
    mode = _mode(seen)
    recorder._defer_dynamo(mode)
    raw = mode.__dict__["__torch_dispatch__"].__wrapped__
    loaded = {k: v for k, v in sys.modules.items() if k == "torch._dynamo" or k.startswith("torch._dynamo.")}
    for name in loaded:
        monkeypatch.delitem(sys.modules, name)
    with mode():
        torch.ones(3).detach().mul(2)
    assert "torch._dynamo" not in sys.modules
    assert {"detach", "mul"} <= set(seen)
    assert isinstance(getattr(raw, "__dynamo_disable"), recorder._DisableWhenLoaded)
    sys.modules.update(loaded)
    importlib.import_module("torch._dynamo")  # as a candidate's torch.compile would

    with mode():
        torch.ones(3).mul(2)
    disabled = getattr(raw, "__dynamo_disable")
    assert not isinstance(disabled, recorder._DisableWhenLoaded) and callable(disabled)
    assert seen.count("mul") == 2
