"""Units of work fanned out in this process or in worker processes: results in unit order, an
error raised at its unit's turn, what a cluster saw compared with what the driver sees."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from kvclaims.cli.check import CheckOptions, InputProblems, check_unit
from kvclaims.refinement import fanout
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.errors import InputError


def name_lengths(unit: fanout.Unit) -> list[int]:
    return [len(path.name) for path in unit]


def refuses(bad: str, unit: fanout.Unit) -> str:
    if any(path.name == bad for path in unit):
        raise ValueError(bad)
    return unit[0].name


@pytest.mark.parametrize("jobs", [1, 3])
def test_results_come_in_unit_order_whole_groups_included(jobs: int) -> None:
    units = [(Path("a" * n),) for n in (5, 1, 4)] + [(Path("bb"), Path("ccc"))]
    done: list[None] = []
    results = list(fanout.stream(name_lengths, units, jobs=jobs, on_done=lambda: done.append(None)))
    assert results == [[5], [1], [4], [2, 3]]
    assert len(done) == len(units)


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_error_is_raised_at_its_units_turn(jobs: int) -> None:
    units = [(Path("x"),), (Path("bad"),), (Path("y"),)]
    results = fanout.stream(functools.partial(refuses, "bad"), units, jobs=jobs)
    assert next(results) == "x"
    with pytest.raises(ValueError, match="bad"):
        next(results)


def test_a_bad_registry_comes_back_as_its_problems(tmp_path: Path) -> None:
    trace = tmp_path / "t.ndjson"
    trace.write_bytes(TraceBuilder(usable_blocks=8).accept("C").ndjson())
    result = check_unit(CheckOptions(registry=tmp_path / "absent.yaml", format="vllm-kv-events"), (trace,))
    assert isinstance(result, InputProblems) and "registry" in result.problems[0].render()


def test_a_cluster_that_sees_other_files_or_runs_another_kvclaims_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.ndjson"
    trace.write_bytes(b"0123456789")
    version = fanout._version()
    fanout._check_seen((trace,), fanout._Seen(version, (10,)), version)  # the same: no error
    with pytest.raises(InputError, match="same files"):
        fanout._check_seen((trace,), fanout._Seen(version, (-1,)), version)
    with pytest.raises(InputError, match=r"kvclaims 0\.0\.0"):
        fanout._check_seen((trace,), fanout._Seen("0.0.0", (10,)), version)


def test_a_path_taken_for_the_ray_address_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--ray` takes an optional value, so `check --ray DIR` would read DIR as the address."""
    from kvclaims.cli import main

    (tmp_path / "t.ndjson").write_bytes(TraceBuilder(usable_blocks=8).accept("C").ndjson())
    assert main(["check", "--ray", str(tmp_path), str(tmp_path / "t.ndjson")]) == 2
    assert "put --ray after the traces" in capsys.readouterr().err


def squared(unit: int) -> int:
    return unit * unit


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_unit_may_be_any_picklable_item_and_has_no_files(jobs: int) -> None:
    """A seed or a positive row is a unit too: results in order; a cluster's report of such a
    unit is checked for the version only (it has no files to compare)."""
    assert list(fanout.stream(squared, [3, 1, 2], jobs=jobs)) == [9, 1, 4]
    version = fanout._version()
    fanout._check_seen(7, fanout._Seen(version, ()), version)
    with pytest.raises(InputError, match="--ray"):
        fanout._check_seen(7, fanout._Seen(version, (10,)), version)  # files where there are none
    with pytest.raises(InputError, match="--ray"):
        fanout._check_seen(7, fanout._Seen("0.0.0", ()), version)


def _read_ahead_setting(_unit: object) -> str | None:
    import os

    from kvclaims.refinement.read_ahead import ENVIRONMENT, available

    return f"{os.environ.get(ENVIRONMENT)} {available()}"


def test_pool_workers_read_their_traces_in_one_process_each() -> None:
    """A pool already has a worker per core: its workers never fork a read-ahead child."""
    settings = list(fanout.stream(_read_ahead_setting, [1, 2, 3, 4], jobs=2))
    assert settings == ["0 False"] * 4
