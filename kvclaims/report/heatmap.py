"""The lowering matrix as a heatmap: one row per runtime surface, one column per protection
mode, each cell coloured by the strongest label any adapter depth reaches."""

from __future__ import annotations

from pathlib import Path

from kvclaims.report.figure import pyplot, save
from kvclaims.spec.matrix import MatrixRow
from kvclaims.spec.vocabulary import Label, ProtectionMode

LABEL_COLOURS = {
    # Okabe-Ito colours: told apart by readers with any common colour-vision deficiency, and
    # no two greens; the cell text names the label too, so colour is never the only cue
    Label.native_sound: "#0072B2",
    Label.sound_with_adapter: "#56B4E9",
    Label.approximate: "#F0E442",
    Label.unknown: "#DDDDDD",
    Label.rejected: "#D55E00",
    Label.invalid: "#CC79A7",
}
DARK_LABELS = frozenset({Label.native_sound, Label.rejected})
"""Cells whose colour needs white text to stay readable."""

NOT_JUDGED = "not judged"


def cell_text(label: Label, depth: str) -> str:
    """What a cell says: the label exactly as the legend names it, and the (shallowest) adapter
    depth that reaches it (`none`: the runtime as it is)."""
    return f"{label}\nat depth {depth}"


def render_heatmap(rows: list[MatrixRow], target: Path) -> Path:
    """Draw `rows` (from `kvclaims.spec.matrix.build_matrix`) into the PNG `target`. A mode a
    descriptor does not judge is drawn in the `unknown` colour and says "not judged"."""
    return save(draw_heatmap(rows), target)


def draw_heatmap(rows: list[MatrixRow]) -> object:
    from matplotlib.patches import Patch, Rectangle

    plt = pyplot()
    modes = list(ProtectionMode)
    figure, axes = plt.subplots(figsize=(4.5 + 1.75 * len(modes), 1.8 + 0.62 * len(rows)))
    for y, row in enumerate(rows):
        for x, mode in enumerate(modes):
            cell = row.cell(mode)
            label = cell.verdict.label if cell else Label.unknown
            axes.add_patch(Rectangle((x, y), 1, 1, facecolor=LABEL_COLOURS[label], edgecolor="white", lw=2))
            axes.text(
                x + 0.5,
                y + 0.5,
                cell_text(label, str(cell.verdict.depth)) if cell else NOT_JUDGED,
                ha="center",
                va="center",
                fontsize=8,
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
        "each cell: the strongest label any adapter depth reaches, and the depth that reaches it",
        fontsize=12,
    )
    return figure
