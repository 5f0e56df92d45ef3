"""Hostile traces and conforming twins for the soft-term cells of the rule x event table (DESIGN
6.3: a cap on a claim's protected life, extend-only deadlines); `test_rule_event_table` gathers
`CASES`, `HEADERS` and `PAIRS` from here. Expected verdicts are written here, never computed.

Every claim here is accepted at t_ns 0 with a 100 ms term; `_end` notes say where its promise
ends, worked out by hand from DESIGN 6.3: min(max(start + duration, extension), decision + cap).
"""

from __future__ import annotations

from typing import Any

from kvclaims.refinement import Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R
from tests.statemachine.hostile import (
    Event,
    accept,
    claim_event,
    materialized,
    materialized_claim,
    prefix_predicate,
    reused,
    stored,
    submit,
)

MS = 1_000_000
"""t_ns per millisecond."""

_TERM = {"mode": "expiring", "duration_ms": 100, "t_ns": 0}
CAPPED = {**_TERM, "refresh_on_hit": True, "max_duration_ms": 150}
"""100 ms, refreshed by hits, never past 150 ms from acceptance."""
REFRESHED = {**_TERM, "refresh_on_hit": True}


def extended(at_ms: int, duration_ms: int | None = None, claim: str = "C", **fields: Any) -> Event:
    granted = {} if duration_ms is None else {"duration_ms": duration_ms}
    return claim_event("extended", claim, t_ns=at_ms * MS, **granted, **fields)


def expired(at_ms: int) -> Event:
    return claim_event("expired", t_ns=at_ms * MS)


def _decided_and_materialized(*decided: Event) -> list[Event]:
    """C decided by `decided`, its two blocks stored and materialized at 1 ms."""
    at = {"t_ns": MS}
    return [*decided, stored("C", 0, 100, "h0", **at), stored("C", 1, 101, "h1", **at), materialized(**at)]


_SUBMITTED = submit(predicate=prefix_predicate(2), **_TERM, max_duration_ms=300)
"""C submitted with a 300 ms cap."""


def _conditionally(cap_ms: int) -> Event:
    return {
        **_SUBMITTED,
        "event": "resident_claim_conditionally_accepted",
        "max_duration_ms": cap_ms,
        "reason": "cap changed",
    }


CASES: list[tuple[str, list[Event], Outcome, R | None]] = [
    # the cap bounds every refresh: a hit at 100 ms would run the term to 200, the cap ends it at 150
    (
        "expiry-before-the-cap-after-a-recent-hit",
        [*materialized_claim(**CAPPED), reused("r", t_ns=100 * MS), expired(140)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "expiry-at-the-cap-after-a-recent-hit",
        [*materialized_claim(**CAPPED), reused("r", t_ns=100 * MS), expired(150)],
        Outcome.accepted,
        None,
    ),
    # an extension at 30 ms for 100 ms runs the term to 130 (within the 150 cap)
    (
        "expiry-before-the-end-an-extension-granted",
        [*materialized_claim(**CAPPED), extended(30, 100), expired(120)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "expiry-at-the-end-an-extension-granted",
        [*materialized_claim(**CAPPED), extended(30, 100), expired(130)],
        Outcome.accepted,
        None,
    ),
    # deadlines only extend: at 30 ms for 20 ms ends at 50, before the 100 already promised
    (
        "extension-that-shortens-the-term",
        [*materialized_claim(**CAPPED), extended(30, 20)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "extension-that-lengthens-the-term",
        [*materialized_claim(**CAPPED), extended(30, 100)],
        Outcome.accepted,
        None,
    ),
    # an extension stays within the cap the acceptance gave: at 30 ms for 200 ends at 230 > 150
    (
        "extension-past-an-accepted-cap",
        [*materialized_claim(**CAPPED), extended(30, 200)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "extension-within-an-accepted-cap",
        [*materialized_claim(**CAPPED), extended(30, 120)],
        Outcome.accepted,
        None,
    ),
    # ... the cap the submission gave and the acceptance repeats (300 ms): 30 + 300 = 330 > 300
    (
        "extension-past-a-submitted-cap",
        [*_decided_and_materialized(_SUBMITTED, accept(**_TERM, max_duration_ms=300)), extended(30, 300)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "extension-within-a-submitted-cap",
        [*_decided_and_materialized(_SUBMITTED, accept(**_TERM, max_duration_ms=300)), extended(30, 200)],
        Outcome.accepted,
        None,
    ),
    # ... and the cap a conditional acceptance changed it to: 30 + 200 = 230 is past 150, within 300
    (
        "extension-past-a-conditional-cap",
        [*_decided_and_materialized(_SUBMITTED, _conditionally(150)), extended(30, 200)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "extension-within-a-conditional-cap",
        [*_decided_and_materialized(_SUBMITTED, _conditionally(300)), extended(30, 200)],
        Outcome.accepted,
        None,
    ),
    # a refreshing hit at 80 ms runs the term to 180: an extension to 170 would shorten it; after a
    # miss the term still ends at 100, so the same extension lengthens it
    (
        "extension-before-the-end-a-hit-refreshed",
        [*materialized_claim(**REFRESHED), reused("r", t_ns=80 * MS), extended(120, 50)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "extension-after-a-miss-refreshed-nothing",
        [*materialized_claim(**REFRESHED), reused("r", satisfied=False, t_ns=80 * MS), extended(120, 50)],
        Outcome.accepted,
        None,
    ),
    # an extension names a claim the runtime answers for
    ("extension-of-an-undecided-claim", [extended(30, 100)], Outcome.rejected, R.identity),
    ("extension-of-an-accepted-claim", [accept(**_TERM), extended(30, 100)], Outcome.accepted, None),
    (
        "extension-after-the-expiry",
        [*materialized_claim(**_TERM), expired(100), extended(110, 100)],
        Outcome.rejected,
        R.lifecycle,
    ),
    (
        "extension-after-the-release",
        [*materialized_claim(**_TERM), claim_event("released", t_ns=50 * MS), extended(60, 100)],
        Outcome.rejected,
        R.lifecycle,
    ),
    # an extension adds no clock: the terms carry ms only
    (
        "extension-on-a-clock-the-terms-lack",
        [*materialized_claim(**_TERM), claim_event("extended", duration_steps=5, engine_step=3)],
        Outcome.rejected,
        R.duration,
    ),
    # a clock an event does not stamp cannot be judged
    (
        "extension-without-its-clock",
        [*materialized_claim(**_TERM), claim_event("extended", duration_ms=100)],
        Outcome.inconclusive,
        None,
    ),
    # the caps are terms: a plain acceptance repeats the submitted one
    (
        "accepted-on-another-cap-than-submitted",
        [_SUBMITTED, accept(**_TERM, max_duration_ms=200)],
        Outcome.rejected,
        R.terms,
    ),
    (
        "accepted-on-the-submitted-cap",
        [_SUBMITTED, accept(**_TERM, max_duration_ms=300)],
        Outcome.accepted,
        None,
    ),
    # a cap needs its clock's duration and is at least as long
    (
        "cap-without-its-duration",
        [accept(mode="expiring", duration_steps=3, max_duration_ms=10)],
        Outcome.invalid,
        None,
    ),
    ("cap-shorter-than-its-duration", [accept(**_TERM, max_duration_ms=50)], Outcome.invalid, None),
    ("extension-granting-no-duration", [accept(**_TERM), extended(30)], Outcome.invalid, None),
]

HEADERS: dict[str, dict[str, Any]] = {}
"""Case name -> its trace header, where it is not `hostile.HEADER`."""

_JUDGED = "duration.judged_on_every_clock_when_protection_ends"
_EXTENSIONS = "duration.extensions_only_lengthen_within_the_cap"
PAIRS: dict[tuple[str, str], list[tuple[str, str]]] = {
    (_JUDGED, "request_reused"): [
        ("expiry-before-the-cap-after-a-recent-hit", "expiry-at-the-cap-after-a-recent-hit")
    ],
    (_JUDGED, "resident_claim_extended"): [
        ("expiry-before-the-end-an-extension-granted", "expiry-at-the-end-an-extension-granted")
    ],
    (_EXTENSIONS, "resident_claim_extended"): [
        ("extension-that-shortens-the-term", "extension-that-lengthens-the-term"),
        ("extension-on-a-clock-the-terms-lack", "extension-of-an-accepted-claim"),
    ],
    (_EXTENSIONS, "resident_claim_accepted"): [
        ("extension-past-an-accepted-cap", "extension-within-an-accepted-cap")
    ],
    (_EXTENSIONS, "resident_claim_submitted"): [
        ("extension-past-a-submitted-cap", "extension-within-a-submitted-cap")
    ],
    (_EXTENSIONS, "resident_claim_conditionally_accepted"): [
        ("extension-past-a-conditional-cap", "extension-within-a-conditional-cap")
    ],
    (_EXTENSIONS, "request_reused"): [
        ("extension-before-the-end-a-hit-refreshed", "extension-after-a-miss-refreshed-nothing")
    ],
    ("identity.events_name_decided_claims", "resident_claim_extended"): [
        ("extension-of-an-undecided-claim", "extension-of-an-accepted-claim")
    ],
    ("terms.acceptance_repeats_submitted_terms", "resident_claim_accepted"): [
        ("accepted-on-another-cap-than-submitted", "accepted-on-the-submitted-cap")
    ],
}
