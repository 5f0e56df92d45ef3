"""The README's tours stay true: every `kvclaims ...` line parses, and the tours run in order
from one empty folder as a newcomer would run them (files the README writes with
`cat > FILE <<'EOF'` are written, its `sed` and `pytest` lines run), without writing into the
checkout, and the output the README shows is the output they print.

Not run here, only parsed: `kvclaims serve`, `kvclaims watch` and `curl` (a server), the engine lane and
`vllm repeat` (minutes of vLLM; `tests/vllm_binding` runs them), and the scheduler lane when
vLLM is not installed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from conftest import vllm_missing_reason

from kvclaims.cli.app import cli

REPOSITORY = Path(__file__).resolve().parents[2]
README = (REPOSITORY / "README.md").read_text()
SLOW = ("--lane engine", "vllm repeat", "kvclaims demo", "kvclaims serve", "kvclaims watch")
"""Tour lines that run for minutes or until stopped (a server, and the watch that follows its
live trace): parsed, not run here (tests/vllm_binding/test_server.py runs both)."""
SHELL = ("sed",)
"""Non-kvclaims lines of the tour that run as written (in bash)."""
HEREDOC = re.compile(r"^cat (>>?) (\S+) <<'EOF'$")
VERDICT_COUNTS = re.compile(r" \(([^,]+), \d+ events, \d+ model steps\)$")


@dataclass
class Step:
    """One line of a tour block: a file the README writes, or a command."""

    command: str
    file: str | None = None
    text: str = ""
    append: bool = False
    shown_output: list[str] = field(default_factory=list)


def tour_steps(readme: str = README) -> list[Step]:
    """Every `sh` block's steps in README order; a `text` block right after an `sh` block is the
    output the README shows for that block's last command."""
    steps: list[Step] = []
    for language, body in re.findall(r"```(\w*)\n(.*?)```", readme, re.S):
        if language == "text" and steps:
            steps[-1].shown_output = body.rstrip("\n").splitlines()
        if language != "sh":
            continue
        lines = iter(body.splitlines())
        for line in lines:
            heredoc = HEREDOC.match(line)
            if heredoc:
                text = "".join(f"{inner}\n" for inner in iter(lines.__next__, "EOF"))
                steps.append(Step(line, heredoc.group(2), text, heredoc.group(1) == ">>"))
            elif line.strip() and not line.startswith((" ", "#")):
                steps.append(Step(line.split("#")[0].split("&&")[0].strip()))
    return steps


STEPS = tour_steps()
TOUR_LINES = [step.command for step in STEPS if step.file is None and step.command.startswith("kvclaims ")]


def test_the_tour_has_commands() -> None:
    assert len(TOUR_LINES) >= 12


def parsed(argv: list[str]) -> click.Context:
    """The context of the (sub)command `argv` names, its options parsed and checked, not run."""
    command: click.Command = cli
    while isinstance(command, click.Group):
        found = command.get_command(click.Context(command), argv[0])
        assert found is not None, f"no command {argv[0]!r}"
        command, argv = found, argv[1:]
    return command.make_context(command.name or "", argv)


@pytest.mark.parametrize("line", TOUR_LINES)
def test_every_tour_line_parses(line: str) -> None:
    assert parsed(shlex.split(line)[1:]).params is not None


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`kvclaims` on PATH is this interpreter's entry point (and PYTHONPATH, if set, stays)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=env)


def _comparable(line: str) -> str:
    """A shown output line as compared: the event and step counts of a verdict's headline are
    left out (they describe the checker's work, not the verdict)."""
    return VERDICT_COUNTS.sub(r" (\1)", line.rstrip())


def _runs_here(command: str) -> bool:
    if any(slow in command for slow in SLOW):
        return False
    return not command.startswith("kvclaims vllm scenario hard") or vllm_missing_reason() is None


def run_tour(folder: Path) -> list[tuple[Step, subprocess.CompletedProcess[str]]]:
    """Run the steps in order from the empty `folder` (kvclaims lines through bash, as typed)."""
    ran = []
    for step in STEPS:
        if step.file is not None:
            with (folder / step.file).open("a" if step.append else "w") as handle:
                handle.write(step.text)
            continue
        words = step.command.split()
        if words[0] not in ("kvclaims", "pytest", *SHELL):
            continue  # make, vllm serve, curl: not run here
        argv = shlex.split(step.command)
        if argv[0] == "kvclaims" and _runs_here(step.command):
            result = _run(["bash", "-c", step.command], folder)
        elif argv[0] in SHELL:
            result = _run(["bash", "-c", step.command], folder)
        elif argv[0] == "pytest":
            result = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv[1:]], folder)
        else:
            continue
        ran.append((step, result))
    return ran


@pytest.mark.slow
def test_the_quick_tour_lines_run_in_order_and_print_what_the_readme_shows(tmp_path: Path) -> None:
    """A line that fails leaves a non-zero exit other than 'not sound' (pytest and shell lines
    must succeed); where the README shows output, the command prints exactly that."""
    before = _checkout_state()
    ran = run_tour(tmp_path)
    assert _checkout_state() == before, "the tour wrote into the checkout"
    assert any(step.command.startswith("pytest") for step, _ in ran)
    assert {
        "kvclaims prove capacity. -o proofs",
        "kvclaims report --descriptors . --traces . -o my-report",
    } <= {step.command for step, _ in ran}
    assert (tmp_path / "my-report" / "REPORT.md").is_file() and (
        tmp_path / "matrix" / "lowering-matrix.png"
    ).is_file()
    for step, result in ran:
        allowed = (0, 1) if step.command.startswith("kvclaims") else (0,)
        assert result.returncode in allowed, (step.command, result.stdout[-2000:], result.stderr[-2000:])
        assert "Traceback" not in result.stderr, step.command
        if step.shown_output:
            printed = [_comparable(line) for line in result.stdout.rstrip("\n").splitlines()]
            assert [_comparable(line) for line in step.shown_output] == printed, step.command


def _checkout_state() -> dict[str, int]:
    """Modification times of the checkout's generated folders, which a tour must not touch."""
    return {
        str(p): p.stat().st_mtime_ns
        for folder in ("proofs", "reports", "schemas", "docs", "descriptors")
        for p in (REPOSITORY / folder).rglob("*")
    }


def _hand_written_trace() -> tuple[Step, Step]:
    """The trace the README writes by hand, and the step that checks it."""
    writes = [s for s in STEPS if s.file == "my-trace.ndjson"]
    checks = [s for s in STEPS if s.command == "kvclaims check my-trace.ndjson"]
    assert len(writes) == 1 and len(checks) == 1, "the README's hand-written trace moved"
    return writes[0], checks[0]


def test_the_hand_written_trace_is_rejected_for_the_reason_the_readme_gives(tmp_path: Path) -> None:
    written, check = _hand_written_trace()
    (tmp_path / "my-trace.ndjson").write_text(written.text)
    result = _run([sys.executable, "-m", "kvclaims", "check", "my-trace.ndjson"], tmp_path)
    assert result.returncode == 1
    assert check.shown_output[0].startswith("rejected my-trace.ndjson")
    assert result.stdout.startswith("rejected my-trace.ndjson")
    rule = re.search(r"\[(\w+)\]", check.shown_output[1])
    assert rule and rule.group(1) == "capacity_arithmetic"
    assert f"rule: {rule.group(1)} " in result.stdout
    assert "the model allowed instead: capacity_shortfall_blocks == 50" in result.stdout
    assert f"`{rule.group(1)}`" in README


@pytest.mark.parametrize(
    ("old", "new", "shown", "rule"),
    [
        (
            '"blocking_claim_ids": ["c1"]',
            '"blocking_claim_ids": []',
            '`"blocking_claim_ids": []`',
            "attribution",
        ),
        ('"mode": "hard_protected"', '"mode": "best_effort"', '`"mode": "best_effort"`', "attribution"),
        (
            '"claim_id": "c1", "leading_blocks"',
            '"claim_id": "c2", "leading_blocks"',
            '`"claim_id": "c2"`',
            "identity",
        ),
    ],
)
def test_the_other_mistakes_the_readme_suggests_break_the_rules_it_names(
    tmp_path: Path, old: str, new: str, shown: str, rule: str
) -> None:
    written, _ = _hand_written_trace()
    fixed = written.text.replace('"capacity_shortfall_blocks": 40', '"capacity_shortfall_blocks": 50')
    assert old in fixed and shown in README and f"`{rule}`" in README
    (tmp_path / "mistake.ndjson").write_text(fixed.replace(old, new, 1))
    result = _run([sys.executable, "-m", "kvclaims", "check", "mistake.ndjson"], tmp_path)
    assert result.returncode == 1 and f"[{rule}]" in result.stdout.splitlines()[1], result.stdout
