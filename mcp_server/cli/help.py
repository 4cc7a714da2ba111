"""A description and at least one example for every ``ptt`` command's ``--help``, kept in one place.

:func:`annotate` walks the finished parser and fills each command's description (when its module gave none)
and its epilog; a test parses every example with the real parser, so an example cannot drift from the
options it shows.
"""

from __future__ import annotations

import argparse

K = "mcp_server/examples/softmax_triton.py"
P = "mcp_server/examples/softmax_problem.py"

# command path -> (description, examples)
HELP: dict[tuple[str, ...], tuple[str, tuple[str, ...]]] = {
    ("device",): (
        "Show what kernels run on here: the CUDA GPU (capability, SMs, L2, memory) or the Triton interpreter on "
        "CPU, the torch / Triton / Python versions, and with --peaks the measured copy bandwidth and matmul "
        "rates that bench's roofline uses (measured once, then cached).",
        ("ptt device", "ptt device --peaks --json"),
    ),
    ("compile",): (
        "Compile a @triton.jit kernel ahead of time for a GPU target — no GPU needed. Per autotune config: "
        "registers, spills, shared memory, occupancy and what limits it, compile time; IR stages on request. "
        "Argument types come from --signature or from example --args; constexprs an autotune config does not "
        "set come from --constexpr.",
        (
            f"ptt compile {K}:softmax_kernel --signature '*fp32, *fp32, i32, i32, i32' --constexpr BLOCK=1024",
            f"ptt compile {K}:softmax_kernel --args 'f32[64,1000], f32[64,1000], 1000, 1000, 1000, BLOCK=1024' "
            "--target cuda:80 --ir ptx",
        ),
    ),
    ("validate",): (
        "Check a candidate against a PyTorch reference. Both run in isolated child processes: the reference on "
        "random inputs per seed and on edge shapes derived from get_inputs(), the candidate on the inputs alone "
        "with fresh allocations poisoned. The parent compares values (dtype-aware tolerance against float64), "
        "NaN/Inf, shape, dtype, input mutation, aliasing, determinism, and that a Triton kernel did the work. "
        "Exit 1 when the candidate fails.",
        (f"ptt validate {P}:reference {K}:softmax", f"ptt validate {P}:reference {K}:softmax --seeds 5 --backward"),
    ),
    ("bench",): (
        "Time a kernel on the GPU against eager PyTorch and torch.compile (the --reference's runs), with the "
        "roofline from the measured ceilings; L2 flushed, inputs rotated, validation first. Without a GPU it "
        "exits 3: nothing is timed under the interpreter.",
        (
            f"ptt bench {K}:softmax --reference {P}:reference",
            f"ptt bench {K}:softmax --reference {P}:reference --inputs 'bf16[4096,N]' --sizes 1024,8192 "
            "--plot softmax.png",
        ),
    ),
    ("serve",): (
        "Run the MCP server: stdio for a local client (what `ptt install` registers), or streamable HTTP for "
        "remote agents (loopback by default, a bearer token off loopback).",
        ("ptt serve", "ptt serve --transport http --host 0.0.0.0 --port 8765"),
    ),
    ("demo",): (
        "The whole pipeline on the bundled softmax kernel: device, compile, validate, bench (GPU only), audit.",
        ("ptt demo",),
    ),
    ("audit",): (
        "Review the Triton kernels of a file: static rules on the source, the compiled kernels, a correctness "
        "suite against a reference, and timings on a GPU; a Markdown and a JSON report. Exit 1 on an "
        "error-severity finding.",
        (f"ptt audit {K}:softmax --reference {P}:reference",),
    ),
    ("docs",): (
        "The local Triton docs cache, for the installed Triton version: sync it from the web (or build it from "
        "the installed package offline), search it.",
        ("ptt docs search tl.dot input_precision", "ptt docs sync"),
    ),
    ("docs", "sync"): (
        "Fetch the Triton docs into the cache and build the API reference of the installed Triton; --offline "
        "builds the reference alone, without the network.",
        ("ptt docs sync", "ptt docs sync --offline"),
    ),
    ("docs", "search"): (
        "Ranked snippets from the cached Triton docs (the cache is built offline first if missing), with each "
        "hit's page, readable in full as the MCP resource triton-docs://PAGE.",
        ("ptt docs search tl.dot input_precision -k 3", "ptt docs search 'atomic_add sem' --json"),
    ),
    ("stages",): (
        "The stage ledger: a conversion advances stage by stage (correct, autotuned and faster, past "
        "torch.compile with a clean audit) only on the tools' evidence. See docs/stages.md.",
        ("ptt stages status",),
    ),
    ("stages", "start"): (
        "Begin a conversion: name it and give the PyTorch reference every attempt is validated against.",
        (f"ptt stages start softmax {P}:reference",),
    ),
    ("stages", "submit"): (
        "Validate a candidate (and bench it, audit it, as the stage's gate needs), record the attempt with its "
        "source, and print the verdict. Exit 1 when the gate is not met.",
        (f"ptt stages submit softmax {K}:softmax --stage 2",),
    ),
    ("stages", "status"): (
        "Where every conversion stands: best stage, attempts, speed-ups, and why the next gate is not met.",
        ("ptt stages status", "ptt stages status softmax --json"),
    ),
    ("stages", "show"): (
        "Every attempt of a conversion with its verdict and the checks that failed.",
        ("ptt stages show softmax",),
    ),
    ("stages", "best"): (
        "The source of the best passing attempt of a stage, as submitted (to roll back to it).",
        ("ptt stages best softmax --stage 2 --write softmax_stage2.py",),
    ),
    ("eval",): (
        "Validate every KernelBench-style solution against its problem and time the correct ones on the GPU "
        "pool; report correctness and fast_p. Resumable: results go to a SQLite database.",
        ("ptt eval problems/ solutions/", "ptt eval problems/ solutions/ --no-bench --json"),
    ),
    ("daemon",): (
        "ptt commands run in a per-user background engine that keeps torch imported and its fork servers warm "
        "(a small validate took 0.46 s warm against 4.3 s in its own process on a 2-core CPU machine, "
        "benchmarks/results/cpu/cli_latency.json): it starts on first use, one per environment, and "
        "exits after PTT_DAEMON_IDLE_S seconds idle (default 600). PTT_NO_DAEMON=1 or `ptt --no-daemon …` runs "
        "a command in its own process instead; `ptt -v …` says when the engine is not used and why.",
        ("ptt daemon status", "ptt daemon start", "ptt daemon stop --json"),
    ),
    ("install",): (
        "Put the pytorch-to-triton skill and MCP server where a coding agent finds them: Claude Code (the skill "
        "in .claude/skills/, the server in .mcp.json or, with --scope user, through `claude mcp add` or "
        "~/.claude.json), Cursor (.cursor/mcp.json) or VS Code (.vscode/mcp.json). Other servers are kept; a "
        "second run says 'already installed' and refreshes a stale copy of the skill; --uninstall takes back "
        "what it added.",
        (
            "ptt install claude                     # this folder's project",
            "ptt install claude --scope user        # all your projects",
            "ptt install claude --dir ~/src/model   # another project",
            "ptt install cursor",
            "ptt install claude --uninstall",
        ),
    ),
}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (path, parser) below ``parser``, groups and their actions alike."""
    for name, sub in _subcommands(parser).items():
        yield (*path, name), sub
        yield from commands(sub, (*path, name))


class Formatter(argparse.HelpFormatter):
    """Wraps one-line text (descriptions) to the terminal; keeps text with line breaks (examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def annotate(parser: argparse.ArgumentParser) -> None:
    for path, sub in commands(parser):
        entry = HELP.get(path)
        if entry is None:
            continue
        description, examples = entry
        if not sub.description:
            sub.description = description
        if not sub.epilog:
            label = "example" if len(examples) == 1 else "examples"
            sub.epilog = f"{label}:\n" + "\n".join(f"  {e}" for e in examples)
        sub.formatter_class = Formatter
