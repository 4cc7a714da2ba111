"""Pairs: finding (problem, solution) files, and judging one pair — the unit every backend runs.

Layouts accepted (KernelBench's):

- ``PROBLEMS_DIR/<name>.py`` (``Model``, ``get_inputs``, ``get_init_inputs``) and ``SOLUTIONS_DIR/<name>.py``
  (``ModelNew``), also in sub-folders (``level1/19_ReLU.py`` ↔ ``level1/19_ReLU.py`` or a flat ``19_ReLU.py``);
- KernelBench's generated samples: ``level_<L>_problem_<N>_sample_<S>_kernel.py`` anywhere under
  SOLUTIONS_DIR, for the problem ``level<L>/<N>_*.py`` (the lowest sample number wins).

:func:`evaluate_pair` never imports user code here: validation and timing run in the runner's children.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mcp_server.engine.device import probe
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.evaluate.models import EvalSettings, PairResult, PairSpec
from mcp_server.engine.pyast import parse_python
from mcp_server.engine.runner import Runner, RunnerError
from mcp_server.engine.specs import looked_up, parse_spec

_SAMPLE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_LEVEL = re.compile(r"level_?(\d+)$")
_PROBLEM_ID = re.compile(r"^(\d+)_")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _skipped(rel: Path) -> bool:
    return any(part.startswith((".", "_")) for part in rel.parts)


def _is_problem(path: Path) -> bool:
    """A file defining ``Model`` at the top level (or one that does not parse: judged as an error later)."""
    try:
        tree = parse_python(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return True
    return any(isinstance(node, ast.ClassDef) and node.name == "Model" for node in tree.body)


def _readable(path: Path) -> bool:
    """A regular file (not a folder or a pipe named ``*.py``) this process may read."""
    try:
        return looked_up(path, "", "")[1] == "file" and os.access(path, os.R_OK)
    except UsageError:
        return False


def _named(paths: list[Path], root: Path) -> str:
    return ", ".join(str(p.relative_to(root)) for p in paths[:5]) + (" …" if len(paths) > 5 else "")


def _replay(problem: Path, solution: Path, settings: EvalSettings, seed: int) -> str:
    """The `ptt validate` command that runs this pair's validation again on the same inputs."""
    parts = ["ptt validate", shlex.quote(f"{problem}:Model"), shlex.quote(f"{solution}:ModelNew"), f"--seed {seed}"]
    if settings.seeds != EvalSettings.model_fields["seeds"].default:
        parts.append(f"--seeds {settings.seeds}")
    if not settings.derive_shapes:
        parts.append("--no-derive")
    parts += [f"--allow-torch-op {shlex.quote(op)}" for op in settings.allow_torch_ops]
    return " ".join(parts)


def eval_folders(problems_dir: str | Path, solutions_dir: str | Path) -> tuple[Path, Path]:
    """The two folders, resolved; a UsageError naming the fix for either that is not a folder."""
    problems, problems_kind = looked_up(Path(problems_dir), "PROBLEMS_DIR", "Pass a folder of problem files.")
    solutions, solutions_kind = looked_up(Path(solutions_dir), "SOLUTIONS_DIR", "Pass a folder of solutions.")
    if problems_kind == "missing":
        raise UsageError(f"PROBLEMS_DIR {problems} does not exist. Pass a folder of KernelBench-style problem files.")
    if problems_kind != "dir":
        raise UsageError(f"PROBLEMS_DIR {problems} is not a folder of KernelBench-style problem files.")
    if solutions_kind == "missing":
        raise UsageError(f"SOLUTIONS_DIR {solutions} does not exist: make it (even empty, to see what is missing).")
    if solutions_kind != "dir":
        raise UsageError(f"SOLUTIONS_DIR {solutions} is not a folder (make it, even empty, to see what is missing).")
    return problems, solutions


def discover_pairs(
    problems_dir: Path, solutions_dir: Path, only: list[str] | None = None
) -> tuple[list[PairSpec], list[str]]:
    """Every problem under ``problems_dir`` with its solution (or None); and notes on what was skipped."""
    problems_dir, solutions_dir = eval_folders(problems_dir, solutions_dir)
    notes: list[str] = []
    found = sorted(p for p in problems_dir.rglob("*.py") if not _skipped(p.relative_to(problems_dir)))
    files = [p for p in found if _readable(p)]
    unread = [p for p in found if p not in files]
    if unread:
        notes.append(
            f"{len(unread)} path(s) under PROBLEMS_DIR named *.py are folders, pipes or files this process cannot "
            f"read, and were skipped: {_named(unread, problems_dir)}"
        )
    not_problems = [p for p in files if not _is_problem(p)]
    if not_problems:
        notes.append(
            f"{len(not_problems)} file(s) under PROBLEMS_DIR define no `Model` and were skipped: "
            f"{_named(not_problems, problems_dir)}"
        )
    problems = [p for p in files if p not in not_problems]
    if not problems:
        raise UsageError(f"No problem files (defining `class Model`) under {problems_dir}.")

    samples: dict[tuple[int, int], tuple[int, Path]] = {}
    for path in solutions_dir.rglob("level_*_problem_*_sample_*_kernel.py"):
        m = _SAMPLE.search(path.name)
        if m and _readable(path):
            key = (int(m.group(1)), int(m.group(2)))
            if key not in samples or int(m.group(3)) < samples[key][0]:
                samples[key] = (int(m.group(3)), path)

    pairs = []
    for path in problems:
        rel = path.relative_to(problems_dir)
        name = rel.with_suffix("").as_posix()
        if only and name not in only and rel.stem not in only:
            continue
        solution = None
        for guess in (solutions_dir / rel, solutions_dir / rel.name):
            if _readable(guess):
                solution = guess
                break
        if solution is None:
            level = _LEVEL.search(rel.parent.name) if rel.parent.name else None
            pid = _PROBLEM_ID.match(rel.stem)
            if level and pid:
                hit = samples.get((int(level.group(1)), int(pid.group(1))))
                solution = hit[1] if hit else None
        pairs.append(
            PairSpec(
                name=name,
                problem=str(path),
                solution=str(solution) if solution else None,
                problem_sha=sha(path),
                solution_sha=sha(solution) if solution else None,
            )
        )
    if only:
        found = {p.name for p in pairs} | {Path(p.name).name for p in pairs}
        unknown = [o for o in only if o not in found]
        if unknown:
            raise UsageError(f"--only names no problem: {', '.join(unknown)}")
    return pairs, notes


def with_sources(pair: PairSpec) -> PairSpec:
    """The pair with its files' text attached, for a worker that may not see this file system."""
    return pair.model_copy(
        update={
            "problem_source": Path(pair.problem).read_text(encoding="utf-8"),
            "solution_source": Path(pair.solution).read_text(encoding="utf-8") if pair.solution else None,
        }
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _local_files(pair: PairSpec) -> tuple[Path, Path | None, Path | None]:
    """Paths to judge: the originals when this machine sees them unchanged, else copies of the shipped text."""
    problem, solution = Path(pair.problem), Path(pair.solution) if pair.solution else None
    same = problem.is_file() and sha(problem) == pair.problem_sha
    if solution is not None:
        same = same and solution.is_file() and sha(solution) == pair.solution_sha
    if same or pair.problem_source is None:
        return problem, solution, None
    tmp = Path(tempfile.mkdtemp(prefix="ptt-eval-pair-"))
    (tmp / "problem").mkdir()
    problem = tmp / "problem" / Path(pair.problem).name
    problem.write_text(pair.problem_source, encoding="utf-8")
    if pair.solution is not None and pair.solution_source is not None:
        (tmp / "solution").mkdir()
        solution = tmp / "solution" / Path(pair.solution).name
        solution.write_text(pair.solution_source, encoding="utf-8")
    return problem, solution, tmp


def evaluate_pair(
    pair: PairSpec, settings: EvalSettings, runner: Runner | None, *, worker: str | None = None, settings_key: str = ""
) -> PairResult:
    """Validate the solution against the problem, then (correct, on a GPU) time it against eager and
    torch.compile. Every outcome is a PairResult; only a failure of this machine raises."""
    started = time.perf_counter()
    result = PairResult(
        name=pair.name,
        status="error",
        correct=False,
        worker=worker,
        problem_sha=pair.problem_sha,
        solution_sha=pair.solution_sha,
        settings_key=settings_key,
    )

    def done(**update: object) -> PairResult:
        out = result.model_copy(update=update)
        out.seconds = round(time.perf_counter() - started, 3)
        out.finished_at = _now()
        return out

    if pair.solution is None:
        return done(status="missing", summary="no solution file")
    if runner is None:
        raise ValueError("evaluate_pair needs a runner for a pair with a solution")
    problem, solution, tmp = _local_files(pair)
    try:
        try:
            parse_spec(str(problem), role="problem", defaults=("Model",))
        except UsageError as exc:
            return done(status="error", summary=f"the problem cannot be used: {exc}")
        try:
            parse_spec(str(solution), role="solution", defaults=("ModelNew",))
        except UsageError as exc:
            return done(status="failed", failure_kinds=["load_error"], summary=str(exc))
        assert solution is not None
        return _judge(problem, solution, settings, runner, result, done)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _judge(
    problem: Path,
    solution: Path,
    settings: EvalSettings,
    runner: Runner,
    result: PairResult,
    done: Callable[..., PairResult],
) -> PairResult:
    from mcp_server.engine.bench import bench, honest_ms, validation_checks
    from mcp_server.engine.validate import validate

    device = probe(runner)
    result.device = device.device
    t0 = time.perf_counter()
    try:
        verdict = validate(
            f"{problem}:Model",
            f"{solution}:ModelNew",
            seeds=settings.seeds,
            derive_shapes=settings.derive_shapes,
            timeout_s=settings.timeout_s,
            allow_torch_ops=settings.allow_torch_ops,
            runner=runner,
            cwd=problem.parent,
        )
    except UsageError as exc:
        return done(status="error", summary=f"could not validate: {exc}", validate_s=_since(t0))
    except (EnvironmentUnavailable, RunnerError) as exc:
        return done(status="error", summary=f"this machine could not run the validation: {exc}", validate_s=_since(t0))
    validate_s = _since(t0)
    if not verdict.ok:
        kinds = sorted({f.kind.value for f in verdict.errors})
        # The seeds were drawn for this run: say which, so `ptt validate --seed` can give the same inputs again.
        summary = f"{verdict.summary}; these inputs again: {_replay(problem, solution, settings, verdict.seeds[0])}"
        return done(status="failed", failure_kinds=kinds, summary=summary, validate_s=validate_s)
    if device.interpreter or not settings.bench:
        note = "not measured: no GPU (Triton interpreter)" if device.interpreter else "not timed (--no-bench)"
        state = "not measured" if device.interpreter else "not timed"
        return done(
            status="passed",
            correct=True,
            summary=verdict.summary,
            validate_s=validate_s,
            timing=state,
            timing_note=note,
        )

    t1 = time.perf_counter()
    passed = {"status": "passed", "correct": True, "summary": verdict.summary, "validate_s": validate_s}
    try:
        timed = bench(
            f"{solution}:ModelNew",
            f"{problem}:Model",
            reps=settings.reps,
            validate_first=False,
            **validation_checks(verdict),
            allow_torch_ops=settings.allow_torch_ops,
            timeout_s=settings.timeout_s,
            runner=runner,
            cwd=problem.parent,
        )
    except (UsageError, EnvironmentUnavailable, RunnerError) as exc:
        return done(**passed, timing="failed", timing_note=f"bench could not run: {exc}"[:500], bench_s=_since(t1))
    bench_s = _since(t1)
    flags = sorted({f.kind.value for f in timed.findings if f.severity.value == "warning"})
    if not timed.ok:
        errors = "; ".join(f.message.splitlines()[0] for f in timed.errors)[:500] or timed.summary
        return done(
            **passed, timing="failed", timing_note=f"bench failed: {errors}", bench_s=bench_s, bench_flags=flags
        )
    sums: dict[str, float] = {"candidate": 0.0, "eager": 0.0, "compile": 0.0}
    seen: dict[str, int] = dict.fromkeys(sums, 0)
    errors: list[str] = []
    for row in timed.rows:
        for t in row.timings:
            if t.provider not in sums:
                continue
            if t.error:
                errors.append(f"{t.provider}: {t.error}")
            else:
                sums[t.provider] += honest_ms(t)
                seen[t.provider] += 1
    rows = len(timed.rows)
    ms = {k: (v if seen[k] == rows and rows else None) for k, v in sums.items()}
    cand = ms["candidate"]
    note = "; ".join(errors)[:500] or None
    return done(
        **passed,
        timing="measured" if cand else "failed",
        timing_note=note,
        candidate_ms=cand,
        eager_ms=ms["eager"],
        compile_ms=ms["compile"],
        speedup_eager=ms["eager"] / cand if cand and ms["eager"] else None,
        speedup_compile=ms["compile"] / cand if cand and ms["compile"] else None,
        standing_eager=_standing(timed.rows, "eager"),
        standing_compile=_standing(timed.rows, "compile"),
        bench_flags=flags,
        bench_s=bench_s,
    )


def _standing(rows: list[Any], peer: str) -> str | None:
    """Over a problem's sizes: faster or slower when every size's paired rounds say so, else tie; None when a
    size has no paired rounds."""
    each = [row.standing.get(peer) for row in rows]
    if not each or None in each:
        return None
    return each[0] if len(set(each)) == 1 else "tie"


def _since(t: float) -> float:
    return round(time.perf_counter() - t, 3)
