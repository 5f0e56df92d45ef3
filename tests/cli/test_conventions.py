"""The command line's conventions, through the real entry point: one spelling per option
meaning, JSON lines, stdin as `-`, exit codes and versions in the help, quiet SIGPIPE, help on
every sub-command, tables that fit the terminal."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import click
import pytest
from rich.console import Console

from kvclaims.cli import main
from kvclaims.cli._common import terminal_table
from kvclaims.cli._output import SIGPIPE_EXIT
from kvclaims.cli.app import COMMANDS, cli
from kvclaims.refinement.testing import TraceBuilder

REPOSITORY = Path(__file__).resolve().parents[2]


def kvclaims(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kvclaims", *args], input=stdin, capture_output=True, timeout=300, check=False
    )


def every_command() -> list[tuple[str, click.Command]]:
    found = []
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, name
        found.append((name, command))
        if isinstance(command, click.Group):
            found += [(f"{name} {sub}", command.commands[sub]) for sub in command.commands]
    return found


def test_version_names_kvclaims_z3_and_vllm() -> None:
    lines = kvclaims("--version").stdout.decode().splitlines()
    assert lines[0].startswith("kvclaims ") and lines[1] == f"z3-solver {version('z3-solver')}"
    assert lines[2].startswith("vLLM ")


def test_top_level_help_lists_every_command_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in COMMANDS:
        assert f"\n  {name} " in text
    for code in ("0  success", "1  a verdict is not sound", "2  invalid input", "3  inconclusive"):
        assert code in text


@pytest.mark.parametrize(("name", "command"), every_command(), ids=[n for n, _ in every_command()])
def test_every_command_has_help_and_uses_the_one_output_spelling(name: str, command: click.Command) -> None:
    assert (command.short_help or command.help or "").strip(), name
    assert main([*name.split(), "--help"]) == 0
    for param in command.params:
        if param.name == "out":
            assert param.opts == ["-o", "--out"], name
        if param.name == "json":
            assert param.opts == ["--json"] and param.is_flag, name


def test_a_closed_pipe_ends_quietly() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "kvclaims", "lower", str(REPOSITORY / "descriptors"), "--json", "--explain"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    json.loads(process.stdout.readline())
    process.stdout.close()
    error = process.stderr.read().decode()
    assert process.wait(timeout=120) == SIGPIPE_EXIT
    assert "Traceback" not in error and "BrokenPipe" not in error


def _trace(tmp_path: Path, name: str, *, broken: bool = False) -> Path:
    trace = TraceBuilder(usable_blocks=80).accept("c1").store_prefix("c1", 4).materialize("c1", 4)
    if broken:
        trace.claim_event("demoted", "c1").claim_event("harmed", "c1", leading_blocks=0, required_blocks=4)
    path = tmp_path / name
    path.write_bytes(trace.ndjson())
    return path


def test_check_reads_stdin_and_its_json_lines_have_one_shape(tmp_path: Path) -> None:
    good, bad = _trace(tmp_path, "good.ndjson"), _trace(tmp_path, "bad.ndjson", broken=True)
    piped = kvclaims("check", "-", "--json", stdin=bad.read_bytes())
    assert piped.returncode == 1
    (from_stdin,) = [json.loads(line) for line in piped.stdout.splitlines()]
    (from_file,) = [json.loads(line) for line in kvclaims("check", str(bad), "--json").stdout.splitlines()]
    assert from_stdin["path"] == "<stdin>" and from_stdin["outcome"] == from_file["outcome"] == "rejected"
    assert from_stdin["rule"] == from_file["rule"]
    both = [json.loads(line) for line in kvclaims("check", str(good), str(bad), "--json").stdout.splitlines()]
    assert [v["outcome"] for v in both] == ["accepted", "rejected"]
    assert all({"path", "format", "outcome", "rule", "reason"} <= set(v) for v in (*both, from_stdin))


def test_lower_reads_stdin_and_names_it_in_errors() -> None:
    text = (REPOSITORY / "descriptors" / "lmcache_controller.yaml").read_bytes()
    rows = kvclaims("lower", "-", "--mode", "best_effort", "--json", stdin=text)
    assert rows.returncode in (0, 1) and len(rows.stdout.splitlines()) == 8
    bad = kvclaims("lower", "-", stdin=b"descriptor: [\n")
    assert bad.returncode == 2 and bad.stderr.decode().startswith("error: <stdin>:")


def test_renamed_options_keep_their_old_spelling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--mode", "offloadable", "--as", "mermaid"]) == 0
    new = capsys.readouterr().out
    assert main(["lifecycle", "--mode", "offloadable", "--format", "mermaid"]) == 0
    assert capsys.readouterr().out == new and new.startswith("stateDiagram")
    assert main(["schema", "-o", str(tmp_path)]) == 0
    assert main(["schema", "-o", str(tmp_path), "--check"]) == 0
    assert main(["schema", "--check", str(tmp_path)]) == 0
    (tmp_path / "trace-v1-event.schema.json").write_text("{}")
    assert main(["schema", "-o", str(tmp_path), "--check"]) == 1


def test_a_terminal_table_wraps_other_columns_and_never_cuts_a_key_column() -> None:
    surface = "TensorRT-LLM 1.3.0rc14 container (KV cache manager, priority retention, event API)"
    reason = "approximation_signals_never_satisfy because " + "every obligation is missing " * 4
    table = terminal_table(
        "lowering verdicts",
        ["surface", "mode", "depth", "label", "decided by"],
        [[surface, "hard_protected", "storage_restorability", "sound_with_adapter", reason]],
        keys=("mode", "depth", "label"),
    )
    buffer = io.StringIO()
    Console(file=buffer, width=80, force_terminal=False, color_system=None).print(table)
    text = buffer.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    for key in ("hard_protected", "storage_restorability", "sound_with_adapter"):
        assert key in text
    assert "…" not in text  # the other columns wrap instead of being cut


def test_no_stack_trace_for_bad_options() -> None:
    result = kvclaims("check", "x.ndjson", "--jobs", "0")
    assert result.returncode == 2 and b"Traceback" not in result.stderr and b"--jobs" in result.stderr
    assert os.path.exists(REPOSITORY / "README.md")


def test_a_folder_run_names_skipped_files_and_shows_each_rejections_counterexample(tmp_path: Path) -> None:
    _trace(tmp_path, "good.ndjson")
    _trace(tmp_path, "bad.ndjson", broken=True)
    (tmp_path / "notes.txt").write_text("not a trace")
    result = kvclaims("check", str(tmp_path))
    assert result.returncode == 1
    error = result.stderr.decode()
    assert "skipped 1 files that are not traces" in error and "notes.txt" in error
    assert f"rejected {tmp_path / 'bad.ndjson'}" in error and "rule: " in error
    assert len(result.stdout.decode().splitlines()) == 3  # the table: header and one line per trace


@pytest.mark.parametrize(
    ("name", "command"),
    [(n, c) for n, c in every_command() if not isinstance(c, click.Group)],
    ids=[n for n, c in every_command() if not isinstance(c, click.Group)],
)
def test_every_command_has_json(name: str, command: click.Command) -> None:
    assert "json" in {p.name for p in command.params}, name


def test_json_lines_from_lists_lifecycle_matrix_and_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def lines() -> list[dict]:
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    assert main(["scenario", "--list", "--json"]) == 0
    assert {"name": "hard-claim-60-70-80"} in lines()
    assert main(["lifecycle", "--mode", "best_effort", "--json"]) == 0
    assert all(set(row) == {"from", "events", "to"} for row in lines())
    # the shipped descriptors have rows that are not sound: exit 1, as `lower` on them
    assert main(["matrix", "-o", str(tmp_path / "m"), "--no-png", "--json"]) == 1
    (written,) = lines()
    assert written == {
        "written": [str(tmp_path / "m" / n) for n in ("lowering-matrix.md", "lowering-matrix.json")]
    }
    assert main(["schema", "-o", str(tmp_path / "s"), "--json"]) == 0
    assert len(lines()[0]["written"]) == 4


def test_evidence_is_never_exported_from_stdin(tmp_path: Path) -> None:
    good = _trace(tmp_path, "good.ndjson")
    result = kvclaims("check", "-", "--evidence-out", str(tmp_path / "e.yaml"), stdin=good.read_bytes())
    assert result.returncode == 2 and b"needs trace files" in result.stderr
    assert not (tmp_path / "e.yaml").exists()
