"""Hostile traces and conforming twins for the requests cells of the rule x event table
(docs/rule-event-table.md); `test_rule_event_table` gathers `CASES`, `HEADERS` and `PAIRS`
from here as from `test_choke_points`. Expected verdicts are written here, never computed."""

from __future__ import annotations

from typing import Any

from kvclaims.refinement import Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R
from tests.statemachine.hostile import (
    Event,
    accept,
    admitted,
    claim_event,
    finished,
    materialized,
    materialized_claim,
    removed,
    reused,
    stored,
)

HELD = materialized_claim()
"""A hard_protected claim C holding 2 of the 64 usable blocks (`hostile.HEADER`)."""


def conflict(event: str, protected: int, active: int, shortfall: int | None = None) -> Event:
    """Request r refused or deferred for capacity, blaming C, with the proof's numbers (the
    shortfall as the proof computes it unless given)."""
    total = protected + active
    return {
        "event": event,
        "request_id": "r",
        "reason": "capacity",
        "blocking_claim_ids": ["C"],
        "protected_resident_blocks": protected,
        "active_live_blocks_required": active,
        "resident_plus_active_blocks": total,
        "usable_blocks": 64,
        "capacity_shortfall_blocks": max(0, total - 64) if shortfall is None else shortfall,
    }


AWAY = [*HELD, claim_event("offloaded", tier="cpu"), removed("C", 0, 100, "h0"), removed("C", 1, 101, "h1")]
"""C offloaded and its device blocks gone."""
D_HELD = [accept("D"), stored("D", 0, 200, "d0"), stored("D", 1, 201, "d1"), materialized("D")]
RESTORE_FOR_R = claim_event("restore_required", request_id="r")

CASES: list[tuple[str, list[Event], Outcome, R | None]] = [
    # 2 + 63 = 65 blocks in a 64-block pool fall 1 short, not 0
    (
        "refusal-with-no-shortfall",
        [*HELD, conflict("active_request_refused", 2, 63, shortfall=0)],
        Outcome.rejected,
        R.capacity_arithmetic,
    ),
    (
        "refusal-with-its-shortfall",
        [*HELD, conflict("active_request_refused", 2, 63)],
        Outcome.accepted,
        None,
    ),
    (
        "deferral-with-no-shortfall",
        [*HELD, conflict("active_request_deferred", 2, 63, shortfall=0)],
        Outcome.rejected,
        R.capacity_arithmetic,
    ),
    (
        "deferral-with-its-shortfall",
        [*HELD, conflict("active_request_deferred", 2, 63)],
        Outcome.accepted,
        None,
    ),
    # a released claim is no longer responsible: it cannot be what blocked the request
    (
        "refusal-blaming-a-released-claim",
        [*HELD, claim_event("released"), conflict("active_request_refused", 2, 63)],
        Outcome.rejected,
        R.attribution,
    ),
    (
        "refusal-blaming-a-live-claim",
        [*HELD, claim_event("materialized", leading_blocks=2), conflict("active_request_refused", 2, 63)],
        Outcome.accepted,
        None,
    ),
    # C reserves 2 blocks: a proof counting 3 protected blocks overstates the pool the model holds
    (
        "refusal-counting-a-block-c-does-not-hold",
        [*HELD, conflict("active_request_refused", 3, 62)],
        Outcome.rejected,
        R.capacity_state,
    ),
    (
        "refusal-counting-what-c-holds",
        [*HELD, conflict("active_request_refused", 2, 63)],
        Outcome.accepted,
        None,
    ),
    # a request is admitted once (until it finishes)
    ("admitted-twice", [admitted("r"), admitted("r"), finished("r")], Outcome.rejected, R.lifecycle),
    ("admitted-once-and-finished", [admitted("r"), finished("r"), finished("r2")], Outcome.accepted, None),
    # the same judgements on a deferral as on a refusal
    (
        "deferral-blaming-a-released-claim",
        [*HELD, claim_event("released"), conflict("active_request_deferred", 2, 63)],
        Outcome.rejected,
        R.attribution,
    ),
    (
        "deferral-blaming-a-live-claim",
        [*HELD, conflict("active_request_deferred", 2, 63)],
        Outcome.accepted,
        None,
    ),
    (
        "deferral-counting-a-block-c-does-not-hold",
        [*HELD, conflict("active_request_deferred", 3, 62)],
        Outcome.rejected,
        R.capacity_state,
    ),
    # an admission fits beside the claims' blocks: 2 + 63 overcommits 64, unless one of the
    # request's live blocks is one of C's
    (
        "admission-past-the-pool",
        [*HELD, admitted("r", live=63, claim_shared_blocks=0)],
        Outcome.rejected,
        R.capacity_state,
    ),
    (
        "admission-sharing-a-block-of-the-claim",
        [*HELD, admitted("r", live=63, claim_shared_blocks=1)],
        Outcome.accepted,
        None,
    ),
    # a refused request is done: it is neither deferred nor reuses a claim afterwards
    (
        "deferral-after-its-refusal",
        [*HELD, conflict("active_request_refused", 2, 63), conflict("active_request_deferred", 2, 63)],
        Outcome.rejected,
        R.lifecycle,
    ),
    (
        "deferral-before-its-refusal",
        [*HELD, conflict("active_request_deferred", 2, 63), conflict("active_request_refused", 2, 63)],
        Outcome.accepted,
        None,
    ),
    (
        "reuse-after-its-refusal",
        [*HELD, conflict("active_request_refused", 2, 63), reused("r")],
        Outcome.rejected,
        R.lifecycle,
    ),
    ("reuse-while-admitted", [*HELD, admitted("r"), reused("r"), finished("r")], Outcome.accepted, None),
    # a refused request is done: no claim's restore is required for it
    (
        "restore-required-for-a-refused-request",
        [
            *AWAY,
            *D_HELD,
            {**conflict("active_request_refused", 2, 63), "blocking_claim_ids": ["D"]},
            RESTORE_FOR_R,
        ],
        Outcome.rejected,
        R.lifecycle,
    ),
    (
        "restore-required-for-an-admitted-request",
        [*AWAY, admitted("r"), RESTORE_FOR_R],
        Outcome.accepted,
        None,
    ),
    (
        "refusal-after-its-admission",
        [*HELD, admitted("r"), conflict("active_request_refused", 2, 63)],
        Outcome.rejected,
        R.lifecycle,
    ),
]
"""(name, events, expected outcome, the rule a rejection names or None)."""

HEADERS: dict[str, dict[str, Any]] = {}
"""Case name -> its trace header, where it is not `hostile.HEADER`."""

PAIRS: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("capacity.proof_arithmetic", "active_request_refused"): [
        ("refusal-with-no-shortfall", "refusal-with-its-shortfall")
    ],
    ("capacity.proof_arithmetic", "active_request_deferred"): [
        ("deferral-with-no-shortfall", "deferral-with-its-shortfall")
    ],
    ("attribution.blocking_claims_are_responsible_and_exact", "active_request_refused"): [
        ("refusal-blaming-a-released-claim", "refusal-blaming-a-live-claim")
    ],
    ("capacity.state_each_block_counted_once", "active_request_refused"): [
        ("refusal-counting-a-block-c-does-not-hold", "refusal-counting-what-c-holds")
    ],
    ("requests.move_through_the_request_machine", "active_request_admitted"): [
        ("admitted-twice", "admitted-once-and-finished")
    ],
    ("attribution.blocking_claims_are_responsible_and_exact", "active_request_deferred"): [
        ("deferral-blaming-a-released-claim", "deferral-blaming-a-live-claim")
    ],
    ("capacity.state_each_block_counted_once", "active_request_deferred"): [
        ("deferral-counting-a-block-c-does-not-hold", "deferral-blaming-a-live-claim")
    ],
    ("capacity.state_each_block_counted_once", "active_request_admitted"): [
        ("admission-past-the-pool", "admission-sharing-a-block-of-the-claim")
    ],
    ("requests.move_through_the_request_machine", "active_request_deferred"): [
        ("deferral-after-its-refusal", "deferral-before-its-refusal")
    ],
    ("requests.move_through_the_request_machine", "request_reused"): [
        ("reuse-after-its-refusal", "reuse-while-admitted")
    ],
    ("requests.move_through_the_request_machine", "resident_claim_restore_required"): [
        ("restore-required-for-a-refused-request", "restore-required-for-an-admitted-request")
    ],
    ("requests.move_through_the_request_machine", "active_request_refused"): [
        ("refusal-after-its-admission", "refusal-with-its-shortfall")
    ],
}
"""Cell (rule, event) -> (violating case, conforming twin), by case name."""
