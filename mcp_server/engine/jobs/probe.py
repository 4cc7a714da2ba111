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
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        out["inductor"] = os.access(cache_dir(), os.W_OK)
    except Exception:  # not creatable
        out["inductor"] = False
    triton_dir = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    try:
        os.makedirs(triton_dir, exist_ok=True)
        out["triton"] = os.access(triton_dir, os.W_OK)
    except OSError:
        out["triton"] = False
    return out
