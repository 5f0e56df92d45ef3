"""The one trace writer: header first, events in order, batches, the flusher's bound (and its
encoding off the owner's thread), and `trace_closed` as the last line."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

from pytest import MonkeyPatch

from kvclaims.refinement import Outcome, check_trace
from kvclaims.spec import tracefile
from kvclaims.spec.trace import CloseReason
from kvclaims.spec.tracefile import BATCH_EVENTS, TraceFile, closing_line

HEADER = b'{"kvclaims_trace":1,"usable_blocks":8}'


def encode(event: dict[str, object]) -> bytes:
    return json.dumps(event).encode()


def finished(seq: int) -> dict[str, object]:
    return {"seq": seq, "event": "request_finished", "request_id": f"r{seq}", "status": "x"}


def admitted(seq: int) -> dict[str, object]:
    return {
        "seq": seq,
        "event": "active_request_admitted",
        "request_id": f"r{seq + 1}",
        "active_live_blocks": 1,
    }


class Unclosable(io.BytesIO):
    def close(self) -> None:  # keep the bytes readable after the writer closes
        pass


def test_close_writes_everything_then_trace_closed_once() -> None:
    stream = Unclosable()
    trace: TraceFile[dict[str, object]] = TraceFile(stream, HEADER, encode, flush_seconds=None)
    for seq in range(0, 6, 2):
        trace.append(admitted(seq), seq)
        trace.append(finished(seq + 1), seq + 1)
    trace.close(CloseReason.SIGINT)
    trace.close(CloseReason.atexit)  # idempotent: the first reason stands
    trace.append(finished(99), 99)  # ignored once closed
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0] == json.loads(HEADER)
    assert [line["seq"] for line in lines[1:]] == list(range(7))
    assert lines[-1]["event"] == "trace_closed" and lines[-1]["reason"] == "SIGINT"


def test_a_full_batch_is_handed_over_without_a_call() -> None:
    stream = Unclosable()
    trace: TraceFile[dict[str, object]] = TraceFile(stream, HEADER, encode, flush_seconds=None)
    for seq in range(BATCH_EVENTS):
        trace.append(finished(seq), seq)
    assert stream.getvalue().count(b"\n") == 1 + BATCH_EVENTS


def test_the_flusher_gets_an_idle_writers_lines_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    trace: TraceFile[dict[str, object]] = TraceFile(path.open("wb"), HEADER, encode, flush_seconds=0.05)
    trace.append(admitted(0), 0)
    trace.hand_over()  # as a runtime does at the end of a step; then it goes idle
    deadline = time.monotonic() + 10  # generous: the bound is measured in bench/, not here
    while path.read_bytes().count(b"\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.read_bytes().count(b"\n") == 2
    assert check_trace(path).outcome is Outcome.inconclusive  # still open: truncated
    assert check_trace(path, open=True).outcome is Outcome.accepted
    trace.close()
    assert check_trace(path).outcome is Outcome.accepted


def test_the_closing_line_is_a_valid_event_with_the_next_seq() -> None:
    line = json.loads(closing_line(7, CloseReason.engine_shutdown, t_ns=5))
    assert line == {"seq": 7, "t_ns": 5, "event": "trace_closed", "reason": "engine_shutdown"}
    assert "t_ns" not in json.loads(closing_line(0))


def test_with_a_flusher_the_owner_only_queues_and_the_flusher_encodes() -> None:
    stream = Unclosable()
    threads: list[str] = []

    def encode_where(event: dict[str, object]) -> bytes:
        threads.append(threading.current_thread().name)
        return encode(event)

    trace: TraceFile[dict[str, object]] = TraceFile(stream, HEADER, encode_where, flush_seconds=0.02)
    for seq in range(3):
        trace.append(finished(seq), seq)
    trace.hand_over()
    assert stream.getvalue().count(b"\n") == 1  # nothing encoded on the owner's thread
    deadline = time.monotonic() + 10
    while stream.getvalue().count(b"\n") < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads == ["kvclaims-trace-flush"] * 3
    trace.close()
    assert [json.loads(line)["seq"] for line in stream.getvalue().splitlines()[1:]] == [0, 1, 2, 3]


def test_a_backlog_the_flusher_has_not_taken_is_written_by_the_owner(monkeypatch: MonkeyPatch) -> None:
    monkeypatch.setattr(tracefile, "MAX_BACKLOG_EVENTS", 4)
    stream = Unclosable()
    trace: TraceFile[dict[str, object]] = TraceFile(stream, HEADER, encode, flush_seconds=3600)
    for seq in range(4):
        trace.append(finished(seq), seq)
    trace.hand_over()
    assert stream.getvalue().count(b"\n") == 1  # within the bound: left for the flusher
    trace.append(finished(4), 4)
    trace.hand_over()
    assert stream.getvalue().count(b"\n") == 6  # over it: the owner wrote the whole backlog
    trace.close()


def test_an_entry_that_cannot_be_encoded_ends_the_file_after_the_valid_ones(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    failures: list[str] = []

    def strict(event: dict[str, object]) -> bytes:
        if event["request_id"] == "r2":
            raise ValueError("request r2 is malformed")
        return encode(event)

    trace: TraceFile[dict[str, object]] = TraceFile(
        path.open("wb"), HEADER, strict, flush_seconds=None, on_failure=failures.append
    )
    for seq in range(4):
        trace.append(finished(seq), seq)
    trace.hand_over()
    assert failures == [trace.failure] == ["an event could not be encoded (ValueError)"]
    trace.append(finished(4), 4)  # dropped: the file is failed
    trace.close()
    assert [json.loads(line)["seq"] for line in path.read_bytes().splitlines()[1:]] == [0, 1]
    assert check_trace(path).outcome is Outcome.inconclusive  # truncated: no trace_closed
