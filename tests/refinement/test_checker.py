"""The checker's own logic: one semantics with the lifecycle machine, and the data checks the
machine cannot see (two-key checkpoints, budgets, undecidable predicates, optional proofs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.refinement import Budget, ErrorClass, Outcome, check_bytes
from kvclaims.refinement.checker import Checker, Rejection, Undecidable
from kvclaims.refinement.decoding import convert_event
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.ids import RetiredIds
from kvclaims.spec.vocabulary import ConformanceRule, ProtectionMode
from kvclaims.statemachine.lifecycle import INITIAL, ClaimProfile, Event, Violation, at_end, step

R = ConformanceRule
REQUIRED = 4

# Lifecycle events that carry no data obligation of their own, and how to write each as trace v1.
ALPHABET = {
    Event.accept: lambda t, mode, n: t.accept("C", mode=mode, blocks=REQUIRED),
    Event.materialize: lambda t, mode, n: t.materialize("C", REQUIRED),
    Event.demote: lambda t, mode, n: t.claim_event("demoted", "C"),
    Event.expire: lambda t, mode, n: t.claim_event("expired", "C"),
    Event.release: lambda t, mode, n: t.claim_event("released", "C"),
    Event.offload: lambda t, mode, n: t.offload("C"),
    Event.lose: lambda t, mode, n: t.claim_event("lost", "C", leading_blocks=0),
    Event.harm: lambda t, mode, n: t.claim_event("harmed", "C", leading_blocks=0, required_blocks=REQUIRED),
    Event.reuse_satisfied: lambda t, mode, n: t.reuse(f"r{n}", "C", REQUIRED, True),
    Event.reuse_unsatisfied: lambda t, mode, n: t.reuse(f"r{n}", "C", 0, False),
}


def lifecycle_verdict(profile: ClaimProfile, events: list[Event]) -> bool:
    phase = INITIAL
    for event in events:
        result = step(profile, phase, event)
        if isinstance(result, Violation):
            return False
        phase = result
    return at_end(phase) is None


@settings(max_examples=600, derandomize=True, deadline=None)
@given(
    st.sampled_from([m.value for m in ProtectionMode]),
    st.lists(st.sampled_from(sorted(ALPHABET)), max_size=7),
)
def test_on_data_free_claim_events_the_checker_agrees_with_the_lifecycle_machine(
    mode: str, events: list[Event]
) -> None:
    trace = TraceBuilder(usable_blocks=80)
    for n, event in enumerate([Event.accept, *events]):
        ALPHABET[event](trace, mode, n)
    profile = ClaimProfile.of(ProtectionMode(mode))
    verdict = check_bytes(trace.ndjson())
    assert (verdict.outcome is Outcome.accepted) == lifecycle_verdict(profile, [Event.accept, *events]), (
        verdict.reason
    )


def two_key_claim(value_hash: str = "v1", payload_hash: str = "p1") -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("C", mode="offloadable", blocks=4, two_key=True)
    trace.materialize("C", 4, checkpoint={"boundary": 4, "payload_hash": "p1", "value_hash": "v1"})
    trace.offload("C").admit("r").restore_required("C", "r").restored("C", "r")
    return trace.claim_event(
        "checkpoint_restored", "C", boundary=4, payload_hash=payload_hash, value_hash=value_hash
    )


def test_two_key_restore_with_the_recorded_value_hash_satisfies_the_predicate() -> None:
    trace = two_key_claim().reuse("r", "C", 4).finish("r")
    assert check_bytes(trace.ndjson()).outcome is Outcome.accepted


def test_two_key_equal_payload_alone_never_satisfies_and_reuse_after_mismatch_is_rejected() -> None:
    trace = two_key_claim(value_hash="v2").reuse("r", "C", 4)
    assert check_bytes(trace.ndjson()).rule is R.hybrid_two_key
    owed = two_key_claim(value_hash="v2")
    assert check_bytes(owed.ndjson()).rule is R.hybrid_two_key
    failed = two_key_claim(value_hash="v2").restoration_failed("C", "r", "demotion").finish("r")
    assert check_bytes(failed.ndjson()).outcome is Outcome.accepted


def test_two_key_claim_must_record_its_checkpoint() -> None:
    trace = (
        TraceBuilder(usable_blocks=80)
        .accept("C", mode="offloadable", blocks=4, two_key=True)
        .materialize("C", 4)
    )
    assert check_bytes(trace.ndjson()).rule is R.hybrid_two_key


def test_a_token_predicate_without_a_block_size_is_inconclusive() -> None:
    trace = TraceBuilder(usable_blocks=80, block_size=None)
    trace.add(
        "resident_claim_accepted",
        claim_id="C",
        owner_scope="o",
        object_id="x",
        mode="best_effort",
        footprint_blocks=4,
        predicate={"kind": "leading_prefix_at_least", "tokens": 48},
    )
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.inconclusive and verdict.error_class is ErrorClass.undecidable
    with_size = TraceBuilder(usable_blocks=80, block_size=16)
    with_size.events = trace.events
    assert check_bytes(with_size.ndjson()).outcome is Outcome.accepted


def test_an_exhausted_budget_is_inconclusive_never_accepted() -> None:
    trace = TraceBuilder(usable_blocks=80)
    for index in range(5):
        trace.admit(f"r{index}")
    checker = Checker(usable_blocks=80, block_size=16, budget=Budget(max_live_requests=3))
    with pytest.raises(Undecidable) as raised:
        for line, event in enumerate(trace.events, start=2):
            checker.feed(convert_event(event), line, line - 2)
    assert raised.value.finding.error_class is ErrorClass.budget_exhausted


def test_a_restoration_refusal_may_omit_its_proof_but_a_given_proof_must_add_up() -> None:
    base = TraceBuilder(usable_blocks=80).accept("C", mode="offloadable").materialize("C", 4).offload("C")
    base.admit("r").restore_required("C", "r").restoration_failed("C", "r")
    assert check_bytes(base.ndjson() + b"").outcome is Outcome.rejected  # the refusal is owed
    proofless = TraceBuilder(usable_blocks=80)
    proofless.events = [*base.events]
    proofless.conflict("r", ["C"], reason="restoration_failed")
    assert check_bytes(proofless.ndjson()).outcome is Outcome.accepted
    wrong = TraceBuilder(usable_blocks=80)
    wrong.events = [*base.events]
    wrong.conflict("r", ["C"], reason="restoration_failed", protected=4, active=1, total=6)
    assert check_bytes(wrong.ndjson()).rule is R.capacity_arithmetic


def test_a_capacity_conflict_without_its_proof_is_rejected() -> None:
    trace = TraceBuilder(usable_blocks=80).accept("C").materialize("C", 4).conflict("r", ["C"])
    verdict = check_bytes(trace.ndjson())
    assert verdict.rule is R.capacity_arithmetic and "without its capacity proof" in verdict.reason


def test_a_finished_request_id_is_never_reused() -> None:
    trace = TraceBuilder(usable_blocks=80).admit("r").finish("r").admit("r")
    assert check_bytes(trace.ndjson()).rule is R.identity


def test_a_live_request_admitted_again_is_refused_and_a_new_lifetime_id_is_not() -> None:
    live = TraceBuilder(usable_blocks=80).admit("r").admit("r").finish("r")
    assert check_bytes(live.ndjson()).outcome == "rejected"
    lifetimes = TraceBuilder(usable_blocks=80).admit("r").finish("r").admit("r#2").finish("r#2")
    assert check_bytes(lifetimes.ndjson()).outcome == "accepted"


def test_block_events_must_stay_inside_the_claims_footprint() -> None:
    trace = TraceBuilder(usable_blocks=80).accept("C", blocks=2).store_prefix("C", 3)
    assert check_bytes(trace.ndjson()).rule is R.identity


def test_host_tier_blocks_do_not_count_toward_the_device_prefix() -> None:
    trace = TraceBuilder(usable_blocks=80).accept("C", blocks=2).store_prefix("C", 2).materialize("C", 2)
    trace.add(
        "block_removed",
        block_id=trace.block_id("C", 0),
        block_hash="h",
        cache_level="cpu",
        claim_id="C",
        position=0,
    )
    assert check_bytes(trace.ndjson()).outcome is Outcome.accepted


def test_a_rejection_raised_by_the_checker_carries_its_ids() -> None:
    checker = Checker(usable_blocks=80, block_size=16)
    event = convert_event(
        {
            "seq": 0,
            "event": "resident_claim_harmed",
            "claim_id": "X",
            "leading_blocks": 0,
            "required_blocks": 1,
        }
    )
    try:
        checker.feed(event, 2, 0)
    except Rejection as rejection:
        assert rejection.ids == {"X"} and rejection.counterexample.rule is R.identity
    else:
        raise AssertionError("harm of an unknown claim must be rejected")


def test_retired_ids_remember_every_id_across_merges(monkeypatch) -> None:
    monkeypatch.setattr("kvclaims.spec.ids._RECENT_LIMIT", 64)
    retired = RetiredIds()
    ids = [f"request-{n}" for n in range(20_000)]
    for identifier in ids[::2]:
        retired.add(identifier)
    assert all(i in retired for i in ids[::2])
    assert not any(i in retired for i in ids[1::2])
    assert len(retired) == 10_000


@pytest.mark.parametrize("settle", ["released", "demoted", "expired"])
def test_post_release_loss_may_name_the_settled_claim(settle: str) -> None:
    """Seed 001 table 4: loss after release, demotion or expiry is post-release loss, not harm,
    and naming the claim on the removed block is legal however the checker stores it."""
    trace = TraceBuilder(usable_blocks=80)
    trace.accept("claim:a", mode="hard_protected", blocks=2)
    trace.store_prefix("claim:a", 2)
    trace.materialize("claim:a", 2)
    trace.claim_event(settle, "claim:a")
    trace.remove_block("claim:a", 1)
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.accepted, verdict


@pytest.mark.parametrize(
    ("mode", "outcome"), [("hard_protected", Outcome.rejected), ("best_effort", Outcome.accepted)]
)
def test_a_named_loss_of_a_claim_materialized_without_block_events_breaks_its_predicate(
    mode: str, outcome: Outcome
) -> None:
    """A trace that reports materialization without block-level accounting and then removes a
    named block of the claim lost the prefix: a hard claim owes harm (silent harm otherwise),
    a best-effort one owes nothing."""
    trace = TraceBuilder(usable_blocks=80)
    trace.accept("claim:a", mode=mode, blocks=4)
    trace.materialize("claim:a", 4)
    trace.remove_block("claim:a", 0)
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is outcome, verdict
    if outcome is Outcome.rejected:
        assert verdict.rule is ConformanceRule.no_silent_harm, verdict


def test_a_named_loss_outside_the_reported_prefix_keeps_the_predicate() -> None:
    trace = TraceBuilder(usable_blocks=80)
    trace.accept("claim:a", mode="hard_protected", blocks=2, footprint=4)
    trace.materialize("claim:a", 2)
    trace.remove_block("claim:a", 3)
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.accepted, verdict


def _claims_with_one_stored_block(footprint: int, *, release_first: bool = False) -> bytes:
    trace = TraceBuilder(usable_blocks=80).accept("A", blocks=footprint).store_prefix("A", 1)
    if release_first:
        trace.claim_event("released", "A")
    return trace.accept("B", blocks=footprint).store_prefix("B", 1).ndjson()


def test_claim_footprints_cannot_size_the_checkers_state_past_its_budget() -> None:
    """A footprint is a number in the trace: the per-position maps of all live claims together
    stay within `max_tracked_blocks` (inconclusive past it), so a few lines with huge
    footprints cannot allocate gigabytes. Twins: smaller footprints, or a claim retired first."""
    from kvclaims.refinement.api import check_trace

    budget = Budget(max_tracked_blocks=1000)
    verdict = check_trace(_claims_with_one_stored_block(600), budget=budget)
    assert verdict.outcome is Outcome.inconclusive and verdict.error_class is ErrorClass.budget_exhausted
    for twin in (_claims_with_one_stored_block(400), _claims_with_one_stored_block(600, release_first=True)):
        assert check_trace(twin, budget=budget).error_class is not ErrorClass.budget_exhausted
