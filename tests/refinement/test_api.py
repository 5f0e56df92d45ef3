"""`check_trace` end to end on small hand-written traces: the four outcomes and their reasons."""

from __future__ import annotations

from pathlib import Path

import kvclaims
from kvclaims.refinement import Outcome, check_bytes, check_trace
from kvclaims.refinement.rendering import render_verdict
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.vocabulary import ConformanceRule


def hard_claim(trace: TraceBuilder, claim_id: str = "claim:a", blocks: int = 4) -> TraceBuilder:
    return trace.accept(claim_id, blocks=blocks).store_prefix(claim_id, blocks).materialize(claim_id, blocks)


def test_a_conforming_trace_is_accepted_through_the_package_entry_point(tmp_path: Path) -> None:
    trace = hard_claim(TraceBuilder(usable_blocks=80)).admit("r1").reuse("r1", "claim:a", 4).finish("r1")
    path = tmp_path / "run.ndjson"
    path.write_bytes(trace.ndjson())
    verdict = kvclaims.check_trace(path)
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.format == "kvclaims-v1"
    # every event line counts, trace_closed too
    assert (verdict.events, verdict.claims, verdict.requests) == (len(trace.events) + 1, 1, 1)


def test_a_rejection_names_rule_line_state_and_alternatives() -> None:
    trace = hard_claim(TraceBuilder(usable_blocks=80)).claim_event("demoted", "claim:a")
    trace.remove_block("claim:a", 0).claim_event("harmed", "claim:a", leading_blocks=0, required_blocks=4)
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.rejected
    counterexample = verdict.counterexample
    assert counterexample is not None
    assert counterexample.rule is ConformanceRule.lifecycle
    assert counterexample.line == len(trace.events) + 1  # the header is line 1
    assert counterexample.event == "resident_claim_harmed"
    assert counterexample.state_before.startswith("demoted")
    assert "harm" not in counterexample.allowed and "release" in counterexample.allowed
    lines = [p.line for p in counterexample.minimal_prefix]
    assert lines[-1] == counterexample.line and "resident_claim_demoted" in {
        p.event for p in counterexample.minimal_prefix
    }


def test_a_missing_file_is_invalid_not_an_exception(tmp_path: Path) -> None:
    assert check_trace(tmp_path / "absent.ndjson").outcome is Outcome.invalid


def test_an_unknown_event_type_makes_an_otherwise_clean_trace_inconclusive() -> None:
    trace = hard_claim(TraceBuilder(usable_blocks=80)).add("resident_claim_teleported", claim_id="claim:a")
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.inconclusive and "teleported" in verdict.reason


def test_a_rejection_after_an_unknown_event_still_rejects() -> None:
    trace = hard_claim(TraceBuilder(usable_blocks=80)).add("something_new").accept("claim:a")
    assert check_bytes(trace.ndjson()).outcome is Outcome.rejected


def test_a_rejection_counts_the_events_up_to_the_offending_one() -> None:
    """The events and steps of a rejected verdict stop at the offending event, even when it
    sits in the middle of a decoded run (the rest of the run was never checked)."""
    trace = TraceBuilder(usable_blocks=80)
    trace.accept("claim:a", mode="hard_protected", blocks=2)
    trace.store_prefix("claim:a", 2)
    trace.materialize("claim:a", 2)
    trace.claim_event("demoted", "claim:a")
    trace.claim_event("harmed", "claim:a", leading_blocks=2, required_blocks=2)  # after demotion: #5
    for number in range(20):
        trace.admit(f"request:{number}")
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.rejected, verdict
    assert verdict.counterexample.event_index == 5
    assert (verdict.events, verdict.steps) == (6, 6)


def test_an_end_of_trace_rejection_says_so_instead_of_line_zero() -> None:
    trace = TraceBuilder(usable_blocks=80)
    trace.accept("claim:a", mode="hard_protected", blocks=2)
    trace.materialize("claim:a", 2)
    trace.remove_block("claim:a", 0)
    verdict = check_bytes(trace.ndjson())
    assert verdict.counterexample.event_index == -1
    assert verdict.reason.startswith("end of trace: [no_silent_harm]")
    assert "at the end of the trace" in render_verdict(verdict)
    assert verdict.events == 4  # three events and trace_closed
