"""Inputs for the stage-ledger walkthrough in the README: three softmax sizes, bf16, on the GPU."""

import torch


def cases() -> dict[str, list[torch.Tensor]]:
    return {f"4096x{n}": [torch.randn(4096, n, device="cuda", dtype=torch.bfloat16)] for n in (1024, 4096, 16384)}
