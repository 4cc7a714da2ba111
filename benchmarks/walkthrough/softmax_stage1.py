"""Stage 1 of the walkthrough: a direct softmax, one row per program, the whole row in one block."""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, out_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_stride + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got shape {tuple(x.shape)}")
    x = x.contiguous()
    out = torch.empty_like(x)
    rows, cols = x.shape
    _softmax_row_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=triton.next_power_of_2(cols))
    return out
