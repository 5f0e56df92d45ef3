"""Shared field types for the spec models: strict scalars, bounded identifiers, obligation names.

Scalars are strict (a YAML `"5"` is not the integer 5) because fail-closed input handling must
not guess. Enums stay lax so that YAML and JSON strings validate to members.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)

from kvclaims.spec.tables import LEGACY_OBLIGATION_ALIASES, MAX_IDENTIFIER_LENGTH
from kvclaims.spec.text import is_blank
from kvclaims.spec.vocabulary import Obligation

__all__ = [
    "MAX_PREFIX_BLOCKS",
    "FormatVersion",
    "Identifier",
    "NonBlankText",
    "NonNegativeInt",
    "ObligationName",
    "PositiveInt",
    "PositivePrefixBlocks",
    "PrefixBlocks",
    "SpecModel",
    "StrictBool",
    "StrictInt",
    "StrictStr",
    "Text",
    "is_blank",
    "model_rule",
]


class SpecModel(BaseModel):
    """Base of every closed spec model: unknown fields are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def model_rule(rule: Callable[[Any], None]) -> Any:
    """A pydantic model validator (after field validation) that runs `rule`, a plain function of
    the model's fields from `kvclaims.spec.model_rules`. The rule is kept on the validator
    (`__model_rule__`), so the generated msgspec Structs of trace v1 run the same function."""

    def validate(self: Any) -> Any:
        rule(self)
        return self

    validate.__model_rule__ = rule  # type: ignore[attr-defined]
    return model_validator(mode="after")(validate)


Identifier = Annotated[StrictStr, Field(min_length=1, max_length=MAX_IDENTIFIER_LENGTH)]
"""A claim, owner, object or request identifier: non-empty and bounded."""

Text = StrictStr
"""Free text (notes, reasons); may be empty, which for anchors means "not anchored". Whether it
says anything is `is_blank`'s question (`kvclaims.spec.text`), the one test of blank text."""


def _says_something(text: str) -> str:
    if is_blank(text):
        raise ValueError("must say something: it is empty or only characters that render as nothing")
    return text


NonBlankText = Annotated[StrictStr, Field(min_length=1), AfterValidator(_says_something)]
"""Text that must be shown (a reason, a surface): blank text (`kvclaims.spec.text`) is refused."""


PositiveInt = Annotated[StrictInt, Field(ge=1)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]

MAX_PREFIX_BLOCKS = 1 << 24
"""The most blocks one claimed prefix may span: 16,777,216 blocks is 268M tokens at 16 tokens
per block (16M even at one token per block), past every context length and every device pool.
Refinement tracks a claim's blocks by position, so a number past any real prefix (2^62) is
refused as invalid input, with its field, rather than sizing the checker's state."""

PrefixBlocks = Annotated[StrictInt, Field(ge=0, le=MAX_PREFIX_BLOCKS)]
"""A count of, or a position in, one prefix's blocks."""
PositivePrefixBlocks = Annotated[StrictInt, Field(ge=1, le=MAX_PREFIX_BLOCKS)]


def _exact_integer(value: Any) -> Any:
    """Refuse what equals an integer without being one (`true`, `1.0`): a literal's lax
    comparison would take them."""
    if type(value) is not int:
        raise ValueError(f"must be an integer, not {type(value).__name__} {value!r}")
    return value


FormatVersion = Annotated[Literal[1], BeforeValidator(_exact_integer)]
"""A file format's version number: exactly the JSON/YAML integer 1."""


def _normalise_obligation(value: Any) -> Any:
    if isinstance(value, str) and value in LEGACY_OBLIGATION_ALIASES:
        return LEGACY_OBLIGATION_ALIASES[value]
    return value


ObligationName = Annotated[
    Obligation,
    BeforeValidator(_normalise_obligation),
    WithJsonSchema(
        {
            "type": "string",
            "enum": [o.value for o in Obligation] + sorted(LEGACY_OBLIGATION_ALIASES),
            "description": "An obligation name; active_refusal_or_defer is the legacy alias "
            "of explicit_conflict_action.",
        }
    ),
]
"""An obligation as written in YAML/JSON: its name, or a legacy alias normalised on read."""
