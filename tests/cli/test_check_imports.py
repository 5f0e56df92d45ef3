"""`kvclaims check` on one trace imports only what checking it needs (issue 18: a check starts
within a few interpreter starts). Structural, not timed: a fresh interpreter runs the command
and reports the modules it imported; `bench/cli_start.py` has the timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TRACE = Path(__file__).resolve().parents[2] / "descriptors/evidence/kvclaims-vllm/hard-refusal.ndjson"

NOT_ON_THE_CHECK_PATH = (
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
code = main(["check", "--jobs", "1", sys.argv[1]])
sys.stdout.flush()
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def imported_by_check(trace: Path) -> tuple[int, set[str]]:
    """The exit code of `kvclaims check TRACE` run in a fresh interpreter, and every module it
    imported (the interpreter's own start included)."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, str(trace)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stderr)
    return report["code"], set(report["modules"])


def test_checking_one_trace_imports_nothing_another_command_needs() -> None:
    code, modules = imported_by_check(TRACE)
    assert code == 0  # the trace was really checked (accepted), not refused before importing
    assert "kvclaims.refinement.checker" in modules
    loaded = sorted(
        heavy
        for heavy in NOT_ON_THE_CHECK_PATH
        if heavy in modules or any(m.startswith(heavy + ".") for m in modules)
    )
    assert loaded == []


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
