"""A PNG of speed per attempt: geometric-mean speedup vs eager PyTorch (solid) and vs torch.compile (dashed).

Markers: circle stage 1, square stage 2, triangle stage 3; filled when the attempt passed its gate, hollow when
not. Attempts never timed (no GPU) are not drawn. matplotlib is imported only here, only when asked.
"""

from __future__ import annotations

from pathlib import Path

from mcp_server.engine.errors import UsageError
from mcp_server.engine.specs import output_path
from mcp_server.engine.stages.models import AttemptSummary

_MARKERS = {1: "o", 2: "s", 3: "^"}


def plot_attempts(by_conversion: dict[str, list[AttemptSummary]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("The plot needs matplotlib: pip install matplotlib (or pytorch-to-triton[dev]).") from None

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    drawn = 0
    for n, (name, attempts) in enumerate(by_conversion.items()):
        color = f"C{n % 10}"
        for key, style, label in (
            ("speedup_vs_eager", "-", "vs eager"),
            ("speedup_vs_compile", "--", "vs torch.compile"),
        ):
            timed = [a for a in attempts if getattr(a, key) is not None]
            if not timed:
                continue
            xs = [a.number for a in timed]
            ys = [getattr(a, key) for a in timed]
            ax.plot(xs, ys, style, color=color, alpha=0.6, label=f"{name} {label}")
            for a, y in zip(timed, ys, strict=True):
                passed = a.verdict.state == "passed"
                ax.plot(
                    a.number,
                    y,
                    _MARKERS.get(a.stage, "o"),
                    color=color,
                    markerfacecolor=color if passed else "white",
                    markersize=7,
                )
                drawn += 1
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("attempt")
    ax.set_ylabel("speedup (geometric mean over sizes)")
    ax.set_title("Speed per attempt (○ stage 1, □ stage 2, △ stage 3; hollow: gate not passed)")
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(
            0.5,
            0.5,
            "No timings recorded yet: benchmarks need a CUDA GPU.",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    fig.tight_layout()
    path = output_path(path, "--plot")
    fig.savefig(path)
    plt.close(fig)
    return str(path)
