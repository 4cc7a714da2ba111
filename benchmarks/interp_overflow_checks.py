"""What Triton's integer overflow checks cost under the interpreter: one kernel call with them computed (Triton's own
``binary_op_sanitize_overflow_impl``) and skipped where their assert cannot fire (the engine's fast path), in one
run, rounds alternating.

    python benchmarks/interp_overflow_checks.py [--rows 1000] [--rounds 5] [--out FILE.json]

The kernel walks rows of a [rows, 257] float32 tensor in 256-column blocks (index arithmetic in int32: row times
stride plus column), relu(x)·y + 1 per element, as an agent's first row kernel would. The engine's other
interpreter patches are installed for both; only the overflow check differs. Each figure is the median over rounds
of one call's wall time (time.perf_counter); both versions' outputs must be bit-identical.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language import semantic  # noqa: E402

from benchmarks._common import write_report  # noqa: E402
from mcp_server.engine import interp  # noqa: E402
from mcp_server.engine.interp import fastpaths  # noqa: E402


@triton.jit
def _rows(x_ptr, y_ptr, o_ptr, n_cols, sx, sy, so, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        m = c < n_cols
        x = tl.load(x_ptr + row * sx + c, mask=m)
        y = tl.load(y_ptr + row * sy + c, mask=m)
        tl.store(o_ptr + row * so + c, tl.maximum(x, 0.0) * y + 1.0, mask=m)


def _call(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    out = torch.empty_like(x)
    started = time.perf_counter()
    _rows[(x.shape[0],)](x, y, out, x.shape[1], x.stride(0), y.stride(0), out.stride(0), BLOCK=256)
    return out, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.rows < 1 or args.rounds < 1:
        parser.error("--rows and --rounds take a whole number of at least 1")
    interp.install()
    fast = semantic.TritonSemantic.binary_op_sanitize_overflow_impl
    if fast.__module__ != fastpaths.__name__:
        say = "interp_overflow_checks: this Triton's overflow check has another shape: nothing to compare"
        print(say, file=sys.stderr)
        return 2
    triton_own = fastpaths._triton_overflow_check
    torch.manual_seed(0)
    x, y = torch.randn(args.rows, 257), torch.randn(args.rows, 257)
    seconds: dict[str, list[float]] = {"computed": [], "skipped": []}
    outputs = {}
    _call(x, y)  # warm-up
    for _ in range(args.rounds):
        for name, impl in (("computed", triton_own), ("skipped", fast)):
            semantic.TritonSemantic.binary_op_sanitize_overflow_impl = impl
            outputs[name], took = _call(x, y)
            seconds[name].append(took)
    semantic.TritonSemantic.binary_op_sanitize_overflow_impl = fast
    if not torch.equal(outputs["computed"], outputs["skipped"]):
        print("interp_overflow_checks: the two versions' outputs differ", file=sys.stderr)
        return 1
    median = {name: statistics.median(t) for name, t in seconds.items()}
    report = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "triton": triton.__version__,
        "timer": "time.perf_counter around one call, median over rounds",
        "rows": args.rows,
        "median_s": median,
        "rounds_s": seconds,
        "skipped_over_computed": median["skipped"] / median["computed"],
    }
    print(f"{args.rows} rows: checks computed {median['computed']:.3f} s, skipped {median['skipped']:.3f} s a call "
          f"({report['skipped_over_computed']:.2f}×)")  # fmt: skip
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
