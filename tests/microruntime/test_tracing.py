"""Trace sinks write NDJSON the readers and the trace v1 models accept."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvclaims.microruntime.tracing import (
    EventCounter,
    TraceBuffer,
    read_trace_lines,
    trace_header,
    write_trace,
)
from kvclaims.spec.errors import InputError
from kvclaims.spec.trace import TraceHeader


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    header = trace_header(80, 16, "test")
    events = [{"seq": 1, "event": "request_finished", "request_id": "r", "status": "ok"}]
    lines = list(read_trace_lines(write_trace(tmp_path / "t.ndjson", header, events)))
    *written, (_, closing) = lines
    assert [obj for _, obj in written] == [header, *events]
    assert closing["event"] == "trace_closed" and closing["seq"] == 2 and closing["reason"] == "closed"
    TraceHeader.model_validate(lines[0][1])


def test_bad_lines_are_located_input_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.ndjson"
    path.write_text('{"kvclaims_trace": 1}\n{not json\n')
    with pytest.raises(InputError, match=":2"):
        list(read_trace_lines(path))
    path.write_text("[1, 2]\n")
    with pytest.raises(InputError, match="JSON object"):
        list(read_trace_lines(path))


def test_buffer_and_counter_sinks() -> None:
    buffer, counter = TraceBuffer(), EventCounter()
    for sink in (buffer.append, counter):
        sink({"seq": 1, "event": "block_stored"})
        sink({"seq": 2, "event": "block_stored"})
    assert buffer.counts() == counter.counts == {"block_stored": 2}
