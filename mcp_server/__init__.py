"""pytorch-to-triton: an engine, a `ptt` CLI and an MCP server for turning PyTorch code into Triton kernels."""

__version__ = "0.1.0"
