"""Claims and trace v1 models: what they accept, what they refuse."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from kvclaims.spec.claims import CacheIdentity, HybridTwoKey, LeadingPrefixAtLeast, ResidentClaimInput
from kvclaims.spec.tables import MAX_IDENTIFIER_LENGTH
from kvclaims.spec.trace import CLAIM_EVENT_TYPES, EVENT_MODELS, TraceEvent, TraceHeader

IDENTITY = CacheIdentity(
    cache_key_domain="vllm-prefix",
    model_id="tiny-llama",
    token_hash_domain="sha256",
    block_size=16,
    kv_format="fp16",
)


def claim(**overrides) -> ResidentClaimInput:
    fields = {
        "claim_id": "claim:resident",
        "owner_scope": "tenant-a",
        "cache_identity": IDENTITY,
        "object_id": "prefix:system",
        "materialization_predicate": {"kind": "leading_prefix_at_least", "blocks": 60},
        "footprint_blocks": 60,
        "protection_mode": "hard_protected",
    }
    return ResidentClaimInput.model_validate(fields | overrides)


def test_leading_prefix_counts_whole_blocks() -> None:
    by_tokens = LeadingPrefixAtLeast(tokens=448)
    assert by_tokens.required_blocks(16) == 28
    assert LeadingPrefixAtLeast(tokens=449).required_blocks(16) == 29
    assert by_tokens.holds(28, 16) and not by_tokens.holds(27, 16)


@pytest.mark.parametrize("fields", [{}, {"blocks": 4, "tokens": 64}])
def test_leading_prefix_needs_exactly_one_unit(fields) -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        LeadingPrefixAtLeast(**fields)


def test_two_key_boundary_is_the_kv_key() -> None:
    predicate = HybridTwoKey(boundary_blocks=8)
    assert predicate.holds(8, 16) and not predicate.holds(7, 16)


def test_claim_predicate_cannot_exceed_footprint() -> None:
    with pytest.raises(ValidationError, match="could never materialize"):
        claim(footprint_blocks=59)


def test_expiring_claim_needs_a_duration() -> None:
    with pytest.raises(ValidationError, match="duration_steps"):
        claim(protection_mode="expiring")
    assert claim(protection_mode="expiring", duration_steps=10).duration_steps == 10


@pytest.mark.parametrize(
    "overrides",
    [
        {"claim_id": "x" * (MAX_IDENTIFIER_LENGTH + 1)},
        {"claim_id": ""},
        {"footprint_blocks": -1},
        {"footprint_blocks": "60"},
        {"protection_mode": "super_hard"},
        {"unexpected": True},
    ],
    ids=["huge-id", "empty-id", "negative-footprint", "string-footprint", "unknown-mode", "unknown-field"],
)
def test_hostile_claim_fields_are_refused(overrides) -> None:
    with pytest.raises(ValidationError):
        claim(**overrides)


EVENTS = TypeAdapter(TraceEvent)


def test_every_event_type_has_a_model_and_claim_events_need_a_claim_id() -> None:
    assert len(EVENT_MODELS) == 25  # 24 of the model, and trace_closed that ends a stream
    assert "trace_closed" not in CLAIM_EVENT_TYPES
    for name in CLAIM_EVENT_TYPES:
        assert "claim_id" in EVENT_MODELS[name].model_fields
        assert EVENT_MODELS[name].model_fields["claim_id"].is_required()


def test_unknown_fields_are_kept_and_ignored() -> None:
    event = EVENTS.validate_python(
        {"seq": 3, "event": "request_finished", "request_id": "r1", "status": "stopped", "arbiter": "x"}
    )
    assert event.model_extra == {"arbiter": "x"}


def test_unknown_event_type_is_not_a_trace_event() -> None:
    with pytest.raises(ValidationError):
        EVENTS.validate_python({"seq": 1, "event": "resident_claim_teleported", "claim_id": "c"})


def test_refusal_event_carries_the_capacity_proof_fields() -> None:
    refusal = EVENTS.validate_python(
        {
            "seq": 9,
            "event": "active_request_refused",
            "request_id": "active",
            "reason": "capacity",
            "blocking_claim_ids": ["claim:resident"],
            "protected_resident_blocks": 60,
            "active_live_blocks_required": 70,
            "resident_plus_active_blocks": 130,
            "usable_blocks": 80,
            "capacity_shortfall_blocks": 50,
        }
    )
    assert refusal.blocking_claim_ids == ["claim:resident"]


def test_header_requires_the_format_version() -> None:
    assert TraceHeader.model_validate({"kvclaims_trace": 1, "usable_blocks": None}).usable_blocks is None
    with pytest.raises(ValidationError):
        TraceHeader.model_validate({"kvclaims_trace": 2})
