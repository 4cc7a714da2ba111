"""The `ptt` CLI: exit codes 0/1/2, --json, readable tables, no tracebacks of ours."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HAS_GPU = torch.cuda.is_available()

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "validate"
EVAL = ROOT / "tests" / "fixtures" / "eval"


class Proc:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def ptt(capsys):
    """Run `ptt` in this process (one shared runner for the whole session) and capture its output."""
    from mcp_server.cli import main

    def call(*args: str) -> Proc:
        code = main(list(args))
        out = capsys.readouterr()
        return Proc(code, out.out, out.err)

    return call


@pytest.mark.slow
def test_the_installed_entry_point_runs_as_its_own_process():
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_server.cli", "validate", "nope.py:f", "also_nope.py:g"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_validate_prints_a_table_and_exits_0_for_a_correct_kernel(ptt):
    proc = ptt("validate", f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate")
    assert proc.returncode == 0, proc.stderr
    assert "PASS" in proc.stdout and "max abs err" in proc.stdout
    assert ("Triton interpreter" in proc.stdout) is (not HAS_GPU)  # the banner, only without a GPU
    assert ("cannot show:" in proc.stdout) is (not HAS_GPU)  # and what the interpreter cannot show


def test_validate_exits_1_for_a_failing_kernel_and_json_carries_the_findings(ptt):
    proc = ptt("validate", f"{FX}/add_problem.py:reference", f"{FX}/add_unwritten.py:candidate", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["ok"] is False and (data["device"] == "cpu-interpreter") is (not HAS_GPU)
    assert "uninitialized_output" in {f["kind"] for f in data["findings"]}


def test_a_failing_run_names_the_seed_that_replays_its_inputs(ptt):
    # Seeds are drawn afresh per run; a failure says how to get the same inputs again, and --seed does.
    pair = (f"{FX}/add_problem.py:reference", f"{FX}/add_unwritten.py:candidate")
    failed = ptt("validate", *pair)
    assert failed.returncode == 1
    seed = int(re.search(r"^replay +the same inputs with --seed (\d+)$", failed.stdout, re.M).group(1))
    replayed = json.loads(ptt("validate", *pair, "--seed", str(seed), "--json").stdout)
    assert replayed["seeds"] == [seed, seed + 1, seed + 2]
    assert json.loads(ptt("validate", *pair, "--json").stdout)["seeds"][0] != seed
    passed = ptt("validate", f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate")
    assert passed.returncode == 0 and "--seed" not in passed.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["validate", "nope.py:f", f"{FX}/add_good.py:candidate"], "does not exist"),
        (["validate", f"{FX}/add_problem.py:reference", f"{FX}/syntax_error.py:candidate"], "syntax error"),
        (["validate", f"{FX}/add_problem.py:reference"], "candidate"),
        (  # KernelBench files the other way round: the hint names the right command
            ["bench", f"{EVAL}/problems/1_add.py", "--reference", f"{EVAL}/solutions/1_add.py"],
            f"`ptt bench {EVAL}/solutions/1_add.py --reference {EVAL}/problems/1_add.py`",
        ),
        (
            ["compile", f"{ROOT}/tests/fixtures/compile/kernels.py:launcher", "--signature", "*fp32"],
            "not a @triton.jit",
        ),
        (["validate", f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate", "--tol", "bf16=x"], "--tol"),
        (["validate", f"{FX}/add_problem.py:reference", f"{FX}/add_good.py:candidate", "--seed", "-1"], "--seed"),
        (["bench", f"{FX}/add_good.py:candidate", "--baseline", "nowhere.py:fn"], "does not exist"),
        (
            [
                "bench",
                f"{FX}/add_good.py:candidate",
                "--baseline",
                f"{FX}/add_good.py",
                "--baseline",
                f"{FX}/add_good.py",
            ],
            "baseline",
        ),
    ],
)
def test_bad_usage_exits_2_with_a_message_and_no_traceback(ptt, args, words):
    proc = ptt(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr


def _commands(parser, path=()):
    """Every command and subcommand of ``ptt``, as the words that name it."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name)
                yield from _commands(sub, (*path, name))


def test_an_unknown_option_of_a_command_prints_that_commands_usage_and_exits_2(ptt):
    from mcp_server.cli import build_parser

    proc = ptt("validate", "ref.py:ref", "cand.py:cand", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: ptt validate [-h]")
    assert "unrecognized arguments: --bogus (`ptt validate --help` lists its options)" in proc.stderr
    commands = list(_commands(build_parser()))
    assert ("docs", "search") in commands and len(commands) > 12
    for words in commands:
        proc = ptt(*words, "--bogus")
        assert proc.returncode == 2, words
        assert proc.stderr.startswith(f"usage: ptt {' '.join(words)} "), (words, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_a_file_that_is_not_source_text_is_named_without_a_line_that_does_not_exist(ptt, tmp_path):
    # Null bytes stop the parser before any line: the message names the file and the fix, not "line None".
    bad = tmp_path / "kernel.py"
    bad.write_bytes(b"\x00\x01binary")
    for args in (["validate", f"{bad}:f", f"{FX}/add_good.py:candidate"], ["audit", str(bad)]):
        proc = ptt(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "cannot be read as Python source" in proc.stderr and "None" not in proc.stderr, proc.stderr


def test_a_file_not_named_py_is_refused_before_any_job_even_where_it_parses(ptt, tmp_path):
    # Valid Python, but no job could import it (Python loads modules from .py files only): a usage error naming
    # the fix, for every command that takes a file, not a load failure reported as the kernel's.
    source = (FX / "add_good.py").read_text()
    txt = tmp_path / "add_good.txt"
    txt.write_text(source)
    for args in (
        ["validate", f"{FX}/add_problem.py:reference", f"{txt}:candidate"],
        ["validate", f"{txt}:candidate", f"{FX}/add_good.py:candidate"],
        ["compile", f"{txt}:_add_kernel", "--signature", "*fp32, *fp32, *fp32, i32", "--constexpr", "BLOCK=256"],
        ["audit", str(txt)],
        ["audit", f"{txt}:candidate"],
    ):
        proc = ptt(*args)
        assert proc.returncode == 2, (args, proc.stdout[-500:], proc.stderr[-500:])
        assert "does not end in .py" in proc.stderr and "Rename it to .py" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    # The twin: the same text in a .py file passes the file checks and is judged.
    twin = tmp_path / "add_good.py"
    twin.write_text(source)
    proc = ptt("validate", f"{FX}/add_problem.py:reference", f"{twin}:candidate")
    assert proc.returncode == 0, proc.stdout[-1500:]


def test_compile_prints_the_resource_table(ptt):
    proc = ptt(
        "compile",
        f"{ROOT}/tests/fixtures/compile/kernels.py:tuned_scale_kernel",
        "--signature",
        "*fp32, *fp32, i32, fp32",
    )
    assert proc.returncode == 0, proc.stderr
    assert "regs" in proc.stdout and "occupancy" in proc.stdout and "BLOCK=4096" in proc.stdout


def test_device_reports_the_gpu_or_the_interpreter(ptt):
    proc = ptt("device", "--json")
    assert proc.returncode == 0
    info = json.loads(proc.stdout)
    assert info["interpreter"] is (not HAS_GPU)
    assert (info["device"] == "cpu-interpreter") is (not HAS_GPU)


@pytest.mark.skipif(HAS_GPU, reason="checks the refusal on a machine without a GPU")
def test_bench_without_a_gpu_exits_3_with_the_reason(ptt):
    proc = ptt("bench", f"{FX}/add_good.py:candidate", "--reference", f"{FX}/add_problem.py:reference")
    assert proc.returncode == 3
    assert "needs a CUDA GPU" in proc.stderr
