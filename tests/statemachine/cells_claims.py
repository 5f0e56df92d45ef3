"""Hostile traces and conforming twins for the claims cells of the rule x event table
(docs/rule-event-table.md); `test_rule_event_table` gathers `CASES`, `HEADERS` and `PAIRS`
from here as from `test_choke_points`. Expected verdicts are written here, never computed."""

from __future__ import annotations

from typing import Any

from kvclaims.refinement import Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R
from tests.statemachine.hostile import (
    Event,
    accept,
    claim_event,
    finished,
    materialized,
    materialized_claim,
    prefix_predicate,
    removed,
    reused,
    stored,
    submit,
)

MS = 1_000_000
"""t_ns per millisecond."""

REFRESHED = {"mode": "expiring", "duration_ms": 100, "t_ns": 0, "refresh_on_hit": True}
"""An expiring claim promising 100 ms from acceptance at t_ns 0, its clock restarted by a hit."""

CASES: list[tuple[str, list[Event], Outcome, R | None]] = [
    # an event that names a claim names a decided one: a rejected claim cannot be released
    (
        "release-of-a-rejected-claim",
        [{"event": "resident_claim_rejected", "claim_id": "C", "reason": "budget"}, claim_event("released")],
        Outcome.rejected,
        R.identity,
    ),
    ("release-of-an-accepted-claim", [accept(), claim_event("released")], Outcome.accepted, None),
    ("materialized-before-its-acceptance", [materialized(), accept()], Outcome.rejected, R.identity),
    ("materialized-after-its-acceptance", [accept(), materialized()], Outcome.accepted, None),
    # a materialized report must reach the predicate (2 leading blocks)
    (
        "materialized-short-of-the-predicate",
        [accept(), stored("C", 0, 100, "h0"), materialized(leading=1)],
        Outcome.rejected,
        R.lifecycle,
    ),
    (
        "materialized-at-the-predicate",
        [accept(), stored("C", 0, 100, "h0"), stored("C", 1, 101, "h1"), materialized(leading=2)],
        Outcome.accepted,
        None,
    ),
    # a satisfied hit at 80 ms restarts a refresh_on_hit clock: expiring at 150 ms is 70 ms in;
    # a miss restarts nothing, so the same expiry keeps the 100 ms promise
    (
        "expiry-before-the-term-a-hit-restarted",
        [*materialized_claim(**REFRESHED), reused("r", t_ns=80 * MS), claim_event("expired", t_ns=150 * MS)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "expiry-after-a-miss-restarted-nothing",
        [
            *materialized_claim(**REFRESHED),
            reused("r", cached=0, satisfied=False, t_ns=80 * MS),
            claim_event("expired", t_ns=150 * MS),
        ],
        Outcome.accepted,
        None,
    ),
]
"""(name, events, expected outcome, the rule a rejection names or None)."""

OFFLOADED_AND_RESTORING = [
    *materialized_claim(),
    claim_event("offloaded", tier="cpu"),
    removed("C", 0, 100, "h0"),
    removed("C", 1, 101, "h1"),
    claim_event("restore_required", request_id="r"),
]
"""The 2-block claim offloaded, its device blocks gone, a restore for request r under way."""


def _restored_in_new_blocks(second: str) -> list[Event]:
    """The restore brings position 0 back with its content and position 1 with `second`, in new
    blocks, then r reuses the claim."""
    back = [stored("C", 0, 200, "h0"), stored("C", 1, 201, second), claim_event("restored", request_id="r")]
    return [*OFFLOADED_AND_RESTORING, *back, reused("r")]


CASES += [
    # a claim position holds the content it was first stored with, after a restore too: a
    # restore that brings position 1 back with other content restores another prefix
    ("restored-with-other-content", _restored_in_new_blocks("other"), Outcome.rejected, R.block_identity),
    ("restored-with-its-content-in-new-blocks", _restored_in_new_blocks("h1"), Outcome.accepted, None),
    # a second block of other content never holds the position: once the first block goes,
    # the predicate has fallen (a harm the trace never reports)
    (
        "second-block-of-other-content-for-a-position",
        [*materialized_claim(), stored("C", 0, 555, "other"), removed("C", 0, 100, "h0"), reused("r")],
        Outcome.rejected,
        R.block_identity,
    ),
    (
        "second-block-of-the-same-content-for-a-position",
        [*materialized_claim(), stored("C", 0, 555, "h0"), removed("C", 0, 100, "h0"), reused("r")],
        Outcome.accepted,
        None,
    ),
]


def _expiring_at_50_ms(*decided: Event) -> list[Event]:
    """C decided by `decided` (its duration in their terms), materialized at 1 ms, expired at 50."""
    at = {"t_ns": MS}
    blocks = [stored("C", 0, 100, "h0", **at), stored("C", 1, 101, "h1", **at), materialized(**at)]
    return [*decided, *blocks, claim_event("expired", t_ns=50 * MS)]


def _expiring(duration_ms: int) -> dict[str, Any]:
    return {"mode": "expiring", "duration_ms": duration_ms, "t_ns": 0}


def _conditionally(duration_ms: int) -> Event:
    """C conditionally accepted with `duration_ms` after a submission promising 100 ms."""
    return {**_SUBMITTED_100, "event": "resident_claim_conditionally_accepted", "duration_ms": duration_ms}


_SUBMITTED_100 = submit(predicate=prefix_predicate(2), **_expiring(100))
CASES += [
    # the duration an expiry is judged on is the one the decision promised: in the acceptance,
    # in the submission it repeats, or in a conditional acceptance that changed it
    (
        "expiry-at-50-ms-of-an-accepted-100",
        _expiring_at_50_ms(accept(**_expiring(100))),
        Outcome.rejected,
        R.duration,
    ),
    (
        "expiry-at-50-ms-of-an-accepted-10",
        _expiring_at_50_ms(accept(**_expiring(10))),
        Outcome.accepted,
        None,
    ),
    (
        "expiry-at-50-ms-of-a-submitted-100",
        _expiring_at_50_ms(_SUBMITTED_100, accept(**_expiring(100))),
        Outcome.rejected,
        R.duration,
    ),
    (
        "expiry-at-50-ms-of-a-submitted-10",
        _expiring_at_50_ms(submit(predicate=prefix_predicate(2), **_expiring(10)), accept(**_expiring(10))),
        Outcome.accepted,
        None,
    ),
    (
        "expiry-at-50-ms-of-a-conditional-100",
        _expiring_at_50_ms(_SUBMITTED_100, {**_conditionally(100), "reason": "kept"}),
        Outcome.rejected,
        R.duration,
    ),
    (
        "expiry-at-50-ms-of-a-conditional-10",
        _expiring_at_50_ms(_SUBMITTED_100, {**_conditionally(10), "reason": "shorter"}),
        Outcome.accepted,
        None,
    ),
]

_FELL = [*materialized_claim(), removed("C", 1, 101, "h1")]
"""C's second block gone: the predicate (2 blocks) has fallen."""
_OVERWRITTEN = [*materialized_claim(), stored(None, None, 101, "x")]
"""C's second block reused for other content: the predicate has fallen too."""
_RESTORED_BY_R = [*OFFLOADED_AND_RESTORING, stored("C", 0, 200, "h0"), stored("C", 1, 201, "h1")]
"""The restore's blocks are back; the restored event (for some request) comes next."""
CASES += [
    # a fallen prefix is reported as harm, whichever block event made it fall
    ("block-removed-and-the-fall-unreported", _FELL, Outcome.rejected, R.no_silent_harm),
    ("block-overwritten-and-the-fall-unreported", _OVERWRITTEN, Outcome.rejected, R.no_silent_harm),
    (
        "block-overwritten-and-the-fall-reported",
        [*_OVERWRITTEN, claim_event("harmed", leading_blocks=1, required_blocks=2)],
        Outcome.accepted,
        None,
    ),
    # a harm or loss report agrees with the blocks the model holds
    (
        "harm-reported-with-numbers-that-hold",
        [*_FELL, claim_event("harmed", leading_blocks=2, required_blocks=2)],
        Outcome.rejected,
        R.no_silent_harm,
    ),
    (
        "loss-reported-while-the-blocks-hold",
        [*materialized_claim(mode="best_effort"), claim_event("lost", leading_blocks=1)],
        Outcome.rejected,
        R.no_silent_harm,
    ),
    # a satisfied reuse shows the predicate's blocks cached
    (
        "satisfied-reuse-of-too-few-blocks",
        [*materialized_claim(), reused("r", cached=1)],
        Outcome.rejected,
        R.lifecycle,
    ),
    # the submitted terms are the ones an acceptance repeats
    (
        "accepted-on-another-footprint-than-submitted",
        [submit(predicate=prefix_predicate(2), footprint=3), accept()],
        Outcome.rejected,
        R.terms,
    ),
    (
        "accepted-on-the-submitted-footprint",
        [submit(predicate=prefix_predicate(2)), accept()],
        Outcome.accepted,
        None,
    ),
    (
        "conditionally-accepted-without-a-submission",
        [
            {
                **submit(predicate=prefix_predicate(2)),
                "event": "resident_claim_conditionally_accepted",
                "reason": "r",
            }
        ],
        Outcome.rejected,
        R.terms,
    ),
    # a restore is per claim and request: another request's outcome does not settle r's
    (
        "restored-for-a-request-that-required-none",
        [*_RESTORED_BY_R, claim_event("restored", request_id="q")],
        Outcome.rejected,
        R.offload_order,
    ),
    (
        "restored-for-the-request",
        [*_RESTORED_BY_R, claim_event("restored", request_id="r")],
        Outcome.accepted,
        None,
    ),
    (
        "restore-failed-for-a-request-that-required-none",
        [*OFFLOADED_AND_RESTORING, claim_event("restoration_failed", request_id="q", outcome="demotion")],
        Outcome.rejected,
        R.offload_order,
    ),
    (
        "restore-failed-for-the-request",
        [*OFFLOADED_AND_RESTORING, claim_event("restoration_failed", request_id="r", outcome="demotion")],
        Outcome.accepted,
        None,
    ),
    (
        "restore-required-again-while-pending",
        [*OFFLOADED_AND_RESTORING, claim_event("restore_required", request_id="r")],
        Outcome.rejected,
        R.offload_order,
    ),
    (
        "request-finished-with-its-restore-pending",
        [*OFFLOADED_AND_RESTORING, finished("r")],
        Outcome.rejected,
        R.offload_order,
    ),
    (
        "request-finished-after-its-restore",
        [*_RESTORED_BY_R, claim_event("restored", request_id="r"), finished("r")],
        Outcome.accepted,
        None,
    ),
]

_BACK_BY_COUNT = [
    *OFFLOADED_AND_RESTORING,
    claim_event("restored", request_id="r", restored_blocks=2),
    reused("r"),
]
"""C restored by count (no block named), then reused by r."""
CASES += [
    # positions a restore's count brought back are held: a removal of one is a fall to report
    (
        "restored-by-count-then-a-block-removed-unreported",
        [*_BACK_BY_COUNT, removed("C", 1, 201, "h1")],
        Outcome.rejected,
        R.no_silent_harm,
    ),
    (
        "restored-by-count-then-a-block-removed-reported",
        [
            *_BACK_BY_COUNT,
            removed("C", 1, 201, "h1"),
            claim_event("harmed", leading_blocks=1, required_blocks=2),
        ],
        Outcome.accepted,
        None,
    ),
]

HEADERS: dict[str, dict[str, Any]] = {}
"""Case name -> its trace header, where it is not `hostile.HEADER`."""

PAIRS: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("blocks.a_position_is_held_by_its_stored_content", "block_stored"): [
        ("restored-with-other-content", "restored-with-its-content-in-new-blocks"),
        ("second-block-of-other-content-for-a-position", "second-block-of-the-same-content-for-a-position"),
    ],
    ("identity.events_name_decided_claims", "resident_claim_released"): [
        ("release-of-a-rejected-claim", "release-of-an-accepted-claim")
    ],
    ("identity.events_name_decided_claims", "resident_claim_materialized"): [
        ("materialized-before-its-acceptance", "materialized-after-its-acceptance")
    ],
    ("lifecycle.materialized_prefix_reaches_the_predicate", "resident_claim_materialized"): [
        ("materialized-short-of-the-predicate", "materialized-at-the-predicate")
    ],
    ("duration.judged_on_every_clock_when_protection_ends", "request_reused"): [
        ("expiry-before-the-term-a-hit-restarted", "expiry-after-a-miss-restarted-nothing")
    ],
    ("duration.judged_on_every_clock_when_protection_ends", "resident_claim_accepted"): [
        ("expiry-at-50-ms-of-an-accepted-100", "expiry-at-50-ms-of-an-accepted-10")
    ],
    ("duration.judged_on_every_clock_when_protection_ends", "resident_claim_submitted"): [
        ("expiry-at-50-ms-of-a-submitted-100", "expiry-at-50-ms-of-a-submitted-10")
    ],
    ("duration.judged_on_every_clock_when_protection_ends", "resident_claim_conditionally_accepted"): [
        ("expiry-at-50-ms-of-a-conditional-100", "expiry-at-50-ms-of-a-conditional-10")
    ],
    ("harm.a_fallen_prefix_is_reported", "block_removed"): [
        ("block-removed-and-the-fall-unreported", "resident_claim_harmed-naming-its-claim")
    ],
    ("harm.a_fallen_prefix_is_reported", "block_stored"): [
        ("block-overwritten-and-the-fall-unreported", "block-overwritten-and-the-fall-reported")
    ],
    ("harm.reports_agree_with_the_blocks", "resident_claim_harmed"): [
        ("harm-reported-with-numbers-that-hold", "resident_claim_harmed-naming-its-claim")
    ],
    ("harm.reports_agree_with_the_blocks", "resident_claim_lost"): [
        ("loss-reported-while-the-blocks-hold", "resident_claim_lost-naming-its-claim")
    ],
    ("lifecycle.materialized_prefix_reaches_the_predicate", "request_reused"): [
        ("satisfied-reuse-of-too-few-blocks", "request_reused-naming-its-claim")
    ],
    ("terms.acceptance_repeats_submitted_terms", "resident_claim_submitted"): [
        ("accepted-on-another-footprint-than-submitted", "accepted-on-the-submitted-footprint")
    ],
    ("terms.acceptance_repeats_submitted_terms", "resident_claim_conditionally_accepted"): [
        (
            "conditionally-accepted-without-a-submission",
            "resident_claim_conditionally_accepted-deciding-a-claim-once",
        )
    ],
    ("restore.per_claim_and_request", "resident_claim_restored"): [
        ("restored-for-a-request-that-required-none", "restored-for-the-request")
    ],
    ("restore.per_claim_and_request", "resident_claim_restoration_failed"): [
        ("restore-failed-for-a-request-that-required-none", "restore-failed-for-the-request")
    ],
    ("restore.per_claim_and_request", "resident_claim_restore_required"): [
        ("restore-required-again-while-pending", "restored-for-the-request")
    ],
    ("harm.a_fallen_prefix_is_reported", "resident_claim_restored"): [
        (
            "restored-by-count-then-a-block-removed-unreported",
            "restored-by-count-then-a-block-removed-reported",
        )
    ],
    ("restore.per_claim_and_request", "request_finished"): [
        ("request-finished-with-its-restore-pending", "request-finished-after-its-restore")
    ],
}
"""Cell (rule, event) -> (violating case, conforming twin), by case name."""
