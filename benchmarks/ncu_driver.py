"""Runs the example softmax kernel repeatedly for Nsight Compute (benchmarks/bench_trust.py profiles it).

python benchmarks/ncu_driver.py ROWS,COLS
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp_server" / "examples"))

from softmax_triton import softmax


def main() -> None:
    rows, cols = (int(v) for v in sys.argv[1].split(","))
    sets = [torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    for i in range(60):
        softmax(sets[i % len(sets)])
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
