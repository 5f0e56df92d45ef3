"""`kvclaims report --descriptors DIR --traces DIR -o OUT` on a user's own folders, through the
real entry point: a fresh output folder, one answer per question, only what must be looked at
in the tables, plain words, no internal references and no Python in the prose."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kvclaims.cli import main
from kvclaims.lab.micro_scenarios import run_scenario
from kvclaims.microruntime.tracing import write_trace

REPOSITORY = Path(__file__).resolve().parents[2]
PYTHON_IN_PROSE = re.compile(r"\b(True|False|None)\b|\['|\{'")


def _user_folders(root: Path) -> tuple[Path, Path]:
    descriptors, traces = root / "descriptors", root / "traces"
    descriptors.mkdir(parents=True)
    shutil.copy(REPOSITORY / "descriptors" / "lmcache_controller.yaml", descriptors)
    for scenario, name in (
        ("hard-claim-60-70-80", "hard"),
        ("offload-restore", "offload"),
        ("control-silent-harm", "control-silent-harm"),
        ("native-60-70-80", "native"),
    ):
        run = run_scenario(scenario).runs[0]
        write_trace(traces / f"{name}.ndjson", run.header, run.events)
    return descriptors, traces


@pytest.fixture(scope="module")
def report_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    root = tmp_path_factory.mktemp("user")
    descriptors, traces = _user_folders(root)
    out = root / "out"
    code = main(["report", "--descriptors", str(descriptors), "--traces", str(traces), "-o", str(out)])
    return code, out


def test_the_report_answers_each_question_in_a_sentence(report_run: tuple[int, Path]) -> None:
    code, out = report_run
    assert code == 0
    report = (out / "REPORT.md").read_text()
    assert "**0 of 1 surface can keep at least one kind of claim soundly**" in report
    assert (
        "**Yes: all 4 traces got the verdict they should** "
        "(3 runs accepted, 1 control caught as their scenario expects)" in report
    )
    assert "Not answered in this run" in report.split("## 3.")[1].split("##")[0]


def test_tables_list_controls_and_unexpected_rows_only(report_run: tuple[int, Path]) -> None:
    report = (report_run[1] / "REPORT.md").read_text()
    assert (
        "| traces/control-silent-harm.ndjson | not accepted | rejected (rule no_silent_harm) | yes |"
        in report
    )
    assert "the other 3 were accepted as they should be" in report
    assert "| traces/hard.ndjson" not in report
    assert "| your traces | 4 | 3 | 1 | 0 | 0 |" in report


def test_words_are_explained_once_and_no_internal_reference_or_python_leaks(
    report_run: tuple[int, Path],
) -> None:
    report = (report_run[1] / "REPORT.md").read_text()
    assert report.count("a trace **rejected**:") == 1 and report.count("mode **hard_protected**:") == 1
    assert "**control**:" in report and '"Vocabulary in one paragraph"' in report
    prose = "\n".join(line for line in report.splitlines() if not line.startswith("|"))
    assert "seed " not in report.lower() and not PYTHON_IN_PROSE.search(prose)


def test_the_pictures_and_a_manifest_of_exactly_what_was_written(report_run: tuple[int, Path]) -> None:
    out = report_run[1]
    pictures = json.loads((out / "pictures.json").read_text())
    assert pictures["timeline"]["trace"] == "traces/hard.ndjson"  # the first accepted trace
    written = {f["path"] for f in json.loads((out / "manifest.json").read_text())["files"]}
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} - {"manifest.json"}
    assert written == on_disk
    assert {"REPORT.md", "lowering-matrix.png", "pictures/claim-timeline.png"} <= written


def test_a_second_run_into_the_same_folder_is_refused(
    report_run: tuple[int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = report_run[1]
    before = (out / "REPORT.md").read_text()
    assert main(["report", "--traces", str(out.parent / "traces"), "-o", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err and (out / "REPORT.md").read_text() == before


def test_an_unexpected_verdict_fails_the_run_and_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, traces = _user_folders(tmp_path)
    (traces / "hard.ndjson").rename(traces / "control-hard.ndjson")  # an accepted "control"
    assert main(["report", "--traces", str(traces), "-o", str(tmp_path / "out")]) == 1
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "**No: 1 of 4 traces did not get the verdict they should**" in report
    assert "| traces/control-hard.ndjson | not accepted | accepted | **NO** |" in report
    assert "Not answered: no descriptors were judged" in report


def test_no_folder_at_all_is_invalid_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "-o", str(tmp_path / "out")]) == 2
    assert "--descriptors" in capsys.readouterr().err
