"""The refinement checker: trace v1 steps replayed through the lifecycle machines.

One semantics: every claim step is judged by `kvclaims.statemachine.lifecycle.step` and every
request step by `kvclaims.statemachine.requests.request_step` (their answers are tabulated once
per claim profile, so the hot loop is a dictionary lookup, not a second copy of the rules).
What the machines cannot see is checked here, and only here:

- identity: claim ids resolve to claims decided earlier; accepted terms match submitted ones;
  block events name existing claims inside their footprint;
- capacity arithmetic of refusals and deferrals, and `usable_blocks` against the header;
- attribution: blocking ids are non-empty and distinct; a refusal for a failed restoration
  names exactly the claim whose restoration failed for that request, before the request ends;
- offload order across requests: `restored` / `restoration_failed` match a pending
  `restore_required` of the same claim and request; a failed restoration is never retried,
  recomputed or reused as satisfied by that request; no request finishes with a restoration
  unresolved;
- block tracking: the device-tier leading prefix of every claim whose block events carry
  `claim_id` and `position`; a drop below the predicate is the lifecycle's `predicate_broken`,
  a harm report while the prefix still satisfies the predicate is rejected, and a
  materialization report must be confirmed by the claim's blocks before its next event;
- the two-key checkpoint: only `value_hash` equality with the materialization checkpoint is a
  match.

Every rejection raises `Rejection` with the counterexample (without its minimal prefix, which
`kvclaims.refinement.api` derives afterwards). Memory is bounded by live claims, live requests
and tracked blocks (`Budget`); finished request ids are kept as 8-byte hashes (`RetiredIds`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import msgspec

from kvclaims.refinement.decoding import EVENT_NAME, EVENT_STRUCTS
from kvclaims.refinement.reader import TraceInputError, unknown_event_finding
from kvclaims.refinement.verdict import Counterexample, ErrorClass, Finding, Witness
from kvclaims.spec.capacity import capacity_problem
from kvclaims.spec.claims import HybridTwoKey
from kvclaims.spec.ids import RetiredIds
from kvclaims.spec.tables import DEVICE_CACHE_LEVELS
from kvclaims.spec.trace import CAPACITY_PROOF_FIELDS, ConflictReason, RestorationOutcome
from kvclaims.spec.vocabulary import ConformanceRule, ProtectionMode, TraceWitness
from kvclaims.statemachine.lifecycle import (
    ALL_PROFILES,
    INITIAL,
    RESPONSIBLE,
    RETIRED,
    ClaimProfile,
    Event,
    Phase,
    Violation,
    at_end,
    describe,
    step,
)
from kvclaims.statemachine.requests import (
    REQUEST_INITIAL,
    RequestEvent,
    RequestPhase,
    RequestViolation,
    request_step,
)

R = ConformanceRule

_NONE: dict[str, int] = MappingProxyType({})  # type: ignore[assignment]
"""The shared, read-only empty map a claim or request starts with (most never need one)."""

_ClaimTable = Mapping[Phase, Mapping[Event, "Phase | Violation"]]


def _tabulate(profile: ClaimProfile) -> _ClaimTable:
    return MappingProxyType(
        {phase: MappingProxyType({event: step(profile, phase, event) for event in Event}) for phase in Phase}
    )


_UNDECIDED = ClaimProfile(preserving=False, offloadable=False, two_key=False)
"""The profile used before a claim is decided; the lifecycle ignores it for absent claims."""

LIFECYCLE_TABLES: Mapping[ClaimProfile, _ClaimTable] = MappingProxyType(
    {profile: _tabulate(profile) for profile in {*ALL_PROFILES, _UNDECIDED}}
)
"""`lifecycle.step`, evaluated once for every profile, phase and event."""

_PROFILES: tuple[ClaimProfile, ...] = tuple(sorted({*ALL_PROFILES, _UNDECIDED}, key=repr))
"""Every profile a claim can have, in a fixed order (a claim keeps its rank in it)."""
_RANK: Mapping[ClaimProfile, int] = MappingProxyType(
    {profile: rank for rank, profile in enumerate(_PROFILES)}
)

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

_FAILURE_EVENT = {
    RestorationOutcome.refusal: Event.fail_restoration_refusal,
    RestorationOutcome.demotion: Event.fail_restoration_demotion,
    RestorationOutcome.expiry: Event.fail_restoration_expiry,
    RestorationOutcome.harm: Event.fail_restoration_harm,
}
_REQUEST_NEXT: Mapping[RequestEvent, Mapping[RequestPhase, RequestPhase | RequestViolation]] = (
    MappingProxyType(
        {
            event: MappingProxyType({phase: REQUEST_TABLE[(phase, event)] for phase in RequestPhase})
            for event in RequestEvent
        }
    )
)
"""`REQUEST_TABLE` by event, then phase (no tuple key to build per step)."""
_ADMITTED = REQUEST_TABLE[(REQUEST_INITIAL, RequestEvent.admit)]
_FINISHED_FROM: Mapping[RequestPhase, RequestPhase] = MappingProxyType(
    {
        phase: target
        for (phase, event), target in REQUEST_TABLE.items()
        if event is RequestEvent.finish and type(target) is RequestPhase
    }
)
"""The phases `request_finished` is legal from (by the request machine), and where it leads."""
_RETIRED = RETIRED | {Phase.rejected}
"""Phases the checker stores compactly: a claim there names no block (a rejected one never did)."""
_RETIRED_STATES: tuple[tuple[Phase, ClaimProfile], ...] = tuple(
    (phase, profile) for phase in sorted(_RETIRED) for profile in _PROFILES
)
"""Phase and profile of a retired claim, by the small integer the checker stores for it."""
_RETIRED_BASE: Mapping[Phase, int] = MappingProxyType(
    {phase: index * len(_PROFILES) for index, phase in enumerate(sorted(_RETIRED))}
)
"""A retired claim's code is its phase's base plus its profile's rank (see `_RETIRED_STATES`)."""
_MAX_WITNESS_CLAIMS = 64


@dataclass(frozen=True)
class Budget:
    """How much state the checker may hold before it gives up as `inconclusive`."""

    max_claims: int = 2_000_000
    max_live_requests: int = 1_000_000
    max_tracked_blocks: int = 8_000_000


class Rejection(Exception):
    """A step the model does not allow. `ids` are the claim and request ids it concerns, for
    deriving the minimal prefix."""

    def __init__(self, counterexample: Counterexample, ids: frozenset[str]) -> None:
        super().__init__(counterexample.message)
        self.counterexample = counterexample
        self.ids = ids


class Undecidable(Exception):
    """The checker cannot decide the trace (budget exhausted); the verdict is inconclusive."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


class _Claim:
    __slots__ = (
        "accepted_line",
        "blocked_while_full",
        "broken_while_responsible",
        "checkpoint",
        "claim_id",
        "footprint",
        "leading",
        "mode",
        "object_id",
        "offload_line",
        "owner_scope",
        "pending",
        "phase",
        "present",
        "profile",
        "rank",
        "reported_leading",
        "required",
        "settled_line",
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
        self.footprint = 0
        self.required: int | None = None
        self.checkpoint: Any = None
        self.present: bytearray | None = None
        self.leading = 0
        self.reported_leading = 0
        self.unconfirmed: tuple[int, int] | None = None
        self.pending: dict[str, int] = _NONE
        self.accepted_line = 0
        self.offload_line = 0
        self.settled_line = 0
        self.transitions: tuple[int, ...] = ()
        self.blocked_while_full = 0
        self.broken_while_responsible = False


class _Request:
    __slots__ = ("failed", "owed", "phase", "refused_line", "restored", "restoring")

    def __init__(self, phase: RequestPhase) -> None:
        self.phase = phase
        self.owed: tuple[str, int] | None = None
        self.failed: dict[str, int] = _NONE
        self.restoring: dict[str, int] = _NONE
        self.restored: dict[str, int] = _NONE
        self.refused_line = 0

    def note_restoring(self, claim_id: str, line: int) -> None:
        """The maps start as the shared empty `_NONE` (most requests never touch a claim)."""
        if self.restoring is _NONE:
            self.restoring = {}
        self.restoring[claim_id] = line

    def note_restored(self, claim_id: str, line: int) -> None:
        if self.restored is _NONE:
            self.restored = {}
        self.restored[claim_id] = line

    def note_failed(self, claim_id: str, line: int) -> None:
        if self.failed is _NONE:
            self.failed = {}
        self.failed[claim_id] = line


class Checker:
    """Consumes trace v1 event Structs one at a time (`feed`), then `finish`.

    `usable_blocks` and `block_size` come from the trace header (either may be None). Raises
    `Rejection` at the first step the model does not allow, `Undecidable` when the budget is
    exhausted. After `finish`, `witnesses()` lists what the trace exercised and `notes` says
    what could not be decided (which makes an otherwise clean trace inconclusive).
    """

    def __init__(
        self, *, usable_blocks: int | None, block_size: int | None, budget: Budget = Budget()
    ) -> None:
        self.usable_blocks = usable_blocks
        self.block_size = block_size
        self.budget = budget
        self.claims: dict[str, _Claim] = {}
        self.retired: dict[str, int] = {}
        self.requests: dict[str, _Request] = {}
        self.finished = RetiredIds()
        self.block_owner: dict[int, _Claim] = {}
        self.block_position: dict[int, int] = {}
        self.shared_owners: dict[int, list[tuple[_Claim, int]]] = {}
        self.undecided: list[Finding] = []
        self.steps = 0
        self.requests_seen = 0
        self._witnesses: dict[TraceWitness, tuple[tuple[int, ...], set[str]]] = {}
        self._restore_witness: dict[str, tuple[int, ...]] = {}
        self._failure_named: set[str] = set()
        self._seen_eviction = False
        self._seen_admission = False
        self._complete: set[TraceWitness] = set()
        """Witness kinds that need no more recording (lines known, claim ids at their bound)."""
        self._failure_witness: dict[str, tuple[int, ...]] = {}
        self._line = 0
        self._index = 0
        self._run_end = 0  # index after the last event fed (a run's steps are counted up front)
        self._current: msgspec.Struct | None = None
        self.first_unknown: Finding | None = None
        self._prefix_positions = 0
        """Positions of all live claims' presence maps (bounded by the budget)."""
        self.closed_at: int | None = None
        """The line of `trace_closed`, once seen: the stream ended cleanly there."""
        s = EVENT_STRUCTS
        self._stored = s["block_stored"]
        self._removed = s["block_removed"]
        self._admitted_type = s["active_request_admitted"]
        self._finished_type = s["request_finished"]
        self._handlers: dict[type, Callable[[Any], None]] = {
            s["resident_claim_submitted"]: self._submitted,
            s["resident_claim_accepted"]: self._accepted,
            s["resident_claim_rejected"]: self._rejected,
            s["resident_claim_materialized"]: self._materialized,
            s["resident_claim_demoted"]: self._demoted,
            s["resident_claim_expired"]: self._expired,
            s["resident_claim_released"]: self._released,
            s["resident_claim_harmed"]: self._harmed,
            s["resident_claim_lost"]: self._lost,
            s["resident_claim_offloaded"]: self._offloaded,
            s["resident_claim_restore_required"]: self._restore_required,
            s["resident_claim_restored"]: self._restored,
            s["resident_claim_restoration_failed"]: self._restoration_failed,
            s["resident_claim_checkpoint_restored"]: self._checkpoint_restored,
            s["active_request_admitted"]: self._admitted,
            s["active_request_deferred"]: self._deferred,
            s["active_request_refused"]: self._refused,
            s["request_reused"]: self._reused,
            s["request_finished"]: self._request_finished,
            s["block_stored"]: self._block_stored,
            s["block_removed"]: self._block_removed,
            s["fault_injected"]: self._fault,
            s["trace_closed"]: self._trace_closed,
        }

    # --- driving ------------------------------------------------------------------------

    @property
    def events_reached(self) -> int:
        """Events up to and including the last one a rule looked at (0 after `finish`): where a
        rejection or an undecidable step stopped the check."""
        return self._index + 1

    @property
    def steps_reached(self) -> int:
        """`steps` up to where the check stopped: a run's events after the offending one were
        counted when the run started but never checked."""
        if self._index < 0:
            return self.steps
        return self.steps - max(0, self._run_end - self.events_reached)

    def feed(self, event: msgspec.Struct, line: int, index: int) -> None:
        """Check one step; `line` / `index` locate it in the source for counterexamples."""
        if self.closed_at is not None:
            _after_close(self.closed_at, line)
        self._line = line
        self._index = index
        self._run_end = index + 1
        self._current = event
        self.steps += 1
        self._handlers[type(event)](event)

    def feed_run(self, events: list[msgspec.Struct], line: int, index: int) -> None:
        """Check consecutive steps: `events[i]` is at `line + i`, index `index + i`.

        The same as `feed` on each, with the two commonest cases inlined (a tracked claim's
        block stored in a fresh block, and a block removed that no claim holds or that leaves its
        claim's leading prefix intact): they are most of a typical trace and need neither the
        lifecycle nor a counterexample location, so they skip the per-event bookkeeping."""
        stored, removed = self._stored, self._removed
        admitted, finished_type = self._admitted_type, self._finished_type
        requests = self.requests
        finished = self.finished
        claims_get = self.claims.get
        owners = self.block_owner
        positions = self.block_position
        shared = self.shared_owners
        handlers = self._handlers
        seen_eviction = self._seen_eviction
        if self.closed_at is not None:
            _after_close(self.closed_at, line)
        self.steps += len(events)
        self._run_end = index + len(events)
        if len(owners) >= self.budget.max_tracked_blocks:  # checked per run: overshoot <= one run
            self._exhausted(f"more than {self.budget.max_tracked_blocks} tracked blocks")
        if len(requests) >= self.budget.max_live_requests:
            self._exhausted(f"more than {self.budget.max_live_requests} live requests")
        for offset, event in enumerate(events):
            cls = type(event)
            if cls is stored:
                claim_id = event.claim_id
                if claim_id is None:
                    if event.block_id not in owners:
                        continue  # an unclaimed block in an id no claim holds: nothing to track
                else:
                    position = event.position
                    claim = claims_get(claim_id)
                    if (
                        claim is not None
                        and position is not None
                        and event.cache_level is None
                        and position < claim.footprint
                        and claim.present is not None
                    ):
                        key = event.block_id
                        if key not in owners:
                            owners[key] = claim
                            positions[key] = position
                            present = claim.present
                            present[position] = 1
                            if position == claim.leading:
                                leading = position + 1
                                footprint = claim.footprint
                                while leading < footprint and present[leading]:
                                    leading += 1
                                claim.leading = leading
                                if claim.unconfirmed is not None and leading >= claim.unconfirmed[0]:
                                    claim.unconfirmed = None
                            continue
            elif cls is removed and event.claim_id is None and event.cache_level is None and not shared:
                key = event.block_id
                owner = owners.pop(key, None)
                if owner is None:
                    if seen_eviction:
                        continue
                    seen_eviction = True
                else:
                    position = positions.pop(key)
                    present = owner.present
                    if present is None or position >= owner.leading:
                        if present is not None:
                            present[position] = 0
                        continue
                    self._line, self._index, self._current = line + offset, index + offset, event
                    self._lose(owner, position)
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
                    del requests[request_id]  # a legal finish that owes nothing
                    finished.add(request_id)
                    continue
            elif cls is admitted and self._seen_admission:
                request_id = event.request_id
                if request_id not in requests and request_id not in finished:
                    requests[request_id] = _Request(_ADMITTED)
                    self.requests_seen += 1
                    continue
            self._line, self._index, self._current = line + offset, index + offset, event
            handlers[cls](event)

    def unknown(self, name: str, line: int, index: int) -> None:
        """An event type the format does not define: skipped, and the verdict can be at best
        inconclusive."""
        if self.closed_at is not None:
            _after_close(self.closed_at, line)
        if self.first_unknown is None:
            self.first_unknown = unknown_event_finding(name, line)

    @property
    def _event(self) -> str:
        current = self._current
        return "<end of trace>" if current is None else EVENT_NAME[type(current)]

    def finish(self) -> None:
        """Check what the trace still owes at its end (harm reports, failure outcomes,
        materialization confirmations), then settle the witnesses that need the whole trace."""
        self._current = None
        self._index = -1
        for claim in self.claims.values():
            if claim.unconfirmed is not None:
                self._unconfirmed(claim)
            owed = at_end(claim.phase)
            if owed is not None:
                self._line = 0
                raise self._claim_violation(claim, owed)
        for request_id, request in self.requests.items():
            if request.owed is not None:
                claim_id, line = request.owed
                self._line = line
                self._fail(
                    R.attribution,
                    f"the restoration of {claim_id} for request {request_id} failed with outcome "
                    "refusal, but the trace ended before the request was refused",
                    subject=f"request {request_id}",
                    state=f"request {request.phase}",
                    allowed=("active_request_refused",),
                    ids=(claim_id, request_id),
                )
        self._settle_witnesses()

    def witnesses(self) -> tuple[Witness, ...]:
        return tuple(
            Witness(kind, lines, tuple(sorted(claim_ids)))
            for kind, (lines, claim_ids) in sorted(
                self._witnesses.items(), key=lambda kv: list(TraceWitness).index(kv[0])
            )
        )

    # --- rejections ---------------------------------------------------------------------

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
        raise Rejection(
            Counterexample(
                rule=rule,
                line=self._line,
                event_index=self._index,
                event=self._event,
                message=message,
                subject=subject,
                state_before=state,
                allowed=allowed,
            ),
            frozenset(ids),
        )

    def _claim_violation(
        self, claim: _Claim, violation: Violation, message: str | None = None, ids: tuple[str, ...] = ()
    ) -> Rejection:
        return Rejection(
            Counterexample(
                rule=violation.rule,
                line=self._line,
                event_index=self._index,
                event=self._event,
                message=message or f"{claim.claim_id}: {violation.message}",
                subject=f"claim {claim.claim_id}",
                state_before=describe(claim.profile, violation.phase),
                allowed=tuple(e.value for e in violation.allowed),
            ),
            frozenset({claim.claim_id, *ids}),
        )

    def _claim_fail(self, claim: _Claim, rule: ConformanceRule, message: str, *ids: str) -> None:
        self._fail(
            rule,
            f"{claim.claim_id}: {message}",
            subject=f"claim {claim.claim_id}",
            state=describe(claim.profile, claim.phase),
            allowed=(),
            ids=(claim.claim_id, *ids),
        )

    # --- claim lifecycle ----------------------------------------------------------------

    def _claim(self, claim_id: str) -> _Claim:
        claim = self.claims.get(claim_id)
        if claim is None:
            claim = self._retired_view(claim_id)
            if claim is None:
                if len(self.claims) + len(self.retired) >= self.budget.max_claims:
                    self._exhausted(f"more than {self.budget.max_claims} claims")
                claim = self.claims[claim_id] = _Claim(claim_id)
        return claim

    def _known(self, claim_id: str) -> _Claim | None:
        """The claim if any event decided it (live or retired), without creating it."""
        return self.claims.get(claim_id) or self._retired_view(claim_id)

    def _retired_view(self, claim_id: str) -> _Claim | None:
        """A throw-away record of a retired claim: only its phase and profile are kept, since no
        transition leaves a retired phase."""
        code = self.retired.get(claim_id)
        if code is None:
            return None
        view = _Claim(claim_id)
        view.phase, view.profile = _RETIRED_STATES[code]
        view.table = LIFECYCLE_TABLES[view.profile]
        view.rank = _RANK[view.profile]
        return view

    @property
    def claims_seen(self) -> int:
        return len(self.claims) + len(self.retired)

    def _advance(self, claim: _Claim, event: Event) -> None:
        if claim.unconfirmed is not None:
            self._unconfirmed(claim)
        result = claim.table[claim.phase][event]
        if type(result) is Violation:
            raise self._claim_violation(claim, result)
        if result is not claim.phase and len(claim.transitions) < 3:
            claim.transitions += (self._line,)
            if len(claim.transitions) == 3:
                if TraceWitness.ordered_lifecycle not in self._complete:
                    self._witness(TraceWitness.ordered_lifecycle, claim.transitions, claim.claim_id)
        claim.phase = result  # type: ignore[assignment]
        if result in _RETIRED and claim.claim_id in self.claims:
            if claim.present is not None:
                self._prefix_positions -= len(claim.present)
            claim.present = None  # its blocks are no longer tracked
            del self.claims[claim.claim_id]
            self.retired[claim.claim_id] = _RETIRED_BASE[result] + claim.rank  # type: ignore[index]

    def _unconfirmed(self, claim: _Claim) -> None:
        reported, line = claim.unconfirmed  # type: ignore[misc]
        self._claim_fail(
            claim,
            R.lifecycle,
            f"resident_claim_materialized (line {line}) reported {reported} leading blocks, but the "
            f"claim's own block events show only {claim.leading} contiguous leading blocks "
            "(a block counts only if every block before it survives)",
        )

    def _submitted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._take_terms(claim, ev)
        self._advance(claim, Event.submit)

    def _accepted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase is Phase.submitted and (claim.owner_scope, claim.object_id) != (
            ev.owner_scope,
            ev.object_id,
        ):
            self._claim_fail(
                claim,
                R.identity,
                f"accepted for owner {ev.owner_scope} / object {ev.object_id}, but it was submitted "
                f"for owner {claim.owner_scope} / object {claim.object_id}",
            )
        if claim.phase is INITIAL or claim.phase is Phase.submitted:
            self._take_terms(claim, ev)
        self._advance(claim, Event.accept)
        claim.accepted_line = self._line
        if TraceWitness.claim_accepted not in self._complete:
            self._witness(TraceWitness.claim_accepted, (self._line,), claim.claim_id)

    def _take_terms(self, claim: _Claim, ev: Any) -> None:
        predicate = ev.predicate
        two_key = type(predicate).__name__ == HybridTwoKey.__name__
        claim.profile, claim.table, claim.rank = _PROFILE_OF[(ev.mode, two_key)]
        claim.mode = ev.mode
        claim.owner_scope = ev.owner_scope
        claim.object_id = ev.object_id
        claim.footprint = ev.footprint_blocks
        if two_key:
            claim.required = predicate.boundary_blocks
        elif predicate.blocks is not None:
            claim.required = predicate.blocks
        elif self.block_size is not None:
            claim.required = -(-predicate.tokens // self.block_size)
        else:
            claim.required = None
            self.undecided.append(
                Finding(
                    ErrorClass.undecidable,
                    f"{claim.claim_id}: its predicate counts tokens and the header gives no "
                    "block_size, so its leading-prefix checks could not be decided",
                    line=self._line,
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
            if ev.checkpoint is None:
                self._claim_fail(
                    claim,
                    R.hybrid_two_key,
                    "a two-key claim materialized without a checkpoint: logical state identity "
                    "could never be established later",
                )
            if ev.checkpoint.boundary != required:
                self._claim_fail(
                    claim,
                    R.hybrid_two_key,
                    f"checkpoint boundary {ev.checkpoint.boundary} is not the predicate's "
                    f"boundary {required}",
                )
            claim.checkpoint = ev.checkpoint
        claim.reported_leading = ev.leading_blocks
        if claim.present is not None and claim.leading < ev.leading_blocks:
            claim.unconfirmed = (ev.leading_blocks, self._line)
        if TraceWitness.claim_materialized not in self._complete:
            self._witness(TraceWitness.claim_materialized, (claim.accepted_line, self._line), claim.claim_id)

    def _demoted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.demote)
        claim.settled_line = self._line

    def _expired(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.expire)
        claim.settled_line = self._line

    def _released(self, ev: Any) -> None:
        self._advance(self._claim(ev.claim_id), Event.release)

    def _harmed(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase in RESPONSIBLE or claim.phase is Phase.breached:
            self._check_harm_numbers(claim, ev)
        was_breached = claim.phase is Phase.breached
        self._advance(claim, Event.harm)
        if was_breached:
            self._witness(TraceWitness.harm_reported, (claim.accepted_line, self._line), claim.claim_id)

    def _check_harm_numbers(self, claim: _Claim, ev: Any) -> None:
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
        if claim.present is not None and claim.phase is Phase.materialized and claim.required is not None:
            if claim.leading >= claim.required:
                self._claim_fail(
                    claim,
                    R.no_silent_harm,
                    f"harm reported while the claim's blocks still hold {claim.leading} contiguous "
                    f"leading blocks of {claim.required} required: the predicate still holds",
                )
        if claim.present is not None and claim.phase is Phase.breached and ev.leading_blocks != claim.leading:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"harm reports {ev.leading_blocks} leading blocks, but its blocks show {claim.leading}",
            )

    def _lost(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.lose)
        if (
            claim.required is not None
            and ev.leading_blocks >= claim.required
            and claim.phase
            not in (
                Phase.demoted,
                Phase.expired,
                Phase.released,
            )
        ):
            self._claim_fail(
                claim,
                R.lifecycle,
                f"loss reported with {ev.leading_blocks} leading blocks of {claim.required} required: "
                "the predicate still holds",
            )
        self._settled_loss(claim)

    def _settled_loss(self, claim: _Claim) -> None:
        if claim.phase is Phase.demoted:
            self._witness(TraceWitness.demoted_before_loss, (claim.settled_line, self._line), claim.claim_id)
        elif claim.phase is Phase.expired:
            self._witness(TraceWitness.expired_before_loss, (claim.settled_line, self._line), claim.claim_id)

    # --- offload and restore ------------------------------------------------------------

    def _offloaded(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.offload)
        claim.offload_line = self._line

    def _restore_required(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        request = self._request_for(request_id)
        if request_id in claim.pending:
            self._claim_fail(
                claim,
                R.offload_order,
                f"restore_required again for request {request_id} while its previous restoration "
                f"(line {claim.pending[request_id]}) has neither restored nor failed: a silent "
                "failure and retry (or fallback recompute) is not a restoration outcome",
                request_id,
            )
        if request is not None and claim.claim_id in request.failed:
            self._claim_fail(
                claim,
                R.offload_order,
                f"its restoration for request {request_id} already failed (line "
                f"{request.failed[claim.claim_id]}); a failure is never retried or recomputed into "
                "a satisfied reuse for the same request",
                request_id,
            )
        self._advance(claim, Event.require_restore)
        request = self._request_step(request_id, RequestEvent.reuse, request)
        if claim.pending is _NONE:
            claim.pending = {}
        claim.pending[request_id] = self._line
        request.note_restoring(claim.claim_id, self._line)

    def _missing_pending(self, claim: _Claim, request_id: str, event: Event, what: str) -> None:
        """An outcome with no pending restore_required of its claim and request. The lifecycle
        judges first, since it names the sharper rule when the claim is not restoring at all;
        if it allows the event, the outcome is for a request that never required it."""
        self._advance(claim, event)
        self._take_pending(claim, request_id, what)

    def _take_pending(self, claim: _Claim, request_id: str, what: str) -> int:
        line = claim.pending.pop(request_id, None) if claim.pending else None
        if line is None:
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
        return line  # type: ignore[return-value]

    def _restored(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        if request_id not in claim.pending:
            self._missing_pending(claim, request_id, Event.restore, "restored")
        self._advance(claim, Event.restore)
        if claim.profile.two_key:
            return  # the KV side is back; the pending restoration resolves on the checkpoint
        required_line = self._take_pending(claim, request_id, "restored")
        request = self.requests.get(request_id)
        if request is not None:
            request.note_restored(claim.claim_id, self._line)
        self._restore_witness[f"{claim.claim_id}\0{request_id}"] = (
            claim.offload_line,
            required_line,
            self._line,
        )

    def _restoration_failed(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        if request_id not in claim.pending:
            self._missing_pending(claim, request_id, _FAILURE_EVENT[ev.outcome], "restoration_failed")
        required_line = claim.pending[request_id]
        self._advance(claim, _FAILURE_EVENT[ev.outcome])
        self._take_pending(claim, request_id, "restoration_failed")
        self._failure_named.add(claim.claim_id)
        request = self._request_for(request_id)
        if request is not None:
            request.note_failed(claim.claim_id, self._line)
            if ev.outcome is RestorationOutcome.refusal:
                request.owed = (claim.claim_id, self._line)
                self._failure_witness[f"{claim.claim_id}\0{request_id}"] = (
                    claim.offload_line,
                    required_line,
                    self._line,
                )

    def _checkpoint_restored(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        recorded = claim.checkpoint
        match = (
            recorded is not None
            and ev.boundary == recorded.boundary
            and ev.value_hash == recorded.value_hash
            and claim.phase is Phase.restoring
        )
        self._advance(claim, Event.restore_checkpoint_match if match else Event.restore_checkpoint_mismatch)
        if match:
            for request_id in list(claim.pending):
                required_line = self._take_pending(claim, request_id, "checkpoint_restored")
                self._restore_witness[f"{claim.claim_id}\0{request_id}"] = (
                    claim.offload_line,
                    required_line,
                    self._line,
                )
                request = self.requests.get(request_id)
                if request is not None:
                    request.note_restored(claim.claim_id, self._line)

    # --- requests -----------------------------------------------------------------------

    def _request_for(self, request_id: str) -> _Request | None:
        return self.requests.get(request_id)

    def _request_step(
        self, request_id: str, event: RequestEvent, request: _Request | None = None
    ) -> _Request:
        if request is None:
            request = self.requests.get(request_id)
        if request is None:
            phase = RequestPhase.finished if request_id in self.finished else REQUEST_INITIAL
        else:
            phase = request.phase
        result = _REQUEST_NEXT[event][phase]
        if type(result) is RequestViolation:
            self._fail(
                result.rule,
                f"request {request_id}: {result.message}",
                subject=f"request {request_id}",
                state=f"request {phase}",
                allowed=tuple(e.value for e in result.allowed),
                ids=(request_id,),
            )
        if request is None:
            request = self._new_request(request_id, result)  # type: ignore[arg-type]
        else:
            request.phase = result  # type: ignore[assignment]
        return request

    def _new_request(self, request_id: str, phase: RequestPhase) -> _Request:
        if len(self.requests) >= self.budget.max_live_requests:
            self._exhausted(f"more than {self.budget.max_live_requests} live requests")
        request = self.requests[request_id] = _Request(phase)
        self.requests_seen += 1
        return request

    def _admitted(self, ev: Any) -> None:
        request_id = ev.request_id
        if request_id in self.requests or request_id in self.finished:
            self._request_step(request_id, RequestEvent.admit)
        else:
            self._new_request(request_id, _ADMITTED)
        if not self._seen_admission:
            self._seen_admission = True
            self._witness(TraceWitness.active_served_without_claim_block, (self._line,))

    def _deferred(self, ev: Any) -> None:
        self._conflict(ev, RequestEvent.defer)

    def _refused(self, ev: Any) -> None:
        capacity = ev.reason is ConflictReason.capacity
        self._conflict(ev, RequestEvent.refuse_capacity if capacity else RequestEvent.refuse_restoration)

    def _conflict(self, ev: Any, event: RequestEvent) -> None:
        request_id = ev.request_id
        self._check_capacity(ev)
        blocking = ev.blocking_claim_ids
        subject = f"request {request_id}"
        if not blocking:
            self._fail(
                R.attribution,
                f"{self._event} for request {request_id} names no blocking claim",
                subject=subject,
                state="conflict without attribution",
                allowed=("blocking_claim_ids naming the accepted claims that caused it",),
                ids=(request_id,),
            )
        if len(set(blocking)) != len(blocking):
            self._fail(
                R.attribution,
                f"blocking_claim_ids names a claim twice: {blocking}",
                subject=subject,
                state="ambiguous attribution",
                allowed=("each blocking claim once",),
                ids=(request_id, *blocking),
            )
        request = self.requests.get(request_id)
        if ev.reason is ConflictReason.restoration_failed:
            owed = request.owed if request is not None else None
            if owed is None:
                self._fail(
                    R.attribution,
                    f"refusal of request {request_id} for a failed restoration, but no claim's "
                    "restoration failed for this request with outcome refusal: a generic or "
                    "unclaimed failure is not a claim-scoped cause",
                    subject=subject,
                    state=f"request {request.phase if request else RequestPhase.absent}",
                    allowed=("resident_claim_restoration_failed for this request first",),
                    ids=(request_id, *blocking),
                )
            assert owed is not None
            if list(blocking) != [owed[0]]:
                self._fail(
                    R.attribution,
                    f"the refusal of request {request_id} must name exactly {owed[0]}, whose "
                    f"restoration failed (line {owed[1]}); it names {blocking}",
                    subject=subject,
                    state=f"request {request.phase}; restoration of {owed[0]} failed",  # type: ignore[union-attr]
                    allowed=(f"blocking_claim_ids == [{owed[0]!r}]",),
                    ids=(request_id, *blocking, owed[0]),
                )
        request = self._request_step(request_id, event, request)
        full: list[_Claim] = []
        for claim_id in blocking:
            claim = self._known(claim_id) or _Claim(claim_id)
            result = claim.table[claim.phase][Event.block]
            if type(result) is Violation:
                raise self._claim_violation(
                    claim,
                    result,
                    f"{self._event} for request {request_id} blames {claim_id}: {result.message}",
                    (request_id, *blocking),
                )
            if event is RequestEvent.refuse_restoration:
                self._failure_named.add(claim_id)
            if claim.present is not None and claim.required is not None and claim.leading >= claim.required:
                full.append(claim)
        if event is RequestEvent.refuse_restoration:
            request.owed = None
            request.refused_line = self._line
            key = f"{blocking[0]}\0{request_id}"
            lines = self._failure_witness.pop(key, None)
            if lines is not None:
                self._witness(TraceWitness.restoration_failure_fail_closed, (*lines, self._line), blocking[0])
        elif TraceWitness.capacity_conflict_attributed not in self._complete:
            self._witness(
                TraceWitness.capacity_conflict_attributed,
                (*(self.claims[c].accepted_line for c in blocking), self._line),
                *blocking,
            )
            for claim in full:
                claim.blocked_while_full = claim.blocked_while_full or self._line
        if ev.reason is ConflictReason.capacity and TraceWitness.footprint_accounted not in self._complete:
            self._footprint_witness(ev, blocking)

    def _footprint_witness(self, ev: Any, blocking: list[str]) -> None:
        """F (seed 000: infeasibility attributed and budgeted at claim granularity): the
        capacity proof's protected term holds each blocking claim's whole footprint and is no
        more than the footprints of all responsible preserving claims together."""
        protected = ev.protected_resident_blocks
        held = sum(
            claim.footprint
            for claim in self.claims.values()
            if claim.phase in RESPONSIBLE and claim.profile.preserving
        )
        if max(self.claims[c].footprint for c in blocking) <= protected <= held:
            self._witness(
                TraceWitness.footprint_accounted,
                (*(self.claims[c].accepted_line for c in blocking), self._line),
                *blocking,
            )

    def _check_capacity(self, ev: Any) -> None:
        numbers = (
            ev.protected_resident_blocks,
            ev.active_live_blocks_required,
            ev.resident_plus_active_blocks,
            ev.usable_blocks,
            ev.capacity_shortfall_blocks,
        )
        if None in numbers:
            if ev.reason is ConflictReason.capacity:
                missing = [
                    name for name, value in zip(CAPACITY_PROOF_FIELDS, numbers, strict=True) if value is None
                ]
                self._fail(
                    R.capacity_arithmetic,
                    f"a capacity {self._event.removeprefix('active_request_')} without its capacity "
                    f"proof (missing {', '.join(missing)})",
                    subject=f"request {ev.request_id}",
                    state="capacity proof",
                    allowed=("all five capacity proof numbers",),
                    ids=(ev.request_id,),
                )
            return  # a restoration refusal may omit its proof; a given one is checked below
        problem = capacity_problem(
            *numbers, capacity_reason=ev.reason is ConflictReason.capacity, header_usable=self.usable_blocks
        )
        if problem is not None:
            self._fail(
                R.capacity_arithmetic,
                problem.message,
                subject=f"request {ev.request_id}",
                state="capacity proof",
                allowed=(problem.required,),
                ids=(ev.request_id,),
            )

    def _reused(self, ev: Any) -> None:
        claim = self.claims.get(ev.claim_id) or self._claim(ev.claim_id)
        request_id = ev.request_id
        request = self.requests.get(request_id)
        if ev.predicate_satisfied and request is not None and claim.claim_id in request.failed:
            self._claim_fail(
                claim,
                R.offload_order,
                f"request {request_id} reports a satisfied reuse although its restoration failed "
                f"(line {request.failed[claim.claim_id]}): a fallback recompute is not a restoration",
                request_id,
            )
        self._advance(claim, Event.reuse_satisfied if ev.predicate_satisfied else Event.reuse_unsatisfied)
        if ev.predicate_satisfied and claim.required is not None and ev.cached_blocks < claim.required:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"request {request_id} reports the predicate satisfied with {ev.cached_blocks} cached "
                f"blocks; it needs {claim.required}",
                request_id,
            )
        request = self._request_step(request_id, RequestEvent.reuse, request)
        if ev.predicate_satisfied and request.restored:
            self._served_after_restore(claim.claim_id, request_id, request)

    def _served_after_restore(self, claim_id: str, request_id: str, request: _Request) -> None:
        line = request.restored.pop(claim_id, None) if request.restored else None
        if line is None:
            return
        lines = self._restore_witness.pop(f"{claim_id}\0{request_id}", None)
        if lines is not None:
            self._witness(TraceWitness.restore_before_reuse, (*lines, self._line), claim_id)

    def _request_finished(self, ev: Any) -> None:
        request_id = ev.request_id
        request = self.requests.get(request_id)
        if (
            request is not None
            and request.phase in _FINISHED_FROM
            and request.owed is None
            and not request.restoring
            and not request.restored
        ):
            del self.requests[request_id]  # the common case: a legal finish that owes nothing
            self.finished.add(request_id)
            return
        if request is not None:
            if request.owed is not None:
                claim_id, line = request.owed
                self._fail(
                    R.attribution,
                    f"request {request_id} finished, but the restoration of {claim_id} failed with "
                    f"outcome refusal (line {line}) and the request was never refused: the "
                    "fail-closed outcome must come before request termination",
                    subject=f"request {request_id}",
                    state=f"request {request.phase}; owes a refusal naming {claim_id}",
                    allowed=("active_request_refused",),
                    ids=(request_id, claim_id),
                )
            if request.restoring:
                claim_id, line = next(iter(request.restoring.items()))
                self._fail(
                    R.offload_order,
                    f"request {request_id} finished while its restoration of {claim_id} (line {line}) "
                    "never restored or failed: served without restoration (fallback recompute?)",
                    subject=f"request {request_id}",
                    state=f"request {request.phase}; restoring {claim_id}",
                    allowed=("resident_claim_restored", "resident_claim_restoration_failed"),
                    ids=(request_id, claim_id),
                )
        request = self._request_step(request_id, RequestEvent.finish, request)
        if request.restored and not request.refused_line:
            for claim_id in list(request.restored):
                self._served_after_restore(claim_id, request_id, request)
        del self.requests[request_id]
        self.finished.add(request_id)

    # --- blocks -------------------------------------------------------------------------

    def _block_claim(self, ev: Any) -> _Claim | None:
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
                state=describe(_UNDECIDED, Phase.absent),
                allowed=("resident_claim_accepted first",),
                ids=(claim_id,),
            )
        assert claim is not None
        # A retired claim keeps only its phase and profile: its blocks may still be named
        # (post-release loss is legal, seed 001 table 4) but its footprint is no longer known.
        if ev.position is not None and claim.phase not in _RETIRED and ev.position >= claim.footprint:
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
        if (
            claim is None
            or position is None
            or ev.cache_level is not None
            or claim.present is None
            or position >= claim.footprint
        ):
            self._block_stored_rarely(ev)
            return
        self._track(claim, ev.block_id, position)

    def _block_stored_rarely(self, ev: Any) -> None:
        """The paths the hot one leaves out: unclaimed or host-tier blocks, a claim's first
        block, a retired or undecided claim, and identity errors."""
        claim = self._block_claim(ev)
        level = ev.cache_level
        if level is not None and level.lower() not in DEVICE_CACHE_LEVELS:
            return
        key = ev.block_id
        if claim is None or ev.position is None:
            self._lose_owners(key)  # the block id now holds other content
            return
        if claim.phase in _RETIRED or claim.phase is Phase.submitted:
            return
        if claim.present is None:
            claim.present = self._prefix_map(claim.footprint)
            if TraceWitness.claim_scoped_blocks not in self._complete:
                self._witness(
                    TraceWitness.claim_scoped_blocks, (claim.accepted_line, self._line), claim.claim_id
                )
        self._track(claim, key, ev.position)

    def _track(self, claim: _Claim, key: int, position: int) -> None:
        """Block `key` now holds `position` of `claim`'s prefix."""
        owner = self.block_owner.get(key)
        if owner is None:
            if len(self.block_owner) >= self.budget.max_tracked_blocks:
                self._exhausted(f"more than {self.budget.max_tracked_blocks} tracked blocks")
            self.block_owner[key] = claim
            self.block_position[key] = position
        elif owner is not claim or self.block_position[key] != position:
            shared = self.shared_owners.setdefault(key, [])
            if (claim, position) not in shared:
                shared.append((claim, position))
        present = claim.present
        present[position] = 1  # type: ignore[index]
        if position == claim.leading:
            leading = position + 1
            footprint = claim.footprint
            while leading < footprint and present[leading]:  # type: ignore[index]
                leading += 1
            claim.leading = leading
            if claim.unconfirmed is not None and leading >= claim.unconfirmed[0]:
                claim.unconfirmed = None

    def _owners_of(self, key: int) -> list[tuple[_Claim, int]]:
        """Every (claim, position) block `key` held, forgetting them."""
        owner = self.block_owner.pop(key, None)
        if owner is None:
            return []
        owned = [(owner, self.block_position.pop(key))]
        if self.shared_owners:
            owned.extend(self.shared_owners.pop(key, ()))
        return owned

    def _lose_owners(self, key: int) -> bool:
        """Block `key` left the device tier; False when no claim held it."""
        owned = self._owners_of(key)
        for claim, position in owned:
            self._lose(claim, position)
        return bool(owned)

    def _block_removed(self, ev: Any) -> None:
        if ev.claim_id is not None or ev.cache_level is not None:
            self._block_removed_rarely(ev)
        elif not self._lose_owners(ev.block_id) and not self._seen_eviction:
            self._seen_eviction = True
            self._witness(TraceWitness.ordinary_eviction_without_claim, (self._line,))

    def _block_removed_rarely(self, ev: Any) -> None:
        claim = self._block_claim(ev)
        level = ev.cache_level
        if level is not None and level.lower() not in DEVICE_CACHE_LEVELS:
            return
        owned = self._owners_of(ev.block_id)
        if claim is not None and ev.position is not None:
            if owned and not any(o.claim_id == claim.claim_id and p == ev.position for o, p in owned):
                holders = ", ".join(f"{o.claim_id}@{p}" for o, p in owned)
                self._claim_fail(
                    claim,
                    R.identity,
                    f"block_removed names position {ev.position} of {claim.claim_id}, but block "
                    f"{ev.block_id} was stored for {holders}",
                )
            owned = [(claim, ev.position)]
            if claim.present is None and claim.phase is Phase.materialized:
                self._assume_reported_prefix(claim)
        if not owned:
            self._witness(TraceWitness.ordinary_eviction_without_claim, (self._line,))
        for owner, position in owned:
            self._lose(owner, position)

    def _prefix_map(self, footprint: int, reported: int = 0) -> bytearray:
        """A claim's per-position presence map, counted against the budget: the footprint is a
        number from the trace, so all maps together may not exceed `max_tracked_blocks`."""
        self._prefix_positions += max(footprint, reported)
        if self._prefix_positions > self.budget.max_tracked_blocks:
            self._exhausted(f"claim prefixes spanning more than {self.budget.max_tracked_blocks} blocks")
        return bytearray(b"\x01" * reported + b"\x00" * (footprint - reported))

    def _assume_reported_prefix(self, claim: _Claim) -> None:
        """A claim that materialized without block-level accounting: a removal naming one of
        its positions is judged against the leading blocks its materialization reported, so an
        unreported loss is still a broken predicate (ignoring it would pass a silent harm)."""
        reported = claim.reported_leading
        claim.present = self._prefix_map(claim.footprint, reported)
        claim.leading = reported

    def _lose(self, claim: _Claim, position: int) -> None:
        """`position` of `claim`'s prefix is gone; a drop below the predicate is the lifecycle's
        `predicate_broken`."""
        present = claim.present
        if present is None:
            return  # retired, or never tracked
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

    def _trace_closed(self, ev: Any) -> None:
        """The writer ended the stream: not a step of the model; nothing may follow it."""
        del ev
        self.steps -= 1
        if self._index + 1 < self._run_end:
            _after_close(self._line, self._line + 1)
        self.closed_at = self._line

    def _fault(self, ev: Any) -> None:
        """A fault injection is context for the counterexample, not a model step."""
        self.steps -= 1

    # --- witnesses and budget -----------------------------------------------------------

    def _witness(self, kind: TraceWitness, lines: tuple[int, ...], *claim_ids: str) -> None:
        """Record that `kind` was exercised: the first lines that show it, and (up to a bound)
        every claim it was shown for."""
        found = self._witnesses.get(kind)
        if found is None:
            self._witnesses[kind] = (tuple(sorted({line for line in lines if line})), set(claim_ids))
            found = self._witnesses[kind]
        elif len(found[1]) < _MAX_WITNESS_CLAIMS:
            found[1].update(claim_ids)
        if not claim_ids or len(found[1]) >= _MAX_WITNESS_CLAIMS:
            self._complete.add(kind)

    def _settle_witnesses(self) -> None:
        for claim in self.claims.values():
            if claim.blocked_while_full and not claim.broken_while_responsible:
                self._witness(
                    TraceWitness.protected_under_pressure,
                    (claim.accepted_line, claim.blocked_while_full),
                    claim.claim_id,
                )
        failed = self._witnesses.get(TraceWitness.restoration_failure_fail_closed)
        restored = self._witnesses.get(TraceWitness.restore_before_reuse)
        if failed is not None and restored is not None:
            clean = [c for c in restored[1] if c not in self._failure_named]
            if clean:
                self._witness(
                    TraceWitness.multi_claim_attribution,
                    (*failed[0], *restored[0]),
                    *sorted(failed[1]),
                    *clean,
                )

    def _exhausted(self, what: str) -> None:
        raise Undecidable(Finding(ErrorClass.budget_exhausted, f"budget exhausted: {what}", line=self._line))


def _after_close(closed_at: int, line: int) -> None:
    """An event after `trace_closed`: the file is not one trace (invalid input)."""
    raise TraceInputError(
        Finding(
            ErrorClass.ordering,
            f"an event follows trace_closed (line {closed_at}): a closed trace ends there",
            line=line,
            field="event",
        )
    )
