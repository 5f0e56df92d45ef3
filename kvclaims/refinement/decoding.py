"""Fast trace v1 decoders: the msgspec Structs generated from the pydantic models of record
(`kvclaims.spec.trace_structs`, written by `kvclaims.spec.struct_codegen`), one per
event type, joined in a tagged union on `event`; decoding one line is then a single C call, and
reading a trace imports no pydantic.

The models' rules a type cannot express (such as "exactly one of blocks or tokens") are the
Structs' own `__post_init__`, which runs the very functions the models' validators run
(`kvclaims.spec.model_rules`): a Struct that breaks a rule is never built, and decoding refuses
its line with the rule's words, located at the field. A test checks on generated events that
the Structs and the models accept exactly the same lines.

One documented difference: every integer must fit in a signed 64-bit word (`MAX_TRACE_INT`),
which the reader refuses instead of accepting what pydantic would.
"""

from __future__ import annotations

import functools
import itertools
import operator
import types
import typing
from collections.abc import Mapping
from typing import Any, Union

import msgspec

from kvclaims.spec import trace_structs
from kvclaims.spec.tables import MAX_TRACE_INT

__all__ = [
    "EVENT_NAME",
    "EVENT_STRUCTS",
    "MAX_TRACE_INT",
    "CleanChunk",
    "EventStruct",
    "convert_event",
    "event_decoder",
    "layout_free_length",
    "presence_decoder",
]

EVENT_STRUCTS: Mapping[str, type[msgspec.Struct]] = types.MappingProxyType(trace_structs.EVENT_STRUCTS)
"""One Struct per trace v1 event type, by event name; `struct.__struct_config__.tag` is the name."""

EventStruct = Union[tuple(EVENT_STRUCTS.values())]  # type: ignore[valid-type]  # noqa: UP007
"""Any decoded event (the tagged union over `event`)."""

EVENT_NAME: Mapping[type[msgspec.Struct], str] = types.MappingProxyType(
    {struct: name for name, struct in EVENT_STRUCTS.items()}
)


def event_decoder() -> msgspec.json.Decoder:
    """A JSON decoder for one event line into its Struct (fresh: decoders are cheap)."""
    return msgspec.json.Decoder(EventStruct)


def convert_event(document: Mapping[str, Any]) -> msgspec.Struct:
    """Validate a decoded event mapping (from an abstraction) into its Struct, or raise
    `msgspec.ValidationError` (the Structs run the model rules themselves)."""
    # the event's own Struct when its name is known: msgspec converts into one Struct about 20
    # times faster than into the tagged union, with the same checks (the tag is the name)
    struct = EVENT_STRUCTS.get(document.get("event")) if isinstance(document.get("event"), str) else None
    return msgspec.convert(document, struct or EventStruct)


# --- Proving lines clean without re-parsing them -------------------------------------------

_JSON_SPACE = b" \t\r"
"""JSON's whitespace bytes but the newline (lines are split on it). Inside a string only the
space may appear raw (msgspec refuses a raw tab or carriage return there, as JSON does), and
msgspec's own output holds no other (it escapes tabs and carriage returns in strings)."""


def layout_free_length(data: bytes | bytearray, end: int | None = None) -> int:
    """How many bytes of `data[:end]` are not JSON whitespace (newlines are counted)."""
    kept = len(data.translate(None, _JSON_SPACE))  # one C pass, not one count per byte kind
    if end is None or end >= len(data):
        return kept
    return kept - len(data[end:].translate(None, _JSON_SPACE))


def _presence_type(annotation: Any) -> Any:
    """The type a presence Struct gives a field: the field's own type without its constraints,
    with the presence form of each Struct it may hold."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _presence_type(arguments[0])
    if origin in (Union, types.UnionType):
        return functools.reduce(operator.or_, (_presence_type(a) for a in arguments))
    if origin is list:
        return list[_presence_type(arguments[0])]  # type: ignore[misc]
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return _presence_struct(annotation)
    return annotation


@functools.cache
def _presence_struct(struct: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """`struct` with every field optional (absent: UNSET, never encoded, while an explicit
    default such as null is kept and encoded back), unvalidated and rule-free: decoding a line
    into it and encoding it back writes each key the line holds once (the last of equal keys),
    no unknown key, and every value in its shortest form."""
    config = struct.__struct_config__
    fields = [
        (field.name, _presence_type(field.type), msgspec.UNSET) for field in msgspec.structs.fields(struct)
    ]
    return msgspec.defstruct(
        f"Presence{struct.__name__}",
        fields,
        kw_only=True,
        gc=False,
        tag_field=config.tag_field,
        tag=config.tag,
        rename={field.name: field.encode_name for field in msgspec.structs.fields(struct)},
    )


def presence_decoder() -> msgspec.json.Decoder:
    """A decoder of an event line into the presence form of its Struct (`_presence_struct`)."""
    presence = tuple(_presence_struct(struct) for struct in EVENT_STRUCTS.values())
    return msgspec.json.Decoder(Union[presence])  # type: ignore[valid-type]  # noqa: UP007


class CleanChunk:
    """Decodes lines and proves them clean: no duplicate key, no field outside the format, at
    any depth; such a line needs no exact re-parse (`reader.FieldAudit`).

    Proof by length, whatever the layout. Leave out JSON whitespace (outside strings, and the
    raw spaces inside them) and a line is never shorter than its event's shortest encoding
    (msgspec writes every key, string and integer in its shortest form, spaces raw, and the
    Structs hold no float or free-form object); it is exactly as long only when every key it
    holds is one the encoding writes once. A line that also writes a field at its default (an
    explicit null) is compared the same way with the encoding of its presence form instead
    (`presence_decoder`), which writes every key the line holds, each once, and never more
    bytes than the line: the two encodings are never longer than the line, so either one's
    being as long proves it. Lengths add up, so one comparison proves a whole chunk.

    The cheaper comparison (the events' own encoding) is tried first, unless the previous
    chunk needed the presence form: a writer keeps its layout, so a file with explicit nulls
    pays for one encoding per chunk, not two."""

    def __init__(self) -> None:
        self.decode = event_decoder().decode
        self._present = presence_decoder().decode
        self._encode = msgspec.json.Encoder().encode_into
        self._scratch = bytearray()
        self._presence_first = False

    def __call__(self, pieces: list[bytes], buffer: bytes, end: int, last_seq: int) -> list[Any] | None:
        """The events of the lines `pieces` (`buffer[:end]`, their newlines included) when every
        line decodes and is clean, and the seqs strictly increase from `last_seq`; None when
        the chunk must be read line by line."""
        try:
            events = list(map(self.decode, pieces))
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            return None
        if not _ordered(events, last_seq):
            return None
        # the encodings `[e1,...,en]` hold n + 1 bytes beside the events, the lines n newlines
        length = layout_free_length(buffer, end) + 1
        if self._presence_first:
            if self._present_keys(pieces) == length:
                return events
            if self._written(events) != length:
                return None
            self._presence_first = False
            return events
        if self._written(events) == length:
            return events
        if self._present_keys(pieces) != length:
            return None
        self._presence_first = True
        return events

    def clean(self, line: bytes, event: Any) -> bool:
        """Whether one line, decoded to `event`, is clean."""
        length = layout_free_length(line)
        return self._written(event) == length or self._present_keys([line]) - 2 == length

    def _written(self, value: Any) -> int:
        """The length of `value`'s encoding, whitespace left out: msgspec writes none but the
        spaces of strings (it escapes tabs and carriage returns)."""
        scratch = self._scratch
        self._encode(value, scratch)
        return len(scratch) - scratch.count(b" ")

    def _present_keys(self, lines: list[bytes]) -> int:
        try:
            return self._written(list(map(self._present, lines)))
        except (msgspec.ValidationError, msgspec.DecodeError):
            return -1


_SEQ = operator.attrgetter("seq")


def _ordered(events: list[Any], last_seq: int) -> bool:
    """Whether a decoded chunk's seqs strictly increase, from `last_seq` on; found with C-level
    passes (map, list equality) rather than a Python loop over the chunk: consecutive seqs (what
    runtimes write) equal a range; any other run is compared pair by pair."""
    seqs = list(map(_SEQ, events))
    first = seqs[0]
    if first <= last_seq:
        return False
    return seqs == list(range(first, first + len(seqs))) or all(
        map(operator.lt, seqs, itertools.islice(seqs, 1, None))
    )
