"""The claim ledger: phases move only by the model's step, positions keep the leading prefix,
loss is decided by the model, deadlines fire once and in order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.spec.vocabulary import ProtectionMode as M
from kvclaims.statemachine.ledger import (
    Claim,
    ClaimLedger,
    IllegalTransition,
    LifecycleBug,
    Loss,
    OwedAtEnd,
    fewest_oldest,
    next_request_phase,
)
from kvclaims.statemachine.lifecycle import ClaimProfile, Event, Phase
from kvclaims.statemachine.requests import RequestEvent, RequestPhase


def claim(claim_id: str = "c", mode: M = M.hard_protected, footprint: int = 4, required: int = 3) -> Claim:
    return Claim(
        claim_id=claim_id,
        mode=mode,
        footprint_blocks=footprint,
        required_blocks=required,
        profile=ClaimProfile.of(mode),
    )


def accepted(ledger: ClaimLedger, *args: object, protects: bool = True, **kwargs: object) -> Claim:
    c = claim(*args, **kwargs)  # type: ignore[arg-type]
    ledger.submit(c)
    ledger.accept(c, protects=protects)
    return c


def materialized(ledger: ClaimLedger, *args: object, **kwargs: object) -> Claim:
    c = accepted(ledger, *args, **kwargs)
    for position in range(c.footprint_blocks):
        c.hold(position, 100 + position)
    assert ledger.materializes(c)
    ledger.advance(c, Event.materialize)
    return c


def test_an_illegal_step_raises_where_attempted_naming_claim_phase_and_event() -> None:
    ledger = ClaimLedger()
    c = accepted(ledger)
    with pytest.raises(IllegalTransition, match=r"claim c: restore is illegal in phase accepted") as raised:
        ledger.advance(c, Event.restore)
    assert (raised.value.subject, raised.value.phase, raised.value.event) == (
        "claim c",
        "accepted",
        "restore",
    )
    assert c.phase is Phase.accepted
    assert (Phase.accepted, Event.restore, Phase.materialized) not in ledger.transitions_taken


def test_a_hard_claim_may_be_offloaded_but_a_best_effort_claim_is_never_blamed() -> None:
    """Offload is a legal action for a hard_protected claim (seed 001 table 3); blame is not
    legal for a claim without a preservation obligation."""
    ledger = ClaimLedger()
    hard = materialized(ledger, "hard")
    assert ledger.allows(hard, Event.offload)
    observational = materialized(ledger, "be", M.best_effort)
    with pytest.raises(IllegalTransition, match="blocking_claim_ids"):
        ledger.blame([hard, observational])
    assert not ledger.allows(observational, Event.block)


def test_the_leading_prefix_is_the_first_empty_position() -> None:
    ledger = ClaimLedger()
    c = accepted(ledger, footprint=5, required=3)
    for position in (1, 2, 4):
        c.hold(position, position)
    assert (c.leading_blocks, c.held_count) == (0, 3)
    assert not ledger.materializes(c)
    c.hold(0, 0)  # fills the hole: the run extends over 1 and 2
    assert (c.leading_blocks, c.held_count) == (3, 4)
    assert ledger.materializes(c)
    assert c.drop(4) is False  # beyond the run: the predicate still holds
    assert c.drop(1) is True  # 3 -> 1 leading blocks: below the predicate of 3
    assert c.drop(2) is False  # already below: no second crossing
    assert (c.leading_blocks, c.held_count) == (1, 1)


def test_a_position_is_held_and_dropped_once() -> None:
    ledger = ClaimLedger()
    c = accepted(ledger)
    c.hold(0, 7)
    with pytest.raises(LifecycleBug, match="already held"):
        c.hold(0, 8)
    with pytest.raises(LifecycleBug, match="not held"):
        c.drop(1)
    assert (c.slots[0], c.held_count) == (7, 1)


@settings(max_examples=60, derandomize=True, database=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=40))
def test_leading_and_held_count_always_match_a_recount(operations: list[tuple[bool, int]]) -> None:
    ledger = ClaimLedger()
    c = accepted(ledger, footprint=8, required=4)
    for hold, position in operations:
        if hold and c.slots[position] is None:
            c.hold(position, position)
        elif not hold and c.slots[position] is not None:
            c.drop(position)
        assert c.held_count == sum(b is not None for b in c.slots)
        assert c.leading_blocks == next((p for p, b in enumerate(c.slots) if b is None), 8)


@pytest.mark.parametrize(
    ("mode", "loss", "phase"),
    [(M.hard_protected, Loss.harm, Phase.breached), (M.best_effort, Loss.lost, Phase.accepted)],
)
def test_the_model_decides_harm_or_lost(mode: M, loss: Loss, phase: Phase) -> None:
    ledger = ClaimLedger()
    c = materialized(ledger, mode=mode)
    assert c.drop(0)
    assert ledger.break_predicate(c) is loss
    assert c.phase is phase
    ledger.advance(c, Event.harm if loss is Loss.harm else Event.lose)


def test_loss_after_demotion_owes_nothing_and_a_breach_is_owed_at_close() -> None:
    ledger = ClaimLedger()
    demoted = materialized(ledger, "d", M.demotable)
    ledger.advance(demoted, Event.demote)
    assert ledger.break_predicate(demoted) is Loss.none
    breached = materialized(ledger, "h")
    ledger.close()  # nothing owed yet
    assert ledger.break_predicate(breached) is Loss.harm
    with pytest.raises(OwedAtEnd, match=r"claim h: .*without resident_claim_harmed"):
        ledger.close()


def test_protecting_holds_responsible_protecting_claims_in_acceptance_order() -> None:
    ledger = ClaimLedger()
    first, second = materialized(ledger, "a", M.demotable), accepted(ledger, "b")
    accepted(ledger, "soft", M.soft_priority, protects=False)
    assert list(ledger.protecting) == ["a", "b"]
    assert (first.accepted_order, second.accepted_order) == (0, 1)
    ledger.advance(first, Event.demote)
    assert list(ledger.protecting) == ["b"]
    ledger.forget(second)
    assert ledger.protecting == {} and "b" not in ledger.claims


def test_deadlines_fire_once_in_deadline_then_acceptance_order() -> None:
    ledger = ClaimLedger()
    late, early_a, early_b = (accepted(ledger, name, M.expiring) for name in ("late", "a", "b"))
    assert not ledger.armed  # nothing to look at (runtimes skip the clock)
    ledger.expire_at(late, step=9)
    ledger.expire_at(early_b, step=5)
    ledger.expire_at(early_a, step=5)
    assert ledger.armed
    assert ledger.due(4) == []
    assert [c.claim_id for c in ledger.due(5)] == ["a", "b"]
    assert ledger.due(6) == []  # consumed: a deadline fires once
    ledger.advance(late, Event.release)
    assert ledger.due(10) == []  # a released claim may not expire
    assert not ledger.armed  # every deadline consumed


def test_re_arming_a_deadline_replaces_it_by_step_and_by_time() -> None:
    ledger = ClaimLedger()
    c = accepted(ledger, mode=M.expiring)
    ledger.expire_at(c, step=3, ms=1_000.0)
    ledger.expire_at(c, step=8, ms=2_500.0)  # refreshed on a hit
    assert ledger.due(5, now_ms=2_000.0) == []
    assert ledger.due(5, now_ms=2_500.0) == [c]  # the clock reaches it first
    ledger.advance(c, Event.expire)
    assert ledger.due(8) == []  # the step deadline finds it expired: it fires no second time


def test_a_request_step_out_of_order_raises() -> None:
    assert next_request_phase("r", RequestPhase.absent, RequestEvent.defer) is RequestPhase.deferred
    with pytest.raises(IllegalTransition, match=r"request r: refuse_restoration is illegal in phase fin"):
        next_request_phase("r", RequestPhase.finished, RequestEvent.refuse_restoration)


def test_the_fewest_oldest_claims_that_remove_the_shortfall_are_chosen() -> None:
    ledger = ClaimLedger()
    claims = [accepted(ledger, name, footprint=size) for name, size in (("a", 2), ("b", 5), ("c", 3))]

    def frees(at_least: int):  # type: ignore[no-untyped-def]
        return lambda chosen: sum(c.footprint_blocks for c in chosen) >= at_least

    assert fewest_oldest(claims, frees(2)) == claims[:1]
    assert fewest_oldest(claims, frees(7)) == claims[:2]
    assert fewest_oldest(claims, frees(10)) == claims
    assert fewest_oldest(claims, frees(11)) is None  # all of them are not enough: relax none
    assert fewest_oldest([], frees(0)) is None
