"""Device probe: what the child sees (GPU or interpreter), read once per runner."""

from __future__ import annotations

import os
import platform
from typing import Any


def run(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    import torch
    import triton

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "cuda_available": False,
        "interpreter": os.environ.get("TRITON_INTERPRET") == "1",
    }
    info["caches_writable"] = _caches_writable()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            cuda_available=True,
            name=props.name,
            capability=list(torch.cuda.get_device_capability(0)),
            sm_count=props.multi_processor_count,
            l2_bytes=int(getattr(props, "L2_cache_size", 0)),
            memory_bytes=int(props.total_memory),
            device_count=torch.cuda.device_count(),
            cuda_runtime=torch.version.cuda,
        )
    return info


def _caches_writable() -> dict[str, bool]:
    """Whether this child can write the caches torch.compile and Triton will use (a sandbox uid must)."""
    out: dict[str, bool] = {}
    try:
        out["inductor"] = os.access(_inductor_cache_dir(), os.W_OK)
    except Exception:  # not creatable
        out["inductor"] = False
    triton_dir = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    try:
        os.makedirs(triton_dir, exist_ok=True)
        out["triton"] = os.access(triton_dir, os.W_OK)
    except OSError:
        out["triton"] = False
    return out


def _inductor_cache_dir() -> str:
    """Inductor's own ``cache_dir()`` (creates it). Its module is free of torch imports by design, but importing
    it as ``torch._inductor…`` runs torch._inductor's package init, which imports torch._dynamo (seconds): the
    file is loaded on its own unless inductor is already imported."""
    import importlib.util
    import sys

    import torch

    if "torch._inductor" not in sys.modules:
        path = os.path.join(os.path.dirname(torch.__file__), "_inductor", "runtime", "cache_dir_utils.py")
        spec = importlib.util.spec_from_file_location("_ptt_inductor_cache_dir_utils", path)
        if spec is not None and spec.loader is not None and os.path.exists(path):
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.cache_dir()
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()
