"""Measure every reference kernel on the GPU and write benchmarks/results/<gpu>/NAME.json + NAME.png.

    python benchmarks/reference_kernels.py [NAME ...] [--out-dir DIR] [--cases LABEL,...] [--readme]

For each kernel, through the project's own tools (isolated children): validate every stage (forward, and
backward where the op trains) in each GPU dtype on the SPEC's cases, then bench every stage against eager
PyTorch and torch.compile on the SPEC's bench cases (forward; forward + backward where the op trains), in the
first GPU dtype (matmul and attention, whose bars name both 16-bit types: the best stage in the other one too),
then judge the kernel's bar from those numbers. `--readme` regenerates the kernel table of docs/performance.md
from the JSON files; a bar that is missed is shown with the measured ratio.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_kernels import NAMES  # noqa: E402  (after the checkout is on the path)

# The semi-Markov CRF's reference is a Python loop over 1024 time steps: torch.compile would unroll it (minutes of
# compile for no bar), and each eager call takes tens of milliseconds.
# Attention's eager baseline is SDPA itself, which torch.compile calls unchanged: no comparison, minutes of compiles.
NO_COMPILE = {"semi_markov_crf", "attention"}
# --cases: bench only the bench cases with these labels (empty: all of them).
CASES: set[str] = set()
REPS = {"semi_markov_crf": 10}
# Baselines timed as extra providers in the same runs: name in the results → "module:function" under
# reference_kernels. Attention's bar is SDPA held to its flash backend; its `reference` (eager) is SDPA's own pick.
# Liger-Kernel (reference_kernels/_liger.py) joins where it has the op and is installed.
# The semi-Markov CRF's peer is its own reference captured once and replayed as CUDA graphs (what a careful user
# builds from a Python loop of small kernels).
BASELINES = {
    "attention": {"sdpa_flash": "attention:sdpa_flash_attention"},
    "semi_markov_crf": {"cuda_graph": "semi_markov_crf:graphed_reference_semi_markov_crf"},
}
# Bounds, not peers, timed in the forward runs only: the CRF scan's latency floor (its dependency chain alone).
FLOORS = {"semi_markov_crf": {"scan_floor": "semi_markov_crf:scan_latency_floor"}}
LIGER = "liger"
PERFORMANCE = ROOT / "docs" / "performance.md"  # the kernel table lives there
START, END = "<!-- kernels:start -->", "<!-- kernels:end -->"

HARNESS = '''"""Generated for benchmarks/reference_kernels.py: {name} in {dtype}, keyword arguments passed through."""
import torch
from reference_kernels.{name} import SPEC

DTYPE = torch.{dtype}
CASES = {cases!r}
_STAGES = dict(SPEC.stages)


def _split(args):
    if args and isinstance(args[-1], dict) and "__kwargs__" in args[-1]:
        return list(args[:-1]), dict(args[-1]["__kwargs__"])
    return list(args), {{}}


def _cases(cases):
    out = {{}}
    for case in cases:
        args = list(SPEC.make_inputs(case.dims, DTYPE, "cuda"))
        kwargs = SPEC.call_kwargs(case.dims)
        out[case.label] = args + ([{{"__kwargs__": kwargs}}] if kwargs else [])
    return out


def get_test_cases():
    return _cases(SPEC.cases)


def get_bench_cases():
    return _cases([c for c in SPEC.bench_cases if not CASES or c.label in CASES])


def reference(*args):
    a, kw = _split(args)
    return SPEC.reference(*a, **kw)


def _dims(args):
    a, kw = _split(args)
    return SPEC.dims_of(*a, *kw.values())  # call_kwargs follow the inputs positionally


def bytes_moved(*args):
    return int(SPEC.bytes_moved(_dims(args), DTYPE))


def flops(*args):
    return int(SPEC.flops(_dims(args), DTYPE))
'''
STAGE_FN = """

def stage{n}(*args):
    a, kw = _split(args)
    return _STAGES[{n}](*a, **kw)
"""
BASELINE_FN = """

def {name}(*args):
    from reference_kernels.{module} import {function}

    a, kw = _split(args)
    return {function}(*a, **kw)
"""


_T0 = time.perf_counter()


def _progress(done: float, total: float | None, message: str) -> None:
    """bench's progress, printed with the seconds since the script started (a long run shows where it is)."""
    print(f"    [{time.perf_counter() - _T0:6.0f} s] {message}", flush=True)


def harness(name: str, dtype: str, folder: Path) -> Path:
    spec = importlib.import_module(f"reference_kernels.{name}").SPEC
    text = HARNESS.format(name=name, dtype=dtype, cases=sorted(CASES))
    text += "".join(STAGE_FN.format(n=n) for n in sorted(spec.stages))
    for baseline, target in kernel_baselines(name).items():
        module, function = target.split(":")
        text += BASELINE_FN.format(name=baseline, module=module, function=function)
    path = folder / f"bench_{name}_{dtype}.py"
    path.write_text(text)
    return path


def _liger_ops() -> dict[str, str]:
    from reference_kernels._liger import OPS

    return OPS


def liger_version() -> str | None:
    from reference_kernels import _liger

    return _liger.version()


def kernel_baselines(name: str, liger: str | None = "probe", backward: bool = False) -> dict[str, str]:
    """The kernel's extra baselines: label → "module:function" under reference_kernels. Liger joins when
    installed (``liger`` is its version, None when absent; "probe" asks the import); the floors only in
    forward runs (``backward`` False)."""
    from reference_kernels import _liger

    out = dict(BASELINES.get(name, {}))
    if not backward:
        out |= FLOORS.get(name, {})
    if liger == "probe":
        liger = _liger.version()
    if liger is not None and name in _liger.OPS:
        out[LIGER] = f"_liger:{_liger.OPS[name]}"
    return out


def baselines(name: str, module: Path, backward: bool = False) -> list[str]:
    """The kernel's peers and floors as bench's extra baselines (each harness function's spec; bench labels each by
    its function's name). Baselines, unlike extra candidates, have neither their torch ops counted nor their outputs
    checked: SDPA's flash backend is a torch op doing all of the work, as a peer should."""
    return [f"{module}:{baseline}" for baseline in kernel_baselines(name, backward=backward)]


def gpu_slug(device: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device.lower().replace("nvidia", "")).strip("-") or "gpu"


def cross_entropy_memory() -> dict[str, float]:
    """Peak memory of forward + backward at vocab 128k: stage 3 vs eager (the bar: ≤ 1/2)."""
    import torch

    from reference_kernels import cross_entropy as ce

    case = next(c for c in ce.SPEC.bench_cases if c.dims.get("V", 0) >= 128000)
    out = {}
    for label, fn in (("eager", ce.SPEC.reference), ("stage3", ce.SPEC.stages[max(ce.SPEC.stages)])):
        args = list(ce.SPEC.make_inputs(case.dims, torch.bfloat16, "cuda"))
        args[0].requires_grad_(True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        loss = fn(*args, **ce.SPEC.call_kwargs(case.dims))
        loss.backward()
        torch.cuda.synchronize()
        out[f"{label}_peak_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
        del args, loss
        torch.cuda.empty_cache()
    out["ratio"] = out["stage3_peak_gib"] / out["eager_peak_gib"]
    out["case"] = case.label
    return out


def _worst_row(rows: list[dict], provider: str) -> tuple[float, dict] | None:
    """The row where the candidate does worst against another provider timed in it, with its speed-up there."""
    ratios = []
    for row in rows:
        ms = {t["provider"]: t.get("median_ms") for t in row.get("timings", [])}
        if ms.get("candidate") and ms.get(provider):
            ratios.append((ms[provider] / ms["candidate"], row))
    return min(ratios, key=lambda pair: pair[0]) if ratios else None


def worst_vs(rows: list[dict], provider: str) -> float | None:
    """The smallest speed-up of the candidate over another provider timed in the same rows."""
    worst = _worst_row(rows, provider)
    return worst[0] if worst else None


def tie_note(rows: list[dict], provider: str) -> str:
    """'a tie: 0.985–1.004× over 5 rounds' when, at the row where the candidate does worst against ``provider``,
    bench's paired timing rounds disagree on which is faster; else ''."""
    worst = _worst_row(rows, provider)
    if worst is None:
        return ""
    row = worst[1]
    rounds = row.get("round_ratios", {}).get(provider)
    if row.get("standing", {}).get(provider) != "tie" or not rounds:
        return ""
    return f"a tie: {min(rounds):.3f}–{max(rounds):.3f}× over {len(rounds)} rounds"


def _rows(result: dict) -> list[dict]:
    return result.get("rows", []) if result else []


def _ratio(row: dict, key: str) -> float | None:
    return row.get(key)


def judge(name: str, spec: Any, fwd: dict, fb: dict | None, extra: dict) -> tuple[bool | None, str]:
    """The bar of each kernel, from the measured rows. Returns (met, measured figures in words)."""
    rows = _rows(fwd)
    fb_rows = _rows(fb)
    dims = {c.label: c.dims for c in spec.bench_cases}

    def pick(pred):
        return [r for r in rows if pred(dims.get(r["case"], {}))]

    def worst(rs, key):
        values = [r[key] for r in rs if r.get(key) is not None]
        return min(values) if values else None

    parts: list[str] = []
    ok = True

    def need(label: str, value: float | None, floor: float, fmt: str = "{:.3f}×", among: tuple | None = None) -> None:
        """One bar; ``among`` (rows, provider) names a tie in the timing rounds at the worst row, met or missed, for a
        bar of 1.0× (a tie is about which of two is faster)."""
        nonlocal ok
        if value is None:
            parts.append(f"{label}: not measured")
            ok = False
            return
        met = value >= floor
        ok &= met
        tie = tie_note(*among) if among and floor == 1.0 else ""
        if met:
            parts.append(f"{label} {fmt.format(value)}" + (f" (met on {tie})" if tie else ""))
        else:
            parts.append(f"{label} {fmt.format(value)} (missed{'; ' + tie if tie else ''})")

    if name == "vector_add":
        need(
            "% copy BW at ≥ 2^24",
            worst(pick(lambda d: d.get("n", d.get("N", 0)) >= 1 << 24), "pct_of_bandwidth"),
            90,
            "{:.0f} %",
        )
    elif name == "softmax":
        need(
            "% copy BW at 16384×8192",
            worst(pick(lambda d: d.get("M") == 16384 and d.get("N") == 8192), "pct_of_bandwidth"),
            90,
            "{:.0f} %",
        )
        short = pick(lambda d: d.get("N", 0) <= 131072)
        need("min vs compile (fwd)", worst(short, "speedup_vs_compile"), 1.0, among=(short, "compile"))
        parts.append(f"min fwd+bwd vs compile {worst(fb_rows, 'speedup_vs_compile') or float('nan'):.2f}×")
    elif name in ("layernorm", "rmsnorm"):
        big = max(rows, key=lambda r: r.get("bytes", 0)) if rows else {}
        need("% copy BW fwd (largest)", big.get("pct_of_bandwidth"), 90, "{:.0f} %")
        need("min fwd+bwd vs compile", worst(fb_rows, "speedup_vs_compile"), 1.0, among=(fb_rows, "compile"))
    elif name == "swiglu":
        big = max(rows, key=lambda r: r.get("bytes", 0)) if rows else {}
        need("% copy BW fwd (largest)", big.get("pct_of_bandwidth"), 90, "{:.0f} %")
        need("min fwd vs compile", worst(rows, "speedup_vs_compile"), 1.0, among=(rows, "compile"))
        parts.append(f"min fwd+bwd vs compile {worst(fb_rows, 'speedup_vs_compile') or float('nan'):.2f}×")
    elif name == "cross_entropy":
        need("min fwd vs compile", worst(rows, "speedup_vs_compile"), 1.0, among=(rows, "compile"))
        need("min fwd+bwd vs compile", worst(fb_rows, "speedup_vs_compile"), 1.0, among=(fb_rows, "compile"))
        mem = extra.get("memory")
        if mem:
            met = mem["ratio"] <= 0.5
            ok &= met
            parts.append(f"peak memory {mem['ratio']:.2f} of eager" + ("" if met else " (missed)"))
    elif name == "matmul":
        for dtype in ("float16", "bfloat16"):
            rs = _rows(extra.get(f"fwd_{dtype}")) if dtype != fwd.get("dtype") else rows
            need(f"min vs cuBLAS {dtype}", worst(rs, "speedup_vs_eager"), 0.95)
    elif name == "attention":

        def long_rows(rs: list[dict]) -> list[dict]:
            return [r for r in rs if dims.get(r["case"], {}).get("S", 0) >= 4096]

        long = long_rows(rows)
        need("min vs SDPA flash backend at seq ≥ 4096", worst_vs(long, "sdpa_flash"), 0.90)
        # What the user already has: SDPA with the backend torch picks (cuDNN on Hopper), forward and
        # forward + backward, at ≥ 1.0×, in every dtype of the bar.
        need("min vs SDPA's own pick", worst(long, "speedup_vs_eager"), 1.0, "{:.3f}×", (long, "eager"))
        if fb_rows:
            fb_long = long_rows(fb_rows)
            parts.append(f"min fwd+bwd vs flash backend {worst_vs(fb_long, 'sdpa_flash') or float('nan'):.2f}×")
            need(
                "min fwd+bwd vs SDPA's own pick", worst(fb_long, "speedup_vs_eager"), 1.0, "{:.3f}×", (fb_long, "eager")
            )
        first = fwd.get("dtype", "float16")
        for dtype in (str(d).replace("torch.", "") for d in spec.dtypes):
            if dtype != first:
                other, other_fb = (
                    long_rows(_rows(extra.get(f"fwd_{dtype}"))),
                    long_rows(_rows(extra.get(f"fwd_bwd_{dtype}"))),
                )
                need(
                    f"{dtype} min vs SDPA's own pick",
                    worst(other, "speedup_vs_eager"),
                    1.0,
                    "{:.3f}×",
                    (other, "eager"),
                )
                need(
                    f"{dtype} min fwd+bwd vs SDPA's own pick",
                    worst(other_fb, "speedup_vs_eager"),
                    1.0,
                    "{:.3f}×",
                    (other_fb, "eager"),
                )
    elif name == "semi_markov_crf":
        bar = pick(lambda d: (d.get("B"), d.get("T"), d.get("K"), d.get("C")) == (32, 1024, 32, 24))
        need("vs PyTorch at B32 T1024 K32 C24", worst(bar, "speedup_vs_eager"), 20.0)
        need("vs PyTorch as a CUDA graph", worst_vs(bar, "cuda_graph"), 1.0, "{:.1f}×")
        if fb_rows:
            fb_bar = [r for r in fb_rows if r["case"] in {b["case"] for b in bar}]
            need("fwd+bwd vs PyTorch as a CUDA graph", worst_vs(fb_bar, "cuda_graph"), 1.0, "{:.1f}×")
        floor = worst_vs(bar, "scan_floor")
        if floor:
            parts.append(f"{1 / floor:.2f}× its scan latency floor")
        if bar and bar[0].get("pct_of_bandwidth") is not None:
            parts.append(f"{bar[0]['pct_of_bandwidth']:.2f} % of its bandwidth floor")
    else:
        return None, "no bar"
    if name in _liger_ops():
        # The peer a user would otherwise pick: held to ≥ 1.0× wherever it was timed, absent otherwise.
        if worst_vs(rows, LIGER) is None and worst_vs(fb_rows, LIGER) is None:
            parts.append("Liger-Kernel not installed: not compared")
        else:
            need("min fwd vs Liger", worst_vs(rows, LIGER), 1.0, among=(rows, LIGER))
            if fb_rows:
                need("min fwd+bwd vs Liger", worst_vs(fb_rows, LIGER), 1.0, among=(fb_rows, LIGER))
    return ok, "; ".join(parts)


def _forward(
    name: str,
    spec: Any,
    report: dict,
    out_dir: Path,
    runner: Any,
    tmp: Path,
    dtypes: list[str],
    validate: Any,
    bench: Any,
) -> None:
    # The GPU tests (pytest -m gpu tests/reference_kernels) check every stage in every dtype; here the best
    # stage is validated again, forward and backward, on the SPEC's cases before its figures are recorded.
    module = harness(name, dtypes[0], tmp)
    stage = max(spec.stages)
    result = validate(
        f"{module}:reference",
        f"{module}:stage{stage}",
        seeds=1,
        derive_shapes=False,
        backward=spec.has_backward,
        runner=runner,
        timeout_s=900,
    )
    report["validation"][f"{dtypes[0]} stage{stage}"] = {
        "ok": result.ok,
        "summary": result.summary,
        "errors": [f.message[:300] for f in result.errors],
    }
    elapsed = time.perf_counter() - _T0
    print(f"  validate {name} {dtypes[0]} stage {stage}: {result.summary} ({elapsed:.0f} s)", flush=True)
    best = max(spec.stages)
    extra = {f"stage{s}": f"{module}:stage{s}" for s in spec.stages if s != best}
    fwd = bench(
        f"{module}:stage{best}",
        f"{module}:reference",
        extra_candidates=extra,
        extra_baselines=baselines(name, module),
        validate_first=False,
        reps=REPS.get(name, 50),
        compile_baseline=name not in NO_COMPILE,
        runner=runner,
        progress=_progress,
        plot=str(out_dir / f"{name}.png"),
        timeout_s=1200,
    )
    report["fwd"] = json.loads(fwd.model_dump_json()) | {"dtype": dtypes[0]}


def run_kernel(name: str, out_dir: Path, runner: Any, tmp: Path, reuse_forward: bool = False) -> dict:
    spec = importlib.import_module(f"reference_kernels.{name}").SPEC
    report: dict[str, Any] = {
        "kernel": name,
        "bar": spec.bar,
        "stages": sorted(spec.stages),
        "backward": spec.has_backward,
        "validation": {},
    }
    if name in _liger_ops():
        report["liger"] = liger_version()  # None: not installed, so not compared
    started = time.perf_counter()
    dtypes = [str(d).replace("torch.", "") for d in spec.dtypes]
    previous = out_dir / f"{name}.json"
    if reuse_forward and previous.exists():
        # Keep the recorded validation and forward figures; measure the rest again.
        report = json.loads(previous.read_text())
        return _finish(name, spec, report, out_dir, runner, tmp, dtypes, started, forward_done=True)
    return _finish(name, spec, report, out_dir, runner, tmp, dtypes, started, forward_done=False)


def _finish(
    name: str,
    spec: Any,
    report: dict,
    out_dir: Path,
    runner: Any,
    tmp: Path,
    dtypes: list[str],
    started: float,
    forward_done: bool,
) -> dict:
    from mcp_server.engine.bench import bench
    from mcp_server.engine.validate import validate

    if not forward_done:
        _forward(name, spec, report, out_dir, runner, tmp, dtypes, validate, bench)
        # Kept as soon as it exists: a run stopped in the forward + backward part resumes with --reuse-forward.
        (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1))
        print(f"  {name}: forward measured ({time.perf_counter() - started:.0f} s)", flush=True)
    module = harness(name, dtypes[0], tmp)
    best = max(spec.stages)
    grads = list(spec.grad_inputs) or None

    def best_stage(harnessed: Path, backward: bool, plot: str | None = None) -> dict:
        """The best stage benched against the kernel's peers, as JSON."""
        result = bench(
            f"{harnessed}:stage{best}",
            f"{harnessed}:reference",
            extra_baselines=baselines(name, harnessed, backward=backward) or None,
            validate_first=False,
            reps=REPS.get(name, 50),
            compile_baseline=name not in NO_COMPILE,
            backward=backward,
            grad_inputs=grads if backward else None,
            runner=runner,
            progress=_progress,
            plot=plot,
            timeout_s=1200,
        )
        return json.loads(result.model_dump_json())

    if spec.has_backward:
        report["fwd_bwd"] = best_stage(module, backward=True, plot=str(out_dir / f"{name}_fwd_bwd.png"))
    extras: dict[str, Any] = {}
    if name in ("matmul", "attention"):
        # Their bars hold in every dtype: the best stage in the others, against the same peers (forward + backward
        # too where the op trains).
        for dtype in dtypes[1:]:
            module_d = harness(name, dtype, tmp)
            for backward in (False, True) if spec.has_backward else (False,):
                extras[f"{'fwd_bwd' if backward else 'fwd'}_{dtype}"] = best_stage(module_d, backward)
    if name == "cross_entropy":
        extras["memory"] = cross_entropy_memory()
    report["extra"] = extras
    met, words = judge(name, spec, report["fwd"], report.get("fwd_bwd"), extras)
    report["bar_met"], report["measured"] = met, words
    report["device"] = report["fwd"]["device"]
    report["seconds"] = round(time.perf_counter() - started, 1)
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1))
    print(f"{name}: {'MET' if met else 'MISSED'} — {words} ({report['seconds']} s)", flush=True)
    return report


def readme_table(results_dir: Path) -> str:
    lines = ["| kernel | stages | passes | bar | measured | met |", "|---|---|---|---|---|---|"]
    device = ""
    for name in NAMES:
        path = results_dir / f"{name}.json"
        elsewhere = ""
        if not path.exists():
            # A kernel benched on another card only: its row says which.
            others = sorted(results_dir.parent.glob(f"*/{name}.json"), key=lambda p: p.stat().st_mtime)
            if not others:
                lines.append(f"| {name} | | | | no full bench on record (see below) | |")
                continue
            path = others[-1]
        r = json.loads(path.read_text())
        if path.parent == results_dir:
            device = r.get("device", device)
        else:
            where_else = path.parent.relative_to(ROOT) if path.parent.is_relative_to(ROOT) else path.parent
            elsewhere = f" (on {r.get('device', '?')}, [{path.parent.name}](../{where_else}))"
        spec = importlib.import_module(f"reference_kernels.{name}").SPEC
        r["bar_met"], r["measured"] = judge(name, spec, r["fwd"], r.get("fwd_bwd"), r.get("extra") or {})
        bad = [k for k, v in r.get("validation", {}).items() if not v["ok"]]
        if bad:
            r["bar_met"], r["measured"] = False, f"validation failed ({', '.join(bad)}); " + r["measured"]
        lines.append(
            f"| [{name}](../reference_kernels/{name}.py) | {', '.join(map(str, r['stages']))} | "
            f"{'fwd + bwd' if r['backward'] else 'fwd'} | {spec.bar} | {r['measured']}{elsewhere} | "
            f"{'yes' if r['bar_met'] else '**no**'} |"
        )
    where = results_dir.relative_to(ROOT) if results_dir.is_relative_to(ROOT) else results_dir
    head = (
        f"Measured on {device} ([{where}](../{where})), one bench run per kernel; a row's ratios are from its run.\n\n"
    )
    return head + "\n".join(lines)


def write_readme(results_dir: Path) -> None:
    text = PERFORMANCE.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"docs/performance.md lacks the {START} … {END} markers")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    PERFORMANCE.write_text(f"{before}{START}\n{readme_table(results_dir)}\n{END}{after}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out-dir")
    parser.add_argument(
        "--readme", action="store_true", help="only regenerate docs/performance.md's kernel table from the JSON files"
    )
    parser.add_argument(
        "--reuse-forward",
        action="store_true",
        help="keep the validation and forward figures already in --out-dir; measure the rest",
    )
    parser.add_argument("--cases", help="comma-separated bench-case labels to run (default: every bench case)")
    args = parser.parse_args()
    if args.cases:
        CASES.update(label.strip() for label in args.cases.split(","))
    if args.readme:
        write_readme(Path(args.out_dir).resolve() if args.out_dir else _latest_results())
        return 0
    from mcp_server.engine.device import probe
    from mcp_server.engine.runner import Runner

    with Runner() as runner, tempfile.TemporaryDirectory() as tmp:
        device = probe(runner)
        out_dir = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "results" / gpu_slug(device.device)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in args.names or NAMES:
            try:
                run_kernel(name, out_dir, runner, Path(tmp), reuse_forward=args.reuse_forward)
            except Exception as exc:
                print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
    return 0


def _latest_results() -> Path:
    folders = sorted((ROOT / "benchmarks" / "results").glob("*/"), key=lambda p: p.stat().st_mtime)
    with_kernels = [f for f in folders if any((f / f"{n}.json").exists() for n in NAMES)]
    if not with_kernels:
        raise SystemExit("no results yet: run benchmarks/reference_kernels.py on a GPU first")
    return with_kernels[-1]


if __name__ == "__main__":
    sys.exit(main())
