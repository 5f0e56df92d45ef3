"""Routed reuse across a fleet, as one pure model (Porcupine style), composed beside `system`.

    init(engines) -> FleetState
    engine_step(state, engine, event, at) -> FleetState | Violation   (an engine's own stream)
    route_step(state, event, at) -> FleetState | Violation            (the router's stream)
    finish(state) -> Violation | None
    describe(state) -> str

A fleet is several engines, each with its own ordered trace stream (judged by `system` on its
own), and a router stream written by the routing hook: `route_decided` (which engine a reuse
of a claim went to, and the hit the router predicted there) and `route_reuse_reported` (what
that reuse came to). There is no global clock, so the rules are stated per claim and per
request, never by interleaving streams: an engine's stream says which claims it accepted and,
for each request it served, which claim's blocks it reused and whether the claim's predicate
held (`request_reused`, already judged against the claim's state by `system`). A caller folds
every engine stream with `engine_step`, then the router stream with `route_step`.

The rules (each violation names one `ConformanceRule`):

- `route_placement`: a claim is held on the engine that accepted it, and only one engine
  accepts a claim id.
- `route_attribution`: a routed claim's reuse is attributed to the engine that holds it: a
  report names the request, claim and engine of exactly one decision, and its delivered blocks
  are what that engine's stream attributes to the claim for the request (0 on an engine that
  does not hold it).
- `route_miss_reported`: a predicted hit that is not delivered is reported as a miss, never
  silent: every decision gets exactly one report, `delivered` exactly when the chosen engine
  holds the claim and its stream shows a satisfied reuse of at least the predicted blocks.

What the streams cannot decide is `Undecided` (the verdict is at best inconclusive): a decision
naming an engine with no stream, a claim no stream shows accepted, a request the chosen
engine's stream never mentions (a sequence gap: a restart, a lost or missing stream), and an
engine stream that reuses one claim twice for one request with different results.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvclaims.spec.vocabulary import ConformanceRule, RouteOutcome
from kvclaims.statemachine.system import Undecided, Violation

R = ConformanceRule

ACCEPTANCE_EVENTS: frozenset[str] = frozenset(
    {"resident_claim_accepted", "resident_claim_conditionally_accepted"}
)
"""Engine events after which the engine holds the claim (it is responsible for it)."""


@dataclass(frozen=True)
class Reuse:
    """What one engine's stream says a request reused of one claim."""

    cached_blocks: int
    predicate_satisfied: bool


@dataclass
class EngineView:
    """What one engine's stream says, for routing: the claims it accepted (with the position of
    the acceptance), the requests it mentions, and each request's reuse of a claim."""

    accepted: dict[str, int] = field(default_factory=dict)
    requests: set[str] = field(default_factory=set)
    reuses: dict[tuple[str, str], Reuse] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """A `route_decided` not yet reported."""

    claim_id: str
    engine: str
    predicted_hit_blocks: int
    at: int


@dataclass
class FleetState:
    """The engines' views, each claim's holder, pending decisions, and what stays undecided."""

    engines: dict[str, EngineView]
    holder: dict[str, str] = field(default_factory=dict)
    pending: dict[str, Decision] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    undecided: list[Undecided] = field(default_factory=list)
    outcomes: dict[RouteOutcome, int] = field(default_factory=lambda: dict.fromkeys(RouteOutcome, 0))


def init(engines: Iterable[str]) -> FleetState:
    """The state before any stream: the named engines, each with an empty view."""
    return FleetState({engine: EngineView() for engine in engines})


def _violation(
    rule: ConformanceRule,
    message: str,
    subject: str,
    state: str,
    allowed: tuple[str, ...],
    ids: Iterable[str],
    at: int,
    event: str,
) -> Violation:
    return Violation(rule, message, subject, state, allowed, frozenset(ids), at, event)


def engine_step(state: FleetState, engine: str, event: Any, at: int = 0) -> FleetState | Violation:
    """Fold one event of `engine`'s stream into its view (mutates and returns `state`): an
    acceptance makes the engine the claim's holder, unless another engine already is."""
    view = state.engines[engine]
    name = event.event
    request_id = getattr(event, "request_id", None)
    if request_id is not None:
        view.requests.add(request_id)
    if name in ACCEPTANCE_EVENTS:
        claim_id = event.claim_id
        holder = state.holder.setdefault(claim_id, engine)
        if holder != engine:
            return _violation(
                R.route_placement,
                f"claim {claim_id} accepted on engine {engine} while engine {holder} holds it: "
                "a claim is held on the one engine that accepted it",
                f"claim {claim_id}",
                f"held on {holder}",
                (f"a fresh claim id on {engine}",),
                (claim_id,),
                at,
                name,
            )
        view.accepted.setdefault(claim_id, at)
    elif name == "request_reused":
        key = (event.request_id, event.claim_id)
        reuse = Reuse(event.cached_blocks, event.predicate_satisfied)
        if view.reuses.setdefault(key, reuse) != reuse:
            state.undecided.append(
                Undecided(
                    f"engine {engine} reports two different reuses of claim {key[1]} by request "
                    f"{key[0]}: which one the route delivered is ambiguous",
                    at,
                )
            )
    return state


def route_step(state: FleetState, event: Any, at: int = 0) -> FleetState | Violation:
    """Judge one event of the router stream (mutates and returns `state`)."""
    if event.event == "route_decided":
        return _decided(state, event, at)
    if event.event == "route_reuse_reported":
        return _reported(state, event, at)
    return state  # trace_closed: not a step of the model


def _decided(state: FleetState, event: Any, at: int) -> FleetState | Violation:
    request_id = event.request_id
    if request_id in state.pending or request_id in state.reported:
        return _violation(
            R.route_attribution,
            f"request {request_id} routed twice: its reuse cannot be attributed to one decision",
            f"request {request_id}",
            "already routed",
            ("route_decided for a fresh request",),
            (request_id, event.claim_id),
            at,
            event.event,
        )
    if event.chosen_engine not in state.engines:
        state.undecided.append(
            Undecided(
                f"request {request_id} routed to engine {event.chosen_engine}, which has no stream here", at
            )
        )
    state.pending[request_id] = Decision(event.claim_id, event.chosen_engine, event.predicted_hit_blocks, at)
    return state


def _reported(state: FleetState, event: Any, at: int) -> FleetState | Violation:
    request_id, claim_id, engine = event.request_id, event.claim_id, event.engine
    decision = state.pending.pop(request_id, None)
    if decision is None or decision.claim_id != claim_id or decision.engine != engine:
        expected = (
            "no pending decision"
            if decision is None
            else f"decided: claim {decision.claim_id} on engine {decision.engine}"
        )
        return _violation(
            R.route_attribution,
            f"report of request {request_id} (claim {claim_id} on engine {engine}) matches no "
            f"pending decision ({expected})",
            f"request {request_id}",
            expected,
            ("route_reuse_reported naming its decision's request, claim and engine",),
            (request_id, claim_id),
            at,
            event.event,
        )
    state.reported.add(request_id)
    view = state.engines.get(engine)
    holder = state.holder.get(claim_id)
    if view is None:
        return state  # undecided since the decision (no stream for the engine)
    if holder is None:
        state.undecided.append(Undecided(f"claim {claim_id} is accepted on no engine's stream given", at))
        return state
    if request_id not in view.requests:
        state.undecided.append(
            Undecided(
                f"engine {engine}'s stream has no record of request {request_id}: a sequence gap "
                "(a restart, or a lost or missing stream)",
                at,
            )
        )
        return state
    reuse = reuse_of(state, engine, request_id, claim_id)
    expected_outcome = observed_outcome(state, request_id, claim_id, engine, decision.predicted_hit_blocks)
    if event.delivered_blocks != reuse.cached_blocks:
        return _violation(
            R.route_attribution,
            f"reported {event.delivered_blocks} blocks of claim {claim_id} delivered on engine "
            f"{engine}; its stream attributes {reuse.cached_blocks} to the claim for request {request_id}",
            f"request {request_id}",
            f"claim {claim_id} held on {holder}",
            (f"delivered_blocks {reuse.cached_blocks}",),
            (request_id, claim_id),
            at,
            event.event,
        )
    if event.outcome != expected_outcome:
        return _violation(
            R.route_miss_reported,
            f"routed reuse of claim {claim_id} by request {request_id} reported {event.outcome}, "
            f"but it was {expected_outcome} (held on {holder}, routed to {engine}, predicted "
            f"{decision.predicted_hit_blocks} blocks, served {reuse.cached_blocks}"
            f"{'' if reuse.predicate_satisfied else ', predicate not satisfied'})",
            f"request {request_id}",
            f"claim {claim_id} held on {holder}",
            (f"outcome {expected_outcome}",),
            (request_id, claim_id),
            at,
            event.event,
        )
    state.outcomes[expected_outcome] += 1
    return state


def reuse_of(state: FleetState, engine: str, request_id: str, claim_id: str) -> Reuse:
    """What `engine`'s stream attributes to `claim_id` for `request_id` (no blocks if nothing)."""
    view = state.engines.get(engine)
    return view.reuses.get((request_id, claim_id), Reuse(0, False)) if view else Reuse(0, False)


def observed_outcome(
    state: FleetState, request_id: str, claim_id: str, engine: str, predicted_hit_blocks: int
) -> RouteOutcome:
    """What the engines' streams say a routed reuse came to: `delivered` exactly when `engine`
    holds the claim and its stream shows a satisfied reuse of at least the predicted blocks."""
    reuse = reuse_of(state, engine, request_id, claim_id)
    delivered = (
        state.holder.get(claim_id) == engine
        and reuse.predicate_satisfied
        and reuse.cached_blocks >= predicted_hit_blocks
    )
    return RouteOutcome.delivered if delivered else RouteOutcome.missed


def finish(state: FleetState) -> Violation | None:
    """The end of the router stream: every decision is owed its report."""
    for request_id, decision in state.pending.items():
        return _violation(
            R.route_miss_reported,
            f"the routed reuse of claim {decision.claim_id} by request {request_id} on engine "
            f"{decision.engine} was never reported: a silent outcome",
            f"request {request_id}",
            f"routed at {decision.at}, unreported",
            ("route_reuse_reported before the end of the router stream",),
            (request_id, decision.claim_id),
            decision.at,
            "<end of trace>",
        )
    return None


def describe(state: FleetState) -> str:
    """A short human summary of the state."""
    held = ", ".join(f"{engine}: {len(view.accepted)}" for engine, view in sorted(state.engines.items()))
    return (
        f"engines {len(state.engines)} (claims accepted {held or 'none'}); routes: "
        f"{len(state.pending)} pending, {state.outcomes[RouteOutcome.delivered]} delivered, "
        f"{state.outcomes[RouteOutcome.missed]} missed; {len(state.undecided)} undecided"
    )
