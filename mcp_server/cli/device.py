"""`ptt device`: the device kernels run on (GPU or the Triton interpreter) and its measured ceilings."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcp_server.cli._common import EXIT_OK, add_params, values
from mcp_server.engine.params import DEVICE


def cmd_device(args: argparse.Namespace) -> int:
    from mcp_server.cli.render import INTERPRETER_BANNER
    from mcp_server.engine.bench import cached_peaks, device_peaks
    from mcp_server.engine.device import probe
    from mcp_server.engine.runner import shared_runner

    v = values(args, DEVICE)
    info = probe()
    peaks = None
    if v["peaks"] or v["remeasure"]:
        peaks = device_peaks(info, shared_runner(), remeasure=v["remeasure"])
    elif not info.interpreter:
        peaks = cached_peaks(info)
    if args.json:
        data = info.model_dump(mode="json")
        data["peaks"] = peaks.model_dump(mode="json") if peaks else None
        print(json.dumps(data, indent=2))
        return EXIT_OK
    if info.interpreter:
        print(INTERPRETER_BANNER)
    print(f"device        {info.device}")
    if info.capability:
        print(
            f"capability    sm_{info.capability[0]}{info.capability[1]}   SMs {info.sm_count}   "
            f"L2 {(info.l2_bytes or 0) / 2**20:.0f} MiB   memory {(info.memory_bytes or 0) / 2**30:.0f} GiB"
        )
    print(f"torch         {info.torch}   triton {info.triton}   python {info.python}")
    print(f"compile target (default) {info.target}")
    if peaks:
        rates = ", ".join(f"{k} {v:.0f}" for k, v in peaks.matmul_tflops.items())
        print(f"peaks         copy {peaks.copy_gbps:.0f} GB/s; matmul TFLOP/s {rates} (measured {peaks.measured_at})")
    elif not info.interpreter:
        print("peaks         not measured yet: ptt device --peaks")
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("device", help="what device kernels run on (GPU or the Triton interpreter)")
    add_params(p, DEVICE)
    p.set_defaults(fn=cmd_device)
