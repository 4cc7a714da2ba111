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
