"""Per-request claim metadata: total, fail-closed parsing of client-controlled keys."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvclaims.spec.claims import CacheIdentity
from kvclaims.spec.tables import MAX_IDENTIFIER_LENGTH
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.vllm_binding.metadata import (
    KEYS,
    MAX_CLAIM_NUMBER,
    ClaimOp,
    ClaimRequest,
    MetadataRejection,
    claim_input,
    owner_of,
    owner_token,
    parse_claim_metadata,
    raw_type_problem,
)

IDENTITY = CacheIdentity(
    cache_key_domain="vllm-prefix-cache",
    model_id="tiny",
    token_hash_domain="vllm-sha256",
    block_size=16,
    kv_format="float32",
)


def submit(**extra: object) -> dict[str, object]:
    return {
        "kvclaims_claim_id": "c1",
        "kvclaims_mode": "hard_protected",
        "kvclaims_footprint_blocks": 4,
        **extra,
    }


def test_no_claim_keys_means_no_claim_operation() -> None:
    assert parse_claim_metadata(None) is None
    assert parse_claim_metadata({}) is None
    assert parse_claim_metadata({"kv_transfer_params": {"x": 1}, "other": 2}) is None
    assert parse_claim_metadata(["kvclaims_claim_id"]) is None


def test_a_submission_parses_to_typed_terms() -> None:
    parsed = parse_claim_metadata(submit(kvclaims_duration_steps=9, kvclaims_owner="alice"))
    assert parsed == ClaimRequest(
        op=ClaimOp.submit,
        claim_id="c1",
        owner="alice",
        mode=ProtectionMode.hard_protected,
        footprint_blocks=4,
        duration_steps=9,
    )


def test_op_defaults_to_attach_without_terms() -> None:
    parsed = parse_claim_metadata({"kvclaims_claim_id": "c1"})
    assert isinstance(parsed, ClaimRequest) and parsed.op is ClaimOp.attach


@pytest.mark.parametrize(
    ("extra_args", "fragment"),
    [
        (submit(kvclaims_footprint_blocks="4"), "must be an integer"),
        (submit(kvclaims_footprint_blocks=True), "must be an integer, got bool"),
        (submit(kvclaims_footprint_blocks=4.0), "must be an integer, got float"),
        (submit(kvclaims_footprint_blocks=-1), "must be in 1.."),
        (submit(kvclaims_footprint_blocks=0), "must be in 1.."),
        (submit(kvclaims_footprint_blocks=MAX_CLAIM_NUMBER + 1), "must be in 1.."),
        (submit(kvclaims_mode="ultra"), "unknown protection mode"),
        (submit(kvclaims_mode=3), "unknown protection mode"),
        (submit(kvclaims_priority=1), "unknown claim metadata key"),
        (submit(kvclaims_op="steal"), "unknown kvclaims_op"),
        (submit(kvclaims_op="release"), "takes no claim terms"),
        (submit(kvclaims_op="extend"), "kvclaims_op extend takes only"),
        ({"kvclaims_op": "extend", "kvclaims_claim_id": "c"}, "kvclaims_op extend needs"),
        ({"kvclaims_op": "extend", "kvclaims_claim_id": "c", "kvclaims_duration_ms": 0}, "must be in 1.."),
        ({"kvclaims_op": "submit", "kvclaims_claim_id": "c"}, "needs kvclaims_mode"),
        ({"kvclaims_claim_id": "c", "kvclaims_mode": "hard_protected"}, "needs kvclaims_footprint_blocks"),
        (submit(kvclaims_predicate_blocks=2, kvclaims_predicate_tokens=3), "not both"),
        ({"kvclaims_mode": "hard_protected"}, "kvclaims_claim_id is required"),
        (submit(kvclaims_claim_id=""), "must be a string of 1..256"),
        (submit(kvclaims_claim_id=["a"]), "characters, got list"),
        (submit(kvclaims_owner=7), "kvclaims_owner must be a string"),
        (submit(kvclaims_duration_ms=0), "must be in 1.."),
        (submit(kvclaims_duration_ms=2.5), "must be an integer, got float"),
        (submit(kvclaims_max_duration_ms=0), "must be in 1.."),
        (submit(kvclaims_max_duration_steps=True), "must be an integer, got bool"),
        (submit(kvclaims_refresh_on_hit=1), "must be a boolean, got int 1"),
        (submit(kvclaims_refresh_on_hit="true"), "must be a boolean"),
        (submit(kvclaims_refresh_on_hit=2, kvclaims_raw_types="ok"), "must be a boolean, got int 2"),
    ],
)
def test_malformed_metadata_is_rejected_with_a_reason(extra_args: dict[str, object], fragment: str) -> None:
    parsed = parse_claim_metadata(extra_args)
    assert isinstance(parsed, MetadataRejection)
    assert fragment in parsed.reason


def test_a_megabyte_claim_id_is_rejected_without_being_echoed() -> None:
    parsed = parse_claim_metadata(submit(kvclaims_claim_id="x" * 1_000_000))
    assert isinstance(parsed, MetadataRejection)
    assert parsed.claim_id is None  # never reported under its own (hostile) id
    assert len(parsed.reason) < 200
    assert "1000000 characters" in parsed.reason


def test_rejections_keep_a_usable_claim_id_only() -> None:
    ok = parse_claim_metadata(submit(kvclaims_mode="nope"))
    assert isinstance(ok, MetadataRejection) and ok.claim_id == "c1"
    long_id = "y" * (MAX_IDENTIFIER_LENGTH + 1)
    bad = parse_claim_metadata(submit(kvclaims_claim_id=long_id, kvclaims_mode="nope"))
    assert isinstance(bad, MetadataRejection) and bad.claim_id is None


def test_every_documented_key_is_read() -> None:
    metadata = {
        "kvclaims_op": "submit",
        "kvclaims_claim_id": "c",
        "kvclaims_mode": "expiring",
        "kvclaims_footprint_blocks": 3,
        "kvclaims_predicate_tokens": 20,
        "kvclaims_duration_steps": 5,
        "kvclaims_duration_ms": 50,
        "kvclaims_refresh_on_hit": True,
        "kvclaims_max_duration_steps": 10,
        "kvclaims_max_duration_ms": 100,
        "kvclaims_object_id": "obj",
        "kvclaims_owner": "o",
        "kvclaims_owner_token": "t",
        "kvclaims_raw_types": "ok",
    }
    assert set(metadata) | {"kvclaims_predicate_blocks", "kvclaims_checkpoint_boundary_blocks"} == set(KEYS)
    parsed = parse_claim_metadata(metadata)
    assert isinstance(parsed, ClaimRequest)
    assert (parsed.max_duration_steps, parsed.max_duration_ms) == (10, 100)


def test_an_extension_takes_only_the_duration_it_grants() -> None:
    parsed = parse_claim_metadata(
        {"kvclaims_op": "extend", "kvclaims_claim_id": "c", "kvclaims_duration_ms": 50}
    )
    assert isinstance(parsed, ClaimRequest)
    assert (parsed.op, parsed.duration_ms, parsed.mode) == (ClaimOp.extend, 50, None)


def test_a_checkpoint_boundary_makes_a_two_key_claim_and_excludes_other_predicates() -> None:
    from kvclaims.spec.claims import CacheIdentity, HybridTwoKey
    from kvclaims.vllm_binding.metadata import claim_input

    parsed = parse_claim_metadata(submit(kvclaims_checkpoint_boundary_blocks=2))
    assert isinstance(parsed, ClaimRequest) and parsed.checkpoint_boundary_blocks == 2
    identity = CacheIdentity(
        cache_key_domain="d",
        model_id="m",
        token_hash_domain="t",
        namespace="",
        block_size=16,
        kv_format="bf16",
    )
    claim = claim_input(parsed, owner="o", cache_identity=identity)
    assert claim.materialization_predicate == HybridTwoKey(boundary_blocks=2)  # type: ignore[union-attr]
    both = parse_claim_metadata(submit(kvclaims_checkpoint_boundary_blocks=2, kvclaims_predicate_blocks=2))
    assert isinstance(both, MetadataRejection)
    assert "kvclaims_predicate_blocks and kvclaims_checkpoint_boundary_blocks" in both.reason
    typed = parse_claim_metadata(submit(kvclaims_checkpoint_boundary_blocks=True))
    assert isinstance(typed, MetadataRejection) and "must be an integer" in typed.reason


def test_the_boundary_marker_decides_and_a_typed_engine_requires_it() -> None:
    terms = {"kvclaims_claim_id": "c", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 1}
    marked = terms | {
        "kvclaims_raw_types": "kvclaims_footprint_blocks must be a JSON integer, got JSON boolean true"
    }
    rejection = parse_claim_metadata(marked)
    assert isinstance(rejection, MetadataRejection) and "JSON boolean true" in rejection.reason
    assert isinstance(parse_claim_metadata(terms), ClaimRequest)  # offline: no boundary
    unmarked = parse_claim_metadata(terms, typed=True)
    assert isinstance(unmarked, MetadataRejection) and "HTTP boundary" in unmarked.reason
    odd = parse_claim_metadata(terms | {"kvclaims_raw_types": 3})
    assert isinstance(odd, MetadataRejection) and odd.reason == "malformed marker"
    long = parse_claim_metadata(terms | {"kvclaims_raw_types": "x" * 10_000})
    assert isinstance(long, MetadataRejection) and len(long.reason) <= 200


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.dictionaries(st.sampled_from([*KEYS, "kvclaims_x", "other"]), _values, max_size=6))
def test_parsing_is_total(extra_args: dict[str, object]) -> None:
    """Any mapping of client values yields None, a typed request, or a bounded rejection."""
    parsed = parse_claim_metadata(extra_args)
    assert parsed is None or isinstance(parsed, ClaimRequest | MetadataRejection)
    if isinstance(parsed, MetadataRejection):
        assert len(parsed.reason) < 400
    if isinstance(parsed, ClaimRequest):
        assert 0 < len(parsed.claim_id) <= MAX_IDENTIFIER_LENGTH
        for number in (parsed.footprint_blocks, parsed.predicate_blocks, parsed.duration_steps):
            assert number is None or (type(number) is int and 1 <= number <= MAX_CLAIM_NUMBER)


def test_refresh_on_hit_is_a_boolean_offline_and_a_checked_one_over_http() -> None:
    """vLLM's request model turns JSON `true` in vllm_xargs into 1: only the HTTP boundary's
    marker (it saw the raw JSON boolean) lets a 1 through; offline only a bool counts."""
    terms = submit(kvclaims_mode="expiring", kvclaims_duration_ms=100, kvclaims_refresh_on_hit=True)
    offline = parse_claim_metadata(terms)
    assert isinstance(offline, ClaimRequest) and offline.refresh_on_hit is True and offline.duration_ms == 100
    coerced = terms | {"kvclaims_refresh_on_hit": 1}
    assert isinstance(parse_claim_metadata(coerced), MetadataRejection)
    checked = parse_claim_metadata(coerced | {"kvclaims_raw_types": "ok"})
    assert isinstance(checked, ClaimRequest) and checked.refresh_on_hit is True
    assert raw_type_problem({"kvclaims_refresh_on_hit": 1}) == (
        "kvclaims_refresh_on_hit must be a JSON boolean, got JSON number 1"
    )


def test_owner_defaults_only_without_a_key() -> None:
    request = ClaimRequest(op=ClaimOp.attach, claim_id="c")
    assert owner_of(request, default_owner="default", hmac_key=None) == "default"
    named = ClaimRequest(op=ClaimOp.attach, claim_id="c", owner="alice")
    assert owner_of(named, default_owner="default", hmac_key=None) == "alice"


def test_an_owner_key_requires_a_matching_token() -> None:
    key = "k" * 32
    missing = owner_of(
        ClaimRequest(op=ClaimOp.attach, claim_id="c", owner="alice"), default_owner="d", hmac_key=key
    )
    assert isinstance(missing, MetadataRejection)
    forged = ClaimRequest(op=ClaimOp.attach, claim_id="c", owner="alice", owner_token=owner_token(key, "bob"))
    assert isinstance(owner_of(forged, default_owner="d", hmac_key=key), MetadataRejection)
    good = ClaimRequest(op=ClaimOp.attach, claim_id="c", owner="alice", owner_token=owner_token(key, "alice"))
    assert owner_of(good, default_owner="d", hmac_key=key) == "alice"


def test_claim_input_validates_with_the_spec_models() -> None:
    parsed = parse_claim_metadata(submit(kvclaims_predicate_blocks=3))
    assert isinstance(parsed, ClaimRequest)
    claim = claim_input(parsed, owner="alice", cache_identity=IDENTITY)
    assert not isinstance(claim, MetadataRejection)
    assert claim.materialization_predicate.required_blocks(16) == 3
    assert claim.object_id == "c1" and claim.owner_scope == "alice"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"kvclaims_predicate_blocks": 5}, "predicate needs 5 leading blocks"),
        ({"kvclaims_predicate_tokens": 65}, "predicate needs 5 leading blocks"),
        ({"kvclaims_mode": "expiring"}, "expiring claim needs duration_steps"),
    ],
)
def test_claim_terms_that_the_spec_refuses(extra: dict[str, object], fragment: str) -> None:
    parsed = parse_claim_metadata(submit(**extra))
    assert isinstance(parsed, ClaimRequest)
    claim = claim_input(parsed, owner="alice", cache_identity=IDENTITY)
    assert isinstance(claim, MetadataRejection)
    assert fragment in claim.reason
