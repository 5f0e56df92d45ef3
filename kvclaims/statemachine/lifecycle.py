"""The claim lifecycle: one pure transition function, the single semantics of a claim.

    step(profile, phase, event) -> next phase | Violation

The MicroRuntime emits against it, the refinement checker replays abstracted traces through
it, and `kvclaims.solver` encodes the same table in Z3 (a test checks every pair agrees). It
is a small pure value in the Porcupine sense: `INITIAL`, `step`, `at_end`, `describe`.

Phases are the claim states of DESIGN 2.1 plus bookkeeping phases: `absent` (no event yet),
`breached` (a preserving claim fell below its predicate: harm is owed before anything else),
`checkpoint_mismatch` (a two-key restore produced a different value hash: only a
restoration-failure outcome may follow), and the in-place twins `restoring_in_place` /
`checkpoint_mismatch_in_place`: a materialized two-key claim whose checkpoint is restored into
a request's live slot (seed 002's restore phases payload -> scratch -> live slot -> post-restore
view) without an offload. The twins exist because a failed in-place restore has no other tier
to fall back to: its outcome must end responsibility (demotion, expiry, harm), never refusal
(which returns an offloaded claim to `offloaded`). A claim's `ClaimProfile` (does its mode preserve, may
it be offloaded, is its predicate two-key) is fixed when it is accepted and selects guarded
transitions. Harm semantics are seed 001 table 4: loss is harm only for an accepted claim with
a preservation obligation, before demotion, expiry or release.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from kvclaims.spec.tables import OFFLOAD_LEGAL_MODES, PRESERVING_MODES
from kvclaims.spec.vocabulary import ClaimState, ConformanceRule, ProtectionMode


class Phase(StrEnum):
    """Where one claim is in its lifecycle."""

    absent = "absent"
    submitted = "submitted"
    accepted = "accepted"
    rejected = "rejected"
    materialized = "materialized"
    breached = "breached"
    offloaded = "offloaded"
    restoring = "restoring"
    checkpoint_mismatch = "checkpoint_mismatch"
    restoring_in_place = "restoring_in_place"
    checkpoint_mismatch_in_place = "checkpoint_mismatch_in_place"
    demoted = "demoted"
    expired = "expired"
    released = "released"
    harmed = "harmed"

    @property
    def claim_state(self) -> ClaimState | None:
        """The DESIGN 2.1 state this phase reports as (`None` before the first event)."""
        return _REPORTED_STATE[self]


_REPORTED_STATE: Mapping[Phase, ClaimState | None] = MappingProxyType(
    {phase: ClaimState(phase.value) for phase in Phase if phase.value in ClaimState.__members__}
    | {
        Phase.absent: None,
        Phase.breached: ClaimState.materialized,
        Phase.checkpoint_mismatch: ClaimState.restoring,
        Phase.restoring_in_place: ClaimState.restoring,
        Phase.checkpoint_mismatch_in_place: ClaimState.restoring,
    }
)


class Event(StrEnum):
    """The lifecycle's alphabet: abstract events about one claim.

    Most are one trace event each. `reuse_satisfied` / `reuse_unsatisfied` are a
    `request_reused` naming the claim; `block` is the claim named in a refusal's or deferral's
    `blocking_claim_ids`; `predicate_broken` is derived from block events when the claim's
    leading prefix falls below its predicate; `fail_restoration_<outcome>` is
    `resident_claim_restoration_failed` with that outcome.
    """

    submit = "submit"
    accept = "accept"
    reject = "reject"
    materialize = "materialize"
    demote = "demote"
    expire = "expire"
    release = "release"
    harm = "harm"
    lose = "lose"
    predicate_broken = "predicate_broken"
    offload = "offload"
    require_restore = "require_restore"
    restore = "restore"
    restore_checkpoint_match = "restore_checkpoint_match"
    restore_checkpoint_mismatch = "restore_checkpoint_mismatch"
    fail_restoration_refusal = "fail_restoration_refusal"
    fail_restoration_demotion = "fail_restoration_demotion"
    fail_restoration_expiry = "fail_restoration_expiry"
    fail_restoration_harm = "fail_restoration_harm"
    reuse_satisfied = "reuse_satisfied"
    reuse_unsatisfied = "reuse_unsatisfied"
    block = "block"
    extend = "extend"


class Guard(StrEnum):
    """A condition on the claim's profile under which a transition exists."""

    always = "always"
    preserving = "preserving"
    observational = "observational"
    offloadable = "offloadable"
    one_key = "one_key"
    two_key = "two_key"


@dataclass(frozen=True)
class ClaimProfile:
    """What a claim's terms allow, fixed at acceptance."""

    preserving: bool
    offloadable: bool
    two_key: bool

    @classmethod
    def of(cls, mode: ProtectionMode, *, two_key: bool = False) -> ClaimProfile:
        return cls(
            preserving=mode in PRESERVING_MODES, offloadable=mode in OFFLOAD_LEGAL_MODES, two_key=two_key
        )

    def admits(self, guard: Guard) -> bool:
        return {
            Guard.always: True,
            Guard.preserving: self.preserving,
            Guard.observational: not self.preserving,
            Guard.offloadable: self.offloadable,
            Guard.one_key: not self.two_key,
            Guard.two_key: self.two_key,
        }[guard]


ALL_PROFILES: tuple[ClaimProfile, ...] = tuple(
    ClaimProfile(preserving=p, offloadable=o, two_key=t)
    for p in (False, True)
    for o in (False, True)
    for t in (False, True)
    if p or not o  # offloadable modes all preserve
)
"""Every profile a real mode and predicate can produce."""


@dataclass(frozen=True)
class Transition:
    """`source --event--> target` when the profile admits `guard`; `target None` = stay."""

    source: Phase
    event: Event
    target: Phase | None
    guard: Guard = Guard.always


def _table(*rows: tuple[str, Event, Phase | None] | tuple[str, Event, Phase | None, Guard]):
    for row in rows:
        sources, event, target, *guard = row
        for source in sources.split():
            yield Transition(Phase(source), event, target, *guard)  # type: ignore[arg-type]


RESPONSIBLE: frozenset[Phase] = frozenset(
    {Phase.accepted, Phase.materialized, Phase.offloaded, Phase.restoring, Phase.restoring_in_place}
)
"""Phases in which the runtime answers for the claim's predicate (it tags and protects new
blocks) and may still relax it."""
SETTLED: frozenset[Phase] = frozenset({Phase.demoted, Phase.expired})
"""Phases after responsibility ended but before release: the claim still names the blocks it
holds (their later loss is post-release loss), but tags no new ones."""
ENDED: frozenset[Phase] = SETTLED | {Phase.released}
"""Phases after responsibility ended: later loss is post-release loss, not harm."""
RETIRED: frozenset[Phase] = frozenset({Phase.released, Phase.harmed})
"""Phases after which the claim names no block: its blocks are ordinary cache entries."""
NOT_ACCEPTED: frozenset[Phase] = frozenset({Phase.absent, Phase.submitted, Phase.rejected})
"""Phases of a claim that was never accepted: nothing but a decision may name it."""
SATISFIABLE: frozenset[Phase] = ENDED | {Phase.materialized}
"""Phases from which a reuse may report the predicate satisfied (if the blocks are there)."""
MISMATCHED: frozenset[Phase] = frozenset({Phase.checkpoint_mismatch, Phase.checkpoint_mismatch_in_place})
"""Phases after a two-key restore produced a different value hash: a failure outcome is owed."""


def _names(phases: frozenset[Phase]) -> str:
    return " ".join(sorted(phases))


E, P, G = Event, Phase, Guard
_RESPONSIBLE, _ENDED, _MISMATCHED = _names(RESPONSIBLE), _names(ENDED), _names(MISMATCHED)

TRANSITIONS: tuple[Transition, ...] = tuple(
    _table(
        # submission and decision (seed 001 table 2)
        ("absent", E.submit, P.submitted),
        ("absent submitted", E.accept, P.accepted),
        ("absent submitted", E.reject, P.rejected),
        # materialization: the predicate holds
        ("accepted materialized", E.materialize, P.materialized),
        # responsibility ends before loss: later loss is post-release, not harm
        (_RESPONSIBLE, E.demote, P.demoted),
        (_RESPONSIBLE, E.expire, P.expired),
        (f"{_RESPONSIBLE} {_names(SETTLED)}", E.release, P.released),
        # loss below the predicate (derived from block events); an in-place restore keeps the
        # KV key on the device, so its loss there is loss of a materialized claim
        ("materialized restoring_in_place", E.predicate_broken, P.breached, G.preserving),
        ("materialized restoring_in_place", E.predicate_broken, P.accepted, G.observational),
        ("checkpoint_mismatch_in_place", E.predicate_broken, P.breached, G.preserving),
        # (the rows above cover every profile of their phases)
        (
            f"accepted offloaded restoring {_ENDED} breached checkpoint_mismatch harmed",
            E.predicate_broken,
            None,
        ),
        ("checkpoint_mismatch_in_place", E.predicate_broken, None, G.observational),
        (
            f"materialized breached offloaded restoring restoring_in_place {_MISMATCHED}",
            E.harm,
            P.harmed,
            G.preserving,
        ),
        ("accepted materialized restoring_in_place", E.lose, P.accepted, G.observational),
        (_ENDED, E.lose, None),
        # offload and restore before reuse (seed 000 paths A and B)
        ("materialized", E.offload, P.offloaded, G.offloadable),
        ("offloaded", E.require_restore, P.restoring),
        ("restoring", E.require_restore, None),
        ("restoring", E.restore, P.materialized, G.one_key),
        # a two-key restore: the KV key, then the checkpoint decides (seed 002); in place, a
        # materialized two-key claim restores its checkpoint into the request's live slot
        ("materialized", E.require_restore, P.restoring_in_place, G.two_key),
        ("restoring_in_place", E.require_restore, None, G.two_key),
        ("restoring restoring_in_place", E.restore, None, G.two_key),
        ("restoring restoring_in_place", E.restore_checkpoint_match, P.materialized, G.two_key),
        ("restoring", E.restore_checkpoint_mismatch, P.checkpoint_mismatch, G.two_key),
        ("restoring_in_place", E.restore_checkpoint_mismatch, P.checkpoint_mismatch_in_place, G.two_key),
        ("restoring checkpoint_mismatch", E.fail_restoration_refusal, P.offloaded),
        (f"restoring restoring_in_place {_MISMATCHED}", E.fail_restoration_demotion, P.demoted),
        (f"restoring restoring_in_place {_MISMATCHED}", E.fail_restoration_expiry, P.expired),
        (f"restoring restoring_in_place {_MISMATCHED}", E.fail_restoration_harm, P.harmed, G.preserving),
        # requests that name the claim
        (f"materialized {_ENDED}", E.reuse_satisfied, None),
        (
            f"{_RESPONSIBLE} {_ENDED} {_MISMATCHED} harmed",
            E.reuse_unsatisfied,
            None,
        ),
        (f"{_RESPONSIBLE} {_MISMATCHED}", E.block, None, G.preserving),
        # an extension lengthens the term of a claim the runtime still answers for
        (_RESPONSIBLE, E.extend, None),
    )
)
"""The whole lifecycle, as data. Every (phase, event, profile) not matched is a violation."""


def _index(
    transitions: Iterable[Transition],
) -> Mapping[tuple[Phase, Event], tuple[Transition, ...]]:
    grouped: dict[tuple[Phase, Event], list[Transition]] = defaultdict(list)
    for transition in transitions:
        grouped[(transition.source, transition.event)].append(transition)
    return MappingProxyType({key: tuple(group) for key, group in grouped.items()})


_BY_SOURCE = _index(TRANSITIONS)

INITIAL = Phase.absent
"""Every claim starts absent: no event has named it yet."""


@dataclass(frozen=True)
class Violation:
    """An event the model does not allow, the rule it breaks, and what was allowed instead."""

    rule: ConformanceRule
    phase: Phase
    event: Event
    message: str
    allowed: tuple[Event, ...]


def step(profile: ClaimProfile, phase: Phase, event: Event) -> Phase | Violation:
    """The next phase of a claim with `profile` in `phase` on `event`, or why it is illegal."""
    for transition in _BY_SOURCE.get((phase, event), ()):
        if profile.admits(transition.guard):
            return phase if transition.target is None else transition.target
    rule, message = _why_illegal(profile, phase, event)
    return Violation(rule, phase, event, message, allowed_events(profile, phase))


def allowed_events(profile: ClaimProfile, phase: Phase) -> tuple[Event, ...]:
    """Every event legal from `phase` for `profile`, in alphabet order."""
    return tuple(
        event for event in Event if any(profile.admits(t.guard) for t in _BY_SOURCE.get((phase, event), ()))
    )


def at_end(phase: Phase) -> Violation | None:
    """What the claim still owes when the trace ends: a harm report, or a failure outcome."""
    if phase is Phase.breached:
        return Violation(
            ConformanceRule.no_silent_harm,
            phase,
            Event.harm,
            "the claim fell below its predicate and the trace ended without resident_claim_harmed",
            (Event.harm,),
        )
    if phase in MISMATCHED:
        return Violation(
            ConformanceRule.hybrid_two_key,
            phase,
            Event.fail_restoration_refusal,
            "a checkpoint restore with a different value_hash never ended in a restoration failure",
            (
                Event.fail_restoration_refusal,
                Event.fail_restoration_demotion,
                Event.fail_restoration_expiry,
                Event.fail_restoration_harm,
            ),
        )
    return None


_DECISIONS = frozenset({Event.submit, Event.accept, Event.reject})
_OFFLOAD_PATH = frozenset(
    {
        Event.require_restore,
        Event.restore,
        Event.fail_restoration_refusal,
        Event.fail_restoration_demotion,
        Event.fail_restoration_expiry,
        Event.fail_restoration_harm,
    }
)
_CHECKPOINT = frozenset({Event.restore_checkpoint_match, Event.restore_checkpoint_mismatch})
IN_PLACE: frozenset[Phase] = frozenset({Phase.restoring_in_place, Phase.checkpoint_mismatch_in_place})
"""Phases of an in-place checkpoint restore of a materialized two-key claim."""


def _why_illegal(profile: ClaimProfile, phase: Phase, event: Event) -> tuple[ConformanceRule, str]:
    """Name the DESIGN 4 rule an illegal (phase, event) breaks, most specific first."""
    rule = ConformanceRule
    if event in _DECISIONS:
        return (
            rule.identity,
            f"{event} for a claim that is already {phase}: a claim id is decided once",
        )
    if phase in NOT_ACCEPTED:
        return rule.identity, f"{event} names a claim that was never accepted (it is {phase})"
    if phase is Phase.breached:
        return rule.no_silent_harm, (
            f"{event} after the claim fell below its predicate: resident_claim_harmed must come first"
        )
    if event is Event.lose and profile.preserving and phase is not Phase.harmed:
        return (
            rule.no_silent_harm,
            "a claim with a preservation obligation lost its predicate: that is harm",
        )
    if event is Event.fail_restoration_refusal and phase in IN_PLACE:
        return rule.hybrid_two_key, (
            "refusal after an in-place checkpoint restore: the claim has no other tier to return "
            "to, so a failed resume ends its responsibility (demotion, expiry or harm)"
        )
    if phase in MISMATCHED or event in _CHECKPOINT:
        return rule.hybrid_two_key, (
            f"{event} in {phase}: a value-hash mismatch must end in a restoration failure"
            if phase in MISMATCHED
            else f"{event} in {phase}: checkpoint restores belong to restoring two-key claims"
        )
    if event is Event.extend:
        return rule.lifecycle, (
            f"an extension of a claim that is {phase}: only a claim the runtime still answers for "
            "can be extended, never once its term has ended"
        )
    if event is Event.block:
        return rule.attribution, (
            f"blocking_claim_ids names a claim that is {phase}"
            + ("" if profile.preserving else " and whose mode carries no preservation obligation")
        )
    if event is Event.reuse_satisfied and phase in (
        Phase.offloaded,
        Phase.restoring,
        Phase.restoring_in_place,
    ):
        return rule.offload_order, "a satisfied reuse of a claim before its restore completed"
    if event in _OFFLOAD_PATH:
        return rule.offload_order, f"{event} in {phase}: needs a prior offload and restore_required"
    if event in (Event.harm, Event.fail_restoration_harm) and not profile.preserving:
        return (
            rule.lifecycle,
            f"{event}: a claim without a preservation obligation is lost, not harmed",
        )
    return rule.lifecycle, f"{event} is not a transition from {phase}"


def describe(profile: ClaimProfile, phase: Phase) -> str:
    """A one-line human description of a claim's abstract state (for counterexamples)."""
    traits = [
        "preserving" if profile.preserving else "observational",
        *(["offloadable"] if profile.offloadable else []),
        *(["two-key"] if profile.two_key else []),
    ]
    reported = phase.claim_state
    shown = phase.value if reported is None or reported.value == phase.value else f"{phase} ({reported})"
    return f"{shown}; {', '.join(traits)}"
