"""The lowering matrix as a heatmap: one row per runtime surface, one column per protection
mode, each cell coloured by the strongest label any adapter depth reaches (DESIGN 3)."""

from __future__ import annotations

from pathlib import Path

from kvclaims.report.figure import pyplot, save
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
DARK_LABELS = frozenset({Label.native_sound, Label.rejected, Label.invalid})
"""Cells whose colour needs white text to stay readable."""


def render_heatmap(rows: list[MatrixRow], target: Path) -> Path:
    """Draw `rows` (from `kvclaims.spec.matrix.build_matrix`) into the PNG `target`. A mode a
    descriptor does not judge is drawn as `unknown` with no text."""
    from matplotlib.patches import Patch, Rectangle

    plt = pyplot()
    modes = list(ProtectionMode)
    figure, axes = plt.subplots(figsize=(4.5 + 1.55 * len(modes), 1.8 + 0.62 * len(rows)))
    for y, row in enumerate(rows):
        for x, mode in enumerate(modes):
            cell = row.cell(mode)
            label = cell.verdict.label if cell else Label.unknown
            axes.add_patch(Rectangle((x, y), 1, 1, facecolor=LABEL_COLOURS[label], edgecolor="white", lw=2))
            if cell:
                depth = str(cell.verdict.depth).replace("_", " ")
                axes.text(
                    x + 0.5,
                    y + 0.5,
                    f"{LABEL_SHORT[label]}\n{depth}",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="white" if label in DARK_LABELS else "black",
                )
    axes.set_xlim(0, len(modes))
    axes.set_ylim(len(rows), 0)
    axes.set_xticks([x + 0.5 for x in range(len(modes))], [str(m) for m in modes], rotation=25, ha="right")
    axes.set_yticks([y + 0.5 for y in range(len(rows))], [r.descriptor.surface for r in rows])
    axes.tick_params(length=0)
    axes.set_xlabel("protection mode a claim asks for")
    axes.set_ylabel("runtime surface (one descriptor each)")
    axes.legend(
        handles=[Patch(facecolor=LABEL_COLOURS[label], label=str(label)) for label in reversed(Label)],
        title="strongest label",
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
    )
    axes.set_title(
        "Lowering matrix: can each runtime honour each claim mode?\n"
        "cell text: label / adapter depth that reaches it",
        fontsize=12,
    )
    return save(figure, target)
