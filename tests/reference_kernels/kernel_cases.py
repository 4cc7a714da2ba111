"""Parametrisation helpers shared by the reference-kernel tests: test ids from case labels, the
(stage, case, dtype) grids the tests run, case lookup by label, and a comparison at a kernel's tolerance.
Imported by the test modules beside it (pytest puts this folder on sys.path); fixtures live in conftest.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch


def slug(label: str) -> str:
    """A case label as a test id: each run of characters other than letters and digits becomes one '-'."""
    return re.sub(r"[^0-9A-Za-z]+", "-", label).strip("-")


def label_ids(cases: Iterable[Any]) -> list[str]:
    return [slug(c.label) for c in cases]


def case_id(stage: int, case: Any, dtype: torch.dtype) -> str:
    return f"stage{stage}-{slug(case.label)}-{str(dtype).removeprefix('torch.')}"


def as_params(triples: Iterable[tuple[int, Any, torch.dtype]]) -> list[Any]:
    """``pytest.param(stage, case, dtype)`` for each triple, with ids from ``case_id``."""
    return [pytest.param(s, c, d, id=case_id(s, c, d)) for (s, c, d) in triples]


def stage_params(
    spec: Any,
    cases: Sequence[Any],
    dtypes: Sequence[torch.dtype],
    fits: Callable[[int, Any], bool] | None = None,
) -> list[Any]:
    """Every case × every stage of ``spec`` (those ``fits(stage, case)`` admits) × every dtype."""
    return as_params(
        (stage, case, dtype)
        for case in cases
        for stage in sorted(spec.stages)
        if fits is None or fits(stage, case)
        for dtype in dtypes
    )


def case_named(cases: Iterable[Any], label: str) -> Any:
    """The case of ``cases`` with this label (StopIteration when there is none)."""
    return next(c for c in cases if c.label == label)


def assert_close_scaled(got: torch.Tensor, expected: torch.Tensor, tol: Any, what: str) -> None:
    """``got`` against the float64 ``expected`` at tolerance ``tol`` (a SPEC's ``Tolerance``), the absolute part
    scaled by the largest expected magnitude (attention's gradients grow with the sequence)."""
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(
        got.double(), expected, atol=tol.atol * scale, rtol=tol.rtol, msg=lambda m: f"{what}: {m}"
    )


# The head of a script run in a subprocess that compiles Gluon kernels for sm_90a on a machine without a GPU:
# Triton is pointed at an sm_90 target, and ``report(kernel, ptx)`` gives what ptxas and the PTX say of one
# compiled kernel (shared memory, spill bytes, wgmma and TMA reduce counts, setmaxnreg values).
SM90_COMPILE_PRELUDE = textwrap.dedent(
    """
    import json, re, subprocess, sys, tempfile
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas

    class Sm90:  # the target Triton compiles for when no GPU is present
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)
        def get_current_device(self):
            return 0
        def get_current_stream(self, device=None):
            return 0
        def get_active_torch_device(self):
            return torch.device("cpu")

    triton.runtime.driver.set_active(Sm90())

    def report(k):
        ptx = k.asm["ptx"]
        with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
            f.write(ptx)
            f.flush()
            info = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"],
                                  capture_output=True, text=True, check=True).stderr
        return {"shared": k.metadata.shared,
                "spills": [int(n) for n in re.findall(r"(\\d+) bytes spill (?:stores|loads)", info)],
                "wgmma": ptx.count("wgmma.mma_async"), "reduce": ptx.count("cp.reduce.async.bulk.tensor"),
                "global_loads": ptx.count("ld.global"), "tma_1d": ptx.count("cp.async.bulk.tensor.1d"),
                "setmaxnreg": sorted(set(re.findall(
                    r"setmaxnreg\\.(?:inc|dec)\\.sync\\.aligned\\.u32\\s+(\\d+)", ptx)))}
    """
)


def run_sm90_compile(script: str, cases: list) -> list[dict]:
    """Run ``script`` (``SM90_COMPILE_PRELUDE`` plus a loop over the JSON ``cases`` in ``sys.argv[1]`` that prints
    one JSON list of rows last) in a subprocess that sees neither a GPU nor the interpreter; its rows."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")}
    env["TRITON_CACHE_DIR"] = str(root / ".pytest_cache" / "triton-sm90")
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cases)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
