"""The claim lifecycle and the request lifecycle as Z3 transition relations.

Both are built from the Python tables, never restated: the claim relation iterates
`kvclaims.statemachine.lifecycle.TRANSITIONS` in order (so the first admitted transition wins,
exactly like `step`), and a guard holds for a profile iff `ClaimProfile.admits` says so for that
member of `ALL_PROFILES`. The request relation iterates `REQUEST_TRANSITIONS`.

Encoding: a claim profile is an index into `ALL_PROFILES`, a phase an index into `PHASES`, an
event an index into `EVENTS` (integers keep the Spacer/CHC encoding in linear arithmetic).
`claim_step(...)` returns `(legal, target)`; `target` is meaningful only where `legal` holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from kvclaims.solver.terms import Terms
from kvclaims.solver.z3env import any_of
from kvclaims.statemachine.lifecycle import ALL_PROFILES, TRANSITIONS, ClaimProfile, Event, Guard, Phase
from kvclaims.statemachine.requests import REQUEST_TRANSITIONS, RequestEvent, RequestPhase

PHASES: tuple[Phase, ...] = tuple(Phase)
EVENTS: tuple[Event, ...] = tuple(Event)
PROFILES: tuple[ClaimProfile, ...] = ALL_PROFILES
REQUEST_PHASES: tuple[RequestPhase, ...] = tuple(RequestPhase)
REQUEST_EVENTS: tuple[RequestEvent, ...] = tuple(RequestEvent)


def profile_has(profile: z3.ArithRef, trait: str) -> z3.BoolRef:
    """`profile` is a member of `ALL_PROFILES` whose boolean `trait` is true."""
    ctx = profile.ctx
    return any_of(ctx, [profile == i for i, p in enumerate(PROFILES) if getattr(p, trait)])


def guard_holds(profile: z3.ArithRef, guard: Guard) -> z3.BoolRef:
    """`profile` admits `guard`, as decided by `ClaimProfile.admits` for each profile."""
    return any_of(profile.ctx, [profile == i for i in admitting(guard)])


def admitting(guard: Guard) -> list[int]:
    """The indices of the profiles that admit `guard`."""
    return [i for i, p in enumerate(PROFILES) if p.admits(guard)]


def valid_profile(profile: z3.ArithRef) -> z3.BoolRef:
    return z3.And(profile >= 0, profile < len(PROFILES))


@dataclass(frozen=True)
class ClaimStep:
    """The claim relation at one step: is `event` legal from `phase`, and where it leads."""

    legal: z3.BoolRef
    target: z3.ArithRef


def claim_step(profile: z3.ArithRef, phase: z3.ArithRef, event: z3.ArithRef) -> ClaimStep:
    """`step(profile, phase, event)` of the Python machine, as Z3 terms (built by `Terms`: the
    terms z3py's operators build, faster; the BMC proofs build this relation once per step)."""
    t = Terms(phase.ctx)
    try:
        profile_, phase_, event_ = profile.as_ast(), phase.as_ast(), event.as_ast()
        legal_terms = []
        target = phase_
        for transition in reversed(TRANSITIONS):
            source = t.eq(phase_, PHASES.index(transition.source))
            on = t.eq(event_, EVENTS.index(transition.event))
            admitted = t.any_of([t.eq(profile_, i) for i in admitting(transition.guard)])
            fires = t.and_([source, on, admitted])
            legal_terms.append(fires)
            goes_to = phase_ if transition.target is None else t.num(PHASES.index(transition.target))
            target = t.ite(fires, goes_to, target)
        return ClaimStep(t.bool_ref(t.any_of(legal_terms)), t.int_ref(target))
    finally:
        t.release()


def claim_step_for(profile: ClaimProfile, phase: z3.ArithRef, event: Event) -> ClaimStep:
    """`claim_step` specialised to a known profile and event: the same table rows in the
    same order, with the guard and the event decided in Python (a far smaller term)."""
    ctx = phase.ctx
    rows = [t for t in TRANSITIONS if t.event is event and profile.admits(t.guard)]
    legal_terms = []
    target: z3.ArithRef = phase
    for transition in reversed(rows):
        fires = phase == PHASES.index(transition.source)
        legal_terms.append(fires)
        goes_to = phase if transition.target is None else z3.IntVal(PHASES.index(transition.target), ctx)
        target = z3.If(fires, goes_to, target)
    return ClaimStep(any_of(ctx, legal_terms), target)


@dataclass(frozen=True)
class RequestStep:
    legal: z3.BoolRef
    target: z3.ArithRef


def request_step(phase: z3.ArithRef, event: z3.ArithRef) -> RequestStep:
    """`request_step(phase, event)` of the Python request machine, as Z3 terms."""
    ctx = phase.ctx
    legal_terms = []
    target: z3.ArithRef = phase
    for (source, on), goes in REQUEST_TRANSITIONS.items():
        fires = z3.And(phase == REQUEST_PHASES.index(source), event == REQUEST_EVENTS.index(on))
        legal_terms.append(fires)
        target = z3.If(fires, z3.IntVal(REQUEST_PHASES.index(goes), ctx), target)
    return RequestStep(any_of(ctx, legal_terms), target)


def event_in(event: z3.ArithRef, events: frozenset[Event] | set[Event]) -> z3.BoolRef:
    return any_of(event.ctx, [event == EVENTS.index(e) for e in sorted(events)])
