"""The derived msgspec decoders accept exactly the event lines the pydantic models accept.

Generated lines start from one valid example of every event type and are mutated (fields
dropped, retyped, emptied, lengthened, nested objects broken, unknown fields added); each line
is judged by both. Integers stay inside 64 bits here: beyond that the reader is stricter on
purpose (tested separately), which is the one documented difference.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from kvclaims.refinement.decoding import EVENT_STRUCTS, MAX_TRACE_INT, convert_event, event_decoder
from kvclaims.spec.trace import EVENT_MODELS, TraceEvent
from kvclaims.spec.trace_structs import LeadingPrefixAtLeast

TERMS = {
    "claim_id": "claim:a",
    "owner_scope": "tenant-a",
    "object_id": "prefix:a",
    "mode": "hard_protected",
    "footprint_blocks": 4,
    "predicate": {"kind": "leading_prefix_at_least", "blocks": 4},
    "duration_steps": 10,
}
PROOF = {
    "protected_resident_blocks": 60,
    "active_live_blocks_required": 70,
    "resident_plus_active_blocks": 130,
    "usable_blocks": 80,
    "capacity_shortfall_blocks": 50,
}
EXAMPLES: dict[str, dict[str, Any]] = {
    "resident_claim_submitted": TERMS,
    "resident_claim_accepted": TERMS,
    "resident_claim_conditionally_accepted": TERMS
    | {"reason": "footprint reduced", "max_duration_steps": 20},
    "resident_claim_rejected": {"claim_id": "claim:a", "reason": "budget"},
    "resident_claim_extended": {"claim_id": "claim:a", "duration_steps": 15, "reason": "client extend"},
    "resident_claim_materialized": {
        "claim_id": "claim:a",
        "leading_blocks": 4,
        "checkpoint": {"boundary": 4, "payload_hash": "p1", "value_hash": "v1"},
    },
    "resident_claim_demoted": {"claim_id": "claim:a", "reason": "pressure"},
    "resident_claim_expired": {"claim_id": "claim:a", "reason": None},
    "resident_claim_released": {"claim_id": "claim:a"},
    "resident_claim_harmed": {"claim_id": "claim:a", "leading_blocks": 3, "required_blocks": 4},
    "resident_claim_lost": {"claim_id": "claim:a", "leading_blocks": 0},
    "resident_claim_offloaded": {"claim_id": "claim:a", "tier": "cpu"},
    "resident_claim_restore_required": {"claim_id": "claim:a", "request_id": "r1"},
    "resident_claim_restored": {"claim_id": "claim:a", "request_id": "r1"},
    "resident_claim_restoration_failed": {"claim_id": "claim:a", "request_id": "r1", "outcome": "refusal"},
    "resident_claim_checkpoint_restored": {
        "claim_id": "claim:a",
        "boundary": 4,
        "payload_hash": "p1",
        "value_hash": "v1",
    },
    "active_request_admitted": {"request_id": "r1", "active_live_blocks": 7},
    "active_request_deferred": {
        "request_id": "r1",
        "reason": "capacity",
        "blocking_claim_ids": ["claim:a"],
        **PROOF,
    },
    "active_request_refused": {
        "request_id": "r1",
        "reason": "restoration_failed",
        "blocking_claim_ids": ["claim:a"],
    },
    "request_reused": {
        "request_id": "r1",
        "claim_id": "claim:a",
        "cached_blocks": 4,
        "predicate_satisfied": True,
    },
    "request_finished": {"request_id": "r1", "status": "finished"},
    "block_stored": {
        "block_id": 1,
        "block_hash": "h1",
        "cache_level": "gpu",
        "claim_id": "claim:a",
        "position": 0,
    },
    "block_removed": {"block_id": 1, "block_hash": "h1"},
    "fault_injected": {"kind": "load_failure", "claim_id": "claim:a", "request_id": None},
    "trace_closed": {"reason": "SIGTERM"},
}

VALUES = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        1,
        -1,
        MAX_TRACE_INT,
        1.0,
        1.5,
        "",
        "x",
        "x" * 257,
        [],
        ["a"],
        [""],
        [1],
        {},
        {"kind": "leading_prefix_at_least"},
        {"kind": "leading_prefix_at_least", "blocks": 2, "tokens": 32},
        {"kind": "leading_prefix_at_least", "tokens": 32},
        {"kind": "hybrid_two_key", "boundary_blocks": 2},
        {"kind": "hybrid_two_key", "boundary_blocks": 2, "extra": 1},
        {"boundary": 1, "payload_hash": "p", "value_hash": "v"},
        {"boundary": -1, "payload_hash": "p", "value_hash": "v"},
        "capacity",
        "refusal",
        "best_effort",
        "bogus",
    ]
)


@st.composite
def event_documents(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(EXAMPLES)))
    document: dict[str, Any] = {"seq": draw(st.integers(0, MAX_TRACE_INT)), "event": name, **EXAMPLES[name]}
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["drop", "set", "extra", "event"]))
        fields = sorted(document)
        if action == "drop":
            document.pop(draw(st.sampled_from(fields)), None)
        elif action == "set":
            document[draw(st.sampled_from(fields))] = draw(VALUES)
        elif action == "extra":
            document[draw(st.sampled_from(["context", "note", "predicate_id"]))] = draw(VALUES)
        else:
            document["event"] = draw(st.sampled_from([*sorted(EXAMPLES), "resident_claim_teleported"]))
    return document


PYDANTIC = TypeAdapter(TraceEvent)


def pydantic_accepts(line: bytes) -> bool:
    try:
        PYDANTIC.validate_json(line)
    except ValidationError:
        return False
    return True


def fast_accepts(line: bytes) -> bool:
    try:
        event_decoder().decode(line)
    except msgspec.ValidationError:
        return False
    return True


def test_every_event_type_has_a_struct_and_a_valid_example() -> None:
    assert set(EVENT_STRUCTS) == set(EVENT_MODELS) == set(EXAMPLES)
    for name, fields in EXAMPLES.items():
        line = json.dumps({"seq": 1, "event": name, **fields}).encode()
        assert pydantic_accepts(line) and fast_accepts(line), name


@settings(max_examples=1500, derandomize=True, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(event_documents())
def test_fast_decoders_accept_exactly_what_the_models_accept(document: dict[str, Any]) -> None:
    line = json.dumps(document).encode()
    assert fast_accepts(line) == pydantic_accepts(line), document


@pytest.mark.parametrize("field", ["seq", "block_id", "t_ns"])
def test_integers_beyond_64_bits_are_refused_although_pydantic_would_keep_them(field: str) -> None:
    document = {"seq": 1, "event": "block_stored", **EXAMPLES["block_stored"], field: 2**80}
    line = json.dumps(document).encode()
    assert pydantic_accepts(line) and not fast_accepts(line)


def test_a_broken_model_rule_is_refused_in_the_rules_words_at_its_field() -> None:
    """The Structs run the model's rule themselves (`__post_init__`): decoding, converting and
    building one directly all refuse a predicate that gives both units, in the words of the
    rule both readers share, and the models refuse it too."""
    predicate = {"kind": "leading_prefix_at_least", "blocks": 2, "tokens": 32}
    document = {"seq": 1, "event": "resident_claim_accepted", **TERMS, "predicate": predicate}
    expected = "give exactly one of 'blocks' or 'tokens' - at `$.predicate`"
    with pytest.raises(msgspec.ValidationError, match=re.escape(expected)):
        event_decoder().decode(json.dumps(document).encode())
    with pytest.raises(msgspec.ValidationError, match=re.escape(expected)):
        convert_event(document)
    with pytest.raises(ValueError, match="give exactly one"):
        LeadingPrefixAtLeast(blocks=2, tokens=32)
    assert not pydantic_accepts(json.dumps(document).encode())
