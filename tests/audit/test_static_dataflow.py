"""Precision of the static audit's dataflow: patterns that look alike, where only one is a defect.

Each case is a small kernel in source text; ``_rules`` returns the rule ids reported above info.
"""

from __future__ import annotations

import textwrap

from mcp_server.engine.audit import analyze_source
from mcp_server.engine.models import Severity

HEADER = "import triton\nimport triton.language as tl\n\n\n"


def _report(body: str):
    return analyze_source(HEADER + textwrap.dedent(body), "case.py")


def _rules(body: str) -> list[str]:
    return sorted(f.rule for f in _report(body).findings if f.severity is not Severity.info)


def _lines(report, rule: str) -> list[int]:
    return sorted(f.where.line for f in report.by_rule(rule))


def _marked(body: str) -> list[int]:
    """Line numbers (in the analysed text) of the snippet lines marked ``# HERE``."""
    text = HEADER + textwrap.dedent(body)
    return [i for i, line in enumerate(text.splitlines(), start=1) if line.rstrip().endswith("# HERE")]


def test_mask_passed_through_a_variable_and_combined_with_and_counts_as_a_mask():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
            rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
            cols = tl.arange(0, BN)
            row_ok = rows < M
            col_ok = cols < N
            both = row_ok[:, None] & col_ok[None, :]
            ptrs = rows[:, None] * stride + cols[None, :]
            tl.store(y_ptr + ptrs, tl.load(x_ptr + ptrs, mask=both), mask=both)
        """)
        == []
    )


def test_a_mask_on_rows_only_leaves_an_unmasked_column_tail_reported():
    assert _rules("""
        @triton.jit
        def k(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
            rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
            cols = tl.arange(0, BN)
            ptrs = rows[:, None] * stride + cols[None, :]
            x = tl.load(x_ptr + ptrs, mask=(rows[:, None] < M) & (cols[None, :] < N))
            tl.store(y_ptr + ptrs, x, mask=rows[:, None] < M)
        """) == ["unmasked-access"]


def test_offsets_wrapped_with_modulo_need_no_mask_tutorial_matmul():
    assert (
        _rules("""
        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
            pid_m = tl.program_id(0).to(tl.int64)
            pid_n = tl.program_id(1).to(tl.int64)
            offs_am = (pid_m * BM + tl.arange(0, BM)) % M
            offs_bn = (pid_n * BN + tl.arange(0, BN)) % N
            offs_k = tl.arange(0, BK)
            a_ptrs = a_ptr + offs_am[:, None] * sam + offs_k[None, :] * sak
            b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_bn[None, :] * sbn
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(0, tl.cdiv(K, BK)):
                a = tl.load(a_ptrs, mask=offs_k[None, :] < K - kk * BK, other=0.0)
                b = tl.load(b_ptrs, mask=offs_k[:, None] < K - kk * BK, other=0.0)
                acc = tl.dot(a, b, acc)
                a_ptrs += BK * sak
                b_ptrs += BK * sbk
            offs_cm = pid_m * BM + tl.arange(0, BM)
            offs_cn = pid_n * BN + tl.arange(0, BN)
            c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
            tl.store(c_ptr + offs_cm[:, None] * scm + offs_cn[None, :] * scn, acc, mask=c_mask)
        """)
        == []
    )


def test_unmasked_k_loads_in_the_loop_are_each_reported():
    body = """
        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
            offs_m = tl.arange(0, BM)
            offs_n = tl.arange(0, BN)
            offs_k = tl.arange(0, BK)
            a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(0, K, BK):
                a = tl.load(a_ptrs)  # HERE
                b = tl.load(b_ptrs)  # HERE
                acc += tl.dot(a, b)
                a_ptrs += BK
                b_ptrs += BK * BN
            tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
        """
    report = _report(body)
    assert _lines(report, "unmasked-access") == _marked(body)
    assert "walked in tiles" in report.by_rule("unmasked-access")[0].message


def test_a_constexpr_flag_branch_with_a_masked_twin_is_a_deliberate_fast_path():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, y_ptr, n, EVEN: tl.constexpr, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            if EVEN:
                x = tl.load(x_ptr + offs)
            else:
                x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
            tl.store(y_ptr + offs, x, mask=offs < n)
        """)
        == []
    )


def test_a_runtime_full_block_test_guards_unmasked_accesses_in_its_branch_only():
    body = """
        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            start = tl.program_id(0).to(tl.int64) * BLOCK
            offs = start + tl.arange(0, BLOCK)
            if start + BLOCK <= n:
                tl.store(y_ptr + offs, tl.load(x_ptr + offs))
            else:
                mask = offs < n
                tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
            if n < start + BLOCK:
                tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
            else:
                tl.store(y_ptr + offs, tl.load(x_ptr + offs))
            if start < n:  # says nothing about start + BLOCK
                tl.store(y_ptr + offs, tl.load(x_ptr + offs))  # HERE
        """
    report = _report(body)
    (line,) = _marked(body)
    assert _lines(report, "unmasked-access") == [line, line]  # the store and the load


def test_offsets_clamped_with_where_or_minimum_are_in_bounds():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
            offs_m = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
            offs_n = tl.program_id(1).to(tl.int64) * BN + tl.arange(0, BN)
            safe_m = tl.where(offs_m < M, offs_m, 0)
            safe_n = tl.minimum(offs_n, N - 1)
            x = tl.load(x_ptr + safe_m[:, None] * stride + safe_n[None, :])
            ok = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            tl.store(y_ptr + offs_m[:, None] * stride + offs_n[None, :], x, mask=ok)
        """)
        == []
    )


def test_block_pointer_with_boundary_check_and_tensor_descriptor_are_bounds_checked():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
            pid_m = tl.program_id(0)
            pid_n = tl.program_id(1)
            src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
            tile = tl.load(src, boundary_check=(0, 1), padding_option="zero")
            desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
            desc.store([pid_m * BM, pid_n * BN], tile)
            back = desc.load([pid_m * BM, pid_n * BN])
            tl.store(tl.advance(src, (0, 0)), back, boundary_check=(0, 1))
        """)
        == []
    )


def test_a_padded_scratch_buffer_read_and_written_unmasked_is_not_reported():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, ring_ptr, out_ptr, C, C_PAD: tl.constexpr):
            cs = tl.arange(0, C_PAD)
            c_ok = cs < C
            x = tl.load(x_ptr + cs, mask=c_ok, other=0.0)
            tl.store(ring_ptr + cs, x)
            y = tl.load(ring_ptr + cs)
            tl.store(out_ptr + cs, y * 2.0, mask=c_ok)
        """)
        == []
    )


def test_an_unmasked_weight_load_next_to_a_masked_row_is_reported():
    body = """
        @triton.jit
        def k(x_ptr, w_ptr, y_ptr, n_cols, stride, BLOCK_N: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            cols = tl.arange(0, BLOCK_N)
            mask = cols < n_cols
            x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
            w = tl.load(w_ptr + cols)  # HERE
            tl.store(y_ptr + row * stride + cols, x * w, mask=mask)
        """
    assert _lines(_report(body), "unmasked-access") == _marked(body)


def test_runtime_if_and_while_on_loaded_values_are_fine_in_triton():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, out_ptr, n):
            total = 0.0
            i = 0
            while i < n:
                v = tl.load(x_ptr + i)
                if v > 0:
                    total += v
                elif v < -1:
                    total -= 1.0
                i += 1
            tl.store(out_ptr, total)
        """)
        == []
    )


def test_reducing_along_an_unpadded_axis_does_not_need_a_neutral_other():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, out_ptr, n_rows, stride, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
            rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
            cols = tl.arange(0, BLOCK_N)
            ok = rows < n_rows
            x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=ok[:, None], other=0.0)
            tl.store(out_ptr + rows, tl.max(x, axis=1), mask=ok)
        """)
        == []
    )


def test_reducing_along_the_padded_axis_needs_a_neutral_other():
    assert _rules("""
        @triton.jit
        def k(x_ptr, out_ptr, n_rows, stride, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
            rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
            cols = tl.arange(0, BLOCK_N)
            ok = rows < n_rows
            x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=ok[:, None], other=0.0)
            tl.store(out_ptr + cols, tl.max(x, axis=0))
        """) == ["non-neutral-other"]


def test_max_of_absolute_values_with_zero_padding_is_fine():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
            tl.store(out_ptr, tl.max(tl.abs(x), axis=0))
        """)
        == []
    )


def test_dot_with_k_tail_padded_by_missing_other_is_reported_but_m_tail_is_not():
    body = """
        @triton.jit
        def k(a_ptr, b_ptr, c_ptr, M, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
            offs_m = tl.arange(0, BM)
            offs_n = tl.arange(0, BN)
            offs_k = tl.arange(0, BK)
            a = tl.load(a_ptr + offs_m[:, None] * BK + offs_k[None, :], mask=offs_m[:, None] < M)
            b = tl.load(b_ptr + offs_k[:, None] * BN + offs_n[None, :], mask=offs_k[:, None] < K)  # HERE
            tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], tl.dot(a, b), mask=offs_m[:, None] < M)
        """
    assert _lines(_report(body), "non-neutral-other") == _marked(body)


def test_sigmoid_and_silu_exponentials_are_not_softmax_overflow():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
            sig = 1.0 / (1.0 + tl.exp(-x))
            tl.store(out_ptr, tl.sum(x * sig, axis=0))
        """)
        == []
    )


def test_exp_shifted_by_a_stored_logsumexp_is_safe():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, lse_ptr, out_ptr, n, BLOCK: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=float("-inf")).to(tl.float32)
            lse = tl.load(lse_ptr + row)
            tl.store(out_ptr + row, tl.sum(tl.exp(x - lse), axis=0))
        """)
        == []
    )


def test_program_id_of_axis_1_times_a_tile_is_safe_but_times_a_stride_is_not():
    body = """
        @triton.jit
        def k(x_ptr, y_ptr, n_cols, head_stride, CHUNK: tl.constexpr):
            cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
            ok = cols < n_cols
            tl.store(y_ptr + cols, tl.load(x_ptr + cols, mask=ok), mask=ok)
            head = tl.program_id(2)
            tl.store(y_ptr + head * head_stride, 0.0)  # HERE
        """
    assert _lines(_report(body), "int32-offset-overflow") == _marked(body)


def test_tile_counting_with_cdiv_is_not_an_int32_offset():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
            pid = tl.program_id(0)
            num_n = tl.cdiv(N, BN)
            group = pid // (GROUP * num_n)
            pid_m = (group * GROUP + pid % GROUP).to(tl.int64)
            offs = pid_m * BM + tl.arange(0, BM)
            tl.store(x_ptr + offs, 0.0, mask=offs < M)
        """)
        == []
    )


def test_sizes_a_kernel_hands_to_a_helper_count_for_the_autotune_key():
    report = _report("""
        @triton.jit
        def _row_sum(row_ptr, n_cols, CHUNK: tl.constexpr):
            acc = tl.zeros((CHUNK,), tl.float32)
            for start in range(0, n_cols, CHUNK):
                cols = start + tl.arange(0, CHUNK)
                acc += tl.load(row_ptr + cols, mask=cols < n_cols, other=0.0)
            return tl.sum(acc, axis=0)

        @triton.autotune(configs=[triton.Config({"CHUNK": c}, num_warps=w) for c, w in ((1024, 4), (4096, 8))],
                         key=[])
        @triton.jit
        def k(x_ptr, out_ptr, n_cols, stride, CHUNK: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            tl.store(out_ptr + row, _row_sum(x_ptr + row * stride, n_cols, CHUNK))
        """)
    (f,) = report.by_rule("autotune-key-incomplete")
    assert "n_cols" in f.message and f.severity is Severity.warning


def test_fp16_accumulator_outside_a_loop_is_not_an_accumulation():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, y_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            y = tl.zeros((BLOCK,), dtype=tl.float16)
            y += tl.load(x_ptr + offs)
            tl.store(y_ptr + offs, y)
        """)
        == []
    )


def test_division_guarded_by_an_if_on_the_divisor_is_fine():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
            total = tl.sum(x, axis=0)
            if total != 0:
                tl.store(out_ptr, 1.0 / total)
        """)
        == []
    )


def test_an_online_softmax_with_running_max_is_not_reported():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            m = tl.full((), float("-inf"), tl.float32)
            s = tl.zeros((), tl.float32)
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
                m_new = tl.maximum(m, tl.max(x, axis=0))
                s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
                m = m_new
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
                tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / s, mask=cols < n_cols)
        """)
        == []
    )


def test_an_early_return_for_the_partial_tile_leaves_whole_tiles_after_it():
    assert (
        _rules("""
        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            start = tl.program_id(0).to(tl.int64) * BLOCK
            offs = start + tl.arange(0, BLOCK)
            if start + BLOCK > n:
                mask = offs < n
                tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
                return
            tl.store(y_ptr + offs, tl.load(x_ptr + offs))
        """)
        == []
    )


def test_a_max_guarded_by_a_constant_still_shifts_the_exponent_and_one_swapped_for_data_does_not():
    guarded = """
        @triton.jit
        def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + cols, mask=cols < n, other=float("-inf"))
            m = tl.max(x, axis=0)
            m_safe = tl.where(m == float("-inf"), 0.0, m)
            tl.store(out_ptr, tl.sum(tl.exp(x - m_safe), axis=0))
        """
    assert _rules(guarded) == []
    swapped = guarded.replace('tl.where(m == float("-inf"), 0.0, m)', "tl.where(m > 0, tl.sum(x, axis=0), m)")
    assert "exp-without-max-shift" in _rules(swapped)
