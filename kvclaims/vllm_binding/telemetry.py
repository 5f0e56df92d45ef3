"""The engine's trace sink: kvclaims trace v1 (NDJSON) with one sequence counter.

Events are built (and so validated) with the `kvclaims.spec.trace` models when emitted, so
every line the engine writes conforms to the committed schema; they are numbered in emission
order and queued as validated models in the trace file (`kvclaims.spec.tracefile.TraceFile`),
which serializes them in batches (an emit on a hot path, such as a fail-closed refusal, costs a
validation, not a serialization). The scheduler emits only where its state is consistent
(around vLLM's entry points) and calls `flush()` when an outermost entry point returns; the
trace file's flusher thread gets those lines to the operating system at most
`tracefile.FLUSH_SECONDS` later, also on an idle engine. `close(reason)` ends
the trace with `trace_closed`; a crash or a kill leaves a trace without it, which refinement
reports as truncated. Lines are never reordered.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, Protocol

from kvclaims.spec.trace import CloseReason, TraceHeader, _Event
from kvclaims.spec.tracefile import FLUSH_SECONDS, TraceFile

_Queued = tuple[type[_Event], Any]


def _encode(queued: _Queued) -> bytes:
    kind, event = queued
    return kind.__pydantic_serializer__.to_json(event, exclude_none=True)


class EventSink(Protocol):
    """Where claim telemetry goes. `enabled` is False for the null sink, so the hot path can
    skip building events nobody reads."""

    enabled: bool

    def emit(self, event_type: type[_Event], **fields: Any) -> None: ...

    def flush(self) -> None: ...

    def close(self, reason: CloseReason = CloseReason.closed) -> None: ...


class NullSink:
    """No trace: events are neither built nor written."""

    enabled = False

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
        del event_type, fields

    def flush(self) -> None:
        pass

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        del reason


class TraceSink:
    """A trace v1 file: the header on open, then one validated event per line, then
    `trace_closed` on `close()`.

    Invariants: `seq` starts at 0 and increases by one per event; lines reach the file in
    `seq` order; after `close()` nothing more is written.
    """

    enabled = True

    def __init__(
        self, stream: IO[bytes], header: TraceHeader, *, flush_seconds: float | None = FLUSH_SECONDS
    ) -> None:
        header_line = header.model_dump_json(exclude_none=True).encode()
        self._file = TraceFile(stream, header_line, _encode, flush_seconds=flush_seconds)
        self._seq = 0

    @classmethod
    def open(cls, path: str | Path, header: TraceHeader) -> TraceSink:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        return cls(target.open("wb"), header)

    @property
    def next_seq(self) -> int:
        return self._seq

    @property
    def closed(self) -> bool:
        return self._file.closed

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
        """Validate one event against its trace v1 model and queue it under the next seq."""
        if self._file.closed:
            return
        fields["seq"] = self._seq
        fields.setdefault("t_ns", time.time_ns())  # the arbiter stamps its own clock
        # The model's own validator, called directly: the same validation as
        # `event_type(**fields)`, a third the cost.
        event = event_type.__pydantic_validator__.validate_python(fields)
        self._file.append((event_type, event), self._seq)
        self._seq += 1

    def flush(self) -> None:
        """Hand queued lines to the file (the flusher thread syncs them to the OS)."""
        self._file.hand_over()

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        self._file.close(reason)
