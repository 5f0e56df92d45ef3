"""SGLang KV events joined with an external claim registry, at telemetry_join depth.

`descriptors/evidence/runtime-kv-events/sglang-0.5.23.kvevents` was recorded by
`tools/sglang_capture.py`: SGLang 0.5.23's own `KVEventBatch` / `BlockStored` classes
serialized the batches and its own `ZmqEventPublisher` sent them to kvclaims's loopback
capture (SGLang's engine does not run on these machines; its event module does). The variants
below are encoded here in the same form; `test_the_hand_encoding_is_sglangs_own` shows that
form reproduces SGLang's bytes exactly. Every telemetry-join precondition has a case that
breaks it, and each fails closed.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support.kv_registry import REGISTRY_BROKEN, TOKENS, claim_observations, registry, write_registry

from kvclaims.refinement import ErrorClass, Outcome, check_trace
from kvclaims.refinement.abstractions.sglang_kv_events import SglangKvEventsSource
from kvclaims.refinement.evidence import evidence_items
from kvclaims.spec.tables import DEPTH_SUPPLIES
from kvclaims.spec.vocabulary import AdapterDepth, TelemetryJoinPrecondition

P = TelemetryJoinPrecondition
DATA = Path(__file__).resolve().parents[2] / "descriptors" / "evidence" / "runtime-kv-events"
CAPTURE = DATA / "sglang-0.5.23.kvevents"
REGISTRY = DATA / "claim-sys.registry.yaml"
H0, H1, OTHER = 0x1111, 0x2222, 0x3333


def stored(hashes: list[int], tokens: list[int], parent: int | None = None, **fields: Any) -> dict[str, Any]:
    """SGLang's `BlockStored` as its encoder writes it: `omit_defaults`, so the optional fields
    that are None are absent, `parent_block_hash` and `lora_id` (no default) always present."""
    event = {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": 4,
        "lora_id": None,
        "medium": "GPU",
    }
    return event | fields


def removed(hashes: list[int], medium: str = "GPU") -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def scenario() -> list[list[dict[str, Any]]]:
    """The batches of the recorded capture (see tools/sglang_capture.py)."""
    return [
        [stored([H0, H1], TOKENS)],
        [stored([OTHER], [7, 7, 7, 7])],
        [stored([H0, H1], TOKENS, medium="CPU_PINNED")],
        [removed([H1])],
        [stored([H1], TOKENS[4:], parent=H0)],
        [{"type": "AllBlocksCleared"}],
    ]


def capture(batches: list[list[dict[str, Any]]], seqs: list[int] | None = None, ranks: Any = 0) -> bytes:
    frames = []
    for index, events in enumerate(batches):
        seq = index if seqs is None else seqs[index]
        rank = ranks[index] if isinstance(ranks, list) else ranks
        payload = msgspec.msgpack.encode([1000.0 + index, events, rank])
        frames.append(struct.pack(">QI", seq, len(payload)) + payload)
    return b"".join(frames)


def run(tmp_path: Path, data: bytes, document: dict[str, Any] | None = None):
    trace = tmp_path / "capture.kvevents"
    trace.write_bytes(data)
    reg = REGISTRY if document is None else write_registry(tmp_path, document)
    return check_trace(trace, format="sglang-kv-events", registry=reg)


def test_the_hand_encoding_is_sglangs_own() -> None:
    assert capture(scenario()) == CAPTURE.read_bytes()


def test_the_recorded_capture_is_accepted_with_telemetry_join_evidence_only(tmp_path: Path) -> None:
    verdict = check_trace(CAPTURE, format="sglang-kv-events", registry=REGISTRY)
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.format == "sglang-kv-events"
    supplied = {
        item.obligation for item in evidence_items(verdict, CAPTURE, relative_to=tmp_path, registry=REGISTRY)
    }
    assert supplied == DEPTH_SUPPLIES[AdapterDepth.telemetry_join]


def test_the_claim_is_observed_where_the_scenario_puts_it() -> None:
    """Frame 1 stores both pages (materialized, 2 blocks); frame 3 is the host backup (another
    medium: no change); frame 4 evicts page 1 from the GPU (lost, 1 leading block); frame 5
    stores it again (materialized); frame 6 clears the cache (lost, 0)."""
    with CAPTURE.open("rb") as stream:
        assert claim_observations(SglangKvEventsSource(stream, registry=REGISTRY)) == [
            (1, "resident_claim_materialized", 2),
            (4, "resident_claim_lost", 1),
            (5, "resident_claim_materialized", 2),
            (6, "resident_claim_lost", 0),
        ]


BROKEN: dict[str, tuple[TelemetryJoinPrecondition, dict[str, Any], list[list[dict[str, Any]]] | None]] = {
    "post-hoc registration": (P.external_claim_registry, {"claim.registered_before_seq": 3}, None),
    "page size differs from the registry's block size": (
        P.fixed_cache_identity,
        {},
        [[stored([H0], TOKENS, block_size=8)]],
    ),
    "a partial last page": (P.fixed_cache_identity, {}, [[stored([H0], TOKENS[:2], block_size=2)]]),
    "adapter differs": (P.fixed_cache_identity, {}, [[stored([H0], TOKENS[:4], lora_name="lora-x")]]),
    "numeric adapter id without a name": (
        P.fixed_cache_identity,
        {},
        [[stored([H0], TOKENS[:4], lora_id=3)]],
    ),
    "salted joined block, unsalted registry": (
        P.fixed_cache_identity,
        {},
        [[stored([H0], TOKENS[:4], cache_salt="tenant-b")]],
    ),
    "unsalted joined block, salted registry": (
        P.fixed_cache_identity,
        {"identity.namespace": "tenant-b"},
        None,
    ),
    "gap in the publisher seq": (P.joinable_backend_events, {}, None),
    "token ids do not cover the blocks": (P.joinable_backend_events, {}, [[stored([H0], TOKENS[:3])]]),
    "a field SGLang does not write": (
        P.joinable_backend_events,
        {},
        [[stored([H0], TOKENS[:4], group_idx=0)]],
    ),
    "a medium outside StorageMedium": (
        P.joinable_backend_events,
        {},
        [[stored([H0], TOKENS[:4], medium="HBM")]],
    ),
    "bigram page (token pairs)": (
        P.joinable_backend_events,
        {},
        [[stored([H0], [[100, 101], [101, 102], [102, 103], [103, 104]])]],
    ),
    "hash stored twice with other tokens": (
        P.ambiguity_fails_closed,
        {},
        [[stored([H0], TOKENS[:4])], [stored([H0], [9, 9, 9, 9])]],
    ),
}
BROKEN |= {name: (p, overrides, None) for name, (p, overrides) in REGISTRY_BROKEN.items()}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_precondition_fails_closed_and_is_named(tmp_path: Path, name: str) -> None:
    precondition, overrides, batches = BROKEN[name]
    seqs = [0, 2, 3, 4, 5, 6] if name == "gap in the publisher seq" else None
    verdict = run(tmp_path, capture(batches or scenario(), seqs), registry(**overrides))
    assert verdict.outcome is Outcome.inconclusive, verdict.reason
    assert verdict.error_class is ErrorClass.undecidable
    assert precondition.value in verdict.reason


def test_a_salted_claim_joins_blocks_of_its_own_salt(tmp_path: Path) -> None:
    salted = [[stored([H0, H1], TOKENS, cache_salt="tenant-b")]]
    verdict = run(tmp_path, capture(salted), registry(**{"identity.namespace": "tenant-b"}))
    assert verdict.outcome is Outcome.accepted, verdict.reason


def test_interleaved_attention_dp_ranks_fail_closed(tmp_path: Path) -> None:
    verdict = run(tmp_path, capture(scenario(), ranks=[0, 1, 0, 1, 0, 1]), registry())
    assert verdict.outcome is Outcome.inconclusive and P.ambiguity_fails_closed.value in verdict.reason


def test_a_decreasing_publisher_seq_is_invalid(tmp_path: Path) -> None:
    verdict = run(tmp_path, capture(scenario()[:2], seqs=[3, 2]))
    assert verdict.outcome is Outcome.invalid and verdict.error_class is ErrorClass.ordering


def test_a_truncated_frame_is_invalid(tmp_path: Path) -> None:
    assert run(tmp_path, CAPTURE.read_bytes()[:-3]).outcome is Outcome.invalid


def test_auto_detection_reads_sglang_frames_as_vllms_and_refuses_sglang_fields(tmp_path: Path) -> None:
    """The wire forms coincide, so `auto` takes the frames for vLLM's; a store carrying SGLang's
    cache_salt then fails closed instead of losing the salt."""
    trace = tmp_path / "capture.kvevents"
    trace.write_bytes(capture([[stored([H0], TOKENS[:4], cache_salt="tenant-b")]]))
    verdict = check_trace(trace, registry=REGISTRY)
    assert verdict.format == "vllm-kv-events"
    assert verdict.outcome is Outcome.inconclusive and "sglang-kv-events" in verdict.reason
