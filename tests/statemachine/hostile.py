"""Hand-written trace v1 events for the hostile tests: shorthand constructors for the events
(data, not the model), so that a trace reads as the list of its events."""

from __future__ import annotations

import json
from typing import Any

from kvclaims.refinement import check_bytes
from kvclaims.refinement.verdict import TraceVerdict

Event = dict[str, Any]
HEADER: dict[str, Any] = {"kvclaims_trace": 1, "usable_blocks": 64, "block_size": 16}


def check(events: list[Event], header: dict[str, Any] | None = None) -> TraceVerdict:
    """The refinement verdict of the closed trace `header` + `events`."""
    docs = [header or HEADER, *({"seq": i, **e} for i, e in enumerate(events))]
    docs.append({"seq": len(events), "event": "trace_closed", "reason": "closed"})
    return check_bytes(b"".join(json.dumps(d).encode() + b"\n" for d in docs))


def prefix_predicate(blocks: int | None = None, tokens: int | None = None) -> dict[str, Any]:
    shown = {"blocks": blocks} if tokens is None else {"tokens": tokens}
    return {"kind": "leading_prefix_at_least", **shown}


def accept(
    claim: str = "C",
    *,
    blocks: int = 2,
    footprint: int | None = None,
    two_key: bool = False,
    mode: str = "hard_protected",
    **fields: Any,
) -> Event:
    predicate = {"kind": "hybrid_two_key", "boundary_blocks": blocks} if two_key else prefix_predicate(blocks)
    return {
        "event": "resident_claim_accepted",
        "claim_id": claim,
        "owner_scope": "t",
        "object_id": f"o:{claim}",
        "mode": mode,
        "footprint_blocks": footprint or blocks,
        "predicate": predicate,
        **fields,
    }


def submit(claim: str = "C", *, predicate: dict[str, Any], footprint: int = 2, **fields: Any) -> Event:
    return {
        "event": "resident_claim_submitted",
        "claim_id": claim,
        "owner_scope": "t",
        "object_id": f"o:{claim}",
        "mode": "hard_protected",
        "footprint_blocks": footprint,
        "predicate": predicate,
        **fields,
    }


def stored(claim: str | None, position: int | None, block: int, content: str, **fields: Any) -> Event:
    named = {} if claim is None else {"claim_id": claim}
    placed = {} if position is None else {"position": position}
    return {"event": "block_stored", "block_id": block, "block_hash": content, **named, **placed, **fields}


def removed(claim: str | None, position: int | None, block: int, content: str) -> Event:
    named = {} if claim is None else {"claim_id": claim}
    placed = {} if position is None else {"position": position}
    return {"event": "block_removed", "block_id": block, "block_hash": content, **named, **placed}


def claim_event(name: str, claim: str = "C", **fields: Any) -> Event:
    return {"event": f"resident_claim_{name}", "claim_id": claim, **fields}


def materialized(claim: str = "C", leading: int = 2, **fields: Any) -> Event:
    return claim_event("materialized", claim, leading_blocks=leading, **fields)


def checkpoint(value: str, boundary: int = 2) -> dict[str, Any]:
    return {"boundary": boundary, "value_hash": value, "payload_hash": "payload"}


def admitted(request: str, live: int = 1, **fields: Any) -> Event:
    return {"event": "active_request_admitted", "request_id": request, "active_live_blocks": live, **fields}


def finished(request: str) -> Event:
    return {"event": "request_finished", "request_id": request, "status": "finished"}


def reused(request: str, claim: str = "C", cached: int = 2, satisfied: bool = True, **fields: Any) -> Event:
    return {
        "event": "request_reused",
        "request_id": request,
        "claim_id": claim,
        "cached_blocks": cached,
        "predicate_satisfied": satisfied,
        **fields,
    }


def refused_for_restoration(request: str, claim: str = "C") -> Event:
    return {
        "event": "active_request_refused",
        "request_id": request,
        "reason": "restoration_failed",
        "blocking_claim_ids": [claim],
    }


def materialized_claim(claim: str = "C", **terms: Any) -> list[Event]:
    """A hard_protected claim of 2 blocks, accepted, stored and materialized."""
    return [
        accept(claim, **terms),
        stored(claim, 0, 100, "h0"),
        stored(claim, 1, 101, "h1"),
        materialized(claim),
    ]
