"""The claim ledger: the claim-keeping a runtime embeds, moved only by the model's step.

A runtime (the MicroRuntime, the vLLM binding) keeps its physical side itself (its pool, pins,
requests, connector) and keeps claims only here. The ledger owns, per claim:

- its phase, changed only by `advance`, which steps `lifecycle.step`; an event the model
  forbids raises `IllegalTransition` where it is attempted, naming claim, phase and event;
- its positions (`slots[i]`: the runtime's opaque handle of the block holding position i, or
  None), `held_count` and `leading_blocks`, the contiguous held run from position 0 that a
  leading-prefix predicate is about (DESIGN 2.1), kept by `Claim.hold` / `drop` / `drop_all`;
- its acceptance order and deadlines: expiry by engine steps, and by milliseconds for
  time-based terms (`refresh` re-arms a deadline, e.g. refresh-on-hit);
- which claims protect blocks against the pool (the blocking set's candidates), in acceptance
  order, and the `block` step for claims a refusal or deferral names.

Loss below the predicate is `break_predicate`: the model decides harm (preserving claims) or
lost (observational ones). Runtimes extend `Claim` with their physical fields; the ledger knows
no runtime. It imports only `kvclaims.spec` and the lifecycle.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.statemachine.lifecycle import (
    RESPONSIBLE,
    ClaimProfile,
    Event,
    Phase,
    Violation,
    at_end,
    step,
)
from kvclaims.statemachine.requests import (
    RequestEvent,
    RequestPhase,
    RequestViolation,
    request_step,
)


class ConflictAction(StrEnum):
    """What a runtime does when protected resident KV and an active request's live KV do not
    fit the pool together (seed 001 table 5). Every runtime draws from this one list; each
    says which it can take (the vLLM binding: refuse, defer, demote)."""

    refuse = "refuse"
    """Refuse the request now, naming the blocking claims and the capacity proof."""
    defer = "defer"
    """Keep the request waiting, attributed to the blocking claims, until it fits."""
    demote = "demote"
    """Demote demotable blocking claims (responsibility ends before any loss), then admit."""
    offload_resident = "offload_resident"
    """Offload offloadable blocking claims to the host tier (restore before reuse), then admit."""
    offload_active = "offload_active"
    """Stream the request's older chunks to the host tier."""
    bound_active_live = "bound_active_live"
    """Run the request with bounded live KV (older chunks recomputed)."""
    route_elsewhere = "route_elsewhere"
    """Send the request to another worker with headroom."""
    add_capacity = "add_capacity"
    """Grow the pool."""


C = TypeVar("C", bound="Claim")


def fewest_oldest(candidates: Iterable[C], enough: Callable[[list[C]], bool]) -> list[C] | None:
    """The conflict decision's choice of claims to relax (demote, offload): the shortest
    leading run of `candidates` (oldest first, in the caller's order) whose relaxation `enough`
    says removes the shortfall, or None when all of them would not. `enough` is asked about
    each run in turn, one claim longer each time (an additive measure may keep a total)."""
    chosen: list[C] = []
    for claim in candidates:
        chosen.append(claim)
        if enough(chosen):
            return chosen
    return None


class Loss(StrEnum):
    """What a claim's fall below its predicate owes (seed 001 table 4)."""

    none = "none"
    """Nothing: responsibility had already ended, or the claim is off the device."""
    harm = "harm"
    """A preserving claim broke: `resident_claim_harmed` is owed before anything else."""
    lost = "lost"
    """An observational claim broke: it is reported lost and may materialize again."""


class LifecycleBug(AssertionError):
    """A runtime drove a claim or a request somewhere the model forbids (a runtime bug, never
    an input problem)."""


class IllegalTransition(LifecycleBug):
    """A runtime attempted a step its claim's or request's lifecycle forbids; raised where it
    is attempted, before anything changed."""

    def __init__(self, subject: str, phase: str, event: str, message: str, rule: str) -> None:
        super().__init__(f"{subject}: {event} is illegal in phase {phase}: {message} ({rule})")
        self.subject, self.phase, self.event = subject, phase, event


class OwedAtEnd(LifecycleBug):
    """The ledger was closed while a claim still owed an event (a harm report, a failure)."""


_next_phase = functools.cache(step)
"""`lifecycle.step`, memoized: it is pure, and runtimes ask it for every claim event."""


@dataclass(eq=False, slots=True, kw_only=True)
class Claim:
    """One claim as the ledger keeps it. Runtimes subclass it with their physical fields.
    `phase` is written only by `ClaimLedger.advance`; positions only by `hold` / `drop` /
    `drop_all`.

    `slots[i]` is the runtime's handle of the block holding position i, or None; `leading_blocks`
    is the first empty position (the contiguous held run from 0); `held_count` the handles held.
    """

    claim_id: str
    mode: ProtectionMode
    footprint_blocks: int
    required_blocks: int
    profile: ClaimProfile
    phase: Phase = Phase.absent
    slots: list[Any] = field(default_factory=list)
    held_count: int = 0
    leading_blocks: int = 0
    accepted_order: int = -1
    """Position in acceptance order (-1 until accepted); ties among deadlines break on it."""
    protects: bool = False
    """Its blocks count against the pool while responsible (victim exclusion)."""

    def __post_init__(self) -> None:
        if not self.slots:
            self.slots = [None] * self.footprint_blocks

    @property
    def responsible(self) -> bool:
        return self.phase in RESPONSIBLE

    def hold(self, position: int, block: Any) -> None:
        """`block` now holds the empty `position`: `held_count` grows, and the leading run
        extends over it and any held positions right after it. Holding a held position
        raises `LifecycleBug` (it would count one position twice)."""
        slots = self.slots
        if slots[position] is not None:
            raise LifecycleBug(f"claim {self.claim_id}: position {position} is already held")
        slots[position] = block
        self.held_count += 1
        if position == self.leading_blocks:
            leading, size = position + 1, len(slots)
            while leading < size and slots[leading] is not None:
                leading += 1
            self.leading_blocks = leading

    def drop(self, position: int) -> bool:
        """The held `position` is empty again; the leading run ends there at the latest.
        True iff that took the leading run from meeting the predicate to below it. Dropping an
        empty position raises `LifecycleBug`."""
        if self.slots[position] is None:
            raise LifecycleBug(f"claim {self.claim_id}: position {position} is not held")
        self.slots[position] = None
        self.held_count -= 1
        before = self.leading_blocks
        if position < before:
            self.leading_blocks = position
        return before >= self.required_blocks > self.leading_blocks

    def drop_all(self) -> None:
        """Every position of the claim is empty: it names no block any more."""
        self.slots = [None] * len(self.slots)
        self.held_count = self.leading_blocks = 0

    def held(self) -> Iterator[tuple[int, Any]]:
        """(position, handle) of every held position, in position order."""
        return ((p, b) for p, b in enumerate(self.slots) if b is not None)


class _Deadlines:
    """A min-heap of (deadline, acceptance order, claim id) with lazy re-arming."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._armed: dict[str, float] = {}

    def arm(self, claim: Claim, at: float) -> None:
        self._armed[claim.claim_id] = at
        heapq.heappush(self._heap, (at, claim.accepted_order, claim.claim_id))

    def any_due(self, now: float) -> bool:
        """Whether an entry (perhaps a stale one) is at or before `now` (changes nothing)."""
        heap = self._heap
        return bool(heap) and heap[0][0] <= now

    def pop_due(self, now: float) -> Iterator[str]:
        heap, armed = self._heap, self._armed
        while heap and heap[0][0] <= now:
            at, _, claim_id = heapq.heappop(heap)
            if armed.get(claim_id) == at:  # an entry re-armed since is stale
                del armed[claim_id]
                yield claim_id


class ClaimLedger:
    """Every claim a runtime keeps, by id, and the deadlines and protection that go with them.

    `claims` holds claims from submission until the runtime `forget`s them; `transitions_taken`
    and `phases_reached` record the model's coverage (fuzzers read them).
    """

    def __init__(self) -> None:
        self.claims: dict[str, Claim] = {}
        self.protecting: dict[str, Claim] = {}
        """Accepted protecting claims that are still responsible, in acceptance order."""
        self.transitions_taken: set[tuple[Phase, Event, Phase]] = set()
        self.phases_reached: set[Phase] = set()
        self._accepted = 0
        self._by_step = _Deadlines()
        self._by_ms = _Deadlines()

    # -- the model's step ------------------------------------------------------------------

    def advance(self, claim: Claim, event: Event) -> None:
        """Move `claim` by `event`: its phase becomes the model's next phase; leaving the
        responsible phases takes it out of `protecting`. Raises `IllegalTransition` (nothing
        changed) when the model forbids the event."""
        source = claim.phase
        target = _next_phase(claim.profile, source, event)
        if isinstance(target, Violation):
            self.check(claim, event)
        claim.phase = target  # type: ignore[assignment]
        self.transitions_taken.add((source, event, target))
        self.phases_reached.add(target)
        if target not in RESPONSIBLE and claim.protects:
            self.protecting.pop(claim.claim_id, None)

    def check(self, claim: Claim, event: Event) -> None:
        """Raise `IllegalTransition` if `event` is not a legal next step for `claim` now
        (changes nothing): for runtimes that change their physical side before `advance`."""
        target = _next_phase(claim.profile, claim.phase, event)
        if isinstance(target, Violation):
            raise IllegalTransition(
                f"claim {claim.claim_id}", claim.phase, event, target.message, target.rule
            )

    def allows(self, claim: Claim, event: Event) -> bool:
        """Whether `event` is a legal next step for `claim` now (changes nothing)."""
        return not isinstance(_next_phase(claim.profile, claim.phase, event), Violation)

    def submit(self, claim: Claim) -> None:
        """Enter `claim` (absent) into `claims` and step it to submitted."""
        self.claims[claim.claim_id] = claim
        self.phases_reached.add(claim.phase)
        self.advance(claim, Event.submit)

    def accept(self, claim: Claim, *, protects: bool) -> None:
        """Step `claim` to accepted and give it the next acceptance order; a claim that
        `protects` joins `protecting` (its blocks count against the pool)."""
        self.claims[claim.claim_id] = claim
        self.advance(claim, Event.accept)
        claim.accepted_order = self._accepted
        self._accepted += 1
        claim.protects = protects
        if protects:
            self.protecting[claim.claim_id] = claim

    def forget(self, claim: Claim) -> None:
        """Drop `claim` from `claims` and `protecting` (its id stays decided in the trace)."""
        self.claims.pop(claim.claim_id, None)
        self.protecting.pop(claim.claim_id, None)

    def blame(self, blocking: Iterable[Claim]) -> None:
        """Step `block` for each claim a refusal or deferral names (it must be preserving and
        responsible, else `IllegalTransition`)."""
        for claim in blocking:
            self.advance(claim, Event.block)

    def close(self) -> None:
        """Raise `OwedAtEnd` if a claim still owes an event (changes nothing)."""
        for claim in self.claims.values():
            owed = at_end(claim.phase)
            if owed is not None:
                raise OwedAtEnd(f"claim {claim.claim_id}: {owed.message}")

    # -- positions and the leading prefix --------------------------------------------------

    @staticmethod
    def materializes(claim: Claim) -> bool:
        """Whether `claim` is accepted and its leading run meets the predicate (the runtime
        reports `resident_claim_materialized` and steps `materialize`)."""
        return claim.phase is Phase.accepted and claim.leading_blocks >= claim.required_blocks

    def break_predicate(self, claim: Claim) -> Loss:
        """Step `predicate_broken` and say what the fall owes: `harm` (now breached: the
        runtime reports harm and steps `harm`), `lost` (back to accepted: it reports the loss
        and steps `lose`), or `none`."""
        self.advance(claim, Event.predicate_broken)
        if claim.phase is Phase.breached:
            return Loss.harm
        return Loss.lost if claim.phase is Phase.accepted else Loss.none

    # -- deadlines -------------------------------------------------------------------------

    def expire_at(self, claim: Claim, *, step: int | None = None, ms: float | None = None) -> None:
        """Arm (or re-arm, for refresh-on-hit) `claim`'s expiry at engine `step` and/or at
        clock time `ms`; the latest arming of each kind replaces earlier ones."""
        if step is not None:
            self._by_step.arm(claim, step)
        if ms is not None:
            self._by_ms.arm(claim, ms)

    @property
    def armed(self) -> bool:
        """Whether any expiry deadline is armed (perhaps one re-armed since: `due` may still
        find nothing); changes nothing."""
        return bool(self._by_step._heap or self._by_ms._heap)

    def due(self, step: int, now_ms: float | None = None) -> list[Claim]:
        """Claims whose deadline is at or before `step` (or `now_ms`) and that may still
        expire, in deadline then acceptance order; their deadlines are consumed. The caller
        reports each expiry and steps `expire`."""
        if not self._by_step.any_due(step) and (now_ms is None or not self._by_ms.any_due(now_ms)):
            return []  # the common case, every engine step
        ids = list(self._by_step.pop_due(step))
        if now_ms is not None:
            ids += self._by_ms.pop_due(now_ms)
        due = [self.claims.get(claim_id) for claim_id in dict.fromkeys(ids)]
        return [c for c in due if c is not None and self.allows(c, Event.expire)]


_next_request_phase = functools.cache(request_step)
"""`requests.request_step`, memoized (pure; runtimes ask it for every request event)."""


def next_request_phase(request_id: str, phase: RequestPhase, event: RequestEvent) -> RequestPhase:
    """The request lifecycle's next phase; raises `IllegalTransition` when it forbids `event`."""
    target = _next_request_phase(phase, event)
    if isinstance(target, RequestViolation):
        raise IllegalTransition(f"request {request_id}", phase, event, target.message, target.rule)
    return target
