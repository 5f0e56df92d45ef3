"""The MicroRuntime: a block-level KV pool with resident claims and an active/resident arbiter.

Three resources stay apart (seed 001 section 1): resident reusable KV (cached blocks, pinned or
not), active live KV (blocks running requests hold; under full attention every computed chunk
stays live) and future reusable admission (whether a request's new blocks get a prefix hash).
Every state change is emitted as a kvclaims trace v1 event (DESIGN 3), and every claim event
is first stepped through the lifecycle machine: the runtime keeps each claim's `Phase` and
cannot emit an event the contract forbids without raising `LifecycleBug` (a runtime bug, never
an input problem). The numbers a scenario reports are read from this runtime's state and trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kvclaims.microruntime.arbiter import CapacityProof, unavailable_reason
from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec, validate_inputs
from kvclaims.microruntime.policies import (
    POLICIES,
    BoundMethod,
    ClaimPlan,
    PlanningContext,
    Policy,
    Protection,
)
from kvclaims.microruntime.pool import BlockPool
from kvclaims.microruntime.tracing import TraceSink, trace_header
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.tables import OFFLOAD_MODES
from kvclaims.spec.trace import ConflictReason, RestorationOutcome
from kvclaims.spec.vocabulary import NS_PER_MS, ProtectionMode
from kvclaims.statemachine.checkpoint import HybridCheckpoint, restore
from kvclaims.statemachine.ledger import (
    Claim,
    ClaimLedger,
    ConflictAction,
    LifecycleBug,
    Loss,
    fewest_oldest,
    next_request_phase,
)
from kvclaims.statemachine.lifecycle import (
    RESPONSIBLE,
    RETIRED,
    SATISFIABLE,
    SETTLED,
    ClaimProfile,
    Event,
    Phase,
)
from kvclaims.statemachine.requests import REQUEST_INITIAL, RequestEvent, RequestPhase

_RESTORATION_EVENT = {
    RestorationOutcome.refusal: Event.fail_restoration_refusal,
    RestorationOutcome.demotion: Event.fail_restoration_demotion,
    RestorationOutcome.expiry: Event.fail_restoration_expiry,
    RestorationOutcome.harm: Event.fail_restoration_harm,
}

_RESERVING = RESPONSIBLE - {Phase.offloaded}
"""Responsible phases in which a claim's blocks are protected on the device (an offloaded claim
reserves no device block until its restore)."""


_SCALE = {"steps": 1, "ms": NS_PER_MS}
"""Per duration clock (the `<clock>` of `duration_<clock>` / `max_duration_<clock>`), the
runtime's units per trace unit: engine steps are steps, milliseconds are `t_ns` nanoseconds."""

__all__ = [
    "Extension",
    "ExtensionOutcome",
    "FaultKind",
    "LifecycleBug",
    "MicroClaim",
    "MicroRuntime",
    "RequestOutcome",
]


class FaultKind(StrEnum):
    """Faults a test or scenario may inject (each is reported as `fault_injected`)."""

    invalid_kv_load = "invalid_kv_load"
    """A failed KV load drops a cached block's hash, even from a pinned block (vLLM's `fail`
    policy on an invalid load)."""
    restore_failure = "restore_failure"
    """The next restore of an offloaded claim fails."""
    checkpoint_in_place_mutation = "checkpoint_in_place_mutation"
    """A two-key checkpoint's layout metadata is mutated in place (seed 002): same payload
    bytes, different logical value."""


class RequestOutcome(StrEnum):
    """What `submit_request` (or a retry) did with a request."""

    admitted = "admitted"
    deferred = "deferred"
    refused = "refused"
    waiting = "waiting"
    """Not schedulable now because running requests or TTL pins hold blocks; no claim is
    to blame, so nothing is attributed (like vLLM's waiting queue)."""


class ExtensionOutcome(StrEnum):
    """What `MicroRuntime.extend_claim` did with a request that named an extendable claim."""

    granted = "granted"
    """The requested term, in full: `resident_claim_extended` was emitted."""
    clipped = "clipped"
    """Granted up to the claim's cap only (the request asked past it): emitted with the
    shorter duration that ends at the cap."""
    refused = "refused"
    """Nothing granted, nothing emitted: the term would not end later than the one the claim
    already has (a shorter request, or a claim already at its cap)."""


@dataclass(frozen=True, slots=True)
class Extension:
    """The result of `MicroRuntime.extend_claim`: the outcome, the durations the emitted
    `resident_claim_extended` carries (from the extension's stamp; None where not granted) and,
    for a clipped or refused request, why."""

    claim_id: str
    outcome: ExtensionOutcome
    duration_steps: int | None = None
    duration_ms: int | None = None
    why: str | None = None

    @property
    def granted(self) -> bool:
        """Whether the term got longer (an event was emitted)."""
        return self.outcome is not ExtensionOutcome.refused


@dataclass(eq=False, slots=True, kw_only=True)
class MicroClaim(Claim):
    """A ledger claim (`slots[i]`: the pool block holding position i) plus the MicroRuntime's
    physical side: how its blocks are protected, which positions are pinned or retained, and
    its two-key checkpoint."""

    spec: ClaimSpec
    protection: Protection = Protection.none
    protected_blocks: int = 0
    pinned: list[int] = field(default_factory=list)
    retained: list[int] = field(default_factory=list)
    expires_at: int | None = None
    """The engine step its `duration_steps` term ends at (its armed deadline), if it has one."""
    decided: tuple[int, int] = (0, 0)
    """(engine step, t_ns) of its acceptance: where its caps run from."""
    started: tuple[int, int] = (0, 0)
    """(engine step, t_ns) its duration clock runs from: acceptance or the last refreshing hit."""
    extended_to: dict[str, int] = field(default_factory=dict)
    """Per clock ("steps" / "ms"), the latest end an extension granted (engine step / t_ns)."""
    checkpoint: HybridCheckpoint | None = None
    recorded_value_hash: str | None = None
    failing_restore: RestorationOutcome | None = None

    def promised_end(self, clock: str) -> int | None:
        """The earliest engine step (`clock` "steps") or `t_ns` ("ms") at which the claim may
        expire (DESIGN 6.3): `min(max(start + duration, latest extension), decision + cap)`;
        None if its terms carry no duration on that clock."""
        spec = self.spec
        duration = spec.duration_steps if clock == "steps" else spec.duration_ms
        if duration is None:
            return None
        at, scale = (0, 1) if clock == "steps" else (1, NS_PER_MS)
        end = self.started[at] + duration * scale
        extended = self.extended_to.get(clock)
        if extended is not None and extended > end:
            end = extended
        cap = spec.max_duration_steps if clock == "steps" else spec.max_duration_ms
        if cap is not None:
            end = min(end, self.decided[at] + cap * scale)
        return end

    def cap_end(self, clock: str) -> int | None:
        """Where the claim's cap on `clock` ends its protected life (None: no cap)."""
        cap = self.spec.max_duration_steps if clock == "steps" else self.spec.max_duration_ms
        return None if cap is None else self.decided[0 if clock == "steps" else 1] + cap * _SCALE[clock]

    @classmethod
    def of(cls, spec: ClaimSpec) -> MicroClaim:
        return cls(
            claim_id=spec.claim_id,
            mode=spec.mode,
            footprint_blocks=spec.footprint_blocks,
            required_blocks=spec.required_blocks,
            profile=ClaimProfile.of(spec.mode, two_key=spec.two_key),
            spec=spec,
        )


@dataclass(eq=False, slots=True)
class RequestRecord:
    """One request's runtime state: the blocks it holds, prefix order (shared hits first).

    Its sequences are tuples: the runtime keeps every record for the whole run, and the cyclic
    GC stops tracking a tuple of ints, where each list would be one more object that triggers
    and is traversed by every full collection (the 100k-operation bench ran 4 full collections
    with lists, 2 with tuples)."""

    spec: RequestSpec
    phase: RequestPhase = REQUEST_INITIAL
    blocks: tuple[int, ...] = ()
    hit_blocks: int = 0
    deferrals: int = 0
    live_after_chunk: tuple[int, ...] = ()
    outcome: RequestOutcome | None = None
    restored_checkpoint: bool = False
    restore_failed: bool = False


@dataclass
class RuntimeStats:
    """Counters read from the simulation (never set by a scenario)."""

    evicted_blocks: int = 0
    waiting_request_steps: int = 0
    requests_that_waited: set[str] = field(default_factory=set)
    host_offloaded_blocks: int = 0
    host_restored_blocks: int = 0
    recomputed_blocks: int = 0
    ttl_pins_expired: int = 0


def _footprint_bound(claims: list[MicroClaim] | None) -> int:
    """One past the last position any of `claims` covers (0 for none)."""
    return max([c.footprint_blocks for c in claims]) if claims else 0


def _clock_stamped(record: dict[str, Any], now_ns: int) -> dict[str, Any]:
    """`record` with the wall clock's `t_ns` right after `engine_step` (where a runtime with
    a wall clock has always put it)."""
    fields = list(record.items())
    return dict([*fields[:3], ("t_ns", now_ns), *fields[3:]])


class MicroRuntime:
    """A MicroRuntime over `usable_blocks` blocks of `block_size` tokens, run by `policy`.

    Drive it with `submit_claims`, `submit_request` / `finish_request`, `demote`, `release`,
    `offload`, `extend_claim`, `inject_fault` and `tick`; read results from its records and its trace (the
    `sink`). `close` checks that no claim still owes an event.
    """

    def __init__(
        self,
        usable_blocks: int,
        *,
        block_size: int = 16,
        policy: Policy = POLICIES["hard_protected"],
        sink: TraceSink | None = None,
        source: str = "kvclaims-microruntime",
        wall_clock: bool = False,
    ) -> None:
        validate_inputs(usable_blocks, source=source)
        self.pool = BlockPool(usable_blocks, block_size)
        self.policy = policy
        self.step = 0
        self.header = trace_header(usable_blocks, block_size, source)
        self.ledger = ClaimLedger()
        self.claims: dict[str, MicroClaim] = self.ledger.claims  # type: ignore[assignment]
        self.requests: dict[str, RequestRecord] = {}
        self.objects: dict[str, int] = {}
        self.stats = RuntimeStats()
        self.arbiter_log: list[dict[str, Any]] = []
        self.phases_reached = self.ledger.phases_reached
        self.transitions_taken = self.ledger.transitions_taken
        self.request_transitions: set[tuple[RequestPhase, RequestEvent, RequestPhase]] = set()
        self._sink: TraceSink = sink if sink is not None else (lambda event: None)
        self._seq = 0
        self._claims_on: dict[str, list[MicroClaim]] = {}
        self._hashes_of: dict[str, list[str]] = {}
        self._pending: list[RequestRecord] = []
        self._ttl_pins: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._admitted_by_clock: list[str] = []
        self.wall_clock = wall_clock
        """Whether the runtime keeps a simulated wall clock (`now_ns`, moved by
        `advance_clock`): its claim events then carry `t_ns` and `duration_ms` claims expire
        on it. Without one a `duration_ms` claim is an input error (it could never be judged)."""
        self.now_ns = 0

    # ------------------------------------------------------------------ emission

    @property
    def events_emitted(self) -> int:
        """Trace events emitted so far (the last `seq`)."""
        return self._seq

    def _emit(self, event: str, fields: dict[str, Any]) -> None:
        self._seq += 1
        record = {"seq": self._seq, "event": event, "engine_step": self.step, **fields}
        self._sink(_clock_stamped(record, self.now_ns) if self.wall_clock else record)

    def _emit_claim_block(
        self, event: str, block: int, block_hash: str, claim_id: str, position: int
    ) -> None:
        """Emit `event` (`block_stored` / `block_removed`) naming the claim whose `position`
        `block` holds: `_emit` without a fields dict (it runs once per claim per block)."""
        self._seq += 1
        record = {
            "seq": self._seq,
            "event": event,
            "engine_step": self.step,
            "block_id": block,
            "block_hash": block_hash,
            "claim_id": claim_id,
            "position": position,
        }
        self._sink(_clock_stamped(record, self.now_ns) if self.wall_clock else record)

    def _advance(self, claim: MicroClaim, event: Event) -> None:
        """Step the claim in the ledger; an illegal event raises `IllegalTransition`."""
        self.ledger.advance(claim, event)

    def _advance_request(self, record: RequestRecord, event: RequestEvent) -> None:
        target = next_request_phase(record.spec.request_id, record.phase, event)
        self.request_transitions.add((record.phase, event, target))
        record.phase = target

    # ------------------------------------------------------------------ objects and hashes

    def register_object(self, object_id: str, blocks: int) -> None:
        """Declare a reusable prefix object's length (planners may read it)."""
        self.objects[object_id] = max(blocks, self.objects.get(object_id, 0))

    def _hashes(self, object_id: str, blocks: int) -> list[str]:
        """Block hashes of the first `blocks` blocks of an object's prefix (chained by position:
        equal objects share a prefix, different objects never do)."""
        hashes = self._hashes_of.get(object_id)
        if hashes is None:
            hashes = self._hashes_of[object_id] = []
        if len(hashes) < blocks:
            hashes.extend(f"{object_id}#{i}" for i in range(len(hashes), blocks))
        return hashes if len(hashes) == blocks else hashes[:blocks]

    def residency(self, object_id: str, blocks: int) -> tuple[int, int]:
        """(cached blocks among the object's first `blocks`, leading cached blocks), read from
        the pool's hash index."""
        hashes = self._hashes(object_id, blocks)
        by_hash = self.pool.by_hash
        return sum(1 for h in hashes if h in by_hash), self.pool.cached_prefix(hashes)

    # ------------------------------------------------------------------ claims

    def submit_claims(self, specs: Sequence[ClaimSpec]) -> list[ClaimPlan]:
        """Submit claims together (materialization policies plan them as a batch).

        Each claim enters the ledger (`claims`) submitted, then is accepted or rejected by the
        policy's plan; an accepted one is indexed under its object, tags (and pins or retains)
        the blocks of its prefix already cached, may materialize at once, and an expiring one
        gets its deadline. Duplicate or malformed specs are an `InputError` (nothing changes).
        """
        validate_inputs(self.pool.usable, specs, source=self.header["source"])
        if not self.wall_clock and any(s.duration_ms is not None for s in specs):
            raise InputError(
                [
                    Problem(
                        self.header["source"],
                        "a duration_ms claim needs a runtime with a wall clock (wall_clock=True)",
                        field="claims",
                    )
                ]
            )
        taken = [s.claim_id for s in specs if s.claim_id in self.claims]
        if taken:
            raise InputError(
                [
                    Problem(self.header["source"], f"claim id {c!r} was already submitted", field="claims")
                    for c in taken
                ]
            )
        records = []
        for spec in specs:
            record = MicroClaim.of(spec)
            self._emit("resident_claim_submitted", spec.terms())
            self.ledger.submit(record)
            records.append(record)
        if self.policy.accepts_claims:
            context = PlanningContext(self._protected_budget_left(), self.objects, self.policy.protection_of)
            plans = self.policy.planner(specs, context)
        else:
            plans = [ClaimPlan(False, 0, f"{self.policy.name} has no claim contract")] * len(specs)
        for record, plan in zip(records, plans, strict=True):
            if plan.accepted:
                self._accept(record, plan)
            else:
                self._emit(
                    "resident_claim_rejected", {"claim_id": record.spec.claim_id, "reason": plan.reason}
                )
                self._advance(record, Event.reject)
        return plans

    def submit_claim(self, spec: ClaimSpec) -> ClaimPlan:
        """`submit_claims` for one claim."""
        return self.submit_claims([spec])[0]

    def _protected_budget_left(self) -> int:
        budget = self.policy.protected_budget_blocks or self.pool.usable
        return max(0, budget - sum(c.footprint_blocks for c in self.ledger.protecting.values()))

    def _accept(self, claim: MicroClaim, plan: ClaimPlan) -> None:
        spec = claim.spec
        self._emit("resident_claim_accepted", spec.terms())
        claim.protection = self.policy.protection_of(spec.mode)
        claim.protected_blocks = plan.protected_blocks if claim.protection is not Protection.none else 0
        self.ledger.accept(claim, protects=claim.protection is Protection.pin)
        claim.decided = claim.started = (self.step, self.now_ns)
        if spec.mode is ProtectionMode.expiring:
            self._arm_expiry(claim)
        self._claims_on.setdefault(spec.object_id, []).append(claim)
        by_hash = self.pool.by_hash
        for position, block_hash in enumerate(self._hashes(spec.object_id, spec.footprint_blocks)):
            block = by_hash.get(block_hash)
            if block is not None:
                self._emit_claim_block("block_stored", block, block_hash, spec.claim_id, position)
                self._tag(claim, position, block)
        self._settle_leading(claim)

    def pin_limit(self, claim: MicroClaim) -> int:
        """How many leading positions victim exclusion covers for this claim."""
        return claim.protected_blocks

    def _tag(self, claim: MicroClaim, position: int, block: int) -> None:
        """`block` now holds the claim's `position`: protect it as the policy says."""
        claim.hold(position, block)
        protection = claim.protection
        if (
            protection is Protection.none
            or claim.phase not in _RESERVING
            or position >= self.pin_limit(claim)
        ):
            return
        if protection is Protection.pin:
            self.pool.pin(block)
            claim.pinned.append(position)
        else:
            self.pool.retain(block)
            claim.retained.append(position)

    def _settle_leading(self, claim: MicroClaim) -> None:
        """Materialize the claim once its leading prefix meets the predicate."""
        if self.ledger.materializes(claim):
            fields: dict[str, Any] = {"claim_id": claim.claim_id, "leading_blocks": claim.leading_blocks}
            if claim.spec.two_key:
                claim.checkpoint = HybridCheckpoint.take(claim.spec.object_id, claim.required_blocks)
                claim.recorded_value_hash = claim.checkpoint.value_hash
                fields["checkpoint"] = claim.checkpoint.recorded()
            self._emit("resident_claim_materialized", fields)
            self._advance(claim, Event.materialize)

    def _lose(self, claim: MicroClaim, position: int) -> None:
        """The claim's block at `position` left the pool: update the prefix, report breakage."""
        block = claim.slots[position]
        crossed = claim.drop(position)
        if position in claim.pinned:
            claim.pinned.remove(position)
        if position in claim.retained:
            claim.retained.remove(position)
            self.pool.unretain(block)
        if crossed:
            self._report_break(claim)
        if claim.held_count == 0 and claim.phase in SETTLED:
            self._forget(claim)

    def _report_break(self, claim: MicroClaim) -> None:
        """The claim's leading prefix fell below its predicate: the model says what that owes
        (`ClaimLedger.break_predicate`), harm (protection ends) or a loss, reported here."""
        loss = self.ledger.break_predicate(claim)
        if loss is Loss.harm:
            self._emit(
                "resident_claim_harmed",
                {
                    "claim_id": claim.claim_id,
                    "leading_blocks": claim.leading_blocks,
                    "required_blocks": claim.required_blocks,
                },
            )
            self._advance(claim, Event.harm)
            self._end_protection(claim)
        elif loss is Loss.lost:
            self._emit(
                "resident_claim_lost", {"claim_id": claim.claim_id, "leading_blocks": claim.leading_blocks}
            )
            self._advance(claim, Event.lose)

    def _end_protection(self, claim: MicroClaim) -> None:
        """Responsibility ended (or moved off the GPU): unpin tail first, drop retention; a
        released or harmed claim is retired."""
        for position in sorted(claim.pinned, reverse=True):
            self.pool.unpin(claim.slots[position])
        claim.pinned.clear()
        for position in sorted(claim.retained, reverse=True):
            self.pool.unretain(claim.slots[position])
        claim.retained.clear()
        if claim.phase in RETIRED or (claim.phase in SETTLED and claim.held_count == 0):
            self._forget(claim)

    def _forget(self, claim: MicroClaim) -> None:
        """The claim names no block any more: drop it from its object's index."""
        claims = self._claims_on[claim.spec.object_id]
        if claim in claims:
            claims.remove(claim)
        claim.drop_all()

    def _claim(self, claim_id: str) -> MicroClaim:
        claim = self.claims.get(claim_id)
        if claim is None:
            raise InputError(
                [Problem(self.header["source"], f"unknown claim {claim_id!r}", field="claim_id")]
            )
        return claim

    def allows(self, claim_id: str, event: Event) -> bool:
        """Is `event` a legal next step for this claim now (for drivers choosing operations)?"""
        return self.ledger.allows(self._claim(claim_id), event)

    def _require(self, claim: MicroClaim, event: Event) -> None:
        if not self.ledger.allows(claim, event):
            raise InputError(
                [
                    Problem(
                        self.header["source"],
                        f"{event} is not allowed for claim {claim.spec.claim_id} in phase {claim.phase}",
                        field="claim_id",
                    )
                ]
            )

    def demote(self, claim_id: str, reason: str = "demoted by policy") -> None:
        """Relax responsibility before loss: the claim steps to demoted, its pins and retention
        are dropped (its blocks become evictable and stay named until lost), so later loss is
        post-release, not harm. An illegal demotion is an `InputError` (nothing changes)."""
        claim = self._claim(claim_id)
        self._require(claim, Event.demote)
        self._emit("resident_claim_demoted", {"claim_id": claim_id, "reason": reason})
        self._advance(claim, Event.demote)
        self._end_protection(claim)

    def release(self, claim_id: str, reason: str = "released by owner") -> None:
        """The owner ends the claim: it steps to released, its pins and retention are dropped
        and it names no block any more. An illegal release is an `InputError`."""
        claim = self._claim(claim_id)
        self._require(claim, Event.release)
        self._emit("resident_claim_released", {"claim_id": claim_id, "reason": reason})
        self._advance(claim, Event.release)
        self._end_protection(claim)

    def offload(self, claim_id: str, tier: str = "host") -> None:
        """Copy the claim's prefix to the host tier (counted in `stats`) and let its GPU blocks
        become evictable: the claim steps to offloaded and its pins are dropped; a later reuse
        restores it first. An illegal offload is an `InputError`."""
        claim = self._claim(claim_id)
        self._require(claim, Event.offload)
        self._emit("resident_claim_offloaded", {"claim_id": claim_id, "tier": tier})
        self._advance(claim, Event.offload)
        self.stats.host_offloaded_blocks += claim.leading_blocks
        self._end_protection(claim)

    def extend_claim(
        self,
        claim_id: str,
        *,
        duration_steps: int | None = None,
        duration_ms: int | None = None,
        reason: str | None = None,
    ) -> Extension:
        """Lengthen a claim's term (extend-only deadlines, DESIGN 6.3): on the clock its terms
        carry, the claim may not expire before now plus the duration given (engine steps from
        `step`, milliseconds from `now_ns`), and an expiring claim's deadline moves there.

        The grant is `min(now + duration, the cap's end)`: a request past the cap is clipped
        to it (`ExtensionOutcome.clipped`, the emitted duration ends at the cap). A grant that
        would not end later than the term the claim already has (a shorter request, a claim at
        its cap) changes nothing and emits nothing (`ExtensionOutcome.refused`). A granted or
        clipped extension emits `resident_claim_extended` with the granted duration (and
        `reason`) and steps the claim's `extend` self-loop; its phase does not change.

        Raises `InputError` (nothing emitted or changed) for a request the contract cannot take:
        an unknown claim, one whose term has ended or never began (not accepted, materialized,
        offloaded or restoring), no or a non-positive duration, or a clock the claim's terms
        lack (adding a clock would be a change of terms)."""
        claim = self._claim(claim_id)
        self._require(claim, Event.extend)
        requested = {c: d for c, d in (("steps", duration_steps), ("ms", duration_ms)) if d is not None}
        problem = None
        if not requested:
            problem = "give duration_steps or duration_ms: the term the extension grants"
        elif any(d <= 0 for d in requested.values()):
            problem = "an extension's duration must be positive"
        else:
            lacking = [c for c in requested if claim.promised_end(c) is None]
            if lacking:
                problem = (
                    f"claim {claim_id} carries no duration_{lacking[0]}: an extension adds no clock "
                    "(that is a change of terms)"
                )
        if problem is not None:
            raise InputError([Problem(self.header["source"], problem, field="duration")])
        granted: dict[str, int] = {}
        ends: dict[str, int] = {}
        clipped = False
        for clock, duration in requested.items():
            scale, now = _SCALE[clock], self.step if clock == "steps" else self.now_ns
            end, cap_end = now + duration * scale, claim.cap_end(clock)
            if cap_end is not None and end > cap_end:
                duration = (cap_end - now) // scale  # the most the cap leaves, in whole units
                end, clipped = now + duration * scale, True
            promised = claim.promised_end(clock)
            assert promised is not None
            if duration > 0 and end > promised:
                granted[clock], ends[clock] = duration, end
        if not granted:
            return Extension(
                claim_id,
                ExtensionOutcome.refused,
                why="the term would not end later than the one the claim already has"
                + (" (it is at its cap)" if clipped else ""),
            )
        fields: dict[str, Any] = {"claim_id": claim_id}
        fields.update({f"duration_{clock}": duration for clock, duration in granted.items()})
        if reason is not None:
            fields["reason"] = reason
        self._emit("resident_claim_extended", fields)
        self._advance(claim, Event.extend)
        claim.extended_to.update(ends)
        if claim.spec.mode is ProtectionMode.expiring:
            self._arm_expiry(claim)
        return Extension(
            claim_id,
            ExtensionOutcome.clipped if clipped else ExtensionOutcome.granted,
            duration_steps=granted.get("steps"),
            duration_ms=granted.get("ms"),
            why="clipped to the claim's cap" if clipped else None,
        )

    def _arm_expiry(self, claim: MicroClaim) -> None:
        """(Re-)arm the claim's deadline at its promised end (`MicroClaim.promised_end`): at
        acceptance, on a satisfied reuse of a `refresh_on_hit` claim (the model restarts its
        clock on that reuse, never past the cap) and on an extension."""
        steps_end = claim.promised_end("steps")
        if steps_end is not None:
            claim.expires_at = steps_end
            self.ledger.expire_at(claim, step=steps_end)
        ns_end = claim.promised_end("ms")
        if ns_end is not None:
            self.ledger.expire_at(claim, ms=ns_end / NS_PER_MS)

    def _expire_due(self) -> None:
        now_ms = self.now_ns / NS_PER_MS if self.wall_clock else None
        for claim in self.ledger.due(self.step, now_ms):
            self._emit("resident_claim_expired", {"claim_id": claim.claim_id, "reason": "duration ended"})
            self._advance(claim, Event.expire)
            self._end_protection(claim)

    # ------------------------------------------------------------------ blocks

    def _store(self, blocks: list[int], object_id: str, start: int, hashes: list[str]) -> None:
        """Computed blocks become reusable prefix state (future reusable admission), each
        reported `block_stored`. This and `_allocate` are the hot path: positions past every
        claim's footprint emit inline, naming no claim."""
        stored = self.pool.store(blocks, object_id, start, hashes)
        claims = self._claims_on.get(object_id)
        claimed_below = _footprint_bound(claims)  # storing forgets no claim: bounded once
        seq, sink = self._seq, self._sink
        for position in stored:
            if position < claimed_below:
                self._seq = seq
                self._store_claimed(claims, blocks[position - start], hashes[position], position)  # type: ignore[arg-type]
                seq = self._seq
            else:
                seq += 1
                sink(
                    {
                        "seq": seq,
                        "event": "block_stored",
                        "block_id": blocks[position - start],
                        "block_hash": hashes[position],
                    }
                )
        self._seq = seq

    def _store_claimed(self, claims: list[MicroClaim], block: int, block_hash: str, position: int) -> None:
        """`block` stored at a position some claim covers: every responsible claim missing it
        takes it (`block_stored` naming each), or one `block_stored` names no claim."""
        tagged = [
            c
            for c in claims
            if position < c.footprint_blocks and c.phase in RESPONSIBLE and c.slots[position] is None
        ]
        if not tagged:
            self._emit("block_stored", {"block_id": block, "block_hash": block_hash})
        for claim in tagged:
            self._emit_claim_block("block_stored", block, block_hash, claim.claim_id, position)
            self._tag(claim, position, block)
            self._settle_leading(claim)

    def _allocate(self, count: int, record: RequestRecord) -> list[int]:
        """Take `count` blocks for `record`, each cached one an eviction reported
        `block_removed`: once per claim naming the block (which then loses it), else once
        naming no claim, inline (the hot path)."""
        blocks, evicted = self.pool.allocate(count)
        record.blocks += tuple(blocks)
        self.stats.evicted_blocks += len(evicted)
        claims_on = self._claims_on
        seq, sink = self._seq, self._sink
        for block, block_hash, object_id, position in evicted:
            claims = claims_on.get(object_id)
            tagged = (
                [c for c in claims if position < c.footprint_blocks and c.slots[position] == block]
                if claims
                else None
            )
            if tagged:
                self._seq = seq
                self._evict_claimed(tagged, block, block_hash, position)
                seq = self._seq
            else:
                seq += 1
                sink({"seq": seq, "event": "block_removed", "block_id": block, "block_hash": block_hash})
        self._seq = seq
        return blocks

    def _evict_claimed(self, tagged: list[MicroClaim], block: int, block_hash: str, position: int) -> None:
        """An eviction took `block` from the claims in `tagged`: report it to each, then each
        loses the position."""
        for claim in tagged:
            self._emit_claim_block("block_removed", block, block_hash, claim.claim_id, position)
        for claim in tagged:
            self._lose(claim, position)

    # ------------------------------------------------------------------ requests

    def submit_request(self, spec: RequestSpec) -> RequestOutcome:
        """Schedule an active request now: admit it, or let the arbiter act, or let it wait."""
        validate_inputs(self.pool.usable, requests=[spec], source=self.header["source"])
        if spec.request_id in self.requests:
            raise InputError(
                [
                    Problem(
                        self.header["source"],
                        f"request id {spec.request_id!r} was already used",
                        field="requests",
                    )
                ]
            )
        if spec.reuse_claim is not None:
            claim = self._claim(spec.reuse_claim)
            why = None
            if claim.phase in (Phase.absent, Phase.submitted, Phase.rejected, Phase.released):
                why = f"which is {claim.phase}"
            elif spec.object_id != claim.spec.object_id:
                why = f"but reads {spec.object_id}, not the claim's object {claim.spec.object_id}"
            if why is not None:
                raise InputError(
                    [
                        Problem(
                            self.header["source"],
                            f"request {spec.request_id} reuses {spec.reuse_claim}, {why}",
                            field="reuse_claim",
                        )
                    ]
                )
        record = RequestRecord(spec)
        self.requests[spec.request_id] = record
        return self._schedule(record)

    def _caching(self, spec: RequestSpec) -> bool:
        return spec.kind is RequestKind.resident or self.policy.admit_active_to_cache

    def _schedule(self, record: RequestRecord) -> RequestOutcome:
        spec = record.spec
        # a hash `_hashes` never made was never stored: look up only those made so far (a
        # request that does not cache, like a bounded one, then makes none at all)
        made = self._hashes_of.get(spec.object_id, [])
        hit_blocks = self.pool.cached_blocks(made[: spec.blocks])
        room = self.pool.room_beside(hit_blocks)
        if spec.blocks - len(hit_blocks) <= room:
            return self._admit(record, hit_blocks, caching=self._caching(spec))
        return self._arbitrate(record, hit_blocks, room)

    def _blocking(self, hit_blocks: Sequence[int]) -> tuple[list[MicroClaim], int, int]:
        """Claims pinning blocks (in acceptance order), how many blocks they pin, and how many
        of those the request shares (hits)."""
        shared = set(hit_blocks)
        pinned: set[int] = set()
        blocking: list[MicroClaim] = []
        for claim in self.ledger.protecting.values():
            if claim.pinned:  # type: ignore[attr-defined]
                blocking.append(claim)  # type: ignore[arg-type]
                pinned.update(claim.slots[p] for p in claim.pinned)  # type: ignore[attr-defined]
        return blocking, len(pinned), len(pinned & shared)

    def _arbitrate(self, record: RequestRecord, hit_blocks: list[int], room: int) -> RequestOutcome:
        spec = record.spec
        blocking, protected, shared = self._blocking(hit_blocks)
        proof = CapacityProof(protected, spec.blocks - shared, self.pool.usable)
        if not proof.claims_block:
            return self._wait(record)
        entry: dict[str, Any] = {
            "step": self.step,
            "request_id": spec.request_id,
            "blocking_claim_ids": [c.spec.claim_id for c in blocking],
            **proof.fields(),
            "actions": [],
        }
        self.arbiter_log.append(entry)
        for action in self.policy.conflict_actions:
            reason = unavailable_reason(action, self.pool.usable)
            if reason is not None:
                entry["actions"].append({"action": action.value, "result": "unavailable", "reason": reason})
                continue
            outcome = self._try_action(action, record, hit_blocks, room, blocking, proof)
            entry["actions"].append(
                {"action": action.value, "result": "taken" if outcome else "not applicable"}
            )
            if outcome is not None:
                return outcome
        entry["actions"].append({"action": "refuse", "result": "taken", "reason": "no listed action applied"})
        return self._conflict(record, "active_request_refused", blocking, proof)

    def _try_action(
        self,
        action: ConflictAction,
        record: RequestRecord,
        hit_blocks: list[int],
        room: int,
        blocking: list[MicroClaim],
        proof: CapacityProof,
    ) -> RequestOutcome | None:
        spec = record.spec
        need = spec.blocks - len(hit_blocks)
        if action is ConflictAction.refuse:
            return self._conflict(record, "active_request_refused", blocking, proof)
        if action is ConflictAction.defer:
            if record.deferrals >= self.policy.max_deferrals:
                return None
            return self._conflict(record, "active_request_deferred", blocking, proof)
        if action is ConflictAction.demote:
            chosen = self._enough(
                [
                    c
                    for c in blocking
                    if c.spec.mode is ProtectionMode.demotable and self.allows(c.spec.claim_id, Event.demote)
                ],
                need - room,
                hit_blocks,
            )
            if chosen is None:
                return None
            for claim in chosen:
                self.demote(claim.spec.claim_id, f"arbiter relaxed the claim for request {spec.request_id}")
            return self._admit(record, hit_blocks, caching=self._caching(spec))
        if action is ConflictAction.offload_resident:
            # the arbiter offloads only claims whose owner chose offload (mode offloadable);
            # offloading a hard_protected claim is legal (seed 001 table 3) but an explicit call
            offloadable = [
                c
                for c in blocking
                if c.spec.mode in OFFLOAD_MODES and self.allows(c.spec.claim_id, Event.offload)
            ]
            chosen = self._enough(offloadable, need - room, hit_blocks)
            if chosen is None:
                return None
            for claim in chosen:
                self.offload(claim.spec.claim_id)
            return self._admit(record, hit_blocks, caching=self._caching(spec))
        if action in (ConflictAction.bound_active_live, ConflictAction.offload_active):
            if spec.chunks is None or len(spec.chunks) < 2:
                return None
            window = max(spec.chunks)
            bound = (
                window if action is ConflictAction.offload_active else (self.policy.live_bound_blocks or 0)
            )
            if bound < window or bound >= spec.blocks or bound > self.pool.available:
                return None
            method = (
                BoundMethod.offload if action is ConflictAction.offload_active else self.policy.bound_method
            )
            return self._admit(record, [], caching=False, bound=bound, method=method)
        raise AssertionError(f"unhandled conflict action {action}")

    def _enough(
        self, candidates: list[MicroClaim], missing: int, hit_blocks: list[int]
    ) -> list[MicroClaim] | None:
        """The oldest candidates whose unpinning frees at least `missing` blocks, or None."""
        shared = set(hit_blocks)
        refs, pins = self.pool.request_refs, self.pool.pin_refs

        freed = 0

        def enough(chosen: list[MicroClaim]) -> bool:
            nonlocal freed  # each call adds one claim to the run: keep a running total
            blocks = [chosen[-1].slots[p] for p in chosen[-1].pinned]
            freed += sum(1 for b in blocks if pins[b] == 1 and refs[b] == 0 and b not in shared)
            return freed >= missing

        return fewest_oldest(candidates, enough)

    def _conflict(
        self, record: RequestRecord, event: str, blocking: list[MicroClaim], proof: CapacityProof
    ) -> RequestOutcome:
        """Emit a refusal or deferral with its blocking claims and capacity proof."""
        spec = record.spec
        self._emit(
            event,
            {
                "request_id": spec.request_id,
                "reason": ConflictReason.capacity.value,
                "blocking_claim_ids": [c.spec.claim_id for c in blocking],
                **self._proof_fields(proof),
            },
        )
        self.ledger.blame(blocking)
        if event == "active_request_deferred":
            self._advance_request(record, RequestEvent.defer)
            record.deferrals += 1
            record.outcome = RequestOutcome.deferred
            if record not in self._pending:
                self._pending.append(record)
            return RequestOutcome.deferred
        self._advance_request(record, RequestEvent.refuse_capacity)
        self._finish(record, "refused")
        record.outcome = RequestOutcome.refused
        return RequestOutcome.refused

    def _proof_fields(self, proof: CapacityProof) -> dict[str, int]:
        """The capacity proof as this runtime reports it."""
        return proof.fields()

    def _wait(self, record: RequestRecord) -> RequestOutcome:
        record.outcome = RequestOutcome.waiting
        self.stats.requests_that_waited.add(record.spec.request_id)
        if record not in self._pending:
            self._pending.append(record)
        return RequestOutcome.waiting

    def _admit(
        self,
        record: RequestRecord,
        hit_blocks: list[int],
        *,
        caching: bool,
        bound: int | None = None,
        method: BoundMethod | None = None,
    ) -> RequestOutcome:
        spec = record.spec
        if record in self._pending:
            self._pending.remove(record)
        self.pool.hold(hit_blocks)
        record.blocks = tuple(hit_blocks)
        record.hit_blocks = len(hit_blocks)
        record.outcome = RequestOutcome.admitted
        self._emit(
            "active_request_admitted",
            {
                "request_id": spec.request_id,
                "active_live_blocks": bound if bound is not None else spec.blocks,
            },
        )
        self._advance_request(record, RequestEvent.admit)
        if spec.job_id is not None and spec.job_id in self._ttl_pins:
            self._drop_ttl_pin(spec.job_id)
        if spec.reuse_claim is not None and not self._reuse(record, self.claims[spec.reuse_claim], caching):
            return RequestOutcome.refused
        self._compute(record, caching, bound, method)
        return RequestOutcome.admitted

    def _compute(
        self, record: RequestRecord, caching: bool, bound: int | None, method: BoundMethod | None
    ) -> None:
        """Run the prefill chunk by chunk. Under full attention every chunk stays live; a
        bound frees (recompute) or offloads the oldest chunks first."""
        spec = record.spec
        hashes = self._hashes(spec.object_id, spec.blocks) if caching else []
        position = 0
        for chunk in spec.chunk_sizes:
            end = position + chunk
            start = max(position, len(record.blocks) if bound is None else position)
            count = end - start
            if bound is not None:
                overflow = len(record.blocks) + count - bound
                if overflow > 0:
                    self._shed_oldest(record, overflow, method)
            if count > 0:
                new = self._allocate(count, record)
                if caching:
                    self._store(new, spec.object_id, start, hashes)
            record.live_after_chunk += (len(record.blocks),)
            position = end

    def _shed_oldest(self, record: RequestRecord, count: int, method: BoundMethod | None) -> None:
        oldest, record.blocks = record.blocks[:count], record.blocks[count:]
        self.pool.release(reversed(oldest))
        if method is BoundMethod.offload:
            self.stats.host_offloaded_blocks += count
        else:
            self.stats.recomputed_blocks += count

    def _reuse(self, record: RequestRecord, claim: MicroClaim, caching: bool) -> bool:
        """A request returns to a claim's object. Offloaded claims are restored first (restore
        before reuse), a materialized two-key claim's checkpoint in place; a failed restore
        ends in a claim-scoped outcome. False if refused."""
        spec = record.spec
        covers = spec.blocks >= claim.required_blocks  # a shorter request never reads the whole predicate
        if claim.phase is Phase.offloaded and covers and not self._restore(record, claim):
            return False
        if (
            claim.spec.two_key
            and claim.phase is Phase.materialized
            and covers
            and not record.restored_checkpoint
        ):
            self._resume_in_place(record, claim)
        satisfied = (
            covers
            and not record.restore_failed
            and claim.phase in SATISFIABLE
            and claim.leading_blocks >= claim.required_blocks
            and (not claim.spec.two_key or (claim.phase is Phase.materialized and record.restored_checkpoint))
        )
        self._emit(
            "request_reused",
            {
                "request_id": spec.request_id,
                "claim_id": claim.spec.claim_id,
                "cached_blocks": record.hit_blocks,
                "predicate_satisfied": satisfied,
            },
        )
        self._advance(claim, Event.reuse_satisfied if satisfied else Event.reuse_unsatisfied)
        self._advance_request(record, RequestEvent.reuse)
        if satisfied and claim.spec.refresh_on_hit:
            claim.started = (self.step, self.now_ns)  # what later extensions are judged against
            if claim.spec.mode is ProtectionMode.expiring:
                self._arm_expiry(claim)
        return True

    def _restore(self, record: RequestRecord, claim: MicroClaim) -> bool:
        """Bring an offloaded claim back before reuse: KV blocks from the host tier and, for a
        two-key claim, the checkpoint through payload -> scratch -> live -> view."""
        spec, claim_id = record.spec, claim.spec.claim_id
        self._emit("resident_claim_restore_required", {"claim_id": claim_id, "request_id": spec.request_id})
        self._advance(claim, Event.require_restore)
        if claim.failing_restore is not None:
            outcome, claim.failing_restore = claim.failing_restore, None
            return self._restoration_failed(record, claim, outcome)
        upto = min(claim.spec.footprint_blocks, spec.blocks)
        missing = upto - record.hit_blocks
        if missing > 0:
            hashes = self._hashes(spec.object_id, upto)
            self._store(self._allocate(missing, record), spec.object_id, record.hit_blocks, hashes)
            record.hit_blocks = upto
            self.stats.host_restored_blocks += missing
        self._emit("resident_claim_restored", {"claim_id": claim_id, "request_id": spec.request_id})
        self._advance(claim, Event.restore)
        if claim.spec.two_key:
            if not self._restore_checkpoint(claim):
                return self._restoration_failed(record, claim, self.policy.restoration_failure_outcome)
            record.restored_checkpoint = True
        self._protect_present(claim)
        return True

    def _resume_in_place(self, record: RequestRecord, claim: MicroClaim) -> None:
        """Seed 002: a reuse of a materialized two-key claim restores its checkpoint into the
        request's live slot while the KV key stays in the device tier. A failure ends the
        claim's responsibility (the policy's outcome, demotion where that is refusal: an
        in-place claim has no other tier to be refused back to)."""
        spec, claim_id = record.spec, claim.spec.claim_id
        self._emit("resident_claim_restore_required", {"claim_id": claim_id, "request_id": spec.request_id})
        self._advance(claim, Event.require_restore)
        self._emit("resident_claim_restored", {"claim_id": claim_id, "request_id": spec.request_id})
        self._advance(claim, Event.restore)
        if self._restore_checkpoint(claim):
            record.restored_checkpoint = True
            return
        outcome = self.policy.restoration_failure_outcome
        self._restoration_failed(
            record, claim, RestorationOutcome.demotion if outcome is RestorationOutcome.refusal else outcome
        )

    def _restore_checkpoint(self, claim: MicroClaim) -> bool:
        """The checkpoint through payload -> scratch -> live -> view, reported; the claim
        steps on whether its value hash is the recorded one (returned)."""
        assert claim.checkpoint is not None and claim.recorded_value_hash is not None
        result = restore(claim.checkpoint)
        self._emit(
            "resident_claim_checkpoint_restored",
            {
                "claim_id": claim.spec.claim_id,
                "boundary": claim.checkpoint.boundary,
                "payload_hash": result.payload_hash,
                "value_hash": result.value_hash,
            },
        )
        matches = result.matches(claim.recorded_value_hash)
        self._advance(claim, Event.restore_checkpoint_match if matches else Event.restore_checkpoint_mismatch)
        return matches

    def _protect_present(self, claim: MicroClaim) -> None:
        """Re-pin a claim that is resident again (after a restore)."""
        if claim.protection is not Protection.pin:
            return
        for position in range(min(self.pin_limit(claim), claim.spec.footprint_blocks)):
            block = claim.slots[position]
            if block is not None and position not in claim.pinned:
                self.pool.pin(block)
                claim.pinned.append(position)

    def _restoration_failed(
        self, record: RequestRecord, claim: MicroClaim, outcome: RestorationOutcome
    ) -> bool:
        """A claim-scoped failure outcome. A refusal outcome refuses the request naming exactly
        this claim; any other outcome ends the claim's responsibility and the request runs as
        an ordinary, unsatisfied reuse (never counted as a restoration)."""
        spec, claim_id = record.spec, claim.spec.claim_id
        self._emit(
            "resident_claim_restoration_failed",
            {"claim_id": claim_id, "request_id": spec.request_id, "outcome": outcome.value},
        )
        self._advance(claim, _RESTORATION_EVENT[outcome])
        record.restore_failed = True  # nothing later in this request may count as a restoration
        if outcome is not RestorationOutcome.refusal:
            self._end_protection(claim)
            return True
        proof = CapacityProof(len(claim.pinned), spec.blocks, self.pool.usable)
        self._emit(
            "active_request_refused",
            {
                "request_id": spec.request_id,
                "reason": ConflictReason.restoration_failed.value,
                "blocking_claim_ids": [claim_id],
                **self._proof_fields(proof),
            },
        )
        self._advance(claim, Event.block)
        self._advance_request(record, RequestEvent.refuse_restoration)
        self._finish(record, "refused")
        record.outcome = RequestOutcome.refused
        return False

    def finish_request(self, request_id: str, status: str = "finished") -> None:
        """A running request completes: its blocks are freed tail first (or TTL-pinned)."""
        record = self.requests.get(request_id)
        if record is None or record.phase is not RequestPhase.admitted:
            raise InputError(
                [Problem(self.header["source"], f"request {request_id!r} is not running", field="request_id")]
            )
        self._finish(record, status)

    def run_request(self, spec: RequestSpec) -> RequestOutcome:
        """Submit a request and, if admitted, let it finish at once."""
        outcome = self.submit_request(spec)
        if (
            outcome is RequestOutcome.admitted
            and self.requests[spec.request_id].phase is RequestPhase.admitted
        ):
            self.finish_request(spec.request_id)
        return outcome

    def _finish(self, record: RequestRecord, status: str) -> None:
        spec, pool = record.spec, self.pool
        if record in self._pending:
            self._pending.remove(record)
        ttl = self.policy.ttl_pin_steps
        if ttl and spec.job_id is not None and not spec.last_turn and status == "finished":
            for block in record.blocks:
                pool.pin(block)
            pool.release(reversed(record.blocks))
            self._ttl_pins[spec.job_id] = (self.step + ttl, record.blocks)
        else:
            pool.release(reversed(record.blocks))
        record.blocks = ()
        self._emit("request_finished", {"request_id": spec.request_id, "status": status})
        self._advance_request(record, RequestEvent.finish)

    def _drop_ttl_pin(self, job_id: str) -> None:
        _, blocks = self._ttl_pins.pop(job_id)
        for block in reversed(blocks):
            self.pool.unpin(block)

    # ------------------------------------------------------------------ time

    def tick(self, steps: int = 1) -> None:
        """Advance the clock: claims expire, TTL pins lapse, waiting requests are retried."""
        for _ in range(steps):
            self.step += 1
            self._expire_due()
            for job_id in [j for j, (until, _) in self._ttl_pins.items() if until <= self.step]:
                self._drop_ttl_pin(job_id)
                self.stats.ttl_pins_expired += 1
            for record in list(self._pending):
                outcome = self._schedule(record)
                if outcome is RequestOutcome.waiting:
                    self.stats.waiting_request_steps += 1
                elif record.phase is RequestPhase.admitted:
                    self._admitted_by_clock.append(record.spec.request_id)

    def advance_clock(self, ms: int) -> None:
        """Move the wall clock `ms` milliseconds forward (no engine step passes): claims whose
        `duration_ms` has ended expire. Needs `wall_clock`; `ms` must be positive."""
        if not self.wall_clock or ms <= 0:
            raise InputError(
                [
                    Problem(
                        self.header["source"],
                        f"cannot advance the clock by {ms} ms"
                        + ("" if self.wall_clock else ": the runtime has no wall clock"),
                        field="ms",
                    )
                ]
            )
        self.now_ns += ms * NS_PER_MS
        self._expire_due()

    def newly_admitted(self) -> list[str]:
        """Requests a tick admitted (from the waiting or deferred queue) since the last call;
        they are running and the driver decides when they finish."""
        admitted, self._admitted_by_clock = self._admitted_by_clock, []
        return admitted

    @property
    def pending(self) -> tuple[str, ...]:
        """Ids of requests waiting or deferred, in FCFS order."""
        return tuple(r.spec.request_id for r in self._pending)

    # ------------------------------------------------------------------ faults

    def inject_fault(
        self,
        kind: FaultKind,
        claim_id: str,
        *,
        position: int | None = None,
        outcome: RestorationOutcome | None = None,
    ) -> None:
        """Inject a fault naming a claim; it is reported before its effects."""
        claim = self._claim(claim_id)
        block = -1
        if kind is FaultKind.invalid_kv_load:
            present = [p for p, _ in claim.held()]
            position = position if position is not None else (present[0] if present else None)
            if position is None or position >= len(claim.slots) or claim.slots[position] is None:
                raise self._bad_fault(kind, claim_id, "the claim has no cached block there")
            block = claim.slots[position]
        elif kind is FaultKind.restore_failure and claim.phase is not Phase.offloaded:
            raise self._bad_fault(kind, claim_id, f"the claim is {claim.phase}, not offloaded")
        elif kind is FaultKind.checkpoint_in_place_mutation and claim.checkpoint is None:
            raise self._bad_fault(kind, claim_id, "the claim has no two-key checkpoint")
        if kind is FaultKind.invalid_kv_load:
            self._invalidate(block)
            return
        self._emit("fault_injected", {"kind": kind.value, "claim_id": claim_id})
        if kind is FaultKind.restore_failure:
            claim.failing_restore = outcome or self.policy.restoration_failure_outcome
        else:
            assert claim.checkpoint is not None
            claim.checkpoint.mutate_layout_in_place()

    def _bad_fault(self, kind: FaultKind, claim_id: str, why: str) -> InputError:
        return InputError(
            [Problem(self.header["source"], f"cannot inject {kind} into {claim_id}: {why}", field="fault")]
        )

    def _invalidate(self, block: int) -> None:
        """A failed load drops the block's hash even if pinned (that is harm when it breaks an
        accepted preserving claim, and it is reported as such)."""
        pool = self.pool
        object_id, position = pool.object_of[block], pool.position_of[block]
        tagged = [
            c
            for c in self._claims_on.get(object_id or "", ())
            if position < c.footprint_blocks and c.slots[position] == block
        ]
        for claim in tagged:  # one fault, reported to every claim whose block it hits
            self._emit(
                "fault_injected", {"kind": FaultKind.invalid_kv_load.value, "claim_id": claim.spec.claim_id}
            )
        for claim in tagged:
            self._emit_claim_block("block_removed", block, pool.hash_of[block], claim.claim_id, position)  # type: ignore[arg-type]
        pool.drop_hash(block)
        for claim in tagged:
            if position in claim.pinned:
                pool.unpin(block)
            self._lose(claim, position)

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """Check that no claim still owes an event (a harm report or a failure outcome)."""
        self.ledger.close()
