"""The routing model on its own: engine facts folded per engine, the router stream judged
against them, no order assumed between streams."""

from __future__ import annotations

from kvclaims.spec.trace import (
    ActiveRequestAdmitted,
    RequestReused,
    ResidentClaimAccepted,
    RouteDecided,
    RouteOutcome,
    RouteReuseReported,
)
from kvclaims.spec.vocabulary import ConformanceRule as R
from kvclaims.statemachine import routing
from kvclaims.statemachine.system import Violation


def accepted(claim: str, seq: int = 0) -> ResidentClaimAccepted:
    return ResidentClaimAccepted(
        seq=seq,
        claim_id=claim,
        owner_scope="o",
        object_id="doc",
        mode="hard_protected",
        footprint_blocks=2,
        predicate={"kind": "leading_prefix_at_least", "blocks": 2},
    )


def fleet() -> routing.FleetState:
    """Engine A holds c1 and served r1 with 2 blocks; engine B served r2 (no claim)."""
    state = routing.init(["A", "B"])
    for engine, event in [
        ("A", accepted("c1")),
        ("A", ActiveRequestAdmitted(seq=1, request_id="r1", active_live_blocks=1)),
        (
            "A",
            RequestReused(seq=2, request_id="r1", claim_id="c1", cached_blocks=2, predicate_satisfied=True),
        ),
        ("B", ActiveRequestAdmitted(seq=0, request_id="r2", active_live_blocks=1)),
    ]:
        assert routing.engine_step(state, engine, event) is state
    return state


def decide(request: str, engine: str, predicted: int = 2, seq: int = 0) -> RouteDecided:
    return RouteDecided(
        seq=seq,
        request_id=request,
        claim_id="c1",
        candidate_engines=["A", "B"],
        chosen_engine=engine,
        predicted_hit_blocks=predicted,
    )


def report(request: str, engine: str, blocks: int, outcome: RouteOutcome, seq: int = 1) -> RouteReuseReported:
    return RouteReuseReported(
        seq=seq, request_id=request, claim_id="c1", engine=engine, delivered_blocks=blocks, outcome=outcome
    )


def test_the_engine_that_accepted_a_claim_holds_it() -> None:
    state = fleet()
    assert state.holder == {"c1": "A"}
    assert state.engines["A"].reuses[("r1", "c1")] == routing.Reuse(2, True)


def test_a_second_engine_accepting_the_claim_is_a_placement_violation() -> None:
    found = routing.engine_step(fleet(), "B", accepted("c1", seq=5), at=6)
    assert isinstance(found, Violation) and found.rule is R.route_placement and found.at == 6


def test_delivered_and_missed_routes_are_counted_and_owe_nothing() -> None:
    state = fleet()
    for event in [
        decide("r1", "A"),
        report("r1", "A", 2, RouteOutcome.delivered),
        decide("r2", "B", seq=2),
        report("r2", "B", 0, RouteOutcome.missed, seq=3),
    ]:
        assert routing.route_step(state, event) is state
    assert routing.finish(state) is None and state.undecided == []
    assert state.outcomes == {RouteOutcome.delivered: 1, RouteOutcome.missed: 1}
    assert "1 delivered, 1 missed" in routing.describe(state)


def test_a_silent_route_is_owed_at_the_end() -> None:
    state = fleet()
    routing.route_step(state, decide("r2", "B"), at=2)
    found = routing.finish(state)
    assert isinstance(found, Violation) and found.rule is R.route_miss_reported and found.at == 2


def test_a_gap_on_the_chosen_engine_is_undecided_not_a_verdict() -> None:
    state = fleet()
    routing.route_step(state, decide("r9", "B"))
    assert routing.route_step(state, report("r9", "B", 0, RouteOutcome.missed)) is state
    assert routing.finish(state) is None
    [undecided] = state.undecided
    assert undecided.message.startswith("engine B's stream has no record of request r9: a sequence gap")


def test_two_different_reuses_of_one_claim_by_one_request_are_undecided() -> None:
    state = fleet()
    again = RequestReused(seq=3, request_id="r1", claim_id="c1", cached_blocks=1, predicate_satisfied=False)
    assert routing.engine_step(state, "A", again, at=4) is state
    assert len(state.undecided) == 1 and state.undecided[0].at == 4
