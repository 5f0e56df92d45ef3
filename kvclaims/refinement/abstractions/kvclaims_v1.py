"""Trace v1 itself: the identity abstraction, read at full speed.

The header and each event line are decoded into their generated msgspec Structs
(`kvclaims.refinement.decoding`; the Structs run the models' rules themselves), and `seq` must
strictly increase; pydantic is imported only to word what a Struct refused in a header. The hot
loop pushes events into the sink (the checker) without generators in between: splitting 64 KiB
chunks into lines, one C decode per line, one call per chunk of events.

Duplicate and unknown keys: `CleanChunk` proves a chunk's lines clean (no duplicate key, no
field outside the format, at any depth), whatever their layout, by comparing the length of what
they decoded to, re-encoded in one C call, with the chunk's length less its whitespace; a chunk
it cannot prove is redone line by line and each line it cannot prove is re-parsed exactly
(`FieldAudit`). The header is always re-parsed exactly.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import msgspec

from kvclaims.refinement.decoding import EVENT_STRUCTS, CleanChunk, EventStruct
from kvclaims.refinement.read_ahead import ReadAhead, available
from kvclaims.refinement.reader import (
    CHUNK_BYTES,
    MAX_LINE_BYTES,
    FieldAudit,
    HeaderInfo,
    Sink,
    UnknownEvent,
    check_integers,
    decode_json,
    exact_document,
    explain_event_line,
    field_of,
    ordering_error,
    parse_error,
    read_lines,
)
from kvclaims.spec.trace_structs import HEADER

FORMAT = "kvclaims-v1"

REFERENCE_ENVIRONMENT = "KVCLAIMS_REFERENCE_READER"
"""Set to `1` to read every trace v1 event line by the reference path (`read_reference`):
the verdicts' ground truth for the fast path, many times slower."""


def detect(record: Any) -> bool:
    """A trace v1 file starts with its header, the only line with `kvclaims_trace`."""
    return isinstance(record, dict) and "kvclaims_trace" in record


class KvclaimsV1Source:
    """Trace v1 from a binary stream: `header` on construction, then `drive(sink)` pushes every
    event. Raises `TraceInputError` for input that is not a trace v1 file."""

    format = FORMAT

    def __init__(self, stream: IO[bytes], *, max_line: int = MAX_LINE_BYTES, strict: bool = False) -> None:
        self._stream = stream
        self._max_line = max_line
        self.audit = FieldAudit(strict)
        """Duplicate keys, typos and context fields of the lines re-parsed exactly."""
        self.records = 0
        """Event lines read so far."""
        buffered = b""
        while b"\n" not in buffered:
            chunk = stream.read(CHUNK_BYTES)
            if not chunk:
                break
            buffered += chunk
            if len(buffered) > max_line and b"\n" not in buffered[: max_line + 1]:
                raise parse_error(f"line 1 is longer than the {max_line}-byte cap", 1)
        if not buffered.strip():
            raise parse_error("empty file: a trace starts with its header line", None)
        first, newline, self._pending = buffered.partition(b"\n")
        self.header = _header(first, bool(newline), self.audit)
        plain = getattr(stream, "plain_file", None)
        self._events_at: tuple[int, int, int] | None = (
            (plain[0], plain[1] + len(first) + 1, plain[1]) if plain is not None and newline else None
        )
        """The file descriptor, the offset where the event lines start and the offset where the
        stream's own chunks start, when the file can be read by position (a regular,
        uncompressed file)."""

    def drive(self, sink: Sink) -> None:
        """Decode every event line and push the events to the sink, a chunk's worth of
        consecutive lines at a time (`sink.feed_run`). A chunk decodes in one pass when every
        line is a well-formed, strictly ordered event (`CleanChunk`); otherwise it is redone
        line by line, so the first bad line is located exactly.

        A large regular file is read ahead (`kvclaims.refinement.read_ahead`): a child process
        decodes and audits its clean chunks while this one checks them; at the first chunk the
        child cannot pass as clean, or wherever it stops, this process goes on from the last
        chunk it received, as if it had read everything before itself.

        With `KVCLAIMS_REFERENCE_READER=1` every line is read by the reference path instead
        (`_read_reference`)."""
        stream = self._stream
        position = (1, 0, -1)  # line number, event index, last seq
        chunks: Iterable[bytes] = itertools.chain(
            (self._pending,), iter(lambda: stream.read(CHUNK_BYTES), b"")
        )
        if os.environ.get(REFERENCE_ENVIRONMENT) == "1":
            self._read_reference(sink, chunks)
            return
        at = self._events_at
        if at is not None and _worth_reading_ahead(*at[:2]):
            fd, offset, grid = at
            offset, position = self._read_ahead(sink, fd, offset, grid, position)
            chunks = _chunks_at(fd, offset, grid, getattr(stream, "reached", None))
        self._read(sink, chunks, *position)

    def _read_ahead(
        self, sink: Sink, fd: int, offset: int, grid: int, position: tuple[int, int, int]
    ) -> tuple[int, tuple[int, int, int]]:
        """Push the clean chunks a child reads from `offset` on; return where they end."""
        number, index, last_seq = position
        reached = getattr(self._stream, "reached", None)
        size = os.fstat(fd).st_size if reached is not None else 0
        produce = functools.partial(_clean_chunks, fd, offset, grid, last_seq, self._max_line)
        with ReadAhead(produce, _Chunk) as ahead:
            for end, events in ahead:
                offset = end
                if reached is not None:  # the chunk this frame's last line ends in was read whole
                    reached(min(end + (grid - end) % CHUNK_BYTES, size))
                sink.feed_run(events, number + 1, index)
                number += len(events)
                index += len(events)
                last_seq = events[-1].seq
                self.records = index
        return offset, (number, index, last_seq)

    def _read(self, sink: Sink, chunks: Iterable[bytes], number: int, index: int, last_seq: int) -> None:
        """Push the events of `chunks` (whole lines from line `number + 1` on)."""
        clean = CleanChunk()
        max_line = self._max_line
        pending = b""
        try:
            for chunk in chunks:
                buffer = pending + chunk if pending else chunk
                pieces = buffer.split(b"\n")
                pending = pieces.pop()
                if not pieces:
                    if len(pending) > max_line:
                        raise parse_error(f"line is longer than the {max_line}-byte cap", number + 1)
                    continue
                if len(pieces[0]) > max_line:
                    raise parse_error(
                        f"line is {len(pieces[0])} bytes; lines are capped at {max_line}", number + 1
                    )
                events = clean(pieces, buffer, len(buffer) - len(pending), last_seq)
                if events is None:
                    number, index, last_seq = self._line_by_line(sink, clean, pieces, number, index, last_seq)
                else:
                    sink.feed_run(events, number + 1, index)
                    number += len(events)
                    index += len(events)
                    last_seq = events[-1].seq
                if len(pending) > max_line:
                    raise parse_error(f"line is longer than the {max_line}-byte cap", number + 1)
            if pending:
                number += 1
                last_seq = self._slow(sink, clean, pending, number, index, False, last_seq)
                index += 1
        finally:
            self.records = index

    def _line_by_line(
        self, sink: Sink, clean: CleanChunk, pieces: list[bytes], number: int, index: int, last_seq: int
    ) -> tuple[int, int, int]:
        """A chunk with a bad, unknown, misordered or longer than shortest line: one line at a
        time, in order."""
        decode = clean.decode
        for piece in pieces:
            number += 1
            try:
                event = decode(piece)
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
                last_seq = self._slow(sink, clean, piece, number, index, True, last_seq)
                index += 1
                continue
            if not clean.clean(piece, event):
                self.audit.audit(piece, number, type(event))
            if event.seq <= last_seq:
                raise ordering_error(event.seq, last_seq, number)
            last_seq = event.seq
            sink.feed_run([event], number, index)
            index += 1
        return number, index, last_seq

    def _slow(
        self,
        sink: Sink,
        clean: CleanChunk,
        content: bytes,
        number: int,
        index: int,
        terminated: bool,
        last_seq: int,
    ) -> int:
        """A line the fast decoder refused, or the last line: blank, unknown type or invalid."""
        if not content.strip():
            raise parse_error("blank line: every line of a trace is one JSON object", number)
        try:
            event = clean.decode(content)
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            unknown, last_seq = explain_event_line(content, number, terminated, last_seq, self.audit)
            sink.unknown(unknown.name, number, index)
            return last_seq
        if not clean.clean(content, event):
            self.audit.audit(content, number, type(event))
        if event.seq <= last_seq:
            raise ordering_error(event.seq, last_seq, number)
        sink.feed(event, number, index)
        return event.seq

    def _read_reference(self, sink: Sink, chunks: Iterable[bytes]) -> None:
        """The reference path: each line by itself, parsed exactly by Python's `json` (every
        key kept, a duplicate refused), its keys audited, its integers bounded, then validated
        into its Struct from the parsed document (`msgspec.convert`), its seq compared with the
        previous one, and fed alone. No length proof, no decoding from bytes, no chunk runs,
        no read ahead: what the fast path must agree with, verdict for verdict."""
        index = 0
        last_seq = -1
        lines = read_lines(_Joined(chunks), max_line=self._max_line, first=2)
        try:
            for number, content, terminated in lines:
                event, last_seq = reference_event(content, number, terminated, last_seq, self.audit)
                if type(event) is UnknownEvent:
                    sink.unknown(event.name, number, index)
                else:
                    sink.feed(event, number, index)
                index += 1
        finally:
            self.records = index


class _Joined:
    """A stream of the given chunks (the reference path reads through `read_lines`)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)

    def read(self, size: int = -1) -> bytes:
        return next(self._chunks, b"")


def reference_event(
    content: bytes, number: int, terminated: bool, last_seq: int, audit: FieldAudit
) -> tuple[Any, int]:
    """One event line read by the reference path (`_read_reference`): its Struct, or an
    `UnknownEvent` for a type trace v1 does not define, with its seq; raises a located
    `TraceInputError` for anything else."""
    document = _exact_json(content, number, terminated)
    if not isinstance(document, dict):
        raise parse_error("an event line must be a JSON object", number)
    name = document.get("event")
    if not isinstance(name, str):
        raise parse_error("event line has no string 'event' field", number, "event")
    seq = document.get("seq")
    if type(seq) is not int or seq < 0:
        raise parse_error("event line has no non-negative integer 'seq'", number, "seq")
    check_integers(document, number)
    struct = EVENT_STRUCTS.get(name)
    if struct is None:
        if seq <= last_seq:
            raise ordering_error(seq, last_seq, number)
        return UnknownEvent(name), seq
    audit.fields(document, number, struct, "")
    try:
        event = msgspec.convert(document, struct)
    except msgspec.ValidationError as error:
        raise parse_error(f"invalid {name}: {error}", number, field_of(str(error))) from None
    if event.seq <= last_seq:
        raise ordering_error(event.seq, last_seq, number)
    return event, event.seq


def _exact_json(content: bytes, number: int, terminated: bool) -> Any:
    """`exact_document`, but a line Python's `json` cannot parse at all is worded as the reader
    words it (a truncated last line, bad JSON), whichever parser noticed."""
    try:
        json.loads(content)
    except UnicodeDecodeError:
        pass  # exact_document words it
    except ValueError as error:
        if not terminated:
            raise parse_error(f"truncated last line (no newline, not valid JSON: {error})", number) from None
    return exact_document(content, number)


READ_AHEAD_BYTES = 8 << 20
"""Event lines at least this long (8 MiB, about 90,000 events) are read ahead by a child
process when `kvclaims.refinement.read_ahead.available()`. Starting the child costs about 10 ms:
on a 2-core machine the two ways break even near 6 MiB (2 MiB: 37 ms read ahead against 28 ms
in one process; 7.5 MiB: 86 against 96 ms)."""


def _worth_reading_ahead(fd: int, offset: int) -> bool:
    try:
        size = os.fstat(fd).st_size
    except OSError:
        return False
    return size - offset >= READ_AHEAD_BYTES and available()


_Chunk = tuple[int, list[EventStruct]]
"""What the read-ahead child sends per clean chunk: the file offset just after its last line,
and its events."""


def _clean_chunks(fd: int, offset: int, grid: int, last_seq: int, max_line: int) -> Iterator[_Chunk]:
    """The read-ahead child: the clean chunks from `offset` on, each with the offset it ends at;
    stops at the first chunk that is not clean (or has an over-long line), and at the end of
    the file (a last line without its newline is left to the parent)."""
    clean = CleanChunk()
    pending = b""
    for chunk in _chunks_at(fd, offset, grid):
        buffer = pending + chunk if pending else chunk
        pieces = buffer.split(b"\n")
        pending = pieces.pop()
        if len(pending) > max_line or (pieces and len(pieces[0]) > max_line):
            return
        if not pieces:
            continue
        events = clean(pieces, buffer, len(buffer) - len(pending), last_seq)
        if events is None:
            return
        offset += len(buffer) - len(pending)
        last_seq = events[-1].seq
        yield offset, events


def _chunks_at(
    fd: int, offset: int, grid: int, reached: Callable[[int], None] | None = None
) -> Iterator[bytes]:
    """The file's bytes from `offset` on, read by position (`os.pread` leaves the descriptor's
    own offset where the stream left it) in the chunks the stream itself is read in: they end
    where the stream's do (`grid` plus a multiple of `CHUNK_BYTES`), so that every run, and
    whatever depends on where a run starts or a line ends within a chunk (a budget finding's
    line, the wording of an over-long line), is the same read ahead or not. `reached` is told
    each chunk's end."""
    size = CHUNK_BYTES - (offset - grid) % CHUNK_BYTES
    while chunk := os.pread(fd, size, offset):
        size = CHUNK_BYTES
        offset += len(chunk)
        if reached is not None:
            reached(offset)
        yield chunk


def _header(content: bytes, terminated: bool, audit: FieldAudit) -> HeaderInfo:
    decode_json(content, 1, terminated)
    document = exact_document(content, 1)
    if not isinstance(document, dict) or "kvclaims_trace" not in document:
        hint = " (the file starts with an event: its header line is missing)" if _is_event(document) else ""
        raise parse_error(f"line 1 is not a trace header (no kvclaims_trace field){hint}", 1)
    check_integers(document, 1)
    audit.fields(document, 1, HEADER, "")
    try:
        header = msgspec.convert(document, HEADER)
    except msgspec.ValidationError:
        header = _header_of_record(document)
    block_size = header.block_size
    if block_size is None and header.cache_identity is not None:
        block_size = header.cache_identity.block_size
    return HeaderInfo(header.usable_blocks, block_size, header.source)


def _header_of_record(document: dict[str, Any]) -> Any:
    """The header as the pydantic model validates it: for a header its Struct refused, so that
    the finding is worded, and located, as the schema of record words it."""
    from pydantic import ValidationError

    from kvclaims.spec.trace import TraceHeader

    try:
        return TraceHeader.model_validate(document)
    except ValidationError as error:
        detail = error.errors(include_url=False)[0]
        field = ".".join(str(p) for p in detail["loc"])
        raise parse_error(f"invalid header: {detail['msg']}", 1, field) from None


def _is_event(document: Any) -> bool:
    return isinstance(document, dict) and document.get("event") in EVENT_STRUCTS
