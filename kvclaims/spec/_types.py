"""Shared field types for the spec models: strict scalars, bounded identifiers, obligation names.

Scalars are strict (a YAML `"5"` is not the integer 5) because fail-closed input handling must
not guess. Enums stay lax so that YAML and JSON strings validate to members.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from kvclaims.spec.tables import LEGACY_OBLIGATION_ALIASES, MAX_IDENTIFIER_LENGTH
from kvclaims.spec.vocabulary import Obligation

__all__ = [
    "Identifier",
    "NonNegativeInt",
    "ObligationName",
    "PositiveInt",
    "SpecModel",
    "StrictBool",
    "StrictInt",
    "StrictStr",
    "Text",
]


class SpecModel(BaseModel):
    """Base of every closed spec model: unknown fields are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Identifier = Annotated[StrictStr, Field(min_length=1, max_length=MAX_IDENTIFIER_LENGTH)]
"""A claim, owner, object or request identifier: non-empty and bounded."""

Text = StrictStr
"""Free text (notes, reasons); may be empty, which for anchors means "not anchored"."""

PositiveInt = Annotated[StrictInt, Field(ge=1)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]


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
