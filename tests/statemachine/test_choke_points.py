"""Hostile traces against the model's choke points, each with a conforming twin: every path that
reaches a rule's state, written by hand; the expected verdicts are written here, not computed."""

from __future__ import annotations

import pytest

from kvclaims.refinement import Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R
from tests.statemachine.hostile import (
    Event,
    accept,
    admitted,
    check,
    checkpoint,
    claim_event,
    finished,
    materialized,
    materialized_claim,
    prefix_predicate,
    refused_for_restoration,
    removed,
    reused,
    stored,
    submit,
)

TIMED = {"engine_step": 0, "duration_steps": 100}


def _offloaded_restoring(*requests: str, **terms: object) -> list[Event]:
    events = [*materialized_claim(**terms), claim_event("offloaded", tier="cpu")]
    events += [admitted(r) for r in requests]
    return events + [claim_event("restore_required", request_id=r) for r in requests]


def _failed(outcome: str, step: int, request: str = "r") -> Event:
    return claim_event("restoration_failed", request_id=request, outcome=outcome, engine_step=step)


def _two_key_in_place(outcome_step: int) -> list[Event]:
    return [
        accept(two_key=True, **TIMED),
        stored("C", 0, 100, "h0"),
        stored("C", 1, 101, "h1"),
        materialized(checkpoint=checkpoint("A")),
        admitted("r"),
        claim_event("restore_required", request_id="r"),
        claim_event("restored", request_id="r", restored_blocks=2),
        claim_event("checkpoint_restored", **checkpoint("B")),
        _failed("expiry", outcome_step),
        finished("r"),
    ]


def _two_key_materialized_twice(second: str) -> list[Event]:
    return [
        accept(two_key=True),
        stored("C", 0, 100, "h0"),
        stored("C", 1, 101, "h1"),
        materialized(checkpoint=checkpoint("A")),
        materialized(checkpoint=checkpoint(second)),
        claim_event("offloaded", tier="cpu"),
        admitted("r"),
        claim_event("restore_required", request_id="r"),
        claim_event("restored", request_id="r", restored_blocks=2),
        claim_event("checkpoint_restored", **checkpoint(second)),
        reused("r"),
        finished("r"),
    ]


CASES: list[tuple[str, list[Event], Outcome, R | None]] = [
    # protection ends: an expiry by any path is judged on the claim's clocks
    (
        "expiry-early",
        [*materialized_claim(mode="expiring", **TIMED), claim_event("expired", engine_step=5)],
        Outcome.rejected,
        R.duration,
    ),
    (
        "expiry-on-time",
        [*materialized_claim(mode="expiring", **TIMED), claim_event("expired", engine_step=100)],
        Outcome.accepted,
        None,
    ),
    (
        "failed-restore-as-expiry-early",
        [*_offloaded_restoring("r", **TIMED), _failed("expiry", 5), finished("r")],
        Outcome.rejected,
        R.duration,
    ),
    (
        "failed-restore-as-expiry-on-time",
        [*_offloaded_restoring("r", **TIMED), _failed("expiry", 500), finished("r")],
        Outcome.accepted,
        None,
    ),
    ("in-place-failure-as-expiry-early", _two_key_in_place(5), Outcome.rejected, R.duration),
    ("in-place-failure-as-expiry-on-time", _two_key_in_place(100), Outcome.accepted, None),
    (
        "failure-as-expiry-early-after-another-request-restored",
        [
            *_offloaded_restoring("r1", "r2", **TIMED),
            claim_event("restored", request_id="r2", restored_blocks=2),
            _failed("expiry", 3, "r1"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.rejected,
        R.duration,
    ),
    (
        "failure-as-expiry-on-time-after-another-request-restored",
        [
            *_offloaded_restoring("r1", "r2", **TIMED),
            claim_event("restored", request_id="r2", restored_blocks=2),
            _failed("expiry", 300, "r1"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.accepted,
        None,
    ),
    # a two-key claim's state key is fixed when first recorded
    ("state-key-replaced", _two_key_materialized_twice("B"), Outcome.rejected, R.hybrid_two_key),
    ("state-key-repeated", _two_key_materialized_twice("A"), Outcome.accepted, None),
    (
        "resume-with-another-key",
        [
            *materialized_claim(two_key=True)[:3],
            materialized(checkpoint=checkpoint("A")),
            admitted("r"),
            reused("r", checkpoint=checkpoint("B")),
            finished("r"),
        ],
        Outcome.rejected,
        R.hybrid_two_key,
    ),
    (
        "resume-with-the-key",
        [
            *materialized_claim(two_key=True)[:3],
            materialized(checkpoint=checkpoint("A")),
            admitted("r"),
            reused("r", checkpoint=checkpoint("A")),
            finished("r"),
        ],
        Outcome.accepted,
        None,
    ),
    # a claim-scoped block event the model cannot place decides the verdict
    (
        "stored-without-position",
        [*materialized_claim(), stored("C", None, 7, "x")],
        Outcome.inconclusive,
        None,
    ),
    (
        "stored-with-position",
        [*materialized_claim(footprint=3), stored("C", 2, 7, "x")],
        Outcome.accepted,
        None,
    ),
    (
        "removed-unknown-block-without-position",
        [*materialized_claim(), removed("C", None, 7, "x")],
        Outcome.inconclusive,
        None,
    ),
    (
        "removed-unclaimed-unknown-block",
        [*materialized_claim(), removed(None, None, 7, "x")],
        Outcome.accepted,
        None,
    ),
    # no false rejects: restorations bind per claim and request
    (
        "two-requests-one-fails-then-one-restores",
        [
            *_offloaded_restoring("r1", "r2"),
            _failed("refusal", 0, "r1"),
            refused_for_restoration("r1"),
            claim_event("restored", request_id="r2", restored_blocks=2),
            reused("r2"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.accepted,
        None,
    ),
    (
        "two-requests-one-restores-then-one-fails",
        [
            *_offloaded_restoring("r1", "r2"),
            claim_event("restored", request_id="r2", restored_blocks=2),
            reused("r2"),
            _failed("refusal", 0, "r1"),
            refused_for_restoration("r1"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.accepted,
        None,
    ),
    (
        "two-requests-both-restore",
        [
            *_offloaded_restoring("r1", "r2"),
            claim_event("restored", request_id="r1", restored_blocks=2),
            claim_event("restored", request_id="r2", restored_blocks=2),
            reused("r1"),
            reused("r2"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.accepted,
        None,
    ),
    (
        "the-failed-request-reuses-as-satisfied",
        [
            *_offloaded_restoring("r1", "r2"),
            claim_event("restored", request_id="r2", restored_blocks=2),
            _failed("refusal", 0, "r1"),
            reused("r1"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.rejected,
        R.offload_order,
    ),
    (
        "the-other-request-reuses-before-its-restore",
        [
            *_offloaded_restoring("r1", "r2"),
            _failed("refusal", 0, "r1"),
            refused_for_restoration("r1"),
            reused("r2"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.rejected,
        R.offload_order,
    ),
    (
        "the-failed-request-is-never-refused",
        [
            *_offloaded_restoring("r1", "r2"),
            claim_event("restored", request_id="r2", restored_blocks=2),
            _failed("refusal", 0, "r1"),
            finished("r1"),
            finished("r2"),
        ],
        Outcome.rejected,
        R.attribution,
    ),
    # only while responsible: reuse after release is ordinary cache behaviour
    (
        "reuse-after-release",
        [
            *materialized_claim(),
            claim_event("offloaded", tier="cpu"),
            claim_event("released"),
            admitted("r"),
            reused("r"),
            finished("r"),
        ],
        Outcome.accepted,
        None,
    ),
    (
        "reuse-while-offloaded",
        [
            *materialized_claim(),
            claim_event("offloaded", tier="cpu"),
            admitted("r"),
            reused("r"),
            finished("r"),
        ],
        Outcome.rejected,
        R.offload_order,
    ),
    # terms compare in one unit: tokens round up to blocks (block size 16)
    (
        "tokens-and-blocks-the-same-terms",
        [submit(predicate=prefix_predicate(tokens=17), footprint=4), accept(footprint=4)],
        Outcome.accepted,
        None,
    ),
    (
        "tokens-and-blocks-other-terms",
        [submit(predicate=prefix_predicate(tokens=16), footprint=4), accept(footprint=4)],
        Outcome.rejected,
        R.terms,
    ),
    (
        "tokens-without-block-size",
        [submit(predicate=prefix_predicate(tokens=32), footprint=4), accept(footprint=4)],
        Outcome.inconclusive,
        None,
    ),
]


def _restored_beside_others(restore: list[Event], third_blocks: int = 1) -> list[Event]:
    """C (2 blocks) offloaded and gone; D (2) and E (`third_blocks`) materialize in a pool of 4;
    then C comes back through `restore`."""
    away = [claim_event("offloaded", tier="cpu"), removed("C", 0, 100, "h0"), removed("C", 1, 101, "h1")]
    others = [accept("D"), stored("D", 0, 200, "d0"), stored("D", 1, 201, "d1"), materialized("D")]
    if third_blocks:
        others += [accept("E", blocks=1), stored("E", 0, 300, "e0"), materialized("E", leading=1)]
    return [*materialized_claim(), *away, *others, claim_event("restore_required", request_id="r"), *restore]


_BY_BLOCKS = [stored("C", 0, 400, "h0"), stored("C", 1, 401, "h1"), claim_event("restored", request_id="r")]
_BY_COUNT = [claim_event("restored", request_id="r", restored_blocks=2)]
_THEN_BLOCKS = [claim_event("restored", request_id="r"), stored("C", 0, 400, "h0"), stored("C", 1, 401, "h1")]
POOL = R.capacity_state
CASES += [
    # the pool is checked when a restore brings a claim's blocks back, not only at materialization
    (
        "restore-by-blocks-past-the-pool",
        _restored_beside_others(_BY_BLOCKS),
        Outcome.rejected,
        R.capacity_state,
    ),
    ("restore-by-blocks-in-the-pool", _restored_beside_others(_BY_BLOCKS, 0), Outcome.accepted, None),
    (
        "restore-by-count-past-the-pool",
        _restored_beside_others(_BY_COUNT),
        Outcome.rejected,
        R.capacity_state,
    ),
    ("restore-by-count-in-the-pool", _restored_beside_others(_BY_COUNT, 0), Outcome.accepted, None),
    # the blocks confirming the restore come after it: the pool is checked when they confirm it
    ("restore-by-later-blocks-past-the-pool", _restored_beside_others(_THEN_BLOCKS), Outcome.rejected, POOL),
    ("restore-by-later-blocks-in-the-pool", _restored_beside_others(_THEN_BLOCKS, 0), Outcome.accepted, None),
]


def _shared_prefix_restored_by_count() -> list[Event]:
    """C and B hold one prefix (the same blocks) and go offloaded; D fills the rest of a pool
    of 4; one request restores both by count: the two restores bring back one set of blocks."""
    shared = [accept("B"), stored("B", 0, 100, "h0"), stored("B", 1, 101, "h1"), materialized("B")]
    away = [claim_event("offloaded", c, tier="cpu") for c in "CB"] + [removed("C", 0, 100, "h0")]
    away.append(removed("C", 1, 101, "h1"))
    others = [accept("D"), stored("D", 0, 200, "d0"), stored("D", 1, 201, "d1"), materialized("D")]
    back = [claim_event("restore_required", c, request_id="r") for c in "CB"]
    back += [claim_event("restored", c, request_id="r", restored_blocks=2) for c in "CB"]
    return [*materialized_claim(), *shared, *away, *others, *back]


def _two_prefixes_restored_by_count() -> list[Event]:
    """C and B hold prefixes of other content (2 blocks each), go offloaded and are restored by
    count: 4 blocks on the device, none named, the pool of 4 full."""
    other = [accept("B"), stored("B", 0, 200, "b0"), stored("B", 1, 201, "b1"), materialized("B")]
    away = [claim_event("offloaded", c, tier="cpu") for c in "CB"]
    away += [removed("C", 0, 100, "h0"), removed("C", 1, 101, "h1")]
    away += [removed("B", 0, 200, "b0"), removed("B", 1, 201, "b1")]
    back = [claim_event("restore_required", c, request_id="r") for c in "CB"]
    back += [claim_event("restored", c, request_id="r", restored_blocks=2) for c in "CB"]
    return [*materialized_claim(), *other, *away, *back]


def _refused_by(blocking: list[str], protected: int) -> Event:
    """A capacity refusal of request q in the pool of 4, blaming `blocking`."""
    return {
        "event": "active_request_refused",
        "request_id": "q",
        "reason": "capacity",
        "blocking_claim_ids": blocking,
        "protected_resident_blocks": protected,
        "active_live_blocks_required": 3,
        "resident_plus_active_blocks": protected + 3,
        "usable_blocks": 4,
        "capacity_shortfall_blocks": protected - 1,
    }


# claims sharing a prefix restore one set of blocks (vLLM's binding restores them together),
# and a refusal they cause counts that set once (the protected term counts a block once)
SHARED_RESTORE = _shared_prefix_restored_by_count()
CASES += [
    ("restore-by-count-of-a-shared-prefix", SHARED_RESTORE, Outcome.accepted, None),
    (
        "restore-by-count-of-a-shared-prefix-then-its-refusal",
        [*SHARED_RESTORE, _refused_by(["C", "B"], 2)],
        Outcome.accepted,
        None,
    ),
    (
        "restore-by-count-of-two-prefixes-then-a-refusal-counting-one",
        [*_two_prefixes_restored_by_count(), _refused_by(["C", "B"], 2)],
        Outcome.rejected,
        R.capacity_state,
    ),
    (
        "restore-by-count-of-two-prefixes-then-a-refusal-counting-both",
        [*_two_prefixes_restored_by_count(), _refused_by(["C", "B"], 4)],
        Outcome.accepted,
        None,
    ),
    (
        "restore-by-count-then-a-refusal-counting-short",
        [*SHARED_RESTORE, _refused_by(["C", "B", "D"], 3)],
        Outcome.rejected,
        R.capacity_state,
    ),
]

# a materialization is judged against the pool the model holds: C and D (2 blocks each) fill a
# pool of 4, and E's one more block overcommits it
_TWO_IN_THE_POOL = [
    *materialized_claim(),
    accept("D"),
    stored("D", 0, 200, "d0"),
    stored("D", 1, 201, "d1"),
    materialized("D"),
]
_THIRD = [accept("E", blocks=1), stored("E", 0, 300, "e0"), materialized("E", leading=1)]
CASES += [
    ("materialized-past-the-pool", [*_TWO_IN_THE_POOL, *_THIRD], Outcome.rejected, POOL),
    ("materialized-in-the-pool", _TWO_IN_THE_POOL, Outcome.accepted, None),
]

NO_BLOCK_SIZE = {"kvclaims_trace": 1, "usable_blocks": 64}
SMALL_POOL = {"kvclaims_trace": 1, "usable_blocks": 4, "block_size": 16}
HEADERS = {"tokens-without-block-size": NO_BLOCK_SIZE} | {
    name: SMALL_POOL for name, *_ in CASES if name.startswith(("restore-by", "materialized-"))
}


@pytest.mark.parametrize(("name", "events", "outcome", "rule"), CASES, ids=[c[0] for c in CASES])
def test_hostile_trace_and_twin(name: str, events: list[Event], outcome: Outcome, rule: R | None) -> None:
    verdict = check(events, HEADERS.get(name))
    assert verdict.outcome is outcome, verdict.reason
    if rule is not None:
        assert f"[{rule.value}]" in verdict.reason
