from __future__ import annotations

from pathlib import Path

from kvclaims.report.heatmap import render_heatmap
from kvclaims.spec.descriptor import load_descriptors
from kvclaims.spec.matrix import build_matrix
from tests.report.png import png_size

DESCRIPTORS = Path(__file__).resolve().parents[2] / "descriptors"


def test_heatmap_of_the_shipped_descriptors_is_a_png(tmp_path: Path) -> None:
    rows = build_matrix(load_descriptors([DESCRIPTORS]))
    assert rows
    width, height = png_size(render_heatmap(rows, tmp_path / "matrix.png"))
    assert width > 1000 and height > 40 * len(rows)


def test_every_cell_names_a_legend_label_and_where_it_is_reached() -> None:
    from kvclaims.report.figure import pyplot
    from kvclaims.report.heatmap import LABEL_COLOURS, NOT_JUDGED, draw_heatmap
    from kvclaims.spec.vocabulary import ProtectionMode

    rows = build_matrix(load_descriptors([DESCRIPTORS]))
    figure = draw_heatmap(rows)
    try:
        (axes,) = figure.axes
        legend = [t.get_text() for t in axes.get_legend().get_texts()]
        cells = [t.get_text() for t in axes.texts]
        assert len(cells) == len(rows) * len(ProtectionMode)
        for text in cells:
            if text == NOT_JUDGED:
                continue
            label, where = text.split("\n")
            assert label in legend, text
            assert where.startswith("at depth "), text
        assert any(t.startswith("sound_with_adapter\nat depth ") for t in cells)
    finally:
        pyplot().close(figure)
    assert len(set(LABEL_COLOURS.values())) == len(LABEL_COLOURS)
