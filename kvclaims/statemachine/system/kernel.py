"""The whole abstract state that refinement judges, as one model (Porcupine style): the kernel.

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

The rules (DESIGN 4; each violation names one `ConformanceRule`) live in the sub-models of this
package (terms, protection, restoration, two_key, demand,
occupancy, blocks); the kernel holds the state, the violation helpers, `_advance` (the one path a
claim's phase moves by) and the router (`step`, `step_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from kvclaims.spec.ids import RetiredIds
from kvclaims.spec.vocabulary import (
    ConformanceRule,
    TraceWitness,
)
from kvclaims.statemachine import lifecycle
from kvclaims.statemachine.lifecycle import (
    Event,
    Phase,
)
from kvclaims.statemachine.system.blocks import BlockModel
from kvclaims.statemachine.system.demand import RequestModel
from kvclaims.statemachine.system.occupancy import OccupancyModel
from kvclaims.statemachine.system.protection import ProtectionModel
from kvclaims.statemachine.system.records import (
    _ADMITTED,
    _FINISHED_FROM,
    _LOW,
    _RANK,
    _REQUIRED_SHIFT,
    _RETIRED,
    _RETIRED_BASE,
    _RETIRED_KINDS,
    _RETIRED_STATES,
    _SETTLED,
    END_OF_TRACE,
    LIFECYCLE_TABLES,
    RESERVING,
    RESIDENT,
    RESTORING,
    SCAN_ALLOWANCE,
    SCAN_PER_STEP,
    ClaimRecord,
    Header,
    NotAStep,
    OutOfBudget,
    R,
    RequestRecord,
    Undecided,
    Violation,
    _Stop,
)
from kvclaims.statemachine.system.restoration import RestorationModel
from kvclaims.statemachine.system.terms import TermsModel
from kvclaims.statemachine.system.two_key import TwoKeyModel
from kvclaims.statemachine.system.witnesses import WitnessModel


class SystemState(
    TermsModel,
    ProtectionModel,
    RestorationModel,
    TwoKeyModel,
    RequestModel,
    OccupancyModel,
    BlockModel,
    WitnessModel,
):
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
            entering = (result in RESIDENT) != (before in RESIDENT)
            if entering:
                self.resident_blocks += claim.footprint if result in RESIDENT else -claim.footprint
            # the pool must fit whenever a claim comes onto the device: materialized, restoring,
            # and again when its restore is confirmed (its blocks are back by then)
            if result in RESIDENT and (entering or before in RESTORING):
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


_RULES: Mapping[str, Callable[[SystemState, Any], None]] = MappingProxyType(
    {
        "resident_claim_submitted": SystemState._submitted,
        "resident_claim_accepted": SystemState._accepted,
        "resident_claim_conditionally_accepted": SystemState._conditionally_accepted,
        "resident_claim_rejected": SystemState._rejected,
        "resident_claim_extended": SystemState._extended,
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
                        # the position's first content, or the slow path's `_track` names the rule
                        and claim.contents.setdefault(position, event.block_hash) == event.block_hash
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
