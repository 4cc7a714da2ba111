"""The matmul epilogue both stage-3 paths share: + bias, then the activation, on the fp32 accumulator.

A ``triton.jit`` function, so the Triton kernels of ``matmul.py`` and the Gluon kernel of ``matmul_hopper.py``
(which calls it with ``offs_n`` in its accumulator's column layout) compile the same epilogue.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

# Activation codes passed to the kernels as a constexpr, so each variant compiles to its own epilogue.
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "silu": 3}

# sqrt(2 / pi) for the tanh-approximated gelu; log2(e) turns exp(x) into exp2(x · LOG2E), which maps
# to the single MUFU.EX2 instruction. tl.constexpr so the kernels can read them as globals.
SQRT_2_OVER_PI = tl.constexpr(math.sqrt(2.0 / math.pi))
LOG2E = tl.constexpr(math.log2(math.e))


@triton.jit
def bias_activation(acc, bias_ptr, offs_n, N, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    """Epilogue on the fp32 accumulator: + bias[n], then the activation selected by ACTIVATION."""
    if HAS_BIAS:
        # other=0: columns past N are never stored, 0 keeps them finite.
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == 2:
        # 0.5·x·(1 + tanh(u)) == x · sigmoid(2u), u = sqrt(2/pi)·(x + 0.044715·x³). For x → -inf the
        # exp2 overflows to inf and x / inf = -0, so no clamp is needed.
        u = SQRT_2_OVER_PI * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp2(-2.0 * LOG2E * u))
    elif ACTIVATION == 3:
        acc = acc / (1.0 + tl.exp2(-LOG2E * acc))
    return acc
