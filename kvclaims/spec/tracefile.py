"""The one kvclaims trace v1 file writer: batching, a bounded delay, and a clean end.

Every runtime that writes trace v1 (the MicroRuntime, the vLLM binding, the lanes) hands its
events to a `TraceFile`: the header on open, then events in `seq` order, then, on `close`, a
final `trace_closed` event that says the stream ended cleanly and why. Refinement treats a
trace without that ending as truncated, so a crash, a kill or a lost tail can never pass for a
complete history.

Events are kept as the caller built them and encoded in batches (`encode` turns one into its
JSON line). Without a flusher (`flush_seconds=None`) the owner thread encodes and writes a batch
when `BATCH_EVENTS` accumulate, on `hand_over()` and on `close()`. With `flush_seconds` set, a
daemon flusher thread does the encoding and writing: `hand_over()` only queues the batch (no
lock, no encoding: what the owner's hot path pays is an append), and the flusher encodes,
writes and flushes what was handed over to the operating system at least every
`flush_seconds`, so a line reaches the file at most `flush_seconds` (plus the wait for the lock
and the GIL) after it was handed over, even when the runtime goes idle and never calls the
writer again. The owner encodes a backlog itself once more than `MAX_BACKLOG_EVENTS` wait, so
memory stays bounded when the flusher cannot keep up. `flush()` and `close()` write everything
queued before they return. One re-entrant lock guards the stream: `atexit` and signal handlers
may close the trace from the thread that was writing.

An entry `encode` cannot encode (it raises: a runtime bug, such as an event its model rejects)
is never written: the trace file fails as on a refused write (below), after the entries before
it, so the file stays a prefix of valid lines.

A write the operating system refuses (a full disk, a file-size limit, an I/O error) ends the
file's usefulness, not the runtime: the trace file records the failure (`failure`), tells the
runtime once (`on_failure`), writes nothing more and drops what it is given, so the file on
disk stays a truncated prefix (refinement: inconclusive) and the runtime can stop making
promises it can no longer report.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Generic, TypeVar

from kvclaims.spec.trace import CloseReason, TraceClosed

FLUSH_SECONDS = 0.2
"""Default bound on how long an appended event may wait before it reaches the OS."""

BATCH_EVENTS = 4096
"""Events encoded and written together when no one asks for them sooner."""

MAX_BACKLOG_EVENTS = 1 << 16
"""Handed-over events that may wait for the flusher before the owner encodes them itself."""

Entry = TypeVar("Entry")

logger = logging.getLogger(__name__)


class TraceFile(Generic[Entry]):
    """One trace v1 file being written.

    Invariants: the header is line 1; event lines reach the file in the order they were
    appended; after `close()` the last line is `trace_closed` with the seq after the last
    event's, and nothing more is written.
    """

    def __init__(
        self,
        stream: IO[bytes],
        header: bytes,
        encode: Callable[[Entry], bytes],
        *,
        flush_seconds: float | None = FLUSH_SECONDS,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self._stream = stream
        self._on_failure = on_failure
        self._failure: str | None = None
        self._encode = encode
        self._pending: list[Entry] = []
        self._handed: deque[list[Entry]] = deque()
        """Batches handed over for the flusher, oldest first (appended by the owner only)."""
        self._handed_events = 0
        """Events ever handed over (written by the owner only)."""
        self._written_events = 0
        """Events of handed batches ever taken to the stream (written under the lock only)."""
        self._next_seq = 0
        self._dirty = False
        self._closed = False
        self._lock = threading.RLock()
        stream.write(header + b"\n")
        stream.flush()
        self._stop = threading.Event()
        self._background = flush_seconds is not None
        if self._background:
            flusher = threading.Thread(
                target=self._flush_every, args=(flush_seconds,), name="kvclaims-trace-flush", daemon=True
            )
            flusher.start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failure(self) -> str | None:
        """Why the file could not be written (the OS error, or an entry that could not be
        encoded), or None. Once set, nothing more reaches the file."""
        return self._failure

    def append(self, entry: Entry, seq: int) -> None:
        """Queue one event (whose seq is `seq`); written with its batch. Ignored once closed.
        Only the thread that owns the trace appends (no lock on this hot path)."""
        if self._closed or self._failure is not None:
            return
        pending = self._pending
        pending.append(entry)
        self._next_seq = seq + 1
        if len(pending) >= BATCH_EVENTS:
            self.hand_over()

    def hand_over(self) -> None:
        """Give the queued events to the writing side: with a flusher, queue them for it (the
        owner neither encodes nor locks, unless the backlog is over `MAX_BACKLOG_EVENTS`);
        without one, encode them into the stream's buffer (not yet synced to the OS)."""
        pending = self._pending
        if not pending:
            return
        if self._background:
            self._pending = []
            self._handed.append(pending)
            self._handed_events += len(pending)
            if self._handed_events - self._written_events <= MAX_BACKLOG_EVENTS:
                return
        with self._lock:
            if not self._closed:
                self._write_queued()

    def flush(self) -> None:
        """Write every queued event and flush them to the operating system."""
        with self._lock:
            if not self._closed:
                self._write_queued()
                self._sync()

    def _sync(self) -> None:
        if self._dirty and self._failure is None:
            try:
                self._stream.flush()
            except OSError as error:
                self._fail(os_failure(error))
            self._dirty = False

    def _fail(self, failure: str) -> None:
        """The file cannot be written on: record why, drop what is queued, tell the runtime once."""
        self._failure = failure
        self._pending.clear()
        self._handed.clear()
        _cut_partial_line(self._stream)
        if self._on_failure is None:
            logger.error("kvclaims: trace file unwritable (%s); nothing more is written to it", self._failure)
        else:
            self._on_failure(self._failure)

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        """Write what is queued, then `trace_closed(reason)`, and close the file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._write_queued()
            if self._failure is None:
                self._write(closing_line(self._next_seq, reason, t_ns=time.time_ns()))
            self._closed = True
            self._stop.set()
            if self._failure is not None:
                raw = getattr(self._stream, "raw", None)
                if raw is not None:
                    raw.close()  # drop the bytes the OS refused: they would end in a torn line
            try:
                self._stream.close()
            except (OSError, ValueError) as error:  # the last flush; the trace stays without its close
                if self._failure is None and isinstance(error, OSError):
                    self._fail(os_failure(error))

    def _write_queued(self) -> None:
        """Encode and write the handed-over batches, then the owner's pending events (under the
        lock; on the owner's thread, or after it is gone: `atexit`)."""
        self._write_handed()
        if self._pending:
            batch, self._pending = self._pending, []
            self._write_batch(batch)

    def _write_handed(self) -> None:
        """Encode and write the handed-over batches, oldest first (under the lock)."""
        handed = self._handed
        while handed:
            batch = handed.popleft()
            self._written_events += len(batch)
            self._write_batch(batch)

    def _write_batch(self, batch: list[Entry]) -> None:
        if self._failure is not None:
            return
        try:
            data = b"\n".join(map(self._encode, batch)) + b"\n"
        except Exception:  # an entry the encoder rejects: write the valid ones before it, then fail
            self._write_valid_prefix(batch)
            return
        self._write(data)

    def _write_valid_prefix(self, batch: list[Entry]) -> None:
        for entry in batch:
            try:
                line = self._encode(entry)
            except Exception as error:  # the whole error goes to the log, never to clients
                logger.error("kvclaims: a trace event could not be encoded; the trace ends here: %s", error)
                self._sync()
                if self._failure is None:
                    self._fail(f"an event could not be encoded ({type(error).__name__})")
                return
            self._write(line + b"\n")

    def _write(self, data: bytes) -> None:
        if self._failure is not None:
            return
        try:
            self._stream.write(data)
        except OSError as error:
            self._fail(os_failure(error))
            return
        self._dirty = True

    def _flush_every(self, seconds: float) -> None:
        """The flusher thread: what was handed over is encoded and reaches the OS within `seconds`."""
        while not self._stop.wait(seconds):
            with self._lock:
                if not self._closed:
                    self._write_handed()
                    self._sync()


def _cut_partial_line(stream: IO[bytes]) -> None:
    """Cut a partial last line that a refused write may have left, so that the file stays a
    prefix of whole lines (refinement: truncated). Best effort: a stream without a file
    descriptor is left as it is."""
    try:
        descriptor = stream.fileno()
        size = os.fstat(descriptor).st_size
        start = max(0, size - (1 << 20))
        cut = os.pread(descriptor, size - start, start).rfind(b"\n")
        if cut >= 0 and start + cut + 1 < size:
            os.ftruncate(descriptor, start + cut + 1)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def os_failure(error: OSError) -> str:
    """A write failure as a reason: the error's kind and the OS's words, never the path (the
    reason reaches clients)."""
    return f"{type(error).__name__}: {error.strerror or 'unknown error'}"


def closing_line(seq: int, reason: CloseReason = CloseReason.closed, *, t_ns: int | None = None) -> bytes:
    """The `trace_closed` line (with its newline) that ends a complete trace at `seq`
    (deterministic generators leave `t_ns` out)."""
    closing = TraceClosed(seq=seq, t_ns=t_ns, reason=reason)
    return closing.model_dump_json(exclude_none=True).encode() + b"\n"
