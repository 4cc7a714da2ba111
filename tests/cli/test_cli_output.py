"""What `ptt` prints: --version, one JSON object under --json whatever happens, a description and a working
example in every command's help, labelled table columns, and docs search rendered for a terminal."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

from mcp_server.cli import build_parser, main
from mcp_server.cli.help import HELP, commands
from mcp_server.cli.render import render_compile
from mcp_server.engine.models import CompiledConfig, CompileResult, Occupancy

K = "mcp_server/examples/softmax_triton.py"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version_names_package_torch_triton_and_device(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("ptt 0.") and "torch " in lines[1] and "triton " in lines[1]
    assert lines[2].startswith("device  ")
    code, out, _ = run(capsys, "--version", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["torch"] and data["triton"] and "device" in data


@pytest.mark.parametrize(
    ("argv", "code", "kind"),
    [
        (["validate", "--json"], 2, "usage"),  # argparse: missing positionals
        (["compile", f"{K}:softmax_kernel", "--num-warps", "many", "--json"], 2, "usage"),  # argparse: bad int
        (["compile", "no_such_file.py:k", "--json"], 2, "usage"),  # the engine's UsageError
        (["--json"], 2, "usage"),  # no command
        (["docs", "search", "x", "-k", "0", "--json"], 2, "usage"),  # a bound the MCP face checks too
    ],
)
def test_json_failures_are_exactly_one_object_on_stdout(capsys, argv, code, kind):
    got, out, err = run(capsys, *argv)
    assert got == code
    data = json.loads(out)  # the whole of stdout is one JSON document
    assert data == {"ok": False, "error": {"kind": kind, "message": data["error"]["message"], "exit_code": code}}
    assert data["error"]["message"] and data["error"]["message"].split(":")[-1].strip() in err


def test_environment_errors_under_json(capsys, monkeypatch):
    from mcp_server.engine.errors import EnvironmentUnavailable

    def no_gpu(args: argparse.Namespace) -> int:
        raise EnvironmentUnavailable("bench needs a CUDA GPU; run it on a GPU machine")

    parser = build_parser()
    monkeypatch.setattr("mcp_server.cli.build_parser", lambda: parser)
    for action in parser._subparsers._group_actions:
        action.choices["bench"].set_defaults(fn=no_gpu)
    code, out, err = run(capsys, "bench", f"{K}:softmax", "--json")
    assert code == 3 and json.loads(out)["error"] == {
        "kind": "environment",
        "message": "bench needs a CUDA GPU; run it on a GPU machine",
        "exit_code": 3,
    }
    assert "needs a CUDA GPU" in err


def test_every_command_has_a_description_and_examples_that_parse():
    parser = build_parser()
    seen = set()
    for path, sub in commands(parser):
        seen.add(path)
        assert sub.description and len(sub.description) > 30, path
        assert sub.epilog and "ptt " in sub.epilog, path
        examples = [line.strip() for line in sub.epilog.splitlines() if line.strip().startswith("ptt ")]
        assert examples, path
        for example in examples:
            argv = shlex.split(example, comments=True)[1:]
            assert argv[: len(path)] == list(path), example
            build_parser().parse_args(argv)  # a usage error would raise SystemExit
    assert set(HELP) <= seen, set(HELP) - seen  # no entry for a command that is gone


def test_help_shows_description_and_example(capsys):
    code, out, _ = run(capsys, "validate", "--help")
    assert code == 0 and "Check a candidate against a PyTorch reference" in out and "example" in out
    assert "ptt validate mcp_server/examples/softmax_problem.py:reference" in out


def test_compile_table_columns_are_all_labelled():
    occupancy = Occupancy(blocks_per_sm=8, warps_per_sm=32, max_warps_per_sm=64, fraction=0.5, limiter="registers")
    cfg = CompiledConfig(
        config_index=0,
        config={"BLOCK": 128},
        num_warps=4,
        num_stages=3,
        ok=True,
        compile_s=0.5,
        registers=40,
        spill_stores=0,
        spill_loads=0,
        shared_bytes=1024,
        occupancy=occupancy,
    )
    result = CompileResult(
        ok=True,
        device="cpu-interpreter",
        kernel="k.py:kernel",
        target="cuda:90",
        autotuned=True,
        configs=[cfg],
        seconds=1.0,
    )
    lines = render_compile(result).splitlines()
    header, rule, row = lines[1], lines[2], lines[3]
    columns = [len(dashes) for dashes in rule.split("  ")]
    labels, pos = [], 0
    for width in columns:
        labels.append(header[pos : pos + width].strip())
        pos += width + 2
    assert all(labels), labels
    assert "compile s" in labels and "result" in labels and "s" not in labels
    assert row.split()[-1] == "ok"


def test_docs_search_renders_markdown_in_text_and_stays_raw_in_json(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PTT_TRITON_DOCS_DIR", str(tmp_path / "docs"))
    code, out, _ = run(capsys, "docs", "search", "tl.load", "mask", "-k", "3")
    assert code == 0 and "1. " in out
    assert "```" not in out and "**" not in out and "\033[" not in out  # captured stdout is not a terminal
    assert "  │ " in out  # the signature's code block on its own lines
    code, out, _ = run(capsys, "docs", "search", "tl.load", "mask", "-k", "3", "--json")
    hits = json.loads(out)["hits"]
    assert code == 0 and any("```" in h["snippet"] or "**" in h["snippet"] for h in hits)


def test_bench_prints_what_its_run_could_not_check():
    from mcp_server.cli.render import render_bench
    from mcp_server.engine.models import BenchResult

    result = BenchResult(
        ok=True, device="d", findings=[], candidate="c.py:f", reference="r.py:g", mode="cuda-graph", l2_flush=True,
        input_sets=2, reps=10, rows=[], notes=["no timed output was checked: the problem writes its inputs"],
    )  # fmt: skip
    assert "note: no timed output was checked: the problem writes its inputs" in render_bench(result).splitlines()
    result.notes = []
    assert "note:" not in render_bench(result)


def test_bench_marks_a_ratio_its_timing_rounds_call_a_tie():
    from mcp_server.cli.render import render_bench
    from mcp_server.engine.models import BenchResult, BenchRow, ProviderTiming

    def timing(provider: str, ms: float) -> ProviderTiming:
        return ProviderTiming(provider=provider, median_ms=ms, p20_ms=ms, p80_ms=ms, min_ms=ms, spread=0, samples=5)

    def row(case: str, standing: str) -> BenchRow:
        return BenchRow(
            case=case, timings=[timing("candidate", 1.0), timing("eager", 2.0), timing("compile", 0.99)], bytes=1,
            flops=0, model="test", speedup_vs_eager=2.0, speedup_vs_compile=0.99,
            standing={"eager": "faster", "compile": standing},
        )  # fmt: skip

    result = BenchResult(
        ok=True, device="d", findings=[], candidate="c.py:f", reference="r.py:g", mode="events", l2_flush=True,
        input_sets=2, reps=10, rows=[row("tied", "tie"), row("lost", "slower")],
    )  # fmt: skip
    lines = render_bench(result).splitlines()
    tied = next(line for line in lines if line.lstrip().startswith("tied"))
    lost = next(line for line in lines if line.lstrip().startswith("lost"))
    assert "0.99× tie" in tied and "2.00× tie" not in tied
    assert "0.99×" in lost and "tie" not in lost


def test_bench_shows_each_baseline_its_time_and_the_ratio_to_it():
    from mcp_server.cli.render import render_bench
    from mcp_server.engine.models import BenchResult, BenchRow, ProviderTiming

    def timing(provider: str, ms: float) -> ProviderTiming:
        return ProviderTiming(provider=provider, median_ms=ms, p20_ms=ms, p80_ms=ms, min_ms=ms, spread=0, samples=5)

    row = BenchRow(
        case="4096", timings=[timing("candidate", 1.0), timing("eager", 2.0), timing("compile", 1.5),
                              timing("liger", 1.25)],
        bytes=1, flops=0, model="test", speedup_vs_eager=2.0, speedup_vs_compile=1.5,
        speedup_vs_baselines={"liger": 1.25}, standing={"liger": "faster"},
    )  # fmt: skip
    result = BenchResult(
        ok=True, device="d", findings=[], candidate="c.py:f", reference="r.py:g", mode="events", l2_flush=True,
        input_sets=2, reps=10, rows=[row], baselines={"liger": "peer.py:liger"},
    )  # fmt: skip
    lines = render_bench(result).splitlines()
    header = next(line for line in lines if line.startswith("case"))
    values = next(line for line in lines if line.startswith("4096")).split()
    assert header.split() == [
        "case", "Triton", "ms", "p20–p80", "eager", "ms", "compile", "ms", "liger", "ms", "vs", "eager", "vs",
        "compile", "vs", "liger", "GB/s", "TFLOP/s", "of", "roofline",
    ]  # fmt: skip
    assert values[:8] == ["4096", "1.0000", "1.0000–1.0000", "2.0000", "1.5000", "1.2500", "2.00×", "1.50×"]
    assert values[8] == "1.25×"
