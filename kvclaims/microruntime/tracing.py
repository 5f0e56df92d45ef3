"""Where the MicroRuntime's trace v1 events go: memory, an NDJSON file, or a counter.

The runtime builds each event as a plain dict with a strictly increasing `seq` and hands it to
a sink (any callable taking the dict). No pydantic model is built on this path: that costs
more than the simulation itself. The tests validate every scenario trace line by line against
`kvclaims.spec.trace` (`TraceHeader` and `TraceEvent`), so the dicts cannot drift from the
format.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.trace import TRACE_FORMAT_VERSION, CloseReason
from kvclaims.spec.tracefile import TraceFile, closing_line

TraceSink = Callable[[dict[str, Any]], object]
"""Receives each event dict once, in `seq` order."""

_ENCODER = msgspec.json.Encoder()


def trace_header(usable_blocks: int, block_size: int, source: str) -> dict[str, Any]:
    """Line 1 of a MicroRuntime trace: the pool every capacity proof refers to."""
    return {
        "kvclaims_trace": TRACE_FORMAT_VERSION,
        "source": source,
        "usable_blocks": usable_blocks,
        "block_size": block_size,
    }


class TraceBuffer:
    """Keeps every event in memory; `append` is the sink."""

    __slots__ = ("append", "events")

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.append = self.events.append

    def counts(self) -> Counter[str]:
        return Counter(event["event"] for event in self.events)


class EventCounter:
    """Counts events by type and keeps nothing else (long benchmark runs)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __call__(self, event: dict[str, Any]) -> None:
        self.counts[event["event"]] += 1


class NdjsonTraceWriter:
    """Streams a trace to `path` through the one trace writer (`kvclaims.spec.tracefile`):
    the header now, each event as it arrives (encoded in batches), `trace_closed` on
    `close()`."""

    def __init__(self, path: Path, header: dict[str, Any], *, flush_seconds: float | None = None) -> None:
        self.path = path
        self._file: TraceFile[dict[str, Any]] = TraceFile(
            path.open("wb"), _ENCODER.encode(header), _ENCODER.encode, flush_seconds=flush_seconds
        )

    def __call__(self, event: dict[str, Any]) -> None:
        self._file.append(event, event["seq"])

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        self._file.close(reason)

    def __enter__(self) -> NdjsonTraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def encode_trace(header: dict[str, Any], events: Sequence[dict[str, Any]]) -> bytes:
    """A whole, complete trace as NDJSON bytes (header line, one line per event,
    `trace_closed`)."""
    lines = b"".join(_ENCODER.encode(line) + b"\n" for line in (header, *events))
    return lines + closing_line(events[-1]["seq"] + 1 if events else 0)


def write_trace(path: Path, header: dict[str, Any], events: Iterable[dict[str, Any]]) -> Path:
    """Write a whole trace as NDJSON (header line, one line per event, `trace_closed`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with NdjsonTraceWriter(path, header) as writer:
        for event in events:
            writer(event)
    return path


def read_trace_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, decoded object) for every line of an NDJSON trace; bad JSON is an
    `InputError` naming the line."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                decoded = msgspec.json.decode(line)
            except msgspec.DecodeError as error:
                raise InputError([Problem(str(path), f"not JSON: {error}", line=number)]) from None
            if not isinstance(decoded, dict):
                raise InputError([Problem(str(path), "a trace line must be a JSON object", line=number)])
            yield number, decoded
