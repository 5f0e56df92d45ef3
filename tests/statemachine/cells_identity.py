"""Hostile traces and conforming twins for the identity cells of the rule x event table
(docs/rule-event-table.md): every event that names a claim names a decided one (DESIGN 4 rule 1).
`test_rule_event_table` gathers `CASES`, `HEADERS` and `PAIRS` from here as from
`test_choke_points`. Expected verdicts are written here, never computed.

Each twin is a conforming history ending in the event of its cell, naming claim C; its hostile
trace is the same history with that last event naming U, a claim nothing decided. The decisions
themselves (submitted, accepted, conditionally accepted, rejected) are hostile the other way: a
claim id decided a second time."""

from __future__ import annotations

from kvclaims.refinement import Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R
from tests.statemachine import test_choke_points
from tests.statemachine.hostile import (
    Event,
    accept,
    claim_event,
    materialized_claim,
    prefix_predicate,
    removed,
    reused,
    stored,
    submit,
)

RULE = "identity.events_name_decided_claims"
UNDECIDED = "U"

SUBMITTED = submit(predicate=prefix_predicate(2))
REJECTED = {"event": "resident_claim_rejected", "claim_id": "C", "reason": "budget"}
CONDITIONAL = {
    **SUBMITTED,
    "event": "resident_claim_conditionally_accepted",
    "mode": "best_effort",
    "reason": "full",
}


def _until(case: str, event: str) -> list[Event]:
    """A conforming twin of `test_choke_points`, up to and including its first `event`."""
    events = next(events for name, events, *_ in test_choke_points.CASES if name == case)
    end = next(i for i, e in enumerate(events) if e["event"] == event)
    return events[: end + 1]


TWINS: dict[str, list[Event]] = {
    "block_stored": [accept(), stored("C", 0, 100, "h0")],
    "block_removed": [accept(mode="best_effort"), stored("C", 0, 100, "h0"), removed("C", 0, 100, "h0")],
    "request_reused": [*materialized_claim(), reused("r")],
    "resident_claim_demoted": [
        *materialized_claim(mode="demotable"),
        claim_event("demoted", reason="pressure"),
    ],
    "resident_claim_lost": [
        *materialized_claim(mode="best_effort"),
        removed("C", 1, 101, "h1"),
        claim_event("lost", leading_blocks=1),
    ],
    "resident_claim_harmed": [
        *materialized_claim(),
        removed("C", 1, 101, "h1"),
        claim_event("harmed", leading_blocks=1, required_blocks=2),
    ],
    "resident_claim_expired": _until("expiry-on-time", "resident_claim_expired"),
    "resident_claim_offloaded": _until("failed-restore-as-expiry-on-time", "resident_claim_offloaded"),
    "resident_claim_restore_required": _until(
        "failed-restore-as-expiry-on-time", "resident_claim_restore_required"
    ),
    "resident_claim_restoration_failed": _until(
        "failed-restore-as-expiry-on-time", "resident_claim_restoration_failed"
    ),
    "resident_claim_restored": _until("in-place-failure-as-expiry-on-time", "resident_claim_restored"),
    "resident_claim_checkpoint_restored": _until("state-key-repeated", "resident_claim_checkpoint_restored"),
}
"""A conforming history ending in each claim-naming event of the cell, naming C."""

DECIDED_TWICE: dict[str, tuple[list[Event], list[Event]]] = {
    "resident_claim_submitted": ([accept(), SUBMITTED], [SUBMITTED, accept()]),
    "resident_claim_accepted": ([REJECTED, accept()], [SUBMITTED, accept()]),
    "resident_claim_conditionally_accepted": ([SUBMITTED, accept(), CONDITIONAL], [SUBMITTED, CONDITIONAL]),
    "resident_claim_rejected": ([accept(), REJECTED], [SUBMITTED, REJECTED]),
}
"""Each decision event: (a claim id decided a second time by it, the same decision once)."""


def _naming_undecided(twin: list[Event]) -> list[Event]:
    return [*twin[:-1], {**twin[-1], "claim_id": UNDECIDED}]


CASES: list[tuple[str, list[Event], Outcome, R | None]] = []
PAIRS: dict[tuple[str, str], list[tuple[str, str]]] = {}
for _event, _twin in TWINS.items():
    CASES += [
        (f"{_event}-naming-an-undecided-claim", _naming_undecided(_twin), Outcome.rejected, R.identity),
        (f"{_event}-naming-its-claim", _twin, Outcome.accepted, None),
    ]
    PAIRS[(RULE, _event)] = [(f"{_event}-naming-an-undecided-claim", f"{_event}-naming-its-claim")]
for _event, (_twice, _once) in DECIDED_TWICE.items():
    CASES += [
        (f"{_event}-deciding-a-claim-twice", _twice, Outcome.rejected, R.identity),
        (f"{_event}-deciding-a-claim-once", _once, Outcome.accepted, None),
    ]
    PAIRS[(RULE, _event)] = [(f"{_event}-deciding-a-claim-twice", f"{_event}-deciding-a-claim-once")]

# and the two-key cell of the same event: the state key presented on resume is the recorded one
_RESUMED = TWINS["resident_claim_checkpoint_restored"]
CASES.append(
    (
        "resident_claim_checkpoint_restored-with-another-value",
        [*_RESUMED[:-1], {**_RESUMED[-1], "value_hash": "other"}],
        Outcome.rejected,
        R.hybrid_two_key,
    )
)
PAIRS[("two_key.state_key_fixed_when_first_recorded", "resident_claim_checkpoint_restored")] = [
    (
        "resident_claim_checkpoint_restored-with-another-value",
        "resident_claim_checkpoint_restored-naming-its-claim",
    )
]

HEADERS: dict[str, dict[str, object]] = {}
"""Every case here runs under the default header."""
