"""The engine's trace sink: kvclaims trace v1 (NDJSON) with one sequence counter.

Every event is validated against its `kvclaims.spec.trace` model before it is written, so
every line the engine writes conforms to the committed schema. Emitting only numbers the event
(emission order) and queues its fields in the trace file (`kvclaims.spec.tracefile.TraceFile`);
validation and serialization run on the trace file's flusher thread, in batches, off the
scheduler's critical path (an emit on a hot path, such as a fail-closed refusal, costs an
append). The fields are read there later: emitters pass values nobody changes afterwards
(numbers, strings, fresh lists, frozen models). The scheduler emits only where its state is
consistent (around vLLM's entry points) and calls `flush()` when an outermost entry point
returns; the flusher gets those lines to the operating system at most
`tracefile.FLUSH_SECONDS` later, also on an idle engine. `close(reason)` writes everything
queued and ends the trace with `trace_closed`; a crash or a kill leaves a trace without it,
which refinement reports as truncated. Lines are never reordered.

A trace that cannot be written (it cannot be opened, the OS refuses a write: a full disk, a
file-size limit, or an event fails its model's validation: a binding bug) makes the sink
`failure`d: the binding then rejects new claims with that reason (a promise nobody can observe
is not made) while vLLM keeps serving requests, and the server log says so once. The file
keeps the valid lines before the failure and no `trace_closed` (refinement: truncated).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import IO, Any, Protocol

from kvclaims.spec.trace import CloseReason, TraceHeader, _Event
from kvclaims.spec.tracefile import FLUSH_SECONDS, TraceFile, os_failure

_Queued = tuple[type[_Event], Any]

logger = logging.getLogger(__name__)


def _encode(queued: _Queued) -> bytes:
    """Validate one queued event against its model and serialize it (the model's own
    validator and serializer, called directly: the same as `kind(**fields).model_dump_json(
    exclude_none=True)` at a third of the cost). Raises the model's `ValidationError`."""
    kind, fields = queued
    event = kind.__pydantic_validator__.validate_python(fields)
    return kind.__pydantic_serializer__.to_json(event, exclude_none=True)


class EventSink(Protocol):
    """Where claim telemetry goes. `enabled` is False for the null sink, so the hot path can
    skip building events nobody reads."""

    enabled: bool
    failure: str | None
    """Why the trace cannot be written (new claims must then be rejected), or None."""

    def emit(self, event_type: type[_Event], **fields: Any) -> None: ...

    def record(self, event_type: type[_Event], fields: dict[str, Any]) -> None:
        """`emit` for a caller that stamped `t_ns`, with the fields as a dict the sink may keep."""

    def flush(self) -> None: ...

    def close(self, reason: CloseReason = CloseReason.closed) -> None: ...


class NullSink:
    """No trace: events are neither built nor written."""

    enabled = False
    failure: str | None = None

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
        del event_type, fields

    def record(self, event_type: type[_Event], fields: dict[str, Any]) -> None:
        del event_type, fields

    def flush(self) -> None:
        pass

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        del reason


class UnwritableSink(NullSink):
    """A trace that could not even be opened: nothing is written, `failure` says why."""

    def __init__(self, failure: str) -> None:
        self.failure = failure


def _keep_previous(target: Path) -> None:
    """Move an existing `target` aside to `<stem>.prevN<suffix>` (the first free N) so that a
    restarted engine starts a new stream without destroying the last one's evidence."""
    if not target.exists():
        return
    for number in range(1, 1_000_000):
        aside = target.with_name(f"{target.stem}.prev{number}{target.suffix}")
        if not aside.exists():
            target.rename(aside)
            logger.warning("kvclaims: trace %s existed (a previous stream): kept as %s", target, aside)
            return
    raise FileExistsError(f"no free name to keep the previous trace {target.name} under")


def _log_failure(path: Path, failure: str) -> None:
    logger.error(
        "kvclaims: trace %s is unwritable (%s): from now on new claims are rejected with this "
        "reason and requests are served without claims; the trace on disk stays truncated",
        path,
        failure,
    )


class TraceSink:
    """A trace v1 file: the header on open, then one validated event per line, then
    `trace_closed` on `close()`.

    Invariants: `seq` starts at 0 and increases by one per event; lines reach the file in
    `seq` order; after `close()` nothing more is written.
    """

    enabled = True

    def __init__(
        self,
        stream: IO[bytes],
        header: TraceHeader,
        *,
        flush_seconds: float | None = FLUSH_SECONDS,
        path: Path | None = None,
    ) -> None:
        header_line = header.model_dump_json(exclude_none=True).encode()
        self._file = TraceFile(
            stream,
            header_line,
            _encode,
            flush_seconds=flush_seconds,
            on_failure=lambda failure: _log_failure(path or Path(getattr(stream, "name", "?")), failure),
        )
        self._seq = 0

    @classmethod
    def open(cls, path: str | Path, header: TraceHeader) -> TraceSink | UnwritableSink:
        """A new trace at `path`, or an `UnwritableSink` when the OS refuses to create it or
        to write its header. A file already there (the stream of an engine that ran before
        this one, perhaps killed) is kept: moved aside, never overwritten."""
        target = Path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _keep_previous(target)
            return cls(target.open("w+b"), header, path=target)  # readable: a torn line can be cut
        except OSError as error:
            failure = os_failure(error)
            _log_failure(target, failure)
            return UnwritableSink(failure)

    @property
    def failure(self) -> str | None:
        return self._file.failure

    @property
    def closed(self) -> bool:
        return self._file.closed

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
        """Queue one event under the next seq, stamped now unless `t_ns` is given; it is
        validated against its trace v1 model when written (an invalid one fails the sink: see
        the module docstring). Nothing is kept once the sink is closed or failed."""
        if "t_ns" not in fields:
            fields["t_ns"] = time.time_ns()
        self.record(event_type, fields)

    def record(self, event_type: type[_Event], fields: dict[str, Any]) -> None:
        """`emit` for a caller that stamped `t_ns` itself, with the fields as a dict the sink
        keeps (the arbiter's hot path: no copy)."""
        fields["seq"] = seq = self._seq
        self._seq = seq + 1
        self._file.append((event_type, fields), seq)

    def flush(self) -> None:
        """Hand queued lines to the file (the flusher thread syncs them to the OS)."""
        self._file.hand_over()

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        self._file.close(reason)
