"""The contract's tables of facts, in one place, as data.

Everything that relates one vocabulary to another lives here and only here: mode bundles,
what each adapter depth may supply, which obligations are enforcement, which evidence scopes
are observed, which primitives suggest or are forbidden for which mode. The lowering
judgment (`kvclaims.spec.lowering`), the Z3 model (`kvclaims.solver`) and the docs read these
tables; none of them restates a fact. Sources: seed 000 sections 3-5 and tables 2, 4, 5, 9;
seed 001 tables 3-4; DESIGN.md 2.2-2.3.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kvclaims.spec.vocabulary import (
    AdapterDepth,
    AnchorKind,
    ApproximationSignal,
    EvidenceScope,
    Label,
    Obligation,
    ObservationAtom,
    ProtectionMode,
    TelemetryJoinPrecondition,
    TraceFormat,
    TraceWitness,
)

O = Obligation  # noqa: E741  (short names keep the tables readable)
S = ApproximationSignal
M = ProtectionMode
D = AdapterDepth


def _frozen(mapping: Mapping) -> Mapping:  # type: ignore[type-arg]
    return MappingProxyType(dict(mapping))


OBLIGATION_CODES: Mapping[Obligation, str] = _frozen(
    {
        O.claim_identity: "I",
        O.explicit_acceptance: "A",
        O.materialization_predicate: "P",
        O.footprint_accounting: "F",
        O.ordered_lifecycle_events: "L",
        O.claim_materialized_event: "M",
        O.claim_demoted_before_loss: "D",
        O.claim_expired_boundary: "E",
        O.offload_restorability: "R",
        O.restoration_failure_outcome: "RF",
        O.victim_exclusion_before_violation: "V",
        O.explicit_conflict_action: "X",
        O.blocking_claim_ids: "B",
        O.claim_harm_attribution: "H",
        O.claim_scoped_telemetry: "T",
        O.priority_influence: "Pr",
        O.route_cost_attribution: "RC",
        O.placement_attribution: "PL",
        O.reuse_routing_attribution: "RR",
    }
)

OBLIGATION_BY_CODE: Mapping[str, Obligation] = _frozen({c: o for o, c in OBLIGATION_CODES.items()})

# Older spellings still accepted on input and normalised on read (seed 000 section 3).
LEGACY_OBLIGATION_ALIASES: Mapping[str, Obligation] = _frozen(
    {"active_refusal_or_defer": O.explicit_conflict_action}
)


def _codes(codes: str) -> frozenset[Obligation]:
    return frozenset(OBLIGATION_BY_CODE[c] for c in codes.split())


# What each mode requires (DESIGN 2.3). Lower(d, a, E, m) needs every one of these.
MODE_BUNDLES: Mapping[ProtectionMode, frozenset[Obligation]] = _frozen(
    {
        M.best_effort: _codes("I P M T"),
        M.soft_priority: _codes("I Pr T"),
        M.hard_protected: _codes("I A P F V X B H L"),
        M.demotable: _codes("I A D L"),
        M.expiring: _codes("I A E L"),
        M.offloadable: _codes("I A P R RF L H"),
        M.routed_reuse: _codes("I P RC PL RR T"),
    }
)

# Observed behaviour a mode needs besides its obligations: soft_priority is positive only for
# the original, swapped and equal-priority pressure controls (seed 000 section 6.1).
MODE_REQUIRED_ATOMS: Mapping[ProtectionMode, frozenset[ObservationAtom]] = _frozen(
    {mode: frozenset() for mode in ProtectionMode} | {M.soft_priority: frozenset(ObservationAtom)}
)

# Which obligations an adapter of each depth may supply (DESIGN 2.3). backend_patch may supply
# any obligation its exercised trace anchors. `none` is native evidence: no depth restriction.
DEPTH_SUPPLIES: Mapping[AdapterDepth, frozenset[Obligation]] = _frozen(
    {
        D.none: frozenset(Obligation),
        D.telemetry_join: _codes("I P M T"),
        D.claim_registry: _codes("I A P T D E L"),
        D.storage_restorability: _codes("R RF L H"),
        D.routing_hook: _codes("RC PL RR"),
        D.scheduler_hook: _codes("X B L H"),
        D.allocator_hook: _codes("V F"),
        D.backend_patch: frozenset(Obligation),
    }
)

# Obligations that are runtime enforcement: they count only with observed evidence at every
# depth, native included; a feature named in docs never proves enforcement.
ENFORCEMENT_OBLIGATIONS: frozenset[Obligation] = _codes("V X B H D E R RF")

# Scopes that observed the runtime behave; the only scopes that may discharge enforcement.
OBSERVED_SCOPES: frozenset[EvidenceScope] = frozenset(
    {
        EvidenceScope.litmus_trace,
        EvidenceScope.conformance_trace,
        EvidenceScope.controlled_pressure,
        EvidenceScope.failure_injection,
    }
)

# Scopes an adapter's evidence needs: docs and source inspection never make an adapter positive.
RUNTIME_SCOPES: frozenset[EvidenceScope] = OBSERVED_SCOPES | {EvidenceScope.artifact_generated}

# Anchors that can show what a runtime did: a recorded trace, or an artifact a run generated.
# Evidence of a runtime scope needs one (docs or source show what the code could do, never an
# observation, an enforcement or what a backend patch's exercised run did), and its file must exist.
OBSERVING_ANCHOR_KINDS: frozenset[AnchorKind] = frozenset({AnchorKind.trace, AnchorKind.artifact})

# Runtimes' block-event captures: checked only joined with an external claim registry; without
# one nothing ties their blocks to claims, so such a trace is at best inconclusive.
KV_EVENT_FORMATS: frozenset[TraceFormat] = frozenset(
    {TraceFormat.vllm_kv_events, TraceFormat.sglang_kv_events, TraceFormat.trtllm_kv_events}
)

# A telemetry_join adapter supplies anything only when all nine hold (seed 000 table 5).
TELEMETRY_JOIN_PRECONDITIONS: frozenset[TelemetryJoinPrecondition] = frozenset(TelemetryJoinPrecondition)

# Modes whose accepted claims carry a preservation obligation (seed 001 table 4): their
# predicate-breaking loss is harm unless demotion, expiry, release or refusal came first.
PRESERVING_MODES: frozenset[ProtectionMode] = frozenset(
    {M.hard_protected, M.demotable, M.expiring, M.offloadable}
)

# Modes whose claims may leave GPU memory while staying responsible (restore before reuse).
OFFLOAD_MODES: frozenset[ProtectionMode] = frozenset({M.offloadable})

# Modes for which offload is a legal claim action (restore before reuse still owed): offloadable,
# and hard_protected, which "may not be broken before explicit active refusal/defer, demotion,
# expiry, offload, or harm event" (seed 001 table 3; seed 000 section 3).
OFFLOAD_LEGAL_MODES: frozenset[ProtectionMode] = OFFLOAD_MODES | {M.hard_protected}

# Obligations whose absence makes a failed lowering a misrepresentation (rejected), not a
# weak substrate (approximate): hard protection without victim exclusion, an explicit conflict
# action and blocking ids is soft priority under another name (seed 000 section 5, "a
# scheduler-only or allocator-only row remains rejected").
ENFORCEMENT_CRITICAL: Mapping[ProtectionMode, frozenset[Obligation]] = _frozen(
    {mode: frozenset() for mode in ProtectionMode} | {M.hard_protected: _codes("V X B")}
)

# Which primitives make a failed row "approximate" rather than "unknown" for a mode: the
# feature-table inferences of seed 000 table 9 and its introduction.
SIGNAL_SUGGESTS_MODES: Mapping[ApproximationSignal, frozenset[ProtectionMode]] = _frozen(
    {
        S.priority_value: frozenset({M.soft_priority, M.demotable}),
        S.duration_field: frozenset({M.expiring}),
        S.block_events: frozenset({M.best_effort}),
        S.storage_tier: frozenset({M.offloadable, M.demotable}),
        S.kv_aware_routing: frozenset({M.routed_reuse}),
        S.active_no_evict: frozenset({M.hard_protected}),
        S.generic_counters: frozenset({M.offloadable}),
        S.fallback_recompute: frozenset({M.offloadable}),
        S.unclaimed_load_failure: frozenset({M.offloadable}),
        S.block_pinning: frozenset({M.hard_protected, M.expiring}),
    }
)

# Mappings that misrepresent the contract for every runtime. A descriptor may add its own in
# `forbidden_lowerings`. A forbidden primitive present on a row whose bundle is not supplied makes it
# rejected.
GLOBAL_FORBIDDEN_LOWERINGS: Mapping[tuple[ProtectionMode, ApproximationSignal], str] = _frozen(
    {
        (M.hard_protected, S.active_no_evict): (
            "active no-evict protects a running request, not accepted future-resident state"
        ),
        (M.hard_protected, S.priority_value): (
            "soft priority only orders eviction: it is not a sound hard-claim lowering"
        ),
    }
)

# A lowering row may state which primitive its author infers an obligation from
# (`inferred_from`). Such an inference never supplies the obligation (rule 1); where it is also a
# misattribution (rejected) or a category error (invalid), the row says so. Pairs not listed are
# simply not counted. Seed 000 table 9 and its introduction.
_OBSERVATION_ONLY_SIGNALS = (S.block_events,)
INFERENCE_VERDICTS: Mapping[tuple[ApproximationSignal, Obligation], tuple[Label, str]] = _frozen(
    {
        (signal, obligation): (
            Label.invalid,
            f"{signal} describes what happened to blocks; it cannot be the enforcement "
            f"outcome {obligation} (telemetry cannot create enforcement)",
        )
        for signal in _OBSERVATION_ONLY_SIGNALS
        for obligation in ENFORCEMENT_OBLIGATIONS
    }
    | {
        (S.fallback_recompute, O.offload_restorability): (
            Label.rejected,
            "recomputing after a failed load is not restoring the offloaded claim",
        ),
        (S.fallback_recompute, O.restoration_failure_outcome): (
            Label.rejected,
            "a fallback recompute hides the failure instead of reporting a claim outcome",
        ),
        (S.generic_counters, O.offload_restorability): (
            Label.rejected,
            "generic transfer counters name no claim, no order and no reuse",
        ),
        (S.generic_counters, O.restoration_failure_outcome): (
            Label.rejected,
            "generic failure counters are not a claim-scoped restoration failure",
        ),
        (S.unclaimed_load_failure, O.restoration_failure_outcome): (
            Label.rejected,
            "an unclaimed or wrong-claim load failure is not an outcome of the accepted claim",
        ),
        (S.active_no_evict, O.victim_exclusion_before_violation): (
            Label.rejected,
            "active no-evict excludes victims only for the running request",
        ),
        (S.priority_value, O.victim_exclusion_before_violation): (
            Label.rejected,
            "a priority ranks victims; it does not exclude them",
        ),
    }
)

# The two-key hybrid predicate (seed 002) compares these hashes; only value_hash equality
# establishes logical state identity.
CHECKPOINT_HASH_FIELDS: tuple[str, str] = ("payload_hash", "value_hash")

# Identifier limits: claim ids, owner scopes and object ids travel in request metadata that
# clients control, so they are bounded (a 1 MB claim id is rejected, not stored).
MAX_IDENTIFIER_LENGTH = 256

# What a refinement-accepted trace can evidence, by what it exercised (kvclaims check
# --evidence-out). Only observed, ordered, identity-checked behaviour counts, and only for the
# obligations it shows: a refusal naming its blocking claims evidences X and B, not V; a
# restore before reuse evidences R, not RF. The L1/L2-style observations evidence nothing.
W = TraceWitness
WITNESS_OBLIGATIONS: Mapping[TraceWitness, frozenset[Obligation]] = _frozen(
    {
        W.claim_accepted: _codes("I A"),
        W.claim_materialized: _codes("P M"),
        W.claim_scoped_blocks: _codes("T"),
        W.ordered_lifecycle: _codes("L"),
        W.capacity_conflict_attributed: _codes("X B"),
        W.footprint_accounted: _codes("F"),
        W.protected_under_pressure: _codes("V"),
        W.demoted_before_loss: _codes("D"),
        W.expired_before_loss: _codes("E"),
        W.harm_reported: _codes("H"),
        W.restore_before_reuse: _codes("R"),
        W.restoration_failure_fail_closed: _codes("RF X B"),
        W.multi_claim_attribution: _codes("B"),
        W.ordinary_eviction_without_claim: frozenset(),
        W.active_served_without_claim_block: frozenset(),
    }
)

# Block events whose cache_level is one of these (or absent) are in the device tier, the tier a
# resident claim's leading prefix lives in; blocks in other tiers (a host offload copy) never
# count toward the predicate.
DEVICE_CACHE_LEVELS: frozenset[str] = frozenset({"gpu", "device"})

CAPACITY_PROOF_FIELDS: tuple[str, ...] = (
    "protected_resident_blocks",
    "active_live_blocks_required",
    "resident_plus_active_blocks",
    "usable_blocks",
    "capacity_shortfall_blocks",
)
"""The numbers of a conflict's capacity proof."""

MAX_TRACE_INT = 2**63 - 1
"""The largest integer a trace may carry (signed 64-bit): no runtime produces larger counters,
msgpack cannot carry them, and a 2^80 `seq` is a sign of a corrupt or hostile file."""
