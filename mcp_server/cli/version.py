"""`ptt --version`: the package, the torch and Triton it runs with, and the device kernels run on."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def version_info() -> dict[str, Any]:
    from mcp_server import __version__

    info: dict[str, Any] = {
        "ptt": __version__,
        "package": str(Path(__file__).resolve().parents[1]),
        "python": sys.version.split()[0],
        "torch": _dist_version("torch"),
        "triton": _dist_version("triton"),
        "mcp": _dist_version("mcp"),
    }
    try:
        from mcp_server.engine.device import probe

        dev = probe()
        info["device"] = dev.device
        info["interpreter"] = dev.interpreter
        info["torch"], info["triton"] = dev.torch, dev.triton
    except Exception as exc:  # the version must print even where the device cannot be probed
        info["device"] = None
        info["device_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return info


def render_version(info: dict[str, Any]) -> str:
    lines = [
        f"ptt {info['ptt']} (pytorch-to-triton) at {info['package']}",
        f"torch {info['torch']}   triton {info['triton']}   mcp {info['mcp']}   python {info['python']}",
    ]
    if info.get("device") is None:
        lines.append(f"device  unknown: {info.get('device_error')}")
    elif info.get("interpreter"):
        lines.append("device  cpu-interpreter (no CUDA GPU: kernels run under the Triton interpreter)")
    else:
        lines.append(f"device  {info['device']}")
    return "\n".join(lines)


class VersionAction(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None):
        info = version_info()
        as_json = "--json" in getattr(namespace, "_argv", sys.argv[1:])
        print(json.dumps({"ok": True, **info}, indent=2) if as_json else render_version(info))
        parser.exit(0)
