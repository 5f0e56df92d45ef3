"""The closed vocabularies of the resident-claim contract (seed 000 s. 3-5, seed 001 s. 3).

Every enum here is a public interface: descriptor YAML, trace events, verdict JSON and the Z3
model all spell these values exactly. Which value relates to which (bundles, depth rules,
enforcement sets) is not decided here but in `kvclaims.spec.tables`, the one table of facts.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

NS_PER_MS: Final = 1_000_000
"""A trace's `t_ns` per millisecond of a `duration_ms` (the unit the contract fixes)."""


class _RankedStrEnum(StrEnum):
    """A StrEnum ordered by declaration order instead of by spelling.

    All four comparisons are overridden because `str` already defines them, so
    `functools.total_ordering` would silently keep the alphabetical ones.
    """

    @property
    def rank(self) -> int:
        return list(type(self)).index(self)

    def _rank_of(self, other: object) -> int:
        if type(other) is not type(self):
            raise TypeError(f"cannot order {type(self).__name__} against {type(other).__name__}")
        return other.rank  # type: ignore[attr-defined]

    def __lt__(self, other: object) -> bool:
        return self.rank < self._rank_of(other)

    def __le__(self, other: object) -> bool:
        return self.rank <= self._rank_of(other)

    def __gt__(self, other: object) -> bool:
        return self.rank > self._rank_of(other)

    def __ge__(self, other: object) -> bool:
        return self.rank >= self._rank_of(other)

    __hash__ = StrEnum.__hash__


# Source: seed 001 table 3, seed 000 section 3.
class ProtectionMode(StrEnum):
    """What an accepted claim promises."""

    best_effort = "best_effort"
    soft_priority = "soft_priority"
    hard_protected = "hard_protected"
    demotable = "demotable"
    expiring = "expiring"
    offloadable = "offloadable"
    routed_reuse = "routed_reuse"


# Source: seed 000 table 1.
class Obligation(StrEnum):
    """A contract obligation a runtime must discharge for a mode.

    The short code (`I`, `A`, ...) of each is `OBLIGATION_CODES` in `tables`.
    """

    claim_identity = "claim_identity"
    explicit_acceptance = "explicit_acceptance"
    materialization_predicate = "materialization_predicate"
    footprint_accounting = "footprint_accounting"
    ordered_lifecycle_events = "ordered_lifecycle_events"
    claim_materialized_event = "claim_materialized_event"
    claim_demoted_before_loss = "claim_demoted_before_loss"
    claim_expired_boundary = "claim_expired_boundary"
    offload_restorability = "offload_restorability"
    restoration_failure_outcome = "restoration_failure_outcome"
    victim_exclusion_before_violation = "victim_exclusion_before_violation"
    explicit_conflict_action = "explicit_conflict_action"
    blocking_claim_ids = "blocking_claim_ids"
    claim_harm_attribution = "claim_harm_attribution"
    claim_scoped_telemetry = "claim_scoped_telemetry"
    priority_influence = "priority_influence"
    route_cost_attribution = "route_cost_attribution"
    placement_attribution = "placement_attribution"
    reuse_routing_attribution = "reuse_routing_attribution"


# Source: seed 000 table 4.
class AdapterDepth(_RankedStrEnum):
    """How deep an adapter reaches into a runtime, totally ordered.

    Selecting depth `a` admits native evidence and every adapter whose depth is `<= a`.
    `none` doubles as the depth of native evidence.
    """

    none = "none"
    telemetry_join = "telemetry_join"
    claim_registry = "claim_registry"
    storage_restorability = "storage_restorability"
    routing_hook = "routing_hook"
    scheduler_hook = "scheduler_hook"
    allocator_hook = "allocator_hook"
    backend_patch = "backend_patch"


class EvidenceStatus(StrEnum):
    """What an evidence item asserts about its obligation. Only `supported` can count."""

    supported = "supported"
    partial = "partial"
    unknown = "unknown"
    missing = "missing"


class EvidenceScope(StrEnum):
    """How an evidence item was obtained; decides which obligations it may discharge."""

    docs = "docs"
    source_inspection = "source_inspection"
    litmus_trace = "litmus_trace"
    conformance_trace = "conformance_trace"
    controlled_pressure = "controlled_pressure"
    failure_injection = "failure_injection"
    artifact_generated = "artifact_generated"


class AnchorKind(StrEnum):
    """Where an anchor points: public docs, source at a commit, a recorded trace, an artifact."""

    docs = "docs"
    source = "source"
    trace = "trace"
    artifact = "artifact"


class TraceFormat(StrEnum):
    """A trace format the refinement checker reads (`kvclaims check --format`). The KV-event
    captures (`*-kv-events`) are runtimes' block events, checked only joined with a claim
    registry."""

    kvclaims_v1 = "kvclaims-v1"
    blockpool = "blockpool"
    offload_hook = "offload-hook"
    pydev_connector = "pydev-connector"
    vllm_kv_events = "vllm-kv-events"
    sglang_kv_events = "sglang-kv-events"
    trtllm_kv_events = "trtllm-kv-events"


class ApproximationSignal(StrEnum):
    """A runtime primitive that resembles a contract feature without discharging it.

    Signals make a row plausible (approximate) but never satisfy an obligation by themselves
    (fail-closed rule 1).
    """

    priority_value = "priority_value"
    duration_field = "duration_field"
    block_events = "block_events"
    storage_tier = "storage_tier"
    kv_aware_routing = "kv_aware_routing"
    active_no_evict = "active_no_evict"
    generic_counters = "generic_counters"
    fallback_recompute = "fallback_recompute"
    unclaimed_load_failure = "unclaimed_load_failure"
    block_pinning = "block_pinning"


# Source: seed 000 table 5.
class TelemetryJoinPrecondition(StrEnum):
    """The nine preconditions under which a telemetry join may supply anything."""

    external_claim_registry = "external_claim_registry"
    stable_claim_id = "stable_claim_id"
    reusable_object_id = "reusable_object_id"
    fixed_materialization_predicate = "fixed_materialization_predicate"
    deterministic_request_token_map = "deterministic_request_token_map"
    fixed_cache_identity = "fixed_cache_identity"
    named_observation_point = "named_observation_point"
    joinable_backend_events = "joinable_backend_events"
    ambiguity_fails_closed = "ambiguity_fails_closed"


class ObservationAtom(StrEnum):
    """An observed behaviour that a mode needs besides its obligations.

    soft_priority needs all three controlled-pressure atoms (original,
    swapped and equal-priority trials).
    """

    pressure_control_original = "pressure_control_original"
    pressure_control_swapped = "pressure_control_swapped"
    pressure_control_equal = "pressure_control_equal"


class ClaimState(StrEnum):
    """Lifecycle state of one claim (DESIGN.md, Claims). Refusal and deferral are not claim states:
    they are outcomes of an active request, attributed to claims by `blocking_claim_ids`."""

    submitted = "submitted"
    accepted = "accepted"
    rejected = "rejected"
    materialized = "materialized"
    offloaded = "offloaded"
    restoring = "restoring"
    demoted = "demoted"
    expired = "expired"
    released = "released"
    harmed = "harmed"


# Source: seed 001 table 2.
class DecisionKind(StrEnum):
    """A runtime's answer to a submitted claim."""

    accepted = "accepted"
    rejected = "rejected"
    conditionally_accepted = "conditionally_accepted"


class Label(_RankedStrEnum):
    """The lowering judgment's answer for one (descriptor, mode, depth) row, ordered by strength.

    `invalid < rejected < unknown < approximate < sound_with_adapter < native_sound`.
    `invalid` sits at the bottom but is a different kind of answer: the question itself was
    ill-posed (the row claims an impossible lowering), not that evidence was too weak.
    """

    invalid = "invalid"
    rejected = "rejected"
    unknown = "unknown"
    approximate = "approximate"
    sound_with_adapter = "sound_with_adapter"
    native_sound = "native_sound"

    @property
    def is_sound(self) -> bool:
        return self in (Label.sound_with_adapter, Label.native_sound)


# Source: seed 000 table 3.
class LabelSubtype(StrEnum):
    """What kind of trust a sound_with_adapter row rests on."""

    adapter_observational = "adapter_observational"
    adapter_policy_under_pressure = "adapter_policy_under_pressure"
    adapter_enforcement = "adapter_enforcement"
    backend_patch_witness = "backend_patch_witness"


class ConformanceRule(StrEnum):
    """The normative refinement rules of DESIGN.md, Refinement, in order; every lifecycle violation and
    every refinement rejection names exactly one."""

    identity = "identity"
    lifecycle = "lifecycle"
    capacity_arithmetic = "capacity_arithmetic"
    attribution = "attribution"
    offload_order = "offload_order"
    no_silent_harm = "no_silent_harm"
    hybrid_two_key = "hybrid_two_key"
    capacity_state = "capacity_state"
    duration = "duration"
    block_identity = "block_identity"
    terms = "terms"
    route_placement = "route_placement"
    route_attribution = "route_attribution"
    route_miss_reported = "route_miss_reported"


class TraceWitness(StrEnum):
    """A behaviour that a refinement-accepted trace exercised, in order and identity-checked.

    Evidence export maps each to the obligations it can evidence (`WITNESS_OBLIGATIONS` in
    `tables`); a trace evidences only what it actually exercised.
    """

    claim_accepted = "claim_accepted"
    claim_materialized = "claim_materialized"
    claim_scoped_blocks = "claim_scoped_blocks"
    ordered_lifecycle = "ordered_lifecycle"
    capacity_conflict_attributed = "capacity_conflict_attributed"
    footprint_accounted = "footprint_accounted"
    protected_under_pressure = "protected_under_pressure"
    demoted_before_loss = "demoted_before_loss"
    expired_before_loss = "expired_before_loss"
    harm_reported = "harm_reported"
    restore_before_reuse = "restore_before_reuse"
    restoration_failure_fail_closed = "restoration_failure_fail_closed"
    multi_claim_attribution = "multi_claim_attribution"
    ordinary_eviction_without_claim = "ordinary_eviction_without_claim"
    active_served_without_claim_block = "active_served_without_claim_block"


# Trace v1's enums (`kvclaims.spec.trace`): the refinement checker and the state machine read
# them without the pydantic models.
# Source: seed 000 section 7.
class RestorationOutcome(StrEnum):
    """What a failed restoration became: the claim-scoped, fail-closed outcome."""

    refusal = "refusal"
    demotion = "demotion"
    expiry = "expiry"
    harm = "harm"


class ConflictReason(StrEnum):
    """Why an active request was refused or deferred."""

    capacity = "capacity"
    restoration_failed = "restoration_failed"


class CloseReason(StrEnum):
    """Why a trace writer ended its trace: the owner closed it (`closed`), the engine shut down
    (`engine_shutdown`), a signal ended the process (`SIGTERM`, `SIGINT`), or the interpreter
    exited with the trace still open (`atexit`)."""

    closed = "closed"
    engine_shutdown = "engine_shutdown"
    SIGTERM = "SIGTERM"
    SIGINT = "SIGINT"
    atexit = "atexit"


class RouteOutcome(StrEnum):
    """What a routed reuse of a claim came to on the engine the router chose."""

    delivered = "delivered"
    """The chosen engine holds the claim and served its reuse with at least the predicted blocks."""
    missed = "missed"
    """Anything else: the claim is held elsewhere, or fewer blocks were served than predicted."""
