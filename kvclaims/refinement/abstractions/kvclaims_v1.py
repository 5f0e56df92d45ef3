"""Trace v1 itself: the identity abstraction, read at full speed.

The header and each event line are decoded into their generated msgspec Structs
(`kvclaims.refinement.decoding`), the model rules a Struct cannot express are checked where
needed, and `seq` must strictly increase; pydantic is imported only to word what a Struct
refused in a header. The hot loop pushes events into the sink (the checker) without generators
in between: splitting 1 MiB chunks into lines, one C decode per line, one call per event.

Duplicate and unknown keys: the decoded Structs are re-encoded, a whole chunk in one C call, in
their shortest form (no defaults, no whitespace; msgspec writes every string and integer in its
shortest JSON form). A line can only be longer than that, and is exactly as long only when it
holds no duplicate key, no unknown field, no explicit default and no whitespace, so equal chunk
lengths prove every line clean; a chunk that differs is redone line by line and each longer line
is re-parsed exactly (`FieldAudit`). The header is always re-parsed exactly.
"""

from __future__ import annotations

import itertools
import operator
from typing import IO, Any

import msgspec

from kvclaims.refinement.decoding import (
    EVENT_NAME,
    EVENT_STRUCTS,
    NEEDS_MODEL_VALIDATION,
    event_decoder,
    run_model_validators,
)
from kvclaims.refinement.reader import (
    CHUNK_BYTES,
    MAX_LINE_BYTES,
    FieldAudit,
    HeaderInfo,
    Sink,
    check_integers,
    decode_json,
    exact_document,
    explain_event_line,
    field_of,
    ordering_error,
    parse_error,
)
from kvclaims.spec.trace_structs import HEADER

FORMAT = "kvclaims-v1"


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

    def drive(self, sink: Sink) -> None:
        """Decode every event line and push the events to the sink, a chunk's worth of
        consecutive lines at a time (`sink.feed_run`). A chunk decodes in one pass when every
        line is a well-formed, strictly ordered event; otherwise it is redone line by line, so
        the first bad line is located exactly."""
        decode = event_decoder().decode
        shortest = msgspec.json.Encoder().encode_into
        scratch = bytearray()
        validated = {struct for struct, name in EVENT_NAME.items() if name in NEEDS_MODEL_VALIDATION}
        stream = self._stream
        max_line = self._max_line
        number = 1
        index = 0
        last_seq = -1
        pending = b""
        chunks = itertools.chain((self._pending,), iter(lambda: stream.read(CHUNK_BYTES), b""))
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
                try:
                    events = list(map(decode, pieces))
                except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
                    events = None
                if events is not None:
                    shortest(events, scratch)  # `[e1,...,en]`: the lines' shortest forms, n + 1 more bytes
                if (
                    events is None
                    or not _clean(events, last_seq, validated)
                    or len(scratch) != len(buffer) - len(pending) + 1  # the lines and their n newlines
                ):
                    number, index, last_seq = self._line_by_line(
                        sink, pieces, number, index, last_seq, validated
                    )
                else:
                    sink.feed_run(events, number + 1, index)
                    number += len(events)
                    index += len(events)
                    last_seq = events[-1].seq
                if len(pending) > max_line:
                    raise parse_error(f"line is longer than the {max_line}-byte cap", number + 1)
            if pending:
                number += 1
                last_seq = self._slow(sink, pending, number, index, False, last_seq)
                index += 1
        finally:
            self.records = index

    def _line_by_line(
        self, sink: Sink, pieces: list[bytes], number: int, index: int, last_seq: int, validated: set[type]
    ) -> tuple[int, int, int]:
        """A chunk with a bad, unknown, misordered or longer than shortest line: one line at a
        time, in order."""
        decode = event_decoder().decode
        shortest = msgspec.json.Encoder().encode
        for piece in pieces:
            number += 1
            try:
                event = decode(piece)
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
                last_seq = self._slow(sink, piece, number, index, True, last_seq)
                index += 1
                continue
            if len(piece) != len(shortest(event)):
                self.audit.audit(piece, number, type(event))
            if event.seq <= last_seq:
                raise ordering_error(event.seq, last_seq, number)
            last_seq = event.seq
            if type(event) in validated:
                _validate(event, number)
            sink.feed_run([event], number, index)
            index += 1
        return number, index, last_seq

    def _slow(
        self, sink: Sink, content: bytes, number: int, index: int, terminated: bool, last_seq: int
    ) -> int:
        """A line the fast decoder refused, or the last line: blank, unknown type or invalid."""
        if not content.strip():
            raise parse_error("blank line: every line of a trace is one JSON object", number)
        try:
            event = event_decoder().decode(content)
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            unknown, last_seq = explain_event_line(content, number, terminated, last_seq, self.audit)
            sink.unknown(unknown.name, number, index)
            return last_seq
        if len(content) != len(msgspec.json.encode(event)):
            self.audit.audit(content, number, type(event))
        if event.seq <= last_seq:
            raise ordering_error(event.seq, last_seq, number)
        if EVENT_NAME[type(event)] in NEEDS_MODEL_VALIDATION:
            _validate(event, number)
        sink.feed(event, number, index)
        return event.seq


_SEQ = operator.attrgetter("seq")


def _clean(events: list[Any], last_seq: int, validated: set[type]) -> bool:
    """Whether a decoded chunk needs no line-by-line pass: seq strictly increasing and every
    event of a validated type valid. Both are found with C-level passes (map, list equality,
    compress) rather than a Python loop over the chunk: consecutive seqs (what runtimes write)
    equal a range; any other run is compared pair by pair."""
    seqs = list(map(_SEQ, events))
    first = seqs[0]
    if first <= last_seq:
        return False
    if seqs != list(range(first, first + len(seqs))) and not all(
        map(operator.lt, seqs, itertools.islice(seqs, 1, None))
    ):
        return False
    types = list(map(type, events))
    if validated.isdisjoint(types):
        return True
    for event in itertools.compress(events, map(validated.__contains__, types)):
        try:
            run_model_validators(EVENT_NAME[type(event)], event)
        except msgspec.ValidationError:
            return False
    return True


def _validate(event: msgspec.Struct, number: int) -> None:
    name = EVENT_NAME[type(event)]
    try:
        run_model_validators(name, event)
    except msgspec.ValidationError as error:
        raise parse_error(f"invalid {name}: {error}", number, field_of(str(error))) from None


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
