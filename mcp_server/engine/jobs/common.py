"""The helpers jobs share, by concern (import from here or from the module that holds them):

- :mod:`~mcp_server.engine.jobs.trees`: argument trees (tensors in lists/tuples/dicts; copies, digests, aliasing)
- :mod:`~mcp_server.engine.jobs.cases`: input cases and value transforms
- :mod:`~mcp_server.engine.jobs.derive`: derived sizes and layouts (and the refill of an input set)
- :mod:`~mcp_server.engine.jobs.recorder`: the launch/op recorder (mutable state such as ``LAUNCH_STREAMS``
  lives there: assign ``recorder.LAUNCH_STREAMS``, not a copy here)
"""

from __future__ import annotations

from mcp_server.engine.jobs.cases import TRANSFORMS, Case, apply_transform, resolve_cases
from mcp_server.engine.jobs.derive import refill
from mcp_server.engine.jobs.recorder import (
    ALLOC_OPS,
    AUTOTUNE_NOTES,
    MATMUL_OPS,
    MOVEMENT_OPS,
    Record,
    install_launch_hooks,
    op_work,
    poison_value,
    recording,
)
from mcp_server.engine.jobs.trees import (
    aliases,
    check_plain,
    clone,
    flatten_outputs,
    foreign_tensor,
    iter_tensors,
    map_tensors,
    nesting_fields,
    overlapping_outputs,
    plain,
    same_bits,
    storage_span,
    sync,
    tensor_digest,
    to_cpu,
    to_device,
    type_label,
)

__all__ = [
    "ALLOC_OPS",
    "AUTOTUNE_NOTES",
    "MATMUL_OPS",
    "MOVEMENT_OPS",
    "TRANSFORMS",
    "Case",
    "Record",
    "aliases",
    "apply_transform",
    "check_plain",
    "clone",
    "flatten_outputs",
    "foreign_tensor",
    "install_launch_hooks",
    "iter_tensors",
    "map_tensors",
    "nesting_fields",
    "op_work",
    "overlapping_outputs",
    "plain",
    "poison_value",
    "recording",
    "refill",
    "resolve_cases",
    "same_bits",
    "storage_span",
    "sync",
    "tensor_digest",
    "to_cpu",
    "to_device",
    "type_label",
]
