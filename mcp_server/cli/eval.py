"""`ptt eval PROBLEMS_DIR SOLUTIONS_DIR`: batch evaluation over the GPU worker pool or Ray. CLI only: a batch
runs for minutes to hours, which suits a shell (whose database an agent can read) better than one tool call.

:mod:`mcp_server.engine.evaluate` judges every pair and computes the report; this module passes the
arguments and prints it. Exit codes: 0 every problem has a correct solution, 1 some do not (the report says
which), 2 misuse, 3 this machine cannot do it (e.g. --backend ray without Ray).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcp_server.cli._common import EXIT_FAILED, EXIT_OK, ProgressBar
from mcp_server.engine.errors import UsageError
from mcp_server.engine.specs import output_path


def _gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--gpus expects indices like 0,1 — got {text!r}") from None


def cmd_eval(args: argparse.Namespace) -> int:
    from mcp_server.engine.evaluate import DEFAULT_DB_NAME, EvalSettings, render_markdown, run_eval
    from mcp_server.engine.pool import DEFAULT_GPU_SLOTS, discover

    settings = EvalSettings(
        seeds=args.seeds,
        derive_shapes=not args.no_derive,
        reps=args.reps,
        timeout_s=args.timeout,
        bench=not args.no_bench,
        allow_torch_ops=tuple(dict.fromkeys(op.strip() for op in args.allow_torch_op or () if op.strip())),
    )
    db = Path(args.db) if args.db else Path(args.solutions) / DEFAULT_DB_NAME
    plot = None if args.no_plot else (args.plot or str(db.with_name(db.stem + "-fast_p.png")))
    pool = None
    if args.backend == "local":
        pool = discover(gpus=_gpus(args.gpus), cpu_slots=args.jobs, gpu_slots=args.jobs or DEFAULT_GPU_SLOTS)
    try:
        with ProgressBar() as bar:
            report = run_eval(
                args.problems,
                args.solutions,
                db=args.db,
                redo=args.redo,
                settings=settings,
                backend=args.backend,
                pool=pool,
                ray_address=args.ray_address,
                only=args.only,
                plot=plot,
                progress=bar,
            )
    finally:
        if pool is not None:
            pool.close()
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(render_markdown(report))
    if args.markdown:
        output_path(args.markdown, "--markdown").write_text(render_markdown(report), encoding="utf-8")
        sys.stderr.write(f"ptt eval: report written to {args.markdown}\n")
    return EXIT_OK if report.ok else EXIT_FAILED


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="validate and time every KernelBench-style solution against its problem (resumable; fast_p report)",
        description="Pairs PROBLEMS_DIR/<name>.py (Model, get_inputs, get_init_inputs) with SOLUTIONS_DIR/<name>.py "
        "(ModelNew) — also level folders and KernelBench's level_L_problem_N_sample_S_kernel.py — validates each "
        "solution, times the correct ones against eager PyTorch and torch.compile on a GPU, and reports the "
        "correctness rate and fast_p. Results go to a SQLite database, so a rerun resumes where it stopped.",
    )
    p.add_argument("problems", help="folder of problem files")
    p.add_argument("solutions", help="folder of solution files (matched by name)")
    p.add_argument("--db", help="results database (default SOLUTIONS_DIR/.ptt-eval.db)")
    p.add_argument("--redo", action="store_true", help="evaluate every pair again, even those already in the database")
    p.add_argument("--only", action="append", metavar="NAME", help="evaluate only this problem (repeatable)")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="local GPU pool (default) or Ray")
    p.add_argument("--ray-address", help="Ray cluster to join (default: start a local instance)")
    p.add_argument("--gpus", help="local backend: GPU indices to use, e.g. 0,1 (default all visible)")
    p.add_argument(
        "--jobs",
        type=int,
        help="validations at once per worker: without a GPU (default half the cores, at least 2), or per GPU "
        "with --no-bench (default 4); a pair that is timed has its GPU to itself",
    )
    p.add_argument("--seeds", type=int, default=3, help="random input sets per validation (default 3)")
    p.add_argument("--no-derive", action="store_true", help="do not validate derived edge shapes")
    p.add_argument("--reps", type=int, default=100, help="timed calls per provider (default 100)")
    p.add_argument("--no-bench", action="store_true", help="validate only, even on a GPU")
    p.add_argument(
        "--allow-torch-op",
        action="append",
        metavar="OP",
        help="a torch op solutions may use for real work, e.g. mm to keep cuBLAS GEMMs (repeatable)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per isolated child (default 300)")
    p.add_argument("--plot", metavar="OUT.png", help="fast_p plot (default: next to the database)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--markdown", metavar="OUT.md", help="also write the Markdown report to this file")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    p.set_defaults(fn=cmd_eval)
