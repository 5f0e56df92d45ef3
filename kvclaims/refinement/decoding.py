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

import types
from collections.abc import Mapping
from typing import Any, Union

import msgspec

from kvclaims.spec import trace_structs
from kvclaims.spec.tables import MAX_TRACE_INT

__all__ = [
    "EVENT_NAME",
    "EVENT_STRUCTS",
    "MAX_TRACE_INT",
    "EventStruct",
    "convert_event",
    "event_decoder",
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
