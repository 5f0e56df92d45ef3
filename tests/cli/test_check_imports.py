"""`kvclaims check` on one trace imports only what checking it needs (issue 18: a check starts
within a few interpreter starts): no pydantic (the reader decodes into generated msgspec Structs),
no click (a plain check line is parsed without it), nothing another command needs. Structural,
not timed: a fresh interpreter runs the command and reports the modules it imported;
`bench/cli_start.py` has the timing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvclaims.cli._common import is_terminal

TRACE = Path(__file__).resolve().parents[2] / "descriptors/evidence/kvclaims-vllm/hard-refusal.ndjson"

NOT_ON_THE_CHECK_PATH = (
    # the pydantic models of record and what builds them: the reader has generated Structs
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "kvclaims.spec.trace",
    "kvclaims.spec.claims",
    "kvclaims.spec._types",
    "kvclaims.spec.struct_codegen",
    # click and the click-built commands: a plain check line is parsed without them
    "click",
    "kvclaims.cli.app",
    "kvclaims.cli._common",
    # a router's decisions (pydantic) only with --fleet --router-format; files only for stdin
    "kvclaims.refinement.abstractions.dynamo_router",
    "shutil",
    "tempfile",
    "gzip",
    # the descriptor, evidence and lowering models: `check` reads a trace, never a descriptor
    "kvclaims.spec.descriptor",
    "kvclaims.spec.evidence",
    "kvclaims.spec.lowering",
    # fleet checking and evidence writing: only with --fleet / --evidence-out
    "kvclaims.refinement.fleet",
    "kvclaims.refinement.evidence",
    "kvclaims.statemachine.routing",
    # a claim registry (YAML) only for KV-event captures; a process pool only for --jobs N
    "kvclaims.refinement.abstractions.claim_registry",
    "yaml",
    # rich renders for a terminal; a piped verdict is plain text
    "rich",
    "concurrent.futures.process",
    "multiprocessing",
    # other commands' dependencies
    "z3",
    "vllm",
    "torch",
    "hypothesis",
    "matplotlib",
    "ray",
    "kvclaims.solver",
    "kvclaims.lab",
    "kvclaims.report",
)

_RUN_AND_LIST = """
import json, sys
from kvclaims.cli import main
code = main(["check", *sys.argv[1:]])
sys.stdout.flush()
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


PIPED = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
"""The environment of a piped run: no variable that makes rich treat a pipe as a terminal."""


def imported_by_check(trace: Path, *options: str) -> tuple[int, set[str]]:
    """The exit code of `kvclaims check [OPTIONS] TRACE` run piped in a fresh interpreter, and
    every module it imported (the interpreter's own start included)."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, *options, str(trace)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=PIPED,
    )
    report = json.loads(done.stderr)
    return report["code"], set(report["modules"])


def heavy_modules(modules: set[str]) -> list[str]:
    """The entries of `NOT_ON_THE_CHECK_PATH` among `modules` (a package counts with any of its
    submodules)."""
    return sorted(
        heavy
        for heavy in NOT_ON_THE_CHECK_PATH
        if heavy in modules or any(m.startswith(heavy + ".") for m in modules)
    )


@pytest.mark.parametrize(
    ("options", "exit_code"),
    [
        (("--jobs", "1"), 0),
        ((), 0),
        (("--json", "--open", "-j", "1", "--format", "kvclaims-v1"), 0),
        # --strict refuses the trace's context fields: an invalid verdict, located, no pydantic
        (("--strict", "--jobs=1"), 2),
    ],
)
def test_checking_one_trace_imports_nothing_another_command_needs(
    options: tuple[str, ...], exit_code: int
) -> None:
    code, modules = imported_by_check(TRACE, *options)
    assert code == exit_code  # the trace was really checked, not refused before importing
    assert "kvclaims.refinement.checker" in modules
    assert heavy_modules(modules) == []


def test_a_rejected_trace_and_its_minimal_counterexample_need_nothing_more(tmp_path: Path) -> None:
    """Without its acceptance, the claim's later events are rejected: the counterexample and
    its shrinking run on the same light path."""
    lines = TRACE.read_bytes().splitlines(keepends=True)
    assert b'"resident_claim_accepted"' in lines[2]
    rejected = tmp_path / "rejected.ndjson"
    rejected.write_bytes(b"".join(lines[:2] + lines[3:]))
    code, modules = imported_by_check(rejected)
    assert code == 1
    assert heavy_modules(modules) == []


def test_the_command_line_entry_imports_no_click_for_a_plain_check() -> None:
    """`python -m kvclaims check TRACE` (the console script's path) stays off click too."""
    probe = (
        "import runpy, sys, json\n"
        "sys.argv = ['kvclaims', 'check', sys.argv[1]]\n"
        "try:\n"
        "    runpy.run_module('kvclaims', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    sys.stderr.write(json.dumps({'code': exit.code, 'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(TRACE)], capture_output=True, text=True, timeout=120, env=PIPED
    )
    report = json.loads(done.stderr)
    assert report["code"] == 0
    assert heavy_modules(set(report["modules"])) == []


def test_the_spec_package_re_exports_on_first_use() -> None:
    """`import kvclaims.spec` (which any `kvclaims.spec.x` import runs) loads no model module;
    each re-exported name still resolves to its defining module's object."""
    probe = """
import importlib, json, sys
import kvclaims.spec as spec
before = sorted(m for m in sys.modules if m.startswith("kvclaims.spec."))
home = {n: importlib.import_module(spec._EXPORTS[n]) for n in spec.__all__}
wrong = [n for n in spec.__all__ if getattr(spec, n) is not getattr(home[n], n)]
print(json.dumps({"before": before, "wrong": wrong, "all": len(spec.__all__)}))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout)
    assert report["before"] == []
    assert report["wrong"] == []
    assert report["all"] > 0


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [False, True])
@pytest.mark.parametrize("tty_compatible", [None, "", "0", "1"])
@pytest.mark.parametrize("force_color", [None, "", "1"])
def test_the_light_terminal_test_agrees_with_rich(
    monkeypatch: pytest.MonkeyPatch, tty: bool, tty_compatible: str | None, force_color: str | None
) -> None:
    """`is_terminal` decides plain or rich output without importing rich: it must decide as
    rich's own `Console.is_terminal` does, or a piped check would print differently."""
    from rich.console import Console

    for name, value in (("TTY_COMPATIBLE", tty_compatible), ("FORCE_COLOR", force_color)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    stream = _Tty() if tty else io.StringIO()
    assert is_terminal(stream) == Console(file=stream).is_terminal


def test_a_piped_verdict_is_the_shared_rendering_line_for_line() -> None:
    """Piped, `check` prints exactly `verdict_lines` (what rich printed there before, markup and
    colour stripped)."""
    from kvclaims.refinement.api import check_trace
    from kvclaims.refinement.rendering import verdict_lines

    done = subprocess.run(
        [sys.executable, "-m", "kvclaims", "check", str(TRACE)],
        capture_output=True,
        text=True,
        timeout=120,
        env=PIPED,
    )
    assert done.returncode == 0
    assert done.stdout.startswith(f"accepted {TRACE} (kvclaims-v1, 19 events")
    assert done.stdout.splitlines() == verdict_lines(check_trace(TRACE))
