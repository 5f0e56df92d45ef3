"""Fast trace v1 decoders: the msgspec Structs generated from the pydantic models of record
(`kvclaims.spec.trace_structs`, written by `kvclaims.spec.struct_codegen`), one per
event type, joined in a tagged union on `event`; decoding one line is then a single C call, and
reading a trace imports no pydantic.

What a Struct cannot express (the models' rules, such as "exactly one of blocks or tokens") is
checked by `run_model_validators` with the very functions the models' validators run
(`kvclaims.spec.model_rules`), once per distinct value; when one refuses, pydantic (imported
then, and only then) words the message, as the schema of record would. A test checks on
generated events that the Structs and the models accept exactly the same lines.

One documented difference: every integer must fit in a signed 64-bit word (`MAX_TRACE_INT`),
which the reader refuses instead of accepting what pydantic would.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Annotated, Any, Union

import msgspec

from kvclaims.spec import trace_structs
from kvclaims.spec.tables import MAX_TRACE_INT
from kvclaims.spec.trace_structs import MODEL_RULES, RULED_FIELDS

__all__ = [
    "EVENT_NAME",
    "EVENT_STRUCTS",
    "MAX_TRACE_INT",
    "NEEDS_MODEL_VALIDATION",
    "EventStruct",
    "convert_event",
    "event_decoder",
    "run_model_validators",
]

EVENT_STRUCTS: Mapping[str, type[msgspec.Struct]] = types.MappingProxyType(trace_structs.EVENT_STRUCTS)
"""One Struct per trace v1 event type, by event name; `struct.__struct_config__.tag` is the name."""

EventStruct = Union[tuple(EVENT_STRUCTS.values())]  # type: ignore[valid-type]  # noqa: UP007
"""Any decoded event (the tagged union over `event`)."""

NEEDS_MODEL_VALIDATION: frozenset[str] = frozenset(RULED_FIELDS)
"""Event types whose model (or a model nested in it) has rules a Struct cannot express;
`run_model_validators` checks them."""

EVENT_NAME: Mapping[type[msgspec.Struct], str] = types.MappingProxyType(
    {struct: name for name, struct in EVENT_STRUCTS.items()}
)


def event_decoder() -> msgspec.json.Decoder:
    """A JSON decoder for one event line into its Struct (fresh: decoders are cheap)."""
    return msgspec.json.Decoder(EventStruct)


def convert_event(document: Mapping[str, Any]) -> msgspec.Struct:
    """Validate a decoded event mapping (from an abstraction) into its Struct, or raise
    `msgspec.ValidationError`; checks the model rules where the type has them."""
    # the event's own Struct when its name is known: msgspec converts into one Struct about 20
    # times faster than into the tagged union, with the same checks (the tag is the name)
    struct = EVENT_STRUCTS.get(document.get("event")) if isinstance(document.get("event"), str) else None
    event = msgspec.convert(document, struct or EventStruct)
    name = EVENT_NAME[type(event)]
    if name in NEEDS_MODEL_VALIDATION:
        run_model_validators(name, event)
    return event


_PASSED: set[Any] = set()
"""Nested values (frozen, hashable Structs) that already obeyed their rules: the rules are pure
functions of the value, and a trace repeats the same few predicates many times."""


def run_model_validators(name: str, event: msgspec.Struct) -> None:
    """Check the model rules of an event of type `name` (in `NEEDS_MODEL_VALIDATION`), raising
    `msgspec.ValidationError` with pydantic's first message when one refuses."""
    fields = RULED_FIELDS[name]
    try:
        if fields is None:
            _obey(event)
            return
        for field in fields:
            value = getattr(event, field)
            if value is None or value in _PASSED:
                continue
            _obey(value)
            if len(_PASSED) < 4096:
                _PASSED.add(value)
    except ValueError as broken:
        raise msgspec.ValidationError(_model_message(name, event) or str(broken)) from None


def _obey(value: msgspec.Struct) -> None:
    """Run the rules of `value` and of every Struct nested in it (inner first, as pydantic
    validates), raising the first rule's `ValueError`."""
    for field in value.__struct_fields__:
        nested = getattr(value, field)
        for item in nested if type(nested) is list else (nested,):
            if isinstance(item, msgspec.Struct):
                _obey(item)
    for rule in MODEL_RULES.get(type(value), ()):
        rule(value)


def _model_message(name: str, event: msgspec.Struct) -> str | None:
    """pydantic's wording (`msg - at $.where`) of the first error the model of `name` finds in
    `event` (the whole event, or only its ruled fields); None if the model accepts it."""
    from pydantic import Field, TypeAdapter, ValidationError

    from kvclaims.spec.trace import EVENT_MODELS

    model = EVENT_MODELS[name]
    fields = RULED_FIELDS[name]
    try:
        if fields is None:
            model.model_validate(msgspec.to_builtins(event))
        for field in fields or ():
            info = model.model_fields[field]
            annotation = (
                Annotated[info.annotation, Field(discriminator=info.discriminator)]
                if info.discriminator
                else info.annotation
            )
            value = getattr(event, field)
            if value is not None:
                TypeAdapter(annotation).validate_python(msgspec.to_builtins(value))
    except ValidationError as error:
        detail = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in detail["loc"])
        return f"{detail['msg']} - at `$.{where}`"
    return None
