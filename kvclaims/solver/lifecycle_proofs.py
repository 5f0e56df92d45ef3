"""Proof obligations about the claim lifecycle and the request lifecycle.

The claim system is one claim of any profile in `ALL_PROFILES`, stepping through the Z3
relation built from `TRANSITIONS`, with *history* variables that record what the trace has
said so far. The history is defined by events only (the property's own vocabulary), never by
the machine's phases, so each safety property relates the machine to an independent
specification. Safety is proved by Spacer (inductive invariant, re-checked by a plain solver);
reachability by BMC with every witness path replayed through the Python `step`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import z3

from kvclaims.solver.engines import (
    Inputs,
    State,
    Step,
    TransitionSystem,
    bmc,
    bmc_many,
    k_induction,
    spacer_invariant,
)
from kvclaims.solver.facts import Facts
from kvclaims.solver.lifecycle_model import (
    EVENTS,
    PHASES,
    PROFILES,
    REQUEST_EVENTS,
    REQUEST_PHASES,
    claim_step,
    event_in,
    guard_holds,
    profile_has,
    request_step,
    valid_profile,
)
from kvclaims.solver.proofs import Method, Outcome, ProofObligation
from kvclaims.solver.z3env import Job, all_of
from kvclaims.statemachine.lifecycle import INITIAL, TRANSITIONS, Event, Phase, Violation, step
from kvclaims.statemachine.requests import REQUEST_INITIAL, RequestEvent, RequestPhase, RequestViolation
from kvclaims.statemachine.requests import request_step as python_request_step

E = Event
HARM_EVENTS = frozenset({E.harm, E.fail_restoration_harm})
"""`resident_claim_harmed`, and `resident_claim_restoration_failed` with outcome harm."""
RESTORATION_FAILURES = frozenset(
    {
        E.fail_restoration_refusal,
        E.fail_restoration_demotion,
        E.fail_restoration_expiry,
        E.fail_restoration_harm,
    }
)


@dataclass(frozen=True)
class History:
    """A history variable: set by some events, cleared by others (`clear` may need a profile
    trait, e.g. a plain `restore` completes a restore only for one-key claims)."""

    sets: frozenset[Event]
    clears: frozenset[Event] = frozenset()
    clears_unless_two_key: frozenset[Event] = frozenset()


HISTORY: Mapping[str, History] = MappingProxyType(
    {
        "accepted": History(frozenset({E.accept})),
        "released": History(frozenset({E.release})),
        "demoted": History(frozenset({E.demote, E.fail_restoration_demotion})),
        "expired": History(frozenset({E.expire, E.fail_restoration_expiry})),
        "offloaded": History(frozenset({E.offload})),
        "restore_required_since_offload": History(
            frozenset({E.require_restore}), clears=frozenset({E.offload})
        ),
        "awaiting_restore": History(
            frozenset({E.offload}),
            clears=frozenset({E.restore_checkpoint_match}),
            clears_unless_two_key=frozenset({E.restore}),
        ),
    }
)
"""What the trace has said about the claim so far, defined by events alone."""


def claim_system(job: Job) -> TransitionSystem:
    """One claim with history; state: profile, phase, history flags; input: event."""
    int_sort, bool_sort = z3.IntSort(job.ctx), z3.BoolSort(job.ctx)
    names = list(HISTORY)

    def init(s: State) -> z3.BoolRef:
        return z3.And(valid_profile(s[0]), s[1] == PHASES.index(INITIAL), *[z3.Not(flag) for flag in s[2:]])

    def trans(s: State, i: Inputs, t: State) -> z3.BoolRef:
        profile, phase, event = s[0], s[1], i[0]
        moved = claim_step(profile, phase, event)
        two_key = profile_has(profile, "two_key")
        updates = []
        for index, name in enumerate(names):
            history, now, after = HISTORY[name], s[2 + index], t[2 + index]
            cleared = z3.Or(
                event_in(event, history.clears),
                z3.And(event_in(event, history.clears_unless_two_key), z3.Not(two_key)),
            )
            updates.append(after == z3.If(event_in(event, history.sets), True, z3.If(cleared, False, now)))
        return z3.And(
            valid_profile(profile),
            event >= 0,
            event < len(EVENTS),
            moved.legal,
            t[0] == profile,
            t[1] == moved.target,
            *updates,
        )

    return TransitionSystem(
        job,
        [("profile", int_sort), ("phase", int_sort), *[(name, bool_sort) for name in names]],
        [("event", int_sort)],
        init,
        trans,
    )


def _flag(s: State, name: str) -> z3.BoolRef:
    return s[2 + list(HISTORY).index(name)]


def _legal(s: State, i: Inputs) -> z3.BoolRef:
    return z3.And(valid_profile(s[0]), claim_step(s[0], s[1], i[0]).legal)


def _path_json(path: list[Step]) -> dict[str, Any]:
    profile = PROFILES[int(path[0].state["profile"])]
    return {
        "profile": {
            "preserving": profile.preserving,
            "offloadable": profile.offloadable,
            "two_key": profile.two_key,
        },
        "events": [EVENTS[int(s.inputs["event"])].value for s in path],
    }


def _safety(bad: Callable[[State, Inputs], z3.BoolRef]) -> Callable[[Job, Facts], Outcome]:
    def check(job: Job, facts: Facts) -> Outcome:
        result = spacer_invariant(claim_system(job), bad)
        detail: dict[str, Any] = {
            "history": {n: sorted(e.value for e in h.sets) for n, h in HISTORY.items()},
            "invariant": result.invariant,
            "invariant_rechecked": result.rechecked,
        }
        if result.counterexample is not None:
            detail["counterexample"] = _path_json(result.counterexample)
        return Outcome(result.holds, detail)

    return check


def _harm_only_accepted_unreleased(s: State, i: Inputs) -> z3.BoolRef:
    responsible = z3.And(_flag(s, "accepted"), z3.Not(_flag(s, "released")), profile_has(s[0], "preserving"))
    return z3.And(event_in(i[0], HARM_EVENTS), _legal(s, i), z3.Not(responsible))


def _harm_after_demotion_or_expiry(s: State, i: Inputs) -> z3.BoolRef:
    return z3.And(event_in(i[0], HARM_EVENTS), _legal(s, i), z3.Or(_flag(s, "demoted"), _flag(s, "expired")))


def _failure_without_restore_required(s: State, i: Inputs) -> z3.BoolRef:
    restorable = z3.Or(_flag(s, "offloaded"), profile_has(s[0], "two_key"))
    refusable = z3.Or(i[0] != EVENTS.index(E.fail_restoration_refusal), _flag(s, "awaiting_restore"))
    ordered = z3.And(_flag(s, "accepted"), _flag(s, "restore_required_since_offload"), restorable, refusable)
    return z3.And(event_in(i[0], RESTORATION_FAILURES), _legal(s, i), z3.Not(ordered))


def _blocking_without_responsibility(s: State, i: Inputs) -> z3.BoolRef:
    relaxed = z3.Or(_flag(s, "released"), _flag(s, "demoted"), _flag(s, "expired"))
    responsible = z3.And(_flag(s, "accepted"), z3.Not(relaxed), profile_has(s[0], "preserving"))
    return z3.And(i[0] == EVENTS.index(E.block), _legal(s, i), z3.Not(responsible))


def _satisfied_reuse_before_restore(s: State, i: Inputs) -> z3.BoolRef:
    relaxed = z3.Or(_flag(s, "released"), _flag(s, "demoted"), _flag(s, "expired"))
    pending = z3.And(_flag(s, "awaiting_restore"), z3.Not(relaxed))
    return z3.And(i[0] == EVENTS.index(E.reuse_satisfied), _legal(s, i), pending)


# --- reachability ------------------------------------------------------------------------------

REACH_BOUND = 10
"""BMC bound (events) for lifecycle reachability witnesses."""


def _replay(path: dict[str, Any]) -> Phase | Violation:
    profile = next(
        p for p in PROFILES if (p.preserving, p.offloadable, p.two_key) == tuple(path["profile"].values())
    )
    phase: Phase | Violation = INITIAL
    for event in path["events"]:
        assert isinstance(phase, Phase)
        phase = step(profile, phase, Event(event))
        if isinstance(phase, Violation):
            return phase
    return phase


def _every_phase_reachable(job: Job, facts: Facts) -> Outcome:
    def reaches(phase: Phase) -> Callable[[State, Inputs], z3.BoolRef]:
        return lambda s, i: z3.And(_legal(s, i), claim_step(s[0], s[1], i[0]).target == PHASES.index(phase))

    phases = [p for p in PHASES if p is not INITIAL]
    paths = bmc_many(claim_system(job), {p.value: reaches(p) for p in phases}, REACH_BOUND)
    witnesses = []
    for phase in phases:
        entry: dict[str, Any] = {"phase": phase.value, "reported_as": (phase.claim_state or "—")}
        path = paths[phase.value]
        if path is None:
            witnesses.append(entry | {"found": False})
            continue
        found = _path_json(path)
        witnesses.append(entry | {"found": True, "python_replay_agrees": _replay(found) is phase} | found)
    proved = all(w["found"] and w["python_replay_agrees"] for w in witnesses)
    return Outcome(proved, {"bound_events": REACH_BOUND, "witnesses": witnesses})


def _every_transition_fires(job: Job, facts: Facts) -> Outcome:
    def fires(index: int) -> Callable[[State, Inputs], z3.BoolRef]:
        transition = TRANSITIONS[index]
        earlier = [
            t for t in TRANSITIONS[:index] if (t.source, t.event) == (transition.source, transition.event)
        ]
        return lambda s, i: z3.And(
            valid_profile(s[0]),
            s[1] == PHASES.index(transition.source),
            i[0] == EVENTS.index(transition.event),
            guard_holds(s[0], transition.guard),
            *[z3.Not(guard_holds(s[0], t.guard)) for t in earlier],
        )

    paths = bmc_many(claim_system(job), {str(i): fires(i) for i in range(len(TRANSITIONS))}, REACH_BOUND)
    rows = []
    for index, transition in enumerate(TRANSITIONS):
        target = transition.target or transition.source
        row: dict[str, Any] = {
            "source": transition.source.value,
            "event": transition.event.value,
            "target": target.value,
            "guard": transition.guard.value,
        }
        path = paths[str(index)]
        if path is None:
            rows.append(row | {"fires": False})
            continue
        found = _path_json(path)
        rows.append(row | {"fires": True, "python_replay_agrees": _replay(found) is target} | found)
    proved = all(r["fires"] and r["python_replay_agrees"] for r in rows)
    return Outcome(proved, {"bound_events": REACH_BOUND, "transitions": rows})


# --- the request machine -----------------------------------------------------------------------


def request_system(job: Job) -> TransitionSystem:
    """One request with a `finished` history flag; input: request event."""
    int_sort, bool_sort = z3.IntSort(job.ctx), z3.BoolSort(job.ctx)

    def init(s: State) -> z3.BoolRef:
        return z3.And(s[0] == REQUEST_PHASES.index(REQUEST_INITIAL), z3.Not(s[1]))

    def trans(s: State, i: Inputs, t: State) -> z3.BoolRef:
        moved = request_step(s[0], i[0])
        finished = i[0] == REQUEST_EVENTS.index(RequestEvent.finish)
        return z3.And(moved.legal, t[0] == moved.target, t[1] == z3.Or(s[1], finished))

    return TransitionSystem(
        job, [("phase", int_sort), ("finished", bool_sort)], [("event", int_sort)], init, trans
    )


def _request_safety(event: RequestEvent | None) -> Callable[[Job, Facts], Outcome]:
    def check(job: Job, facts: Facts) -> Outcome:
        def bad(s: State, i: Inputs) -> z3.BoolRef:
            legal = request_step(s[0], i[0]).legal
            chosen = [] if event is None else [i[0] == REQUEST_EVENTS.index(event)]
            return all_of(job.ctx, [s[1], legal, *chosen])

        result = k_induction(request_system(job), bad)
        detail: dict[str, Any] = {"k": result.k, "simple_paths": True}
        if result.counterexample is not None:
            detail["counterexample"] = [
                REQUEST_EVENTS[int(s.inputs["event"])].value for s in result.counterexample
            ]
        return Outcome(result.holds, detail)

    return check


def _every_request_phase_reachable(job: Job, facts: Facts) -> Outcome:
    system = request_system(job)
    witnesses = []
    for phase in REQUEST_PHASES:
        if phase is REQUEST_INITIAL:
            continue

        def reached(s: State, i: Inputs, phase: RequestPhase = phase) -> z3.BoolRef:
            moved = request_step(s[0], i[0])
            return z3.And(moved.legal, moved.target == REQUEST_PHASES.index(phase))

        path = bmc(system, reached, REACH_BOUND)
        if path is None:
            witnesses.append({"phase": phase.value, "found": False})
            continue
        events = [REQUEST_EVENTS[int(s.inputs["event"])] for s in path]
        current: RequestPhase | RequestViolation = REQUEST_INITIAL
        for event in events:
            assert isinstance(current, RequestPhase)
            current = python_request_step(current, event)
        witnesses.append(
            {
                "phase": phase.value,
                "found": True,
                "python_replay_agrees": current is phase,
                "events": [e.value for e in events],
            }
        )
    proved = all(w["found"] and w["python_replay_agrees"] for w in witnesses)
    return Outcome(proved, {"bound_events": REACH_BOUND, "witnesses": witnesses})


OBLIGATIONS: tuple[ProofObligation, ...] = (
    ProofObligation(
        "lifecycle.harm_only_for_accepted_unreleased_claims",
        "A harm event (resident_claim_harmed, or a restoration failure with outcome harm) is "
        "legal only for a claim that was accepted earlier, has not been released, and whose "
        "mode carries a preservation obligation.",
        Method.spacer_invariant,
        _safety(_harm_only_accepted_unreleased),
    ),
    ProofObligation(
        "lifecycle.no_harm_after_demotion_or_expiry",
        "After a claim was demoted or expired (directly, or as the outcome of a failed "
        "restoration) no harm event is legal for it: later loss is post-release loss.",
        Method.spacer_invariant,
        _safety(_harm_after_demotion_or_expiry),
    ),
    ProofObligation(
        "lifecycle.restoration_failed_only_after_restore_required",
        "resident_claim_restoration_failed (any outcome) is legal for a claim only after that "
        "claim was accepted and a restore_required for it came after its most recent offload "
        "(if any): a one-key claim needs a prior offload, a two-key claim a prior offload or an "
        "in-place checkpoint restore (seed 002); outcome refusal needs an offload not yet "
        "restored (a failed in-place restore has no other tier to refuse back to).",
        Method.spacer_invariant,
        _safety(_failure_without_restore_required),
    ),
    ProofObligation(
        "lifecycle.blocking_ids_name_only_responsible_claims",
        "A claim may be named in blocking_claim_ids only if it was accepted, has not been "
        "released, demoted or expired, and its mode carries a preservation obligation.",
        Method.spacer_invariant,
        _safety(_blocking_without_responsibility),
    ),
    ProofObligation(
        "lifecycle.restore_before_satisfied_reuse",
        "While an offloaded claim is still the runtime's responsibility (not released, demoted "
        "or expired), a satisfied reuse of it is legal only after a completed restore since the "
        "offload (a restored event for one-key claims, a matching checkpoint for two-key ones).",
        Method.spacer_invariant,
        _safety(_satisfied_reuse_before_restore),
    ),
    ProofObligation(
        "lifecycle.every_phase_reachable",
        "Every lifecycle phase (hence every claim state of DESIGN 2.1) is reachable from absent "
        "by legal events, within the BMC bound; each witness is replayed by the Python step.",
        Method.bmc,
        _every_phase_reachable,
    ),
    ProofObligation(
        "lifecycle.every_transition_fires",
        "Every row of the transition table is the transition step takes on some reachable "
        "(profile, phase, event), within the BMC bound: the table has no dead or shadowed row.",
        Method.bmc,
        _every_transition_fires,
    ),
    ProofObligation(
        "requests.no_restoration_refusal_after_finish",
        "A refusal for a failed restoration is never legal after the request finished (it must "
        "reach the request before request_finished).",
        Method.k_induction,
        _request_safety(RequestEvent.refuse_restoration),
    ),
    ProofObligation(
        "requests.nothing_after_finish",
        "No request event is legal after the request finished (a finished request id is never reused).",
        Method.k_induction,
        _request_safety(None),
    ),
    ProofObligation(
        "requests.every_phase_reachable",
        "Every request phase is reachable from absent within the BMC bound; each witness is "
        "replayed by the Python request_step.",
        Method.bmc,
        _every_request_phase_reachable,
    ),
)
