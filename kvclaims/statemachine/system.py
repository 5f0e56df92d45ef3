"""The whole abstract state that refinement judges, as one model (Porcupine style).

    init(header) -> SystemState
    step(state, event, at) -> SystemState | Violation
    step_run(state, events, at) -> Violation | None       (the same, over consecutive events)
    finish(state) -> Violation | None                     (what the trace owes at its end)
    describe(state) -> str

The state is everything DESIGN 4 judges a trace against: every claim with its terms (mode,
predicate, footprint, durations, refresh-on-hit), its lifecycle phase (moved only by
`lifecycle.step`) and clocks (accepted-at engine step and `t_ns`); every tracked block with its
content identity (block id *and* hash) and the claims holding it; every live request (moved
only by `requests.request_step`) with its restorations; and the pool's occupancy (blocks
reserved by responsible preserving claims, live blocks of admitted requests, usable blocks).
Events are trace v1 events: the pydantic models of `kvclaims.spec.trace` or the msgspec
Structs derived from them (anything with the same field names and class name).

Purity, and why it is only pure-looking: the checker must step a million events a second, so
`step` mutates the `SystemState` it is given and returns that same object, or returns a
`Violation` (after which the state is spent: do not step it again). No event is deep-copied.
A caller that needs the state before a step keeps its own copy (`copy.deepcopy(state)`).
`at` is an opaque position the model quotes back in violations and witnesses (the checker
passes the source line); the model never reads it otherwise.

Reusable claim keeping: `SystemState.claims` maps a live claim id to its `ClaimRecord` (terms,
phase, clocks, device-tier leading prefix) and `retired_phase(state, claim_id)` answers for
claims that left (released, harmed, rejected); `state.reserved_blocks` and
`state.admitted_live_blocks` are the pool's occupancy. Runtimes that keep a claim ledger step
the same model with the events they emit.

The rules (DESIGN 4; each violation names one `ConformanceRule`) are the methods of
`SystemState` below, grouped by concern: claims and terms, time, offload and restore, requests
and capacity, blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from kvclaims.spec.capacity import capacity_problem
from kvclaims.spec.ids import RetiredIds
from kvclaims.spec.tables import CAPACITY_PROOF_FIELDS, DEVICE_CACHE_LEVELS
from kvclaims.spec.vocabulary import (
    ConflictReason,
    ConformanceRule,
    ProtectionMode,
    RestorationOutcome,
    TraceWitness,
)
from kvclaims.statemachine import lifecycle
from kvclaims.statemachine.lifecycle import (
    ALL_PROFILES,
    ENDED,
    IN_PLACE,
    INITIAL,
    RETIRED,
    ClaimProfile,
    Event,
    Phase,
)
from kvclaims.statemachine.requests import (
    REQUEST_INITIAL,
    RequestEvent,
    RequestPhase,
    RequestViolation,
    request_step,
)

R = ConformanceRule

END_OF_TRACE = "<end of trace>"
"""The event name a violation found by `finish` quotes."""


@dataclass(frozen=True)
class Violation:
    """A step the model does not allow: the rule, why, the abstract state before it and what
    the model allowed instead. `ids` are the claim and request ids it concerns; `at` is the
    position of the offending event as the caller passed it (0 for end-of-trace findings
    without one)."""

    rule: ConformanceRule
    message: str
    subject: str
    state: str
    allowed: tuple[str, ...]
    ids: frozenset[str]
    at: int
    event: str


@dataclass(frozen=True)
class Undecided:
    """Something the model could not decide (the verdict can be at best inconclusive)."""

    message: str
    at: int


class Header(Protocol):
    usable_blocks: int | None
    block_size: int | None


class OutOfBudget(Exception):
    """A resource limit of the model, not a verdict: the per-position maps of the live claims
    would span more than `max_prefix_positions` blocks (a footprint is a number in the trace, so
    the model counts the maps it allocates instead of trusting it), or exact counts of shared
    blocks would cost more than their budget (`SystemState._count_scan`). A driver reports this
    as undecidable (inconclusive), never as a pass or a violation. `at` is the position of the
    event that ran out (set by `step` and `step_run`, which do not count that event's step)."""

    at: int | None = None


class NotAStep(Exception):
    """`step_run` met an event the model has no rule for, at `events[offset]`: the events before
    it were stepped, it and those after were not. `trace_closed` is such an event: the writer's
    end of the stream, which its driver judges (`kvclaims.refinement.checker`)."""

    def __init__(self, offset: int, name: str) -> None:
        super().__init__(f"{name!r} is not an event the model steps on")
        self.offset = offset
        self.name = name


class _Stop(Exception):
    """Internal: unwinds a rule that found a violation back to `step`."""

    def __init__(self, violation: Violation) -> None:
        self.violation = violation


_NONE: dict[str, int] = MappingProxyType({})  # type: ignore[assignment]
"""The shared, read-only empty map a claim or request starts with (most never need one)."""

_NO_PAIRS: frozenset[tuple[int, int]] = frozenset()
"""The shared empty `ClaimRecord.also_held` (most claims never share a block)."""

_ClaimTable = Mapping[Phase, Mapping[Event, "Phase | lifecycle.Violation"]]


class _Tabulated(dict[Phase, Mapping[Event, "Phase | lifecycle.Violation"]]):
    """One profile's `lifecycle.step`, a phase's row evaluated the first time a claim is in that
    phase (evaluating every row at import cost a short check most of its start-up time)."""

    def __init__(self, profile: ClaimProfile) -> None:
        super().__init__()
        self.profile = profile

    def __missing__(self, phase: Phase) -> Mapping[Event, Phase | lifecycle.Violation]:
        row = self[phase] = MappingProxyType({e: lifecycle.step(self.profile, phase, e) for e in Event})
        return row


def _tabulate(profile: ClaimProfile) -> _ClaimTable:
    return _Tabulated(profile)


_UNDECIDED = ClaimProfile(preserving=False, offloadable=False, two_key=False)
"""The profile used before a claim is decided; the lifecycle ignores it for absent claims."""

LIFECYCLE_TABLES: Mapping[ClaimProfile, _ClaimTable] = MappingProxyType(
    {profile: _tabulate(profile) for profile in {*ALL_PROFILES, _UNDECIDED}}
)
"""`lifecycle.step`, evaluated once for every profile, phase and event it meets (the hot loop is
a dictionary lookup, not a second copy of the rules)."""

_PROFILES: tuple[ClaimProfile, ...] = tuple(sorted({*ALL_PROFILES, _UNDECIDED}, key=repr))
_RANK: Mapping[ClaimProfile, int] = MappingProxyType({p: rank for rank, p in enumerate(_PROFILES)})

_PROFILE_OF: Mapping[tuple[ProtectionMode, bool], tuple[ClaimProfile, _ClaimTable, int]] = MappingProxyType(
    {
        (mode, two_key): (profile, LIFECYCLE_TABLES[profile], _RANK[profile])
        for mode in ProtectionMode
        for two_key in (False, True)
        for profile in (ClaimProfile.of(mode, two_key=two_key),)
    }
)
"""A claim's profile and its tabulated lifecycle, by mode and predicate kind."""

REQUEST_TABLE: Mapping[tuple[RequestPhase, RequestEvent], RequestPhase | RequestViolation] = MappingProxyType(
    {(phase, event): request_step(phase, event) for phase in RequestPhase for event in RequestEvent}
)
"""`requests.request_step`, evaluated once for every phase and event."""
_REQUEST_NEXT: Mapping[RequestEvent, Mapping[RequestPhase, RequestPhase | RequestViolation]] = (
    MappingProxyType(
        {
            event: MappingProxyType({phase: REQUEST_TABLE[(phase, event)] for phase in RequestPhase})
            for event in RequestEvent
        }
    )
)
_ADMITTED = REQUEST_TABLE[(REQUEST_INITIAL, RequestEvent.admit)]
_FINISHED_FROM: Mapping[RequestPhase, RequestPhase] = MappingProxyType(
    {
        phase: target
        for (phase, event), target in REQUEST_TABLE.items()
        if event is RequestEvent.finish and type(target) is RequestPhase
    }
)
"""The phases `request_finished` is legal from (by the request machine), and where it leads."""

_FAILURE_EVENT = {
    RestorationOutcome.refusal: Event.fail_restoration_refusal,
    RestorationOutcome.demotion: Event.fail_restoration_demotion,
    RestorationOutcome.expiry: Event.fail_restoration_expiry,
    RestorationOutcome.harm: Event.fail_restoration_harm,
}
RESPONSIBLE: frozenset[Phase] = frozenset(
    {Phase.accepted, Phase.materialized, Phase.offloaded, Phase.restoring, Phase.restoring_in_place}
)
"""Phases in which the runtime holds the claim's predicate."""
RESERVING: frozenset[Phase] = frozenset(
    {Phase.accepted, Phase.materialized, Phase.breached, Phase.restoring, Phase.checkpoint_mismatch}
    | IN_PLACE
)
"""Phases in which a preserving claim reserves its footprint in the device pool (an offloaded
claim's blocks are in another tier until it is restored): the bound of a proof's protected term."""
RESIDENT: frozenset[Phase] = RESERVING - {Phase.accepted}
"""Phases in which a preserving claim's footprint occupies the device pool (it materialized):
what must fit in the usable pool. An accepted claim that has not materialized occupies nothing
yet, so a runtime may accept claims it will place by offloading others first."""
_PROTECTING: frozenset[Phase] = frozenset({Phase.materialized, Phase.breached})
"""Phases in which a preserving claim's blocks are protected device blocks at an admission: it
showed its predicate (reported or by blocks) and is neither offloaded nor being restored."""
_SETTLED = ENDED
_RETIRED = RETIRED | {Phase.rejected}
"""Phases after which the model keeps only a claim's phase and profile (rejected claims too)."""
_RETIRED_STATES: tuple[tuple[Phase, ClaimProfile], ...] = tuple(
    (phase, profile) for phase in sorted(_RETIRED) for profile in _PROFILES
)
_RETIRED_BASE: Mapping[Phase, int] = MappingProxyType(
    {phase: index * len(_PROFILES) for index, phase in enumerate(sorted(_RETIRED))}
)
_RETIRED_KINDS = len(_RETIRED_STATES)
_REQUIRED_SHIFT = 40
"""A retired claim is kept as one integer: its footprint times `_RETIRED_KINDS`, plus its
phase's base plus its profile's rank (a block event may name it later, within its footprint),
plus its required leading blocks + 1 (0: undecidable) shifted past them (a post-release loss is
judged by it). Footprints are below 2**24 (trace v1), so the low part stays below the shift."""
_LOW = (1 << _REQUIRED_SHIFT) - 1
_MAX_WITNESS_CLAIMS = 64
ASSUMED = 255
"""`ClaimRecord.present[p]` of a position assumed from a materialized report (no block named it)."""
_MAX_HOLDERS = ASSUMED - 1
"""Device blocks that may hold one claim position at once (duplicates of one content)."""
_NS_PER_MS = 1_000_000
SCAN_ALLOWANCE = 10_000_000
SCAN_PER_STEP = 64
"""Budget of the walks over claim blocks and prefixes: a fixed allowance plus this much per
event (the hot path's leading-prefix walks up to this long are constant work, uncharged)."""


class ClaimRecord:
    """One live claim: its terms, phase, clocks and device-tier leading prefix.

    `present[p]` is how many tracked device blocks hold position `p` of its prefix (a position
    stays present while any block holding it survives: vLLM may cache one content in two
    blocks), or `ASSUMED` for a position assumed from a materialized report that no block event
    named; None until its first claim-scoped block event. `leading` is the count of contiguous
    leading positions present; `required` the leading blocks its predicate needs (None when
    undecidable)."""

    __slots__ = (
        "accepted_at",
        "also_held",
        "blocked_while_full",
        "blocks",
        "broken_while_responsible",
        "checkpoint",
        "claim_id",
        "clock_ns",
        "clock_step",
        "duration_ms",
        "duration_steps",
        "footprint",
        "kv_restored",
        "leading",
        "mode",
        "object_id",
        "offload_at",
        "owner_scope",
        "pending",
        "phase",
        "predicate",
        "present",
        "profile",
        "rank",
        "refresh_on_hit",
        "reported_leading",
        "required",
        "settled_at",
        "table",
        "transitions",
        "unconfirmed",
    )

    def __init__(self, claim_id: str) -> None:
        self.claim_id = claim_id
        self.profile = _UNDECIDED
        self.table = LIFECYCLE_TABLES[_UNDECIDED]
        self.rank = _RANK[_UNDECIDED]
        self.phase = INITIAL
        self.mode: ProtectionMode | None = None
        self.owner_scope: str | None = None
        self.object_id: str | None = None
        self.predicate: Any = None
        self.footprint = 0
        self.duration_steps: int | None = None
        self.duration_ms: int | None = None
        self.refresh_on_hit = False
        self.clock_step: int | None = None
        self.clock_ns: int | None = None
        self.required: int | None = None
        self.checkpoint: Any = None
        self.kv_restored = False
        self.present: bytearray | None = None
        self.blocks: dict[int, int] = {}
        """Device block ids it is the first holder of -> the position each holds."""
        self.also_held: set[tuple[int, int]] = _NO_PAIRS  # type: ignore[assignment]
        """(block id, position) it holds beside a block's first holder (one content cached in
        a block another claim stored first)."""
        self.leading = 0
        self.reported_leading = 0
        self.unconfirmed: tuple[int, int, str] | None = None
        """(leading blocks, position, event) of a report its tracked blocks have not shown yet."""
        self.pending: dict[str, int] = _NONE
        self.accepted_at = 0
        self.offload_at = 0
        self.settled_at = 0
        self.transitions: tuple[int, ...] = ()
        self.blocked_while_full = 0
        self.broken_while_responsible = False

    def terms(self) -> tuple[Any, ...]:
        """What the runtime is responsible for (compared between submission and acceptance)."""
        return (
            self.owner_scope,
            self.object_id,
            self.mode,
            self.predicate,
            self.footprint,
            self.duration_steps,
            self.duration_ms,
            self.refresh_on_hit,
        )


class RequestRecord:
    """One live request: its phase, live blocks and the restorations it waits on."""

    __slots__ = ("failed", "live", "owed", "phase", "refused_at", "restored", "restoring")

    def __init__(self, phase: RequestPhase, live: int = 0) -> None:
        self.phase = phase
        self.live = live
        self.owed: tuple[str, int] | None = None
        self.failed: dict[str, int] = _NONE
        self.restoring: dict[str, int] = _NONE
        self.restored: dict[str, int] = _NONE
        self.refused_at = 0

    def note(self, which: str, claim_id: str, at: int) -> None:
        """Record `claim_id` in the map `which` (the maps start as the shared empty `_NONE`)."""
        mapping = getattr(self, which)
        if mapping is _NONE:
            mapping = {}
            setattr(self, which, mapping)
        mapping[claim_id] = at


class SystemState:
    """The model's state (see the module docstring). Build with `init`, advance with `step`."""

    def __init__(
        self, usable_blocks: int | None, block_size: int | None, max_prefix_positions: int = 8_000_000
    ) -> None:
        self.usable_blocks = usable_blocks
        """The pool the capacity proofs refer to: the header's, else the first proof's."""
        self.block_size = block_size
        self.max_prefix_positions = max_prefix_positions
        self.prefix_positions = 0
        """Positions of the live claims' presence maps (at most `max_prefix_positions`)."""
        self.claims: dict[str, ClaimRecord] = {}
        self.retired: dict[str, int] = {}
        self.requests: dict[str, RequestRecord] = {}
        self.finished = RetiredIds()
        self.block_owner: dict[int, ClaimRecord] = {}
        """Every tracked device block id -> its first holder (`ClaimRecord.blocks` has the
        position; `shared_owners` the other holders)."""
        self.block_hash: dict[int, str] = {}
        """The content of every device block id stored and not yet removed (claimed or not)."""
        self.shared_owners: dict[int, list[tuple[ClaimRecord, int]]] = {}
        self.reserved_blocks = 0
        """Footprints of preserving claims in a `RESERVING` phase."""
        self.resident_blocks = 0
        """Footprints of preserving claims in a `RESIDENT` phase (materialized in the pool)."""
        self.admitted_live_blocks = 0
        """Live blocks of admitted requests."""
        self.undecided: list[Undecided] = []
        self.steps = 0
        self.scanned = 0
        """Blocks, claims and prefix positions walked so far (see `_count_scan`)."""
        self._run_end: int | None = None
        """While `step` or `step_run` runs, the position after its last event (`steps` already
        counts them all): `_count_scan` allows only for the steps up to the event at `_at`."""
        self.requests_seen = 0
        self.witnessed: dict[TraceWitness, tuple[tuple[int, ...], set[str]]] = {}
        self._restore_witness: dict[str, tuple[int, ...]] = {}
        self._failure_witness: dict[str, tuple[int, ...]] = {}
        self._failure_named: set[str] = set()
        self._seen_eviction = False
        self._seen_admission = False
        self._complete: set[TraceWitness] = set()
        """Witness kinds that need no more recording (lines known, claim ids at their bound)."""
        self._at = 0
        self._event = END_OF_TRACE
        self._handlers: dict[type, Callable[[Any], None]] = {}

    # --- violations ---------------------------------------------------------------------

    def _fail(
        self,
        rule: ConformanceRule,
        message: str,
        *,
        subject: str,
        state: str,
        allowed: tuple[str, ...],
        ids: tuple[str, ...],
    ) -> None:
        raise _Stop(Violation(rule, message, subject, state, allowed, frozenset(ids), self._at, self._event))

    def _lifecycle_violation(
        self,
        claim: ClaimRecord,
        violation: lifecycle.Violation,
        message: str | None = None,
        ids: tuple[str, ...] = (),
    ) -> _Stop:
        return _Stop(
            Violation(
                violation.rule,
                message or f"{claim.claim_id}: {violation.message}",
                f"claim {claim.claim_id}",
                lifecycle.describe(claim.profile, violation.phase),
                tuple(e.value for e in violation.allowed),
                frozenset({claim.claim_id, *ids}),
                self._at,
                self._event,
            )
        )

    def _claim_fail(self, claim: ClaimRecord, rule: ConformanceRule, message: str, *ids: str) -> None:
        self._fail(
            rule,
            f"{claim.claim_id}: {message}",
            subject=f"claim {claim.claim_id}",
            state=lifecycle.describe(claim.profile, claim.phase),
            allowed=(),
            ids=(claim.claim_id, *ids),
        )

    def _request_fail(
        self,
        rule: ConformanceRule,
        request_id: str,
        message: str,
        state: str,
        allowed: tuple[str, ...],
        *ids: str,
    ) -> None:
        self._fail(
            rule,
            message,
            subject=f"request {request_id}",
            state=state,
            allowed=allowed,
            ids=(request_id, *ids),
        )

    def _request_state(self, request_id: str, checking: str) -> str:
        """What a request-level counterexample reports as the state before: the request's
        phase, then what was being checked ("admitted; checking its capacity proof")."""
        record = self.requests.get(request_id)
        if record is not None:
            phase = str(record.phase)
        else:
            phase = "finished" if request_id in self.finished else "not seen before"
        return f"{phase}; checking its {checking}"

    # --- claims and terms ---------------------------------------------------------------

    def _claim(self, claim_id: str) -> ClaimRecord:
        claim = self.claims.get(claim_id)
        if claim is None:
            claim = self._retired_view(claim_id)
            if claim is None:
                claim = self.claims[claim_id] = ClaimRecord(claim_id)
        return claim

    def _known(self, claim_id: str) -> ClaimRecord | None:
        """The claim if any event decided it (live or retired), without creating it."""
        return self.claims.get(claim_id) or self._retired_view(claim_id)

    def _retired_view(self, claim_id: str) -> ClaimRecord | None:
        """A throw-away record of a retired claim: only its phase and profile are kept, since no
        transition leaves a retired phase."""
        code = self.retired.get(claim_id)
        if code is None:
            return None
        view = ClaimRecord(claim_id)
        low = code & _LOW
        view.phase, view.profile = _RETIRED_STATES[low % _RETIRED_KINDS]
        view.footprint = low // _RETIRED_KINDS
        view.required = (code >> _REQUIRED_SHIFT) - 1 if code > _LOW else None
        view.table = LIFECYCLE_TABLES[view.profile]
        view.rank = _RANK[view.profile]
        return view

    def _advance(self, claim: ClaimRecord, event: Event) -> None:
        """Move the claim through `lifecycle.step` (tabulated), keeping the pool's reserved
        footprint in step with its phase."""
        if claim.unconfirmed is not None:
            self._unconfirmed(claim)
        before = claim.phase
        result = claim.table[before][event]
        if type(result) is lifecycle.Violation:
            raise self._lifecycle_violation(claim, result)
        if result is before:
            return
        if len(claim.transitions) < 3:
            claim.transitions += (self._at,)
            if len(claim.transitions) == 3 and TraceWitness.ordered_lifecycle not in self._complete:
                self._witness(TraceWitness.ordered_lifecycle, claim.transitions, claim.claim_id)
        if claim.profile.preserving:
            if (result in RESERVING) != (before in RESERVING):
                self.reserved_blocks += claim.footprint if result in RESERVING else -claim.footprint
            if (result in RESIDENT) != (before in RESIDENT):
                self.resident_blocks += claim.footprint if result in RESIDENT else -claim.footprint
                if result in RESIDENT:
                    self._check_occupancy(
                        f"{claim.claim_id} holding its {claim.footprint}-block footprint", joining=claim
                    )
        claim.phase = result  # type: ignore[assignment]
        if result in _SETTLED and claim.pending:
            self._cancel_restorations(claim)
        if result in _RETIRED and claim.claim_id in self.claims:
            if claim.present is not None:
                self.prefix_positions -= len(claim.present)
            claim.present = None  # its blocks are no longer tracked
            del self.claims[claim.claim_id]
            required = 0 if claim.required is None else claim.required + 1
            self.retired[claim.claim_id] = (
                claim.footprint * _RETIRED_KINDS + _RETIRED_BASE[result] + claim.rank  # type: ignore[index]
            ) | (required << _REQUIRED_SHIFT)

    def _unconfirmed(self, claim: ClaimRecord) -> None:
        reported, at, event = claim.unconfirmed  # type: ignore[misc]
        self._claim_fail(
            claim,
            R.lifecycle if event == "resident_claim_materialized" else R.offload_order,
            f"{event} (at {at}) reported {reported} leading blocks on the device, but the "
            f"claim's own block events show only {claim.leading} contiguous leading blocks "
            "(a block counts only if every block before it survives)",
        )

    def _owe_confirmation(self, claim: ClaimRecord, leading: int | None) -> None:
        """A report of `leading` device blocks (materialized, restored) that the claim's tracked
        blocks do not show yet: they must show it before the claim's next lifecycle step and
        before the end (runtimes report just before the last block's store, seed 001)."""
        if claim.present is not None and leading is not None and claim.leading < leading:
            claim.unconfirmed = (leading, self._at, self._event)

    def _submitted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase is INITIAL:
            self._take_terms(claim, ev)
        self._advance(claim, Event.submit)

    def _accepted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase is Phase.submitted:
            self._check_same_object(claim, ev)
            submitted = claim.terms()
            self._take_terms(claim, ev)
            if claim.terms() != submitted:
                self._claim_fail(
                    claim,
                    R.terms,
                    f"accepted on terms {_show_terms(claim.terms())}, but it was submitted with "
                    f"{_show_terms(submitted)}: a change of terms must be "
                    "resident_claim_conditionally_accepted",
                )
        elif claim.phase is INITIAL:
            self._take_terms(claim, ev)
        self._decide(claim)

    def _conditionally_accepted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase is INITIAL:
            self._claim_fail(
                claim,
                R.terms,
                "conditionally accepted, but it was never submitted: a conditional acceptance "
                "changes submitted terms",
            )
        if claim.phase is Phase.submitted:
            self._check_same_object(claim, ev)
            self._take_terms(claim, ev)
        self._decide(claim)

    def _check_same_object(self, claim: ClaimRecord, ev: Any) -> None:
        if (claim.owner_scope, claim.object_id) != (ev.owner_scope, ev.object_id):
            self._claim_fail(
                claim,
                R.identity,
                f"accepted for owner {ev.owner_scope} / object {ev.object_id}, but it was submitted "
                f"for owner {claim.owner_scope} / object {claim.object_id}",
            )

    def _decide(self, claim: ClaimRecord) -> None:
        self._advance(claim, Event.accept)
        claim.accepted_at = self._at
        if TraceWitness.claim_accepted not in self._complete:
            self._witness(TraceWitness.claim_accepted, (self._at,), claim.claim_id)

    def _take_terms(self, claim: ClaimRecord, ev: Any) -> None:
        predicate = ev.predicate
        two_key = type(predicate).__name__ == "HybridTwoKey"
        claim.profile, claim.table, claim.rank = _PROFILE_OF[(ev.mode, two_key)]
        claim.mode = ev.mode
        claim.owner_scope = ev.owner_scope
        claim.object_id = ev.object_id
        claim.predicate = predicate
        claim.footprint = ev.footprint_blocks
        claim.duration_steps = ev.duration_steps
        claim.duration_ms = ev.duration_ms
        claim.refresh_on_hit = ev.refresh_on_hit
        claim.clock_step = ev.engine_step
        claim.clock_ns = ev.t_ns
        if two_key:
            claim.required = predicate.boundary_blocks
        elif predicate.blocks is not None:
            claim.required = predicate.blocks
        elif self.block_size is not None:
            claim.required = -(-predicate.tokens // self.block_size)
        else:
            claim.required = None
            self.undecided.append(
                Undecided(
                    f"{claim.claim_id}: its predicate counts tokens and the header gives no "
                    "block_size, so its leading-prefix checks could not be decided",
                    self._at,
                )
            )
        if claim.required is not None and claim.required > claim.footprint:
            self._claim_fail(
                claim,
                R.identity,
                f"its predicate needs {claim.required} leading blocks but footprint_blocks is "
                f"{claim.footprint}: the claim could never materialize",
            )

    def _rejected(self, ev: Any) -> None:
        self._advance(self._claim(ev.claim_id), Event.reject)

    def _materialized(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.materialize)
        required = claim.required
        if required is not None and ev.leading_blocks < required:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"materialized with {ev.leading_blocks} leading blocks; its predicate needs {required}",
            )
        if ev.leading_blocks > claim.footprint:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"materialized with {ev.leading_blocks} leading blocks, more than its footprint "
                f"of {claim.footprint}",
            )
        if claim.profile.two_key:
            self._record_checkpoint(claim, ev.checkpoint)
        claim.reported_leading = max(claim.reported_leading, ev.leading_blocks)
        self._owe_confirmation(claim, ev.leading_blocks)
        if TraceWitness.claim_materialized not in self._complete:
            self._witness(TraceWitness.claim_materialized, (claim.accepted_at, self._at), claim.claim_id)

    def _record_checkpoint(self, claim: ClaimRecord, checkpoint: Any) -> None:
        if checkpoint is None:
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                "a two-key claim materialized without a checkpoint: logical state identity "
                "could never be established later",
            )
        if checkpoint.boundary != claim.required:
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                f"checkpoint boundary {checkpoint.boundary} is not the predicate's boundary {claim.required}",
            )
        claim.checkpoint = checkpoint

    def _demoted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.demote)
        claim.settled_at = self._at

    def _expired(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase in RESPONSIBLE:
            self._check_duration(claim, ev)
        self._advance(claim, Event.expire)
        claim.settled_at = self._at

    def _released(self, ev: Any) -> None:
        self._advance(self._claim(ev.claim_id), Event.release)

    def _harmed(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase in RESPONSIBLE or claim.phase is Phase.breached:
            self._check_harm_numbers(claim, ev)
        was_breached = claim.phase is Phase.breached
        self._advance(claim, Event.harm)
        if was_breached:
            self._witness(TraceWitness.harm_reported, (claim.accepted_at, self._at), claim.claim_id)

    def _check_harm_numbers(self, claim: ClaimRecord, ev: Any) -> None:
        if ev.leading_blocks >= ev.required_blocks:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"harm reported with {ev.leading_blocks} leading blocks of {ev.required_blocks} "
                "required: by its own numbers the predicate still holds",
            )
        if claim.required is not None and ev.required_blocks != claim.required:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"harm reports required_blocks {ev.required_blocks}, but the claim's predicate "
                f"needs {claim.required}",
            )
        self._agree_with_blocks(claim, ev.leading_blocks, "harm")

    def _agree_with_blocks(self, claim: ClaimRecord, reported: int, what: str) -> None:
        """A loss report (harm or lost) must agree with the device-tier prefix the trace's
        blocks showed, when they showed one: the predicate fell, to exactly that many blocks."""
        if claim.present is None or claim.required is None or claim.phase is Phase.offloaded:
            return
        if claim.leading >= claim.required:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"{what} reported while the claim's blocks still hold {claim.leading} contiguous "
                f"leading blocks of {claim.required} required: the predicate still holds",
            )
        if reported != claim.leading:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"{what} reports {reported} leading blocks, but its blocks show {claim.leading}",
            )

    def _lost(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._agree_with_blocks(claim, ev.leading_blocks, "loss")  # demoted or expired too (class 7)
        self._advance(claim, Event.lose)
        claim.reported_leading = min(claim.reported_leading, ev.leading_blocks)
        if claim.required is not None and ev.leading_blocks >= claim.required:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"loss reported with {ev.leading_blocks} leading blocks of {claim.required} required: "
                "the predicate still holds",
            )
        self._settled_loss(claim)

    def _settled_loss(self, claim: ClaimRecord) -> None:
        if claim.phase is Phase.demoted:
            self._witness(TraceWitness.demoted_before_loss, (claim.settled_at, self._at), claim.claim_id)
        elif claim.phase is Phase.expired:
            self._witness(TraceWitness.expired_before_loss, (claim.settled_at, self._at), claim.claim_id)

    # --- time ---------------------------------------------------------------------------

    def _check_duration(self, claim: ClaimRecord, ev: Any) -> None:
        """A claim's promised duration is honoured: it may not expire before `duration_steps`
        engine steps / `duration_ms` milliseconds from acceptance (or its last satisfied reuse,
        with `refresh_on_hit`). A duration the trace gives no clock for is undecidable."""
        for duration, start, now, unit, scale in (
            (claim.duration_steps, claim.clock_step, ev.engine_step, "engine steps", 1),
            (claim.duration_ms, claim.clock_ns, ev.t_ns, "ms", _NS_PER_MS),
        ):
            if duration is None:
                continue
            if start is None or now is None:
                self.undecided.append(
                    Undecided(
                        f"{claim.claim_id}: expired with a duration of {duration} {unit}, but the "
                        f"trace gives no {'engine_step' if scale == 1 else 't_ns'} on its acceptance "
                        "and expiry, so the duration could not be checked",
                        self._at,
                    )
                )
            elif now - start < duration * scale:
                self._claim_fail(
                    claim,
                    R.duration,
                    f"expired {(now - start) / scale:g} {unit} after its clock started; it promised "
                    f"{duration} {unit}",
                )

    def _refresh(self, claim: ClaimRecord, ev: Any) -> None:
        """A satisfied reuse restarts a refresh-on-hit claim's clocks, never backwards: a hit
        stamped before the clock's start cannot shorten the promise. A hit with no clock value
        leaves that clock unknown (a later expiry is then undecidable)."""
        if claim.refresh_on_hit:
            claim.clock_step = _later(claim.clock_step, ev.engine_step)
            claim.clock_ns = _later(claim.clock_ns, ev.t_ns)

    # --- offload and restore ------------------------------------------------------------

    def _offloaded(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.offload)
        claim.offload_at = self._at
        claim.kv_restored = False
        claim.reported_leading = 0  # a restore must be confirmed anew

    def _restore_required(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        request = self.requests.get(request_id)
        if request_id in claim.pending:
            self._claim_fail(
                claim,
                R.offload_order,
                f"restore_required again for request {request_id} while its previous restoration "
                f"(at {claim.pending[request_id]}) has neither restored nor failed: a silent "
                "failure and retry (or fallback recompute) is not a restoration outcome",
                request_id,
            )
        if request is not None and claim.claim_id in request.failed:
            self._claim_fail(
                claim,
                R.offload_order,
                f"its restoration for request {request_id} already failed (at "
                f"{request.failed[claim.claim_id]}); a failure is never retried or recomputed into "
                "a satisfied reuse for the same request",
                request_id,
            )
        resuming = claim.phase is Phase.materialized
        self._advance(claim, Event.require_restore)
        if resuming and claim.phase is Phase.restoring_in_place:
            claim.kv_restored = False  # an in-place resume names its KV key anew too
        request = self._request_step(request_id, RequestEvent.reuse, request)
        if claim.pending is _NONE:
            claim.pending = {}
        claim.pending[request_id] = self._at
        request.note("restoring", claim.claim_id, self._at)

    def _take_pending(self, claim: ClaimRecord, request_id: str, what: str) -> int:
        at = claim.pending.pop(request_id, None) if claim.pending else None
        if at is None:
            self._claim_fail(
                claim,
                R.offload_order,
                f"{what} for request {request_id} without a pending resident_claim_restore_required "
                "of the same claim and request",
                request_id,
            )
        request = self.requests.get(request_id)
        if request is not None and request.restoring:
            request.restoring.pop(claim.claim_id, None)
        return at  # type: ignore[return-value]

    def _cancel_restorations(self, claim: ClaimRecord) -> None:
        """The claim left responsibility (demoted, expired, released) while restorations were
        pending: they are moot, and their requests may finish (as unsatisfied reuses)."""
        for request_id in claim.pending:
            request = self.requests.get(request_id)
            if request is not None and request.restoring:
                request.restoring.pop(claim.claim_id, None)
        claim.pending = _NONE

    def _restored(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        if request_id not in claim.pending:
            self._advance(claim, Event.restore)  # the lifecycle names the sharper rule first
            self._take_pending(claim, request_id, "restored")
        self._advance(claim, Event.restore)
        claim.kv_restored = True
        if ev.restored_blocks is not None:
            if ev.restored_blocks > claim.footprint:
                self._claim_fail(
                    claim,
                    R.offload_order,
                    f"restored {ev.restored_blocks} blocks, more than its footprint of {claim.footprint}",
                )
            claim.reported_leading = ev.restored_blocks
            if claim.present is not None:  # the restored blocks are back, named or not
                self._count_scan(len(claim.present))
                _assume_prefix(claim, ev.restored_blocks)
        if claim.profile.two_key:
            return  # the KV side is back; the pending restoration resolves on the checkpoint
        self._resolve_restore(claim, request_id, "restored")
        self._owe_confirmation(claim, claim.required)  # class 5: blocks confirm a restore

    def _resolve_restore(
        self, claim: ClaimRecord, request_id: str, what: str, *, in_place: bool = False
    ) -> None:
        required_at = self._take_pending(claim, request_id, what)
        request = self.requests.get(request_id)
        if request is not None:
            request.note("restored", claim.claim_id, self._at)
        if not in_place:  # the witness is of an offloaded claim restored before reuse
            self._restore_witness[f"{claim.claim_id}\0{request_id}"] = (
                claim.offload_at,
                required_at,
                self._at,
            )

    def _restoration_failed(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        event = _FAILURE_EVENT[ev.outcome]
        if request_id not in claim.pending:
            self._advance(claim, event)
            self._take_pending(claim, request_id, "restoration_failed")
        required_at = self._take_pending(claim, request_id, "restoration_failed")
        self._advance(claim, event)
        self._failure_named.add(claim.claim_id)
        request = self.requests.get(request_id)
        if request is not None:
            request.note("failed", claim.claim_id, self._at)
            if ev.outcome is RestorationOutcome.refusal:
                request.owed = (claim.claim_id, self._at)
                self._failure_witness[f"{claim.claim_id}\0{request_id}"] = (
                    claim.offload_at,
                    required_at,
                    self._at,
                )

    def _checkpoint_restored(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        recorded = claim.checkpoint
        restoring = claim.phase in (Phase.restoring, Phase.restoring_in_place)
        in_place = claim.phase is Phase.restoring_in_place
        if restoring and not claim.kv_restored:
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                "its checkpoint was restored before its KV blocks: a two-key claim needs both keys, "
                "resident_claim_restored first",
            )
        match = (
            recorded is not None
            and ev.boundary == recorded.boundary
            and ev.value_hash == recorded.value_hash
            and restoring
        )
        self._advance(claim, Event.restore_checkpoint_match if match else Event.restore_checkpoint_mismatch)
        if match:
            for request_id in list(claim.pending):
                self._resolve_restore(claim, request_id, "checkpoint_restored", in_place=in_place)
            self._owe_confirmation(claim, claim.required)

    def _confirm_restore(self, claim: ClaimRecord, request_id: str) -> None:
        """A satisfied reuse after a restore counts only if the restore was confirmed: the
        restore event's block count or the claim's own device-tier blocks reach the predicate."""
        required = claim.required
        if required is None:
            return
        shown = claim.leading if claim.present is not None else 0
        if max(shown, claim.reported_leading) < required:
            self._claim_fail(
                claim,
                R.offload_order,
                f"request {request_id} reports a satisfied reuse after a restore that nothing "
                f"confirmed: neither restored_blocks nor the claim's device-tier blocks show the "
                f"{required} leading blocks its predicate needs",
                request_id,
            )

    # --- requests and capacity ----------------------------------------------------------

    def _request_step(
        self, request_id: str, event: RequestEvent, request: RequestRecord | None = None
    ) -> RequestRecord:
        if request is None:
            request = self.requests.get(request_id)
        if request is None:
            phase = RequestPhase.finished if request_id in self.finished else REQUEST_INITIAL
        else:
            phase = request.phase
        result = _REQUEST_NEXT[event][phase]
        if type(result) is RequestViolation:
            self._request_fail(
                result.rule,
                request_id,
                f"request {request_id}: {result.message}",
                f"request {phase}",
                tuple(e.value for e in result.allowed),
            )
        if request is None:
            request = self._new_request(request_id, result)  # type: ignore[arg-type]
        else:
            if request.phase is RequestPhase.admitted and result is not RequestPhase.admitted:
                self._release_live(request)
            request.phase = result  # type: ignore[assignment]
        return request

    def _new_request(self, request_id: str, phase: RequestPhase, live: int = 0) -> RequestRecord:
        request = self.requests[request_id] = RequestRecord(phase, live)
        self.requests_seen += 1
        return request

    def _release_live(self, request: RequestRecord) -> None:
        self.admitted_live_blocks -= request.live
        request.live = 0

    def _admitted(self, ev: Any) -> None:
        request_id = ev.request_id
        if request_id in self.requests or request_id in self.finished:
            request = self._request_step(request_id, RequestEvent.admit)
            request.live = ev.active_live_blocks
        else:
            self._new_request(request_id, _ADMITTED, ev.active_live_blocks)
        self.admitted_live_blocks += ev.active_live_blocks
        self._check_occupancy(f"admitting request {request_id}", ev.active_live_blocks)
        if ev.claim_shared_blocks is not None:
            self._check_admission_fits(request_id, ev.active_live_blocks, ev.claim_shared_blocks)
        if not self._seen_admission:
            self._seen_admission = True
            self._witness(TraceWitness.active_served_without_claim_block, (self._at,))

    def _check_occupancy(self, what: str, live: int = 0, joining: ClaimRecord | None = None) -> None:
        """Seed 001 3.4: the pool is never overcommitted. The blocks of materialized preserving
        claims fit in the usable pool, and so does each admitted request's live KV. (Trace v1
        does not say which live blocks an admitted request shares with a claim's prefix, so
        protected + active is judged by the capacity proofs, not summed here.)

        Claims share blocks (several claims on one prefix object, or objects with a common
        prefix), so the footprint sum `resident_blocks` is only the cheap bound: past the pool,
        the blocks are counted once each (`_resident_held`) before the pool counts as
        overcommitted."""
        usable = self.usable_blocks
        if usable is None:
            return
        held = self.resident_blocks
        if held > usable:
            held = self._resident_held(joining)
        if held > usable or live > usable:
            self._fail(
                R.capacity_state,
                f"{what} overcommits the pool: {held} blocks held by materialized "
                f"preserving claims{f' and {live} live blocks' if live else ''} in {usable} usable blocks",
                subject="pool",
                state=f"pool: {held} held by claims of {usable} usable",
                allowed=("a refusal, or a demotion / expiry / release / offload first",),
                ids=(),
            )

    def _check_admission_fits(self, request_id: str, live: int, shared: int) -> None:
        """Seed 001 3.4 at an admission that says how many of its live blocks are claim-held
        (`claim_shared_blocks`): the protected blocks (of the leading positions the predicates
        of materialized preserving claims need, each block once) plus the request's other live
        blocks fit in the usable pool."""
        self._count_scan(len(self.claims))
        held = self._blocks_held_by(
            [c for c in self.claims.values() if c.profile.preserving and c.phase in _PROTECTING],
            predicate_only=True,
        )
        usable = self.usable_blocks
        if shared > live or shared > held:
            bound = f"its {live} live blocks" if shared > live else f"the {held} blocks the claims hold"
            problem = f"says claim_shared_blocks = {shared}, more than {bound}"
        elif usable is not None and held + live - shared > usable:
            problem = (
                f"overcommits the pool: {held} blocks held by materialized preserving claims and "
                f"{live - shared} further live blocks in {usable} usable blocks"
            )
        else:
            return
        self._request_fail(
            R.capacity_state,
            request_id,
            f"admitting request {request_id} {problem}",
            self._request_state(request_id, "admission"),
            ("a deferral, or a demotion / expiry / release / offload first",),
        )

    def _resident_held(self, joining: ClaimRecord | None) -> int:
        """Distinct device blocks of the materialized preserving claims (and `joining`, which is
        becoming one): each tracked block once, a claim without tracked blocks by its footprint."""

        def occupies(claim: ClaimRecord) -> bool:
            return claim.profile.preserving and (claim is joining or claim.phase in RESIDENT)

        blocks: set[int] = set()
        untracked = 0
        self._count_scan(len(self.claims))
        for claim in self.claims.values():
            if occupies(claim):
                self._count_scan(len(claim.blocks) + len(claim.also_held))
                blocks.update(claim.blocks)
                blocks.update(key for key, _ in claim.also_held)
                if claim.present is None:
                    untracked += claim.footprint
        return len(blocks) + untracked

    def _deferred(self, ev: Any) -> None:
        self._conflict(ev, RequestEvent.defer)

    def _refused(self, ev: Any) -> None:
        capacity = ev.reason is ConflictReason.capacity
        self._conflict(ev, RequestEvent.refuse_capacity if capacity else RequestEvent.refuse_restoration)

    def _conflict(self, ev: Any, event: RequestEvent) -> None:
        request_id = ev.request_id
        blocking = ev.blocking_claim_ids
        self._check_capacity(ev)
        if not blocking:
            self._request_fail(
                R.attribution,
                request_id,
                f"{self._event} for request {request_id} names no blocking claim",
                self._request_state(request_id, "blocking claims"),
                ("blocking_claim_ids naming the accepted claims that caused it",),
            )
        if len(set(blocking)) != len(blocking):
            self._request_fail(
                R.attribution,
                request_id,
                f"blocking_claim_ids names a claim twice: {blocking}",
                self._request_state(request_id, "blocking claims"),
                ("each blocking claim once",),
                *blocking,
            )
        request = self.requests.get(request_id)
        if ev.reason is ConflictReason.restoration_failed:
            self._check_failed_restoration_named(request_id, request, blocking)
        request = self._request_step(request_id, event, request)
        full = self._blame(request_id, blocking, event)
        if ev.reason is ConflictReason.restoration_failed:
            request.owed = None
            if event is RequestEvent.refuse_restoration:
                request.refused_at = self._at
                lines = self._failure_witness.pop(f"{blocking[0]}\0{request_id}", None)
                if lines is not None:
                    self._witness(
                        TraceWitness.restoration_failure_fail_closed, (*lines, self._at), blocking[0]
                    )
            return
        self._check_protected_term(ev, blocking)
        if TraceWitness.capacity_conflict_attributed not in self._complete:
            self._witness(
                TraceWitness.capacity_conflict_attributed,
                (*(self.claims[c].accepted_at for c in blocking), self._at),
                *blocking,
            )
            for claim in full:
                claim.blocked_while_full = claim.blocked_while_full or self._at
        if TraceWitness.footprint_accounted not in self._complete:
            self._witness(
                TraceWitness.footprint_accounted,
                (*(self.claims[c].accepted_at for c in blocking), self._at),
                *blocking,
            )

    def _check_failed_restoration_named(
        self, request_id: str, request: RequestRecord | None, blocking: list[str]
    ) -> None:
        """A conflict for a failed restoration names exactly the claim whose restoration failed
        for this request (the owed refusal, or after a deferral for it, the failed claim)."""
        owed = request.owed if request is not None else None
        failed = owed[0] if owed is not None else None
        if (
            failed is None
            and request is not None
            and request.phase is RequestPhase.deferred
            and request.failed
        ):
            failed = next(reversed(request.failed))
        if failed is None:
            self._request_fail(
                R.attribution,
                request_id,
                f"refusal of request {request_id} for a failed restoration, but no claim's "
                "restoration failed for this request with outcome refusal: a generic or "
                "unclaimed failure is not a claim-scoped cause",
                f"request {request.phase if request else RequestPhase.absent}",
                ("resident_claim_restoration_failed for this request first",),
                *blocking,
            )
        if list(blocking) != [failed]:
            self._request_fail(
                R.attribution,
                request_id,
                f"the refusal of request {request_id} must name exactly {failed}, whose "
                f"restoration failed; it names {blocking}",
                f"request {request.phase}; restoration of {failed} failed",  # type: ignore[union-attr]
                (f"blocking_claim_ids == [{failed!r}]",),
                *blocking,
                failed,  # type: ignore[arg-type]
            )

    def _blame(self, request_id: str, blocking: list[str], event: RequestEvent) -> list[ClaimRecord]:
        """Every blocking claim must be one the lifecycle allows to block; returns those whose
        blocks held the predicate at that moment."""
        full: list[ClaimRecord] = []
        for claim_id in blocking:
            claim = self._known(claim_id) or ClaimRecord(claim_id)
            if claim.unconfirmed is not None:
                self._unconfirmed(claim)  # a report its blocks never showed cannot cause a conflict
            result = claim.table[claim.phase][Event.block]
            if type(result) is lifecycle.Violation:
                raise self._lifecycle_violation(
                    claim,
                    result,
                    f"{self._event} for request {request_id} blames {claim_id}: {result.message}",
                    (request_id, *blocking),
                )
            if event is RequestEvent.refuse_restoration:
                self._failure_named.add(claim_id)
            if claim.present is not None and claim.required is not None and claim.leading >= claim.required:
                full.append(claim)
        return full

    def _check_capacity(self, ev: Any) -> None:
        numbers = tuple(getattr(ev, name) for name in CAPACITY_PROOF_FIELDS)
        if None in numbers:
            if ev.reason is ConflictReason.capacity:
                missing = [
                    name for name, value in zip(CAPACITY_PROOF_FIELDS, numbers, strict=True) if value is None
                ]
                self._request_fail(
                    R.capacity_arithmetic,
                    ev.request_id,
                    f"a capacity {self._event.removeprefix('active_request_')} without its capacity "
                    f"proof (missing {', '.join(missing)})",
                    self._request_state(ev.request_id, "capacity proof"),
                    ("all five capacity proof numbers",),
                )
            return  # a restoration conflict may omit its proof; a given one is checked below
        problem = capacity_problem(
            *numbers, capacity_reason=ev.reason is ConflictReason.capacity, header_usable=self.usable_blocks
        )
        if problem is not None:
            self._request_fail(
                R.capacity_arithmetic,
                ev.request_id,
                problem.message,
                self._request_state(ev.request_id, "capacity proof"),
                (problem.required,),
            )
        if self.usable_blocks is None:
            self.usable_blocks = ev.usable_blocks  # the pool every later proof must quote

    def _check_protected_term(self, ev: Any, blocking: list[str]) -> None:
        """The protected term is what the responsible preserving claims actually reserve: no
        more than their footprints together, and at least the device blocks the blocking claims
        hold, each block once (a claim whose blocks are not in the protected term did not cause
        the conflict)."""
        protected = ev.protected_resident_blocks
        if protected > self.reserved_blocks:
            self._request_fail(
                R.capacity_state,
                ev.request_id,
                f"protected_resident_blocks is {protected}, but the responsible preserving claims "
                f"reserve only {self.reserved_blocks} blocks",
                f"pool: {self.reserved_blocks} reserved",
                (f"protected_resident_blocks <= {self.reserved_blocks}",),
                *blocking,
            )
        claims = [self.claims[claim_id] for claim_id in blocking]
        self._count_scan(sum(len(claim.present or b"") for claim in claims))
        if sum(_holdings_bound(claim) for claim in claims) > protected:
            holds = self._blocks_held_by(claims)
            if holds > protected:
                self._request_fail(
                    R.capacity_state,
                    ev.request_id,
                    f"the blocking claims {', '.join(blocking)} hold {holds} device blocks, but "
                    f"protected_resident_blocks = {protected} leaves some of them out",
                    f"blocking claims hold {holds}",
                    (f"protected_resident_blocks >= {holds}",),
                    *blocking,
                )
        for claim_id, claim in zip(blocking, claims, strict=True):
            if claim.phase not in RESERVING:
                self._request_fail(
                    R.capacity_state,
                    ev.request_id,
                    f"{claim_id} is blamed for a capacity conflict but reserves no device blocks "
                    f"(it is {claim.phase})",
                    f"claim {claim_id} {claim.phase}",
                    ("blocking claims that reserve device blocks",),
                    claim_id,
                )

    def _blocks_held_by(self, claims: list[ClaimRecord], predicate_only: bool = False) -> int:
        """Distinct device blocks the claims hold: each tracked block once, however many of
        them share it, plus the positions assumed from their materialized reports. With
        `predicate_only`, only the blocks of the leading positions their predicates need (what
        victim exclusion protects: a block past the predicate may be evicted without harm)."""
        upto = {
            claim: claim.required if predicate_only and claim.required is not None else claim.footprint
            for claim in claims
        }
        keys: set[int] = set()
        for claim, top in upto.items():
            self._count_scan(len(claim.blocks) + len(claim.also_held) + top)
            keys.update(key for key, position in claim.blocks.items() if position < top)
            keys.update(key for key, position in claim.also_held if position < top)
        assumed = sum(
            min(claim.reported_leading, top) if claim.present is None else claim.present[:top].count(ASSUMED)
            for claim, top in upto.items()
        )
        return len(keys) + assumed

    def _reused(self, ev: Any) -> None:
        claim = self.claims.get(ev.claim_id) or self._claim(ev.claim_id)
        request_id = ev.request_id
        request = self.requests.get(request_id)
        satisfied = ev.predicate_satisfied
        if satisfied and request is not None and claim.claim_id in request.failed:
            self._claim_fail(
                claim,
                R.offload_order,
                f"request {request_id} reports a satisfied reuse although its restoration failed "
                f"(at {request.failed[claim.claim_id]}): a fallback recompute is not a restoration",
                request_id,
            )
        self._advance(claim, Event.reuse_satisfied if satisfied else Event.reuse_unsatisfied)
        if satisfied and claim.required is not None and ev.cached_blocks < claim.required:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"request {request_id} reports the predicate satisfied with {ev.cached_blocks} cached "
                f"blocks; it needs {claim.required}",
                request_id,
            )
        if satisfied and claim.profile.two_key and ev.checkpoint is not None:
            self._check_resumed_state(claim, ev)
        request = self._request_step(request_id, RequestEvent.reuse, request)
        if satisfied:
            self._refresh(claim, ev)
            if request.restored and claim.claim_id in request.restored:
                self._confirm_restore(claim, request_id)
                self._served_after_restore(claim.claim_id, request_id, request)

    def _check_resumed_state(self, claim: ClaimRecord, ev: Any) -> None:
        """A two-key claim resumed in place (its state copied from the device tier into the
        request's live slot): a satisfied reuse needs the restored state's value to be the one
        recorded at materialization (seed 002: payload equality is not state identity)."""
        recorded, resumed = claim.checkpoint, ev.checkpoint
        if recorded is None or (resumed.boundary, resumed.value_hash) != (
            recorded.boundary,
            recorded.value_hash,
        ):
            expected = "no checkpoint" if recorded is None else f"value_hash {recorded.value_hash}"
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                f"request {ev.request_id} reports a satisfied resume whose restored state has "
                f"value_hash {resumed.value_hash} at boundary {resumed.boundary}; materialization "
                f"recorded {expected}: the state identity key does not hold",
                ev.request_id,
            )

    def _served_after_restore(self, claim_id: str, request_id: str, request: RequestRecord) -> None:
        if request.restored.pop(claim_id, None) is None:
            return
        lines = self._restore_witness.pop(f"{claim_id}\0{request_id}", None)
        if lines is not None:
            self._witness(TraceWitness.restore_before_reuse, (*lines, self._at), claim_id)

    def _request_finished(self, ev: Any) -> None:
        request_id = ev.request_id
        request = self.requests.get(request_id)
        if request is not None:
            if request.owed is not None:
                claim_id, at = request.owed
                self._request_fail(
                    R.attribution,
                    request_id,
                    f"request {request_id} finished, but the restoration of {claim_id} failed with "
                    f"outcome refusal (at {at}) and the request was never refused or deferred: the "
                    "fail-closed outcome must come before request termination",
                    f"request {request.phase}; owes a refusal naming {claim_id}",
                    ("active_request_refused",),
                    claim_id,
                )
            if request.restoring:
                claim_id, at = next(iter(request.restoring.items()))
                self._request_fail(
                    R.offload_order,
                    request_id,
                    f"request {request_id} finished while its restoration of {claim_id} (at {at}) "
                    "never restored or failed: served without restoration (fallback recompute?)",
                    f"request {request.phase}; restoring {claim_id}",
                    ("resident_claim_restored", "resident_claim_restoration_failed"),
                    claim_id,
                )
        request = self._request_step(request_id, RequestEvent.finish, request)
        self._release_live(request)
        if request.restored and not request.refused_at:
            for claim_id in list(request.restored):
                self._served_after_restore(claim_id, request_id, request)
        del self.requests[request_id]
        self.finished.add(request_id)

    # --- blocks -------------------------------------------------------------------------

    def _block_claim(self, ev: Any) -> ClaimRecord | None:
        claim_id = ev.claim_id
        if claim_id is None:
            return None
        claim = self._known(claim_id)
        if claim is None or claim.phase is INITIAL:
            self._fail(
                R.identity,
                f"{self._event} names claim {claim_id}, which was never submitted or accepted "
                "(post-hoc claim naming)",
                subject=f"claim {claim_id}",
                state=lifecycle.describe(_UNDECIDED, Phase.absent),
                allowed=("resident_claim_accepted first",),
                ids=(claim_id,),
            )
        assert claim is not None
        # A retired claim keeps its phase, profile and footprint: its blocks may still be named
        # (post-release loss is legal, seed 001 table 4), within its footprint (if terms were known).
        known_footprint = claim.footprint or claim.phase not in _RETIRED
        if ev.position is not None and known_footprint and ev.position >= claim.footprint:
            self._claim_fail(
                claim,
                R.identity,
                f"{self._event} at position {ev.position}, outside its {claim.footprint}-block footprint",
            )
        return claim

    def _block_stored(self, ev: Any) -> None:
        claim_id = ev.claim_id
        position = ev.position
        claim = None if claim_id is None else self.claims.get(claim_id)
        key = ev.block_id
        if (
            claim is None
            or position is None
            or ev.cache_level is not None
            or claim.present is None
            or position >= claim.footprint
            or key in self.block_hash
        ):
            self._block_stored_rarely(ev)
            return
        self.block_hash[key] = ev.block_hash
        self._track(claim, key, position)

    def _block_stored_rarely(self, ev: Any) -> None:
        """The paths the hot one leaves out: unclaimed or host-tier blocks, a claim's first
        block, a block id already stored, a retired or undecided claim, and identity errors."""
        claim = self._block_claim(ev)
        level = ev.cache_level
        if level is not None and level.lower() not in DEVICE_CACHE_LEVELS:
            return
        key = ev.block_id
        held = self.block_hash.get(key)
        if held is not None and held != ev.block_hash:
            self._lose_owners(key)  # different content in a held block id: a loss for its holders
        self.block_hash[key] = ev.block_hash
        if claim is None or ev.position is None or not self._tracks(claim):
            return
        self._start_tracking(claim)
        self._track(claim, key, ev.position)

    @staticmethod
    def _tracks(claim: ClaimRecord) -> bool:
        """Whether the model follows the claim's blocks: from its acceptance until it retires
        (a submitted, rejected, released or harmed claim's blocks are ordinary cache)."""
        return claim.phase not in _RETIRED and claim.phase is not Phase.submitted

    def _start_tracking(self, claim: ClaimRecord) -> None:
        """At a claim's first claim-scoped block event: its presence map, holding the prefix
        it reported materialized (whatever phase it is in now: a demotion does not remove
        blocks, so neither a later partial store nor a named removal resets that prefix)."""
        if claim.present is not None:
            return
        claim.present = self._prefix_map(claim)
        if claim.reported_leading:
            _assume_prefix(claim, claim.reported_leading)
        if TraceWitness.claim_scoped_blocks not in self._complete:
            self._witness(TraceWitness.claim_scoped_blocks, (claim.accepted_at, self._at), claim.claim_id)

    def _track(self, claim: ClaimRecord, key: int, position: int) -> None:
        """Block `key` (its content already recorded) now holds `position` of `claim`'s prefix,
        beside its other holders."""
        owner = self.block_owner.get(key)
        if owner is None:
            self.block_owner[key] = claim
            claim.blocks[key] = position
        elif owner is claim and claim.blocks[key] == position:
            return  # the same block stored again: no new holder
        else:
            shared = self.shared_owners.setdefault(key, [])
            if (claim, position) in shared:
                return
            shared.append((claim, position))
            if claim.also_held is _NO_PAIRS:
                claim.also_held = set()
            claim.also_held.add((key, position))
        present = claim.present
        count = present[position]  # type: ignore[index]
        if count == 0 or count == ASSUMED:
            present[position] = 1  # type: ignore[index]
            if count == 0 and position == claim.leading:
                self._extend_leading(claim)
        elif count == _MAX_HOLDERS:
            raise OutOfBudget(f"more than {_MAX_HOLDERS} device blocks holding one claim position")
        else:
            present[position] = count + 1  # type: ignore[index]

    def _extend_leading(self, claim: ClaimRecord) -> None:
        present: bytearray = claim.present  # type: ignore[assignment]
        start = claim.leading + 1
        footprint = claim.footprint
        leading = present.find(0, start, footprint)  # one C scan, however long the run
        if leading < 0:
            leading = footprint
        self._count_scan(leading - start)
        claim.leading = leading
        if claim.unconfirmed is not None and leading >= claim.unconfirmed[0]:
            claim.unconfirmed = None
        required = claim.required
        if claim.phase is Phase.accepted and required is not None and leading >= required:
            # the claim's own blocks show its predicate: it is materialized, reported or not
            self._advance(claim, Event.materialize)

    def _owners_of(self, key: int) -> list[tuple[ClaimRecord, int]]:
        """Every (claim, position) block `key` held, forgetting them (not its content)."""
        owner = self.block_owner.pop(key, None)
        if owner is None:
            return []
        owned = [(owner, owner.blocks.pop(key))]
        if self.shared_owners:
            for holder, position in self.shared_owners.pop(key, ()):
                holder.also_held.discard((key, position))
                owned.append((holder, position))
        return owned

    def _lose_owners(self, key: int) -> bool:
        """Block `key` left the device tier (or now holds other content); False when no claim
        held it."""
        owned = self._owners_of(key)
        for claim, position in owned:
            self._lose(claim, position)
        return bool(owned)

    def _block_removed(self, ev: Any) -> None:
        if ev.claim_id is not None or ev.cache_level is not None:
            self._block_removed_rarely(ev)
            return
        self._forget_content(ev)
        if not self._lose_owners(ev.block_id) and not self._seen_eviction:
            self._seen_eviction = True
            self._witness(TraceWitness.ordinary_eviction_without_claim, (self._at,))

    def _forget_content(self, ev: Any) -> str | None:
        """A removal takes the block's recorded content with it; it must name that content
        (C4: a block is its id and its hash). Returns the content, None for an unknown id."""
        held = self.block_hash.get(ev.block_id)
        if held is not None and held != ev.block_hash:
            owner = self.block_owner.get(ev.block_id)
            self._fail(
                R.block_identity,
                f"block_removed says block {ev.block_id} held {ev.block_hash!r}, but it was stored "
                f"with {held!r}: a block is its id and its content",
                subject=f"block {ev.block_id}",
                state=f"block {ev.block_id} holds {held!r}",
                allowed=(f"block_hash == {held!r}",),
                ids=() if owner is None else (owner.claim_id,),
            )
        self.block_hash.pop(ev.block_id, None)
        return held

    def _block_removed_rarely(self, ev: Any) -> None:
        claim = self._block_claim(ev)
        level = ev.cache_level
        if level is not None and level.lower() not in DEVICE_CACHE_LEVELS:
            return
        known = self._forget_content(ev) is not None
        owned = self._owners_of(ev.block_id)
        position = ev.position
        if claim is not None and position is not None and self._tracks(claim):
            if known and not any(o is claim and p == position for o, p in owned):
                holders = ", ".join(f"{o.claim_id}@{p}" for o, p in owned) or "no claim"
                self._claim_fail(
                    claim,
                    R.block_identity,
                    f"block_removed names position {position} of {claim.claim_id}, but block "
                    f"{ev.block_id} was stored for {holders}",
                )
            if not known:  # a block the trace never stored, named for one of the claim's positions
                self._start_tracking(claim)
                count = claim.present[position]  # type: ignore[index]
                if count and count != ASSUMED:
                    self._claim_fail(
                        claim,
                        R.block_identity,
                        f"block_removed names position {position} of {claim.claim_id} in block "
                        f"{ev.block_id}, which the trace never stored, while that position is "
                        "stored in another block: the removal cannot be attributed",
                    )
                owned = [(claim, position)]
        if not owned:
            self._witness(TraceWitness.ordinary_eviction_without_claim, (self._at,))
        for owner, held_position in owned:  # a removal affects every holder, whichever it names
            self._lose(owner, held_position)

    def _count_scan(self, entries: int) -> None:
        """Charge a walk over `entries` blocks, claims or prefix positions (an exact count of
        shared blocks, a leading prefix re-extended after a loss, a restored prefix) to the
        scan budget: `SCAN_ALLOWANCE` plus `SCAN_PER_STEP` per step so far. Each walk is linear
        in the claim it concerns, so a trace that forces a long one at every event (a loss and
        re-store of position 0 of a long prefix, counts among sharing claims) is undecidable
        (`OutOfBudget`) rather than quadratic."""
        self.scanned += entries
        steps = self.steps if self._run_end is None else self.steps - (self._run_end - self._at - 1)
        if self.scanned > SCAN_ALLOWANCE + SCAN_PER_STEP * steps:
            raise OutOfBudget(
                f"walks over claim blocks and prefixes visited more than {SCAN_ALLOWANCE:,} + "
                f"{SCAN_PER_STEP} per event ({self.scanned:,} after {steps:,} events)"
            )

    def _prefix_map(self, claim: ClaimRecord) -> bytearray:
        """A fresh presence map for `claim`, counted against `max_prefix_positions`."""
        size = max(claim.footprint, claim.reported_leading)
        if self.prefix_positions + size > self.max_prefix_positions:
            raise OutOfBudget(f"claim prefixes spanning more than {self.max_prefix_positions} blocks")
        self.prefix_positions += size
        return bytearray(size)

    def _lose(self, claim: ClaimRecord, position: int) -> None:
        """One block holding `position` of `claim`'s prefix is gone; the position is gone when
        no other block holds it, and a drop below the predicate is the lifecycle's
        `predicate_broken`."""
        present = claim.present
        if present is None:
            return  # retired, or never tracked
        count = present[position]
        if 1 < count < ASSUMED:
            present[position] = count - 1  # another block still holds it
            return
        present[position] = 0
        if position >= claim.leading:
            return
        before = claim.leading
        claim.leading = position
        required = claim.required
        if required is not None and before >= required > position:
            if claim.phase in RESPONSIBLE:
                claim.broken_while_responsible = True
            self._advance(claim, Event.predicate_broken)
            self._settled_loss(claim)

    def _fault(self, ev: Any) -> None:
        """A fault injection is context for the counterexample, not a model step."""
        self.steps -= 1

    # --- witnesses ----------------------------------------------------------------------

    def _witness(self, kind: TraceWitness, lines: tuple[int, ...], *claim_ids: str) -> None:
        """Record that `kind` was exercised: the first positions that show it, and (up to a
        bound) every claim it was shown for."""
        found = self.witnessed.get(kind)
        if found is None:
            found = self.witnessed[kind] = (tuple(sorted({line for line in lines if line})), set(claim_ids))
        elif len(found[1]) < _MAX_WITNESS_CLAIMS:
            found[1].update(claim_ids)
        if not claim_ids or len(found[1]) >= _MAX_WITNESS_CLAIMS:
            self._complete.add(kind)

    def _settle_witnesses(self) -> None:
        for claim in self.claims.values():
            if claim.blocked_while_full and not claim.broken_while_responsible:
                self._witness(
                    TraceWitness.protected_under_pressure,
                    (claim.accepted_at, claim.blocked_while_full),
                    claim.claim_id,
                )
        failed = self.witnessed.get(TraceWitness.restoration_failure_fail_closed)
        restored = self.witnessed.get(TraceWitness.restore_before_reuse)
        if failed is not None and restored is not None:
            clean = [c for c in restored[1] if c not in self._failure_named]
            if clean:
                self._witness(
                    TraceWitness.multi_claim_attribution,
                    (*failed[0], *restored[0]),
                    *sorted(failed[1]),
                    *clean,
                )

    # --- end of trace -------------------------------------------------------------------

    def _finish(self) -> None:
        self._at = 0
        self._event = END_OF_TRACE
        for claim in self.claims.values():
            if claim.unconfirmed is not None:
                self._unconfirmed(claim)
            owed = lifecycle.at_end(claim.phase)
            if owed is not None:
                raise self._lifecycle_violation(claim, owed)
        for request_id, request in self.requests.items():
            if request.owed is not None:
                claim_id, at = request.owed
                self._at = at
                self._request_fail(
                    R.attribution,
                    request_id,
                    f"the restoration of {claim_id} for request {request_id} failed with outcome "
                    "refusal, but the trace ended before the request was refused",
                    f"request {request.phase}",
                    ("active_request_refused",),
                    claim_id,
                )
        self._settle_witnesses()


_ASSUME = bytes(ASSUMED if count == 0 else count for count in range(256))


def _assume_prefix(claim: ClaimRecord, blocks: int) -> None:
    """The claim's first `blocks` positions are on the device though no block event named them
    (a materialized report before any of its blocks was seen, a restore's `restored_blocks`):
    each position no block holds is `ASSUMED`, so neither a later partial store nor a named
    removal can reset it (ignoring it would pass a silent harm)."""
    present = claim.present
    present[:blocks] = present[:blocks].translate(_ASSUME)  # type: ignore[index]
    gap = present.find(0)  # type: ignore[union-attr]
    claim.leading = min(claim.footprint, len(present) if gap < 0 else gap)  # type: ignore[arg-type]


def _holdings_bound(claim: ClaimRecord) -> int:
    """At least the device blocks `claim` holds (exactly, unless blocks are shared): one per
    block holding one of its positions, one per position assumed from its materialized report."""
    present = claim.present
    if present is None:
        return claim.reported_leading
    return sum(present) - (ASSUMED - 1) * present.count(ASSUMED)


def _show_terms(terms: tuple[Any, ...]) -> str:
    owner, obj, mode, predicate, footprint, steps, ms, refresh = terms
    shown = f"owner {owner}, object {obj}, mode {mode}, predicate {predicate}, footprint {footprint}"
    if steps is not None or ms is not None or refresh:
        shown += f", duration {steps} steps / {ms} ms, refresh_on_hit {refresh}"
    return shown


_RULES: Mapping[str, Callable[[SystemState, Any], None]] = MappingProxyType(
    {
        "resident_claim_submitted": SystemState._submitted,
        "resident_claim_accepted": SystemState._accepted,
        "resident_claim_conditionally_accepted": SystemState._conditionally_accepted,
        "resident_claim_rejected": SystemState._rejected,
        "resident_claim_materialized": SystemState._materialized,
        "resident_claim_demoted": SystemState._demoted,
        "resident_claim_expired": SystemState._expired,
        "resident_claim_released": SystemState._released,
        "resident_claim_harmed": SystemState._harmed,
        "resident_claim_lost": SystemState._lost,
        "resident_claim_offloaded": SystemState._offloaded,
        "resident_claim_restore_required": SystemState._restore_required,
        "resident_claim_restored": SystemState._restored,
        "resident_claim_restoration_failed": SystemState._restoration_failed,
        "resident_claim_checkpoint_restored": SystemState._checkpoint_restored,
        "active_request_admitted": SystemState._admitted,
        "active_request_deferred": SystemState._deferred,
        "active_request_refused": SystemState._refused,
        "request_reused": SystemState._reused,
        "request_finished": SystemState._request_finished,
        "block_stored": SystemState._block_stored,
        "block_removed": SystemState._block_removed,
        "fault_injected": SystemState._fault,
    }
)
"""The rule that judges each trace v1 event type."""

EVENT_TYPES: frozenset[str] = frozenset(_RULES)
"""The event types the model steps on (every trace v1 type)."""


# --- the model's API ------------------------------------------------------------------------


def init(header: Header, *, max_prefix_positions: int = 8_000_000) -> SystemState:
    """The state before any event: no claims, requests or blocks; the header's pool.
    `max_prefix_positions` bounds the claims' presence maps (`OutOfBudget` past it)."""
    return SystemState(header.usable_blocks, header.block_size, max_prefix_positions)


_NAME_OF: dict[type, str] = {}
"""Event class -> event name, as classes are first met."""
_HOT_TYPES: dict[str, type] = {}
"""The event classes `step_run` inlines, by event name, as they are first met."""


def _handler(state: SystemState, cls: type) -> Callable[[Any], None]:
    handler = state._handlers.get(cls)
    if handler is None:
        config = getattr(cls, "__struct_config__", None)
        name = config.tag if config is not None else cls.model_fields["event"].default  # type: ignore[attr-defined]
        if name not in _RULES:
            raise NotAStep(0, name)
        if config is not None:
            _HOT_TYPES.setdefault(name, cls)
        _NAME_OF[cls] = name
        handler = state._handlers[cls] = _RULES[name].__get__(state)
    return handler


def step(state: SystemState, event: Any, at: int = 0) -> SystemState | Violation:
    """Judge one event: the advanced state (the same object, mutated), or the violation.
    Raises `NotAStep` for an event the model has no rule for."""
    state._at = at
    handler = _handler(state, type(event))
    state.steps += 1
    state._run_end = at + 1
    try:
        state._event = _NAME_OF[type(event)]
        handler(event)
    except _Stop as stop:
        return stop.violation
    except OutOfBudget as exhausted:
        state.steps -= 1
        exhausted.at = at
        raise
    finally:
        state._run_end = None
    return state


def step_run(state: SystemState, events: Sequence[Any], at: int) -> Violation | None:
    """`step` over consecutive events, `events[i]` at position `at + i`: None when all are
    legal, else the first violation (`state.steps` then counts only the events up to it).

    The two commonest cases are inlined (a tracked claim's block stored in a fresh block id,
    a block removed that no claim holds or that leaves its claim's leading prefix intact, a
    legal finish that owes nothing, a fresh admission that fits): they are most of a typical
    trace and need neither the lifecycle nor a violation location.

    Raises `NotAStep` at the first event the model has no rule for, and `OutOfBudget` at the
    first that exhausts a budget (the steps before it count)."""
    owners = state.block_owner
    hashes = state.block_hash
    shared = state.shared_owners
    requests = state.requests
    finished = state.finished
    claims_get = state.claims.get
    handlers = state._handlers
    seen_eviction = state._seen_eviction
    usable = state.usable_blocks
    hot = _HOT_TYPES
    accepted_phase = Phase.accepted
    stored = hot.get("block_stored")
    removed = hot.get("block_removed")
    admitted = hot.get("active_request_admitted")
    finished_type = hot.get("request_finished")
    state.steps += len(events)
    state._run_end = at + len(events)
    offset = -1
    try:
        for offset, event in enumerate(events):
            cls = type(event)
            if cls is stored:
                claim_id = event.claim_id
                key = event.block_id
                if claim_id is None:
                    if key not in owners:
                        hashes[key] = event.block_hash  # an unclaimed block in an id no claim holds
                        continue
                else:
                    position = event.position
                    claim = claims_get(claim_id)
                    if (
                        claim is not None
                        and position is not None
                        and event.cache_level is None
                        and position < claim.footprint
                        and claim.present is not None
                        and key not in hashes
                        and not claim.present[position]
                    ):
                        owners[key] = claim
                        claim.blocks[key] = position
                        hashes[key] = event.block_hash
                        present = claim.present
                        present[position] = 1
                        if position == claim.leading:
                            footprint = claim.footprint
                            leading = present.find(0, position + 1, footprint)
                            if leading < 0:
                                leading = footprint
                            if leading - position > SCAN_PER_STEP:
                                state._at = at + offset
                                state._count_scan(leading - position)
                            claim.leading = leading
                            required = claim.required
                            if claim.unconfirmed is not None or (
                                claim.phase is accepted_phase and required is not None and leading >= required
                            ):
                                claim.leading = position
                                state._at, state._event = at + offset, "block_stored"
                                state._extend_leading(claim)
                        continue
            elif cls is removed and event.claim_id is None and event.cache_level is None and not shared:
                key = event.block_id
                held = hashes.get(key)
                if held is not None and held != event.block_hash:
                    pass  # a different content: the slow path names the rule
                elif (owner := owners.pop(key, None)) is None:
                    if held is not None:
                        del hashes[key]
                    if seen_eviction:
                        continue
                    seen_eviction = True
                else:
                    del hashes[key]
                    position = owner.blocks.pop(key)
                    present = owner.present
                    if present is None or (position >= owner.leading and present[position] == 1):
                        if present is not None:
                            present[position] = 0
                        continue
                    state._at, state._event = at + offset, "block_removed"
                    state._lose(owner, position)
                    continue
            elif cls is finished_type:
                request_id = event.request_id
                request = requests.get(request_id)
                if (
                    request is not None
                    and request.phase in _FINISHED_FROM
                    and request.owed is None
                    and not request.restoring
                    and not request.restored
                ):
                    state.admitted_live_blocks -= request.live
                    del requests[request_id]  # a legal finish that owes nothing
                    finished.add(request_id)
                    continue
            elif cls is admitted and state._seen_admission and event.claim_shared_blocks is None:
                request_id = event.request_id
                live = event.active_live_blocks
                if (
                    request_id not in requests
                    and request_id not in finished
                    and (usable is None or live <= usable)
                ):
                    requests[request_id] = RequestRecord(_ADMITTED, live)
                    state.admitted_live_blocks += live
                    state.requests_seen += 1
                    continue
            state._at = at + offset
            handler = handlers.get(cls) or _handler(state, cls)
            state._event = _NAME_OF[cls]
            handler(event)
            usable = state.usable_blocks
    except _Stop as stop:
        state._seen_eviction = seen_eviction
        state.steps -= len(events) - offset - 1
        return stop.violation
    except NotAStep as stop:
        state._seen_eviction = seen_eviction
        state.steps -= len(events) - offset
        raise NotAStep(offset, stop.name) from None
    except OutOfBudget as exhausted:
        state._seen_eviction = seen_eviction
        state.steps -= len(events) - offset
        exhausted.at = at + offset
        raise
    finally:
        state._run_end = None
    state._seen_eviction = seen_eviction
    return None


def finish(state: SystemState) -> Violation | None:
    """The end-of-trace hook: what the trace still owes (harm reports, failure outcomes,
    materialization confirmations, owed refusals). Settles the witnesses that need the whole
    trace; call once, after the last `step`."""
    try:
        state._finish()
    except _Stop as stop:
        return stop.violation
    return None


def witnesses(state: SystemState) -> tuple[tuple[TraceWitness, tuple[int, ...], tuple[str, ...]], ...]:
    """What the trace exercised so far: (kind, positions that show it, claim ids), in
    `TraceWitness` order."""
    order = list(TraceWitness)
    return tuple(
        (kind, lines, tuple(sorted(claim_ids)))
        for kind, (lines, claim_ids) in sorted(state.witnessed.items(), key=lambda kv: order.index(kv[0]))
    )


def retired_phase(state: SystemState, claim_id: str) -> Phase | None:
    """The phase of a claim that left the live set (released, harmed, rejected), else None."""
    code = state.retired.get(claim_id)
    return None if code is None else _RETIRED_STATES[(code & _LOW) % _RETIRED_KINDS][0]


def claims_seen(state: SystemState) -> int:
    return len(state.claims) + len(state.retired)


def describe(state: SystemState) -> str:
    """A short human summary of the state (for counterexamples and debugging)."""
    phases: dict[str, int] = {}
    for claim in state.claims.values():
        phases[claim.phase.value] = phases.get(claim.phase.value, 0) + 1
    shown = ", ".join(f"{count} {phase}" for phase, count in sorted(phases.items())) or "none"
    return (
        f"claims: {shown}; {len(state.retired)} retired; requests: {len(state.requests)} live; "
        f"blocks tracked: {len(state.block_owner)}; pool: {state.reserved_blocks} reserved + "
        f"{state.admitted_live_blocks} live of {'?' if state.usable_blocks is None else state.usable_blocks}"
    )


def _later(clock: int | None, stamp: int | None) -> int | None:
    """The restarted clock: the hit's stamp, or the old start if that is later."""
    return None if stamp is None else stamp if clock is None else max(clock, stamp)
