"""A plain `kvclaims check` line runs without click (`kvclaims.cli.check.plain_args`): it must
mean exactly what click makes of it, and print and exit exactly as the click path does.

Every line `plain_args` takes is parsed by click too and the options compared; lines it leaves
to click (help, other options, values click refuses) must really be left. The outputs of both
paths are compared on traces of every outcome and on bad input."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.cli import main
from kvclaims.cli.app import run_click
from kvclaims.cli.check import command, plain_args

TRACE = Path(__file__).resolve().parents[2] / "descriptors/evidence/kvclaims-vllm/hard-refusal.ndjson"


def click_options(argv: list[str]) -> dict[str, Any] | None:
    """What click hands to the command for `check ARGS...`, or None when click refuses the line."""
    try:
        with command.make_context("check", argv[1:]) as context:
            return dict(context.params)
    except (click.exceptions.Exit, click.UsageError):
        return None


WORDS = [
    "--json",
    "--strict",
    "--open",
    "--format",
    "--format=auto",
    "--format=kvclaims-v1",
    "--format=",
    "kvclaims-v1",
    "vllm-kv-events",
    "bogus",
    "--registry",
    "--registry=reg.yaml",
    "--registry=",
    "reg.yaml",
    "-j",
    "--jobs",
    "--jobs=2",
    "--jobs=0",
    "-j3",
    "-j=3",
    "2",
    "0",
    "01",
    "-1",
    "+2",
    " 2",
    "٣",
    "a.ndjson",
    "dir/b.jsonl",
    "-",
    "--",
    "",
    "-h",
    "--help",
    "--ray",
    "--fleet",
    "--evidence-out",
    "--json=1",
    "--jsn",
    "check",
]


@settings(max_examples=3000, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=7))
def test_every_plain_line_means_what_click_makes_of_it(words: list[str]) -> None:
    argv = ["check", *words]
    plain = plain_args(argv)
    if plain is not None:
        assert vars(plain) == click_options(argv), argv


@pytest.mark.parametrize(
    "words",
    [
        ["t.ndjson"],
        ["-"],
        ["--json", "a.ndjson", "b.ndjson"],
        ["a.ndjson", "--json", "-j", "2", "--strict", "--open"],
        ["--jobs=4", "--format", "kvclaims-v1", "a.ndjson"],
        ["--format=vllm-kv-events", "--registry", "r.yaml", "a.kvevents"],
    ],
)
def test_the_usual_check_lines_are_plain(words: list[str]) -> None:
    argv = ["check", *words]
    plain = plain_args(argv)
    assert plain is not None
    assert vars(plain) == click_options(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],
        ["check", "--help"],
        ["check", "-h", "a.ndjson"],
        ["check", "--fleet", "r.ndjson", "a.ndjson"],
        ["check", "--ray", "a.ndjson"],
        ["check", "--evidence-out", "e.yaml", "a.ndjson"],
        ["check", "--format", "bogus", "a.ndjson"],
        ["check", "--jobs", "0", "a.ndjson"],
        ["check", "-j4", "a.ndjson"],
        ["check", "--", "a.ndjson"],
        ["check", "--json=1", "a.ndjson"],
        ["--version"],
        ["lower", "a.yaml"],
        [],
    ],
)
def test_other_lines_are_left_to_click(argv: list[str]) -> None:
    assert plain_args(argv) is None


def _run(entry: Any, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = entry(argv)
    return code, out.getvalue(), err.getvalue()


def _traces(tmp_path: Path) -> dict[str, Path]:
    lines = TRACE.read_bytes().splitlines(keepends=True)
    written = {
        "rejected": b"".join(lines[:2] + lines[3:]),  # the claim was never accepted
        "invalid": b"".join([lines[0], b'{"seq": 0, "event": 1}\n']),
        "inconclusive": b"".join(lines[:-1]),  # no trace_closed: truncated
    }
    paths = {"accepted": TRACE}
    for outcome, data in written.items():
        paths[outcome] = tmp_path / f"{outcome}.ndjson"
        paths[outcome].write_bytes(data)
    return paths


@pytest.mark.parametrize(
    ("options", "exit_codes"),
    [
        ([], {0, 1, 2, 3}),
        (["--json"], {0, 1, 2, 3}),
        (["--strict", "-j", "1"], {2}),  # the traces' context fields are refused: all invalid
    ],
)
def test_both_paths_print_and_exit_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: list[str], exit_codes: set[int]
) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    traces = _traces(tmp_path)
    lines = [[str(path)] for path in traces.values()] + [[str(path) for path in traces.values()]]
    lines += [["--format", "vllm-kv-events", str(TRACE)], [str(tmp_path / "missing.ndjson")]]
    codes = set()
    for words in lines:
        argv = ["check", *options, *words]
        assert plain_args(argv) is not None
        plain, through_click = _run(main, argv), _run(run_click, argv)
        assert plain == through_click, argv
        codes.add(plain[0])
    assert codes == exit_codes  # every outcome, and bad input, went through both paths


def test_a_plain_line_reads_stdin_as_click_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(TRACE.read_bytes())))
    plain = _run(main, ["check", "-"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(TRACE.read_bytes())))
    assert plain == _run(run_click, ["check", "-"])
    assert plain[0] == 0
