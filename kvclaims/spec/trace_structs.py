"""Trace v1 as msgspec Structs, and the tables the refinement reader needs: GENERATED from the
pydantic models of `kvclaims.spec.trace` by `kvclaims.spec.struct_codegen` (`make reports`).
Do not edit: a test fails when this file differs from what the models generate."""

from typing import Annotated, Literal

from msgspec import Meta, Struct

from kvclaims.spec.model_rules import caps_bound_their_durations, exactly_one_unit, extends_a_duration
from kvclaims.spec.vocabulary import CloseReason, ConflictReason, ProtectionMode, RestorationOutcome


class CacheIdentity(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
):
    cache_key_domain: Annotated[str, Meta(min_length=1, max_length=256)]
    model_id: Annotated[str, Meta(min_length=1, max_length=256)]
    token_hash_domain: Annotated[str, Meta(min_length=1, max_length=256)]
    namespace: str = ""
    block_size: Annotated[int, Meta(ge=1, le=9223372036854775807)]
    adapter_identity: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    prompt_embedding_identity: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    kv_format: Annotated[str, Meta(min_length=1, max_length=256)]


class TraceHeader(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
):
    kvclaims_trace: Literal[1]
    source: str | None = None
    usable_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    block_size: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    cache_identity: CacheIdentity | None = None
    engine_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None


class LeadingPrefixAtLeast(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="leading_prefix_at_least",
):
    blocks: Annotated[int, Meta(ge=1, le=16777216)] | None = None
    tokens: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None

    def __post_init__(self) -> None:
        exactly_one_unit(self)


class HybridTwoKey(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="hybrid_two_key",
):
    boundary_blocks: Annotated[int, Meta(ge=1, le=9223372036854775807)]
    checkpoint_key: Annotated[str, Meta(min_length=1, max_length=256)] | None = None


class ResidentClaimSubmitted(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_submitted",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    owner_scope: Annotated[str, Meta(min_length=1, max_length=256)]
    object_id: Annotated[str, Meta(min_length=1, max_length=256)]
    mode: ProtectionMode
    footprint_blocks: Annotated[int, Meta(ge=1, le=16777216)]
    predicate: LeadingPrefixAtLeast | HybridTwoKey
    duration_steps: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    duration_ms: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    refresh_on_hit: bool = False
    max_duration_steps: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    max_duration_ms: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None

    def __post_init__(self) -> None:
        caps_bound_their_durations(self)


class ResidentClaimAccepted(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_accepted",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    owner_scope: Annotated[str, Meta(min_length=1, max_length=256)]
    object_id: Annotated[str, Meta(min_length=1, max_length=256)]
    mode: ProtectionMode
    footprint_blocks: Annotated[int, Meta(ge=1, le=16777216)]
    predicate: LeadingPrefixAtLeast | HybridTwoKey
    duration_steps: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    duration_ms: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    refresh_on_hit: bool = False
    max_duration_steps: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    max_duration_ms: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None

    def __post_init__(self) -> None:
        caps_bound_their_durations(self)


class ResidentClaimConditionallyAccepted(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_conditionally_accepted",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    owner_scope: Annotated[str, Meta(min_length=1, max_length=256)]
    object_id: Annotated[str, Meta(min_length=1, max_length=256)]
    mode: ProtectionMode
    footprint_blocks: Annotated[int, Meta(ge=1, le=16777216)]
    predicate: LeadingPrefixAtLeast | HybridTwoKey
    duration_steps: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    duration_ms: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    refresh_on_hit: bool = False
    max_duration_steps: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    max_duration_ms: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        caps_bound_their_durations(self)


class ResidentClaimRejected(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_rejected",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    reason: str


class ResidentClaimExtended(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_extended",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    duration_steps: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    duration_ms: Annotated[int, Meta(ge=1, le=9223372036854775807)] | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        extends_a_duration(self)


class CheckpointTensor(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
):
    kind: Annotated[str, Meta(min_length=1, max_length=256)]
    layer: Annotated[str, Meta(min_length=1, max_length=256)]
    shape: Annotated[list[Annotated[int, Meta(ge=0, le=9223372036854775807)]], Meta(max_length=8)]
    logical_dtype: Annotated[str, Meta(min_length=1, max_length=256)]
    storage_dtype: Annotated[str, Meta(min_length=1, max_length=256)]
    layout: Annotated[str, Meta(min_length=1, max_length=256)]


class Checkpoint(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
):
    boundary: Annotated[int, Meta(ge=0, le=16777216)]
    payload_hash: Annotated[str, Meta(min_length=1, max_length=256)]
    value_hash: Annotated[str, Meta(min_length=1, max_length=256)]
    tensors: Annotated[list[CheckpointTensor], Meta(max_length=4096)] | None = None


class ResidentClaimMaterialized(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_materialized",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    leading_blocks: Annotated[int, Meta(ge=0, le=16777216)]
    checkpoint: Checkpoint | None = None


class ResidentClaimDemoted(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_demoted",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    reason: str | None = None


class ResidentClaimExpired(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_expired",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    reason: str | None = None


class ResidentClaimReleased(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_released",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    reason: str | None = None


class ResidentClaimHarmed(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_harmed",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    leading_blocks: Annotated[int, Meta(ge=0, le=16777216)]
    required_blocks: Annotated[int, Meta(ge=1, le=16777216)]


class ResidentClaimLost(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_lost",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    leading_blocks: Annotated[int, Meta(ge=0, le=16777216)]


class ResidentClaimOffloaded(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_offloaded",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    tier: Annotated[str, Meta(min_length=1, max_length=256)]


class ResidentClaimRestoreRequired(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_restore_required",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]


class ResidentClaimRestored(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_restored",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]
    restored_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None


class ResidentClaimRestorationFailed(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_restoration_failed",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]
    outcome: RestorationOutcome


class ResidentClaimCheckpointRestored(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="resident_claim_checkpoint_restored",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    boundary: Annotated[int, Meta(ge=0, le=16777216)]
    payload_hash: Annotated[str, Meta(min_length=1, max_length=256)]
    value_hash: Annotated[str, Meta(min_length=1, max_length=256)]


class ActiveRequestAdmitted(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="active_request_admitted",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]
    active_live_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    claim_shared_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None


class ActiveRequestDeferred(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="active_request_deferred",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]
    reason: ConflictReason
    blocking_claim_ids: list[Annotated[str, Meta(min_length=1, max_length=256)]]
    protected_resident_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    active_live_blocks_required: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    resident_plus_active_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    usable_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    capacity_shortfall_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None


class ActiveRequestRefused(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="active_request_refused",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]
    reason: ConflictReason
    blocking_claim_ids: list[Annotated[str, Meta(min_length=1, max_length=256)]]
    protected_resident_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    active_live_blocks_required: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    resident_plus_active_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    usable_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    capacity_shortfall_blocks: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None


class RequestReused(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="request_reused",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)]
    cached_blocks: Annotated[int, Meta(ge=0, le=16777216)]
    predicate_satisfied: bool
    checkpoint: Checkpoint | None = None


class RequestFinished(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="request_finished",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    request_id: Annotated[str, Meta(min_length=1, max_length=256)]
    status: str


class BlockStored(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="block_stored",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    block_id: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    block_hash: str
    cache_level: str | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    position: Annotated[int, Meta(ge=0, le=16777216)] | None = None


class BlockRemoved(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="block_removed",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    block_id: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    block_hash: str
    cache_level: str | None = None
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    position: Annotated[int, Meta(ge=0, le=16777216)] | None = None


class FaultInjected(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="fault_injected",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    kind: Annotated[str, Meta(min_length=1, max_length=256)]
    claim_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    request_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None


class TraceClosed(
    Struct,
    kw_only=True,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=False,
    tag_field="event",
    tag="trace_closed",
):
    seq: Annotated[int, Meta(ge=0, le=9223372036854775807)]
    t_ns: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    engine_step: Annotated[int, Meta(ge=0, le=9223372036854775807)] | None = None
    reason: CloseReason


HEADER = TraceHeader
"""Line 1 of every trace."""

EVENT_STRUCTS = {
    "resident_claim_submitted": ResidentClaimSubmitted,
    "resident_claim_accepted": ResidentClaimAccepted,
    "resident_claim_conditionally_accepted": ResidentClaimConditionallyAccepted,
    "resident_claim_rejected": ResidentClaimRejected,
    "resident_claim_extended": ResidentClaimExtended,
    "resident_claim_materialized": ResidentClaimMaterialized,
    "resident_claim_demoted": ResidentClaimDemoted,
    "resident_claim_expired": ResidentClaimExpired,
    "resident_claim_released": ResidentClaimReleased,
    "resident_claim_harmed": ResidentClaimHarmed,
    "resident_claim_lost": ResidentClaimLost,
    "resident_claim_offloaded": ResidentClaimOffloaded,
    "resident_claim_restore_required": ResidentClaimRestoreRequired,
    "resident_claim_restored": ResidentClaimRestored,
    "resident_claim_restoration_failed": ResidentClaimRestorationFailed,
    "resident_claim_checkpoint_restored": ResidentClaimCheckpointRestored,
    "active_request_admitted": ActiveRequestAdmitted,
    "active_request_deferred": ActiveRequestDeferred,
    "active_request_refused": ActiveRequestRefused,
    "request_reused": RequestReused,
    "request_finished": RequestFinished,
    "block_stored": BlockStored,
    "block_removed": BlockRemoved,
    "fault_injected": FaultInjected,
    "trace_closed": TraceClosed,
}
"""One Struct per event type, by event name."""

NESTED_FIELDS = {
    TraceHeader: {
        "cache_identity": CacheIdentity,
    },
    ResidentClaimMaterialized: {
        "checkpoint": Checkpoint,
    },
    RequestReused: {
        "checkpoint": Checkpoint,
    },
}
"""The fields that hold one nested model (`Model` or `Model | None`), with its Struct:
the reader audits that object's keys too."""
