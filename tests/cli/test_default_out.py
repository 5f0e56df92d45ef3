"""Where a command writes without -o: a new folder per run in the user's data directory
(`$KVCLAIMS_OUT_DIR`, else `$XDG_DATA_HOME/kvclaims`, else `~/.local/share/kvclaims`), never the
working directory, named at the end of the run and in --json. Each command runs from an empty
working directory that must stay empty; the vLLM commands run with their vLLM job replaced by
one that writes what the job would (the job itself is tested in tests/lab and
tests/vllm_binding), so what is checked here is where the command points it."""

from __future__ import annotations

import datetime as real_datetime
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest

from kvclaims.cli import _common, cli, main
from kvclaims.cli import vllm as vllm_cli
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.userdirs import cache_directory, data_directory

RUN_FOLDER = re.compile(r"^(?P<command>[a-z-]+)-\d{8}T\d{6}Z(-\d+)?$")
DEFAULT_OUT_COMMANDS = {
    ("demo",): "demo",
    ("adversary",): "adversary",
    ("vllm", "scenario"): "vllm-scenario",
    ("vllm", "sweep"): "vllm-sweep",
    ("vllm", "fuzz"): "vllm-fuzz",
    ("vllm", "repeat"): "vllm-repeat",
}
"""Every command that writes without -o, and the name its folder starts with."""


@pytest.fixture
def data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`$KVCLAIMS_OUT_DIR` in tmp_path, and an empty working directory (checked to stay empty)."""
    folder = tmp_path / "data"
    monkeypatch.setenv("KVCLAIMS_OUT_DIR", str(folder))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield folder
    assert list(cwd.iterdir()) == [], "a command wrote into the working directory"


def only_run_folder(data: Path, command: str) -> Path:
    (folder,) = data.iterdir()
    match = RUN_FOLDER.match(folder.name)
    assert match is not None and match["command"] == command, folder.name
    return folder


def _subcommand(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None, name
        command = found
    return command


# -- the rule ---------------------------------------------------------------------------------


def test_the_data_directory_is_kvclaims_out_dir_then_xdg_then_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KVCLAIMS_OUT_DIR", str(tmp_path / "explicit"))
    assert data_directory() == tmp_path / "explicit"
    monkeypatch.delenv("KVCLAIMS_OUT_DIR")
    assert data_directory() == tmp_path / "xdg" / "kvclaims"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")  # invalid by the XDG spec: ignored
    assert data_directory() == tmp_path / "home" / ".local" / "share" / "kvclaims"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert data_directory() == tmp_path / "home" / ".local" / "share" / "kvclaims"


class _FrozenClock(real_datetime.datetime):
    @classmethod
    def now(cls, tz: Any = None) -> _FrozenClock:
        return cls(2026, 1, 2, 3, 4, 5, tzinfo=tz)


def test_runs_in_the_same_second_get_folders_of_their_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KVCLAIMS_OUT_DIR", str(tmp_path / "a" / "b"))  # created on first use
    monkeypatch.setattr(_common, "datetime", _FrozenClock)
    folders = [_common.new_run_folder("demo") for _ in range(3)]
    assert [f.name for f in folders] == [
        "demo-20260102T030405Z",
        "demo-20260102T030405Z-2",
        "demo-20260102T030405Z-3",
    ]
    assert all(f.is_dir() and not any(f.iterdir()) for f in folders)
    explicit = tmp_path / "mine"
    assert _common.out_or_new_run_folder(explicit, "demo") == explicit and not explicit.exists()


def test_a_data_directory_that_cannot_be_created_is_invalid_input(
    data: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    data.parent.joinpath("data").write_text("a file where the folder should be")
    assert main(["demo", "--stages", "schemas"]) == 2
    error = capfd.readouterr().err
    reason = "cannot create the output folder: File exists (give -o, or set KVCLAIMS_OUT_DIR)"
    assert error == f"error: {data} [out]: {reason}\n"
    data.unlink()


def test_no_option_of_any_command_defaults_to_a_relative_path() -> None:
    """A relative default is a path in the working directory, which may be a checkout."""
    commands = [((), cli)]
    while commands:
        path, command = commands.pop()
        if isinstance(command, click.Group):
            commands += [((*path, name), sub) for name, sub in command.commands.items()]
        for param in command.params:
            default = param.get_default(click.Context(command))
            if isinstance(param.type, click.Path) and default is not None:
                assert Path(default).is_absolute(), (path, param.name, default)


@pytest.mark.parametrize("path", list(DEFAULT_OUT_COMMANDS), ids=" ".join)
def test_the_help_says_where_a_command_writes_without_out(path: tuple[str, ...]) -> None:
    command = _subcommand(path)
    (out,) = [p for p in command.params if p.name == "out"]
    assert command.make_context(path[-1], []).params["out"] is None
    assert isinstance(out, click.Option) and isinstance(out.show_default, str)
    assert f"a new folder {DEFAULT_OUT_COMMANDS[path]}-<UTC time> in {_common.DATA_DIRECTORY_RULE}" in (
        out.show_default
    )


# -- the commands -----------------------------------------------------------------------------


def test_demo_writes_a_new_folder_in_the_data_directory_and_names_it(
    data: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--stages", "schemas"]) == 0
    folder = only_run_folder(data, "demo")
    assert (folder / "REPORT.md").is_file() and any((folder / "schemas").iterdir())
    assert f"outputs in {folder}/" in capfd.readouterr().out.splitlines()[-1]
    assert main(["demo", "--stages", "schemas", "--json"]) == 0
    second = json.loads(capfd.readouterr().out)["out"]
    assert Path(second).parent == data and Path(second) != folder and (Path(second) / "REPORT.md").is_file()


def test_demo_without_out_or_xdg_writes_under_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KVCLAIMS_OUT_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["demo", "--stages", "schemas", "--json"]) == 0
    out = Path(json.loads(capfd.readouterr().out)["out"])
    assert out == only_run_folder(tmp_path / "home" / ".local" / "share" / "kvclaims", "demo")
    assert list(cwd.iterdir()) == []


def test_demo_with_out_keeps_the_new_or_empty_rule(data: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = data.parent / "explicit"
    out.mkdir()
    (out / "stale.txt").write_text("from an earlier run")
    assert main(["demo", "-o", str(out), "--stages", "schemas"]) == 2
    assert "not empty" in capfd.readouterr().err and not data.exists()


def test_adversary_writes_a_new_folder_in_the_data_directory(
    data: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    shipped = Path(__file__).resolve().parents[2] / "descriptors" / "lmcache_controller.yaml"
    (descriptors / shipped.name).write_bytes(shipped.read_bytes())
    argv = ["adversary", "--budget", "0.5", "--no-traces", "-j", "1", "--descriptors", str(descriptors)]
    main([*argv, "--json"])  # a budget this short leaves the enumeration incomplete: exit 1
    folder = only_run_folder(data, "adversary")
    assert json.loads(capfd.readouterr().out)["out"] == str(folder)
    assert (folder / "summary.json").is_file() and (folder / "descriptors").is_dir()


def _accepted_trace(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        TraceBuilder(usable_blocks=80).accept("c1").store_prefix("c1", 4).materialize("c1", 4).ndjson()
    )


@pytest.fixture
def vllm_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vLLM commands as if vLLM were installed, each job writing what it would, where told."""
    from kvclaims.lab import repeat, scheduler_fuzzing, scheduler_scenarios

    monkeypatch.setattr(vllm_cli, "_refuse_without_vllm", lambda: None)

    def run_scenario(name: str, trace: Path) -> SimpleNamespace:
        _accepted_trace(trace)
        return SimpleNamespace(name=name, trace_path=trace, numbers={"measured": 1})

    def capacity_sweep(out: Path) -> list[dict[str, Any]]:
        _accepted_trace(out / "sweep-80.ndjson")
        return [{"usable_blocks": 80}]

    def repetitions(out: Path, runs: int, names: Any, on_run: Any) -> dict[str, Any]:
        (out / "runs").mkdir(parents=True)
        return repeat.aggregate(out, names)

    monkeypatch.setattr(scheduler_scenarios, "run_scenario", run_scenario)
    monkeypatch.setattr(scheduler_scenarios, "capacity_sweep", capacity_sweep)
    monkeypatch.setattr(repeat, "repeat", repetitions)
    monkeypatch.setattr("hypothesis.stateful.run_state_machine_as_test", lambda machine, settings: None)
    monkeypatch.setattr(scheduler_fuzzing.SchedulerFuzz, "trace_dir", None)


@pytest.mark.usefixtures("vllm_jobs")
def test_vllm_scenario_writes_its_trace_in_a_new_folder(
    data: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["vllm", "scenario", "hard-60-70-80", "--json"]) == 0
    folder = only_run_folder(data, "vllm-scenario")
    assert json.loads(capfd.readouterr().out)["trace"] == str(folder / "hard-60-70-80.ndjson")
    assert main(["vllm", "scenario", "--list"]) == 0
    assert len(list(data.iterdir())) == 1  # --list writes nothing


@pytest.mark.usefixtures("vllm_jobs")
def test_vllm_sweep_writes_a_new_folder(data: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "sweep", "--json"]) == 0
    folder = only_run_folder(data, "vllm-sweep")
    summary = json.loads(capfd.readouterr().out)
    assert summary["traces"] == str(folder) and summary["verdicts"] == {"sweep-80.ndjson": "accepted"}


@pytest.mark.usefixtures("vllm_jobs")
def test_vllm_fuzz_writes_a_new_folder(data: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from kvclaims.lab import scheduler_fuzzing

    assert main(["vllm", "fuzz", "--examples", "1", "--json"]) == 0
    folder = only_run_folder(data, "vllm-fuzz")
    assert json.loads(capfd.readouterr().out)["out"] == str(folder)
    assert scheduler_fuzzing.SchedulerFuzz.trace_dir == folder


@pytest.mark.usefixtures("vllm_jobs")
def test_vllm_repeat_writes_a_new_folder(data: Path, capfd: pytest.CaptureFixture[str]) -> None:
    main(["vllm", "repeat", "--runs", "1"])  # no repetition ran: exit 1
    folder = only_run_folder(data, "vllm-repeat")
    assert (folder / "aggregate.json").is_file() and (folder / "aggregate.md").is_file()
    assert f"aggregate: {folder / 'aggregate.json'}" in capfd.readouterr().out


def test_the_cache_directory_follows_the_same_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KVCLAIMS_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_directory() == tmp_path / "explicit"
    monkeypatch.delenv("KVCLAIMS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == tmp_path / "xdg" / "kvclaims"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_directory() == tmp_path / "home" / ".cache" / "kvclaims"
