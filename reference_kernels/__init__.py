"""Staged Triton kernels with their PyTorch references: one op per module, each ending with its ``SPEC``."""

# Every reference kernel module, in the order tables list them.
NAMES = (
    "vector_add",
    "softmax",
    "layernorm",
    "rmsnorm",
    "swiglu",
    "cross_entropy",
    "matmul",
    "attention",
    "semi_markov_crf",
)
