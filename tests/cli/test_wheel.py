"""The wheel carries everything the demo needs: built from a copy of the sources, installed
into a fresh environment, `kvclaims demo` runs from an empty folder with no checkout in sight.

The environment is a venv without pip whose dependencies come from the running interpreter's
site-packages (one `.pth` line), so the test needs no network; kvclaims itself comes only from
the wheel. The demo runs a reduced set of stages (`REDUCED`): the lowering matrix over the
shipped descriptors, the JSON Schemas, the MicroRuntime scenarios, the check of every trace
(including the bundled corpus) and the pictures. Proofs, the adversary and the vLLM lanes are
left out here only for time (about two minutes); they read nothing from outside the package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from kvclaims.cli.check import trace_files

REPOSITORY = Path(__file__).resolve().parents[2]
REDUCED = "lowering matrix,schemas,MicroRuntime scenarios,check every trace,pictures"


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False, env=env)


def _wheel(tmp: Path) -> Path:
    """Build the wheel from a copy of the sources (building writes build/ next to them)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPOSITORY / name, source)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPOSITORY / "kvclaims", source / "kvclaims", symlinks=True, ignore=ignore)
    shutil.copytree(REPOSITORY / "descriptors", source / "descriptors", ignore=ignore)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(tmp / "dist"), "."],
        source,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("kvclaims-*.whl")
    return wheel


def _environment(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp).returncode == 0
    python = venv / "bin" / "python"
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)], tmp
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp)
    # the dependencies (click, pydantic, z3, matplotlib, ...) from this interpreter, after the wheel
    Path(purelib.stdout.strip(), "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.slow
def test_the_installed_wheel_runs_the_demo_from_an_empty_folder(tmp_path: Path) -> None:
    venv = _environment(tmp_path, _wheel(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVCLAIMS_CORPUS")}
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import kvclaims; print(kvclaims.__file__)"], empty, env
    )
    assert where.stdout.strip().startswith(str(venv)), where
    kvclaims = str(venv / "bin" / "kvclaims")
    assert _run([kvclaims, "demo", "--help"], empty, env).returncode == 0
    demo = _run([kvclaims, "demo", "-o", "out", "--stages", REDUCED], empty, env)
    assert demo.returncode == 0, (demo.stdout[-3000:], demo.stderr[-3000:])
    report = (empty / "out" / "REPORT.md").read_text()
    shipped = len(list((REPOSITORY / "descriptors").glob("*.yaml")))
    assert f"of {shipped} surfaces can keep at least one kind of claim soundly" in report
    bundled = len(trace_files([REPOSITORY / "descriptors" / "evidence"]))
    assert f"| bundled corpus | {bundled} | {bundled} | 0 | 0 | 0 |" in report and "**Yes: all " in report
    checks = json.loads((empty / "out" / "trace-verdicts.json").read_text())
    captures = {
        (Path(c["trace"]).name, c["format"], c["outcome"])
        for c in checks
        if "runtime-kv-events" in c["trace"]
    }
    assert captures == {  # read as their descriptors' anchors say
        ("sglang-0.5.23.kvevents", "sglang-kv-events", "accepted"),
        ("trtllm-serializer.jsonl", "trtllm-kv-events", "accepted"),
    }
    written = {f["path"] for f in json.loads((empty / "out" / "manifest.json").read_text())["files"]}
    assert {"REPORT.md", "lowering-matrix.png", "pictures/capacity-sweep.png"} <= written
    assert sorted(p.name for p in empty.iterdir()) == ["out"]  # nothing written beside it
