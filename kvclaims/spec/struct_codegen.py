"""Writes `kvclaims.spec.trace_structs`: trace v1's msgspec Structs, generated from the
pydantic models of record, so that reading a trace never imports pydantic.

    python -m kvclaims.spec.struct_codegen kvclaims/spec/trace_structs.py

(`make reports` runs it). The generator walks the models' fields (annotation plus constraint
metadata) and writes one Struct per model, each event type tagged on `event`, plus the tables the
reader needs (the fields whose nested model's keys are audited too). A model's rules
(`kvclaims.spec.model_rules`, the functions its validators run) become its Struct's
`__post_init__`, so a Struct that breaks one is never built: decoding or converting refuses it
with the rule's own words, located at the field. A test regenerates the module and fails on any difference,
and another checks on generated lines that the Structs accept exactly what the models accept.

Every integer is bounded to a signed 64-bit word (`MAX_TRACE_INT`), where pydantic would take any:
the one documented difference between the Structs and the models.
"""

from __future__ import annotations

import enum
import json
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kvclaims.spec.tables import MAX_TRACE_INT
from kvclaims.spec.trace import EVENT_MODELS, TraceHeader

_CONSTRAINTS = {
    annotated_types.Ge: "ge",
    annotated_types.Gt: "gt",
    annotated_types.Le: "le",
    annotated_types.Lt: "lt",
    annotated_types.MinLen: "min_length",
    annotated_types.MaxLen: "max_length",
}

_HEAD = '''"""Trace v1 as msgspec Structs, and the tables the refinement reader needs: GENERATED from the
pydantic models of `kvclaims.spec.trace` by `kvclaims.spec.struct_codegen` (`make reports`).
Do not edit: a test fails when this file differs from what the models generate."""

from typing import Annotated, Literal

from msgspec import Meta, Struct

'''


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


def _constrained(base: str, metadata: list[Any], **bounds: int) -> str:
    keywords = _constraints(metadata)
    for keyword, bound in bounds.items():
        if keyword == "le":
            keywords["le"] = min(keywords.get("le", bound), bound)
        else:
            keywords["ge"] = max(keywords.get("ge", bound), bound)
    if not keywords:
        return base
    return f"Annotated[{base}, Meta({', '.join(f'{k}={_literal(v)}' for k, v in keywords.items())})]"


def _single_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a field typed `Model` or `Model | None` (open nested models, like a
    checkpoint, whose keys the reader audits); None for anything else."""
    members = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    if len(members) == 1 and isinstance(members[0], type) and issubclass(members[0], BaseModel):
        return members[0]
    return None


def _rules_of(model: type[BaseModel]) -> list[Any]:
    """The plain rule functions of `model`'s validators; a validator that is not a `model_rule`
    cannot run on a Struct, so it stops the generation."""
    rules = []
    for name, decorator in model.__pydantic_decorators__.model_validators.items():
        rule = getattr(decorator.func, "__model_rule__", None)
        if rule is None:
            raise TypeError(f"{model.__name__}.{name} is not a model_rule: the Structs cannot run it")
        rules.append(rule)
    return rules


class _Generator:
    """The module's text: one Struct per (model, tag field), written before its first use."""

    def __init__(self) -> None:
        self._names: dict[tuple[type[BaseModel], str | None], str] = {}
        self._classes: list[str] = []
        self._nested: dict[str, dict[str, str]] = {}
        self._imports: dict[str, set[str]] = {}

    def _import(self, thing: Any) -> str:
        self._imports.setdefault(thing.__module__, set()).add(thing.__name__)
        return thing.__name__

    def convert(self, annotation: Any, metadata: list[Any], discriminator: Any = None) -> str:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            inner, *extra = typing.get_args(annotation)
            return self.convert(inner, [*metadata, *extra], discriminator)
        if origin in (Union, types.UnionType):
            members = typing.get_args(annotation)
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
            if models and discriminator is not None:
                tagged = [self.struct(m, tag_field=str(discriminator)) for m in models]
                return " | ".join([*tagged, *(self.convert(m, []) for m in members if m not in models)])
            return " | ".join(self.convert(m, []) for m in members)
        if origin is list:
            (item,) = typing.get_args(annotation)
            return _constrained(f"list[{self.convert(item, [])}]", metadata)
        if origin is Literal:
            return f"Literal[{', '.join(_literal(value) for value in typing.get_args(annotation))}]"
        if annotation is type(None):
            return "None"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return self.struct(annotation, tag_field=None)
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return self._import(annotation)
        if annotation is int:
            return _constrained("int", metadata, le=MAX_TRACE_INT, ge=-MAX_TRACE_INT - 1)
        if annotation in (str, bool, float):
            return _constrained(annotation.__name__, metadata)
        raise TypeError(f"no msgspec equivalent for field type {annotation!r}")

    def struct(self, model: type[BaseModel], *, tag_field: str | None) -> str:
        """The Struct name for `model` (written on first use); with `tag_field`, tagged by that
        field's literal default."""
        key = (model, tag_field)
        if key in self._names:
            return self._names[key]
        name = model.__name__
        if name in self._names.values():
            raise TypeError(f"{name} is needed with two tag fields: one Struct name each")
        fields = []
        for field, info in model.model_fields.items():
            if field == tag_field:
                continue
            kind = self.convert(info.annotation, list(info.metadata), info.discriminator)
            default = "" if info.is_required() else f" = {_literal(info.default)}"
            fields.append(f"    {field}: {kind}{default}\n")
        options = {
            "kw_only": True,
            "frozen": True,
            "gc": False,  # decoded events hold no cycles; untracked objects spare the collector
            "omit_defaults": True,  # re-encoding gives the shortest form of a line (the audit)
            "forbid_unknown_fields": model.model_config.get("extra") == "forbid",
        }
        if tag_field is not None:
            options |= {"tag_field": tag_field, "tag": model.model_fields[tag_field].default}
        header = "".join(f"    {option}={_literal(value)},\n" for option, value in options.items())
        rules = "".join(f"        {self._import(rule)}(self)\n" for rule in _rules_of(model))
        if rules:
            fields.append(f"\n    def __post_init__(self) -> None:\n{rules}")
        self._classes.append(f"class {name}(\n    Struct,\n{header}):\n{''.join(fields)}")
        self._names[key] = name
        audited = {field: self._audited(info) for field, info in model.model_fields.items()}
        if any(audited.values()):
            self._nested[name] = {field: nested for field, nested in audited.items() if nested}
        return name

    def _audited(self, info: FieldInfo) -> str | None:
        """The Struct of a field holding one nested model, whose keys the reader audits too."""
        nested = _single_model(info.annotation)
        return None if nested is None else self.struct(nested, tag_field=None)

    def module(self) -> str:
        header_name = self.struct(TraceHeader, tag_field=None)
        events = {name: self.struct(model, tag_field="event") for name, model in EVENT_MODELS.items()}
        imports = "".join(
            f"from {module} import {', '.join(sorted(names))}\n"
            for module, names in sorted(self._imports.items())
        )
        parts = [_HEAD, imports, "\n", *(f"\n{text}\n" for text in self._classes)]
        parts.append(f'\nHEADER = {header_name}\n"""Line 1 of every trace."""\n')
        tables = [
            (
                "EVENT_STRUCTS",
                "One Struct per event type, by event name.",
                {_literal(name): struct for name, struct in events.items()},
            ),
            (
                "NESTED_FIELDS",
                "The fields that hold one nested model (`Model` or `Model | None`), with its Struct:\n"
                "the reader audits that object's keys too.",
                {name: _inline(fields) for name, fields in self._nested.items()},
            ),
        ]
        parts += [_table(name, doc, rows) for name, doc, rows in tables]
        return "".join(parts)


def _literal(value: Any) -> str:
    """`value` as Python source in the project's style (double quotes, a one-tuple's comma)."""
    if type(value) is str:
        return json.dumps(value)
    if type(value) is tuple:
        return _tuple([_literal(item) for item in value])
    if value is None or type(value) in (bool, int):
        return repr(value)
    raise TypeError(f"no literal for {value!r}")


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _inline(fields: dict[str, str]) -> str:
    lines = "".join(f'        "{field}": {nested},\n' for field, nested in fields.items())
    return "{\n" + lines + "    }"


def _table(name: str, doc: str, rows: dict[str, str]) -> str:
    """A dict literal `name` with its docstring; `rows` are key and value as source."""
    body = "".join(f"    {key}: {value},\n" for key, value in rows.items())
    return f'\n{name} = {{\n{body}}}\n"""{doc}"""\n'


def generate() -> str:
    """The text of `kvclaims.spec.trace_structs` as the models define it now."""
    return _Generator().module()


MODULE = Path(__file__).with_name("trace_structs.py")
"""Where the generated module lives in the package."""


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else MODULE
    target.write_text(generate(), encoding="utf-8")
    print(target)
