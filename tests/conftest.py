"""Shared test configuration: the `gpu` marker skips without a CUDA device."""

from __future__ import annotations

import os

import pytest
import torch

HAS_GPU = torch.cuda.is_available()

# Triton chooses between its compiler and its interpreter when a function is decorated with @triton.jit,
# including the functions of triton.language itself. Without a GPU the tests that run kernels in this
# process need the interpreter, so the choice is made here, before any test module imports triton.
# (The engine's own children pick their mode per job and are unaffected.)
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# `ptt` run as a process by a test stays in that process; tests/cli/test_daemon.py turns the daemon on itself.
os.environ.setdefault("PTT_NO_DAEMON", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
