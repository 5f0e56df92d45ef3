"""MicroRuntime policies: how claims are admitted and protected, and what the arbiter may do.

A `Policy` is data: which claims it accepts (a planner), how an accepted claim's blocks are
protected per mode (pinned = victim exclusion, retained = soft priority, none = telemetry only),
whether active KV is admitted as future reusable state, and the ordered conflict actions of
seed 001 table 5 the arbiter tries when protected resident KV and active live KV do not fit.
`POLICIES` names the configurations the issue asks for; the runtime has no per-policy code paths
beyond reading these fields.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from kvclaims.microruntime.inputs import ClaimSpec
from kvclaims.spec.tables import OFFLOAD_MODES, PRESERVING_MODES
from kvclaims.spec.trace import RestorationOutcome
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.statemachine.ledger import ConflictAction


class Protection(StrEnum):
    """How the runtime keeps an accepted claim's blocks."""

    pin = "pin"
    """Victim exclusion: the blocks leave the free queue (an extra reference, like vLLM touch)."""
    retain = "retain"
    """Soft priority: free blocks are evicted only after every ordinary free block."""
    none = "none"
    """Telemetry only: the blocks are ordinary cache entries."""


class BoundMethod(StrEnum):
    """What happens to an active request's older chunks when its live KV is bounded."""

    offload = "offload"
    recompute = "recompute"


@dataclass(frozen=True)
class ClaimPlan:
    """A policy's decision on one submitted claim: accept with `protected_blocks` leading
    blocks protected (which may be fewer than the predicate needs), or reject with a reason."""

    accepted: bool
    protected_blocks: int
    reason: str


@dataclass(frozen=True)
class PlanningContext:
    """What a planner may look at: the protected-block budget left and object lengths."""

    budget_blocks: int
    object_blocks: Mapping[str, int]
    protection: Callable[[ProtectionMode], Protection]

    def object_length(self, claim: ClaimSpec) -> int:
        return self.object_blocks.get(claim.object_id, claim.footprint_blocks)


Planner = Callable[[Sequence[ClaimSpec], PlanningContext], list[ClaimPlan]]


def _rejected(reason: str) -> ClaimPlan:
    return ClaimPlan(False, 0, reason)


def _unsupported(claim: ClaimSpec) -> str | None:
    """Why the contract cannot take this claim at all in a single pool, if it cannot."""
    if claim.mode is ProtectionMode.routed_reuse:
        return "routed_reuse needs a router and other workers; this single-pool runtime has none"
    if claim.two_key and claim.mode not in OFFLOAD_MODES:
        return (
            "a two-key claim is satisfied only by a checkpoint restore (seed 002); that needs a "
            "restorable mode (offloadable)"
        )
    return None


def plan_in_order(claims: Sequence[ClaimSpec], context: PlanningContext) -> list[ClaimPlan]:
    """The contract's admission: accept each claim in order while pinned footprints fit."""
    budget = context.budget_blocks
    plans = []
    for claim in claims:
        protection = context.protection(claim.mode)
        reason = _unsupported(claim)
        if reason is not None:
            plans.append(_rejected(reason))
        elif protection is Protection.pin and claim.footprint_blocks > budget:
            plans.append(
                _rejected(
                    f"protected budget exhausted: footprint {claim.footprint_blocks} blocks, {budget} left"
                )
            )
        else:
            if protection is Protection.pin:
                budget -= claim.footprint_blocks
            protected = claim.footprint_blocks if protection is not Protection.none else 0
            plans.append(ClaimPlan(True, protected, "accepted"))
    return plans


def plan_naive_fair_share(claims: Sequence[ClaimSpec], context: PlanningContext) -> list[ClaimPlan]:
    """Seed 001 5.1: split the budget evenly, even when a share is below the useful threshold."""
    if not claims:
        return []
    share = context.budget_blocks // len(claims)
    plans = []
    for claim in claims:
        protected = min(share, claim.footprint_blocks, context.object_length(claim))
        plans.append(
            ClaimPlan(True, protected, "equal share") if protected > 0 else _rejected("share is zero")
        )
    return plans


def _feasible(claim: ClaimSpec, context: PlanningContext) -> bool:
    """A useful prefix exists only if the object is at least as long as the predicate."""
    return claim.required_blocks <= context.object_length(claim)


def _density(claim: ClaimSpec) -> float:
    return claim.value / claim.required_blocks


def plan_complete_prefix_fair_share(claims: Sequence[ClaimSpec], context: PlanningContext) -> list[ClaimPlan]:
    """Seed 001 5.1: whole useful prefixes only, handed out in fair rounds across owners."""
    decided: dict[str, ClaimPlan] = {}
    by_owner: dict[str, list[ClaimSpec]] = defaultdict(list)
    for claim in claims:
        if _feasible(claim, context):
            by_owner[claim.owner_scope].append(claim)
        else:
            decided[claim.claim_id] = _rejected(
                "below minimum viable footprint: object shorter than predicate"
            )
    for queue in by_owner.values():
        queue.sort(key=lambda c: (-_density(c), c.claim_id))
    remaining = context.budget_blocks
    owners = sorted(by_owner)
    while owners:
        next_round = []
        for owner in owners:
            claim = by_owner[owner].pop(0)
            if claim.required_blocks <= remaining:
                remaining -= claim.required_blocks
                decided[claim.claim_id] = ClaimPlan(
                    True, claim.required_blocks, "complete prefix, fair round"
                )
            else:
                decided[claim.claim_id] = _rejected("budget full")
            if by_owner[owner]:
                next_round.append(owner)
        owners = next_round
    return [decided[c.claim_id] for c in claims]


def plan_value_density(claims: Sequence[ClaimSpec], context: PlanningContext) -> list[ClaimPlan]:
    """Seed 001 5.1: whole useful prefixes, highest value per required block first."""
    decided: dict[str, ClaimPlan] = {}
    remaining = context.budget_blocks
    for claim in sorted(claims, key=lambda c: (-_density(c), c.claim_id)):
        if not _feasible(claim, context):
            decided[claim.claim_id] = _rejected(
                "below minimum viable footprint: object shorter than predicate"
            )
        elif claim.required_blocks <= remaining:
            remaining -= claim.required_blocks
            decided[claim.claim_id] = ClaimPlan(True, claim.required_blocks, "value density")
        else:
            decided[claim.claim_id] = _rejected("budget full")
    return [decided[c.claim_id] for c in claims]


def plan_oracle(claims: Sequence[ClaimSpec], context: PlanningContext) -> list[ClaimPlan]:
    """The best subset of whole useful prefixes under the budget (0/1 knapsack on value).

    An analysis upper bound (seed 001 table 5, "oracle"): it uses every claim's value at once.
    """
    feasible = [c for c in claims if _feasible(c, context)]
    budget = context.budget_blocks
    best: list[tuple[float, tuple[str, ...]]] = [(0.0, ())] * (budget + 1)
    for claim in sorted(feasible, key=lambda c: c.claim_id):
        cost = claim.required_blocks
        for used in range(budget, cost - 1, -1):
            value, chosen = best[used - cost]
            if value + claim.value > best[used][0]:
                best[used] = (value + claim.value, (*chosen, claim.claim_id))
    chosen_ids = set(max(best, key=lambda entry: entry[0])[1])
    return [
        ClaimPlan(True, c.required_blocks, "oracle subset")
        if c.claim_id in chosen_ids
        else _rejected("not in the best subset" if _feasible(c, context) else "object shorter than predicate")
        for c in claims
    ]


CONTRACT_PROTECTION: Mapping[ProtectionMode, Protection] = MappingProxyType(
    {mode: Protection.pin for mode in PRESERVING_MODES}
    | {
        ProtectionMode.soft_priority: Protection.retain,
        ProtectionMode.best_effort: Protection.none,
        ProtectionMode.routed_reuse: Protection.none,
    }
)
"""The contract's lowering: preserving modes get victim exclusion (seed 001 table 4)."""

RETAIN_ALL: Mapping[ProtectionMode, Protection] = MappingProxyType(
    {mode: Protection.retain for mode in ProtectionMode}
)
"""Priority for every mode: what a soft-priority runtime gives even a hard claim."""

ALL_ACTIONS: tuple[ConflictAction, ...] = (
    ConflictAction.route_elsewhere,
    ConflictAction.add_capacity,
    ConflictAction.demote,
    ConflictAction.offload_resident,
    ConflictAction.bound_active_live,
    ConflictAction.offload_active,
    ConflictAction.defer,
    ConflictAction.refuse,
)
"""Every conflict action, cheapest-for-the-resident first; `refuse` always applies."""


@dataclass(frozen=True)
class Policy:
    """One runtime configuration. Every field is read by the runtime; none is a result."""

    name: str
    summary: str
    accepts_claims: bool = True
    protection: Mapping[ProtectionMode, Protection] = field(default_factory=lambda: CONTRACT_PROTECTION)
    planner: Planner = plan_in_order
    protected_budget_blocks: int | None = None
    admit_active_to_cache: bool = True
    conflict_actions: tuple[ConflictAction, ...] = (ConflictAction.refuse,)
    max_deferrals: int = 1
    live_bound_blocks: int | None = None
    bound_method: BoundMethod = BoundMethod.recompute
    ttl_pin_steps: int | None = None
    restoration_failure_outcome: RestorationOutcome = RestorationOutcome.refusal

    def protection_of(self, mode: ProtectionMode) -> Protection:
        return self.protection[mode]


def _policies(*policies: Policy) -> Mapping[str, Policy]:
    return MappingProxyType({p.name: p for p in policies})


POLICIES: Mapping[str, Policy] = _policies(
    Policy(
        "native_lru",
        "vLLM's prefix cache: LRU free queue, no claims (every claim is rejected)",
        accepts_claims=False,
    ),
    Policy(
        "write_no_admit",
        "native LRU, but active requests are not admitted as future reusable KV",
        accepts_claims=False,
        admit_active_to_cache=False,
    ),
    Policy(
        "soft_priority",
        "claims accepted but only ranked: their free blocks are evicted last, never excluded",
        protection=RETAIN_ALL,
    ),
    Policy(
        "hard_protected",
        "victim exclusion for preserving claims; a conflicting active request is refused",
    ),
    Policy(
        "demotable",
        "victim exclusion; a conflict demotes demotable claims before any of their blocks is lost",
        conflict_actions=(ConflictAction.demote, ConflictAction.refuse),
    ),
    Policy(
        "expiring",
        "victim exclusion until a claim's duration ends; conflicts are deferred to that boundary",
        conflict_actions=(ConflictAction.defer, ConflictAction.refuse),
        max_deferrals=64,
    ),
    Policy(
        "offloadable",
        "victim exclusion; a conflict offloads offloadable claims to the host tier (restore before reuse)",
        conflict_actions=(ConflictAction.offload_resident, ConflictAction.refuse),
    ),
    Policy(
        "bounded_live",
        "victim exclusion; a conflicting chunked request runs with bounded live KV (older chunks recomputed)",
        conflict_actions=(ConflictAction.bound_active_live, ConflictAction.refuse),
        live_bound_blocks=20,
    ),
    Policy(
        "offload_active",
        "victim exclusion; a conflicting chunked request streams its older chunks to the host tier",
        conflict_actions=(ConflictAction.offload_active, ConflictAction.refuse),
    ),
    Policy(
        "continuum_ttl_pin",
        "stock Continuum (seed 003): a finished non-last turn keeps its blocks until a TTL, no claims",
        accepts_claims=False,
        ttl_pin_steps=6,
    ),
    Policy(
        "continuum_as_claims",
        "Continuum's pins as expiring claims under a protected budget; conflicts deferred, then refused",
        conflict_actions=(ConflictAction.defer, ConflictAction.refuse),
        max_deferrals=4,
    ),
    Policy(
        "naive_fair_share",
        "seed 001 5.1: equal shares of the budget, retained by priority",
        protection=RETAIN_ALL,
        planner=plan_naive_fair_share,
    ),
    Policy(
        "complete_prefix_fair_share",
        "seed 001 5.1: whole useful prefixes in fair rounds, retained by priority",
        protection=RETAIN_ALL,
        planner=plan_complete_prefix_fair_share,
    ),
    Policy(
        "value_density",
        "seed 001 5.1: whole useful prefixes by value per block, retained by priority",
        protection=RETAIN_ALL,
        planner=plan_value_density,
    ),
    Policy(
        "oracle",
        "seed 001 5.1: the best subset of whole useful prefixes (analysis upper bound)",
        protection=RETAIN_ALL,
        planner=plan_oracle,
    ),
    Policy(
        "full_arbiter",
        "every conflict action of seed 001 table 5, cheapest for the resident first",
        conflict_actions=ALL_ACTIONS,
        max_deferrals=2,
        live_bound_blocks=8,
    ),
)
"""Every named policy, by name."""
