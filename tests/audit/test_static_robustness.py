"""The static audit on files that are not tidy kernel modules: broken, empty, odd, hostile."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mcp_server.engine.audit import StaticAnalysisError, analyze_file, analyze_source
from mcp_server.engine.models import Severity

UNMASKED_KERNEL = """
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)
"""


def test_a_syntax_error_is_a_static_analysis_error_with_file_and_line(tmp_path: Path):
    path = tmp_path / "broken.py"
    path.write_text("import triton\n\n@triton.jit\ndef k(x_ptr:\n    pass\n")
    with pytest.raises(StaticAnalysisError) as info:
        analyze_file(path)
    err = info.value
    assert err.file == str(path) and err.line == 4
    assert str(err).startswith(f"{path}:4")
    assert "SyntaxError" in str(err)


def test_source_text_with_a_syntax_error_names_the_given_filename():
    with pytest.raises(StaticAnalysisError, match=r"^candidate\.py:2:"):
        analyze_source("x = 1\ny = (\n", "candidate.py")


def test_a_missing_file_a_directory_and_a_binary_file_are_clear_errors(tmp_path: Path):
    with pytest.raises(StaticAnalysisError, match="no such file"):
        analyze_file(tmp_path / "nope.py")
    with pytest.raises(StaticAnalysisError, match="directory"):
        analyze_file(tmp_path)
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\xff\xfe\x00\x01garbage")
    with pytest.raises(StaticAnalysisError):
        analyze_file(binary)


def test_a_file_without_triton_kernels_gives_an_empty_report_that_says_so():
    report = analyze_source("import torch\n\n\ndef f(x):\n    return torch.softmax(x, -1)\n", "plain.py")
    assert report.kernels == [] and report.launchers == [] and report.findings == []
    assert report.notes == ["no @triton.jit function in this file: nothing to audit"]


def test_an_empty_file_gives_an_empty_report():
    report = analyze_source("", "empty.py")
    assert report.findings == [] and report.notes


def test_the_analysed_file_is_never_imported_or_run(tmp_path: Path):
    marker = tmp_path / "ran"
    path = tmp_path / "hostile.py"
    path.write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        f"def k(x_ptr):\n    open({str(marker)!r}, 'w').write('ran')\n"
    )
    report = analyze_file(path)
    assert report.kernels == ["k"]
    assert not marker.exists()


@pytest.mark.parametrize(
    "header, decorator",
    [
        ("import triton\nimport triton.language as tl", "@triton.jit"),
        ("from triton import jit\nimport triton.language as tl", "@jit"),
        ("import triton\nimport triton.language as tl", "@triton.jit(do_not_specialize=['n'])"),
        ("import triton as tr\nfrom triton import language as tl", "@tr.jit"),
        (
            "import triton\nimport triton.language as tl",
            "@triton.autotune(configs=[triton.Config({'BLOCK': 256}, num_warps=4)], key=['n'])\n@triton.jit",
        ),
        ("import triton\nimport triton.language as tl", "@triton.heuristics({'BLOCK': lambda a: 256})\n@triton.jit"),
    ],
)
def test_every_way_of_writing_the_jit_decorator_is_recognised(header, decorator):
    report = analyze_source(f"{header}\n\n\n{decorator}{UNMASKED_KERNEL}", "forms.py")
    assert report.kernels == ["_k"]
    assert [f.rule for f in report.findings if f.severity is Severity.error] == ["unmasked-access"]


def test_kernels_wrapped_by_assignment_are_recognised_with_their_autotuner():
    src = textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl

        def _neg(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, -tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

        neg_kernel = triton.jit(_neg)
        neg_tuned = triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4),
                                             triton.Config({"BLOCK": 2048}, num_warps=8)], key=["n"])(neg_kernel)

        def neg(x):
            y = torch.empty_like(x)
            neg_tuned[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel(), BLOCK=1024)
            return y
        """)
    report = analyze_source(src, "wrapped.py")
    assert report.kernels == ["_neg"] and report.launchers == ["neg"]
    assert [f.rule for f in report.findings] == ["autotune-conflicting-meta"]


def test_launchers_in_autograd_functions_and_nested_kernels_are_found():
    src = textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                @triton.jit
                def kernel(x_ptr, n, BLOCK: tl.constexpr):
                    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
                    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
                kernel[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
                return x

            @staticmethod
            def backward(ctx, g):
                @triton.jit
                def kernel(g_ptr, n, BLOCK: tl.constexpr):
                    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
                    tl.store(g_ptr + offs, tl.load(g_ptr + offs) * 2)
                kernel[(triton.cdiv(g.numel(), 256),)](g, g.numel(), BLOCK=256)
                torch.cuda.synchronize()
                return g
        """)
    report = analyze_source(src, "autograd.py")
    assert report.launchers == ["Scale.forward", "Scale.backward"]
    assert len(report.kernels) == 2
    above_info = [(f.rule, f.where.line) for f in report.findings if f.severity is not Severity.info]
    # Only the backward's kernel lacks masks (its load and its store), and only backward syncs.
    assert sorted(r for r, _ in above_info) == ["host-sync-in-launcher", "unmasked-access", "unmasked-access"]
    assert all(line > 17 for _, line in above_info)


def test_odd_but_valid_python_in_and_around_kernels_does_not_break_the_analysis():
    src = textwrap.dedent("""
        import triton
        import triton.language as tl
        from triton.language.extra import libdevice

        CONST_BLOCK: tl.constexpr = 128
        SCALE = 0.5

        @triton.jit
        def _helper(x, *rest, **extra):
            return x * SCALE, (x, x)

        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr = CONST_BLOCK, *, FLAG: tl.constexpr = False):
            pid = tl.program_id(axis=0).to(tl.int64)
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask, other=0.0)
            a, (b, c) = _helper(x)
            d = libdevice.tanh(a) if FLAG else a
            e = [d, b][0]
            f = tl.reshape(tl.join(d, c), (BLOCK, 2))
            g, h = tl.split(f)
            y = tl.where(mask, g + h + e, 0.0)
            for i in tl.static_range(2):
                y += i
            while False:
                pass
            with tl.async_task([0]):
                pass
            tl.store(y_ptr + offs, y, mask=mask)

        def launch(*args, **kwargs):
            k[kwargs["grid"]](*args, **kwargs)
            lookup = {"a": 1}
            return lookup.get("a")
        """)
    report = analyze_source(src, "odd.py")
    assert report.kernels == ["_helper", "k"] and report.launchers == ["launch"]
    assert not report.notes
    assert [f for f in report.findings if f.severity is not Severity.info] == []


def test_a_line_comment_silences_one_rule_or_all_rules_on_that_line():
    src = textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs)  # ptt-audit: ignore[unmasked-access] n is a multiple of BLOCK
            y = tl.load(y_ptr + offs)  # ptt-audit: ignore[debug-leftover]
            tl.device_print("x", x)  # ptt-audit: ignore
            tl.store(y_ptr + offs, x + y, mask=offs < n)
        """)
    report = analyze_source(src, "suppressed.py")
    assert [(f.rule, f.where.line) for f in report.findings if f.severity is not Severity.info] == [
        ("unmasked-access", 9)
    ]


def test_rules_can_be_limited_and_unknown_rule_ids_are_refused():
    src = "import triton\nimport triton.language as tl\n\n\n@triton.jit" + UNMASKED_KERNEL
    report = analyze_source(src, "limited.py", rules=["debug-leftover"])
    assert report.rules_run == ["debug-leftover"] and report.findings == []
    with pytest.raises(ValueError, match="unknown audit rule"):
        analyze_source(src, "limited.py", rules=["no-such-rule"])


def test_too_deep_an_expression_is_a_note_or_a_named_error_never_a_crash():
    def source(depth: int) -> str:
        expr = "x" + " + x" * depth
        return f"import triton\n\n\n@triton.jit\ndef k(x):\n    y = {expr}\n    return y\n"

    report = analyze_source(source(800), "deep.py")  # parses, but is deeper than the analysis recurses
    assert report.kernels == ["k"]
    assert any("partly analysed" in n for n in report.notes)
    # How deep Python's own parser goes depends on its version (3.11 gives up at 5000 terms, 3.12.3 and 3.13 do
    # not): far deeper, it gives up (a named error) or parses (then a partial analysis, as above).
    try:
        deeper = analyze_source(source(100_000), "deeper.py")
    except StaticAnalysisError as e:
        assert "cannot parse" in str(e)
    else:
        assert deeper.kernels == ["k"] and any("partly analysed" in n for n in deeper.notes)
    nested = "import triton\n\n\n@triton.jit\ndef k(x):\n    return " + "(" * 300 + "x" + ")" * 300 + "\n"
    with pytest.raises(StaticAnalysisError, match="too many nested parentheses"):  # every version's tokenizer
        analyze_source(nested, "nested.py")
