"""kvclaims trace v1 (DESIGN 3): the header line and every event type, as pydantic models.

A trace is NDJSON: line 1 is a `TraceHeader`, every other line one event whose `event` field
names its type and whose `seq` strictly increases. Unknown *fields* are kept and ignored (so
runtimes can add context); an unknown event *type* is not an error here but makes a refinement
verdict `inconclusive`, never `accepted`.

These models are the schema of record: the committed JSON Schemas are generated from them, the
MicroRuntime and the vLLM binding construct them, and the refinement reader derives its fast
decoders from `EVENT_MODELS`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from kvclaims.spec._types import Identifier, NonNegativeInt, PositiveInt, StrictStr, Text
from kvclaims.spec.claims import CacheIdentity, MaterializationPredicate
from kvclaims.spec.vocabulary import ProtectionMode

TRACE_FORMAT_VERSION = 1


class _TraceModel(BaseModel):
    """Trace lines keep unknown fields (extra context) and are immutable once built."""

    model_config = ConfigDict(extra="allow", frozen=True)


class TraceHeader(_TraceModel):
    """Line 1 of every trace. `usable_blocks` is the pool the capacity proofs refer to; when it
    is known here, every refusal's `usable_blocks` must equal it."""

    kvclaims_trace: Literal[1]
    source: Text | None = None
    usable_blocks: NonNegativeInt | None = None
    block_size: PositiveInt | None = None
    cache_identity: CacheIdentity | None = None


class RestorationOutcome(StrEnum):
    """What a failed restoration became: the claim-scoped, fail-closed outcome (seed 000 s. 7)."""

    refusal = "refusal"
    demotion = "demotion"
    expiry = "expiry"
    harm = "harm"


class ConflictReason(StrEnum):
    """Why an active request was refused or deferred."""

    capacity = "capacity"
    restoration_failed = "restoration_failed"


class Checkpoint(_TraceModel):
    """A two-key checkpoint at boundary B (seed 002): immutable payload bytes and logical value."""

    boundary: NonNegativeInt
    payload_hash: Identifier
    value_hash: Identifier


class _Event(_TraceModel):
    seq: NonNegativeInt
    t_ns: NonNegativeInt | None = None


class _ClaimEvent(_Event):
    claim_id: Identifier


class _ClaimTerms(_ClaimEvent):
    owner_scope: Identifier
    object_id: Identifier
    mode: ProtectionMode
    footprint_blocks: PositiveInt
    predicate: MaterializationPredicate
    duration_steps: PositiveInt | None = None


class ResidentClaimSubmitted(_ClaimTerms):
    event: Literal["resident_claim_submitted"] = "resident_claim_submitted"


class ResidentClaimAccepted(_ClaimTerms):
    """From here on the runtime is responsible for the claim's predicate (seed 001 3.1)."""

    event: Literal["resident_claim_accepted"] = "resident_claim_accepted"


class ResidentClaimRejected(_ClaimEvent):
    event: Literal["resident_claim_rejected"] = "resident_claim_rejected"
    reason: StrictStr


class ResidentClaimMaterialized(_ClaimEvent):
    """The predicate holds now: `leading_blocks` contiguous leading blocks are resident."""

    event: Literal["resident_claim_materialized"] = "resident_claim_materialized"
    leading_blocks: NonNegativeInt
    checkpoint: Checkpoint | None = None


class ResidentClaimDemoted(_ClaimEvent):
    """Responsibility relaxed before loss: later loss is post-release, not harm."""

    event: Literal["resident_claim_demoted"] = "resident_claim_demoted"
    reason: Text | None = None


class ResidentClaimExpired(_ClaimEvent):
    """Responsibility ended by duration: later loss is post-expiry, not harm."""

    event: Literal["resident_claim_expired"] = "resident_claim_expired"
    reason: Text | None = None


class ResidentClaimReleased(_ClaimEvent):
    event: Literal["resident_claim_released"] = "resident_claim_released"
    reason: Text | None = None


class ResidentClaimHarmed(_ClaimEvent):
    """An accepted, preserving claim fell below its predicate with no prior release."""

    event: Literal["resident_claim_harmed"] = "resident_claim_harmed"
    leading_blocks: NonNegativeInt
    required_blocks: PositiveInt


class ResidentClaimLost(_ClaimEvent):
    """A best_effort / soft_priority claim fell below its predicate: reported, not harm."""

    event: Literal["resident_claim_lost"] = "resident_claim_lost"
    leading_blocks: NonNegativeInt


class ResidentClaimOffloaded(_ClaimEvent):
    event: Literal["resident_claim_offloaded"] = "resident_claim_offloaded"
    tier: Identifier


class ResidentClaimRestoreRequired(_ClaimEvent):
    """A reuse by `request_id` needs the offloaded claim restored first."""

    event: Literal["resident_claim_restore_required"] = "resident_claim_restore_required"
    request_id: Identifier


class ResidentClaimRestored(_ClaimEvent):
    event: Literal["resident_claim_restored"] = "resident_claim_restored"
    request_id: Identifier


class ResidentClaimRestorationFailed(_ClaimEvent):
    event: Literal["resident_claim_restoration_failed"] = "resident_claim_restoration_failed"
    request_id: Identifier
    outcome: RestorationOutcome


class ResidentClaimCheckpointRestored(_ClaimEvent):
    """The non-KV side of a two-key claim was restored; only `value_hash` equality with the
    materialization checkpoint satisfies the predicate."""

    event: Literal["resident_claim_checkpoint_restored"] = "resident_claim_checkpoint_restored"
    boundary: NonNegativeInt
    payload_hash: Identifier
    value_hash: Identifier


class ActiveRequestAdmitted(_Event):
    event: Literal["active_request_admitted"] = "active_request_admitted"
    request_id: Identifier
    active_live_blocks: NonNegativeInt


CAPACITY_PROOF_FIELDS: tuple[str, ...] = (
    "protected_resident_blocks",
    "active_live_blocks_required",
    "resident_plus_active_blocks",
    "usable_blocks",
    "capacity_shortfall_blocks",
)
"""The numbers of a conflict's capacity proof."""


class _ActiveConflict(_Event):
    """An active request that the arbiter did not serve now, with the capacity proof
    `protected_resident_blocks + active_live_blocks_required = resident_plus_active_blocks`,
    `capacity_shortfall_blocks = max(0, resident_plus_active_blocks - usable_blocks)`.

    A `capacity` conflict must carry all five numbers (refinement rule 3 rejects one that does
    not). A `restoration_failed` refusal is not a capacity decision (seed 000 path B): its numbers
    may be absent, and are checked when given.
    """

    request_id: Identifier
    reason: ConflictReason
    blocking_claim_ids: list[Identifier]
    protected_resident_blocks: NonNegativeInt | None = None
    active_live_blocks_required: NonNegativeInt | None = None
    resident_plus_active_blocks: NonNegativeInt | None = None
    usable_blocks: NonNegativeInt | None = None
    capacity_shortfall_blocks: NonNegativeInt | None = None


class ActiveRequestDeferred(_ActiveConflict):
    event: Literal["active_request_deferred"] = "active_request_deferred"


class ActiveRequestRefused(_ActiveConflict):
    event: Literal["active_request_refused"] = "active_request_refused"


class RequestReused(_Event):
    event: Literal["request_reused"] = "request_reused"
    request_id: Identifier
    claim_id: Identifier
    cached_blocks: NonNegativeInt
    predicate_satisfied: StrictBool


class RequestFinished(_Event):
    event: Literal["request_finished"] = "request_finished"
    request_id: Identifier
    status: StrictStr


class _BlockEvent(_Event):
    """A physical block entering or leaving the prefix cache. `claim_id` and `position` (index
    in the claim's prefix) are present for claimed blocks, so refinement can track each claim's
    leading prefix and catch silent harm."""

    block_id: NonNegativeInt
    block_hash: StrictStr
    cache_level: Text | None = None
    claim_id: Identifier | None = None
    position: NonNegativeInt | None = None


class BlockStored(_BlockEvent):
    event: Literal["block_stored"] = "block_stored"


class BlockRemoved(_BlockEvent):
    event: Literal["block_removed"] = "block_removed"


class FaultInjected(_Event):
    event: Literal["fault_injected"] = "fault_injected"
    kind: Identifier
    claim_id: Identifier | None = None
    request_id: Identifier | None = None


_EVENT_CLASSES: tuple[type[_Event], ...] = (
    ResidentClaimSubmitted,
    ResidentClaimAccepted,
    ResidentClaimRejected,
    ResidentClaimMaterialized,
    ResidentClaimDemoted,
    ResidentClaimExpired,
    ResidentClaimReleased,
    ResidentClaimHarmed,
    ResidentClaimLost,
    ResidentClaimOffloaded,
    ResidentClaimRestoreRequired,
    ResidentClaimRestored,
    ResidentClaimRestorationFailed,
    ResidentClaimCheckpointRestored,
    ActiveRequestAdmitted,
    ActiveRequestDeferred,
    ActiveRequestRefused,
    RequestReused,
    RequestFinished,
    BlockStored,
    BlockRemoved,
    FaultInjected,
)

EVENT_MODELS: dict[str, type[_Event]] = {
    model.model_fields["event"].default: model for model in _EVENT_CLASSES
}
"""Every event type of trace v1, by its `event` name."""

CLAIM_EVENT_TYPES: frozenset[str] = frozenset(
    name for name, model in EVENT_MODELS.items() if issubclass(model, _ClaimEvent)
)
"""Event types whose subject is one claim (`claim_id` required): the lifecycle's inputs."""

TraceEvent = Annotated[Union[_EVENT_CLASSES], Field(discriminator="event")]  # noqa: UP007
"""Any one event line, discriminated by `event`."""
