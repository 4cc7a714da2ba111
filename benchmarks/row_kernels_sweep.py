"""Row kernels' one-block launch choices against torch.compile and Liger-Kernel, timed alike in one process.

    python benchmarks/row_kernels_sweep.py [--kernels rmsnorm,layernorm,softmax,softmax_long,swiglu]
                                           [--shapes MxN,...] [--rounds 9] [--out FILE.json]

bf16, at the bench shapes (``--shapes``: only these). Providers: stage 3 as shipped; its one-block kernel at
several warp counts, masked (as before) and unmasked (EVEN); for RMSNorm, LayerNorm and the softmax forward also
with x read a second time from L2 (RELOAD), LayerNorm with two rows per program, and an RMSNorm prototype whose
fixed grid of programs walks the rows with the next rows' loads pipelined; SwiGLU's forward (stage 2,
its only stage) at its larger autotuning configs; the softmax backward's one-block kernel alike and its one-row
kernel with y and dy in 16 bits (against Liger's backward, timed as autograd.grad over a kept graph); for 16-bit
softmax rows past the one-block budget (``softmax_long``), the packed one-row forward at 8, 16 and 32 warps and the
looped kernel; torch.compile of the reference (forwards; one compile per shape, static shapes; its chosen launch
config recorded); Liger-Kernel where installed.
Each variant's output is checked against PyTorch first. Timer: CUDA events around each call, L2 flushed before it
by reading a buffer twice its size, calls queued behind a GPU sleep; per provider the median of 60 calls, the
figure the median over interleaved rounds (each round in a rotated order).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import gpu_missing, report_head, rounds_parser  # noqa: E402
from reference_kernels import layernorm as ln  # noqa: E402
from reference_kernels import rmsnorm as rn  # noqa: E402
from reference_kernels import softmax as sm  # noqa: E402
from reference_kernels import swiglu as sw  # noqa: E402

RMS_SHAPES = [(4096, 4096), (8192, 4096), (4096, 8192), (8192, 8192), (16384, 8192)]
LN_SHAPES = [(4096, 4096), (8192, 4096), (4096, 8192), (8192, 8192), (16384, 8192)]
SOFTMAX_SHAPES = [(4096, 4096), (4096, 8192), (16384, 8192), (4096, 16384), (4096, 32768)]
# Rows past the one-block budget that the packed forward takes (16-bit, up to 65536 columns).
SOFTMAX_LONG_SHAPES = [(4096, 36864), (4096, 40000), (4096, 49152), (4096, 57344), (4096, 65536)]
SWIGLU_SHAPES = [(4096, 11008), (8192, 14336), (16384, 8192)]
# RMSNorm's persistent prototype: (programs per SM, num_warps, pipeline stages).
PERSISTENT_RMS = [(1, 16, 2), (1, 16, 3), (2, 16, 2), (2, 16, 3), (2, 8, 2), (2, 8, 3), (4, 8, 2), (3, 16, 2)]
# SwiGLU's forward: (BLOCK, num_warps) among its autotuning configs.
SWIGLU_CONFIGS = [(2048, 4), (4096, 4), (4096, 8), (8192, 8)]


class Timer:
    """CUDA events around each of ``calls`` calls, L2 flushed before each by reading a buffer twice its size, the
    calls queued behind a GPU sleep of ``sleep_cycles``; ``rounds`` interleaves providers (also used by
    cross_entropy_peers.py)."""

    def __init__(self, calls: int = 60, sleep_cycles: int = 3_000_000, warmup: int = 3) -> None:
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.cache = torch.ones(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device="cuda")
        self.sink = torch.zeros((), dtype=torch.int64, device="cuda")
        self.calls, self.sleep_cycles, self.warmup = calls, sleep_cycles, warmup

    def once(self, fn) -> float:
        n = self.calls
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda._sleep(self.sleep_cycles)
        for i in range(n):
            torch.sum(self.cache, dim=0, dtype=torch.int64, out=self.sink)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))

    def rounds(self, fns: dict, rounds: int) -> dict[str, float]:
        times: dict[str, list[float]] = {k: [] for k in fns}
        names = list(fns)
        for r in range(rounds):
            for k in names[r % len(names) :] + names[: r % len(names)]:
                times[k].append(self.once(fns[k]))
        return {k: statistics.median(v) for k, v in times.items()}


def liger():
    try:
        from liger_kernel.transformers import functional

        return functional
    except ImportError:
        return None


def inductor_configs() -> list[str]:
    """The launch configs torch.compile's kernels settled on (from the loaded generated modules)."""
    out = []
    try:
        from torch._inductor.codecache import PyCodeCache

        for module in list(getattr(PyCodeCache, "modules", [])):
            for name in dir(module):
                launchers = getattr(getattr(module, name), "launchers", None)
                if launchers:
                    out.append(f"{name}: {launchers[0].config}")
    except Exception as exc:  # internal API: record why it is missing
        out.append(repr(exc))
    return out


@triton.jit
def _rmsnorm_fwd_persistent_kernel(
    x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, eps, BLOCK_N: tl.constexpr, STAGES: tl.constexpr
):
    # A prototype: whole rows (n_cols == BLOCK_N), a fixed grid of programs walking the rows, w held in registers
    # and the next rows' x streaming into shared memory (STAGES) while this row is reduced.
    cols = tl.arange(0, BLOCK_N)
    w = tl.load(w_ptr + cols).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        r = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + r * n_cols + cols).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        tl.store(y_ptr + r * n_cols + cols, (x * rstd * w).to(y_ptr.dtype.element_ty))
        tl.store(rstd_ptr + r, rstd)


def rmsnorm_row(timer: Timer, lf, m: int, n: int, rounds: int) -> dict:
    x = (2 * torch.randn(m, n, device="cuda")).bfloat16()
    w = (1 + 0.1 * torch.randn(n, device="cuda")).bfloat16()
    y, rstd = torch.empty_like(x), torch.empty(m, device="cuda")
    want = F.rms_norm(x.float(), (n,), w.float(), 1e-6)
    torch._dynamo.reset()
    compiled = torch.compile(rn.reference_rmsnorm, dynamic=False)
    args = (x, w, y, rstd, m, n, n, n, 1e-6)
    fns = {"stage3": lambda: rn.rmsnorm_stage3(x, w), "compile": lambda: compiled(x, w)}
    if lf is not None:
        fns["liger"] = lambda: lf.liger_rms_norm(x, w, 1e-6)
    kernels = {}
    for warps in (4, 8, 16):
        for even, reload in ((False, False), (True, False), (True, True)):
            name = f"w{warps}" + (" unmasked" if even else "") + (" reload" if reload else "")
            kernels[name] = lambda warps=warps, even=even, reload=reload: rn._rmsnorm_fwd_kernel[(m,)](
                *args, BLOCK_N=n, ROWS=1, EVEN=even, RELOAD=reload, num_warps=warps
            )
    # Persistent programs (PROGRAMS per SM) with the next rows' loads pipelined (STAGES).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for per_sm, warps, stages in PERSISTENT_RMS:
        kernels[f"persistent x{per_sm} w{warps} s{stages}"] = lambda per_sm=per_sm, warps=warps, stages=stages: (
            _rmsnorm_fwd_persistent_kernel[(min(m, per_sm * sms),)](
                x, w, y, rstd, m, n, 1e-6, BLOCK_N=n, STAGES=stages, num_warps=warps
            )
        )
    return _measure(timer, fns, kernels, y, want, rounds) | {"inductor": inductor_configs()}


def layernorm_row(timer: Timer, lf, m: int, n: int, rounds: int) -> dict:
    x = (2 * torch.randn(m, n, device="cuda") + 0.5).bfloat16()
    w = (1 + 0.1 * torch.randn(n, device="cuda")).bfloat16()
    b = (0.1 * torch.randn(n, device="cuda")).bfloat16()
    y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
    want = F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    torch._dynamo.reset()
    compiled = torch.compile(ln.reference_layernorm, dynamic=False)
    args = (x, w, b, y, mean, rstd, m, n, n, n, 1e-5)
    fns = {"stage3": lambda: ln.layernorm_stage3(x, w, b), "compile": lambda: compiled(x, w, b)}
    if lf is not None:
        fns["liger"] = lambda: lf.liger_layer_norm(x, w, b, 1e-5)
    kernels = {}
    for warps in (4, 8, 16):
        for even, reload in ((False, False), (True, False), (True, True)):
            name = f"w{warps}" + (" unmasked" if even else "") + (" reload" if reload else "")
            kernels[name] = lambda warps=warps, even=even, reload=reload: ln._layernorm_fwd_kernel[(m,)](
                *args, BLOCK_N=n, ROWS=1, EVEN=even, RELOAD=reload, num_warps=warps
            )
    # Two rows per program (32 values per thread at 16 warps): more bytes in flight per program.
    for warps in (8, 16):
        kernels[f"r2 w{warps} unmasked"] = lambda warps=warps: ln._layernorm_fwd_kernel[(m // 2,)](
            *args, BLOCK_N=n, ROWS=2, EVEN=True, num_warps=warps
        )
    return _measure(timer, fns, kernels, y, want, rounds) | {"inductor": inductor_configs()}


def _softmax_forwards(lf, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """An output buffer, the float32 truth, and the forward providers: stage 3, torch.compile, Liger-Kernel."""
    want = torch.softmax(x.float(), dim=-1)
    torch._dynamo.reset()
    compiled = torch.compile(sm.reference_softmax, dynamic=False)
    fns = {"stage3": lambda: sm.softmax_stage3(x), "compile": lambda: compiled(x)}
    if lf is not None:
        fns["liger"] = lambda: lf.liger_softmax(x)
    return torch.empty_like(x), want, fns


def softmax_row(timer: Timer, lf, m: int, n: int, rounds: int) -> dict:
    x = torch.randn(m, n, device="cuda").bfloat16()
    dy = torch.randn(m, n, device="cuda").bfloat16()
    y, want, fns = _softmax_forwards(lf, x)
    kernels = {}
    for warps in (8, 16, 32):
        for even, reload in ((False, False), (True, False), (True, True)):
            name = f"w{warps}" + (" unmasked" if even else "") + (" reload" if reload else "")
            kernels[name] = lambda warps=warps, even=even, reload=reload: sm._softmax_fwd_kernel[(m,)](
                x, y, m, n, n, n, BLOCK_N=n, ROWS=1, EVEN=even, RELOAD=reload, num_warps=warps
            )
    fwd = _measure(timer, fns, kernels, y, want, rounds)
    # Backward: dx = y·(dy − Σ y·dy), from the same y.
    y16 = want.bfloat16()
    dx = torch.empty_like(x)
    dx_want = y16.float() * (dy.float() - (y16.float() * dy.float()).sum(-1, keepdim=True))
    bwd_fns = {"stage3": lambda: sm._bwd(y16, dy, sm._paths(3, n, x.dtype)[1])}
    if lf is not None:
        xl = x.clone().requires_grad_(True)
        yl = lf.liger_softmax(xl)
        bwd_fns["liger"] = lambda: torch.autograd.grad(yl, xl, dy, retain_graph=True)
    bwd_kernels = {}
    for warps in (8, 16, 32):
        for even in (False, True):
            name = f"w{warps}" + (" unmasked" if even else "")
            bwd_kernels[name] = lambda warps=warps, even=even: sm._softmax_bwd_kernel[(m,)](
                y16, dy, dx, m, n, n, n, n, BLOCK_N=n, ROWS=1, EVEN=even, num_warps=warps
            )
        # The one-row kernel with y and dy kept in 16 bits (stage 3's past 32768 columns).
        bwd_kernels[f"packed w{warps}"] = lambda warps=warps: sm._softmax_bwd_row_kernel[(m,)](
            y16, dy, dx, n, n, n, n, BLOCK_N=n, PACKED=True, num_warps=warps
        )
    bwd = _measure(timer, bwd_fns, bwd_kernels, dx, dx_want, rounds)
    return fwd | {"bwd": bwd, "inductor": inductor_configs()}


def softmax_long_row(timer: Timer, lf, m: int, n: int, rounds: int) -> dict:
    """Softmax of long 16-bit rows. Forward: stage 3 as shipped, the packed one-row kernel at 8, 16 and 32 warps,
    the looped kernel, torch.compile and Liger-Kernel. Backward: stage 3 as shipped, the packed kernel at 16 and 32
    warps, the looped kernel and Liger-Kernel."""
    x = (3 * torch.randn(m, n, device="cuda")).bfloat16()
    dy = torch.randn(m, n, device="cuda").bfloat16()
    y, want, fns = _softmax_forwards(lf, x)
    block = triton.next_power_of_2(n)
    kernels = {
        f"packed w{warps}": lambda warps=warps: sm._softmax_fwd_row_kernel[(m,)](
            x, y, n, n, n, BLOCK_N=block, PACKED=True, num_warps=warps
        )
        for warps in (8, 16, 32)
    }
    grid, meta = sm._looped_plan(
        m, n, n * x.element_size(), torch.cuda.get_device_properties(0).multi_processor_count, True
    )
    kernels["looped"] = lambda: sm._softmax_fwd_looped_kernel[grid](x, y, m, n, n, n, **meta)
    fwd = _measure(timer, fns, kernels, y, want, rounds)
    y16 = want.bfloat16()
    dx = torch.empty_like(x)
    dx_want = y16.float() * (dy.float() - (y16.float() * dy.float()).sum(-1, keepdim=True))
    bwd_fns = {
        "stage3": lambda: sm._bwd(y16, dy, sm._paths(3, n, x.dtype)[1]),
        "looped": lambda: sm._bwd(y16, dy, "looped"),
    }
    if lf is not None:
        xl = x.clone().requires_grad_(True)
        yl = lf.liger_softmax(xl)
        bwd_fns["liger"] = lambda: torch.autograd.grad(yl, xl, dy, retain_graph=True)
    bwd_kernels = {
        f"packed w{warps}": lambda warps=warps: sm._softmax_bwd_row_kernel[(m,)](
            y16, dy, dx, n, n, n, n, BLOCK_N=block, PACKED=True, num_warps=warps
        )
        for warps in (16, 32)
    }
    bwd = _measure(timer, bwd_fns, bwd_kernels, dx, dx_want, rounds)
    return fwd | {"bwd": bwd, "inductor": inductor_configs()}


def swiglu_row(timer: Timer, lf, m: int, n: int, rounds: int) -> dict:
    a = torch.randn(m, n, device="cuda").bfloat16()
    b = torch.randn(m, n, device="cuda").bfloat16()
    c = torch.empty_like(a)
    want = F.silu(a.float()) * b.float()
    torch._dynamo.reset()
    compiled = torch.compile(sw.reference_swiglu, dynamic=False)
    fns = {"stage2": lambda: sw.swiglu_stage2(a, b), "compile": lambda: compiled(a, b)}
    if lf is not None:
        fns["liger"] = lambda: lf.liger_swiglu(a, b)
    size_class = max(sw._MIN_SIZE_CLASS, a.numel().bit_length())
    kernels = {}
    n_elem = a.numel()
    for block, warps in SWIGLU_CONFIGS:
        kernels[f"b{block} w{warps}"] = lambda block=block, warps=warps: sw._swiglu_fwd_kernel[(-(-n_elem // block),)](
            a, b, c, n_elem, size_class, BLOCK=block, num_warps=warps
        )
    return _measure(timer, fns, kernels, c, want, rounds, shipped="stage2") | {"inductor": inductor_configs()}


def within(error: float, scale: float) -> bool:
    """Whether a kernel's largest error passes: within 5 % of the output's own largest magnitude (softmax
    values and gradients are small). A NaN error or scale fails."""
    return error <= 0.05 * scale


def _measure(
    timer: Timer, fns: dict, kernels: dict, y: torch.Tensor, want: torch.Tensor, rounds: int, shipped: str = "stage3"
) -> dict:
    """Every kernel variant's output checked, then every provider timed; ratios are to the ``shipped`` one's time
    (keyed ``vs_stage3`` whatever its stage)."""
    errors = {}
    with torch.no_grad():
        for name, launch in kernels.items():
            y.zero_()
            launch()
            errors[name] = float((y.float() - want).abs().max())
            if not within(errors[name], float(want.abs().max())):
                raise SystemExit(f"{name}: max error {errors[name]} against a largest value of {want.abs().max()}")
        ms = timer.rounds(fns | kernels, rounds)
    return {"ms": ms, "vs_stage3": {k: v / ms[shipped] for k, v in ms.items()}, "max_error": errors}


KINDS = ("rmsnorm", "layernorm", "softmax", "softmax_long", "swiglu")


def parse_shape(text: str) -> tuple[int, int]:
    """ "4096x8192" → (4096, 8192); ValueError for anything else."""
    m, n = (int(v) for v in text.split("x"))
    return m, n


def main() -> int:
    parser = rounds_parser(__doc__, rounds=9)
    parser.add_argument("--kernels", default="rmsnorm,layernorm,softmax")
    parser.add_argument("--shapes", default="", help="comma-separated MxN shapes to run (default: every shape)")
    ns = parser.parse_args()
    kinds = ns.kernels.split(",")
    try:
        only = {parse_shape(shape) for shape in filter(None, ns.shapes.split(","))}
    except ValueError:
        print(f"row_kernels_sweep: give --shapes as MxN joined by ',', not {ns.shapes!r}", file=sys.stderr)
        return 2
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        print(f"row_kernels_sweep: --kernels takes {', '.join(KINDS)}, not {', '.join(unknown)}", file=sys.stderr)
        return 2
    if gpu_missing("row_kernels_sweep"):
        return 2
    timer, lf = Timer(), liger()
    report = report_head(
        ns.rounds, "CUDA events, L2 flushed by a read, median of 60 calls; median over interleaved rounds", rows=[]
    )
    table = {
        "rmsnorm": (RMS_SHAPES, rmsnorm_row),
        "layernorm": (LN_SHAPES, layernorm_row),
        "softmax": (SOFTMAX_SHAPES, softmax_row),
        "softmax_long": (SOFTMAX_LONG_SHAPES, softmax_long_row),
        "swiglu": (SWIGLU_SHAPES, swiglu_row),
    }
    for kind in kinds:
        shapes, row = table[kind]
        for m, n in shapes:
            if only and (m, n) not in only:
                continue
            result = {"kernel": kind, "shape": [m, n]} | row(timer, lf, m, n, ns.rounds)
            report["rows"].append(result)
            print(kind, f"{m}x{n}", {k: round(v * 1e3, 2) for k, v in result["ms"].items()}, flush=True)
            if "bwd" in result:
                print("  backward", {k: round(v * 1e3, 2) for k, v in result["bwd"]["ms"].items()}, flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
