"""`kvclaims demo` on a fast subset of its stages (the full demo, with proofs and the
adversary, takes about a minute and is measured, not run, in CI)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kvclaims.cli import demo, main


def _broken(out: Path) -> str:
    raise RuntimeError("this stage is broken on purpose")


def _absent(out: Path) -> str:
    return demo.NOT_RUN + "the thing it needs is not installed"


FAST = {
    name: stage
    for name, stage in demo.STAGES
    if name in {"MicroRuntime scenarios", "check every trace", "pictures"}
}


def _run(monkeypatch: pytest.MonkeyPatch, out: Path, stages: list[tuple[str, demo.Stage]]) -> int:
    monkeypatch.setattr(demo, "STAGES", tuple(stages))
    return demo.run(argparse.Namespace(out=out, stages=None, force=False, json=False))


def test_a_failing_stage_is_reported_and_the_rest_still_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stages = [
        ("MicroRuntime scenarios", FAST["MicroRuntime scenarios"]),
        ("broken", _broken),
        ("vLLM lane", _absent),
        ("check every trace", FAST["check every trace"]),
        ("pictures", FAST["pictures"]),
    ]
    assert _run(monkeypatch, tmp_path, stages) == 1
    report = (tmp_path / "REPORT.md").read_text()
    assert "**FAILED: broken.**" in report
    assert "| broken | failed |" in report and "this stage is broken on purpose" in report
    assert "**vLLM lane** was skipped: the thing it needs is not installed" in report
    # the stages after the failure ran: every scenario trace judged, the pictures drawn
    assert "**Yes: all " in report and "traces got the verdict they should**" in report
    # only controls (and anything unexpected) are listed; the rest are counted
    assert (
        "| scenarios/control-silent-harm.ndjson | not accepted | rejected (rule no_silent_harm) | yes |"
        in report
    )
    assert "scenarios/hard-claim-60-70-80.ndjson" not in report
    assert "offload-restore.ndjson" in report  # the timeline's trace
    for picture in ("capacity-sweep", "claim-timeline", "lifecycle-preserving"):
        assert (tmp_path / "pictures" / f"{picture}.png").stat().st_size > 10_000
    assert "RuntimeError: this stage is broken on purpose" in (tmp_path / "logs" / "broken.log").read_text()


def test_all_stages_ok_exits_zero_and_prints_the_times(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stages = [(name, FAST[name]) for name in ("MicroRuntime scenarios", "check every trace")]
    assert _run(monkeypatch, tmp_path, stages) == 0
    printed = capfd.readouterr().out
    assert "[1/2] MicroRuntime scenarios" in printed and "total\tok\t" in printed
    assert "Every stage that ran succeeded" in (tmp_path / "REPORT.md").read_text()


def test_a_run_refuses_a_non_empty_folder_unless_forced_and_lists_what_it_wrote(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("from an earlier run")
    assert main(["demo", "-o", str(out), "--stages", "schemas"]) == 2
    assert "not empty" in capfd.readouterr().err and not (out / "REPORT.md").exists()
    assert main(["demo", "-o", str(out), "--stages", "schemas", "--force", "--json"]) == 0
    summary = json.loads(capfd.readouterr().out)
    assert [s["name"] for s in summary["stages"]] == ["schemas"] and not summary["failed"]
    written = {f["path"] for f in json.loads((out / "manifest.json").read_text())["files"]}
    assert "REPORT.md" in written and "logs/schemas.log" in written
    assert any(p.startswith("schemas/") for p in written) and "stale.txt" not in written


def test_an_unknown_stage_is_invalid_input(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "-o", str(tmp_path / "o"), "--stages", "nope"]) == 2
    assert "unknown stage 'nope'" in capfd.readouterr().err


def _quick(out: Path) -> str:
    import os

    os.write(1, b"the quick stage's own output\n")  # as a library writes: to file descriptor 1
    return "quick"


def _dies(out: Path) -> str:
    import os

    os._exit(3)  # a stage process killed outright (out of memory, a crash in native code)


def test_concurrent_lanes_keep_the_order_the_logs_and_each_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stages = [
        ("first", _quick),
        ("broken", _broken),
        ("dies", _dies),
        ("after death", _quick),
        ("alone", _quick),
    ]
    monkeypatch.setattr(demo, "CONCURRENT", (("first", "broken"), ("dies", "after death")))
    monkeypatch.setattr(demo, "STAGES", tuple(stages))
    assert demo.run(argparse.Namespace(out=tmp_path, stages=None, force=False, json=True)) == 1
    summary = json.loads(capfd.readouterr().out)
    assert [(s["name"], s["status"]) for s in summary["stages"]] == [
        ("first", "ok"),
        ("broken", "failed"),
        ("dies", "failed"),
        ("after death", "failed"),
        ("alone", "ok"),
    ]
    assert (
        "exit code 3" in summary["stages"][2]["summary"] and "exit code 3" in summary["stages"][3]["summary"]
    )
    assert (tmp_path / "logs" / "first.log").read_text() == "the quick stage's own output\n"
    assert "this stage is broken on purpose" in (tmp_path / "logs" / "broken.log").read_text()
    report = (tmp_path / "REPORT.md").read_text()
    assert (
        report.index("| first |")
        < report.index("| broken |")
        < report.index("| dies |")
        < report.index("| alone |")
    )


def _writes_marker(out: Path) -> str:
    (out / "marker").write_text("written")
    return "marker written"


def _waits_for_marker(out: Path) -> str:
    import time

    deadline = time.monotonic() + 60
    while not (out / "marker").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no marker: the free stage did not run while this lane was running")
        time.sleep(0.05)
    return "saw the marker"


def test_a_free_stage_runs_in_the_first_free_lane_once_what_it_waits_for_finished(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # "marker" waits only for "first": it must run while the other lane still waits for its file
    # (had it waited for every stage before it, "waits" would time out and fail)
    stages = [("first", _quick), ("waits", _waits_for_marker), ("marker", _writes_marker), ("last", _quick)]
    monkeypatch.setattr(demo, "CONCURRENT", (("first",), ("waits",)))
    monkeypatch.setattr(demo, "AFTER", {"marker": ("first",)})
    monkeypatch.setattr(demo, "STAGES", tuple(stages))
    assert demo.run(argparse.Namespace(out=tmp_path, stages=None, force=False, json=True)) == 0
    summary = json.loads(capfd.readouterr().out)
    assert [(s["name"], s["status"], s["summary"]) for s in summary["stages"]] == [
        ("first", "ok", "quick"),
        ("waits", "ok", "saw the marker"),
        ("marker", "ok", "marker written"),
        ("last", "ok", "quick"),
    ]
    assert all(s["cpu_seconds"] >= 0 for s in summary["stages"])


def test_a_free_stage_still_runs_when_the_lane_it_waited_for_died(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stages = [("first", _quick), ("dies", _dies), ("then", _quick)]
    monkeypatch.setattr(demo, "CONCURRENT", (("first",), ("dies",)))
    monkeypatch.setattr(demo, "AFTER", {"then": ("dies",)})
    monkeypatch.setattr(demo, "STAGES", tuple(stages))
    assert demo.run(argparse.Namespace(out=tmp_path, stages=None, force=False, json=True)) == 1
    summary = json.loads(capfd.readouterr().out)
    assert [(s["name"], s["status"]) for s in summary["stages"]] == [
        ("first", "ok"),
        ("dies", "failed"),
        ("then", "ok"),
    ]


def test_every_demo_stage_has_one_place_to_run_and_waits_only_for_known_stages() -> None:
    names = [name for name, _ in demo.STAGES]
    laned = [name for lane in demo.CONCURRENT for name in lane]
    assert len(laned) == len(set(laned)) and set(laned) <= set(names)
    assert set(demo.AFTER) == set(names) - set(laned)  # every other stage says what it waits for
    assert all(set(waits) <= set(names) for waits in demo.AFTER.values())
    # the trace check reads every lane folder's traces: it waits for each stage that writes them
    from kvclaims.report.verdicts import LANES

    assert set(LANES.values()) <= set(demo.AFTER["check every trace"])


def _notes_its_pid(out: Path) -> str:
    import os

    (out / "pid.partial").write_text(str(os.getpid()))
    (out / "pid.partial").rename(out / "pid")  # whole or absent: the other lane polls for it
    return "noted"


def _kills_the_noted_process(out: Path) -> str:
    """Runs beside `_notes_its_pid` (the other lane), so it waits for the pid first, then for
    that stage's result to reach the scheduler (its lane idle), then kills its process."""
    import os
    import signal
    import time

    noted = out / "pid"
    deadline = time.monotonic() + 60
    while not noted.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the other lane never noted its pid")
        time.sleep(0.01)
    time.sleep(0.5)
    os.kill(int(noted.read_text()), signal.SIGKILL)
    time.sleep(0.5)
    return "killed it"


def test_a_stage_sent_to_a_process_killed_while_idle_fails_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stages = [("a", _notes_its_pid), ("b", _kills_the_noted_process), ("c", _quick), ("d", _quick)]
    monkeypatch.setattr(demo, "CONCURRENT", (("a",), ("b",)))
    monkeypatch.setattr(demo, "AFTER", {"c": ("a", "b"), "d": ("a", "b")})
    monkeypatch.setattr(demo, "STAGES", tuple(stages))
    assert demo.run(argparse.Namespace(out=tmp_path, stages=None, force=False, json=True)) == 1
    summary = json.loads(capfd.readouterr().out)
    assert [(s["name"], s["status"]) for s in summary["stages"]] == [
        ("a", "ok"),
        ("b", "ok"),
        ("c", "failed"),
        ("d", "ok"),
    ]
    assert "exit code -9" in summary["stages"][2]["summary"]
