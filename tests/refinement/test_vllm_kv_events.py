"""vLLM KV events joined with an external claim registry, at telemetry_join depth.

Captures are built the way vLLM 0.32's ZMQ publisher encodes them: a `KVEventBatch` map
(`ts`, `events`, `data_parallel_rank`) whose events are maps tagged by `type`, hashes as bytes,
framed here as `seq | length | payload`. Every one of the nine telemetry-join preconditions has a
case that breaks it, and each fails closed.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from support.kv_registry import BLOCK, REGISTRY_BROKEN, TOKENS, registry, write_registry
from support.vllm_events import stored

from kvclaims.refinement import ErrorClass, Outcome, check_trace
from kvclaims.refinement.evidence import evidence_items
from kvclaims.spec.errors import InputError
from kvclaims.spec.tables import DEPTH_SUPPLIES
from kvclaims.spec.vocabulary import AdapterDepth, TelemetryJoinPrecondition

P = TelemetryJoinPrecondition


def removed(hashes: list[bytes]) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}


def batches() -> list[tuple[int, list[dict[str, Any]]]]:
    return [
        (0, [stored([b"\x01" * 8, b"\x02" * 8], TOKENS)]),
        (1, [stored([b"\x09" * 8], [1, 2, 3, 4])]),
        (2, [removed([b"\x02" * 8])]),
        (3, [{"type": "AllBlocksCleared"}]),
    ]


def msgpack_capture(items: list[tuple[int, list[dict[str, Any]]]], rank: int | list[int] = 0) -> bytes:
    frames = []
    for index, (seq, events) in enumerate(items):
        dp = rank[index] if isinstance(rank, list) else rank
        payload = msgspec.msgpack.encode({"ts": 1000.0 + seq, "events": events, "data_parallel_rank": dp})
        frames.append(struct.pack(">QI", seq, len(payload)) + payload)
    return b"".join(frames)


def json_capture(items: list[tuple[int, list[dict[str, Any]]]]) -> bytes:
    def hexed(event: dict[str, Any]) -> dict[str, Any]:
        return {
            k: ([h.hex() for h in v] if k == "block_hashes" else (v.hex() if isinstance(v, bytes) else v))
            for k, v in event.items()
        }

    lines = [{"seq": seq, "ts": 1000.0 + seq, "events": [hexed(e) for e in events]} for seq, events in items]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def run(tmp_path: Path, capture: bytes, document: dict[str, Any], suffix: str = ".kvevents"):
    trace = tmp_path / f"capture{suffix}"
    trace.write_bytes(capture)
    return check_trace(trace, registry=write_registry(tmp_path, document))


@pytest.mark.parametrize("form", ["msgpack", "json"])
def test_a_joined_capture_is_accepted_and_evidences_only_telemetry_join_obligations(
    tmp_path: Path, form: str
) -> None:
    suffix = ".kvevents" if form == "msgpack" else ".jsonl"
    capture = msgpack_capture(batches()) if form == "msgpack" else json_capture(batches())
    verdict = run(tmp_path, capture, registry(), suffix)
    assert verdict.format == "vllm-kv-events"
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert any("telemetry_join preconditions hold" in note for note in verdict.notes)
    trace, joined = tmp_path / f"capture{suffix}", tmp_path / "registry.yaml"
    items = evidence_items(verdict, trace, relative_to=tmp_path, registry=joined)
    supplied = {item.obligation for item in items}
    assert supplied == DEPTH_SUPPLIES[AdapterDepth.telemetry_join]  # I, P, M, T: no A, no L


def test_loss_below_the_predicate_is_reported_as_loss_never_harm(tmp_path: Path) -> None:
    verdict = run(tmp_path, msgpack_capture(batches()), registry())
    assert "harm_reported" not in {w.kind.value for w in verdict.witnesses}


BROKEN: dict[
    str, tuple[TelemetryJoinPrecondition, dict[str, Any], list[tuple[int, list[dict[str, Any]]]] | None]
] = {
    "post-hoc registration": (P.external_claim_registry, {"claim.registered_before_seq": 5}, None),
    "block size differs": (
        P.fixed_cache_identity,
        {},
        [(0, [stored([b"\x01" * 8], TOKENS[:8], block_size=8)])],
    ),
    "adapter differs": (
        P.fixed_cache_identity,
        {},
        [(0, [stored([b"\x01" * 8], TOKENS[:4], lora_name="lora-x")])],
    ),
    "salted block, unsalted registry": (
        P.fixed_cache_identity,
        {},
        [(0, [stored([b"\x01" * 8], TOKENS[:4], extra_keys=[["salt-1"]])])],
    ),
    "gap in the publisher seq": (P.joinable_backend_events, {}, [(0, []), (2, [])]),
    "token ids do not cover the blocks": (
        P.joinable_backend_events,
        {},
        [(0, [stored([b"\x01" * 8], TOKENS[:3])])],
    ),
    "hash stored twice with other tokens": (
        P.ambiguity_fails_closed,
        {},
        [(0, [stored([b"\x01" * 8], TOKENS[:4])]), (1, [stored([b"\x01" * 8], [9, 9, 9, 9])])],
    ),
}
BROKEN |= {name: (p, overrides, None) for name, (p, overrides) in REGISTRY_BROKEN.items()}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_precondition_fails_closed_and_is_named(tmp_path: Path, name: str) -> None:
    precondition, overrides, items = BROKEN[name]
    verdict = run(tmp_path, msgpack_capture(items or batches()), registry(**overrides))
    assert verdict.outcome is Outcome.inconclusive, verdict.reason
    assert verdict.error_class is ErrorClass.undecidable
    assert precondition.value in verdict.reason


def test_duplicate_owner_and_duplicate_claim_id_fail_closed(tmp_path: Path) -> None:
    document = registry()
    twin = dict(document["claims"][0], claim_id="claim:twin", object_id="prefix:twin")
    document["claims"].append(twin)
    verdict = run(tmp_path, msgpack_capture(batches()), document)
    assert verdict.outcome is Outcome.inconclusive and P.ambiguity_fails_closed.value in verdict.reason
    document["claims"][1] = dict(document["claims"][0])
    verdict = run(tmp_path, msgpack_capture(batches()), document)
    assert verdict.outcome is Outcome.inconclusive and P.stable_claim_id.value in verdict.reason


def test_one_object_with_two_token_maps_fails_closed(tmp_path: Path) -> None:
    document = registry()
    other = dict(
        document["claims"][0], claim_id="claim:b", token_map={"tokenizer": "tok", "token_ids": list(range(8))}
    )
    document["claims"].append(other)
    verdict = run(tmp_path, msgpack_capture(batches()), document)
    assert P.reusable_object_id.value in verdict.reason


def test_interleaved_data_parallel_ranks_fail_closed(tmp_path: Path) -> None:
    verdict = run(tmp_path, msgpack_capture(batches(), rank=[0, 1, 0, 1]), registry())
    assert verdict.outcome is Outcome.inconclusive and P.ambiguity_fails_closed.value in verdict.reason


def test_a_decreasing_publisher_seq_is_invalid(tmp_path: Path) -> None:
    verdict = run(tmp_path, msgpack_capture([(3, []), (2, [])]), registry())
    assert verdict.outcome is Outcome.invalid and verdict.error_class is ErrorClass.ordering


def test_a_truncated_frame_is_invalid(tmp_path: Path) -> None:
    assert run(tmp_path, msgpack_capture(batches())[:-3], registry()).outcome is Outcome.invalid


@pytest.mark.parametrize(
    ("override", "field"),
    [({"claim.mode": "hard_protected"}, "claims.0"), ({"observation_point": ""}, "observation_point")],
)
def test_a_registry_that_asks_for_the_impossible_is_invalid_input(
    tmp_path: Path, override: dict, field: str
) -> None:
    with pytest.raises(InputError) as error:
        run(tmp_path, msgpack_capture(batches()), registry(**override))
    assert any((p.field or "").startswith(field) for p in error.value.problems)


def test_kv_events_without_a_registry_are_inconclusive_never_accepted(tmp_path: Path) -> None:
    trace = tmp_path / "capture.kvevents"
    trace.write_bytes(msgpack_capture(batches()))
    verdict = check_trace(trace)
    assert verdict.outcome is Outcome.inconclusive and "needs a claim registry" in verdict.reason


def test_a_registry_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    reg = tmp_path / "registry.yaml"
    reg.write_text(yaml.safe_dump(registry()) + "medium: CPU\n")
    trace = tmp_path / "capture.kvevents"
    trace.write_bytes(msgpack_capture(batches()))
    with pytest.raises(InputError, match="duplicate key"):
        check_trace(trace, registry=reg)


def array_capture(items: list[tuple[int, list[dict[str, Any]]]]) -> bytes:
    """The publisher's real wire form: vLLM 0.32's `EventBatch` is `array_like`, so a batch is
    the msgpack array `[ts, events, data_parallel_rank]` (found on a real engine-lane capture)."""
    frames = []
    for seq, events in items:
        payload = msgspec.msgpack.encode([1000.0 + seq, events, 0])
        frames.append(struct.pack(">QI", seq, len(payload)) + payload)
    return b"".join(frames)


def test_the_publishers_array_like_batches_read_like_the_map_form(tmp_path: Path) -> None:
    as_maps = run(tmp_path, msgpack_capture(batches()), registry())
    as_arrays = run(tmp_path, array_capture(batches()), registry())
    assert as_arrays.outcome is Outcome.accepted, as_arrays.reason
    assert (as_arrays.events, as_arrays.witnesses) == (as_maps.events, as_maps.witnesses)


def test_a_block_stored_after_removals_never_takes_a_live_blocks_id(tmp_path: Path) -> None:
    """Two unrelated blocks come, one goes, then the claim's blocks arrive; the other unrelated
    block goes, the claim's tail goes and comes back. With ids reused after a removal the claim's
    block 0 took the id of a live unrelated block, lost it when that block went, and the join's
    re-materialization was rejected as unconfirmed (seen on a real engine-lane capture)."""
    x, y = b"\x0a" * 8, b"\x0b" * 8
    a0, a1 = b"\x01" * 8, b"\x02" * 8
    items = [
        (0, [stored([x], [5, 6, 7, 8]), stored([y], [9, 9, 9, 9])]),
        (1, [removed([x])]),
        (2, [stored([a0, a1], TOKENS)]),
        (3, [removed([y])]),
        (4, [removed([a1])]),
        (5, [stored([a1], TOKENS[BLOCK:], parent=a0)]),
    ]
    verdict = run(tmp_path, array_capture(items), registry())
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert {w.kind.value for w in verdict.witnesses} >= {"claim_materialized", "claim_scoped_blocks"}


@pytest.mark.parametrize(("other", "outcome"), [("int:5", Outcome.accepted), (5, Outcome.inconclusive)])
def test_hashes_of_different_domains_are_different_blocks(
    tmp_path: Path, other: Any, outcome: Outcome
) -> None:
    """Issue 12 item 13: the integer 5 and the string "int:5" print alike but are different
    blocks, so storing both with different content is no ambiguity; the same integer twice
    with different content is (the twin, same length)."""
    items = [
        (0, [stored([5], [5, 6, 7, 8]), stored([other], [9, 9, 9, 9])]),
        (1, [stored([b"\x01" * 8, b"\x02" * 8], TOKENS)]),
    ]
    verdict = run(tmp_path, msgpack_capture(items), registry())
    assert verdict.outcome is outcome, verdict.reason


def test_a_first_frame_longer_than_the_detection_head_is_still_a_msgpack_capture(tmp_path: Path) -> None:
    """Detection reads 64 KiB; a first batch larger than that (a long prompt's BlockStored, or
    a live stream delivering it) must be read as frames, not fall through to JSON."""
    blocks = 5000
    big = stored([(10 + i).to_bytes(8, "big") for i in range(blocks)], [1000] * (blocks * BLOCK))
    capture = msgpack_capture([(0, [big]), *batches()[1:]])
    assert struct.unpack_from(">QI", capture)[1] > 1 << 16  # the first frame outgrows the head
    claimed = stored([b"\x01" * 8, b"\x02" * 8], TOKENS)
    verdict = run(tmp_path, msgpack_capture([(0, [big]), (1, [claimed])]), registry())
    assert verdict.outcome is Outcome.accepted and verdict.events == 2, verdict.reason  # batches
    cut = run(tmp_path, capture[: (1 << 16) + 100], registry())  # inside the first frame
    assert cut.outcome is Outcome.invalid and "truncated frame" in cut.reason
