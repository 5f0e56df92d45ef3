"""`kvclaims demo` on a fast subset of its stages (the full demo, with proofs and the
adversary, takes about a minute and is measured, not run, in CI)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kvclaims.cli import demo


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
    return demo.run(argparse.Namespace(out=out))


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
    assert "All " in report and "traces got the verdict their scenario expects" in report
    assert (
        "| MicroRuntime scenarios | scenarios/control-silent-harm.ndjson | not accepted | rejected "
        "| no_silent_harm | yes |" in report
    )
    assert "**MicroRuntime** run" in report and "not vLLM" in report
    for picture in ("capacity-sweep", "claim-timeline", "lifecycle-diagram"):
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


def test_out_has_a_short_alias() -> None:
    parser = argparse.ArgumentParser()
    demo.register(parser.add_subparsers())
    assert parser.parse_args(["demo", "-o", "x"]).out == Path("x")
