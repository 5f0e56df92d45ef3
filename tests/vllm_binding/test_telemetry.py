"""The trace writer: header first, validated events, one seq counter, writes on flush; an
invalid event fails the sink."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from kvclaims.refinement import check_trace
from kvclaims.spec.claims import LeadingPrefixAtLeast
from kvclaims.spec.trace import (
    ActiveRequestAdmitted,
    ActiveRequestRefused,
    BlockRemoved,
    CloseReason,
    RequestFinished,
    ResidentClaimAccepted,
    ResidentClaimHarmed,
    TraceHeader,
)
from kvclaims.vllm_binding.telemetry import NullSink, TraceSink

HEADER = TraceHeader(kvclaims_trace=1, source="test", usable_blocks=10, block_size=16)


def test_events_are_numbered_and_written_on_flush(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    sink = TraceSink(path.open("wb"), HEADER, flush_seconds=None)
    sink.emit(ActiveRequestAdmitted, request_id="r", active_live_blocks=3)
    assert len(path.read_text().splitlines()) == 1  # header only until flush
    sink.emit(RequestFinished, request_id="r", status="length", engine_step=4)
    sink.flush()
    sink.close(CloseReason.engine_shutdown)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["kvclaims_trace"] == 1
    assert [line["seq"] for line in lines[1:]] == [0, 1, 2]
    assert lines[2]["engine_step"] == 4  # extra context is kept
    assert lines[3]["event"] == "trace_closed" and lines[3]["reason"] == "engine_shutdown"
    assert check_trace(path).outcome == "accepted"


def test_an_idle_sink_reaches_the_file_without_another_call(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    sink = TraceSink.open(path, HEADER)
    sink.emit(ActiveRequestAdmitted, request_id="r", active_live_blocks=3)
    sink.emit(RequestFinished, request_id="r", status="length")
    sink.flush()  # what the scheduler does when an entry point returns; then the engine idles:
    # nothing more, and the flusher thread must get both lines out (bound:
    # tracefile.FLUSH_SECONDS; measured in bench/trace_latency.py, not timed here)
    deadline = time.monotonic() + 10
    while len(path.read_text().splitlines()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(path.read_text().splitlines()) == 3
    sink.close()


def test_an_invalid_event_fails_the_sink_and_never_reaches_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    failures: list[str] = []
    sink = TraceSink.open(path, HEADER)
    sink._file._on_failure = failures.append
    sink.emit(ActiveRequestAdmitted, request_id="r", active_live_blocks=3)
    sink.emit(ActiveRequestAdmitted, request_id="", active_live_blocks=-1)  # a binding bug
    sink.emit(RequestFinished, request_id="r", status="length")
    sink.flush()
    sink.close()  # writes what is queued: the valid event, then the sink fails at the invalid one
    assert sink.failure == failures[0] == "an event could not be encoded (ValidationError)"
    assert len(failures) == 1
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("event") for line in lines[1:]] == ["active_request_admitted"]  # no close
    verdict = check_trace(path)
    assert verdict.outcome == "inconclusive" and "truncated" in verdict.reason
    sink.emit(RequestFinished, request_id="r", status="length")  # a failed sink takes nothing
    assert path.read_text().count("\n") == 2


def test_nothing_is_written_after_close(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    sink = TraceSink.open(path, HEADER)
    sink.close()
    sink.emit(RequestFinished, request_id="r", status="x")
    sink.flush()
    sink.close(CloseReason.SIGTERM)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1]) | {"t_ns": 0} == {
        "seq": 0,
        "t_ns": 0,
        "event": "trace_closed",
        "reason": "closed",
    }


def test_the_null_sink_is_disabled() -> None:
    sink = NullSink()
    assert not sink.enabled
    sink.emit(RequestFinished, request_id="r", status="x")
    sink.close()


@pytest.mark.parametrize(
    ("event_type", "fields"),
    [
        (ActiveRequestAdmitted, {"request_id": "r", "active_live_blocks": 3, "engine_step": 9}),
        (RequestFinished, {"request_id": "r", "status": "abort", "stop_reason": None}),
        (
            BlockRemoved,
            {"block_id": 4, "block_hash": "ab", "claim_id": "c", "position": 0, "cache_level": None},
        ),
        (ResidentClaimHarmed, {"claim_id": "c", "leading_blocks": 1, "required_blocks": 4}),
        (
            ActiveRequestRefused,
            {
                "request_id": "r",
                "reason": "capacity",
                "blocking_claim_ids": ["a", "b"],
                "protected_resident_blocks": 60,
                "active_live_blocks_required": 70,
                "resident_plus_active_blocks": 130,
                "usable_blocks": 80,
                "capacity_shortfall_blocks": 50,
            },
        ),
        (
            ResidentClaimAccepted,
            {
                "claim_id": "c",
                "owner_scope": "o",
                "object_id": "c",
                "mode": "hard_protected",
                "footprint_blocks": 4,
                "predicate": LeadingPrefixAtLeast(blocks=4),
                "request_id": "r",
            },
        ),
    ],
)
def test_each_line_is_the_models_own_json(event_type: type, fields: dict[str, object]) -> None:
    stream = io.BytesIO()
    sink = TraceSink(stream, HEADER, flush_seconds=None)  # no flusher: flush() encodes at once
    sink.emit(event_type, **fields)
    sink.flush()
    line = json.loads(stream.getvalue().splitlines()[1])
    expected = event_type(seq=0, t_ns=line["t_ns"], **fields).model_dump_json(exclude_none=True)
    assert line == json.loads(expected)
    assert list(line) == list(json.loads(expected))  # same field order


def test_a_new_stream_never_overwrites_the_previous_one(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    killed = TraceSink.open(path, HEADER)
    killed.emit(ActiveRequestAdmitted, request_id="r", active_live_blocks=3)
    killed.flush()
    killed._file.flush()  # what the flusher does; then the engine is killed (no close)
    for _ in range(2):  # two restarts, each with a complete stream
        restarted = TraceSink.open(path, HEADER)
        restarted.emit(ActiveRequestAdmitted, request_id="r", active_live_blocks=3)
        restarted.emit(RequestFinished, request_id="r", status="length")
        restarted.close()
    kept = tmp_path / "t.prev1.ndjson"
    assert '"request_id":"r"' in kept.read_text() and "trace_closed" not in kept.read_text()
    verdict = check_trace(kept)
    assert verdict.outcome == "inconclusive" and "truncated" in verdict.reason
    assert check_trace(tmp_path / "t.prev2.ndjson").outcome == "accepted"
    assert check_trace(path).outcome == "accepted"
