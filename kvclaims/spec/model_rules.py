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


def caps_bound_their_durations(terms: Any) -> None:
    """A cap (`max_duration_steps` / `max_duration_ms`) bounds the duration of its own clock, so it
    needs that duration and is at least as long: a cap below it would promise and forbid at once."""
    for clock in ("steps", "ms"):
        cap, duration = getattr(terms, f"max_duration_{clock}"), getattr(terms, f"duration_{clock}")
        if cap is None:
            continue
        if duration is None:
            raise ValueError(f"max_duration_{clock}: a cap needs duration_{clock}, the term it caps")
        if cap < duration:
            raise ValueError(f"max_duration_{clock} {cap} is shorter than duration_{clock} {duration}")


def extends_a_duration(extension: Any) -> None:
    """An extension gives the new term on at least one clock."""
    if extension.duration_steps is None and extension.duration_ms is None:
        raise ValueError("give duration_steps or duration_ms: the term the extension grants")


def chosen_among_candidates(route: Any) -> None:
    """A routing decision names distinct candidates and chooses one of them."""
    if len(set(route.candidate_engines)) != len(route.candidate_engines):
        raise ValueError("candidate_engines: an engine is named twice")
    if route.chosen_engine not in route.candidate_engines:
        raise ValueError("chosen_engine: not one of candidate_engines")
