"""Rules a model's fields must satisfy together, as plain functions of the model's attributes.

Each rule raises `ValueError` when the fields break it. The pydantic models run them as model
validators (`kvclaims.spec._types.model_rule`); the refinement reader runs the same functions on
its msgspec Structs (`kvclaims.refinement.decoding`), without importing pydantic. One rule, one
function: the two readers cannot disagree on what it says.
"""

from __future__ import annotations

from typing import Any


def exactly_one_unit(predicate: Any) -> None:
    """A leading-prefix predicate gives its threshold in blocks or in tokens, never both or neither."""
    if (predicate.blocks is None) == (predicate.tokens is None):
        raise ValueError("give exactly one of 'blocks' or 'tokens'")


def chosen_among_candidates(route: Any) -> None:
    """A routing decision names distinct candidates and chooses one of them."""
    if len(set(route.candidate_engines)) != len(route.candidate_engines):
        raise ValueError("candidate_engines: an engine is named twice")
    if route.chosen_engine not in route.candidate_engines:
        raise ValueError("chosen_engine: not one of candidate_engines")
