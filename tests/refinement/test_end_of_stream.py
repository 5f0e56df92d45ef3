"""The end-of-stream rule: a kvclaims-v1 trace is complete only when it ends with
`trace_closed`; without it the trace is truncated (inconclusive) unless judged open, and
nothing may follow the close."""

from __future__ import annotations

import io
from pathlib import Path

from kvclaims.refinement import Outcome, check_bytes, check_trace
from kvclaims.refinement.reader import MAX_LINE_BYTES
from kvclaims.refinement.testing import TraceBuilder, generate_valid_trace
from kvclaims.refinement.verdict import ErrorClass
from kvclaims.spec.vocabulary import ConformanceRule


def served() -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("A", blocks=2).store_prefix("A", 2).materialize("A", 2)
    return trace.admit("r1").reuse("r1", "A", 2).finish("r1")


def test_a_closed_trace_is_accepted() -> None:
    assert check_bytes(served().ndjson()).outcome is Outcome.accepted


def test_a_trace_without_its_close_is_truncated_not_accepted() -> None:
    verdict = check_bytes(served().ndjson(closed=False))
    assert verdict.outcome is Outcome.inconclusive
    assert verdict.error_class is ErrorClass.undecidable
    assert "truncated: the trace does not end with trace_closed" in verdict.reason


def test_judged_open_the_same_prefix_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "live.ndjson"
    path.write_bytes(served().ndjson(closed=False))
    assert check_trace(path, open=True).outcome is Outcome.accepted
    assert check_bytes(path.read_bytes(), open=True).outcome is Outcome.accepted


def test_a_cut_trace_owing_a_report_is_inconclusive_and_rejected_only_when_judged_open() -> None:
    # harm owed at the end: a cut file cannot tell whether the report was about to be written
    trace = TraceBuilder(usable_blocks=80).accept("A", blocks=2).store_prefix("A", 2).materialize("A", 2)
    trace.remove_block("A", 0)
    assert check_bytes(trace.ndjson(closed=False)).outcome is Outcome.inconclusive
    judged = check_bytes(trace.ndjson(closed=False), open=True)
    assert judged.outcome is Outcome.rejected
    assert judged.counterexample.rule is ConformanceRule.no_silent_harm
    assert check_bytes(trace.ndjson()).outcome is Outcome.rejected


def test_a_violation_before_the_cut_is_still_rejected() -> None:
    trace = served().finish("r1")  # finished twice
    verdict = check_bytes(trace.ndjson(closed=False))
    assert verdict.outcome is Outcome.rejected


def test_an_event_after_the_close_is_invalid() -> None:
    data = served().ndjson() + b'{"seq":99,"event":"request_finished","request_id":"r2","status":"x"}\n'
    verdict = check_bytes(data)
    assert verdict.outcome is Outcome.invalid
    assert verdict.error_class is ErrorClass.ordering
    assert verdict.finding.line == 10 and "follows trace_closed" in verdict.reason


def test_an_event_after_the_close_in_a_later_chunk_is_invalid() -> None:
    # the close and the next event in different read chunks (the fast path's runs)
    padding = b"x" * (MAX_LINE_BYTES // 8)
    tail = b'{"seq":99,"event":"block_stored","block_id":1,"block_hash":"%s"}\n' % padding
    verdict = check_bytes(served().ndjson() + tail)
    assert verdict.outcome is Outcome.invalid and "follows trace_closed" in verdict.reason


def test_a_second_close_and_an_unknown_event_after_the_close_are_invalid() -> None:
    closed = served().ndjson()
    again = closed + b'{"seq":99,"event":"trace_closed","reason":"closed"}\n'
    unknown = closed + b'{"seq":99,"event":"resident_claim_teleported"}\n'
    assert check_bytes(again).outcome is Outcome.invalid
    assert check_bytes(unknown).outcome is Outcome.invalid


def test_a_close_is_not_a_step_an_empty_closed_trace_is_inconclusive() -> None:
    verdict = check_bytes(TraceBuilder(usable_blocks=80).ndjson())
    assert verdict.outcome is Outcome.inconclusive
    assert verdict.steps == 0


def test_the_close_reason_must_be_one_the_format_defines() -> None:
    data = served().ndjson().replace(b'"reason":"closed"', b'"reason":"crashed"')
    assert check_bytes(data).outcome is Outcome.invalid


def test_generated_traces_end_closed_and_are_accepted() -> None:
    out = io.BytesIO()
    generate_valid_trace(out, 300, seed=3, usable_blocks=512, live_claims=8)
    data = out.getvalue()
    assert data.rstrip(b"\n").rsplit(b"\n", 1)[1].find(b'"event":"trace_closed"') > 0
    assert check_bytes(data).outcome is Outcome.accepted
    cut = data[: data.rstrip(b"\n").rfind(b"\n") + 1]
    assert check_bytes(cut).outcome is Outcome.inconclusive


def test_a_violation_before_a_close_that_something_follows_is_the_verdict() -> None:
    """The first violating line decides, whichever kind: a rule broken before `trace_closed`
    outranks the event after the close, in one read chunk as line by line (a line longer than
    its shortest form sends the chunk line by line); the same file without the violation is
    invalid there."""
    after = b'{"seq":99,"event":"request_finished","request_id":"r2","status":"x"}\n'
    violating = served().finish("r1").ndjson() + after  # finished twice, then closed, then more
    for data in (violating, violating.replace(b'"seq":1,', b'"seq": 1,')):
        verdict = check_bytes(data)
        assert verdict.outcome is Outcome.rejected, verdict.reason
        assert verdict.counterexample is not None and verdict.counterexample.line == 9
    twin = served().ndjson() + after
    assert check_bytes(twin).outcome is Outcome.invalid


def test_events_after_the_close_are_counted_alike_in_one_chunk_and_line_by_line() -> None:
    """An event after `trace_closed` ends the read at the close whatever the batching: the
    verdict (its line, its count of events read) is the same when the chunk is stepped whole and
    when a longer-than-shortest line makes the reader go line by line."""
    after = b"".join(
        b'{"seq":%d,"event":"request_finished","request_id":"r%d","status":"x"}\n' % (90 + n, n)
        for n in range(5)
    )
    whole = served().ndjson() + after
    verdicts = [check_bytes(data).to_json() for data in (whole, whole.replace(b'"seq":1,', b'"seq": 1,'))]
    assert verdicts[0] == verdicts[1]
    assert verdicts[0]["outcome"] == "invalid" and verdicts[0]["events"] == 8  # up to the close
