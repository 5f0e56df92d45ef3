"""Fast trace v1 decoders, derived from the pydantic models rather than written a second time.

The pydantic models of `kvclaims.spec.trace` are the schema of record. This module walks their
fields (annotation plus constraint metadata) and builds equivalent msgspec Structs, one per
event type, joined in a tagged union on `event`; decoding one line is then a single C call.
What a Struct cannot express (pydantic model validators, such as "exactly one of blocks or
tokens") is not re-implemented: pydantic itself re-runs them (`run_model_validators`) on the
fields that need them, once per distinct value. A test
checks on generated events that both accept exactly the same lines.

One documented difference: every integer must fit in a signed 64-bit word (`MAX_TRACE_INT`).
No runtime produces larger counters, msgpack cannot carry them, and a 2^80 `seq` is a sign of a
corrupt or hostile file, so the reader refuses it instead of accepting what pydantic would.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

import annotated_types
import msgspec
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from kvclaims.spec.trace import EVENT_MODELS

MAX_TRACE_INT = 2**63 - 1
"""The largest integer a trace may carry (signed 64-bit)."""

_CONSTRAINTS = {
    annotated_types.Ge: "ge",
    annotated_types.Gt: "gt",
    annotated_types.Le: "le",
    annotated_types.Lt: "lt",
    annotated_types.MinLen: "min_length",
    annotated_types.MaxLen: "max_length",
}


def _constraints(metadata: list[Any]) -> dict[str, Any]:
    """msgspec.Meta keywords for pydantic/annotated-types constraint metadata."""
    found: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):
            found |= _constraints(item.metadata)
            continue
        keyword = _CONSTRAINTS.get(type(item))
        if keyword is not None:
            found[keyword] = getattr(item, keyword)
    return found


class _Deriver:
    """Turns pydantic annotations into msgspec types, caching one Struct per model."""

    def __init__(self) -> None:
        self._structs: dict[tuple[type[BaseModel], str | None], type[msgspec.Struct]] = {}

    def field_type(self, info: FieldInfo) -> Any:
        return self.convert(info.annotation, list(info.metadata), info.discriminator)

    def convert(self, annotation: Any, metadata: list[Any], discriminator: Any = None) -> Any:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            inner, *extra = typing.get_args(annotation)
            return self.convert(inner, [*metadata, *extra], discriminator)
        if origin in (Union, types.UnionType):
            members = typing.get_args(annotation)
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
            if models and discriminator is not None:
                tagged = tuple(self.struct(m, tag_field=str(discriminator)) for m in models)
                rest = [self.convert(m, []) for m in members if m not in models]
                return Union[(*tagged, *rest)]
            return Union[tuple(self.convert(m, []) for m in members)]  # noqa: UP007
        if origin is list:
            (item,) = typing.get_args(annotation)
            return self._constrained(list[self.convert(item, [])], metadata)
        if origin is Literal:
            return annotation
        if annotation is type(None):
            return None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return self.struct(annotation, tag_field=None)
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return annotation
        if annotation is int:
            return self._constrained(int, metadata, le=MAX_TRACE_INT, ge=-MAX_TRACE_INT - 1)
        if annotation in (str, bool, float):
            return self._constrained(annotation, metadata)
        raise TypeError(f"no msgspec equivalent for field type {annotation!r}")

    @staticmethod
    def _constrained(base: Any, metadata: list[Any], **bounds: int) -> Any:
        keywords = _constraints(metadata)
        for keyword, bound in bounds.items():
            if keyword == "le":
                keywords["le"] = min(keywords.get("le", bound), bound)
            else:
                keywords["ge"] = max(keywords.get("ge", bound), bound)
        return Annotated[base, msgspec.Meta(**keywords)] if keywords else base

    def struct(self, model: type[BaseModel], *, tag_field: str | None) -> type[msgspec.Struct]:
        """The Struct for `model`; with `tag_field`, tagged by that field's literal default."""
        key = (model, tag_field)
        if key in self._structs:
            return self._structs[key]
        fields = []
        for name, info in model.model_fields.items():
            if name == tag_field:
                continue
            kind = self.field_type(info)
            if info.is_required():
                fields.append((name, kind))
            else:
                fields.append((name, kind, info.default))
        options: dict[str, Any] = {
            "kw_only": True,
            "frozen": True,
            "gc": False,  # decoded events hold no cycles; untracked objects spare the collector
            "omit_defaults": True,  # re-encoding gives the shortest form of the line: see reader
            "forbid_unknown_fields": model.model_config.get("extra") == "forbid",
        }
        if tag_field is not None:
            options |= {"tag_field": tag_field, "tag": model.model_fields[tag_field].default}
        struct = msgspec.defstruct(model.__name__, fields, **options)
        self._structs[key] = struct
        return struct


def _has_model_validators(model: type[BaseModel], seen: set[type] | None = None) -> bool:
    """Whether `model` or any model nested in its fields carries a pydantic model validator."""
    seen = set() if seen is None else seen
    if model in seen:
        return False
    seen.add(model)
    if model.__pydantic_decorators__.model_validators:
        return True
    return any(
        _has_model_validators(nested, seen)
        for info in model.model_fields.values()
        for nested in _models_in(info.annotation)
    )


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _validated_fields(model: type[BaseModel]) -> tuple[tuple[str, TypeAdapter[Any]], ...] | None:
    """How to re-run the validators a Struct cannot express: None when the event model itself
    has one (validate the whole event), else the fields whose nested models have one, each with
    a pydantic adapter for just that field."""
    if model.__pydantic_decorators__.model_validators:
        return None
    return tuple(
        (
            name,
            TypeAdapter(
                Annotated[info.annotation, Field(discriminator=info.discriminator)]
                if info.discriminator
                else info.annotation
            ),
        )
        for name, info in model.model_fields.items()
        if any(_has_model_validators(nested) for nested in _models_in(info.annotation))
    )


_DERIVER = _Deriver()

EVENT_STRUCTS: Mapping[str, type[msgspec.Struct]] = types.MappingProxyType(
    {name: _DERIVER.struct(model, tag_field="event") for name, model in EVENT_MODELS.items()}
)
"""One Struct per trace v1 event type, by event name; `struct.__struct_config__.tag` is the name."""

EventStruct = Union[tuple(EVENT_STRUCTS.values())]  # type: ignore[valid-type]  # noqa: UP007
"""Any decoded event (the tagged union over `event`)."""

_VALIDATED: Mapping[str, tuple[tuple[str, TypeAdapter[Any]], ...] | None] = types.MappingProxyType(
    {name: _validated_fields(model) for name, model in EVENT_MODELS.items() if _has_model_validators(model)}
)

NEEDS_MODEL_VALIDATION: frozenset[str] = frozenset(_VALIDATED)
"""Event types whose pydantic model (or a model nested in it) has validators a Struct cannot
express; `run_model_validators` re-runs them."""

EVENT_NAME: Mapping[type[msgspec.Struct], str] = types.MappingProxyType(
    {struct: name for name, struct in EVENT_STRUCTS.items()}
)


def event_decoder() -> msgspec.json.Decoder:
    """A JSON decoder for one event line into its Struct (fresh: decoders are cheap)."""
    return msgspec.json.Decoder(EventStruct)


def convert_event(document: Mapping[str, Any]) -> msgspec.Struct:
    """Validate a decoded event mapping (from an abstraction) into its Struct, or raise
    `msgspec.ValidationError`; runs the pydantic model validators where the type needs them."""
    # the event's own Struct when its name is known: msgspec converts into one Struct about 20
    # times faster than into the tagged union, with the same checks (the tag is the name)
    struct = EVENT_STRUCTS.get(document.get("event")) if isinstance(document.get("event"), str) else None
    event = msgspec.convert(document, struct or EventStruct)
    name = EVENT_NAME[type(event)]
    if name in NEEDS_MODEL_VALIDATION:
        run_model_validators(name, event)
    return event


_PASSED: set[Any] = set()
"""Nested values (frozen, hashable Structs) whose validators already passed: they are pure
functions of the value, and a trace repeats the same few predicates many times."""


def run_model_validators(name: str, event: msgspec.Struct) -> None:
    """Run the schema-of-record validators that the Struct of `name` cannot express, raising
    `msgspec.ValidationError` with pydantic's first message when one refuses."""
    fields = _VALIDATED[name]
    try:
        if fields is None:
            EVENT_MODELS[name].model_validate(msgspec.to_builtins(event))
            return
        for field, adapter in fields:
            value = getattr(event, field)
            if value is None or value in _PASSED:
                continue
            adapter.validate_python(msgspec.to_builtins(value))
            if len(_PASSED) < 4096:
                _PASSED.add(value)
    except ValidationError as error:
        detail = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in detail["loc"])
        raise msgspec.ValidationError(f"{detail['msg']} - at `$.{where}`") from None
