"""Per-claim lifecycle timeline of one recorded run: one row per claim, its phase over the
trace's event sequence, and markers at the events a reader looks for (offload, restore
required, restored, restoration failed, refusals naming the claim, demotion, expiry, harm).

The phases are not re-derived here: every event is fed to the refinement `Checker` (the same
one `kvclaims check` runs) and each claim's phase is read from it after each event. If the
checker rejects the trace, the timeline stops at that event and says so.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kvclaims.refinement.checker import Checker, Rejection
from kvclaims.refinement.decoding import event_decoder
from kvclaims.report.figure import pyplot, save
from kvclaims.statemachine.lifecycle import Phase

FOLDED_EVENTS = frozenset({"block_stored", "block_removed"})
"""Block events share the x position of the event before them: a claim's hundreds of block
events would otherwise squeeze its lifecycle events into a corner."""

MARKED_EVENTS = {
    "resident_claim_materialized": ("materialized", "d", "#1a9850"),
    "resident_claim_offloaded": ("offloaded", "v", "#984ea3"),
    "resident_claim_restore_required": ("restore_required", ">", "#ff7f00"),
    "resident_claim_restored": ("restored", "o", "#1a9850"),
    "resident_claim_restoration_failed": ("restoration_failed", "X", "#d73027"),
    "active_request_refused": ("refusal naming the claim", "s", "#a50026"),
    "resident_claim_demoted": ("demoted", "^", "#4575b4"),
    "resident_claim_expired": ("expired", "P", "#4575b4"),
    "resident_claim_extended": ("extended", "|", "#4575b4"),
    "resident_claim_harmed": ("harmed", "*", "#000000"),
    "resident_claim_lost": ("lost", "x", "#000000"),
}
"""Trace event -> (marker label, matplotlib marker, colour)."""

PHASE_COLOURS = {
    Phase.submitted: "#f0f0f0",
    Phase.accepted: "#c7e9c0",
    Phase.rejected: "#bdbdbd",
    Phase.materialized: "#41ab5d",
    Phase.breached: "#fb6a4a",
    Phase.offloaded: "#bcbddc",
    Phase.restoring: "#fdae6b",
    Phase.checkpoint_mismatch: "#fc9272",
    Phase.restoring_in_place: "#fdd0a2",
    Phase.checkpoint_mismatch_in_place: "#fcbba1",
    Phase.demoted: "#9ecae1",
    Phase.expired: "#c6dbef",
    Phase.released: "#e0e0e0",
    Phase.harmed: "#67000d",
}


@dataclass(frozen=True)
class Segment:
    start_seq: int
    end_seq: int
    phase: Phase


@dataclass
class ClaimTrack:
    """One claim's row: phase segments in seq order and its marked events."""

    claim_id: str
    segments: list[Segment] = field(default_factory=list)
    marks: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Timeline:
    """What `claim_timeline` read from one trace."""

    path: Path
    source: str
    tracks: dict[str, ClaimTrack]
    first_seq: int
    last_seq: int
    """x positions: the index of each event in the trace with block events folded
    (`FOLDED_EVENTS`); rejections are reported by the trace's own `seq`."""
    step_starts: list[tuple[int, int]]
    """(x, engine step) at the first event of each engine step, when the trace has them."""
    rejection: str | None = None


def claim_timeline(path: Path) -> Timeline:
    """Read the trace v1 file `path` and follow every claim through the refinement checker."""
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    header = json.loads(lines[0])
    checker = Checker(usable_blocks=header.get("usable_blocks"), block_size=header.get("block_size"))
    decoder = event_decoder()
    tracks: dict[str, ClaimTrack] = {}
    step_starts: list[tuple[int, int]] = []
    rejection = None
    seqs: list[int] = []
    position = -1
    for index, raw in enumerate(lines[1:]):
        document = json.loads(raw)
        if document.get("event") not in FOLDED_EVENTS or position < 0:
            position += 1
        seq = document["seq"]
        try:
            checker.feed(decoder.decode(raw), line=index + 2, index=index)
        except Rejection as rejected:
            rejection = (
                f"seq {document['seq']}: [{rejected.counterexample.rule}] {rejected.counterexample.message}"
            )
            break
        seq = position
        seqs.append(seq)
        step = document.get("engine_step")
        if isinstance(step, int) and (not step_starts or step_starts[-1][1] != step):
            step_starts.append((seq, step))
        for claim_id, claim in checker.claims.items():
            _extend(tracks.setdefault(claim_id, ClaimTrack(claim_id)), seq, Phase(claim.phase))
        for claim_id in _marked_claims(document):
            tracks.setdefault(claim_id, ClaimTrack(claim_id)).marks.append((seq, document["event"]))
    return Timeline(
        path=path,
        source=str(header.get("source", "")),
        tracks=tracks,
        first_seq=seqs[0] if seqs else 0,
        last_seq=seqs[-1] if seqs else 0,
        step_starts=step_starts,
        rejection=rejection,
    )


def _extend(track: ClaimTrack, seq: int, phase: Phase) -> None:
    if track.segments and track.segments[-1].phase is phase:
        last = track.segments[-1]
        track.segments[-1] = Segment(last.start_seq, seq, phase)
    elif phase is not Phase.absent:
        track.segments.append(Segment(seq, seq, phase))


def _marked_claims(document: dict) -> list[str]:
    name = document["event"]
    if name not in MARKED_EVENTS:
        return []
    if name == "active_request_refused":
        return [str(c) for c in document.get("blocking_claim_ids") or []]
    claim_id = document.get("claim_id")
    return [str(claim_id)] if claim_id else []


STORY_EVENTS = {
    "resident_claim_offloaded": "offloaded",
    "resident_claim_restored": "restored",
    "resident_claim_restoration_failed": "a restore failed",
    "active_request_refused": "a request refused naming it",
    "resident_claim_harmed": "harmed",
}
"""Marked events a story counts, and how it says them."""


def story(timeline: Timeline) -> str:
    """The timeline in words, one clause per claim: the phases it went through in order, and
    how often the events a reader looks for happened to it; then how the check ended."""
    clauses = []
    for claim_id, track in timeline.tracks.items():
        phases: list[str] = []
        for segment in track.segments:
            if not phases or phases[-1] != str(segment.phase):
                phases.append(str(segment.phase))
        counts = Counter(name for _, name in track.marks if name in STORY_EVENTS)
        happened = ", ".join(
            STORY_EVENTS[name] + (f" x{count}" if count > 1 else "") for name, count in counts.items()
        )
        clauses.append(f"{claim_id}: {' > '.join(phases)}" + (f" ({happened})" if happened else ""))
    ending = (
        f"the checker REJECTED the trace at {timeline.rejection}"
        if timeline.rejection
        else "every event was accepted by the checker"
    )
    return "; ".join(clauses) + f". {ending[0].upper()}{ending[1:]}."


def render_timeline(timeline: Timeline, target: Path, *, title: str) -> Path:
    """One row per claim (first claim on top): phase bars over seq, event markers on top."""
    plt = pyplot()
    from matplotlib.patches import Patch

    claims = list(timeline.tracks)
    figure, axes = plt.subplots(figsize=(13, max(5.0, 2.6 + 1.1 * len(claims))))
    phases_shown: list[Phase] = []
    marks_shown: dict[str, tuple[str, str]] = {}
    for row, claim_id in enumerate(claims):
        track = timeline.tracks[claim_id]
        for number, segment in enumerate(track.segments):
            following = track.segments[number + 1].start_seq if number + 1 < len(track.segments) else None
            end = following if following is not None else timeline.last_seq + 1
            axes.broken_barh(
                [(segment.start_seq, end - segment.start_seq)],
                (row - 0.3, 0.6),
                facecolors=PHASE_COLOURS[segment.phase],
                edgecolor="#525252",
                lw=0.6,
            )
            if segment.phase not in phases_shown:
                phases_shown.append(segment.phase)
        for seq, name in track.marks:
            label, marker, colour = MARKED_EVENTS[name]
            axes.scatter(seq, row, marker=marker, s=110, color=colour, edgecolor="black", lw=0.6, zorder=4)
            marks_shown[label] = (marker, colour)
    axes.set_yticks(range(len(claims)), claims)
    axes.set_ylim(len(claims) - 0.4, -0.6)
    axes.set_xlim(timeline.first_seq - 1, timeline.last_seq + 2)
    axes.set_xlabel("events in trace order (block_stored / block_removed folded into the event before)")
    axes.set_ylabel("claim")
    axes.grid(axis="x", alpha=0.3)
    if len(timeline.step_starts) > 1:
        top = axes.secondary_xaxis("top")
        every = max(1, len(timeline.step_starts) // 15)
        starts = timeline.step_starts[::every]
        top.set_xticks([seq for seq, _ in starts], [str(step) for _, step in starts])
        top.set_xlabel("engine step (first event of the step)")
    phase_handles = [
        Patch(facecolor=PHASE_COLOURS[p], edgecolor="#525252", label=str(p)) for p in phases_shown
    ]
    mark_handles = [
        plt.Line2D([], [], ls="", marker=m, color=c, markeredgecolor="black", markersize=10, label=label)
        for label, (m, c) in marks_shown.items()
    ]
    first = axes.legend(
        handles=phase_handles, title="phase (from the checker)", loc="upper left", bbox_to_anchor=(1.01, 1.0)
    )
    axes.add_artist(first)
    if mark_handles:
        axes.legend(handles=mark_handles, title="event", loc="lower left", bbox_to_anchor=(1.01, 0.0))
    import textwrap

    subtitle = textwrap.fill(story(timeline), 130)
    axes.set_title(f"{title} ({timeline.source})\n{subtitle}", fontsize=11)
    figure.tight_layout()
    return save(figure, target)
