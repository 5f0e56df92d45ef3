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
