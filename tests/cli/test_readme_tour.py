"""The README's tour stays true: every `kvclaims ...` line parses, and the quick ones run."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kvclaims.cli import build_parser
from kvclaims.refinement.corpus import default_corpus

REPOSITORY = Path(__file__).resolve().parents[2]
TOUR_LINES = [
    line.split("#")[0].split("&&")[0].strip()
    for block in re.findall(r"```sh\n(.*?)```", (REPOSITORY / "README.md").read_text(), re.S)
    for line in block.splitlines()
    if line.startswith("kvclaims ")
]
QUICK = ("lower", "matrix", "schema", "lifecycle", "scenario", "check")


def test_the_tour_has_commands() -> None:
    assert len(TOUR_LINES) >= 12


@pytest.mark.parametrize("line", TOUR_LINES)
def test_every_tour_line_parses(line: str) -> None:
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert args.command is not None


def test_the_quick_tour_lines_run_in_order(tmp_path: Path) -> None:
    """Run in order, from a scratch folder with the repository's files reachable, as a
    newcomer would; a line that fails leaves a non-zero exit other than 'not sound'."""
    (tmp_path / "descriptors").symlink_to(REPOSITORY / "descriptors")
    for line in TOUR_LINES:
        argv = shlex.split(line)
        if argv[1] not in QUICK:
            continue
        argv = [a.replace("../shared/corpus", str(default_corpus())) for a in argv]
        result = subprocess.run(
            [sys.executable, "-m", "kvclaims", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode in (0, 1), (line, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, line
