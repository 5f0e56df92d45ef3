"""Proof obligations for the refinement rules that judge more than the lifecycle: terms,
capacity_state, duration, block_identity and confirmed restores (DESIGN 4, issue 12).

Each rule is encoded as a small Z3 model (a transition system, or one refusal's numbers) next
to a *history* or conclusion stated in the property's own vocabulary, and each obligation
reports three things, all of which must hold for `proved`:

- the property, proved for every history (Spacer invariant, re-checked) or every assignment
  (validity);
- a *vacuity witness*: the property's antecedent is satisfiable (a shortest path or a small
  model), decoded into a trace v1 history and replayed through the real system model
  (`kvclaims.statemachine.system`), which must accept it;
- *the rule is load-bearing*: without the rule's guard the same property has a
  counterexample, and that counterexample, replayed the same way, is rejected by the system
  model with exactly that rule (or, where the rule turns the step into a loss, the replay
  shows the loss).

The replays tie each Z3 encoding to the Python model: an encoding that drifted from
`system.py` would fail its own witness or counterexample replay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import z3

from kvclaims.solver.capacity_model import CAPACITY_FIELDS, CapacityTerms, capacity_checks
from kvclaims.solver.engines import (
    Inputs,
    State,
    Step,
    TransitionSystem,
    bmc,
    bmc_many,
    prove_valid,
    spacer_invariant,
)
from kvclaims.solver.facts import Facts
from kvclaims.solver.lifecycle_model import EVENTS, PHASES, PROFILES, event_in, guard_holds
from kvclaims.solver.proofs import Method, Outcome, ProofObligation
from kvclaims.solver.z3env import Job, any_of, decided
from kvclaims.spec.tables import PRESERVING_MODES
from kvclaims.spec.trace import EVENT_MODELS, TraceHeader
from kvclaims.spec.vocabulary import NS_PER_MS, ConformanceRule, ProtectionMode
from kvclaims.statemachine import system
from kvclaims.statemachine.lifecycle import INITIAL, TRANSITIONS, ClaimProfile, Event, Phase

E, R = Event, ConformanceRule


def _one_mode_per_profile() -> tuple[ProtectionMode, ...]:
    first: dict[ClaimProfile, ProtectionMode] = {}
    for mode in ProtectionMode:
        first.setdefault(ClaimProfile.of(mode), mode)
    return tuple(first.values())


MODES: tuple[ProtectionMode, ...] = _one_mode_per_profile()
"""One mode per one-key claim profile (the first in `ProtectionMode` order): the lifecycle
depends on the profile alone, so the terms system compares these representatives (a sound
abstraction: it also lets a plain acceptance change a mode within one profile)."""
BOUND = 8
"""BMC bound (steps) for witnesses and counterexamples."""
RELAXING = frozenset({E.demote, E.expire, E.release, E.fail_restoration_demotion, E.fail_restoration_expiry})
"""Events after which responsibility ended (demoted, expired or released)."""


# --- replaying a decoded history through the system model --------------------------------------


@dataclass(frozen=True)
class Replay:
    """What the system model said about a decoded history."""

    events: list[dict[str, Any]]
    rule: ConformanceRule | None
    """The violated rule (None: accepted)."""
    position: int | None
    """The 1-based event the violation is at (None: accepted, 0: at the end)."""
    state: system.SystemState | None
    """The state after the last event (only when every event was accepted)."""

    def json(self) -> dict[str, Any]:
        verdict = "accepted" if self.rule is None else f"rejected: {self.rule} at event {self.position}"
        return {"events": [_brief(e) for e in self.events], "system_model": verdict}


def replay(events: list[dict[str, Any]], usable_blocks: int | None = None) -> Replay:
    """Step trace v1 events (validated by their pydantic models) through the system model."""
    header = TraceHeader(kvclaims_trace=1, usable_blocks=usable_blocks, block_size=16)
    state = system.init(header)
    numbered = [{"seq": k, **event} for k, event in enumerate(events, start=1)]
    for k, fields in enumerate(numbered, start=1):
        after = system.step(state, EVENT_MODELS[fields["event"]].model_validate(fields), k)
        if isinstance(after, system.Violation):
            return Replay(numbered, after.rule, k, None)
    end = system.finish(state)
    if end is not None:
        return Replay(numbered, end.rule, 0, None)
    return Replay(numbered, None, None, state)


def _brief(event: dict[str, Any]) -> str:
    shown = {k: v for k, v in event.items() if k not in {"seq", "event", "owner_scope", "object_id"}}
    return f"{event['event']} {shown}"


def _terms(claim: str, mode: ProtectionMode, footprint: int, **extra: Any) -> dict[str, Any]:
    predicate = extra.pop("predicate", {"kind": "leading_prefix_at_least", "blocks": footprint})
    return {
        "claim_id": claim,
        "owner_scope": "tenant",
        "object_id": f"prefix-{claim}",
        "mode": mode.value,
        "footprint_blocks": footprint,
        "predicate": predicate,
        **extra,
    }


def _event_name(path: list[Step], k: int) -> Event | None:
    """The lifecycle event step `k` took (None for an index outside `EVENTS`)."""
    index = int(path[k].inputs["event"])
    return EVENTS[index] if 0 <= index < len(EVENTS) else None


class Unreplayable(ValueError):
    """A decoded path took a step the replay cannot write as trace v1 (the obligation fails)."""


def _lifecycle(
    profile: ClaimProfile | z3.ArithRef, phase: z3.ArithRef, event: z3.ArithRef, alphabet: tuple[Event, ...]
) -> tuple[z3.BoolRef, z3.ArithRef]:
    """`lifecycle.step` over `alphabet` (the same `TRANSITIONS` rows in order, the first
    admitted wins): is `event` legal from `phase`, and where it leads. `profile` is a known
    profile or a Z3 index into `PROFILES`."""
    ctx = phase.ctx
    legal: list[z3.BoolRef] = []
    target: z3.ArithRef = phase
    for transition in reversed([t for t in TRANSITIONS if t.event in alphabet]):
        admits = (
            z3.BoolVal(profile.admits(transition.guard), ctx)
            if isinstance(profile, ClaimProfile)
            else guard_holds(profile, transition.guard)
        )
        fires = z3.And(
            phase == PHASES.index(transition.source), event == EVENTS.index(transition.event), admits
        )
        legal.append(fires)
        goes_to = phase if transition.target is None else z3.IntVal(PHASES.index(transition.target), ctx)
        target = z3.If(fires, goes_to, target)
    return any_of(ctx, legal), target


# --- shared: the three parts of every outcome ---------------------------------------------------

History = tuple[list[dict[str, Any]], int | None]
"""Trace v1 events (without `seq`) and the header's `usable_blocks`."""
Writer = Callable[[Any], History]
"""Decodes a found path or model into a history (raises `Unreplayable`)."""
Expect = Callable[[Replay], bool]


def accepted(result: Replay) -> bool:
    return result.rule is None


def rejected_with(rule: ConformanceRule) -> Expect:
    return lambda result: result.rule is rule


def _outcome(
    holds: bool,
    proof: dict[str, Any],
    *,
    witnesses: Mapping[str, tuple[Any, Writer, Expect]],
    without: Mapping[str, tuple[Any, Writer, Expect]],
) -> Outcome:
    """`proved` iff the property holds, every vacuity witness was found and its replay is
    accepted (and as expected), and so is the replay of each counterexample found without a
    guard of the rule (`without`: guard -> counterexample)."""
    detail: dict[str, Any] = {**proof, "vacuity_witnesses": {}, "without_the_rule": {}}
    ok = holds
    for name, (found, write, expect) in witnesses.items():
        entry, as_expected = _replayed(found, write, expect, must_accept=True)
        detail["vacuity_witnesses"][name] = entry
        ok = ok and as_expected
    for guard, (found, write, expect) in without.items():
        entry, as_expected = _replayed(found, write, expect, must_accept=False)
        detail["without_the_rule"][guard] = entry
        ok = ok and as_expected
    return Outcome(ok, detail)


def _replayed(found: Any, write: Writer, expect: Expect, *, must_accept: bool) -> tuple[dict[str, Any], bool]:
    if found is None:
        return {"found": False}, False
    try:
        events, usable_blocks = write(found)
    except Unreplayable as problem:
        return {"found": True, "replayed": False, "reason": str(problem)}, False
    result = replay(events, usable_blocks)
    as_expected = (accepted(result) or not must_accept) and expect(result)
    header = {} if usable_blocks is None else {"usable_blocks": usable_blocks}
    return {"found": True, **header, **result.json(), "as_expected": as_expected}, as_expected


Stepper = Callable[[State, Inputs], tuple[z3.BoolRef, list[z3.ExprRef]]]
"""A rule encoding's step: is the input legal in the state, and the state after it."""


def _stepped(
    job: Job,
    state: tuple[tuple[str, bool], ...],
    inputs: tuple[str, ...],
    init: Callable[[State], z3.BoolRef],
    step: Stepper,
) -> TransitionSystem:
    """The transition system of `step` (state variables: name and whether boolean; integer
    inputs): a transition is a legal input and its successor state."""
    int_sort, bool_sort = z3.IntSort(job.ctx), z3.BoolSort(job.ctx)

    def trans(s: State, i: Inputs, t: State) -> z3.BoolRef:
        legal, after = step(s, i)
        return z3.And(legal, *[x == y for x, y in zip(t, after, strict=True)])

    return TransitionSystem(
        job,
        [(name, bool_sort if boolean else int_sort) for name, boolean in state],
        [(name, int_sort) for name in inputs],
        init,
        trans,
    )


# --- terms: a plain acceptance keeps the submitted terms ----------------------------------------

_CONDITIONAL = len(EVENTS)
"""The terms system's extra event: `resident_claim_conditionally_accepted`."""
_TERMS_STATE = (
    ("phase", False),
    ("mode", False),
    ("submitted", False),
    ("conditional", True),
    ("relaxed", True),
)
_TERMS_EVENTS = (
    E.submit,
    E.accept,
    E.reject,
    E.materialize,
    E.predicate_broken,
    E.harm,
    E.lose,
    E.demote,
    E.expire,
    E.release,
)
"""The terms system's lifecycle alphabet (and the conditional acceptance)."""


def _profile_of(mode: z3.ArithRef) -> z3.ArithRef:
    """The one-key profile (index into `PROFILES`) of a mode index."""
    ctx = mode.ctx
    result: z3.ArithRef = z3.IntVal(PROFILES.index(ClaimProfile.of(ProtectionMode.best_effort)), ctx)
    for k, m in enumerate(MODES):
        result = z3.If(mode == k, z3.IntVal(PROFILES.index(ClaimProfile.of(m)), ctx), result)
    return result


def _preserving_mode(mode: z3.ArithRef) -> z3.BoolRef:
    return any_of(mode.ctx, [mode == k for k, m in enumerate(MODES) if m in PRESERVING_MODES])


def _terms_step(s: State, i: Inputs, with_rule: bool) -> tuple[z3.BoolRef, list[z3.ExprRef]]:
    phase, mode, submitted, conditional, relaxed = s
    event, argument = i
    ctx = phase.ctx
    deciding = z3.Or(event_in(event, {E.submit, E.accept}), event == _CONDITIONAL)
    as_event = z3.If(event == _CONDITIONAL, z3.IntVal(EVENTS.index(E.accept), ctx), event)
    moved_legal, moved_target = _lifecycle(
        _profile_of(z3.If(deciding, argument, mode)), phase, as_event, _TERMS_EVENTS
    )
    from_submitted = phase == PHASES.index(Phase.submitted)
    rules = [z3.Implies(event == _CONDITIONAL, from_submitted)]
    if with_rule:  # R.terms: a plain acceptance of a submitted claim repeats its terms
        rules.append(
            z3.Implies(z3.And(event == EVENTS.index(E.accept), from_submitted), argument == submitted)
        )
    legal = z3.And(argument >= 0, argument < len(MODES), moved_legal, *rules)
    after = [
        moved_target,
        z3.If(deciding, argument, mode),
        z3.If(event == EVENTS.index(E.submit), argument, submitted),
        z3.Or(conditional, event == _CONDITIONAL),
        z3.Or(relaxed, event_in(event, RELAXING)),
    ]
    return legal, after


def _terms_system(job: Job, with_rule: bool) -> TransitionSystem:
    def init(s: State) -> z3.BoolRef:
        return z3.And(s[0] == PHASES.index(INITIAL), s[1] == -1, s[2] == -1, z3.Not(s[3]), z3.Not(s[4]))

    return _stepped(job, _TERMS_STATE, ("event", "mode"), init, partial(_terms_step, with_rule=with_rule))


def _submitted_preserving_plainly(s: State) -> z3.BoolRef:
    return z3.And(_preserving_mode(s[2]), z3.Not(s[3]), z3.Not(s[4]))


def _laundered_loss(with_rule: bool) -> Callable[[State, Inputs], z3.BoolRef]:
    def bad(s: State, i: Inputs) -> z3.BoolRef:
        legal, _ = _terms_step(s, i, with_rule)
        return z3.And(i[0] == EVENTS.index(E.lose), legal, _submitted_preserving_plainly(s))

    return bad


def _terms_events(path: list[Step]) -> History:
    events = []
    for k, step in enumerate(path):
        mode = MODES[int(step.inputs["mode"])]
        if int(step.inputs["event"]) == _CONDITIONAL:
            events.append({"event": "resident_claim_conditionally_accepted", **_terms("claim-a", mode, 2)})
            continue
        event = _event_name(path, k)
        simple = {
            E.submit: {"event": "resident_claim_submitted", **_terms("claim-a", mode, 2)},
            E.accept: {"event": "resident_claim_accepted", **_terms("claim-a", mode, 2)},
            E.materialize: {
                "event": "resident_claim_materialized",
                "claim_id": "claim-a",
                "leading_blocks": 2,
            },
            E.lose: {"event": "resident_claim_lost", "claim_id": "claim-a", "leading_blocks": 0},
        }
        if event not in simple:
            raise Unreplayable(f"no trace event for {event}")
        events.append(simple[event])  # type: ignore[index]
    return events, None


def _terms_obligation(job: Job, facts: Facts) -> Outcome:
    proof = spacer_invariant(_terms_system(job, True), _laundered_loss(True))

    def into(condition: Callable[[list[z3.ExprRef]], z3.BoolRef]) -> Callable[[State, Inputs], z3.BoolRef]:
        def target(s: State, i: Inputs) -> z3.BoolRef:
            legal, after = _terms_step(s, i, True)
            return z3.And(legal, condition(after))

        return target

    witnesses = bmc_many(
        _terms_system(job, True),
        {
            "submitted_preserving_plainly_accepted_materialized": into(
                lambda t: z3.And(_submitted_preserving_plainly(t), t[0] == PHASES.index(Phase.materialized))
            ),
            "conditional_downgrade_then_loss": lambda s, i: z3.And(
                _terms_step(s, i, True)[0], i[0] == EVENTS.index(E.lose), _preserving_mode(s[2]), s[3]
            ),
        },
        BOUND,
    )
    hard = MODES.index(ProtectionMode.hard_protected)
    without = bmc(
        _terms_system(job, False), lambda s, i: z3.And(_laundered_loss(False)(s, i), s[2] == hard), BOUND
    )
    return _outcome(
        proof.holds,
        {"invariant": proof.invariant, "invariant_rechecked": proof.rechecked},
        witnesses={name: (path, _terms_events, accepted) for name, path in witnesses.items()},
        without={"plain_acceptance_repeats_terms": (without, _terms_events, rejected_with(R.terms))},
    )


# --- capacity_state: a refusal is justified by what the claims reserve --------------------------

_CLAIMS = ("claim-a", "claim-b")


@dataclass(frozen=True)
class _Pool:
    """Two claims (footprint, preserving, reserving device blocks, blamed) and one capacity
    refusal's numbers, as Z3 terms."""

    footprint: tuple[z3.ArithRef, ...]
    preserving: tuple[z3.BoolRef, ...]
    reserving: tuple[z3.BoolRef, ...]
    blamed: tuple[z3.BoolRef, ...]
    refusal: CapacityTerms

    @classmethod
    def fresh(cls, job: Job) -> _Pool:
        return cls(
            tuple(job.int(f"{c}.footprint") for c in _CLAIMS),
            tuple(job.bool(f"{c}.preserving") for c in _CLAIMS),
            tuple(job.bool(f"{c}.reserving") for c in _CLAIMS),
            tuple(job.bool(f"{c}.blamed") for c in _CLAIMS),
            CapacityTerms.fresh(job, "refusal", with_header=True),
        )

    def reserved(self) -> z3.ArithRef:
        """What the preserving claims reserve in the device pool (system.RESERVING phases)."""
        return z3.Sum(
            [
                z3.If(z3.And(p, r), f, 0)
                for f, p, r in zip(self.footprint, self.preserving, self.reserving, strict=True)
            ]
        )

    def well_formed(self) -> z3.BoolRef:
        """Footprints >= 1, numbers >= 0, a capacity reason, blamed claims are preserving (the
        lifecycle's attribution rule), and one claim is blamed."""
        r = self.refusal
        return z3.And(
            *[f >= 1 for f in self.footprint],
            r.non_negative(),
            r.capacity_reason,
            *[z3.Implies(b, p) for b, p in zip(self.blamed, self.preserving, strict=True)],
            z3.Or(self.blamed),
        )

    def arithmetic(self) -> z3.BoolRef:
        return z3.And(list(capacity_checks(self.refusal).values()))

    def capacity_state(self) -> z3.BoolRef:
        """R.capacity_state as `system._check_protected_term` judges it (a claim without block
        events protects its predicate's blocks, here its whole footprint)."""
        protected = self.refusal.protected
        return z3.And(
            protected <= self.reserved(),
            *[
                z3.Implies(b, z3.And(r, f <= protected))
                for b, r, f in zip(self.blamed, self.reserving, self.footprint, strict=True)
            ],
        )

    def justified(self) -> z3.BoolRef:
        """The conclusion: the reservations plus the active demand overflow the header's pool,
        and every blamed claim's blocks are among the reservations."""
        r = self.refusal
        return z3.And(
            self.reserved() + r.active > r.header_usable,  # type: ignore[operator]
            *[z3.Implies(b, f <= self.reserved()) for b, f in zip(self.blamed, self.footprint, strict=True)],
        )

    def fits(self) -> z3.BoolRef:
        """The replayed claims materialize without overcommitting the pool (system occupancy)."""
        held = z3.Sum([z3.If(p, f, 0) for f, p in zip(self.footprint, self.preserving, strict=True)])
        return held <= self.refusal.header_usable  # type: ignore[operator]

    def smallest(self, job: Job, constraints: list[z3.BoolRef]) -> z3.ModelRef | None:
        optimizer = job.optimize()
        optimizer.add(*constraints)
        r = self.refusal
        optimizer.minimize(z3.Sum([*self.footprint, r.protected, r.active, r.header_usable]))
        return optimizer.model() if decided(optimizer.check(), optimizer) else None

    def events(self, model: z3.ModelRef) -> tuple[list[dict[str, Any]], int]:
        """The model as a history: each claim accepted and materialized (a preserving claim
        that does not reserve is offloadable and offloaded), then the refusal."""

        def value(term: z3.ExprRef) -> Any:
            found = model.eval(term, model_completion=True)
            return z3.is_true(found) if z3.is_bool(found) else found.as_long()

        events: list[dict[str, Any]] = []
        blamed = []
        for c, claim in enumerate(_CLAIMS):
            footprint, preserving, reserving = (
                value(x[c]) for x in (self.footprint, self.preserving, self.reserving)
            )
            mode = ProtectionMode.best_effort
            if preserving:
                mode = ProtectionMode.hard_protected if reserving else ProtectionMode.offloadable
            events += [
                {"event": "resident_claim_accepted", **_terms(claim, mode, footprint)},
                {"event": "resident_claim_materialized", "claim_id": claim, "leading_blocks": footprint},
            ]
            if preserving and not reserving:
                events.append({"event": "resident_claim_offloaded", "claim_id": claim, "tier": "cpu"})
            if value(self.blamed[c]):
                blamed.append(claim)
        numbers = {
            name: value(term) for name, term in zip(CAPACITY_FIELDS, self.refusal.values(), strict=True)
        }
        refusal = {
            "event": "active_request_refused",
            "request_id": "req-1",
            "reason": "capacity",
            "blocking_claim_ids": blamed,
        }
        return [*events, refusal | numbers], value(self.refusal.header_usable)


def _capacity_obligation(job: Job, facts: Facts) -> Outcome:
    pool = _Pool.fresh(job)
    passes = z3.And(pool.well_formed(), pool.arithmetic(), pool.capacity_state())
    proof = prove_valid(job, z3.Implies(passes, pool.justified()))
    witness = pool.smallest(job, [passes, pool.fits()])
    without = pool.smallest(
        job, [pool.well_formed(), pool.arithmetic(), pool.fits(), z3.Not(pool.justified())]
    )
    return _outcome(
        proof.holds,
        {
            "domain": "two claims, non-negative unbounded integers",
            "checks": sorted(capacity_checks(pool.refusal)),
        },
        witnesses={"refusal_passing_both_rules": (witness, pool.events, accepted)},
        without={
            "protected_term_within_reservations": (without, pool.events, rejected_with(R.capacity_state))
        },
    )


# --- duration: no expiry before the promised duration -------------------------------------------

_ACCEPT, _HIT, _EXPIRE = 0, 1, 2
"""The duration system's events: acceptance, a satisfied reuse, an expiry."""
_ABSENT, _RESPONSIBLE, _EXPIRED = 0, 1, 2
"""The duration system's claim phases."""
_DURATION_STATE = (
    *((name, False) for name in ("phase", "accepted_at", "clock", "hit_at", "last")),
    ("refresh", True),
    ("duration_ms", False),
)


def _duration_step(s: State, i: Inputs, with_rule: bool) -> tuple[z3.BoolRef, list[z3.ExprRef]]:
    """One event at time `t` (ns; clocks never decrease): the rule as `system._check_duration`
    and `system._refresh` apply it, with `accepted_at` and `hit_at` as the history. A satisfied
    reuse after the expiry is legal too (the lifecycle allows it) and changes nothing."""
    phase, accepted_at, clock, hit_at, last, refresh, duration = s
    kind, t = i
    due = t - clock >= duration * NS_PER_MS
    responsible = phase == _RESPONSIBLE
    legal = z3.And(
        t >= last,
        z3.Or(
            z3.And(kind == _ACCEPT, phase == _ABSENT),
            z3.And(kind == _HIT, phase != _ABSENT),
            z3.And(kind == _EXPIRE, responsible, due if with_rule else True),
        ),
    )
    accept, hit = kind == _ACCEPT, z3.And(kind == _HIT, responsible)
    after = [
        z3.If(accept, _RESPONSIBLE, z3.If(kind == _EXPIRE, _EXPIRED, phase)),
        z3.If(accept, t, accepted_at),
        z3.If(z3.Or(accept, z3.And(hit, refresh)), t, clock),
        z3.If(z3.Or(accept, hit), t, hit_at),
        t,
        refresh,
        duration,
    ]
    return legal, after


def _duration_system(job: Job, with_rule: bool) -> TransitionSystem:
    def init(s: State) -> z3.BoolRef:
        return z3.And(s[0] == _ABSENT, *[x == 0 for x in s[1:5]], s[6] >= 1)

    return _stepped(
        job, _DURATION_STATE, ("kind", "t_ns"), init, partial(_duration_step, with_rule=with_rule)
    )


def _early_expiry(with_rule: bool) -> Callable[[State, Inputs], z3.BoolRef]:
    def bad(s: State, i: Inputs) -> z3.BoolRef:
        legal, _ = _duration_step(s, i, with_rule)
        promised = s[6] * NS_PER_MS
        early = z3.Or(i[1] < s[1] + promised, z3.And(s[5], i[1] < s[3] + promised))
        return z3.And(i[0] == _EXPIRE, legal, early)

    return bad


def _duration_events(path: list[Step]) -> History:
    refresh, duration = bool(path[-1].state["refresh"]), int(path[-1].state["duration_ms"])
    terms = _terms("claim-a", ProtectionMode.expiring, 2, duration_ms=duration, refresh_on_hit=refresh)
    claim = {"claim_id": "claim-a"}
    events: list[dict[str, Any]] = []
    for step in path:
        kind, at = int(step.inputs["kind"]), {"t_ns": int(step.inputs["t_ns"])}
        if kind == _ACCEPT:
            events.append({"event": "resident_claim_accepted", **at, **terms})
            events.append({"event": "resident_claim_materialized", **at, **claim, "leading_blocks": 2})
        elif kind == _HIT:
            request = {"request_id": f"req-{len(events)}", "cached_blocks": 2, "predicate_satisfied": True}
            events.append({"event": "request_reused", **at, **claim, **request})
        else:
            events.append({"event": "resident_claim_expired", **at, **claim})
    return events, None


def _duration_obligation(job: Job, facts: Facts) -> Outcome:
    proof = spacer_invariant(_duration_system(job, True), _early_expiry(True))

    def expiry_after_refreshing_hit(s: State, i: Inputs) -> z3.BoolRef:
        legal, _ = _duration_step(s, i, True)
        return z3.And(legal, i[0] == _EXPIRE, s[5], s[3] > s[1])

    witness = bmc(_duration_system(job, True), expiry_after_refreshing_hit, BOUND)
    without = bmc(_duration_system(job, False), _early_expiry(False), BOUND)
    return _outcome(
        proof.holds,
        {
            "assumes": "event clocks (t_ns) never decrease",
            "invariant": proof.invariant,
            "invariant_rechecked": proof.rechecked,
        },
        witnesses={"expiry_on_time_after_a_refreshing_hit": (witness, _duration_events, accepted)},
        without={"no_expiry_before_duration": (without, _duration_events, rejected_with(R.duration))},
    )


# --- duration: extensions only lengthen, within the cap -----------------------------------------

_EXTEND = 3
"""The soft-terms system's extra event (after `_ACCEPT`, `_HIT`, `_EXPIRE`): an extension."""
_EXTENSION_GUARDS = ("extend_only", "within_the_cap", "expiry_after_the_promised_end")
_SOFT_STATE = (
    *((name, False) for name in ("phase", "decided_at", "clock", "extended", "last", "announced")),
    ("refresh", True),
    *((name, False) for name in ("duration_ms", "max_duration_ms")),
)
"""The claim's phase, what `system.ClaimRecord` keeps for its ms clock (`decided_ns`, `clock_ns`,
`extended_ns`: 0 for none, every end being later), the last stamp, then the history: `announced`,
the latest end the history promised (the acceptance: its duration; a refreshing hit: its duration
from the hit, within the cap; an extension: the end it grants); and the terms."""


def _soft_step(s: State, i: Inputs, guards: tuple[str, ...]) -> tuple[z3.BoolRef, list[z3.ExprRef]]:
    """One event at time `t` (ns; clocks never decrease), an extension granting `grant_ms`: the
    rule as `system._extended`, `_check_duration` (`_promised_end`) and `_refresh` apply it. A
    satisfied reuse after the expiry is legal and changes nothing; an extension of an expired
    claim is a lifecycle violation."""
    phase, decided, clock, extended, last, announced, refresh, duration, cap = s
    kind, t, grant = i
    cap_end = decided + cap * NS_PER_MS
    promised = z3.If(  # min(max(start + duration, latest extension), decision + cap)
        clock + duration * NS_PER_MS >= extended, clock + duration * NS_PER_MS, extended
    )
    promised = z3.If(promised <= cap_end, promised, cap_end)
    granted = t + grant * NS_PER_MS
    responsible = phase == _RESPONSIBLE
    extend_rules = [grant >= 1]
    if "extend_only" in guards:  # deadlines only extend
        extend_rules.append(granted >= promised)
    if "within_the_cap" in guards:  # never past decision + cap
        extend_rules.append(granted <= cap_end)
    on_time = t >= promised if "expiry_after_the_promised_end" in guards else z3.BoolVal(True, t.ctx)
    legal = z3.And(
        t >= last,
        z3.Or(
            z3.And(kind == _ACCEPT, phase == _ABSENT),
            z3.And(kind == _HIT, phase != _ABSENT),
            z3.And(kind == _EXTEND, responsible, *extend_rules),
            z3.And(kind == _EXPIRE, responsible, on_time),
        ),
    )
    accept, extend = kind == _ACCEPT, kind == _EXTEND
    refreshing = z3.And(kind == _HIT, responsible, refresh)
    refreshed_end = t + duration * NS_PER_MS
    refreshed_end = z3.If(refreshed_end <= cap_end, refreshed_end, cap_end)

    def later(x: z3.ArithRef, y: z3.ArithRef) -> z3.ArithRef:
        return z3.If(x >= y, x, y)

    after = [
        z3.If(accept, _RESPONSIBLE, z3.If(kind == _EXPIRE, _EXPIRED, phase)),
        z3.If(accept, t, decided),
        z3.If(z3.Or(accept, refreshing), t, clock),
        z3.If(accept, 0, z3.If(extend, later(extended, granted), extended)),
        t,
        z3.If(
            accept,
            t + duration * NS_PER_MS,
            z3.If(
                refreshing,
                later(announced, refreshed_end),
                z3.If(extend, later(announced, granted), announced),
            ),
        ),
        refresh,
        duration,
        cap,
    ]
    return legal, after


def _soft_system(job: Job, guards: tuple[str, ...]) -> TransitionSystem:
    def init(s: State) -> z3.BoolRef:
        return z3.And(s[0] == _ABSENT, *[x == 0 for x in s[1:6]], s[7] >= 1, s[8] >= s[7])

    return _stepped(job, _SOFT_STATE, ("kind", "t_ns", "grant_ms"), init, partial(_soft_step, guards=guards))


def _broken_promise(guards: tuple[str, ...]) -> Callable[[State, Inputs], z3.BoolRef]:
    """A legal step that breaks a promise the history made: an expiry before the latest end
    announced, an extension ending before it, or one ending past decision + cap."""

    def bad(s: State, i: Inputs) -> z3.BoolRef:
        legal, _ = _soft_step(s, i, guards)
        kind, t, grant = i
        decided, announced, cap = s[1], s[5], s[8]
        granted = t + grant * NS_PER_MS
        return z3.And(
            legal,
            z3.Or(
                z3.And(kind == _EXPIRE, t < announced),
                z3.And(kind == _EXTEND, granted < announced),
                z3.And(kind == _EXTEND, granted > decided + cap * NS_PER_MS),
            ),
        )

    return bad


def _soft_readable(s: State, i: Inputs) -> z3.BoolRef:
    """Witnesses and counterexamples use stamps of at most 10 ms and terms of at most 10 ms."""
    return z3.And(i[1] <= 10 * NS_PER_MS, i[2] <= 10, s[8] <= 10)


def _soft_events(path: list[Step]) -> History:
    fixed = path[0].state
    refresh, duration, cap = bool(fixed["refresh"]), int(fixed["duration_ms"]), int(fixed["max_duration_ms"])
    terms = _terms(
        "claim-a",
        ProtectionMode.expiring,
        2,
        duration_ms=duration,
        max_duration_ms=cap,
        refresh_on_hit=refresh,
    )
    claim = {"claim_id": "claim-a"}
    events: list[dict[str, Any]] = []
    for step in path:
        kind, at = int(step.inputs["kind"]), {"t_ns": int(step.inputs["t_ns"])}
        if kind == _ACCEPT:
            events.append({"event": "resident_claim_accepted", **at, **terms})
            events.append({"event": "resident_claim_materialized", **at, **claim, "leading_blocks": 2})
        elif kind == _HIT:
            request = {"request_id": f"req-{len(events)}", "cached_blocks": 2, "predicate_satisfied": True}
            events.append({"event": "request_reused", **at, **claim, **request})
        elif kind == _EXTEND:
            grant = int(step.inputs["grant_ms"])
            if grant < 1:
                raise Unreplayable(f"an extension by {grant} ms (duration_ms is positive)")
            events.append({"event": "resident_claim_extended", **at, **claim, "duration_ms": grant})
        else:
            events.append({"event": "resident_claim_expired", **at, **claim})
    return events, None


def _without_guard(job: Job, guard: str) -> list[Step] | None:
    """The shortest broken promise of the soft-terms system without `guard` (without the expiry
    guard: an expiry after the acceptance's duration, early only because of an extension)."""
    kept = tuple(g for g in _EXTENSION_GUARDS if g != guard)

    def target(s: State, i: Inputs) -> z3.BoolRef:
        broken = _broken_promise(kept)(s, i)
        if guard != "expiry_after_the_promised_end":
            return broken
        return z3.And(broken, i[0] == _EXPIRE, i[1] >= s[1] + s[7] * NS_PER_MS)

    return bmc(_soft_system(job, kept), target, BOUND, _soft_readable)


def _extension_obligation(job: Job, facts: Facts) -> Outcome:
    guarded = _soft_system(job, _EXTENSION_GUARDS)
    proof = spacer_invariant(guarded, _broken_promise(_EXTENSION_GUARDS))

    def expiry(condition: Callable[[State, Inputs], z3.BoolRef]) -> Callable[[State, Inputs], z3.BoolRef]:
        def target(s: State, i: Inputs) -> z3.BoolRef:
            legal, _ = _soft_step(s, i, _EXTENSION_GUARDS)
            return z3.And(legal, i[0] == _EXPIRE, condition(s, i))

        return target

    def ms(x: z3.ArithRef) -> z3.ArithRef:
        return x * NS_PER_MS

    witnesses = bmc_many(
        guarded,
        {
            # a refreshing hit, then an extension past the refreshed term, honoured by the expiry
            "expiry_after_a_hit_and_a_lengthening_extension": expiry(
                lambda s, i: z3.And(s[2] > s[1], s[3] > s[2] + ms(s[7]))
            ),
            # the cap ends the term before the refreshed duration does
            "expiry_at_the_cap_before_the_refreshed_duration": expiry(
                lambda s, i: z3.And(i[1] == s[1] + ms(s[8]), i[1] < s[2] + ms(s[7]))
            ),
        },
        BOUND,
        _soft_readable,
    )
    without: dict[str, tuple[Any, Writer, Expect]] = {
        guard: (_without_guard(job, guard), _soft_events, rejected_with(R.duration))
        for guard in _EXTENSION_GUARDS
    }
    return _outcome(
        proof.holds,
        {
            "assumes": "event clocks (t_ns) never decrease; terms with duration_ms and max_duration_ms",
            "promised_end": "min(max(start + duration, latest extension), decision + cap)",
            "invariant": proof.invariant,
            "invariant_rechecked": proof.rechecked,
        },
        witnesses={name: (path, _soft_events, accepted) for name, path in witnesses.items()},
        without=without,
    )


# --- block_identity: a block is its id and its content ------------------------------------------

_STORE, _REMOVE = 0, 1
_NO_CONTENT = -1
_BLOCK_STATE = (
    ("content", False),
    ("holds_a", True),
    ("holds_b", True),
    ("stored_a", False),
    ("stored_b", False),
)
"""One block id, position 0 of two claims: the content (hash) it holds, which claims hold it,
and the content each claim's position was first stored with (fixed for the claim's life)."""


def _block_step(s: State, i: Inputs, with_rule: bool) -> tuple[z3.BoolRef, list[z3.ExprRef]]:
    """A store of content `h` for a claim, or a removal quoting `h` (naming a claim, or -1),
    as `system._block_stored_rarely`, `_track` and `_block_removed_rarely` judge them."""
    content, holds, stored = s[0], s[1:3], s[3:5]
    kind, claim, h = i
    held = content != _NO_CONTENT
    other = z3.And(held, content != h)
    store, remove = kind == _STORE, kind == _REMOVE
    names_holder = z3.Or(claim == -1, z3.Not(held), *[z3.And(claim == c, holds[c]) for c in range(2)])
    its_content = z3.Or(
        *[z3.And(claim == c, z3.Or(stored[c] == _NO_CONTENT, stored[c] == h)) for c in range(2)]
    )
    legal = z3.And(
        h >= 0,
        z3.Or(
            z3.And(store, its_content),
            z3.And(remove, z3.Or(claim == -1, claim == 0, claim == 1), z3.Not(other), names_holder),
        ),
    )
    replaced = z3.And(store, other) if with_rule else z3.BoolVal(False, content.ctx)
    after_holds = [
        z3.If(remove, False, z3.Or(claim == c, z3.And(holds[c], z3.Not(replaced)))) for c in range(2)
    ]
    after_stored = [z3.If(z3.And(store, claim == c), h, stored[c]) for c in range(2)]
    return legal, [z3.If(remove, _NO_CONTENT, h), *after_holds, *after_stored]


def _block_system(job: Job, with_rule: bool) -> TransitionSystem:
    def init(s: State) -> z3.BoolRef:
        return z3.And(
            s[0] == _NO_CONTENT, z3.Not(s[1]), z3.Not(s[2]), s[3] == _NO_CONTENT, s[4] == _NO_CONTENT
        )

    step = partial(_block_step, with_rule=with_rule)
    return _stepped(job, _BLOCK_STATE, ("kind", "claim", "hash"), init, step)


def _holds_other_content(s: State | list[z3.ExprRef]) -> z3.BoolRef:
    return z3.Or([z3.And(s[1 + c], s[0] != s[3 + c]) for c in range(2)])


def _into_other_content(with_rule: bool) -> Callable[[State, Inputs], z3.BoolRef]:
    """A legal step after which a claim holds the block with content it did not store."""

    def target(s: State, i: Inputs) -> z3.BoolRef:
        legal, after = _block_step(s, i, with_rule)
        return z3.And(legal, _holds_other_content(after))

    return target


_BLOCK_ID = 7


def _block_events(path: list[Step]) -> History:
    """Two best_effort claims with a one-block prefix (a lost block is a loss, never harm),
    then the path's stores and removals of block 7."""
    events: list[dict[str, Any]] = [
        {"event": "resident_claim_accepted", **_terms(claim, ProtectionMode.best_effort, 1)}
        for claim in _CLAIMS
    ]
    for step in path:
        kind, claim, h = (int(step.inputs[k]) for k in ("kind", "claim", "hash"))
        block = {"block_id": _BLOCK_ID, "block_hash": f"content-{h}"}
        if claim >= 0:
            block |= {"claim_id": _CLAIMS[claim], "position": 0}
        events.append({"event": "block_stored" if kind == _STORE else "block_removed", **block})
    return events, None


def _nobody_holds(result: Replay) -> bool:
    """After the replay, neither claim counts the block (both lost their one-block prefix)."""
    assert result.state is not None
    return all(result.state.claims[c].leading == 0 for c in _CLAIMS)


def _replaced_content_lost(result: Replay) -> bool:
    """The replay is accepted, the claim that stored last holds the block, and a claim whose
    content it replaced lost it (a loss, not a shared block)."""
    if result.state is None:
        return False
    stores = [(e["claim_id"], e["block_hash"]) for e in result.events if e["event"] == "block_stored"]
    last_claim, last_hash = stores[-1]
    replaced = {claim for claim, h in dict(stores).items() if h != last_hash}
    leading = {c: result.state.claims[c].leading for c in _CLAIMS}
    return leading[last_claim] == 1 and bool(replaced) and all(leading[c] == 0 for c in replaced)


def _blocks_obligation(job: Job, facts: Facts) -> Outcome:
    proof = spacer_invariant(_block_system(job, True), lambda s, i: _holds_other_content(s))

    def removal_naming_one_of_two_holders(s: State, i: Inputs) -> z3.BoolRef:
        legal, _ = _block_step(s, i, True)
        return z3.And(legal, i[0] == _REMOVE, i[1] == 1, s[1], s[2])

    witness = bmc(_block_system(job, True), removal_naming_one_of_two_holders, BOUND)
    without = bmc(_block_system(job, False), _into_other_content(False), BOUND)
    return _outcome(
        proof.holds,
        {"invariant": proof.invariant, "invariant_rechecked": proof.rechecked},
        witnesses={"shared_block_removed_naming_one_holder": (witness, _block_events, _nobody_holds)},
        without={"other_content_is_a_loss": (without, _block_events, _replaced_content_lost)},
    )


# --- confirmed restores: a satisfied reuse after an offload needs a confirmed restore -----------

_RESTORE_STATE = (
    *((name, False) for name in ("phase", "required", "footprint", "reported")),
    *(
        (name, True)
        for name in ("kv_restored", "noted", "offloaded", "confirmed", "kv_back", "matched", "relaxed")
    ),
)
"""The claim's phase, its predicate's blocks and footprint, what `system.ClaimRecord` keeps
(`reported_leading`, `kv_restored`, the request's `restored` note), then the history: offloaded
ever; since the last offload: a restore whose `restored_blocks` reach the predicate or a
materialized report (confirmed), a KV restore, a matching checkpoint; responsibility relaxed."""
_RESTORE_EVENTS = (
    E.accept, E.materialize, E.offload, E.require_restore, E.restore, E.restore_checkpoint_match,
    E.restore_checkpoint_mismatch, E.reuse_satisfied, E.reuse_unsatisfied, E.demote, E.expire, E.release,
)  # fmt: skip
"""The restore system's lifecycle alphabet."""
_GUARDS = ("confirmation", "kv_before_checkpoint")
_RESTORE_PROFILES = {
    "one_key": ClaimProfile(preserving=True, offloadable=True, two_key=False),
    "two_key": ClaimProfile(preserving=True, offloadable=True, two_key=True),
}
_SMALL = 4
"""Witnesses and counterexamples use predicates and footprints of at most this many blocks."""


def _restore_step(
    profile: ClaimProfile, s: State, i: Inputs, guards: tuple[str, ...]
) -> tuple[z3.BoolRef, list[z3.ExprRef]]:
    """One lifecycle event with a block count `n` (`restored_blocks`, -1 for none, or the
    materialized `leading_blocks`), as `system._restored`, `_checkpoint_restored`,
    `_materialized`, `_offloaded`, `_restore_required` and `_confirm_restore` judge it (one
    request, whose restoration is pending exactly while the claim is restoring)."""
    phase, required, footprint, reported, kv, noted = s[:6]
    offloaded, confirmed, kv_back, matched, relaxed = s[6:]
    event, n = i

    def is_(e: Event) -> z3.BoolRef:
        return event == EVENTS.index(e)

    restore, match, offload, materialize = (
        is_(E.restore),
        is_(E.restore_checkpoint_match),
        is_(E.offload),
        is_(E.materialize),
    )
    satisfied = is_(E.reuse_satisfied)
    rules = [
        z3.Implies(is_(E.require_restore), phase != PHASES.index(Phase.restoring)),  # not pending
        z3.Implies(restore, z3.Or(n == -1, z3.And(n >= 0, n <= footprint))),
        z3.Implies(materialize, z3.And(n >= required, n <= footprint)),
    ]
    if "kv_before_checkpoint" in guards:  # R.hybrid_two_key: both keys, KV first
        checkpoint = z3.Or(match, is_(E.restore_checkpoint_mismatch))
        rules.append(z3.Implies(z3.And(checkpoint, phase == PHASES.index(Phase.restoring)), kv))
    if "confirmation" in guards:  # R.offload_order: a satisfied reuse after a confirmed restore
        rules.append(z3.Implies(z3.And(satisfied, noted), reported >= required))
    moved_legal, moved_target = _lifecycle(profile, phase, event, _RESTORE_EVENTS)
    resolves = z3.Or(match, restore) if not profile.two_key else match

    def since(flag: z3.BoolRef, sets: z3.BoolRef) -> z3.BoolRef:
        return z3.If(offload, False, z3.Or(flag, sets))

    after = [
        moved_target,
        required,
        footprint,
        z3.If(
            offload,
            0,
            z3.If(z3.And(restore, n >= 0), n, z3.If(z3.And(materialize, n > reported), n, reported)),
        ),
        since(kv, restore),
        z3.Or(resolves, z3.And(noted, z3.Not(satisfied))),
        z3.Or(offloaded, offload),
        since(confirmed, z3.Or(z3.And(restore, n >= required), materialize)),
        since(kv_back, restore),
        since(matched, match),
        z3.Or(relaxed, event_in(event, RELAXING)),
    ]
    return z3.And(moved_legal, *rules), after


def _restore_system(job: Job, profile: ClaimProfile, guards: tuple[str, ...]) -> TransitionSystem:
    def init(s: State) -> z3.BoolRef:
        return z3.And(
            s[0] == PHASES.index(INITIAL),
            s[1] >= 1,
            s[2] >= s[1],
            s[3] == 0,
            *[z3.Not(flag) for flag in s[4:]],
        )

    return _stepped(job, _RESTORE_STATE, ("event", "n"), init, partial(_restore_step, profile, guards=guards))


def _reuse_of_offloaded(
    profile: ClaimProfile, guards: tuple[str, ...], restored: bool
) -> Callable[[State, Inputs], z3.BoolRef]:
    """A legal satisfied reuse of a claim offloaded earlier and still the runtime's
    responsibility, after a confirmed restore (with both keys) or, `restored=False`, without."""

    def target(s: State, i: Inputs) -> z3.BoolRef:
        legal, _ = _restore_step(profile, s, i, guards)
        confirmed, kv_back, matched = s[7], s[8], s[9]
        done = z3.And(confirmed, kv_back, matched) if profile.two_key else confirmed
        return z3.And(
            i[0] == EVENTS.index(E.reuse_satisfied),
            legal,
            s[6],
            z3.Not(s[10]),
            done if restored else z3.Not(done),
        )

    return target


def _small(s: State, i: Inputs) -> z3.BoolRef:
    return z3.And(s[2] <= _SMALL, i[1] <= _SMALL)


def _restore_events(profile: ClaimProfile) -> Writer:
    def write(path: list[Step]) -> History:
        first = path[0].state
        required, footprint = int(first["required"]), int(first["footprint"])
        predicate = (
            {"kind": "hybrid_two_key", "boundary_blocks": required}
            if profile.two_key
            else {"kind": "leading_prefix_at_least", "blocks": required}
        )
        terms = _terms("claim-a", ProtectionMode.offloadable, footprint, predicate=predicate)
        claim, request = {"claim_id": "claim-a"}, {"request_id": "req-1"}
        checkpoint = {"boundary": required, "payload_hash": "payload-1"}
        reuse = {"event": "request_reused", **request, **claim}
        restored_checkpoint = {"event": "resident_claim_checkpoint_restored", **claim, **checkpoint}
        fixed: dict[Event, dict[str, Any]] = {
            E.accept: {"event": "resident_claim_accepted", **terms},
            E.offload: {"event": "resident_claim_offloaded", **claim, "tier": "cpu"},
            E.require_restore: {"event": "resident_claim_restore_required", **claim, **request},
            E.restore_checkpoint_match: restored_checkpoint | {"value_hash": "value-1"},
            E.restore_checkpoint_mismatch: restored_checkpoint | {"value_hash": "value-2"},
            E.reuse_satisfied: reuse | {"cached_blocks": required, "predicate_satisfied": True},
            E.reuse_unsatisfied: reuse | {"cached_blocks": 0, "predicate_satisfied": False},
            E.demote: {"event": "resident_claim_demoted", **claim},
            E.expire: {"event": "resident_claim_expired", **claim},
            E.release: {"event": "resident_claim_released", **claim},
        }
        events: list[dict[str, Any]] = []
        for k, step in enumerate(path):
            event, n = _event_name(path, k), int(step.inputs["n"])
            if event is E.materialize:
                stored = {"checkpoint": checkpoint | {"value_hash": "value-1"}} if profile.two_key else {}
                events.append(
                    {"event": "resident_claim_materialized", **claim, "leading_blocks": n, **stored}
                )
            elif event is E.restore:
                count = {"restored_blocks": n} if n >= 0 else {}
                events.append({"event": "resident_claim_restored", **claim, **request, **count})
            elif event in fixed:
                events.append(fixed[event])  # type: ignore[index]
            else:
                raise Unreplayable(f"no trace event for {event}")
        return events, None

    return write


def _restore_obligation(job: Job, facts: Facts) -> Outcome:
    proofs = {
        name: spacer_invariant(
            _restore_system(job, profile, _GUARDS), _reuse_of_offloaded(profile, _GUARDS, False)
        )
        for name, profile in _RESTORE_PROFILES.items()
    }
    witnesses = {
        f"satisfied_reuse_after_{name}_restore": (
            bmc(
                _restore_system(job, profile, _GUARDS),
                _reuse_of_offloaded(profile, _GUARDS, True),
                BOUND,
                _small,
            ),
            _restore_events(profile),
            accepted,
        )
        for name, profile in _RESTORE_PROFILES.items()
    }
    without: dict[str, tuple[Any, Writer, Expect]] = {}
    for guard, name, rule in (
        ("confirmation", "one_key", R.offload_order),
        ("kv_before_checkpoint", "two_key", R.hybrid_two_key),
    ):
        profile, kept = _RESTORE_PROFILES[name], tuple(g for g in _GUARDS if g != guard)
        path = bmc(
            _restore_system(job, profile, kept), _reuse_of_offloaded(profile, kept, False), BOUND, _small
        )
        without[guard] = (path, _restore_events(profile), rejected_with(rule))
    return _outcome(
        all(p.holds for p in proofs.values()),
        {
            "requests": "one: the request the restore was for",
            "events": [e.value for e in _RESTORE_EVENTS],
            **{f"{name}_invariant": p.invariant for name, p in proofs.items()},
            "invariant_rechecked": all(p.rechecked for p in proofs.values()),
        },
        witnesses=witnesses,
        without=without,
    )


OBLIGATIONS: tuple[ProofObligation, ...] = (
    ProofObligation(
        "terms.plain_acceptance_cannot_launder_harm",
        "A claim submitted with a preserving mode and accepted by a plain resident_claim_accepted "
        "(never conditionally) is never reported lost while the runtime is responsible for it: "
        "the terms rule (a plain acceptance repeats the submitted terms; other terms need "
        "resident_claim_conditionally_accepted) keeps a hard_protected -> best_effort downgrade "
        "from turning its harm into 'lost'.",
        Method.spacer_invariant,
        _terms_obligation,
    ),
    ProofObligation(
        "capacity.refusal_justified_by_reserved_blocks",
        "A capacity refusal that passes the capacity arithmetic and the capacity_state rule "
        "(protected term at most what the responsible preserving claims reserve, each blamed "
        "claim reserving device blocks with its blocks inside the protected term) is justified "
        "by the pool's state: the reserved blocks plus the active demand exceed the header's "
        "usable blocks, and every blamed claim's blocks are among the reserved ones.",
        Method.validity,
        _capacity_obligation,
    ),
    ProofObligation(
        "duration.no_expiry_before_promised_duration",
        "With event clocks that never decrease, a legal expiry of a claim with duration_ms comes "
        "at least that long after its acceptance and, with refresh_on_hit, after its last "
        "satisfied reuse (engine steps and duration_steps are judged the same way).",
        Method.spacer_invariant,
        _duration_obligation,
    ),
    ProofObligation(
        "duration.extensions_only_lengthen_within_the_cap",
        "With event clocks that never decrease, a claim with duration_ms and max_duration_ms keeps "
        "every promise its history made: no legal expiry comes before the latest end promised (its "
        "duration from acceptance, its duration from a refreshing hit within the cap, or an "
        "extension's end), no legal resident_claim_extended ends before that end, and none ends "
        "past decision + max_duration_ms (the checker's promised end: min(max(start + duration, "
        "latest extension), decision + cap); engine steps are judged the same way).",
        Method.spacer_invariant,
        _extension_obligation,
    ),
    ProofObligation(
        "blocks.holders_keep_their_content",
        "A claim counts a block id as its own only while the block holds the content (hash) that "
        "claim stored: different content stored into a held id is a loss for its holders, "
        "sharing needs equal hashes, a removal must quote the held content and name a holder, "
        "and it removes the block from every holder.",
        Method.spacer_invariant,
        _blocks_obligation,
    ),
    ProofObligation(
        "restore.satisfied_reuse_only_after_confirmed_restore",
        "While an offloaded claim is the runtime's responsibility, a satisfied reuse by the "
        "request it was restored for is legal only after a confirmed restore since the offload "
        "(restored_blocks reaching the predicate, or a later materialized report of it) and, "
        "for a two-key claim, after its KV restore and a matching checkpoint.",
        Method.spacer_invariant,
        _restore_obligation,
    ),
)
