"""`kvclaims lower`, `matrix` and `schema` from the outside: exit codes, output shapes, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.descriptors import ALL_PRECONDITIONS, TRACE_ANCHOR

from kvclaims.cli import main
from kvclaims.refinement.testing import TraceBuilder

CITED = {**TRACE_ANCHOR, "claim_ids": ["A"]}
"""The anchor of every item: a trace that accepts and materializes best_effort claim A."""


def item_yaml(obligation: str) -> str:
    entry = {"obligation": obligation, "status": "supported", "scope": "litmus_trace", "anchor": CITED}
    return json.dumps(entry)


SOUND_BEST_EFFORT = f"""\
descriptor: 1
runtime: example
surface: Example 1.0
version: "1.0"
approximation_signals: [block_events]
native:
  - {item_yaml("materialization_predicate")}
adapters:
  - name: join
    depth: telemetry_join
    preconditions: {json.dumps(ALL_PRECONDITIONS)}
    evidence:
      - {item_yaml("claim_identity")}
      - {item_yaml("claim_materialized_event")}
      - {item_yaml("claim_scoped_telemetry")}
"""


def kvclaims(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvclaims", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def descriptors(tmp_path: Path) -> Path:
    folder = tmp_path / "descriptors"
    (folder / "runs").mkdir(parents=True)
    (folder / "example.yaml").write_text(SOUND_BEST_EFFORT)
    # the anchored trace must exist (a trace anchor to a missing file never counts) and, re-checked,
    # evidence what it is cited for: I, P, M and T for a best_effort claim
    trace = TraceBuilder(usable_blocks=8).accept("A", mode="best_effort", blocks=1)
    (folder / TRACE_ANCHOR["path"]).write_bytes(trace.store_prefix("A", 1).materialize("A", 1).ndjson())
    return folder


def test_lower_json_row_shape_and_exit_code_for_a_sound_row(descriptors: Path) -> None:
    result = kvclaims(
        "lower",
        str(descriptors / "example.yaml"),
        "--mode",
        "best_effort",
        "--depth",
        "telemetry_join",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert {k: row[k] for k in ("runtime", "surface", "mode", "depth", "label", "subtype", "missing")} == {
        "runtime": "example",
        "surface": "Example 1.0",
        "mode": "best_effort",
        "depth": "telemetry_join",
        "label": "sound_with_adapter",
        "subtype": "adapter_observational",
        "missing": [],
    }
    assert row["first_refused"]["label"] == "native_sound"


def test_lower_exits_1_when_a_judged_row_is_not_sound(descriptors: Path) -> None:
    result = kvclaims("lower", str(descriptors), "--mode", "best_effort")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].split("\t") == ["surface", "mode", "depth", "label", "subtype", "missing", "decided by"]
    assert len(lines) == 1 + 8  # piped output is plain text: a header and one line per depth


@pytest.mark.parametrize(
    "text",
    [
        "descriptor: 1\nruntime: x\nsurface: y\nversion: '1'\nbogus: 1\n",
        "descriptor: [\n",
        "a: &a [1]\nb: *a\n",
    ],
    ids=["unknown-field", "invalid-yaml", "alias"],
)
def test_invalid_input_exits_2_with_location_and_no_traceback(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = kvclaims("lower", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert f"{path}:" in result.stderr


def test_lower_on_a_directory_without_yaml_exits_2(tmp_path: Path) -> None:
    result = kvclaims("lower", str(tmp_path))
    assert result.returncode == 2 and "no .yaml descriptor" in result.stderr


def test_lower_skips_an_unrelated_yaml_in_a_directory_and_names_it(descriptors: Path) -> None:
    (descriptors / "notes.yaml").write_text("title: what I tried\nitems: [1, 2]\n")
    result = kvclaims("lower", str(descriptors), "--mode", "best_effort", "--depth", "telemetry_join")
    assert result.returncode == 0, result.stderr
    assert "sound_with_adapter" in result.stdout
    assert f"note: {descriptors / 'notes.yaml'}: " in result.stderr
    assert "without a top-level `descriptor:` key" in result.stderr and "skipped" in result.stderr


def test_a_malformed_descriptor_in_a_directory_still_fails_with_file_line_and_field(
    descriptors: Path,
) -> None:
    bad = descriptors / "broken.yaml"
    bad.write_text("descriptor: 1\nruntime: x\nsurface: y\nversion: '1'\nbogus: 1\n")
    (descriptors / "unparsable.yaml").write_text("title: [\n")
    result = kvclaims("lower", str(descriptors))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{bad}:5" in result.stderr and "bogus" in result.stderr
    assert f"{descriptors / 'unparsable.yaml'}:" in result.stderr and "invalid YAML" in result.stderr


def test_a_directory_of_only_unrelated_yaml_and_a_named_one_are_invalid_input(tmp_path: Path) -> None:
    notes = tmp_path / "notes.yaml"
    notes.write_text("title: what I tried\n")
    from_directory = kvclaims("lower", str(tmp_path))
    assert from_directory.returncode == 2
    assert f"{notes}: " in from_directory.stderr and "no descriptor is left" in from_directory.stderr
    named = kvclaims("lower", str(notes))
    assert named.returncode == 2 and "descriptor" in named.stderr and "skipped" not in named.stderr


def test_matrix_writes_markdown_json_png_and_detects_drift(descriptors: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "reports"
    # exit 1 as `lower` on the same descriptors: the example is sound only for some rows
    assert main(["matrix", str(descriptors), "-o", str(out)]) == 1
    assert kvclaims("lower", str(descriptors)).returncode == 1
    markdown = (out / "lowering-matrix.md").read_text()
    assert "Generated by `kvclaims matrix` from 1 descriptor; do not edit by hand." in markdown
    assert (out / "lowering-matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    matrix = json.loads((out / "lowering-matrix.json").read_text())
    cell = matrix["surfaces"][0]["cells"]["best_effort"]
    assert (cell["label"], cell["depth"]) == ("sound_with_adapter", "telemetry_join")
    assert (
        "| Example 1.0 (`example.yaml`) | sound_with_adapter @ telemetry_join"
        in (out / "lowering-matrix.md").read_text()
    )
    assert main(["matrix", str(descriptors), "-o", str(out), "--check"]) == 0
    (descriptors / "example.yaml").write_text(
        SOUND_BEST_EFFORT.replace('"status": "supported"', '"status": "partial"', 1)
    )
    assert main(["matrix", str(descriptors), "-o", str(out), "--check"]) == 1
    assert "matrix drifted" in capsys.readouterr().err


def test_matrix_exits_0_like_lower_when_every_judged_row_is_sound(descriptors: Path, tmp_path: Path) -> None:
    (descriptors / "example.yaml").write_text(
        SOUND_BEST_EFFORT + "lowerings:\n  - {mode: best_effort, depth: telemetry_join}\n"
    )
    assert main(["matrix", str(descriptors), "-o", str(tmp_path / "reports"), "--no-png"]) == 0
    assert kvclaims("lower", str(descriptors)).returncode == 0


def test_schema_check_detects_drift(tmp_path: Path) -> None:
    assert main(["schema", "--out", str(tmp_path)]) == 0
    assert main(["schema", "--check", str(tmp_path)]) == 0
    (tmp_path / "trace-v1-event.schema.json").write_text("{}")
    assert main(["schema", "--check", str(tmp_path)]) == 1


def test_no_command_prints_help_and_exits_2(capsys) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_explain_prints_every_reason_and_the_first_refused_label(descriptors: Path) -> None:
    result = kvclaims("lower", str(descriptors), "--mode", "hard_protected", "--depth", "none", "--explain")
    assert result.returncode == 1
    explanation = result.stdout.split("\n", 2)[2]
    assert "hard_protected @ none: rejected (enforcement_critical_missing)" in explanation
    assert "V victim_exclusion_before_violation: no evidence at this depth" in explanation
    assert "first refused: unknown by enforcement_critical_missing" in explanation
