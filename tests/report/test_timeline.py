from __future__ import annotations

from pathlib import Path

from kvclaims.lab.micro_scenarios import run_scenario
from kvclaims.microruntime.tracing import write_trace
from kvclaims.report.timeline import PHASE_COLOURS, claim_timeline, render_timeline
from kvclaims.statemachine.lifecycle import Phase
from tests.report.png import png_size


def _offload_restore_trace(tmp_path: Path) -> Path:
    run = run_scenario("offload-restore").runs[0]
    return write_trace(tmp_path / "offload-restore.ndjson", run.header, run.events)


def test_timeline_follows_the_claim_through_offload_and_restore(tmp_path: Path) -> None:
    timeline = claim_timeline(_offload_restore_trace(tmp_path))
    assert timeline.rejection is None
    (track,) = timeline.tracks.values()
    phases = [s.phase for s in track.segments]
    assert phases[:3] == [Phase.submitted, Phase.accepted, Phase.materialized]
    assert Phase.offloaded in phases and Phase.restoring in phases
    marked = {name for _, name in track.marks}
    assert {
        "resident_claim_offloaded",
        "resident_claim_restore_required",
        "resident_claim_restored",
        "resident_claim_restoration_failed",
    } <= marked


def test_a_rejected_trace_stops_the_timeline_and_says_why(tmp_path: Path) -> None:
    run = run_scenario("control-silent-harm").runs[0]
    path = write_trace(tmp_path / "control.ndjson", run.header, run.events)
    lines = path.read_text().splitlines()
    # drop the accept: every later event of the claim is out of order for the checker
    broken = [line for line in lines if '"resident_claim_accepted"' not in line]
    path.write_text("\n".join(broken) + "\n")
    timeline = claim_timeline(path)
    assert timeline.rejection is not None and timeline.rejection.startswith("seq ")


def test_timeline_is_a_png(tmp_path: Path) -> None:
    timeline = claim_timeline(_offload_restore_trace(tmp_path))
    width, height = png_size(render_timeline(timeline, tmp_path / "timeline.png", title="offload-restore"))
    assert width > 800 and height > 200


def test_the_subtitle_tells_each_claims_story(tmp_path: Path) -> None:
    from kvclaims.report.timeline import story

    told = story(claim_timeline(_offload_restore_trace(tmp_path)))
    (claim,) = claim_timeline(_offload_restore_trace(tmp_path)).tracks
    assert told.startswith(f"{claim}: submitted > accepted > materialized > offloaded > restoring")
    assert "restored" in told and "a restore failed" in told
    assert told.endswith("Every event was accepted by the checker.")


def test_every_phase_a_claim_can_be_in_has_a_colour() -> None:
    """A segment is drawn for every phase after the first event (the in-place restore phases too)."""
    assert set(PHASE_COLOURS) == set(Phase) - {Phase.absent}
