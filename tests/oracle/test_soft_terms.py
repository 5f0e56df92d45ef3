"""Soft terms (DESIGN 6.3, rule 7 `duration`; the oracle's choice C17): capped TTLs and
extend-only deadlines. Each hostile trace has a conforming twin of the same shape; the expected
verdict of each is written here by hand from DESIGN 6.3 and the rule, never computed by the
oracle or the checker, and both must give it (outcome, and the rule when rejected).

On a clock the promised end is min(max(start + duration, latest extension end), decision + cap);
an expiry before it is a `duration` violation. The traces use the exhaustive comparison's
universe (`kvclaims.oracle.exhaustive`: a pool of 4, block_size 16)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kvclaims.oracle.exhaustive import encode, refinement_checker
from kvclaims.oracle.interpreter import ACCEPTED, INCONCLUSIVE, INVALID, REJECTED, judge

Event = tuple[str, dict[str, Any]]
MS = 1_000_000  # t_ns per millisecond


def terms(claim_id: str = "c1", mode: str = "expiring", **extra: Any) -> dict[str, Any]:
    return {
        "claim_id": claim_id,
        "owner_scope": "o",
        "object_id": f"p-{claim_id}",
        "mode": mode,
        "footprint_blocks": 1,
        "predicate": {"kind": "leading_prefix_at_least", "blocks": 1},
        **extra,
    }


def accepted(**extra: Any) -> Event:
    return ("resident_claim_accepted", terms(**extra))


def submitted(**extra: Any) -> Event:
    return ("resident_claim_submitted", terms(**extra))


def conditionally(**extra: Any) -> Event:
    return ("resident_claim_conditionally_accepted", terms(**extra))


def extended(claim_id: str = "c1", **fields: Any) -> Event:
    return ("resident_claim_extended", {"claim_id": claim_id, **fields})


def expired(claim_id: str = "c1", **stamps: Any) -> Event:
    return ("resident_claim_expired", {"claim_id": claim_id, **stamps})


def materialized(claim_id: str = "c1", **extra: Any) -> Event:
    return ("resident_claim_materialized", {"claim_id": claim_id, "leading_blocks": 1, **extra})


def reused(claim_id: str = "c1", **stamps: Any) -> Event:
    fields = {"request_id": "r1", "claim_id": claim_id, "cached_blocks": 1, "predicate_satisfied": True}
    return ("request_reused", {**fields, **stamps})


def claim_event(name: str, claim_id: str = "c1", **fields: Any) -> Event:
    return (f"resident_claim_{name}", {"claim_id": claim_id, **fields})


TWO_KEY = {
    "footprint_blocks": 2,
    "predicate": {"kind": "hybrid_two_key", "boundary_blocks": 1},
}
CHECKPOINT = {"boundary": 1, "payload_hash": "pa", "value_hash": "va"}


def two_key_restored(value_hash: str) -> list[Event]:
    """c2, a two-key offloadable claim with a 2-step term, offloaded and restored for r1 up to
    its checkpoint, which carries `value_hash` (va matches the materialization's)."""
    return [
        (
            "resident_claim_accepted",
            {**terms("c2", "offloadable", duration_steps=2, engine_step=0), **TWO_KEY},
        ),
        materialized("c2", checkpoint=CHECKPOINT),
        claim_event("offloaded", "c2", tier="cpu"),
        claim_event("restore_required", "c2", request_id="r1"),
        claim_event("restored", "c2", request_id="r1"),
        claim_event("checkpoint_restored", "c2", boundary=1, payload_hash="pa", value_hash=value_hash),
    ]


def two_key_resumed_in_place(value_hash: str) -> list[Event]:
    """c2 as in `two_key_restored`, resumed in place (seed 002: no offload) for r1."""
    return [
        (
            "resident_claim_accepted",
            {**terms("c2", "offloadable", duration_steps=2, engine_step=0), **TWO_KEY},
        ),
        materialized("c2", checkpoint=CHECKPOINT),
        claim_event("restore_required", "c2", request_id="r1"),
        claim_event("restored", "c2", request_id="r1"),
        claim_event("checkpoint_restored", "c2", boundary=1, payload_hash="pa", value_hash=value_hash),
    ]


# name -> (events, expected outcome, expected rule). Names come in pairs: `-bad` the hostile
# trace, `-twin` its conforming (or merely undecidable) twin.
CASES: dict[str, tuple[list[Event], str, str | None]] = {
    # -- the promised end at an expiry --
    # A cap binds over refresh on hit: after a hit at step 2 the 2-step term would end at 4, but
    # the 3-step cap from the decision (step 0) ends it at 3; without the cap, 3 is too early.
    "cap-over-refresh-bad": (
        [
            accepted(duration_steps=2, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(engine_step=2),
            expired(engine_step=3),
        ],
        REJECTED,
        "duration",
    ),
    "cap-over-refresh-twin": (
        [
            accepted(duration_steps=2, max_duration_steps=3, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(engine_step=2),
            expired(engine_step=3),
        ],
        ACCEPTED,
        None,
    ),
    # An extension at step 1 by 3 steps promises step 4: an expiry at 3 breaks it.
    "extension-binds-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=3, engine_step=1),
            expired(engine_step=3),
        ],
        REJECTED,
        "duration",
    ),
    "extension-binds-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=3, engine_step=1),
            expired(engine_step=4),
        ],
        ACCEPTED,
        None,
    ),
    # The wall clock: 2 ms from t=0, capped at 5 ms, extended at 1 ms by 3 ms -> 4 ms.
    "extension-ms-bad": (
        [
            accepted(duration_ms=2, max_duration_ms=5, t_ns=0),
            extended(duration_ms=3, t_ns=MS, reason="lease"),
            expired(t_ns=3 * MS),
        ],
        REJECTED,
        "duration",
    ),
    "extension-ms-twin": (
        [
            accepted(duration_ms=2, max_duration_ms=5, t_ns=0),
            extended(duration_ms=3, t_ns=MS, reason="lease"),
            expired(t_ns=4 * MS),
        ],
        ACCEPTED,
        None,
    ),
    # The extension's end caps the promise only through the cap: an expiry at the cap is
    # conforming however late the refreshing hit (cap 3 from step 0, hit at step 3).
    "late-hit-capped-bad": (
        [
            accepted(duration_steps=2, max_duration_steps=4, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(engine_step=3),
            expired(engine_step=3),
        ],
        REJECTED,
        "duration",
    ),
    "late-hit-capped-twin": (
        [
            accepted(duration_steps=2, max_duration_steps=3, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(engine_step=3),
            expired(engine_step=3),
        ],
        ACCEPTED,
        None,
    ),
    # A restoration that fails with outcome expiry is an expiry too (extension to step 5).
    "restoration-expiry-bad": (
        [
            accepted(mode="offloadable", duration_steps=1, engine_step=0),
            materialized(),
            extended(duration_steps=4, engine_step=1),
            claim_event("offloaded", tier="cpu"),
            claim_event("restore_required", request_id="r1"),
            claim_event("restoration_failed", request_id="r1", outcome="expiry", engine_step=3),
        ],
        REJECTED,
        "duration",
    ),
    "restoration-expiry-twin": (
        [
            accepted(mode="offloadable", duration_steps=1, engine_step=0),
            materialized(),
            extended(duration_steps=4, engine_step=1),
            claim_event("offloaded", tier="cpu"),
            claim_event("restore_required", request_id="r1"),
            claim_event("restoration_failed", request_id="r1", outcome="expiry", engine_step=5),
        ],
        ACCEPTED,
        None,
    ),
    # Where both clocks are carried, an expiry early on either one is a violation.
    "two-clocks-bad": (
        [
            accepted(duration_steps=1, duration_ms=1, max_duration_ms=9, t_ns=0, engine_step=0),
            extended(duration_ms=5, t_ns=0),
            expired(engine_step=3, t_ns=4 * MS),
        ],
        REJECTED,
        "duration",
    ),
    "two-clocks-twin": (
        [
            accepted(duration_steps=1, duration_ms=1, max_duration_ms=9, t_ns=0, engine_step=0),
            extended(duration_ms=5, t_ns=0),
            expired(engine_step=3, t_ns=5 * MS),
        ],
        ACCEPTED,
        None,
    ),
    # -- missing stamps --
    # A cap with no stamp on the decision: where the capped end lies is unknown, even for an
    # expiry long after it would be; with the stamp it is decided.
    "cap-unstamped-decision-bad": (
        [accepted(duration_steps=2, max_duration_steps=3, engine_step=0), expired(engine_step=1)],
        REJECTED,
        "duration",
    ),
    "cap-unstamped-decision-twin": (
        [accepted(duration_steps=2, max_duration_steps=3), expired(engine_step=1)],
        INCONCLUSIVE,
        None,
    ),
    # No start stamp: the extension's end (5 + 3 = 8) is a lower bound: an expiry before it is a
    # violation, one after it undecidable (the unknown start could promise more).
    "unknown-start-lower-bound-bad": (
        [accepted(duration_steps=2), extended(duration_steps=3, engine_step=5), expired(engine_step=7)],
        REJECTED,
        "duration",
    ),
    "unknown-start-lower-bound-twin": (
        [accepted(duration_steps=2), extended(duration_steps=3, engine_step=5), expired(engine_step=8)],
        INCONCLUSIVE,
        None,
    ),
    # A refreshing hit with no stamp leaves the start unknown (no extension: no lower bound).
    "unstamped-hit-twin": (
        [
            accepted(duration_steps=2, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(),
            expired(engine_step=5),
        ],
        INCONCLUSIVE,
        None,
    ),
    "unstamped-hit-bad": (
        [
            accepted(duration_steps=2, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(engine_step=4),
            expired(engine_step=5),
        ],
        REJECTED,
        "duration",
    ),
    # -- the extension's lifecycle --
    "extend-before-acceptance-bad": (
        [submitted(duration_steps=2), extended(duration_steps=2, engine_step=0)],
        REJECTED,
        "identity",
    ),
    "extend-before-acceptance-twin": (
        [
            submitted(duration_steps=2),
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=2, engine_step=0),
        ],
        ACCEPTED,
        None,
    ),
    "extend-never-decided-bad": ([extended(duration_steps=2, engine_step=0)], REJECTED, "identity"),
    "extend-never-decided-twin": (
        [accepted(duration_steps=2, engine_step=0), extended(duration_steps=2, engine_step=0)],
        ACCEPTED,
        None,
    ),
    "extend-rejected-bad": (
        [
            submitted(duration_steps=2),
            claim_event("rejected", reason="full"),
            extended(duration_steps=2, engine_step=0),
        ],
        REJECTED,
        "identity",
    ),
    "extend-rejected-twin": (
        [
            submitted(duration_steps=2),
            claim_event("rejected", "c2", reason="full"),
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=2, engine_step=0),
        ],
        ACCEPTED,
        None,
    ),
    "extend-after-expiry-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            expired(engine_step=2),
            extended(duration_steps=2, engine_step=3),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-after-expiry-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=2, engine_step=0),
            expired(engine_step=2),
        ],
        ACCEPTED,
        None,
    ),
    "extend-after-release-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            claim_event("released"),
            extended(duration_steps=2, engine_step=1),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-after-release-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=2, engine_step=1),
            claim_event("released"),
        ],
        ACCEPTED,
        None,
    ),
    "extend-after-demotion-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            claim_event("demoted"),
            extended(duration_steps=2, engine_step=1),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-after-demotion-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=2, engine_step=1),
            claim_event("demoted"),
        ],
        ACCEPTED,
        None,
    ),
    "extend-after-harm-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            materialized(),
            claim_event("harmed", leading_blocks=0, required_blocks=1),
            extended(duration_steps=2, engine_step=1),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-after-harm-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            materialized(),
            extended(duration_steps=2, engine_step=1),
            claim_event("harmed", leading_blocks=0, required_blocks=1),
        ],
        ACCEPTED,
        None,
    ),
    "extend-materialized-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            materialized(),
            claim_event("released"),
            extended(duration_steps=2, engine_step=1),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-materialized-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            materialized(),
            extended(duration_steps=2, engine_step=1),
        ],
        ACCEPTED,
        None,
    ),
    "extend-after-restoration-expiry-bad": (
        [
            accepted(mode="offloadable", duration_steps=1, engine_step=0),
            materialized(),
            claim_event("offloaded", tier="cpu"),
            claim_event("restore_required", request_id="r1"),
            claim_event("restoration_failed", request_id="r1", outcome="expiry", engine_step=1),
            extended(duration_steps=2, engine_step=1),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-after-restoration-expiry-twin": (
        [
            accepted(mode="offloadable", duration_steps=1, engine_step=0),
            materialized(),
            claim_event("offloaded", tier="cpu"),
            claim_event("restore_required", request_id="r1"),
            extended(duration_steps=2, engine_step=1),
            claim_event("restoration_failed", request_id="r1", outcome="expiry", engine_step=3),
        ],
        ACCEPTED,
        None,
    ),
    # Offloaded and restoring claims are still the runtime's to answer for.
    "extend-offloaded-and-restoring-bad": (
        [
            accepted(mode="offloadable", duration_steps=1, engine_step=0),
            materialized(),
            claim_event("offloaded", tier="cpu"),
            extended(duration_steps=2, engine_step=1),
            claim_event("restore_required", request_id="r1"),
            claim_event("restoration_failed", request_id="r1", outcome="demotion"),
            extended(duration_steps=2, engine_step=2),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-offloaded-and-restoring-twin": (
        [
            accepted(mode="offloadable", duration_steps=1, engine_step=0),
            materialized(),
            claim_event("offloaded", tier="cpu"),
            extended(duration_steps=2, engine_step=1),
            claim_event("restore_required", request_id="r1"),
            extended(duration_steps=2, engine_step=2),
        ],
        ACCEPTED,
        None,
    ),
    # A claim whose blocks fell below its predicate owes harm before anything else names it.
    "extend-while-breached-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            ("block_stored", {"block_id": 0, "block_hash": "h0", "claim_id": "c1", "position": 0}),
            ("block_removed", {"block_id": 0, "block_hash": "h0"}),
            extended(duration_steps=2, engine_step=1),
        ],
        REJECTED,
        "no_silent_harm",
    ),
    "extend-while-breached-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            ("block_stored", {"block_id": 0, "block_hash": "h0", "claim_id": "c1", "position": 0}),
            ("block_stored", {"block_id": 1, "block_hash": "h1"}),
            extended(duration_steps=2, engine_step=1),
        ],
        ACCEPTED,
        None,
    ),
    # A two-key checkpoint mismatch owes a restoration failure first (seed 002).
    "extend-while-mismatched-bad": (
        [*two_key_restored("vb"), extended("c2", duration_steps=2, engine_step=1)],
        REJECTED,
        "hybrid_two_key",
    ),
    "extend-while-mismatched-twin": (
        [*two_key_restored("va"), extended("c2", duration_steps=2, engine_step=1)],
        ACCEPTED,
        None,
    ),
    "extend-while-mismatched-in-place-bad": (
        [*two_key_resumed_in_place("vb"), extended("c2", duration_steps=2, engine_step=1)],
        REJECTED,
        "hybrid_two_key",
    ),
    "extend-while-mismatched-in-place-twin": (
        [*two_key_resumed_in_place("va"), extended("c2", duration_steps=2, engine_step=1)],
        ACCEPTED,
        None,
    ),
    # A resume in place (restore_required of a materialized two-key claim) is restoring too.
    "extend-restoring-in-place-bad": (
        [
            (
                "resident_claim_accepted",
                {**terms("c2", "offloadable", duration_steps=2, engine_step=0), **TWO_KEY},
            ),
            materialized("c2", checkpoint=CHECKPOINT),
            claim_event("restore_required", "c2", request_id="r1"),
            claim_event("restoration_failed", "c2", request_id="r1", outcome="harm"),
            extended("c2", duration_steps=2, engine_step=1),
        ],
        REJECTED,
        "lifecycle",
    ),
    "extend-restoring-in-place-twin": (
        [
            (
                "resident_claim_accepted",
                {**terms("c2", "offloadable", duration_steps=2, engine_step=0), **TWO_KEY},
            ),
            materialized("c2", checkpoint=CHECKPOINT),
            claim_event("restore_required", "c2", request_id="r1"),
            extended("c2", duration_steps=2, engine_step=1),
        ],
        ACCEPTED,
        None,
    ),
    # -- the extension's clocks --
    # A clock the terms lack: a new clock is a change of terms.
    "extend-new-clock-bad": (
        [accepted(duration_steps=2, engine_step=0), extended(duration_ms=1, t_ns=0)],
        REJECTED,
        "duration",
    ),
    "extend-new-clock-twin": (
        [accepted(duration_steps=2, engine_step=0), extended(duration_steps=2, engine_step=0)],
        ACCEPTED,
        None,
    ),
    "extend-one-new-clock-of-two-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=3, duration_ms=1, engine_step=1, t_ns=0),
        ],
        REJECTED,
        "duration",
    ),
    "extend-one-new-clock-of-two-twin": (
        [
            accepted(duration_steps=2, duration_ms=1, engine_step=0, t_ns=0),
            extended(duration_steps=3, duration_ms=1, engine_step=1, t_ns=0),
        ],
        ACCEPTED,
        None,
    ),
    # No stamp on the extension: its end is unknown.
    "extend-unstamped-twin": (
        [accepted(duration_steps=2, engine_step=0), extended(duration_steps=3)],
        INCONCLUSIVE,
        None,
    ),
    "extend-unstamped-bad": (  # the stamped clock is judged even so
        [
            accepted(duration_steps=2, duration_ms=2, engine_step=0, t_ns=0),
            extended(duration_steps=3, duration_ms=1, t_ns=0),
        ],
        REJECTED,
        "duration",
    ),
    # Past the cap: 2 + 3 = 5 > 0 + 4.
    "extend-past-cap-bad": (
        [
            accepted(duration_steps=2, max_duration_steps=4, engine_step=0),
            extended(duration_steps=3, engine_step=2),
        ],
        REJECTED,
        "duration",
    ),
    "extend-past-cap-twin": (
        [
            accepted(duration_steps=2, max_duration_steps=4, engine_step=0),
            extended(duration_steps=3, engine_step=1),
        ],
        ACCEPTED,
        None,
    ),
    "extend-past-cap-ms-bad": (
        [accepted(duration_ms=1, max_duration_ms=2, t_ns=0), extended(duration_ms=2, t_ns=MS // 2)],
        REJECTED,
        "duration",
    ),
    "extend-past-cap-ms-twin": (
        [accepted(duration_ms=1, max_duration_ms=2, t_ns=0), extended(duration_ms=1, t_ns=MS)],
        ACCEPTED,
        None,
    ),
    # The cap's decision unstamped: whether 1 + 10 is past the cap is unknown.
    "extend-cap-unstamped-bad": (
        [
            accepted(duration_steps=2, max_duration_steps=4, engine_step=0),
            extended(duration_steps=10, engine_step=1),
        ],
        REJECTED,
        "duration",
    ),
    "extend-cap-unstamped-twin": (
        [accepted(duration_steps=2, max_duration_steps=4), extended(duration_steps=10, engine_step=1)],
        INCONCLUSIVE,
        None,
    ),
    # Deadlines only extend: 1 + 1 = 2 is before the 4 promised.
    "extend-shortens-bad": (
        [accepted(duration_steps=4, engine_step=0), extended(duration_steps=1, engine_step=1)],
        REJECTED,
        "duration",
    ),
    "extend-shortens-twin": (
        [accepted(duration_steps=4, engine_step=0), extended(duration_steps=3, engine_step=1)],
        ACCEPTED,
        None,
    ),
    # ... nor before an earlier extension's end (6), ...
    "extend-shortens-extension-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=5, engine_step=1),
            extended(duration_steps=1, engine_step=2),
        ],
        REJECTED,
        "duration",
    ),
    "extend-shortens-extension-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=5, engine_step=1),
            extended(duration_steps=4, engine_step=2),
        ],
        ACCEPTED,
        None,
    ),
    # ... nor before the end a refreshing hit moved (2 + 3 = 5).
    "extend-shortens-refreshed-bad": (
        [
            accepted(duration_steps=3, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(engine_step=2),
            extended(duration_steps=2, engine_step=2),
        ],
        REJECTED,
        "duration",
    ),
    "extend-shortens-refreshed-twin": (
        [
            accepted(duration_steps=3, refresh_on_hit=True, engine_step=0),
            materialized(),
            reused(engine_step=2),
            extended(duration_steps=3, engine_step=2),
        ],
        ACCEPTED,
        None,
    ),
    # Reads never renew (refresh_on_hit false): a hit leaves the start at the decision.
    "no-refresh-bad": (
        [
            accepted(duration_steps=3, engine_step=0),
            materialized(),
            reused(engine_step=2),
            extended(duration_steps=2, engine_step=0),
        ],
        REJECTED,
        "duration",
    ),
    "no-refresh-twin": (
        [
            accepted(duration_steps=3, engine_step=0),
            materialized(),
            reused(engine_step=2),
            extended(duration_steps=1, engine_step=2),
        ],
        ACCEPTED,
        None,
    ),
    # With an unknown start, a previous extension's end (6) is a lower bound the next must reach.
    "extend-unknown-start-bad": (
        [
            accepted(duration_steps=2),
            extended(duration_steps=5, engine_step=1),
            extended(duration_steps=1, engine_step=2),
        ],
        REJECTED,
        "duration",
    ),
    "extend-unknown-start-twin": (
        [
            accepted(duration_steps=2),
            extended(duration_steps=5, engine_step=1),
            extended(duration_steps=4, engine_step=2),
        ],
        INCONCLUSIVE,
        None,
    ),
    # -- the cap is part of the terms --
    "plain-acceptance-drops-cap-bad": (
        [submitted(duration_steps=2, max_duration_steps=3), accepted(duration_steps=2, engine_step=0)],
        REJECTED,
        "terms",
    ),
    "plain-acceptance-drops-cap-twin": (
        [
            submitted(duration_steps=2, max_duration_steps=3),
            accepted(duration_steps=2, max_duration_steps=3, engine_step=0),
        ],
        ACCEPTED,
        None,
    ),
    "plain-acceptance-changes-cap-ms-bad": (
        [submitted(duration_ms=2, max_duration_ms=3), accepted(duration_ms=2, max_duration_ms=4, t_ns=0)],
        REJECTED,
        "terms",
    ),
    "plain-acceptance-changes-cap-ms-twin": (
        [submitted(duration_ms=2, max_duration_ms=3), accepted(duration_ms=2, max_duration_ms=3, t_ns=0)],
        ACCEPTED,
        None,
    ),
    "plain-acceptance-adds-cap-bad": (
        [submitted(duration_ms=2), accepted(duration_ms=2, max_duration_ms=4, t_ns=0)],
        REJECTED,
        "terms",
    ),
    "plain-acceptance-adds-cap-twin": (  # changed terms bind through a conditional acceptance
        [submitted(duration_ms=2), conditionally(duration_ms=2, max_duration_ms=4, t_ns=0)],
        ACCEPTED,
        None,
    ),
    # A conditional acceptance binds its own cap: 1 + 3 = 4 is within 5, not within 2.
    "conditional-cap-binds-bad": (
        [
            submitted(duration_steps=2, max_duration_steps=2),
            conditionally(duration_steps=2, max_duration_steps=2, engine_step=0, reason="same"),
            extended(duration_steps=3, engine_step=1),
        ],
        REJECTED,
        "duration",
    ),
    "conditional-cap-binds-twin": (
        [
            submitted(duration_steps=2, max_duration_steps=2),
            conditionally(duration_steps=2, max_duration_steps=5, engine_step=0, reason="longer cap"),
            extended(duration_steps=3, engine_step=1),
        ],
        ACCEPTED,
        None,
    ),
    # -- invalid input (not a trace) --
    "cap-without-duration-bad": ([accepted(max_duration_steps=3, engine_step=0)], INVALID, None),
    "cap-without-its-duration-bad": (
        [accepted(duration_steps=3, max_duration_ms=3, engine_step=0)],
        INVALID,
        None,
    ),
    "cap-without-its-duration-twin": (
        [accepted(duration_steps=3, duration_ms=3, max_duration_ms=3, engine_step=0)],
        ACCEPTED,
        None,
    ),
    "cap-without-duration-twin": (
        [accepted(duration_steps=3, max_duration_steps=3, engine_step=0)],
        ACCEPTED,
        None,
    ),
    "cap-below-duration-bad": ([submitted(duration_ms=3, max_duration_ms=2)], INVALID, None),
    "cap-below-duration-conditional-bad": (
        [submitted(duration_ms=3), conditionally(duration_ms=3, max_duration_ms=2)],
        INVALID,
        None,
    ),
    "cap-below-duration-conditional-twin": (
        [submitted(duration_ms=3), conditionally(duration_ms=3, max_duration_ms=3)],
        ACCEPTED,
        None,
    ),
    "cap-below-duration-twin": ([submitted(duration_ms=3, max_duration_ms=3)], ACCEPTED, None),
    "extension-without-duration-bad": (
        [accepted(duration_steps=2, engine_step=0), extended(engine_step=1, reason="no term")],
        INVALID,
        None,
    ),
    "extension-with-null-durations-bad": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=None, duration_ms=None, engine_step=1),
        ],
        INVALID,
        None,
    ),
    "extension-with-null-durations-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=2, duration_ms=None, engine_step=1),
        ],
        ACCEPTED,
        None,
    ),
    "extension-without-duration-twin": (
        [
            accepted(duration_steps=2, engine_step=0),
            extended(duration_steps=2, engine_step=1, reason="a term"),
        ],
        ACCEPTED,
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_oracle_gives_the_hand_written_verdict(name: str) -> None:
    events, outcome, rule = CASES[name]
    verdict = judge(encode(events))
    assert (verdict.outcome, verdict.rule) == (outcome, rule), verdict.message


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_checker_gives_the_hand_written_verdict(name: str) -> None:
    events, outcome, rule = CASES[name]
    verdict = refinement_checker(encode(events))
    assert (verdict.outcome, verdict.rule) == (outcome, rule), verdict.message


def test_every_hostile_case_has_a_twin_with_another_verdict() -> None:
    pairs = {name.rsplit("-", 1)[0] for name in CASES}
    assert set(CASES) == {f"{n}-bad" for n in pairs} | {f"{n}-twin" for n in pairs}
    for name in pairs:
        assert CASES[f"{name}-bad"][1] in (REJECTED, INVALID), name
        assert CASES[f"{name}-twin"][1] in (ACCEPTED, INCONCLUSIVE), name


# -- a focused differential: random soft-term histories of one claim, the oracle and the checker
# agreeing on outcome and rule (the whole-vocabulary differential draws an extension rarely).


def soft_history(seed: int) -> list[Event]:
    """A (submission,) acceptance with random durations, caps, refresh and stamps, then up to
    six of: a satisfied reuse, an extension on one clock or both, an expiry; each stamp present
    or absent, the clocks running forward by 0-3 units (ms with sub-ms offsets)."""
    rng = random.Random(seed)
    clocks = {"steps": 0, "ms": 0}
    stamp_of = {"steps": "engine_step", "ms": "t_ns"}

    def stamps() -> dict[str, int]:
        out = {}
        for clock, field in stamp_of.items():
            clocks[clock] += rng.choice((0, 1, 1, 2, 3)) * (1 if clock == "steps" else MS) + (
                0 if clock == "steps" or rng.random() < 0.8 else rng.randrange(MS)
            )
            if rng.random() < 0.85:
                out[field] = clocks[clock]
        return out

    term: dict[str, Any] = {}
    for clock in rng.choice((("steps",), ("ms",), ("steps", "ms"))):
        term[f"duration_{clock}"] = duration = rng.randint(1, 3)
        if rng.random() < 0.6:
            term[f"max_duration_{clock}"] = duration + rng.randint(0, 3)
    if rng.random() < 0.5:
        term["refresh_on_hit"] = True
    events: list[Event] = []
    if rng.random() < 0.3:
        asked = dict(term)
        if rng.random() < 0.3:  # a submission whose caps the acceptance does not repeat
            asked.pop(rng.choice(sorted(asked)), None)
        asked = {k: v for k, v in asked.items() if not k.startswith("max_") or k[4:] in asked}
        events.append(submitted(**asked))
        kind = "resident_claim_conditionally_accepted" if rng.random() < 0.5 else "resident_claim_accepted"
    else:
        kind = "resident_claim_accepted"
    events += [
        (kind, terms(mode=rng.choice(("expiring", "offloadable")), **term, **stamps())),
        materialized(),
    ]
    for _ in range(rng.randint(1, 6)):
        roll = rng.random()
        if roll < 0.3:
            events.append(reused(**stamps()))
        elif roll < 0.8:
            given = {
                f"duration_{c}": rng.randint(1, 5) for c in rng.choice((("steps",), ("ms",), ("steps", "ms")))
            }
            events.append(extended(**given, **stamps()))
        else:
            events.append(expired(**stamps()))
            break
    return events


@pytest.mark.parametrize("block", range(4))
def test_the_oracle_and_the_checker_agree_on_random_soft_term_histories(block: int) -> None:
    outcomes: dict[str, int] = {}
    for seed in range(block * 500, (block + 1) * 500):
        data = encode(soft_history(seed))
        oracle, checker = judge(data), refinement_checker(data)
        assert (oracle.outcome, oracle.rule) == (checker.outcome, checker.rule), (
            f"seed {seed}: oracle {oracle}, checker {checker}"
        )
        outcomes[oracle.outcome] = outcomes.get(oracle.outcome, 0) + 1
    assert {ACCEPTED, REJECTED, INCONCLUSIVE} <= set(outcomes), outcomes
