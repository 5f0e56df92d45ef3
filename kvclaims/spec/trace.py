"""kvclaims trace v1 (DESIGN 3): the header line and every event type, as pydantic models.

A trace is NDJSON: line 1 is a `TraceHeader`, every other line one event whose `event` field
names its type and whose `seq` strictly increases. Unknown *fields* are kept (runtimes add
context), except that refinement refuses a misspelt one (and, with `strict`, any); an unknown
event *type* is not an error here but makes a refinement verdict `inconclusive`, never
`accepted`.

These models are the schema of record: the committed JSON Schemas are generated from them, the
MicroRuntime and the vLLM binding construct them, and the refinement reader decodes into msgspec
Structs generated from `EVENT_MODELS` (`kvclaims.spec.trace_structs`, by `struct_codegen`). A
validator here must be a `model_rule` (a plain function of `kvclaims.spec.model_rules`), which
the Structs run too; the enums live in `kvclaims.spec.vocabulary`, the reader's side of them.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from kvclaims.spec._types import (
    FormatVersion,
    Identifier,
    NonNegativeInt,
    PositiveInt,
    PositivePrefixBlocks,
    PrefixBlocks,
    StrictStr,
    Text,
    model_rule,
)
from kvclaims.spec.claims import CacheIdentity, MaterializationPredicate
from kvclaims.spec.model_rules import caps_bound_their_durations, chosen_among_candidates, extends_a_duration
from kvclaims.spec.vocabulary import (
    CloseReason,
    ConflictReason,
    ProtectionMode,
    RestorationOutcome,
    RouteOutcome,
)

TRACE_FORMAT_VERSION = 1


class _TraceModel(BaseModel):
    """Trace lines keep unknown fields (extra context) and are immutable once built."""

    model_config = ConfigDict(extra="allow", frozen=True)


class TraceHeader(_TraceModel):
    """Line 1 of every trace. `usable_blocks` is the pool the capacity proofs refer to; when it
    is known here, every refusal's `usable_blocks` must equal it."""

    kvclaims_trace: FormatVersion = Field(description="The trace format version; always 1.")
    source: Text | None = Field(None, description="What produced the trace (runtime, scenario).")
    usable_blocks: NonNegativeInt | None = Field(
        None, description="KV blocks in the pool that capacity proofs refer to; null when unknown."
    )
    block_size: PositiveInt | None = Field(None, description="Tokens per KV block.")
    cache_identity: CacheIdentity | None = Field(
        None, description="The identity inside which cached prefixes are one reusable object."
    )
    engine_id: Identifier | None = Field(
        None,
        description="The engine this stream belongs to in a fleet (one ordered stream per engine); "
        "routing events name engines by it. Null outside a fleet.",
    )


MAX_TENSOR_DIMS = 8
MAX_CHECKPOINT_TENSORS = 4096
"""Bounds on a checkpoint's ABI metadata (a trace never sizes anything by its own numbers)."""


# Source: seed 002 ("tensor metadata").
class CheckpointTensor(_TraceModel):
    """The ABI metadata of one non-KV state tensor in a checkpoint: what it is, where it
    lives, and how its stored bytes mean a logical value."""

    kind: Identifier = Field(description="The tensor kind (e.g. conv_state, ssm_state).")
    layer: Identifier = Field(description="The model layer the state belongs to.")
    shape: list[NonNegativeInt] = Field(max_length=MAX_TENSOR_DIMS, description="The logical shape.")
    logical_dtype: Identifier = Field(description="The dtype the logical value is compared in.")
    storage_dtype: Identifier = Field(description="The dtype the payload bytes are stored in.")
    layout: Identifier = Field(
        description="The layout tag: how the stored bytes map to the logical value "
        "(row_major, column_major); a backend's unknown layout fails closed."
    )


# Source: seed 002.
class Checkpoint(_TraceModel):
    """A two-key checkpoint at boundary B: immutable payload bytes and logical value."""

    boundary: PrefixBlocks = Field(description="The block boundary B the checkpoint belongs to.")
    payload_hash: Identifier = Field(description="Hash of the checkpoint's bytes.")
    value_hash: Identifier = Field(
        description="Hash of the checkpoint's logical value; only this key establishes equality."
    )
    tensors: Annotated[list[CheckpointTensor], Field(max_length=MAX_CHECKPOINT_TENSORS)] | None = Field(
        None,
        description="The ABI metadata of the state tensors the hashes cover, in hashing order "
        "(runtimes that restore real tensors record it).",
    )


class _Event(_TraceModel):
    seq: NonNegativeInt = Field(description="Position in the trace; strictly increases from line to line.")
    t_ns: NonNegativeInt | None = Field(
        None,
        description="Timestamp in nanoseconds; never used for order. A claim's `duration_ms` is "
        "judged on it.",
    )
    engine_step: NonNegativeInt | None = Field(
        None,
        description="The runtime's scheduler step when the event happened; never used for order. "
        "A claim's `duration_steps` is judged on it.",
    )


class _ClaimEvent(_Event):
    claim_id: Identifier = Field(description="The claim this event is about.")


class _ClaimTerms(_ClaimEvent):
    owner_scope: Identifier = Field(description="Who owns the claim (tenant, application).")
    object_id: Identifier = Field(description="The reusable prefix object the claim is about.")
    mode: ProtectionMode = Field(description="What the claim promises.")
    footprint_blocks: PositivePrefixBlocks = Field(description="KV blocks the claim protects.")
    predicate: MaterializationPredicate = Field(description="When the claim counts as materialized.")
    duration_steps: PositiveInt | None = Field(
        None,
        description="Engine steps after acceptance before which the claim may not expire "
        "(judged on `engine_step`).",
    )
    duration_ms: PositiveInt | None = Field(
        None,
        description="Milliseconds after acceptance before which the claim may not expire "
        "(judged on `t_ns`; TTL-style runtimes).",
    )
    refresh_on_hit: StrictBool = Field(
        False,
        description="Whether a satisfied reuse restarts the duration clock (TTL refresh on hit); "
        "false: the clock runs from acceptance only (reads never renew).",
    )
    max_duration_steps: PositiveInt | None = Field(
        None,
        description="A cap on the claim's whole protected life, in engine steps from acceptance: "
        "neither refresh on hit nor an extension promises past it (needs `duration_steps`, and is "
        "at least as long).",
    )
    max_duration_ms: PositiveInt | None = Field(
        None,
        description="A cap on the claim's whole protected life, in milliseconds from acceptance: "
        "neither refresh on hit nor an extension promises past it (Mooncake soft pins; needs "
        "`duration_ms`, and is at least as long).",
    )

    _caps_bound_their_durations = model_rule(caps_bound_their_durations)


class ResidentClaimSubmitted(_ClaimTerms):
    """An application asked for a resident claim; the runtime has not decided yet."""

    event: Literal["resident_claim_submitted"] = "resident_claim_submitted"


# Source: seed 001 section 3.1.
class ResidentClaimAccepted(_ClaimTerms):
    """From here on the runtime is responsible for the claim's predicate."""

    event: Literal["resident_claim_accepted"] = "resident_claim_accepted"


class ResidentClaimConditionallyAccepted(_ClaimTerms):
    """The runtime accepted a submitted claim on other terms (mode, predicate, footprint or
    duration): the terms here are the ones it is responsible for. Plain
    `resident_claim_accepted` must repeat the submitted terms exactly."""

    event: Literal["resident_claim_conditionally_accepted"] = "resident_claim_conditionally_accepted"
    reason: Text | None = Field(None, description="Why the terms changed (free text).")


class ResidentClaimExtended(_ClaimEvent):
    """The runtime granted an accepted claim a longer term (extend-only deadlines: LMCache pin
    extension, a renewed lease): from this event on, the claim may not expire before the
    `duration_*` given here on that clock. An extension never shortens the promise, adds no clock
    the claim's terms lack, and stays within the claim's cap."""

    event: Literal["resident_claim_extended"] = "resident_claim_extended"
    duration_steps: PositiveInt | None = Field(
        None, description="Engine steps from this event before which the claim may not expire."
    )
    duration_ms: PositiveInt | None = Field(
        None, description="Milliseconds from this event before which the claim may not expire."
    )
    reason: Text | None = Field(None, description="Who asked for the extension (free text).")

    _extends_a_duration = model_rule(extends_a_duration)


class ResidentClaimRejected(_ClaimEvent):
    """The runtime declined the claim: it never binds."""

    event: Literal["resident_claim_rejected"] = "resident_claim_rejected"
    reason: StrictStr = Field(description="Why the runtime did not accept the claim.")


class ResidentClaimMaterialized(_ClaimEvent):
    """The predicate holds now: `leading_blocks` contiguous leading blocks are resident."""

    event: Literal["resident_claim_materialized"] = "resident_claim_materialized"
    leading_blocks: PrefixBlocks = Field(description="Contiguous leading blocks of the prefix resident now.")
    checkpoint: Checkpoint | None = Field(
        None, description="The checkpoint recorded at materialization (hybrid two-key claims)."
    )


class ResidentClaimDemoted(_ClaimEvent):
    """Responsibility relaxed before loss: later loss is post-release, not harm."""

    event: Literal["resident_claim_demoted"] = "resident_claim_demoted"
    reason: Text | None = Field(None, description="Why the claim was demoted (free text).")


class ResidentClaimExpired(_ClaimEvent):
    """Responsibility ended by duration: later loss is post-expiry, not harm."""

    event: Literal["resident_claim_expired"] = "resident_claim_expired"
    reason: Text | None = Field(None, description="Why it expired (free text).")


class ResidentClaimReleased(_ClaimEvent):
    """Responsibility ended by the owner or the runtime: later loss is post-release, not harm."""

    event: Literal["resident_claim_released"] = "resident_claim_released"
    reason: Text | None = Field(None, description="Who or what released it (free text).")


class ResidentClaimHarmed(_ClaimEvent):
    """An accepted, preserving claim fell below its predicate with no prior release."""

    event: Literal["resident_claim_harmed"] = "resident_claim_harmed"
    leading_blocks: PrefixBlocks = Field(description="Contiguous leading blocks still resident.")
    required_blocks: PositivePrefixBlocks = Field(
        description="Contiguous leading blocks the predicate needs."
    )


class ResidentClaimLost(_ClaimEvent):
    """A best_effort / soft_priority claim fell below its predicate: reported, not harm."""

    event: Literal["resident_claim_lost"] = "resident_claim_lost"
    leading_blocks: PrefixBlocks = Field(description="Contiguous leading blocks still resident.")


class ResidentClaimOffloaded(_ClaimEvent):
    """The claim's blocks moved to another tier; a reuse must restore them first."""

    event: Literal["resident_claim_offloaded"] = "resident_claim_offloaded"
    tier: Identifier = Field(description="The storage tier that now holds the claim's blocks (e.g. host).")


class ResidentClaimRestoreRequired(_ClaimEvent):
    """A reuse by `request_id` needs the claim restored first: an offloaded claim, or (in
    place, seed 002) a materialized two-key claim's checkpoint into the request's live slot."""

    event: Literal["resident_claim_restore_required"] = "resident_claim_restore_required"
    request_id: Identifier = Field(description="The request that reuses the claim.")


class ResidentClaimRestored(_ClaimEvent):
    """The claim's KV blocks are back (or, in place, still) in the device tier for `request_id`."""

    event: Literal["resident_claim_restored"] = "resident_claim_restored"
    request_id: Identifier = Field(description="The request the claim was restored for.")
    restored_blocks: NonNegativeInt | None = Field(
        None,
        description="Contiguous leading blocks back in the device tier. A satisfied reuse "
        "after the restore needs this, or the claim's own device-tier block events, to reach "
        "the predicate.",
    )


class ResidentClaimRestorationFailed(_ClaimEvent):
    """Restoring the claim for `request_id` failed; `outcome` is what that became for the claim."""

    event: Literal["resident_claim_restoration_failed"] = "resident_claim_restoration_failed"
    request_id: Identifier = Field(description="The request the restoration was for.")
    outcome: RestorationOutcome = Field(description="What the failure became for the claim.")


class ResidentClaimCheckpointRestored(_ClaimEvent):
    """The non-KV side of a two-key claim was restored; only `value_hash` equality with the
    materialization checkpoint satisfies the predicate."""

    event: Literal["resident_claim_checkpoint_restored"] = "resident_claim_checkpoint_restored"
    boundary: PrefixBlocks = Field(description="The block boundary B restored.")
    payload_hash: Identifier = Field(description="Hash of the restored bytes.")
    value_hash: Identifier = Field(description="Hash of the restored logical value.")


class ActiveRequestAdmitted(_Event):
    """An active request was admitted and holds `active_live_blocks` live."""

    event: Literal["active_request_admitted"] = "active_request_admitted"
    request_id: Identifier = Field(description="The admitted request.")
    active_live_blocks: NonNegativeInt = Field(description="KV blocks the request holds live.")
    claim_shared_blocks: NonNegativeInt | None = Field(
        None,
        description="How many of `active_live_blocks` are protected claim blocks: device "
        "blocks holding the leading positions the predicates of materialized preserving claims "
        "need (a cached claim prefix the request reuses), so counted once. Given, the "
        "admission must fit beside every protected block: claim-held + "
        "active_live_blocks - claim_shared_blocks <= usable_blocks (seed 001 3.4), with "
        "claim_shared_blocks <= active_live_blocks and <= the claim-held blocks. Absent, the "
        "sharing is unknown and the sum is judged by the capacity proofs: the claim-held blocks "
        "and the request's live blocks must each fit in the pool.",
    )


class _ActiveConflict(_Event):
    """An active request that the arbiter did not serve now, with the capacity proof
    `protected_resident_blocks + active_live_blocks_required = resident_plus_active_blocks`,
    `capacity_shortfall_blocks = max(0, resident_plus_active_blocks - usable_blocks)`.

    A `capacity` conflict must carry all five numbers (refinement rule 3 rejects one that does
    not). A `restoration_failed` refusal is not a capacity decision (seed 000 path B): its numbers
    may be absent, and are checked when given.
    """

    request_id: Identifier = Field(description="The request not served now.")
    reason: ConflictReason = Field(description="A capacity conflict, or a failed restoration.")
    blocking_claim_ids: list[Identifier] = Field(
        description="The accepted claims whose protection caused the conflict; never empty."
    )
    protected_resident_blocks: NonNegativeInt | None = Field(
        None, description="Blocks reserved by the responsible preserving claims."
    )
    active_live_blocks_required: NonNegativeInt | None = Field(
        None, description="Blocks the request needs live."
    )
    resident_plus_active_blocks: NonNegativeInt | None = Field(
        None, description="protected_resident_blocks + active_live_blocks_required."
    )
    usable_blocks: NonNegativeInt | None = Field(
        None, description="The pool; equals the header's usable_blocks when that is given."
    )
    capacity_shortfall_blocks: NonNegativeInt | None = Field(
        None, description="max(0, resident_plus_active_blocks - usable_blocks)."
    )


class ActiveRequestDeferred(_ActiveConflict):
    """The request waits until the conflict can end. A `capacity` deferral carries the whole
    capacity proof; a `restoration_failed` one may leave its numbers out."""

    event: Literal["active_request_deferred"] = "active_request_deferred"


class ActiveRequestRefused(_ActiveConflict):
    """The request is not served. A `capacity` refusal carries the whole capacity proof, with a
    positive shortfall; a `restoration_failed` one names exactly the claim that failed."""

    event: Literal["active_request_refused"] = "active_request_refused"


class RequestReused(_Event):
    """A request reused a claim's object, served `cached_blocks` leading blocks from the cache."""

    event: Literal["request_reused"] = "request_reused"
    request_id: Identifier = Field(description="The request that reused the claim's object.")
    claim_id: Identifier = Field(description="The claim reused.")
    cached_blocks: PrefixBlocks = Field(description="Leading blocks served from the cache.")
    predicate_satisfied: StrictBool = Field(description="Whether the claim's predicate held at reuse.")
    checkpoint: Checkpoint | None = Field(
        None,
        description="A two-key claim resumed in place (its state restored from the device tier "
        "into the request's live slot): the restored state's checkpoint. A satisfied reuse's "
        "boundary and value_hash must equal the materialization checkpoint's.",
    )


class RequestFinished(_Event):
    """A request ended."""

    event: Literal["request_finished"] = "request_finished"
    request_id: Identifier = Field(description="The request that ended.")
    status: StrictStr = Field(description="How it ended (free text, e.g. finished, refused).")


class _BlockEvent(_Event):
    """A physical block entering or leaving the prefix cache. `claim_id` and `position` (index
    in the claim's prefix) are present for claimed blocks, so refinement can track each claim's
    leading prefix and catch silent harm."""

    block_id: NonNegativeInt = Field(description="The physical block in the runtime's pool.")
    block_hash: StrictStr = Field(description="The block's prefix hash.")
    cache_level: Text | None = Field(
        None, description="The tier (gpu or device, or absent: the device pool; others: e.g. cpu)."
    )
    claim_id: Identifier | None = Field(None, description="The claim the block belongs to, if claimed.")
    position: PrefixBlocks | None = Field(
        None, description="Index of the block in the claim's prefix (0 is the first)."
    )


class BlockStored(_BlockEvent):
    """A block entered the cache (with `claim_id` and `position` when it belongs to a claim)."""

    event: Literal["block_stored"] = "block_stored"


class BlockRemoved(_BlockEvent):
    """A block left the cache (with `claim_id` and `position` when it belonged to a claim)."""

    event: Literal["block_removed"] = "block_removed"


class FaultInjected(_Event):
    """A test or scenario injected a fault (e.g. a failed KV load or restore)."""

    event: Literal["fault_injected"] = "fault_injected"
    kind: Identifier = Field(description="The fault (e.g. invalid_kv_load, restore_failure).")
    claim_id: Identifier | None = Field(None, description="The claim the fault targets, if any.")
    request_id: Identifier | None = Field(None, description="The request the fault targets, if any.")


class TraceClosed(_Event):
    """The last line of a complete trace: the writer ended the stream cleanly. A kvclaims-v1
    trace without it is truncated (refinement: `inconclusive`, unless judged as an open
    prefix), and a line after it makes the trace invalid. Not a step of the model."""

    event: Literal["trace_closed"] = "trace_closed"
    reason: CloseReason = Field(description="Why the writer ended the trace.")


class RouteDecided(_Event):
    """A router chose an engine for `request_id`, a reuse of `claim_id` (router stream)."""

    event: Literal["route_decided"] = "route_decided"
    request_id: Identifier = Field(description="The routed request, as the engines' streams name it.")
    claim_id: Identifier = Field(description="The claim whose reuse the request is.")
    candidate_engines: list[Identifier] = Field(
        min_length=1, max_length=1024, description="The engines the router chose among (distinct)."
    )
    chosen_engine: Identifier = Field(
        description="The engine the request was sent to; one of the candidates."
    )
    predicted_hit_blocks: PrefixBlocks = Field(
        description="Leading blocks of the claim's prefix the router predicted cached on the chosen engine."
    )

    _chosen_among_candidates = model_rule(chosen_among_candidates)


class RouteReuseReported(_Event):
    """What the routed reuse of `claim_id` by `request_id` came to on `engine` (router stream)."""

    event: Literal["route_reuse_reported"] = "route_reuse_reported"
    request_id: Identifier = Field(description="The routed request.")
    claim_id: Identifier = Field(description="The claim whose reuse was routed.")
    engine: Identifier = Field(description="The engine that served the request.")
    delivered_blocks: PrefixBlocks = Field(
        description="Leading blocks of the claim's prefix the engine served from its cache for the "
        "request, attributed to the claim (0 when the engine does not hold the claim)."
    )
    outcome: RouteOutcome = Field(description="Whether the routed reuse was delivered or missed.")


_EVENT_CLASSES: tuple[type[_Event], ...] = (
    ResidentClaimSubmitted,
    ResidentClaimAccepted,
    ResidentClaimConditionallyAccepted,
    ResidentClaimRejected,
    ResidentClaimExtended,
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
    TraceClosed,
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


_ROUTING_CLASSES: tuple[type[_Event], ...] = (RouteDecided, RouteReuseReported, TraceClosed)

ROUTING_EVENT_MODELS: dict[str, type[_Event]] = {
    model.model_fields["event"].default: model for model in _ROUTING_CLASSES
}
"""Every event type of a router stream (a fleet's routing hook writes it; `kvclaims check
--fleet` judges it together with the engines' streams). Not engine events: a single-stream
check finds them unknown (inconclusive)."""

RoutingEvent = Annotated[Union[_ROUTING_CLASSES], Field(discriminator="event")]  # noqa: UP007
"""Any one router stream line, discriminated by `event`."""
