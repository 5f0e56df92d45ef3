"""Every class of disagreement the oracle and the checker once had, kept as a pair of traces of
the same length: the one the contract forbids, which both must reject, and its conforming twin,
which both must accept (issue 12). Which side was wrong, and why, is in each case's comment; the
expected verdicts come from the seeds, DESIGN 4 and issue 12, never from running either side.
The traces use the exhaustive comparison's universe (`kvclaims.oracle.exhaustive`: a pool of 4).
"""

from __future__ import annotations

import pytest

from kvclaims.oracle.exhaustive import BEST1, HARD1, OFF2, TWOKEY2, encode, refinement_checker
from kvclaims.oracle.interpreter import ACCEPTED, REJECTED, judge

Event = tuple[str, dict]


def accepted(terms: dict) -> Event:
    return ("resident_claim_accepted", terms)


RESUME_R1: Event = ("resident_claim_restore_required", {"claim_id": "c2", "request_id": "r1"})
FINISHED_R1: Event = ("request_finished", {"request_id": "r1", "status": "finished"})


def materialized_two_key() -> Event:
    checkpoint = {"boundary": 1, "payload_hash": "pa", "value_hash": "va"}
    return ("resident_claim_materialized", {"claim_id": "c2", "leading_blocks": 1, "checkpoint": checkpoint})


def resumed_with(value_hash: str) -> Event:
    """r1 reports a satisfied in-place resume of c2 whose restored state has `value_hash`."""
    checkpoint = {"boundary": 1, "payload_hash": "pa", "value_hash": value_hash}
    return ("request_reused", {**reused("c2", 1, True)[1], "checkpoint": checkpoint})


def submitted_in_tokens(tokens: int) -> Event:
    """c2's terms (OFF2) submitted with the predicate counted in tokens."""
    predicate = {"kind": "leading_prefix_at_least", "tokens": tokens}
    return ("resident_claim_submitted", {**OFF2, "predicate": predicate})


def materialized(claim_id: str, leading: int) -> Event:
    return ("resident_claim_materialized", {"claim_id": claim_id, "leading_blocks": leading})


def stored(block: int, block_hash: str, claim_id: str | None = None, position: int | None = None) -> Event:
    fields: dict = {"block_id": block, "block_hash": block_hash}
    if claim_id is not None:
        fields |= {"claim_id": claim_id, "position": position}
    return ("block_stored", fields)


def removed(block: int, block_hash: str, claim_id: str | None = None, position: int | None = None) -> Event:
    return ("block_removed", stored(block, block_hash, claim_id, position)[1])


def admitted(live: int, shared: int | None = None) -> Event:
    fields: dict = {"request_id": "r2", "active_live_blocks": live}
    if shared is not None:
        fields["claim_shared_blocks"] = shared
    return ("active_request_admitted", fields)


def refused(blocking: list[str], protected: int, active: int) -> Event:
    total = protected + active
    return (
        "active_request_refused",
        {
            "request_id": "r1",
            "reason": "capacity",
            "blocking_claim_ids": blocking,
            "protected_resident_blocks": protected,
            "active_live_blocks_required": active,
            "resident_plus_active_blocks": total,
            "usable_blocks": 4,
            "capacity_shortfall_blocks": max(0, total - 4),
        },
    )


def deferred(blocking: list[str], protected: int, active: int) -> Event:
    return ("active_request_deferred", refused(blocking, protected, active)[1])


def restored(restored_blocks: int | None = None) -> Event:
    fields: dict = {"claim_id": "c2", "request_id": "r1"}
    if restored_blocks is not None:
        fields["restored_blocks"] = restored_blocks
    return ("resident_claim_restored", fields)


def reused(claim_id: str, cached: int, satisfied: bool) -> Event:
    fields = {
        "request_id": "r1",
        "claim_id": claim_id,
        "cached_blocks": cached,
        "predicate_satisfied": satisfied,
    }
    return ("request_reused", fields)


MS = 1_000_000  # t_ns per millisecond


def timed(accepted_ms: int, refresh: bool = True) -> Event:
    """c2 promises 100 ms from acceptance at `accepted_ms` (with refresh on hit)."""
    terms = {**OFF2, "mode": "expiring", "duration_ms": 100, "refresh_on_hit": refresh}
    return ("resident_claim_accepted", {**terms, "t_ns": accepted_ms * MS})


def expired_at(ms: int) -> Event:
    return ("resident_claim_expired", {"claim_id": "c2", "t_ns": ms * MS})


def hit_at(ms: int) -> Event:
    return ("request_reused", {**reused("c2", 1, True)[1], "t_ns": ms * MS})


OFFLOADED_C2 = [
    accepted(OFF2),
    materialized("c2", 1),
    ("resident_claim_offloaded", {"claim_id": "c2", "tier": "cpu"}),
    ("resident_claim_restore_required", {"claim_id": "c2", "request_id": "r1"}),
]
TRACKED_OFFLOADED_C2 = [
    accepted(OFF2),
    stored(2, "h2", "c2", 0),
    materialized("c2", 1),
    ("resident_claim_offloaded", {"claim_id": "c2", "tier": "cpu"}),
    removed(2, "h2"),
    ("resident_claim_restore_required", {"claim_id": "c2", "request_id": "r1"}),
]

TWO_BLOCKING_CLAIMS = [
    accepted(HARD1),
    accepted(OFF2),
    stored(0, "h0", "c1", 0),
    stored(1, "h1", "c1", 1),
    stored(2, "h2", "c2", 0),
]

# name -> (violating trace, conforming twin)
TWINS: dict[str, tuple[list[Event], list[Event]]] = {
    # Seed 002: an in-place resume restores the state key recorded at materialization; a two-key
    # claim its blocks alone made resident recorded none, so nothing can be restored in place
    # (the checker let it through).
    "in-place-resume-without-a-recorded-state-key": (
        [accepted(TWOKEY2), stored(0, "h0", "c2", 0), RESUME_R1, FINISHED_R1],
        [accepted(TWOKEY2), stored(0, "h0", "c2", 0), materialized_two_key(), FINISHED_R1],
    ),
    # DESIGN 4: the two-key state key binds while the runtime is responsible. A resume with
    # another value of a materialized claim breaks it; after a release the same reuse is
    # ordinary cache behaviour (the checker judged it anyway: a false reject).
    "two-key-resume-with-another-value-binds-only-while-responsible": (
        [accepted(TWOKEY2), materialized_two_key(), resumed_with("vb")],
        [accepted(TWOKEY2), ("resident_claim_released", {"claim_id": "c2"}), resumed_with("vb")],
    ),
    # Choice C7: acceptance repeats the submitted terms, compared in one unit (block_size 16):
    # 17 tokens are 2 blocks, not the 1 accepted; 16 tokens are (the oracle compared the
    # predicate's JSON, so any unit change was "other terms": a false reject).
    "accepted-terms-in-blocks-differ-from-submitted-tokens": (
        [submitted_in_tokens(17), accepted(OFF2)],
        [submitted_in_tokens(16), accepted(OFF2)],
    ),
    # Class 2: a wall-clock duration (duration_ms, judged on t_ns) is honoured (the oracle
    # judged only duration_steps).
    "expiry-before-duration-ms": (
        [timed(0), materialized("c2", 1), expired_at(99)],
        [timed(0), materialized("c2", 1), expired_at(100)],
    ),
    # Class 2, refresh on hit: a satisfied reuse restarts the clock (80 + 100 > 150); without
    # refresh_on_hit the same expiry keeps the promise.
    "refresh-on-hit-restarts-the-clock": (
        [timed(0), materialized("c2", 1), hit_at(80), expired_at(150)],
        [timed(0, refresh=False), materialized("c2", 1), hit_at(80), expired_at(150)],
    ),
    # Class 2: a hit stamped before the clock's start cannot move it back (found by the Z3
    # duration obligation: the checker restarted the clock at the earlier stamp).
    "a-hit-stamped-earlier-cannot-shorten-the-promise": (
        [timed(1000), materialized("c2", 1), hit_at(0), expired_at(1050)],
        [timed(1000), materialized("c2", 1), hit_at(0), expired_at(1100)],
    ),
    # Seed 001 3.4 (class 1): claim-held + the request's other live blocks fit in the pool. The
    # checker did not sum them (trace v1 could not say what a request shares with a claim);
    # `claim_shared_blocks` says it now. 2 held + 3 - 0 > 4; the twin shares 1 of its 3.
    "admission-overcommits-the-pool": (
        [accepted(HARD1), materialized("c1", 2), admitted(3, shared=0)],
        [accepted(HARD1), materialized("c1", 2), admitted(3, shared=1)],
    ),
    # Only the blocks of the leading positions a predicate needs are protected: c2 needs 1 of
    # its 2 stored blocks, c1 both (1 + 3 fits in 4, 2 + 3 does not).
    "admission-counts-only-the-predicates-blocks": (
        [accepted(HARD1), stored(0, "h0", "c1", 0), stored(1, "h1", "c1", 1), admitted(3, shared=0)],
        [accepted(OFF2), stored(0, "h0", "c2", 0), stored(1, "h1", "c2", 1), admitted(3, shared=0)],
    ),
    # A request cannot share more claim-held blocks than the claims hold (2).
    "admission-shares-more-than-the-claims-hold": (
        [accepted(HARD1), materialized("c1", 2), admitted(3, shared=3)],
        [accepted(HARD1), materialized("c1", 2), admitted(3, shared=2)],
    ),
    # Without the field the sharing is unknown: the request alone must fit (the oracle summed
    # every admitted request's live blocks, rejecting vLLM traces whose requests share a prefix).
    "admission-without-sharing-fits-alone": (
        [accepted(HARD1), materialized("c1", 2), admitted(5)],
        [accepted(HARD1), materialized("c1", 2), admitted(3)],
    ),
    # Class 3: a block is its id and its hash, claimed or not (the checker kept no hash for a
    # block no claim held).
    "removal-with-another-hash": (
        [stored(1, "hx"), removed(1, "h1")],
        [stored(1, "hx"), removed(1, "hx")],
    ),
    # Class 3: a removal naming a claim position for a block the trace stored without it.
    "removal-names-a-holder-the-block-never-had": (
        [accepted(OFF2), stored(1, "hx"), removed(1, "hx", "c2", 1)],
        [accepted(OFF2), stored(1, "hx", "c2", 1), removed(1, "hx", "c2", 1)],
    ),
    # Class 3: a removal of a block never stored, naming a position stored in another block,
    # cannot be attributed (the checker dropped the position).
    "removal-names-a-position-stored-elsewhere": (
        [accepted(BEST1), stored(0, "h0", "c1", 0), removed(3, "h3", "c1", 0)],
        [accepted(BEST1), stored(0, "h0", "c1", 0), removed(0, "h0", "c1", 0)],
    ),
    # One content may sit in two device blocks (vLLM caches duplicates): a position stays while
    # any block holding it survives (the checker lost it with the first block: a false reject,
    # the oracle moved it to the last block). The violating twin stores the second block for
    # position 1, so removing block 0 breaks the predicate and no harm is reported.
    "a-position-held-by-two-blocks-survives-one-removal": (
        [accepted(OFF2), stored(0, "h0", "c2", 0), stored(2, "h2", "c2", 1), removed(0, "h0")],
        [accepted(OFF2), stored(0, "h0", "c2", 0), stored(2, "h0", "c2", 0), removed(0, "h0")],
    ),
    # Class 5 (choice C6): a restore of a claim whose blocks are tracked must be confirmed by
    # them (or by restored_blocks) before anything else names it and before the end (the checker
    # checked only a later satisfied reuse).
    "restore-not-confirmed-by-blocks": (
        [*TRACKED_OFFLOADED_C2, restored()],
        [*TRACKED_OFFLOADED_C2, restored(restored_blocks=1)],
    ),
    # Class 5: an untracked claim's restore counts for a satisfied reuse only with a block count
    # that reaches the predicate (the oracle let any restore through).
    "satisfied-reuse-after-an-unconfirmed-restore": (
        [*OFFLOADED_C2, restored(), reused("c2", 1, True)],
        [*OFFLOADED_C2, restored(restored_blocks=1), reused("c2", 1, True)],
    ),
    # Class 7 (choice C5): a materialized report after a named removal of one of the claim's
    # positions must be confirmed by its blocks (the checker only started tracking a claim at a
    # removal while it was materialized).
    "materialized-after-a-named-removal-needs-its-blocks": (
        [accepted(OFF2), removed(0, "h0", "c2", 0), materialized("c2", 1)],
        [accepted(OFF2), stored(2, "h2", "c2", 0), materialized("c2", 1)],
    ),
    # Class 7 (choice C5): a materialized report its blocks have not confirmed must be confirmed
    # before any event names the claim, a conflict blaming it included (the checker waited for
    # the claim's next lifecycle step; found by the 100k mutation run: a changed leading_blocks).
    "an-unconfirmed-report-cannot-block-a-request": (
        [
            accepted(OFF2),
            stored(2, "h2", "c2", 0),
            materialized("c2", 2),
            refused(["c2"], 2, 3),
            stored(3, "h3", "c2", 1),
        ],
        [
            accepted(OFF2),
            stored(2, "h2", "c2", 0),
            materialized("c2", 2),
            stored(3, "h3", "c2", 1),
            refused(["c2"], 2, 3),
        ],
    ),
    # Classes 4 and 7: a demotion removes no block, so the reported prefix is still on the
    # device at the first block event after it (the checker assumed it only while materialized).
    "lost-after-demotion-keeps-the-reported-prefix": (
        [
            accepted(BEST1),
            materialized("c1", 2),
            ("resident_claim_demoted", {"claim_id": "c1"}),
            removed(1, "h1", "c1", 1),
            ("resident_claim_lost", {"claim_id": "c1", "leading_blocks": 0}),
        ],
        [
            accepted(BEST1),
            materialized("c1", 2),
            ("resident_claim_demoted", {"claim_id": "c1"}),
            removed(1, "h1", "c1", 1),
            ("resident_claim_lost", {"claim_id": "c1", "leading_blocks": 1}),
        ],
    ),
    # Seed 001 table 4, lifecycle RETIRED: a released claim's blocks are ordinary cache, so a
    # post-release loss is judged by its own numbers, not against blocks the model no longer
    # follows (the oracle kept following them).
    "post-release-loss-is-judged-by-its-numbers": (
        [
            accepted(BEST1),
            stored(0, "h0", "c1", 0),
            ("resident_claim_released", {"claim_id": "c1"}),
            ("resident_claim_lost", {"claim_id": "c1", "leading_blocks": 2}),
        ],
        [
            accepted(BEST1),
            stored(0, "h0", "c1", 0),
            ("resident_claim_released", {"claim_id": "c1"}),
            ("resident_claim_lost", {"claim_id": "c1", "leading_blocks": 0}),
        ],
    ),
    # Class 14: a deferred request may later be served from the cache (vLLM schedules a waiting
    # request with a prefix hit; the oracle required an admission first); a refused one may not.
    "reuse-while-deferred": (
        [accepted(HARD1), refused(["c1"], 2, 3), reused("c1", 0, False)],
        [accepted(HARD1), deferred(["c1"], 2, 3), reused("c1", 0, False)],
    ),
    # Class 1: the protected term holds every block of the blocking claims, each once (the
    # checker compared each claim alone). c1 holds 2 blocks, c2 holds 1 more: 3 > 2.
    "protected-term-leaves-out-blocks-of-several-blocking-claims": (
        [*TWO_BLOCKING_CLAIMS, refused(["c1", "c2"], 2, 3)],
        [*TWO_BLOCKING_CLAIMS, refused(["c1", "c2"], 3, 2)],
    ),
}


@pytest.mark.parametrize("name", sorted(TWINS))
def test_the_violating_trace_is_rejected_by_both_and_its_twin_accepted(name: str) -> None:
    bad, good = TWINS[name]
    assert len(bad) == len(good)
    bad_bytes, good_bytes = encode(bad), encode(good)
    assert (judge(bad_bytes).outcome, refinement_checker(bad_bytes).outcome) == (REJECTED, REJECTED)
    assert (judge(good_bytes).outcome, refinement_checker(good_bytes).outcome) == (ACCEPTED, ACCEPTED), (
        judge(good_bytes),
        refinement_checker(good_bytes),
    )
