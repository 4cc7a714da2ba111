"""Host-side helpers shared by the reference kernels: interpreter detection, the SM count, integer
arithmetic for grids and blocks, and the input checks every float kernel makes. No kernels here."""

from __future__ import annotations

import functools

import torch
import triton

# The dtypes the float kernels take (the checks below name them in their messages).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def interpreting() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return bool(triton.knobs.runtime.interpret)


@functools.cache
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


# Plain integer arithmetic: triton.cdiv and triton.next_power_of_2 are constexpr functions, several µs
# per host call.


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ≥ n, for n ≥ 1."""
    return 1 << (n - 1).bit_length()


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """[..., N] → [M, N] with unit column stride (a view when the layout allows)."""
    t2 = t if t.dim() == 2 else t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def check_float_tensor(op: str, name: str, t: object) -> None:
    """ValueError unless ``t`` is a float32/float16/bfloat16 tensor on a CUDA device (or on the CPU under
    the interpreter); the message starts with ``op`` and names the argument ``name``."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{op}: {name} has dtype {t.dtype}; supported are float32, float16 and bfloat16 "
            f"(cast with {name}.float() first)"
        )
    if not t.is_cuda and not (interpreting() and t.device.type == "cpu"):
        raise ValueError(
            f"{op}: {name} is on {t.device}; move it to a CUDA device, or set TRITON_INTERPRET=1 "
            "before importing triton to run CPU tensors through the interpreter"
        )


def check_same_dtype_and_device(op: str, first: tuple[str, torch.Tensor], second: tuple[str, torch.Tensor]) -> None:
    """ValueError unless the two named tensors share one dtype and one device."""
    (a_name, a), (b_name, b) = first, second
    if a.dtype != b.dtype:
        raise ValueError(f"{op}: {a_name} is {a.dtype} and {b_name} is {b.dtype}; cast one so both match")
    if a.device != b.device:
        raise ValueError(f"{op}: {a_name} is on {a.device} and {b_name} on {b.device}; put both on one device")
