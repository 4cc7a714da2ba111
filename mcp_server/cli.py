"""`ptt`: the command line over the engine.

Exit codes: 0 ok, 1 the kernel failed, 2 bad usage, 3 this environment cannot do it.
``--json`` prints the result model; otherwise a readable table. No traceback of ours reaches the user:
set PTT_DEBUG=1 to see one.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ENV = 0, 1, 2, 3

# Feature adapters: each module defines register_cli(subparsers) (and register_tools(server) for MCP).
FEATURE_MODULES: tuple[str, ...] = (
    "mcp_server.stages_adapters",
    "mcp_server.audit_adapters",
    "mcp_server.docs_adapters",
    "mcp_server.serve_adapters",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default exits 2 too; keep the message short
        self.print_usage(sys.stderr)
        sys.stderr.write(f"ptt: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _kv(items: list[str] | None, what: str) -> dict[str, Any]:
    from mcp_server.engine.errors import UsageError

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--{what} expects NAME=VALUE, got {item!r}.")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _tolerances(items: list[str] | None) -> dict[str, tuple[float, float]] | None:
    from mcp_server.engine.errors import UsageError
    from mcp_server.engine.inputs import DTYPE_ALIASES

    if not items:
        return None
    out = {}
    for item in items:
        dtype, sep, rest = item.partition("=")
        parts = rest.split(",")
        name = DTYPE_ALIASES.get(dtype.strip().lower())
        if not sep or name is None or len(parts) != 2:
            raise UsageError(f"--tol expects DTYPE=ATOL,RTOL (e.g. bf16=1e-2,2e-2), got {item!r}.")
        try:
            out[name] = (float(parts[0]), float(parts[1]))
        except ValueError:
            raise UsageError(f"--tol {item!r}: ATOL and RTOL must be numbers.") from None
    return out


def _emit(result: Any, as_json: bool, render: Callable[[Any], str]) -> int:
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        print(render(result))
    return EXIT_OK if getattr(result, "ok", True) else EXIT_FAILED


# --- subcommands ------------------------------------------------------------------------------------


def cmd_device(args: argparse.Namespace) -> int:
    from mcp_server.engine.bench import cached_peaks, device_peaks
    from mcp_server.engine.device import probe
    from mcp_server.engine.runner import shared_runner
    from mcp_server.render import INTERPRETER_BANNER

    info = probe()
    peaks = None
    if args.peaks or args.remeasure:
        peaks = device_peaks(info, shared_runner(), remeasure=args.remeasure)
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


def cmd_compile(args: argparse.Namespace) -> int:
    from mcp_server.engine.compile import compile_kernel
    from mcp_server.render import render_compile

    config: int | str | None = args.config
    if isinstance(config, str) and config.isdigit():
        config = int(config)
    result = compile_kernel(
        args.kernel,
        signature=args.signature,
        args=args.args,
        constexprs=_kv(args.constexpr, "constexpr"),
        target=args.target,
        num_warps=args.num_warps,
        num_stages=args.num_stages,
        config=config,
        ir=[s.strip() for s in (args.ir or "").split(",") if s.strip()],
        out_dir=args.out_dir,
        timeout_s=args.timeout,
    )
    return _emit(result, args.json, render_compile)


def cmd_validate(args: argparse.Namespace) -> int:
    from mcp_server.engine.validate import validate
    from mcp_server.render import render_validate

    result = validate(
        args.reference,
        args.candidate,
        inputs=args.inputs,
        seeds=args.seeds,
        derive_shapes=not args.no_derive,
        max_derived=args.max_derived,
        backward=args.backward,
        determinism=not args.no_determinism,
        timeout_s=args.timeout,
        tolerances=_tolerances(args.tol),
        allow_torch_ops=tuple(args.allow_torch_op or ()),
    )
    return _emit(result, args.json, render_validate)


class _ProgressBar:
    """A one-line progress display on stderr (a plain log line per message when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = ""

    def __call__(self, done: float, total: float | None, message: str) -> None:
        if total:
            width = 24
            filled = int(width * min(1.0, done / total))
            text = f"[{'#' * filled}{'.' * (width - filled)}] {message}"
        else:
            text = message
        if text == self.last:
            return
        self.last = text
        if self.tty:
            sys.stderr.write("\r\033[K" + text[:120])
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self.last:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def cmd_bench(args: argparse.Namespace) -> int:
    from mcp_server.engine.bench import bench
    from mcp_server.render import render_bench

    bar = _ProgressBar()
    try:
        result = bench(
            args.candidate,
            args.reference,
            inputs=args.inputs,
            sizes=args.sizes,
            mode=args.mode,
            reps=args.reps,
            input_sets=args.input_sets,
            l2_flush=not args.no_l2_flush,
            baselines=not args.no_baselines,
            validate_first=not args.no_validate,
            force=args.force,
            backward=args.backward,
            plot=args.plot,
            timeout_s=args.timeout,
            progress=bar,
        )
    finally:
        bar.close()
    return _emit(result, args.json, render_bench)


def cmd_serve(args: argparse.Namespace) -> int:
    from mcp_server.server import run_server

    http = {
        "token": args.token,
        "allow_origins": args.allow_origin or [],
        "max_concurrency": args.max_concurrency,
        "max_request_bytes": args.max_request_bytes,
    }
    run_server(transport=args.transport, host=args.host, port=args.port, **(http if args.transport == "http" else {}))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from mcp_server.demo import run_demo

    return run_demo()


# --- parser -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ptt", description="Compile, validate, bench and audit Triton kernels against PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("device", help="what device kernels run on (GPU or the Triton interpreter)")
    p.add_argument("--peaks", action="store_true", help="measure (or show cached) copy bandwidth and matmul rates")
    p.add_argument("--remeasure", action="store_true", help="measure the peaks again even if cached")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_device)

    p = sub.add_parser("compile", help="compile a @triton.jit kernel for a GPU target (no GPU needed)")
    p.add_argument("kernel", help="path.py:kernel_name")
    p.add_argument("--signature", help="types in parameter order, e.g. '*fp32, *fp32, i32' (or name=*fp32 …)")
    p.add_argument("--args", help="example args: 'f32[1024], f32[1024], 1024, BLOCK=256' or path.py:make_args")
    p.add_argument("--constexpr", action="append", metavar="NAME=VALUE", help="a constexpr value (repeatable)")
    p.add_argument("--target", help="cuda:80 | cuda:90 | cuda:100 (default: the local GPU's, else cuda:90)")
    p.add_argument("--num-warps", type=int)
    p.add_argument("--num-stages", type=int)
    p.add_argument("--config", help="autotune config index, or 'all' (default: all, up to 16)")
    p.add_argument("--ir", help="IR stages to print: ttir,ttgir,llir,ptx,sass")
    p.add_argument("--out-dir", help="write every IR stage in full to this folder")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_compile)

    p = sub.add_parser("validate", help="check a candidate against a PyTorch reference")
    p.add_argument("reference", help="path.py:reference (or a KernelBench problem file)")
    p.add_argument("candidate", help="path.py:candidate (or a KernelBench solution file with ModelNew)")
    p.add_argument("--inputs", help="'f32[1024,512], i32=7' or path.py:make_inputs (default: the reference's)")
    p.add_argument("--seeds", type=int, default=3, help="random input sets per case (default 3)")
    p.add_argument("--no-derive", action="store_true", help="do not derive edge shapes from get_inputs()")
    p.add_argument("--max-derived", type=int, default=6, help="most derived shapes to try (default 6)")
    p.add_argument("--backward", action="store_true", help="also compare gradients with autograd's")
    p.add_argument("--no-determinism", action="store_true", help="skip the repeat call")
    p.add_argument("--tol", action="append", metavar="DTYPE=ATOL,RTOL", help="tolerance override (repeatable)")
    p.add_argument(
        "--allow-torch-op",
        action="append",
        metavar="OP",
        help="a torch op the candidate may use for real work, e.g. aten.cumsum (repeatable)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per child (default 120)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("bench", help="time a kernel against eager, torch.compile and the roofline (GPU only)")
    p.add_argument("candidate", help="path.py:launcher (or a KernelBench solution file)")
    p.add_argument("--reference", help="path.py:reference — its eager and torch.compile runs are the baselines")
    p.add_argument("--inputs", help="'bf16[4096,N]' (with --sizes) or path.py:make_inputs; default the module's cases")
    p.add_argument("--sizes", help="values for the symbols in --inputs: 1024,2048 (N) or M=1,N=2;M=3,N=4")
    p.add_argument(
        "--mode",
        choices=["events", "cuda-graph"],
        default="events",
        help="cuda-graph takes launch overhead out (microsecond kernels)",
    )
    p.add_argument("--reps", type=int, default=100, help="timed calls per provider and size (default 100)")
    p.add_argument("--input-sets", type=int, help="input sets rotated between calls (default: enough to beat L2)")
    p.add_argument("--no-l2-flush", action="store_true", help="keep L2 warm between calls (to see its effect)")
    p.add_argument("--no-baselines", action="store_true", help="time the candidate only")
    p.add_argument("--no-validate", action="store_true", help="skip the validation before timing")
    p.add_argument("--force", action="store_true", help="time a candidate even if it fails validation")
    p.add_argument("--backward", action="store_true", help="time forward + backward (autograd) for every provider")
    p.add_argument("--plot", metavar="OUT.png", help="write a plot of time and GB/s per size")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds (default 900)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("serve", help="run the MCP server")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument(
        "--token",
        choices=["auto", "require", "none"],
        default="auto",
        help="http: bearer token — auto: required off loopback (from PTT_SERVE_TOKEN, else generated and "
        "printed once); require: also on loopback; none: no token (loopback only)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        metavar="URL",
        help="http: an extra allowed Origin (and Host), e.g. https://gpu-box:8765 (repeatable)",
    )
    p.add_argument("--max-concurrency", type=int, help="http: tool calls at once (default 2 per GPU, or 4)")
    p.add_argument("--max-request-bytes", type=int, default=1 << 20, help="http: largest request body (1 MiB)")
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("demo", help="the whole pipeline on a bundled example kernel")
    p.set_defaults(fn=cmd_demo)

    for module in FEATURE_MODULES:
        importlib.import_module(module).register_cli(sub)

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed by argparse
        return int(exc.code or 0)
    if not getattr(args, "fn", None):
        parser.print_help()
        return EXIT_USAGE
    from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
    from mcp_server.engine.runner import RunnerError

    try:
        return int(args.fn(args) or 0)
    except UsageError as exc:
        sys.stderr.write(f"ptt: {exc}\n")
        return EXIT_USAGE
    except (EnvironmentUnavailable, RunnerError) as exc:
        sys.stderr.write(f"ptt: {exc}\n")
        return EXIT_ENV
    except KeyboardInterrupt:
        sys.stderr.write("ptt: interrupted\n")
        return 130
    except Exception as exc:
        if os.environ.get("PTT_DEBUG"):
            raise
        sys.stderr.write(
            f"ptt: internal error ({type(exc).__name__}: {exc}). This is a bug in ptt, not in your kernel; "
            "rerun with PTT_DEBUG=1 for the traceback and report it.\n"
        )
        return EXIT_ENV


if __name__ == "__main__":
    sys.exit(main())
