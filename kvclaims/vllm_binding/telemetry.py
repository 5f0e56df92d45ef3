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

A trace that cannot be written (it cannot be opened, or the OS refuses a write: a full disk, a
file-size limit) makes the sink `failure`d: the binding then rejects new claims with that
reason (a promise nobody can observe is not made) while vLLM keeps serving requests, and the
server log says so once.
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
    kind, event = queued
    return kind.__pydantic_serializer__.to_json(event, exclude_none=True)


class EventSink(Protocol):
    """Where claim telemetry goes. `enabled` is False for the null sink, so the hot path can
    skip building events nobody reads."""

    enabled: bool
    failure: str | None
    """Why the trace cannot be written (new claims must then be rejected), or None."""

    def emit(self, event_type: type[_Event], **fields: Any) -> None: ...

    def flush(self) -> None: ...

    def close(self, reason: CloseReason = CloseReason.closed) -> None: ...


class NullSink:
    """No trace: events are neither built nor written."""

    enabled = False
    failure: str | None = None

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
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
    def next_seq(self) -> int:
        return self._seq

    @property
    def closed(self) -> bool:
        return self._file.closed

    def emit(self, event_type: type[_Event], **fields: Any) -> None:
        """Validate one event against its trace v1 model and queue it under the next seq."""
        if self._file.closed or self._file.failure is not None:
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
