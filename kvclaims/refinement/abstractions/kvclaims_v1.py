"""Trace v1 itself: the identity abstraction, read at full speed.

The header is validated by the pydantic model; each event line is decoded straight into its
Struct by the derived msgspec decoder (`kvclaims.refinement.decoding`), with the pydantic model
validators re-run on the few event types that have them, and `seq` must strictly increase.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import msgspec

from kvclaims.refinement.decoding import (
    EVENT_NAME,
    NEEDS_MODEL_VALIDATION,
    event_decoder,
    validate_with_model,
)
from kvclaims.refinement.reader import (
    HeaderInfo,
    check_integers,
    decode_json,
    explain_event_line,
    field_of,
    ordering_error,
    parse_error,
    read_lines,
)
from kvclaims.spec.trace import TraceHeader

FORMAT = "kvclaims-v1"


def detect(record: Any) -> bool:
    """A trace v1 file starts with its header, the only line with `kvclaims_trace`."""
    return isinstance(record, dict) and "kvclaims_trace" in record


class KvclaimsV1Source:
    """Trace v1 from a binary stream: `header`, then `events()` yielding
    `(line, index, Struct | UnknownEvent)`. Raises `TraceInputError` for input that is not a
    trace v1 file."""

    format = FORMAT

    def __init__(self, stream: IO[bytes]) -> None:
        self._lines = read_lines(stream)
        first = next(self._lines, None)
        if first is None:
            raise parse_error("empty file: a trace starts with its header line", None)
        number, content, terminated = first
        document = decode_json(content, number, terminated)
        if not isinstance(document, dict) or "kvclaims_trace" not in document:
            raise parse_error("line 1 is not a trace header (no kvclaims_trace field)", number)
        check_integers(document, number)
        from pydantic import ValidationError

        try:
            header = TraceHeader.model_validate(document)
        except ValidationError as error:
            detail = error.errors(include_url=False)[0]
            field = ".".join(str(p) for p in detail["loc"])
            raise parse_error(f"invalid header: {detail['msg']}", number, field) from None
        block_size = header.block_size
        if block_size is None and header.cache_identity is not None:
            block_size = header.cache_identity.block_size
        self.header = HeaderInfo(header.usable_blocks, block_size, header.source)

    records = 0
    """Event lines read so far."""

    def events(self) -> Iterator[tuple[int, int, Any]]:
        try:
            yield from self._events()
        finally:
            self.records = self._index

    _index = 0

    def _events(self) -> Iterator[tuple[int, int, Any]]:
        decode = event_decoder().decode
        last_seq = -1
        index = 0
        needs_model = NEEDS_MODEL_VALIDATION
        names = EVENT_NAME
        for number, content, terminated in self._lines:
            try:
                event = decode(content)
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
                self._index = index + 1
                unknown, last_seq = explain_event_line(content, number, terminated, last_seq)
                yield number, index, unknown
                index += 1
                continue
            self._index = index + 1
            seq = event.seq
            if seq <= last_seq:
                raise ordering_error(seq, last_seq, number)
            last_seq = seq
            name = names[type(event)]
            if name in needs_model:
                try:
                    validate_with_model(name, content)
                except msgspec.ValidationError as error:
                    raise parse_error(f"invalid {name}: {error}", number, field_of(str(error))) from None
            yield number, index, event
            index += 1
