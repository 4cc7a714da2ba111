"""Record what Triton's fp8 casts give on this GPU, bit for bit, for the interpreter's emulation to be tested against.

Every fp16 and bf16 bit pattern, every bf16 pattern of fp32 with four low halves (0, 1, 0x8000, 0xFFFF: exact
values, ties at every fp8 rounding point and values just past them), and fp64 values just either side of those,
each cast with ``x.to(dst)`` and ``x.to(dst, fp_downcast_rounding="rtz")`` to ``tl.float8e4nv`` and
``tl.float8e5`` (torch's ``float8_e4m3fn`` and ``float8_e5m2``); every fp8 pattern widened to fp16, bf16, fp32
and fp64; which operations on fp8 tensors compile (arithmetic, comparisons, tl.where, reductions, casts to the
other fp8 format and to and from integers), with the results of those that do for every pair of fp8 patterns;
and the largest error of an e4m3 dot at K = 4096. A cast or operation that does not compile is recorded as such
with its error's last line. Written as one ``.npz`` (``--out``) whose keys name source, destination and
rounding, with a JSON summary beside it that also counts where torch's own cast differs from the GPU's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

from benchmarks._common import gpu_missing

FP8 = {"e4m3fn": (tl.float8e4nv, torch.float8_e4m3fn), "e5m2": (tl.float8e5, torch.float8_e5m2)}
WIDE = {"fp16": (tl.float16, torch.float16), "bf16": (tl.bfloat16, torch.bfloat16),
        "fp32": (tl.float32, torch.float32), "fp64": (tl.float64, torch.float64)}  # fmt: skip


@triton.jit
def _cast(x_ptr, y_ptr, n, DST: tl.constexpr, RTZ: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if RTZ:
        y = x.to(DST, fp_downcast_rounding="rtz")
    else:
        y = x.to(DST)
    tl.store(y_ptr + offs, y, mask=mask)


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _op(x_ptr, y_ptr, out_ptr, OP: tl.constexpr, OTHER: tl.constexpr):
    offs = tl.program_id(0) * 256 + tl.arange(0, 256)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "div":
        r = x / y
    elif OP == "neg":
        r = -x
    elif OP == "abs":
        r = tl.abs(x)
    elif OP == "maximum":
        r = tl.maximum(x, y)
    elif OP == "lt":
        r = (x < y).to(tl.int8)
    elif OP == "eq":
        r = (x == y).to(tl.int8)
    elif OP == "where":
        r = tl.where(offs % 3 == 0, x, y)
    elif OP == "sum":
        r = tl.zeros_like(x) + tl.sum(tl.where(offs % 256 < 100, y, 0), axis=0)
    elif OP == "max":
        r = tl.zeros_like(x) + tl.max(tl.where(offs % 256 < 100, y, 0), axis=0)
    elif OP == "mul_scalar":
        r = x * 2.0
    elif OP == "exp":
        r = tl.exp(x)
    elif OP == "to_int32":
        r = x.to(tl.int32)
    elif OP == "from_int32":
        r = (offs % 256 - 128).to(x.dtype)
    elif OP == "from_bool":
        r = (offs % 2 == 0).to(x.dtype)
    else:  # "to_other": the other fp8 format
        r = x.to(OTHER)
    tl.store(out_ptr + offs, r)


OPS = {"add": None, "sub": None, "mul": None, "div": None, "neg": None, "abs": None, "maximum": None,
       "lt": torch.int8, "eq": torch.int8, "where": None, "sum": None, "max": None,
       "mul_scalar": torch.float32, "exp": torch.float32, "to_int32": torch.int32,
       "from_int32": None, "from_bool": None, "to_other": "other"}  # fmt: skip


def op_matrix(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    """Which operations on fp8 tensors compile, per format; the results (raw bits) of those that do go into
    ``arrays`` for every pair of fp8 patterns (x = i // 256, y = i % 256)."""
    every8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    found = {}
    for name, (_, fmt) in FP8.items():
        other_name = next(n for n in FP8 if n != name)
        x = every8.repeat_interleave(256).view(fmt).cuda()
        y = every8.repeat(256).view(fmt).cuda()
        for op, out_dtype in OPS.items():
            dtype = FP8[other_name][1] if out_dtype == "other" else (out_dtype or fmt)
            out = torch.empty(65536, dtype=dtype, device="cuda")
            try:
                _op[(256,)](x, y, out, OP=op, OTHER=FP8[other_name][0])
                torch.cuda.synchronize()
            except Exception as exc:
                lines = [line for line in str(exc).strip().splitlines() if line.strip()]
                found[f"{name}_{op}"] = f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]
                continue
            bits = {1: torch.uint8, 4: torch.int32}[out.element_size()]
            arrays[f"op_{name}_{op}"] = out.view(bits).cpu().numpy()
            found[f"{name}_{op}"] = f"ok ({out.dtype})"
            print(name, op, found[f"{name}_{op}"], flush=True)
    return found


def dot_errors() -> dict[str, float]:
    """fp8 e4m3 64×4096 @ 4096×64 with an fp32 accumulator: the largest error against the exact (fp64) product,
    relative to the product's largest magnitude, by Triton's default and with max_num_imprecise_acc 32 / 0
    (``benchmarks/fp8_dot_accumulation.py`` measures more)."""
    from benchmarks.fp8_dot_accumulation import MODES, run

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 4096, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(4096, 64, generator=gen).to(torch.float8_e4m3fn)
    exact = a.double() @ b.double()
    scale = exact.abs().max()
    return {name: ((run(a, b, imprecise) - exact).abs().max() / scale).item() for name, imprecise in MODES.items()}


def sources() -> dict[str, torch.Tensor]:
    """The inputs, on the CPU, per source dtype."""
    every16 = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    high = np.arange(65536, dtype=np.uint32) << np.uint32(16)
    fp32_bits = (high[:, None] | np.array([0, 1, 0x8000, 0xFFFF], dtype=np.uint32)[None, :]).reshape(-1)
    fp32 = torch.from_numpy(fp32_bits.view(np.float32).copy())
    wide = fp32[torch.isfinite(fp32)].double()
    fp64 = torch.cat([fp32.double(), torch.nextafter(wide, wide + 1), torch.nextafter(wide, wide - 1)])
    return {"fp16": every16.view(torch.float16), "bf16": every16.view(torch.bfloat16), "fp32": fp32, "fp64": fp64}


def run_cast(x: torch.Tensor, dst_tl: tl.dtype, dst_torch: torch.dtype, rtz: bool) -> tuple[np.ndarray | None, str]:
    """The GPU's result as raw bits (uint8/16/32/64 per width), or None and the compiler's last error line."""
    y = torch.empty(x.numel(), dtype=dst_torch, device="cuda")
    try:
        _cast[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), DST=dst_tl, RTZ=rtz, BLOCK=1024)
        torch.cuda.synchronize()
    except Exception as exc:  # a cast the compiler refuses is a result here
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        return None, f"{type(exc).__name__}: {lines[-1] if lines else ''}"
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[y.element_size()]
    return y.view(bits).cpu().numpy(), "ok"


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the .npz to write (a .json summary goes beside it)")
    args = parser.parse_args()
    if gpu_missing("fp8_cast_tables.py"):
        return 2
    arrays: dict[str, np.ndarray] = {}
    summary: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                  "triton": triton.__version__, "casts": {}}  # fmt: skip
    for src_name, x_cpu in sources().items():
        arrays[f"in_{src_name}"] = x_cpu.view(
            {2: torch.int16, 4: torch.int32, 8: torch.int64}[x_cpu.element_size()]
        ).numpy()
        x = x_cpu.cuda()
        for dst_name, (dst_tl, dst_torch) in FP8.items():
            for rounding in ("rtne", "rtz"):
                key = f"{src_name}_to_{dst_name}_{rounding}"
                got, status = run_cast(x, dst_tl, dst_torch, rounding == "rtz")
                entry: dict[str, object] = {"status": status}
                if got is not None:
                    arrays[key] = got
                    if rounding == "rtne":
                        torch_bits = x.to(dst_torch).view(torch.uint8).cpu().numpy()
                        entry["differs_from_torch"] = int((torch_bits != got).sum())
                summary["casts"][key] = entry
                print(key, entry, flush=True)
    every8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for src_name, (_, src_torch) in FP8.items():
        x = every8.view(src_torch).cuda()
        arrays[f"in_{src_name}"] = every8.numpy()
        for dst_name, (dst_tl, dst_torch) in WIDE.items():
            key = f"{src_name}_to_{dst_name}"
            got, status = run_cast(x, dst_tl, dst_torch, False)
            entry = {"status": status}
            if got is not None:
                arrays[key] = got
                ref = x.to(dst_torch)
                entry["differs_from_torch"] = int((ref.view(torch.uint8).cpu().numpy().view(got.dtype) != got).sum())
            summary["casts"][key] = entry
            print(key, entry, flush=True)
        out = torch.empty(256, dtype=src_torch, device="cuda")
        try:
            _add[(1,)](x, x, out, 256, BLOCK=256)
            torch.cuda.synchronize()
            arrays[f"{src_name}_add_self"] = out.view(torch.uint8).cpu().numpy()
            summary[f"{src_name}_add"] = "ok"
        except Exception as exc:
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            summary[f"{src_name}_add"] = f"{type(exc).__name__}: {lines[-1] if lines else ''}"
        print(f"{src_name} + {src_name}:", summary[f"{src_name}_add"], flush=True)
    summary["ops"] = op_matrix(arrays)
    print(json.dumps(summary["ops"], indent=1), flush=True)
    try:
        summary["e4m3_dot_error"] = dot_errors()
    except Exception as exc:
        summary["e4m3_dot_error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}"
    print("e4m3 dot, error against fp64:", summary["e4m3_dot_error"], flush=True)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out_path, **arrays)
    out_path.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out_path} ({out_path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
