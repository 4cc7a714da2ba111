"""compile_kernel: ahead-of-time compilation without a GPU, resource usage, IR, and clean errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_server.engine.compile import compile_kernel, occupancy
from mcp_server.engine.errors import UsageError
from mcp_server.engine.models import FindingKind

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "compile"
KERNELS = HERE / "kernels.py"


@pytest.mark.slow
def test_compile_infers_the_signature_from_example_args_and_reports_resources(runner):
    result = compile_kernel(
        f"{KERNELS}:scale_kernel", args="f32[4096], f32[4096], 4096, 2.0, BLOCK=1024", ir=["ptx"], runner=runner
    )
    assert result.ok and result.target == "cuda:90"
    (cfg,) = result.configs
    assert cfg.signature == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": "fp32", "BLOCK": "constexpr"}
    assert cfg.registers and 8 <= cfg.registers <= 255
    assert cfg.spill_stores == 0 and cfg.occupancy is not None and cfg.occupancy.fraction > 0
    # 16-byte aligned pointers and n % 16 == 0 let Triton emit 128-bit accesses.
    assert cfg.instructions["ld.global.v4"] >= 1 and cfg.instructions["st.global.v4"] >= 1
    assert cfg.instructions["fp64"] == 0 and cfg.instructions["local"] == 0
    assert cfg.ir["ptx"].text.startswith("//")


def test_compile_takes_an_explicit_signature_and_other_targets(runner):
    for target in ("cuda:80", "cuda:90", "sm_100"):
        result = compile_kernel(
            f"{KERNELS}:scale_kernel",
            signature="*fp32, *fp32, i32, fp32",
            constexprs={"BLOCK": 512},
            target=target,
            runner=runner,
        )
        assert result.ok, (target, result.findings)
        assert result.configs[0].constexprs == {"BLOCK": 512}


def test_compile_builds_every_autotune_config_or_the_chosen_one(runner):
    every = compile_kernel(f"{KERNELS}:tuned_scale_kernel", signature="*fp32, *fp32, i32, fp32", runner=runner)
    assert every.ok and every.autotuned
    assert [c.config for c in every.configs] == [{"BLOCK": 256}, {"BLOCK": 1024}, {"BLOCK": 4096}]
    assert [c.num_warps for c in every.configs] == [2, 4, 8]
    one = compile_kernel(f"{KERNELS}:tuned_scale_kernel", signature="*fp32, *fp32, i32, fp32", config=2, runner=runner)
    assert len(one.configs) == 1 and one.configs[0].num_stages == 2


@pytest.mark.slow
def test_compile_shows_tensor_core_instructions_for_tl_dot_on_hopper(runner):
    result = compile_kernel(
        f"{KERNELS}:dot_kernel",
        signature="*fp16, *fp16, *fp16",
        constexprs={"BM": 64, "BN": 64, "BK": 64},
        ir=["ptx", "sass"],
        num_warps=4,
        runner=runner,
    )
    assert result.ok
    cfg = result.configs[0]
    assert cfg.instructions["wgmma"] > 0 and cfg.instructions["HGMMA"] > 0
    assert "sass" in cfg.ir and "ptx" in cfg.ir
    assert cfg.shared_bytes > 0
    # Not asked for, the SASS is not disassembled (its counts are absent); the PTX counts stay.
    plain = compile_kernel(
        f"{KERNELS}:dot_kernel",
        signature="*fp16, *fp16, *fp16",
        constexprs={"BM": 64, "BN": 64, "BK": 64},
        num_warps=4,
        runner=runner,
    )
    counts = plain.configs[0].instructions
    assert counts["wgmma"] == cfg.instructions["wgmma"] and "HGMMA" not in counts
    assert "sass" not in plain.configs[0].ir and "sass" not in plain.configs[0].ir_files


def test_unaligned_example_args_show_scalar_accesses(runner):
    # n = 4095 is not a multiple of 16: Triton cannot prove 128-bit accesses stay in bounds.
    result = compile_kernel(
        f"{KERNELS}:scale_kernel", args="f32[4095], f32[4095], 4095, 2.0, BLOCK=1024", runner=runner
    )
    counts = result.configs[0].instructions
    assert counts["ld.global.v4"] == 0 and counts["ld.global"] > 0


def test_compile_writes_full_ir_files_on_request(runner, tmp_path):
    result = compile_kernel(
        f"{KERNELS}:scale_kernel",
        signature="*fp32, *fp32, i32, fp32",
        constexprs={"BLOCK": 256},
        out_dir=str(tmp_path),
        runner=runner,
    )
    files = result.configs[0].ir_files
    assert {"ttir", "ttgir", "llir", "ptx"} <= set(files)
    assert all(Path(p).read_text() for p in files.values())


def test_a_compile_error_points_at_the_file_line_and_column(runner):
    result = compile_kernel(f"{HERE / 'broken.py'}:bad_arange_kernel", signature="*i32, i32", runner=runner)
    assert not result.ok
    finding = result.findings[0]
    assert finding.kind is FindingKind.compile_error
    assert finding.where is not None and finding.where.file.endswith("broken.py") and finding.where.line == 9
    assert "tl.arange(0, n)" in finding.message
    assert "Traceback" not in finding.message


def test_pointing_compile_at_a_launcher_names_the_kernels_instead(runner):
    with pytest.raises(UsageError, match="scale_kernel"):
        compile_kernel(f"{KERNELS}:launcher", signature="*fp32", runner=runner)


def test_a_file_without_a_kernel_name_or_with_a_launchers_names_its_kernels(runner):
    with pytest.raises(UsageError) as caught:
        compile_kernel(str(KERNELS), signature="*fp32", runner=runner)
    assert str(caught.value) == (
        f"The kernel file {KERNELS} was given without a kernel name. Its @triton.jit kernels: scale_kernel, "
        "tuned_scale_kernel, dot_kernel. Name the kernel: kernels.py:scale_kernel."
    )
    with pytest.raises(UsageError) as caught:
        compile_kernel(f"{KERNELS}:launcher", signature="*fp32", runner=runner)
    assert str(caught.value) == (
        "`launcher` is a function, not a @triton.jit kernel: compile takes a kernel, not the launcher that calls "
        "it. Kernels in this file: dot_kernel, scale_kernel, tuned_scale_kernel; pass one as kernels.py:dot_kernel."
    )


def test_missing_types_and_constexprs_are_usage_errors(runner):
    with pytest.raises(UsageError, match="No type for parameter"):
        compile_kernel(f"{KERNELS}:scale_kernel", constexprs={"BLOCK": 256}, runner=runner)
    with pytest.raises(UsageError, match="BLOCK"):
        compile_kernel(f"{KERNELS}:scale_kernel", signature="*fp32, *fp32, i32, fp32", runner=runner)
    with pytest.raises(UsageError, match="Unknown target"):
        compile_kernel(f"{KERNELS}:scale_kernel", signature="*fp32, *fp32, i32, fp32", target="rocm", runner=runner)


def test_a_constexpr_named_after_no_parameter_is_a_usage_error_listing_the_parameters(runner):
    sig = "*fp32, *fp32, i32, fp32"
    with pytest.raises(UsageError, match=r"--constexpr BLOK: no parameter of scale_kernel .* n, alpha, BLOCK\)"):
        compile_kernel(f"{KERNELS}:scale_kernel", signature=sig, constexprs={"BLOK": 256, "BLOCK": 256}, runner=runner)
    assert compile_kernel(f"{KERNELS}:scale_kernel", signature=sig, constexprs={"BLOCK": 256}, runner=runner).ok


def test_example_args_can_come_from_a_function(runner):
    result = compile_kernel(
        f"{KERNELS}:scale_kernel", args=f"{KERNELS}:make_args", constexprs={"BLOCK": 128}, runner=runner
    )
    assert result.ok and result.configs[0].signature["alpha"] == "fp32"


def test_occupancy_names_its_limiter():
    assert occupancy(90, num_warps=4, registers=32, shared_bytes=0).limiter == "warps"
    heavy = occupancy(90, num_warps=8, registers=255, shared_bytes=0)
    assert heavy.limiter == "registers" and heavy.blocks_per_sm == 1
    smem = occupancy(90, num_warps=4, registers=32, shared_bytes=150_000)
    assert smem.limiter == "shared memory" and smem.blocks_per_sm == 1


# --- every GPU config, honest constexprs, launcher types, resource limits, full IR ------------------------


def test_configs_declared_only_for_gpus_are_compiled_without_one(runner):
    result = compile_kernel(
        f"{HERE / 'gpu_configs.py'}:gpu_tuned_kernel", signature="*fp32, *fp32, i32:16", runner=runner
    )
    assert result.ok, result.findings
    assert [c.config for c in result.configs] == [{"BLOCK": 1024}, {"BLOCK": 4096}]


def test_a_constexpr_the_configs_set_selects_those_configs(runner):
    result = compile_kernel(
        f"{KERNELS}:tuned_scale_kernel", signature="*fp32, *fp32, i32, fp32", constexprs={"BLOCK": 4096}, runner=runner
    )
    assert result.ok
    assert [(c.config_index, c.constexprs["BLOCK"]) for c in result.configs] == [(2, 4096)]


def test_a_constexpr_no_config_sets_is_a_usage_error_naming_the_conflict(runner):
    with pytest.raises(
        UsageError, match=r"BLOCK=4000 conflicts with the autotune configs: they set BLOCK to 1024, 256, 4096"
    ):
        compile_kernel(
            f"{KERNELS}:tuned_scale_kernel",
            signature="*fp32, *fp32, i32, fp32",
            constexprs={"BLOCK": 4000},
            runner=runner,
        )


def test_boolean_constexprs_given_as_text_are_booleans(runner):
    result = compile_kernel(
        f"{HERE / 'launched.py'}:rows_kernel",
        signature="*fp32, *fp32, i32, i32, i32",
        constexprs={"SCALE": "False", "BLOCK": "256"},
        runner=runner,
    )
    assert result.ok, result.findings
    assert result.configs[0].constexprs["SCALE"] is False and result.configs[0].constexprs["BLOCK"] == 256


def test_without_a_signature_the_types_come_from_the_launcher(runner):
    result = compile_kernel(f"{HERE / 'launched.py'}:rows_kernel", runner=runner)
    assert result.ok, result.findings
    cfg = result.configs[0]
    assert cfg.signature["x_ptr"] == "*fp32" and cfg.signature["SCALE"] == "constexpr"
    # x.stride(1) == 1 is folded into a constant, as the JIT does; the launch's constexprs are used.
    assert cfg.constexprs == {"stride_col": 1, "SCALE": True, "BLOCK": 256}
    assert "launcher `launcher`" in result.note and "stride_row=i32:16" in result.note


def test_a_missing_type_says_why_the_launcher_could_not_give_it(runner):
    # kernels.py has a launcher but no example inputs to run it with.
    with pytest.raises(UsageError) as caught:
        compile_kernel(f"{KERNELS}:scale_kernel", constexprs={"BLOCK": 256}, runner=runner)
    assert str(caught.value).startswith("No type for parameter `x_ptr`.")
    assert (
        "compile ran the file's launcher: kernels.py has no example inputs to run its launcher `launcher` with "
        "(it defines neither get_inputs() nor get_test_cases())."
    ) in str(caught.value)


def test_constexprs_an_autotuner_chooses_are_named_with_one_launchs_values_that_compile(runner):
    wrapped = f"{HERE / 'tuned_wrapper.py'}:scale_kernel"
    with pytest.raises(UsageError) as caught:
        compile_kernel(wrapped, runner=runner)
    said = str(caught.value)
    assert said.startswith("No value for constexpr parameter(s) BLOCK.")
    assert "launches `scale_kernel` through an autotuner whose configs choose BLOCK" in said
    value = int(said.rsplit("--constexpr BLOCK=", 1)[1].split(")")[0])
    assert value in (128, 256)
    result = compile_kernel(wrapped, constexprs={"BLOCK": value}, runner=runner)
    assert result.ok and "argument types from the launcher `launcher`" in result.note


def test_the_note_offers_the_launchers_types_only_where_the_file_has_example_inputs(runner):
    plain = compile_kernel(
        f"{KERNELS}:scale_kernel", signature="*fp32, *fp32, i32, fp32", constexprs={"BLOCK": 512}, runner=runner
    )
    assert "no divisibility for n" in plain.note and "launcher" not in plain.note
    launched = compile_kernel(
        f"{HERE / 'launched.py'}:rows_kernel",
        signature="*fp32, *fp32, i32, i32, i32",
        constexprs={"SCALE": True, "BLOCK": 256},
        runner=runner,
    )
    assert "or give no signature and let compile read the types from the file's launcher" in launched.note


def test_a_signature_without_integer_divisibility_is_flagged(runner):
    result = compile_kernel(
        f"{KERNELS}:scale_kernel", signature="*fp32, *fp32, i32, fp32", constexprs={"BLOCK": 512}, runner=runner
    )
    assert "no divisibility for n" in result.note
    hinted = compile_kernel(
        f"{KERNELS}:scale_kernel", signature="*fp32, *fp32, i32:16, fp32", constexprs={"BLOCK": 512}, runner=runner
    )
    assert "divisibility" not in hinted.note
    assert hinted.configs[0].instructions["ld.global.v4"] >= 1


def test_requested_ir_is_whole_and_kept_in_a_file(runner):
    result = compile_kernel(
        f"{KERNELS}:scale_kernel",
        signature="*fp32, *fp32, i32:16, fp32",
        constexprs={"BLOCK": 1024},
        ir=["ptx"],
        runner=runner,
    )
    ptx = result.configs[0].ir["ptx"]
    assert not ptx.truncated and ptx.path
    assert Path(ptx.path).read_text() == ptx.text and ptx.text.rstrip().endswith("}")


@pytest.mark.slow
def test_a_config_over_the_targets_shared_memory_fails_to_compile(runner):
    result = compile_kernel(f"{HERE / 'smem.py'}:staged_matmul", signature="*fp16, *fp16, *fp16, i32:16", runner=runner)
    small, big = result.configs
    assert small.ok and small.shared_bytes < 232448
    assert not big.ok and big.shared_bytes == 262144
    assert big.failure.kind is FindingKind.compile_error and "232448 B" in big.failure.message
    assert not result.ok and any("262144 B" in f.message for f in result.findings)


def test_resource_limits_per_target():
    from mcp_server.engine.compile import resource_failure

    assert resource_failure(90, 4, 64, 232448) is None
    assert "232448" in resource_failure(90, 4, 64, 232449)
    assert "166912" in resource_failure(80, 4, 64, 200000)
    assert resource_failure(90, 8, 255, 0) is None  # 255 × 256 threads = 65280 registers
    assert "registers" in resource_failure(90, 16, 255, 0)
