"""The oracle's verdicts, the contract's facts it judges by, and its abstract state: claims,
requests and blocks (kvclaims.oracle.interpreter's docstring gives the choices C1-C17)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

# --- verdicts -----------------------------------------------------------------------------

ACCEPTED, REJECTED, INCONCLUSIVE, INVALID = "accepted", "rejected", "inconclusive", "invalid"

# The rule names of DESIGN 4 (the same strings the checker's counterexamples carry).
IDENTITY = "identity"  # rule 1
LIFECYCLE = "lifecycle"  # rule 2
CAPACITY = "capacity_arithmetic"  # rule 3 (+ class 1: proofs against the state, overcommit)
ATTRIBUTION = "attribution"  # rule 4
OFFLOAD_ORDER = "offload_order"  # rule 5
NO_SILENT_HARM = "no_silent_harm"  # rule 6
TWO_KEY = "hybrid_two_key"  # rule 7
DURATION = "duration"  # class 2: a promised duration honoured
TERMS = "terms"  # DESIGN 4 rule 2: accepted terms repeat the submitted ones


@dataclass(frozen=True)
class Verdict:
    outcome: str
    rule: str | None = None
    line: int | None = None
    message: str = ""


class Violation(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


class BadInput(Exception):
    """The input is not a trace (an `invalid` verdict); `line` says where, once known."""

    line: int | None = None


# --- the contract's facts -----------------------------------------------------------------

MODES = (
    "best_effort",
    "soft_priority",
    "hard_protected",
    "demotable",
    "expiring",
    "offloadable",
    "routed_reuse",
)
# Seed 001 table 4 / DESIGN 2.2: modes whose accepted claims carry a preservation obligation.
PRESERVING = frozenset({"hard_protected", "demotable", "expiring", "offloadable"})
# Seed 001 table 3 (hard_protected: "... offload ...") and seed 000 s. 3 (offloadable).
MAY_OFFLOAD = frozenset({"hard_protected", "offloadable"})
DEVICE_TIERS = frozenset({"gpu", "device"})
OUTCOMES = ("refusal", "demotion", "expiry", "harm")
REASONS = ("capacity", "restoration_failed")
PROOF = (
    "protected_resident_blocks",
    "active_live_blocks_required",
    "resident_plus_active_blocks",
    "usable_blocks",
    "capacity_shortfall_blocks",
)

# Claim phases. RESPONSIBLE: the runtime holds the predicate; SETTLED: responsibility ended.
RESPONSIBLE = frozenset({"accepted", "materialized", "offloaded", "restoring"})
SETTLED = frozenset({"demoted", "expired", "released"})
RESERVING = frozenset({"accepted", "materialized"})  # choice C1
RETIRED = frozenset({"released", "harmed"})  # no block is tracked for the claim any more (C4)


@dataclass
class Claim:
    claim_id: str
    phase: str  # submitted accepted rejected materialized offloaded restoring demoted expired released harmed
    terms: tuple[Any, ...]  # (owner, object, mode, footprint, predicate-json, durations, refresh, caps)
    mode: str = ""
    footprint: int = 0
    required: int | None = None  # leading blocks the predicate needs (None: undecidable)
    two_key: bool = False
    duration: int | None = None
    duration_ms: int | None = None
    refresh_on_hit: bool = False
    accepted_step: int | None = None  # C3: the step clock's start (acceptance, or the last hit)
    accepted_ns: int | None = None  # C3: the wall clock's start
    cap_steps: int | None = None  # C17: max_duration_steps, from the decision
    cap_ms: int | None = None  # C17: max_duration_ms, from the decision
    decided_step: int | None = None  # C17: the decision's engine_step (where a cap runs from)
    decided_ns: int | None = None  # C17: the decision's t_ns
    extended_step: int | None = None  # C17: the latest end an extension granted, on engine_step
    extended_ns: int | None = None  # C17: ... on t_ns
    checkpoint: tuple[int, str] | None = None  # (boundary, value_hash) recorded at materialization
    positions: dict[int, set[int]] = field(default_factory=dict)  # position -> the blocks holding it (C4)
    contents: dict[int, str] = field(default_factory=dict)  # position -> its first stored hash (C4)
    assumed: int = 0  # C5: leading blocks reported materialized in blocks the trace never named
    gone: set[int] = field(default_factory=set)  # assumed positions removed since
    tracked: bool = False  # block events with this claim's id and a position were seen
    held: bool = False  # the predicate was shown to hold while responsible (C5)
    unconfirmed: int = 0  # leading blocks a materialized report claimed and blocks have not shown
    owes_harm: bool = False
    mismatch: bool = False  # a two-key checkpoint mismatch owes a restoration failure
    kv_back: bool = False  # two-key: the KV side of a restore arrived
    value_back: bool = False  # two-key: the matching checkpoint arrived
    pending: set[str] = field(default_factory=set)  # requests with a restore_required outstanding
    restored_for: set[str] = field(
        default_factory=set
    )  # C6: requests whose first satisfied reuse checks the restore
    in_place: bool = False  # C6: restoring a materialized two-key claim's checkpoint in place

    def term(self, clock: str) -> tuple[int | None, int | None, int | None, int | None, int | None]:
        """C17: the claim's term on one clock ("steps" or "ms"): (duration, cap, start, decision,
        latest extension end), the stamps in that clock's own field's units."""
        if clock == "steps":
            return self.duration, self.cap_steps, self.accepted_step, self.decided_step, self.extended_step
        return self.duration_ms, self.cap_ms, self.accepted_ns, self.decided_ns, self.extended_ns

    def on_device(self) -> bool:
        """C1: the claim's KV blocks are in the device tier (an in-place restore keeps them)."""
        return self.phase in RESERVING or (self.phase == "restoring" and self.in_place)

    def present(self, position: int) -> bool:
        return position in self.positions or (position < self.assumed and position not in self.gone)

    def leading(self) -> int:
        """Leading contiguous blocks present (block i counts only if 0..i-1 do, seed 001 L6).
        Jumps over the assumed range, so the work is bounded by the events seen, never by a
        number in the input."""
        count = 0
        while True:
            if count in self.positions:
                count += 1
            elif count < self.assumed and count not in self.gone:
                count = min([g for g in self.gone if g > count] + [self.assumed])
            else:
                return count

    def holds(self) -> bool:
        return self.required is not None and self.leading() >= self.required

    def copy(self) -> Claim:
        return replace(
            self,
            positions={p: set(b) for p, b in self.positions.items()},
            contents=dict(self.contents),
            gone=set(self.gone),
            pending=set(self.pending),
            restored_for=set(self.restored_for),
        )

    def key(self) -> tuple[Any, ...]:
        """Everything that decides the future of the trace (mode, footprint and duration are
        inside `terms`)."""
        return (
            self.claim_id,
            self.phase,
            self.terms,
            self.required,
            self.accepted_step,
            self.accepted_ns,
            (self.decided_step, self.decided_ns, self.extended_step, self.extended_ns),
            self.checkpoint,
            tuple(sorted((p, tuple(sorted(b))) for p, b in self.positions.items())),
            tuple(sorted(self.contents.items())),
            self.assumed,
            tuple(sorted(self.gone)),
            (self.tracked, self.held, self.unconfirmed, self.owes_harm, self.mismatch),
            (self.kv_back, self.value_back, self.in_place),
            tuple(sorted(self.pending)),
            tuple(sorted(self.restored_for)),
        )


@dataclass
class Request:
    phase: str  # admitted deferred refused finished
    owes_refusal: str | None = None  # claim whose failed restoration owes a fail-closed outcome
    failed: set[str] = field(default_factory=set)  # claims whose restoration failed for it
    discharged: set[str] = field(default_factory=set)  # failures already answered by refusal/deferral

    def copy(self) -> Request:
        return Request(self.phase, self.owes_refusal, set(self.failed), set(self.discharged))

    def key(self) -> tuple[Any, ...]:
        return (
            self.phase,
            self.owes_refusal,
            tuple(sorted(self.failed)),
            tuple(sorted(self.discharged)),
        )


@dataclass
class Block:
    block_hash: str
    holders: set[tuple[str, int]] = field(default_factory=set)  # (claim id, position)
