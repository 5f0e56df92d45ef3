"""What a MicroRuntime is asked to do: claims and requests, as small frozen values.

These are the runtime's own fast input records (no pydantic on the hot path). Their trace form
is the `kvclaims.spec.trace` models; `validate_inputs` turns every way a scenario's input can be
wrong (duplicate ids, a footprint larger than the pool, a predicate larger than its footprint)
into an `InputError` before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.vocabulary import ProtectionMode


@dataclass(frozen=True)
class ClaimSpec:
    """A resident claim as submitted: the reusable prefix `object_id`, the leading blocks it
    needs (`required_blocks`, or the boundary B of a two-key claim) and the blocks it asks the
    runtime to hold (`footprint_blocks`). `value` is an optional policy input (seed 001 3.1).

    `max_duration_steps` / `max_duration_ms` cap the claim's whole protected life on the clock of
    its duration, from acceptance (DESIGN 6.3, soft terms): neither a refreshing hit nor an
    extension (`MicroRuntime.extend_claim`) keeps it past the cap."""

    claim_id: str
    object_id: str
    mode: ProtectionMode
    footprint_blocks: int
    required_blocks: int
    owner_scope: str = "tenant-0"
    duration_steps: int | None = None
    duration_ms: int | None = None
    refresh_on_hit: bool = False
    two_key: bool = False
    value: float = 0.0
    max_duration_steps: int | None = None
    max_duration_ms: int | None = None

    def predicate(self) -> dict[str, Any]:
        """The trace form of the materialization predicate."""
        if self.two_key:
            return {"kind": "hybrid_two_key", "boundary_blocks": self.required_blocks}
        return {"kind": "leading_prefix_at_least", "blocks": self.required_blocks}

    def terms(self) -> dict[str, Any]:
        """The claim's terms as trace fields (submitted / accepted events)."""
        terms: dict[str, Any] = {
            "claim_id": self.claim_id,
            "owner_scope": self.owner_scope,
            "object_id": self.object_id,
            "mode": self.mode.value,
            "footprint_blocks": self.footprint_blocks,
            "predicate": self.predicate(),
        }
        if self.duration_steps is not None:
            terms["duration_steps"] = self.duration_steps
        if self.duration_ms is not None:
            terms["duration_ms"] = self.duration_ms
        if self.refresh_on_hit:
            terms["refresh_on_hit"] = True
        if self.max_duration_steps is not None:
            terms["max_duration_steps"] = self.max_duration_steps
        if self.max_duration_ms is not None:
            terms["max_duration_ms"] = self.max_duration_ms
        return terms


class RequestKind(StrEnum):
    """Why a request runs: to build reusable resident state, or as active work under test."""

    resident = "resident"
    active = "active"


@dataclass(frozen=True)
class RequestSpec:
    """An active request over the first `blocks` blocks of `object_id`'s prefix.

    Under full attention every computed block stays live until the request finishes; `chunks`
    splits the prefill into steps (it sums to `blocks`) without bounding that. `reuse_claim`
    names the claim whose object this request returns to. `job_id` / `last_turn` describe an
    agent job's turn, for TTL pinning (seed 003).
    """

    request_id: str
    object_id: str
    blocks: int
    kind: RequestKind = RequestKind.active
    chunks: tuple[int, ...] | None = None
    reuse_claim: str | None = None
    job_id: str | None = None
    last_turn: bool = True

    @property
    def chunk_sizes(self) -> tuple[int, ...]:
        return self.chunks if self.chunks is not None else (self.blocks,)


def _duration_problem(claim: ClaimSpec) -> str | None:
    """One positive duration per expiring claim: steps or milliseconds. Both at once would
    promise two clocks, and expiring on the first to end would break the other's promise. A cap
    bounds the duration of its own clock, so it needs that duration and is at least as long (the
    contract's `caps_bound_their_durations`, same messages)."""
    given = [d for d in (claim.duration_steps, claim.duration_ms) if d is not None]
    if any(d <= 0 for d in given):
        return "a duration must be positive"
    if len(given) == 2:
        return "give duration_steps or duration_ms, not both"
    if claim.mode is ProtectionMode.expiring and not given:
        return "an expiring claim needs a positive duration_steps or duration_ms"
    if claim.refresh_on_hit and not given:
        return "refresh_on_hit needs a duration to refresh"
    for clock in ("steps", "ms"):
        cap, duration = getattr(claim, f"max_duration_{clock}"), getattr(claim, f"duration_{clock}")
        if cap is None:
            continue
        if cap <= 0:
            return "a cap must be positive"
        if duration is None:
            return f"max_duration_{clock}: a cap needs duration_{clock}, the term it caps"
        if cap < duration:
            return f"max_duration_{clock} {cap} is shorter than duration_{clock} {duration}"
    return None


def validate_inputs(
    usable_blocks: int,
    claims: Iterable[ClaimSpec] = (),
    requests: Iterable[RequestSpec] = (),
    *,
    source: str = "scenario",
) -> None:
    """Raise one `InputError` naming every problem with this pool, these claims and requests."""
    problems: list[Problem] = []

    def bad(field: str, message: str) -> None:
        problems.append(Problem(file=source, field=field, message=message))

    if usable_blocks <= 0:
        bad("usable_blocks", f"the pool needs a positive number of usable blocks, got {usable_blocks}")
    seen: set[str] = set()
    for claim in claims:
        where = f"claims.{claim.claim_id}"
        if claim.claim_id in seen:
            bad(where, f"duplicate claim id {claim.claim_id!r}: a claim id is decided once")
        seen.add(claim.claim_id)
        if claim.footprint_blocks <= 0 or claim.required_blocks <= 0:
            bad(where, "footprint_blocks and the predicate's blocks must be positive")
        elif claim.required_blocks > claim.footprint_blocks:
            bad(
                where,
                f"the predicate needs {claim.required_blocks} leading blocks but the footprint is "
                f"{claim.footprint_blocks}: the claim could never materialize",
            )
        if usable_blocks > 0 and claim.footprint_blocks > usable_blocks:
            bad(
                where,
                f"footprint {claim.footprint_blocks} blocks is larger than the pool "
                f"({usable_blocks} usable blocks)",
            )
        duration_problem = _duration_problem(claim)
        if duration_problem is not None:
            bad(where, duration_problem)
    seen_requests: set[str] = set()
    for request in requests:
        where = f"requests.{request.request_id}"
        if request.request_id in seen_requests:
            bad(where, f"duplicate request id {request.request_id!r}")
        seen_requests.add(request.request_id)
        if request.blocks <= 0:
            bad(where, f"a request needs a positive number of blocks, got {request.blocks}")
        if request.chunks is None and usable_blocks > 0 and request.blocks > usable_blocks:
            bad(
                where,
                f"{request.blocks} live blocks can never fit the pool ({usable_blocks} usable blocks)",
            )
        if request.chunks is not None and (
            sum(request.chunks) != request.blocks or any(c <= 0 for c in request.chunks)
        ):
            bad(where, f"chunks {list(request.chunks)} must be positive and sum to {request.blocks}")
    if problems:
        raise InputError(problems)
