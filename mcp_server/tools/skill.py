"""The skill bundle over MCP: the ``pytorch-to-triton`` prompt and ``skill://`` resources for its files."""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from mcp_server.engine.skill import skill_dir, skill_present
from mcp_server.tools._common import Placement

# The checkout's skills/ (an editable install) or the package's own copy (a wheel): engine.skill finds it.
SKILL_DIR = skill_dir() if skill_present() else Path(__file__).resolve().parents[2] / "skills" / "pytorch-to-triton"


def pytorch_to_triton(target: str) -> str:
    """Start a staged conversion of a PyTorch callable (e.g. model.py:forward) into Triton."""
    return f"""Convert `{target}` to a Triton kernel with the pytorch-to-triton tools, in gated stages.

1. Call `device_info`. Read the code of `{target}` until you can state the op as math with shapes, dtypes and
   which dimension is contiguous. Write a reference module: the PyTorch function, `get_test_cases()` (labelled
   shapes: a tail that is not a power of two, one row, the real sizes) or `get_inputs()`, and `bytes_moved` /
   `flops` if you can.
2. `stage_start` with a conversion name and that reference.
3. Stage 1: a simple, correct kernel and launcher. Loop `compile_kernel` → `validate_against_reference` until
   ok, then `stage_submit` stage 1.
4. Stage 2: autotune, coalesce, fewer passes over memory; `bench` against stage 1; `stage_submit` stage 2.
5. Stage 3: tune until `bench` is at least torch.compile on every size and `audit` has no error finding;
   `stage_submit` stage 3.

Report to the user only what the tools showed (verdicts, speedups, % of roofline), with the findings that
remain. The skill's guides are resources under skill://pytorch-to-triton/; search APIs with
`search_triton_docs`."""


def skill_main() -> str:
    return (SKILL_DIR / "SKILL.md").read_text()


def skill_reference(name: str) -> str:
    references = SKILL_DIR / "references"
    path = (references / name).resolve()
    if path.parent != references.resolve() or not path.is_file():
        available = ", ".join(sorted(p.name for p in references.glob("*.md")))
        raise ResourceNotFoundError(f"no skill reference {name!r}; available: {available}")
    return path.read_text()


def register(server: MCPServer, placement: Placement) -> None:
    server.prompt(name="pytorch-to-triton", title="Convert PyTorch code to Triton, in gated stages")(pytorch_to_triton)
    server.resource(
        "skill://pytorch-to-triton/SKILL.md", title="The pytorch-to-triton skill", mime_type="text/markdown"
    )(skill_main)
    server.resource(
        "skill://pytorch-to-triton/references/{name}",
        title="A guide of the pytorch-to-triton skill",
        mime_type="text/markdown",
    )(skill_reference)
