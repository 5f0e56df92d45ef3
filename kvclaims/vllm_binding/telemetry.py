"""The engine's trace writer: kvclaims trace v1 (NDJSON) with one sequence counter.

Events are built (and so validated) with the `kvclaims.spec.trace` models when emitted, so
every line the engine writes conforms to the committed schema; they are numbered in emission
order, queued as validated models, and serialized and handed to the file by `flush()` (an emit
on a hot path, such as a fail-closed refusal, costs a validation, not a serialization). The
scheduler emits only where its state is consistent (around vLLM's entry points) and calls
`flush()` when an outermost entry point returns, at most once per engine step, and on close.
Lines reach the operating system at most `SYNC_SECONDS` apart and on `close()`: a crash can
lose (or cut short) the lines of that last fraction of a second, which refinement then reports
as a truncated trace; it never reorders lines.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, Protocol

from kvclaims.spec.trace import TraceHeader, _Event

SYNC_SECONDS = 0.5


class EventSink(Protocol):
    """Where claim telemetry goes. `enabled` is False for the null sink, so the hot path can
    skip building events nobody reads."""

    enabled: bool

    def emit(self, event_type: type[_Event], **fields: Any) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """No trace: events are neither built nor written."""

    enabled = False

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
        del event_type, fields

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class TraceSink:
    """A trace v1 file: the header on open, then one validated event per line.

    Invariants: `seq` starts at 0 and increases by one per event; lines reach the file in
    `seq` order; after `close()` nothing more is written.
    """

    enabled = True

    def __init__(self, stream: IO[bytes], header: TraceHeader) -> None:
        self._stream = stream
        self._seq = 0
        self._pending: list[tuple[type[_Event], Any]] = []
        self._closed = False
        self._synced = time.monotonic()
        stream.write(header.model_dump_json(exclude_none=True).encode() + b"\n")
        stream.flush()

    @classmethod
    def open(cls, path: str | Path, header: TraceHeader) -> TraceSink:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        return cls(target.open("wb"), header)

    @property
    def next_seq(self) -> int:
        return self._seq

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
        """Validate one event against its trace v1 model and queue it under the next seq."""
        if self._closed:
            return
        fields["seq"] = self._seq
        fields["t_ns"] = time.time_ns()
        # The model's own validator and serializer, called directly: the same validation and
        # JSON as `event_type(**fields).model_dump_json(exclude_none=True)`, a third the cost.
        event = event_type.__pydantic_validator__.validate_python(fields)
        self._pending.append((event_type, event))
        self._seq += 1

    def flush(self) -> None:
        """Hand queued lines to the file; sync to the OS if `SYNC_SECONDS` passed."""
        if self._pending and not self._closed:
            lines = [
                kind.__pydantic_serializer__.to_json(event, exclude_none=True)
                for kind, event in self._pending
            ]
            lines.append(b"")
            self._stream.write(b"\n".join(lines))
            self._pending.clear()
            now = time.monotonic()
            if now - self._synced >= SYNC_SECONDS:
                self._stream.flush()
                self._synced = now

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._closed = True
            self._stream.close()
