"""The committed lowering matrix (`reports/`) is what the shipped descriptors generate.

Regenerate with `kvclaims matrix descriptors -o reports` after changing a descriptor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvclaims.cli import main
from kvclaims.cli._recheck import load_rechecked
from kvclaims.spec.matrix import build_matrix, matrix_json, matrix_markdown
from kvclaims.spec.vocabulary import ProtectionMode
from tests.report.png import png_size

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
DESCRIPTORS = ROOT / "descriptors"


@pytest.fixture(autouse=True)
def _run_from_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_committed_matrix_has_not_drifted() -> None:
    assert main(["matrix", "descriptors", "-o", "reports", "--check", "--no-png"]) == 0, (
        "run: kvclaims matrix descriptors -o reports"
    )


def test_committed_files_equal_a_fresh_generation() -> None:
    rows = build_matrix(load_rechecked([DESCRIPTORS]))  # as `kvclaims matrix` reads them
    assert (REPORTS / "lowering-matrix.md").read_text(encoding="utf-8") == matrix_markdown(rows)
    committed = json.loads((REPORTS / "lowering-matrix.json").read_text(encoding="utf-8"))
    assert committed == json.loads(json.dumps(matrix_json(rows)))


def test_drift_is_detected(tmp_path: Path) -> None:
    for name in ("lowering-matrix.md", "lowering-matrix.json"):
        (tmp_path / name).write_text((REPORTS / name).read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["matrix", "descriptors", "-o", str(tmp_path), "--check", "--no-png"]) == 0
    markdown = tmp_path / "lowering-matrix.md"
    markdown.write_text(markdown.read_text(encoding="utf-8").replace("rejected", "approximate", 1))
    assert main(["matrix", "descriptors", "-o", str(tmp_path), "--check", "--no-png"]) == 1


def test_matrix_covers_every_shipped_surface_and_mode() -> None:
    committed = json.loads((REPORTS / "lowering-matrix.json").read_text(encoding="utf-8"))
    sources = [surface["source"] for surface in committed["surfaces"]]
    assert sources == sorted(p.name for p in DESCRIPTORS.glob("*.yaml"))
    for surface in committed["surfaces"]:
        assert set(surface["cells"]) == {m.value for m in ProtectionMode}
        assert all(cell is not None for cell in surface["cells"].values())


def test_heatmap_is_a_valid_png() -> None:
    """A complete PNG: signature, an IHDR with a real size, CRC-valid chunks, IEND last."""
    width, height = png_size(REPORTS / "lowering-matrix.png")
    assert width > 200 and height > 200
