"""The fuzzing seed: from the environment, else the commit, else the documented fallback; and
the suite runs every Hypothesis test under it with no example database (tests/conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import hypothesis
import pytest

from kvclaims.lab.fuzz_settings import FALLBACK_SEED, FUZZ_SEED_ENV, FuzzSeed, bounded, fuzz_seed


def _repo(path: Path, message: str) -> str:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    if not (path / ".git").exists():
        subprocess.run([*git, "init", "-q"], check=True)
    (path / "f").write_text(message)
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", message], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout


def test_each_commit_gives_its_own_seed_and_the_same_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FUZZ_SEED_ENV, raising=False)
    first = _repo(tmp_path, "one")
    seed_one = fuzz_seed(tmp_path)
    assert seed_one == fuzz_seed(tmp_path) and seed_one.origin == f"commit {first[:12]}"
    _repo(tmp_path, "two")
    assert fuzz_seed(tmp_path).value != seed_one.value


def test_the_environment_overrides_the_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _repo(tmp_path, "one")
    monkeypatch.setenv(FUZZ_SEED_ENV, "1234")
    assert fuzz_seed(tmp_path) == FuzzSeed(1234, FUZZ_SEED_ENV)
    monkeypatch.setenv(FUZZ_SEED_ENV, "a text")
    text_seed = fuzz_seed(tmp_path).value
    monkeypatch.setenv(FUZZ_SEED_ENV, "another text")
    assert text_seed == FuzzSeed(text_seed, "").value != fuzz_seed(tmp_path).value


def test_without_git_or_environment_the_seed_is_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FUZZ_SEED_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the path
    found = fuzz_seed(tmp_path)
    assert found.value == FALLBACK_SEED and "fallback" in found.origin


def test_the_reproducing_command_names_the_seed_and_the_test() -> None:
    assert FuzzSeed(7, "x").reproduce("tests/a.py::t") == (
        f"{FUZZ_SEED_ENV}=7 python -m pytest 'tests/a.py::t' -p no:cacheprovider"
    )


def test_the_suite_runs_without_an_example_database_and_not_derandomized(
    pytestconfig: pytest.Config,
) -> None:
    assert hypothesis.settings().database is None
    assert bounded(5, 5).database is None and not bounded(5, 5).derandomize
    # the suite's seed, unless the run was given `--hypothesis-seed` itself
    assert pytestconfig.option.hypothesis_seed == str(fuzz_seed().value)
