"""The demo's problem: softmax over the last dimension of a 2-D tensor.

A reference module for ptt: the reference in plain PyTorch, labelled input cases, and the bytes/FLOPs
model that bench uses for its roofline.
"""

import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def get_test_cases() -> dict[str, list[torch.Tensor]]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    cases = {
        "128x1024": (128, 1024),
        "non-pow2 columns": (97, 1000),
        "one row": (1, 4096),
    }
    if torch.cuda.is_available():
        cases["4096x8192"] = (4096, 8192)
    return {name: [torch.randn(shape, device=device, dtype=dtype)] for name, shape in cases.items()}


def get_bench_cases() -> dict[str, list[torch.Tensor]]:
    return {f"4096x{n}": [torch.randn(4096, n, device="cuda", dtype=torch.bfloat16)] for n in (1024, 4096, 16384)}


def bytes_moved(x: torch.Tensor) -> int:
    return 2 * x.numel() * x.element_size()


def flops(x: torch.Tensor) -> int:
    return 5 * x.numel()
