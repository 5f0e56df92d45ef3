"""The one kvclaims trace v1 file writer: batching, a bounded delay, and a clean end.

Every runtime that writes trace v1 (the MicroRuntime, the vLLM binding, the lanes) hands its
events to a `TraceFile`: the header on open, then events in `seq` order, then, on `close`, a
final `trace_closed` event that says the stream ended cleanly and why. Refinement treats a
trace without that ending as truncated, so a crash, a kill or a lost tail can never pass for a
complete history.

Events are kept as the caller built them and encoded in batches (`encode` turns one into its
JSON line); the batch is handed to the file when `BATCH_EVENTS` accumulate, on `hand_over()`
and on `close()`, always by the thread that owns the trace (appending takes no lock). With
`flush_seconds` set, a daemon thread flushes what was handed over to the operating system at
least that often, so a line reaches the file at most `flush_seconds` (plus the wait for the
lock) after it was handed over, even when the runtime goes idle and never calls the writer
again. One re-entrant lock guards the stream: `atexit` and signal handlers may close the trace
from the thread that was writing.

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
from collections.abc import Callable
from typing import IO, Generic, TypeVar

from kvclaims.spec.trace import CloseReason, TraceClosed

FLUSH_SECONDS = 0.2
"""Default bound on how long an appended event may wait before it reaches the OS."""

BATCH_EVENTS = 4096
"""Events encoded and written together when no one asks for them sooner."""

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
        self._next_seq = 0
        self._dirty = False
        self._closed = False
        self._lock = threading.RLock()
        stream.write(header + b"\n")
        stream.flush()
        self._stop = threading.Event()
        if flush_seconds is not None:
            flusher = threading.Thread(
                target=self._flush_every, args=(flush_seconds,), name="kvclaims-trace-flush", daemon=True
            )
            flusher.start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failure(self) -> str | None:
        """Why the file could not be written (the OS error), or None. Once set, nothing more
        reaches the file."""
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
        """Encode the queued events into the stream's buffer (not yet synced to the OS)."""
        with self._lock:
            if not self._closed:
                self._write_pending()

    def flush(self) -> None:
        """Hand the queued events over and flush them to the operating system."""
        with self._lock:
            if not self._closed:
                self._write_pending()
                self._sync()

    def _sync(self) -> None:
        if self._dirty and self._failure is None:
            try:
                self._stream.flush()
            except OSError as error:
                self._fail(error)
            self._dirty = False

    def _fail(self, error: OSError) -> None:
        """The OS refused a write: record why, drop what is queued, tell the runtime once."""
        self._failure = os_failure(error)
        self._pending.clear()
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
            self._write_pending()
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
                    self._fail(error)

    def _write_pending(self) -> None:
        if self._pending:
            self._write(b"\n".join(map(self._encode, self._pending)) + b"\n")
            self._pending.clear()

    def _write(self, data: bytes) -> None:
        if self._failure is not None:
            return
        try:
            self._stream.write(data)
        except OSError as error:
            self._fail(error)
            return
        self._dirty = True

    def _flush_every(self, seconds: float) -> None:
        """The flusher thread: what was handed over reaches the OS within `seconds`."""
        while not self._stop.wait(seconds):
            with self._lock:
                if not self._closed:
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
