"""Run one Python block of the skill bundle, then compile every kernel it launched for a real GPU target.

Usage: ``TRITON_INTERPRET=1 python snippet_harness.py run block.py launches.json`` for one block; with the
interpreter off, ``python snippet_harness.py compile plan.json`` (prints the errors per block as JSON); or
``python snippet_harness.py run-and-compile jobs.json 2 300`` for many blocks, both steps (prints
script -> {"rc", "log", "errors"} as JSON).

1. The block runs as a script under the Triton interpreter (CPU tensors). Each kernel launch is recorded:
   the kernel's name and, per parameter, a tensor's dtype or a scalar's type or a constexpr's value.
2. The interpreter accepts code the compiler rejects (``break``, ``tl.exp`` on fp16, ...), so the block's
   definitions are executed again in a process that imported Triton with the interpreter off (the
   interpreter patches ``triton.language`` while it runs, and ``@triton.jit`` picks the interpreter or the
   compiler when it decorates, ``triton.language``'s own functions included) and each recorded kernel is
   compiled ahead of time for sm_90 (``triton.compile`` with a ``GPUTarget``; no GPU needed). A failure
   names the kernel.

``run-and-compile`` imports torch once and forks two children from that process: one imports Triton with
the interpreter on and forks a child per block (``run_many``), the other imports it with the interpreter
off and compiles the launches of the blocks that exited 0.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

_PTR = {
    "torch.float32": "*fp32",
    "torch.float16": "*fp16",
    "torch.bfloat16": "*bf16",
    "torch.float64": "*fp64",
    "torch.int64": "*i64",
    "torch.int32": "*i32",
    "torch.int16": "*i16",
    "torch.int8": "*i8",
    "torch.uint8": "*u8",
    "torch.bool": "*i1",
}


def _describe(value: object) -> tuple[str, str | None, object]:
    """(kind, Triton type, value): the value is what a constexpr parameter compiles with."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("ptr", _PTR[str(value.dtype)], None)
    if isinstance(value, bool):
        return ("scalar", "i1", value)
    if isinstance(value, int):
        return ("scalar", "i32" if -(2**31) <= value < 2**31 else "i64", value)
    if isinstance(value, float):
        return ("scalar", "fp32", value)
    if value is None or isinstance(value, str):
        return ("value", None, value)
    return ("value", None, repr(value))


def record_launches() -> list[tuple[str, dict[str, tuple[str, str | None, object]]]]:
    from triton.runtime.interpreter import InterpretedFunction

    launches: list[tuple[str, dict[str, tuple[str, str | None, object]]]] = []
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        params = inspect.signature(self.fn).parameters
        bound = inspect.signature(self.fn).bind_partial(*args, **{k: v for k, v in kwargs.items() if k in params})
        bound.apply_defaults()
        launches.append((self.fn.__name__, {k: _describe(v) for k, v in bound.arguments.items()}))
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    return launches


def definitions_only(path: str) -> object:
    """The block's imports, functions, classes and assignments, compiled with its own file and lines."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    namespace: dict[str, object] = {"__name__": "__snippet_definitions__", "__file__": path}
    for node in tree.body:
        if not isinstance(node, keep):
            continue
        code = compile(ast.Module(body=[node], type_ignores=[]), path, "exec")
        # An assignment that launches a kernel or needs a GPU is not a definition: skip it.
        with contextlib.suppress(Exception):
            exec(code, namespace)
    return namespace


def compile_kernels(path: str, launches: list[tuple[str, dict[str, tuple[str, str | None, object]]]]) -> list[str]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    namespace = definitions_only(path)
    errors: list[str] = []
    done: set[str] = set()
    for name, args in launches:
        key = repr((name, sorted(args.items())))
        if key in done:
            continue
        done.add(key)
        kernel = namespace.get(name)
        while kernel is not None and not isinstance(kernel, JITFunction):
            kernel = getattr(kernel, "fn", None)
        if kernel is None:
            errors.append(f"kernel {name}: not defined at the top level of the block")
            continue
        signature: dict[str, str] = {}
        constexprs: dict[str, object] = {}
        for param in kernel.params:
            kind, ty, value = args.get(param.name, ("value", None, None))
            if param.is_constexpr:
                signature[param.name] = "constexpr"
                constexprs[param.name] = value
            elif kind in ("ptr", "scalar"):
                signature[param.name] = str(ty)
            else:
                signature[param.name] = "constexpr"  # None passed for an optional argument
                constexprs[param.name] = value
        try:
            source = ASTSource(kernel, signature=signature, constexprs=constexprs)
            triton.compile(source, target=GPUTarget("cuda", 90, 32))
        except Exception as exc:  # report every kernel, not only the first
            lines = str(exc).strip().splitlines()
            errors.append(f"kernel {name} does not compile for sm_90: {lines[-1] if lines else exc!r}")
    return errors


def _exit_after(body: Callable[[], object]) -> None:
    """In a forked child: run ``body``, print its traceback if it raises, and exit 0 or 1 without running the
    parent's cleanup."""
    code = 1
    try:
        body()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run_block(job: dict[str, str]) -> None:
    """One block as ``__main__``, its output sent to the job's log and its launches written as JSON."""
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = [job["script"]]
    launches = record_launches()
    runpy.run_path(job["script"], run_name="__main__")
    with open(job["launches"], "w", encoding="utf-8") as f:
        json.dump(launches, f)


def run_many(jobs: list[dict[str, str]], parallel: int, timeout_s: float) -> dict[str, dict[str, object]]:
    """Run blocks in forked children of this process (torch and triton imported once, before forking).

    Each job is {"script", "launches", "log"}; each child runs one block as ``__main__`` with its
    output sent to ``log`` and writes the recorded launches. Returns script -> {"rc", "log"}.
    """
    import torch  # noqa: F401 - imported once here so that every child starts with it loaded
    import triton  # noqa: F401

    pending = list(jobs)
    running: dict[int, tuple[dict[str, str], float]] = {}
    results: dict[str, dict[str, object]] = {}
    while pending or running:
        while pending and len(running) < parallel:
            job = pending.pop(0)
            pid = os.fork()
            if pid == 0:  # the child: one block
                _exit_after(lambda job=job: _run_block(job))
            running[pid] = (job, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for child, (job, started) in list(running.items()):
                if time.monotonic() - started > timeout_s:
                    os.kill(child, signal.SIGKILL)
                    results[job["script"]] = {"rc": "timeout", "log": job["log"]}
            time.sleep(0.02)  # waiting for children; nothing to do meanwhile
            continue
        job, _ = running.pop(pid)
        if job["script"] not in results:
            results[job["script"]] = {"rc": os.waitstatus_to_exitcode(status), "log": job["log"]}
    return results


def _in_child(fn: Callable[[], object], interpret: bool) -> object:
    """``fn()`` in a forked child that imports Triton with TRITON_INTERPRET set to ``interpret``; its result
    comes back as JSON in a temporary file."""
    assert "triton" not in sys.modules, "Triton must be imported by the child, after TRITON_INTERPRET is set"
    fd, result_path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        pid = os.fork()
        if pid == 0:

            def step() -> None:
                os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
                import triton  # noqa: F401 - @triton.jit reads TRITON_INTERPRET as triton.language is imported

                with open(result_path, "w", encoding="utf-8") as f:
                    json.dump(fn(), f)

            _exit_after(step)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise RuntimeError(f"the {'run' if interpret else 'compile'} step exited with status {code}")
        with open(result_path, encoding="utf-8") as f:
            return json.load(f)
    finally:
        os.unlink(result_path)


def run_and_compile(jobs: list[dict[str, str]], parallel: int, timeout_s: float) -> dict[str, dict[str, object]]:
    """``run_many`` under the interpreter, then ``compile_kernels`` on the launches of every block that exited
    0, each step in a child forked from this process (torch imported once, before forking). Returns
    script -> {"rc", "log", "errors"}; "errors" is empty for a block that did not run."""
    import torch  # noqa: F401 - imported once here so that both children start with it loaded

    ran = _in_child(lambda: run_many(jobs, parallel, timeout_s), interpret=True)
    plan = {}
    for job in jobs:
        if ran[job["script"]]["rc"] == 0:
            with open(job["launches"], encoding="utf-8") as f:
                plan[job["script"]] = [(name, dict(args)) for name, args in json.load(f)]
    compiled = _in_child(
        lambda: {script: compile_kernels(script, launches) for script, launches in plan.items()}, interpret=False
    )
    return {script: {**outcome, "errors": compiled.get(script, [])} for script, outcome in ran.items()}


def main(argv: list[str]) -> int:
    if argv[0] == "run":  # run BLOCK LAUNCHES_JSON, under TRITON_INTERPRET=1
        launches = record_launches()
        runpy.run_path(argv[1], run_name="__main__")
        with open(argv[2], "w", encoding="utf-8") as f:
            json.dump(launches, f)
        return 0
    if argv[0] == "run-and-compile":  # run-and-compile JOBS_JSON PARALLEL TIMEOUT_S (sets TRITON_INTERPRET itself)
        with open(argv[1], encoding="utf-8") as f:
            jobs = json.load(f)
        print(json.dumps(run_and_compile(jobs, int(argv[2]), float(argv[3]))))
        return 0
    if argv[0] == "compile":  # compile PLAN_JSON ({block id: [path, launches]}), interpreter off
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            raise SystemExit("compile runs with the interpreter off (TRITON_INTERPRET=0)")
        with open(argv[1], encoding="utf-8") as f:
            plan = json.load(f)
        results = {
            block: compile_kernels(path, [(n, dict(a)) for n, a in launches])
            for block, (path, launches) in plan.items()
        }
        print(json.dumps(results))
        return 0
    raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
