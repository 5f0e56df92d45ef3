"""Shared matplotlib set-up: the Agg backend and one legible style for every picture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STYLE = {
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 14,
    "figure.titleweight": "bold",
}
"""Font sizes chosen so every label reads at 100 % zoom in a Markdown viewer."""

DPI = 110


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend with `STYLE` applied (imported lazily: the CLI
    starts fast and commands that draw nothing never load matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    return plt


def save(figure: Any, target: Path) -> Path:
    """Write `figure` as a PNG without volatile metadata (so reruns are byte-stable) and free it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=DPI, metadata={"Software": None}, bbox_inches="tight")
    pyplot().close(figure)
    return target
