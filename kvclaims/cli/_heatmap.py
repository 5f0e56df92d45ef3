"""The lowering matrix as a heatmap PNG: surfaces by modes, coloured by label."""

from __future__ import annotations

from pathlib import Path

from kvclaims.spec.matrix import LABEL_SHORT, MatrixRow
from kvclaims.spec.vocabulary import Label, ProtectionMode

LABEL_COLOURS = {
    Label.native_sound: "#1a9850",
    Label.sound_with_adapter: "#66bd63",
    Label.approximate: "#fee08b",
    Label.unknown: "#d9d9d9",
    Label.rejected: "#d73027",
    Label.invalid: "#762a83",
}


def render_heatmap(rows: list[MatrixRow], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    modes = list(ProtectionMode)
    figure, axes = plt.subplots(figsize=(2 + 1.6 * len(modes), 1.2 + 0.45 * len(rows)), dpi=120)
    for y, row in enumerate(rows):
        for x, mode in enumerate(modes):
            cell = row.cell(mode)
            label = cell.verdict.label if cell else Label.unknown
            axes.add_patch(Rectangle((x, y), 1, 1, facecolor=LABEL_COLOURS[label], edgecolor="white"))
            if cell:
                text = f"{LABEL_SHORT[label]}\n{cell.verdict.depth}"
                axes.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=6)
    axes.set_xlim(0, len(modes))
    axes.set_ylim(len(rows), 0)
    axes.set_xticks(
        [x + 0.5 for x in range(len(modes))],
        [str(m) for m in modes],
        rotation=30,
        ha="right",
        fontsize=7,
    )
    axes.set_yticks([y + 0.5 for y in range(len(rows))], [r.descriptor.surface for r in rows], fontsize=7)
    axes.tick_params(length=0)
    axes.legend(
        handles=[Patch(facecolor=LABEL_COLOURS[label], label=str(label)) for label in reversed(Label)],
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize=7,
    )
    axes.set_title("kvclaims lowering matrix (strongest label over adapter depths)", fontsize=9)
    figure.tight_layout()
    figure.savefig(target, metadata={"Software": None})
    plt.close(figure)
