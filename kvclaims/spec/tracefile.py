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
"""

from __future__ import annotations

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
    ) -> None:
        self._stream = stream
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

    def append(self, entry: Entry, seq: int) -> None:
        """Queue one event (whose seq is `seq`); written with its batch. Ignored once closed.
        Only the thread that owns the trace appends (no lock on this hot path)."""
        if self._closed:
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
        if self._dirty:
            self._stream.flush()
            self._dirty = False

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        """Write what is queued, then `trace_closed(reason)`, and close the file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._write_pending()
            self._stream.write(closing_line(self._next_seq, reason, t_ns=time.time_ns()))
            self._closed = True
            self._stop.set()
            self._stream.close()

    def _write_pending(self) -> None:
        if self._pending:
            self._stream.write(b"\n".join(map(self._encode, self._pending)) + b"\n")
            self._pending.clear()
            self._dirty = True

    def _flush_every(self, seconds: float) -> None:
        """The flusher thread: what was handed over reaches the OS within `seconds`."""
        while not self._stop.wait(seconds):
            with self._lock:
                if not self._closed:
                    self._sync()


def closing_line(seq: int, reason: CloseReason = CloseReason.closed, *, t_ns: int | None = None) -> bytes:
    """The `trace_closed` line (with its newline) that ends a complete trace at `seq`
    (deterministic generators leave `t_ns` out)."""
    closing = TraceClosed(seq=seq, t_ns=t_ns, reason=reason)
    return closing.model_dump_json(exclude_none=True).encode() + b"\n"
