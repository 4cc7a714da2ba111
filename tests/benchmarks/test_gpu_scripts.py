"""The GPU-only measurement scripts: without a GPU they say so and exit 2; their bookkeeping is checked on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [
    "row_kernels_sweep.py",
    "cross_entropy_peers.py",
    "attention_breakdown.py",
    "attention_bwd_schedules.py",
    "attention_fwd_schedules.py",
    "attention_fwd_stages.py",
    "attention_bwd_profile.py",
    "attention_hopper.py",
    "attention_sustained.py",
    "attention_timers.py",
    "attention_placement.py",
    "host_launch.py",
    "host_layers.py",
    "matmul_hopper.py",
]
# Scripts that need arguments before they look for a GPU.
SCRIPT_ARGS = {
    "attention_bwd_ab.py": ["--before", str(ROOT / "reference_kernels" / "attention_hopper_bwd.py")],
    "semi_markov_crf_ab.py": ["--version", f"copy={ROOT / 'reference_kernels' / 'semi_markov_crf.py'}"],
}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name[:-3]}", ROOT / "benchmarks" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", SCRIPTS + list(SCRIPT_ARGS))
def test_without_a_gpu_the_script_names_the_need_and_exits_2(name):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, str(ROOT / "benchmarks" / name), *SCRIPT_ARGS.get(name, [])]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs a CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["--rounds", "0"], ["--calls", "0"], ["--hook-calls", "0"], ["--profile", "-1"]])
def test_the_host_layers_script_refuses_counts_below_one_before_looking_for_a_gpu(args):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, str(ROOT / "benchmarks" / "host_layers.py"), *args]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "at least" in proc.stderr and "needs a CUDA GPU" not in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["--variants", "3,8"], ["--variants", "3,8,x"], ["--sizes", "4096,big"]])
def test_the_matmul_script_refuses_malformed_sizes_and_variants_before_looking_for_a_gpu(args):
    script = str(ROOT / "benchmarks" / "matmul_hopper.py")
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "STAGES,GROUP_M,SPLIT" in proc.stderr and "Traceback" not in proc.stderr
    assert _load("matmul_hopper.py").parse_variants("3,8,0;4,16,1") == [(3, 8, False), (4, 16, True)]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--shapes", "4096"], "MxN"),
        (["--shapes", "4096x8192x2"], "MxN"),
        (["--shapes", "4096xbig"], "MxN"),
        (["--kernels", "rmsnorm,gelu"], "gelu"),
    ],
)
def test_the_row_sweep_refuses_malformed_shapes_and_kernels_before_looking_for_a_gpu(args, named):
    script = str(ROOT / "benchmarks" / "row_kernels_sweep.py")
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert named in proc.stderr and "needs a CUDA GPU" not in proc.stderr and "Traceback" not in proc.stderr
    assert _load("row_kernels_sweep.py").parse_shape("4096x8192") == (4096, 8192)


@pytest.mark.parametrize(
    ("version", "named"),
    [
        ("before", "NAME=FILE"),
        ("=x.py", "NAME=FILE"),
        ("now=x.py", "'now'"),
        ("old=/nonexistent/crf.py", "not a .py file"),
    ],
)
def test_the_crf_ab_script_refuses_a_malformed_version_before_looking_for_a_gpu(version, named):
    script = str(ROOT / "benchmarks" / "semi_markov_crf_ab.py")
    proc = subprocess.run([sys.executable, script, "--version", version], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert named in proc.stderr and "needs a CUDA GPU" not in proc.stderr and "Traceback" not in proc.stderr
    twice = ["--version", f"a={ROOT / 'reference_kernels' / 'semi_markov_crf.py'}"] * 2
    proc = subprocess.run([sys.executable, script, *twice], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "each NAME once" in proc.stderr


def test_the_shared_arguments_report_head_and_times_line(monkeypatch):
    common = _load("_common.py")
    ns = common.rounds_parser("Title line.\n\nmore", rounds=7).parse_args([])
    assert (ns.rounds, ns.out) == (7, None)
    ns = common.rounds_parser("Title line.").parse_args(["--rounds", "3", "--out", "x.json"])
    assert (ns.rounds, ns.out) == (3, "x.json")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "Probe GPU")
    head = common.report_head(5, shipped={"64": 6}, rows=[])
    assert list(head) == ["device", "torch", "timer", "rounds", "shipped", "rows"]
    assert head["device"] == "Probe GPU" and head["timer"] == common.DO_BENCH_TIMER and head["rounds"] == 5
    assert common.report_head(9, "events")["timer"] == "events"
    line = common.times_line({"sdpa": 1.25, "ours": 1.0}, {"sdpa": 1.0, "ours": 1.25}, digits=1)
    assert line == "sdpa 1250.0 µs (1.000)  ours 1000.0 µs (1.250)"


@pytest.mark.parametrize("rotate", [False, True])
def test_the_shared_rounds_time_every_entry_once_per_round_and_rotate_the_order_when_asked(monkeypatch, rotate):
    import triton.testing

    common = _load("_common.py")
    order: list[str] = []
    timed = {"a": 3.0, "b": 1.0, "c": 2.0}

    def fake_do_bench(fn, warmup, rep):
        name = fn()
        order.append(name)
        return timed[name] + len(order) / 1000  # each round a little slower: the median is the middle round's

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_: None)
    calls = {name: (lambda name=name: name) for name in timed}
    med, rounds = common.interleaved_medians(calls, 4, rep=10, rotate=rotate)
    assert [order[i : i + 3] for i in range(0, 12, 3)] == (
        [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]] if rotate else [["a", "b", "c"]] * 4
    )
    assert {name: len(t) for name, t in rounds.items()} == {"a": 4, "b": 4, "c": 4}
    for name, t in rounds.items():
        assert med[name] == pytest.approx(sorted(t)[1] / 2 + sorted(t)[2] / 2)
        assert timed[name] < med[name] < timed[name] + 0.013


def test_the_shared_rounds_take_a_timer_of_the_scripts_own_in_place_of_do_bench(monkeypatch):
    import triton.testing

    common = _load("_common.py")

    def no_do_bench(*args, **kwargs):
        raise AssertionError("do_bench was called")

    monkeypatch.setattr(triton.testing, "do_bench", no_do_bench)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_: None)
    seen: list[str] = []
    calls = {name: (lambda name=name: name) for name in ("a", "b")}

    def measure(call):
        seen.append(call())
        return {"a": 2.0, "b": 5.0}[seen[-1]] + len(seen)

    med, rounds = common.interleaved_medians(calls, 3, measure=measure)
    assert seen == ["a", "b"] * 3  # the warm-up calls go to the entries, not to the timer
    assert rounds == {"a": [3.0, 5.0, 7.0], "b": [7.0, 9.0, 11.0]}
    assert med == {"a": 5.0, "b": 9.0}


def test_the_shared_gpu_check_refuses_no_gpu_and_a_non_sm90_one_where_sm90_is_needed(monkeypatch, capsys):
    common = _load("_common.py")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert common.gpu_missing("probe") and common.gpu_missing("probe", sm90=True)
    assert "probe: needs a CUDA GPU" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (8, 0))
    assert not common.gpu_missing("probe"), "any GPU serves a script that does not need sm_90"
    assert common.gpu_missing("probe", sm90=True)
    assert "compute capability 9.0" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    assert not common.gpu_missing("probe", sm90=True)


def test_the_breakdown_sorts_each_kernel_into_its_role():
    role = _load("attention_breakdown.py").role
    # The names the H100 run recorded (results/h100/attention_breakdown.json), by provider.
    recorded = json.loads((ROOT / "benchmarks/results/h100/attention_breakdown.json").read_text())
    kernels = {name for row in recorded["rows"] for times in row["kernels_us"].values() for name in times}
    roles = {name: role(name) for name in kernels}
    assert roles["_attn_bwd_preprocess_kernel"] == "backward pre-pass"
    assert roles["_attn_bwd_hopper"] == "backward main"
    assert roles["_attn_fwd_hopper"] == "forward"
    by_role = {r: sorted(n for n, got in roles.items() if got == r) for r in set(roles.values())}
    assert any("dot_do_o" in n for n in by_role["backward pre-pass"])
    assert any("bprop" in n for n in by_role["backward main"])
    assert any("fprop" in n for n in by_role["forward"])
    assert any("convert_dq" in n for n in by_role["dQ conversion"])
    assert any("copy_kernel" in n for n in by_role["dQ conversion"])
    assert any("Fill" in n for n in by_role["fills"]) and any("Memset" in n for n in by_role["fills"])
    assert "other" not in by_role
    # The recorded role sums are the sums of the recorded kernels.
    for row in recorded["rows"]:
        for provider, times in row["kernels_us"].items():
            for r, total in row["roles_us"][provider].items():
                assert total == pytest.approx(sum(us for n, us in times.items() if role(n) == r))


def test_the_backward_checks_refuse_a_gradient_off_by_a_percent_of_its_scale_and_keep_an_exact_one():
    # The gate of every attention-backward script (schedules, A/B, passes): worst_error under TOLERANCE.
    bench = _load("_attention.py")
    expected = tuple(torch.randn(2, 3, 128, 64, dtype=torch.float64) for _ in range(3))
    exact = tuple(e.to(torch.bfloat16) for e in expected)
    assert bench.worst_error(exact, expected) < bench.TOLERANCE
    for i in range(3):
        off = list(exact)
        off[i] = (expected[i] + 0.02 * expected[i].abs().max() * (torch.arange(expected[i].numel()) == 7).view_as(
            expected[i])).to(torch.bfloat16)  # fmt: skip
        assert not bench.worst_error(tuple(off), expected) < bench.TOLERANCE, i
    # A NaN anywhere fails the gate too (a comparison with NaN is false).
    nan = list(exact)
    nan[1] = nan[1].clone()
    nan[1][0, 0, 0, 0] = float("nan")
    assert not bench.worst_error(tuple(nan), expected) < bench.TOLERANCE


@pytest.mark.parametrize("name", ["attention_fwd_schedules.py", "attention_fwd_stages.py", "matmul_hopper.py"])
def test_the_output_gates_refuse_an_element_off_by_half_again_their_tolerance_or_nan_and_keep_bf16(name):
    bench = _load(name)
    expected = torch.randn(2, 3, 128, 64, dtype=torch.float64)
    assert bench.relative_error(expected.to(torch.bfloat16), expected) < bench.TOLERANCE
    off = expected.clone()
    off[1, 2, 3, 4] += 1.5 * bench.TOLERANCE * expected.abs().max()
    assert not bench.relative_error(off.to(torch.bfloat16), expected) < bench.TOLERANCE
    nan = expected.to(torch.bfloat16)
    nan[0, 0, 5, 0] = float("nan")
    assert not bench.relative_error(nan, expected) < bench.TOLERANCE


def test_the_matmul_scripts_float64_reference_applies_bias_and_each_activation_as_torch_does():
    bench = _load("matmul_hopper.py")
    a, b, bias = torch.randn(33, 20), torch.randn(20, 17), torch.randn(17)
    base = a.double() @ b.double() + bias.double()
    torch.testing.assert_close(bench.expected(a, b, None, "none"), a.double() @ b.double())
    for act, fn in (("none", lambda x: x), ("relu", torch.relu), ("silu", torch.nn.functional.silu),
                    ("gelu", lambda x: torch.nn.functional.gelu(x, approximate="tanh"))):  # fmt: skip
        torch.testing.assert_close(bench.expected(a, b, bias, act), fn(base))
    assert not torch.allclose(bench.expected(a, b, bias, "gelu"), torch.nn.functional.gelu(base))


def test_the_forward_schedules_must_agree_bit_for_bit_when_causal_and_within_rounding_when_split():
    bench = _load("attention_fwd_schedules.py")
    o = torch.randn(1, 2, 256, 64, dtype=torch.float64).to(torch.bfloat16)
    lse = torch.randn(2, 256) + 8.0
    same = (o, lse)
    one_ulp = (o.clone(), lse.clone())
    one_ulp[0][0, 0, 0, 0] = o[0, 0, 0, 0].float() * (1 + 2**-7)  # one or two bf16 steps up
    assert bench.schedules_agree(True, same, (o.clone(), lse.clone()))
    assert not bench.schedules_agree(True, same, one_ulp)
    # Split: a rounding-size difference agrees; off by 2 % of the scale, an lse off by 2e-3, or a NaN does not.
    assert bench.schedules_agree(False, same, one_ulp)
    off = o.clone()
    off[0, 1, 2, 3] += 0.02 * o.abs().max()
    assert not bench.schedules_agree(False, same, (off, lse))
    assert not bench.schedules_agree(False, same, (o, lse + 2e-3))
    assert bench.schedules_agree(False, same, (o, lse + 5e-4))
    nan_o, nan_lse = o.clone(), lse.clone()
    nan_o[0, 0, 9, 9] = float("nan")
    nan_lse[1, 7] = float("nan")
    for causal in (True, False):
        assert not bench.schedules_agree(causal, same, (nan_o, lse))
        assert not bench.schedules_agree(causal, same, (o, nan_lse))


def test_the_row_sweep_gate_keeps_an_error_within_5_percent_of_the_scale_and_refuses_more_or_nan():
    within = _load("row_kernels_sweep.py").within
    assert within(0.0, 1e-4) and within(0.049, 1.0)
    assert not within(0.051, 1.0)
    assert not within(float("nan"), 1.0) and not within(0.0, float("nan"))


def test_the_cross_entropy_gate_keeps_small_errors_and_refuses_a_large_or_nan_one():
    bench = _load("cross_entropy_peers.py")
    assert bench.correct({"loss": 0.0, "grad": 0.0}) and bench.correct({"loss": 9e-3, "grad": 1.9e-2})
    for key, limit in bench.ERROR_LIMITS.items():
        for bad in (limit * 1.1, float("nan")):
            assert not bench.correct({"loss": 0.0, "grad": 0.0, key: bad}), (key, bad)


def test_the_scripts_correctness_gate_names_every_wrong_check_a_nan_included(capsys):
    common = _load("_common.py")
    checks = [{"case": "ok", "error": 1e-3}, {"case": "off", "error": 2e-2}, {"case": "nan", "error": float("nan")}]
    wrong = common.wrong_checks("GPU", checks, 1e-2)
    assert [row["case"] for row in wrong] == ["off", "nan"]
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"WRONG {checks[1]}", f"WRONG {checks[2]}"] and out[2].startswith("GPU: 3 checks, worst error")
    assert common.wrong_checks("GPU", checks[:1], 1e-2) == []


def test_the_interpreters_overflow_check_benchmark_runs_both_versions_to_the_same_bits(tmp_path):
    out = tmp_path / "overflow.json"
    script = str(ROOT / "benchmarks" / "interp_overflow_checks.py")
    command = [sys.executable, script, "--rows", "6", "--rounds", "1", "--out", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["median_s"]) == {"computed", "skipped"} and report["rows"] == 6
    bad = subprocess.run([sys.executable, script, "--rows", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--rows and --rounds" in bad.stderr and "Traceback" not in bad.stderr


def test_the_interpreters_fast_path_benchmark_runs_both_versions_to_the_same_bits(tmp_path):
    out = tmp_path / "fastpaths.json"
    script = str(ROOT / "benchmarks" / "interp_fastpaths.py")
    proc = subprocess.run(
        [sys.executable, script, "--rounds", "1", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["median_s"]) == {"fast paths", "Triton's own"} and report["same_bits"] is True
    bad = subprocess.run([sys.executable, script, "--rounds", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--rounds takes" in bad.stderr and "Traceback" not in bad.stderr


def test_the_seed_sweep_validates_a_kernel_per_seed_and_refuses_malformed_ranges(tmp_path):
    out = tmp_path / "sweep.json"
    script = str(ROOT / "benchmarks" / "seed_sweep.py")
    command = [sys.executable, script, "--seeds", "7:9", "--kernels", "vector_add", "--out", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["seeds"] == [7, 9] and report["kernels"]["vector_add"]["passed"] == 2
    for bad in (["--seeds", "9:7"], ["--seeds", "x"], ["--kernels", "nope"]):
        proc = subprocess.run([sys.executable, script, *bad], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "--" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
