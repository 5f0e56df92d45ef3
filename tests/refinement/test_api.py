"""`check_trace` end to end on small hand-written traces: the four outcomes and their reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvclaims
from kvclaims.refinement import FORMATS, Outcome, check_bytes, check_trace
from kvclaims.refinement.rendering import render_verdict
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.tables import KV_EVENT_FORMATS
from kvclaims.spec.vocabulary import ConformanceRule, TraceFormat


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


def test_a_rejection_after_an_unknown_event_names_the_unknown_event() -> None:
    """The unknown event may be what the runtime did instead, so the later line is not blamed:
    the verdict is inconclusive at the unknown line, with a did-you-mean, and the later
    rejection is a note. Its twin without the unknown event is rejected at that later line."""
    unknown = hard_claim(TraceBuilder(usable_blocks=80)).add("resident_claim_demotd", claim_id="claim:a")
    unknown_line = len(unknown.events) + 1  # the header is line 1
    verdict = check_bytes(unknown.accept("claim:a").ndjson())
    assert verdict.outcome is Outcome.inconclusive and verdict.finding is not None
    assert verdict.finding.line == unknown_line and verdict.finding.field == "event"
    assert "did you mean 'resident_claim_demoted'" in verdict.finding.message
    assert any(f"line {unknown_line + 1}" in note for note in verdict.notes)
    twin = check_bytes(hard_claim(TraceBuilder(usable_blocks=80)).accept("claim:a").ndjson())
    assert twin.outcome is Outcome.rejected


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


# --- what check_trace reads: paths, bytes, file objects; gzip, BOM; auto-detection errors --------


def _valid() -> bytes:
    trace = hard_claim(TraceBuilder(usable_blocks=80))
    return trace.admit("r1").reuse("r1", "claim:a", 4).finish("r1").ndjson()


def test_a_path_bytes_and_file_objects_get_the_same_verdict(tmp_path: Path) -> None:
    data = _valid()
    path = tmp_path / "t.ndjson"
    path.write_bytes(data)
    import io
    import os

    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    with path.open("rb") as handle, os.fdopen(read, "rb", buffering=0) as pipe:
        verdicts = [check_trace(path), check_trace(data), check_trace(handle), check_trace(pipe)]
        assert not handle.closed  # the caller's file stays the caller's
    verdicts.append(check_trace(io.BytesIO(data)))
    # nine events and trace_closed, which is no model step
    assert {(v.outcome, v.events, v.steps) for v in verdicts} == {(Outcome.accepted, 10, 9)}


def test_gzip_and_a_byte_order_mark_are_read_like_the_plain_file(tmp_path: Path) -> None:
    import gzip

    data = _valid()
    path = tmp_path / "t.ndjson.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + data))
    for trace in (path, b"\xef\xbb\xbf" + data, gzip.compress(data)):
        verdict = check_trace(trace)
        assert (verdict.outcome, verdict.events) == (Outcome.accepted, 10), (
            verdict.reason
        )  # with trace_closed


def test_a_truncated_gzip_file_is_invalid_and_says_gzip() -> None:
    import gzip

    compressed = gzip.compress(_valid())
    verdict = check_trace(compressed[: len(compressed) // 2])
    assert verdict.outcome is Outcome.invalid and "gzip" in verdict.reason


AUTO_ERRORS = {
    "empty file": (b"", "empty file"),
    "missing header": (b"\n".join(_valid().split(b"\n")[1:]), "header line is missing"),
    "over-long line 1": (b'{"kvclaims_trace":1,"x":"' + b"a" * (1 << 21) + b'"}\n', "byte cap"),
    "not JSON": (b"hello\n", "not valid JSON"),
    "not UTF-8": (b'{"kvclaims_trace":1,"source":"\xff"}\n', "UTF-8"),
}


@pytest.mark.parametrize("name", sorted(AUTO_ERRORS))
def test_auto_detection_reports_the_nearest_formats_own_error(name: str) -> None:
    data, cause = AUTO_ERRORS[name]
    verdict = check_trace(data)
    assert verdict.outcome is Outcome.invalid
    assert cause in verdict.reason and "not a trace in any known format" not in verdict.reason


def test_a_missing_file_names_the_resolved_path(tmp_path: Path) -> None:
    verdict = check_trace(tmp_path / "absent.ndjson")
    assert verdict.outcome is Outcome.invalid and str(tmp_path / "absent.ndjson") in verdict.reason


def test_an_unknown_event_before_an_end_of_trace_rejection_is_named_too() -> None:
    """Loss of a hard-protected claim's block owes a harm report by the end of the trace; an
    unknown event before the end may be that report, so the verdict names it."""
    lossy = hard_claim(TraceBuilder(usable_blocks=80)).remove_block("claim:a", 0)
    assert check_bytes(lossy.ndjson()).outcome is Outcome.rejected
    verdict = check_bytes(lossy.add("resident_claim_harmd", claim_id="claim:a").ndjson())
    assert verdict.outcome is Outcome.inconclusive and "resident_claim_harmed" in verdict.reason
    assert any(note.startswith("the end of the trace breaks") for note in verdict.notes)


# --- KV-event captures without a registry, and files detection cannot tell ----------------------

RUNTIME_CAPTURES = Path(__file__).parents[2] / "descriptors" / "evidence" / "runtime-kv-events"


@pytest.mark.parametrize(
    ("capture", "format", "read_as"),
    [
        ("sglang-0.5.23.kvevents", "auto", "vllm-kv-events"),
        ("sglang-0.5.23.kvevents", "sglang-kv-events", "sglang-kv-events"),
        ("trtllm-serializer.jsonl", "auto", "trtllm-kv-events"),
    ],
)
def test_a_kv_event_capture_without_a_registry_is_inconclusive_and_says_why(
    capture: str, format: str, read_as: str
) -> None:
    path = RUNTIME_CAPTURES / capture
    verdict = check_trace(path, format=format)
    assert verdict.outcome is Outcome.inconclusive and verdict.format == read_as
    assert verdict.finding is not None and verdict.finding.field == "registry"
    assert str(path) in verdict.reason and "needs a claim registry (--registry FILE)" in verdict.reason


def test_a_first_line_that_fits_two_formats_is_inconclusive_not_guessed() -> None:
    both = b'{"kvclaims_trace": 1, "event_id": 0, "data": {"type": "created"}, "window_size": 1}\n'
    verdict = check_bytes(both)
    assert verdict.outcome is Outcome.inconclusive
    assert "fits several formats (kvclaims-v1, trtllm-kv-events)" in verdict.reason
    assert verdict.finding is not None and verdict.finding.line == 1


def test_the_spec_names_every_format_the_checker_reads() -> None:
    """Descriptor anchors name formats from the spec's vocabulary: it must be the checker's."""
    assert [f.value for f in TraceFormat] == list(FORMATS)
    assert {str(f) for f in KV_EVENT_FORMATS} <= set(FORMATS)
