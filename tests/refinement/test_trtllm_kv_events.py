"""TensorRT-LLM KV cache events joined with an external claim registry, at telemetry_join depth.

TensorRT-LLM neither installs nor runs on these CPU machines and its serializer works on its
C++ bindings' objects, so `descriptors/evidence/runtime-kv-events/trtllm-serializer.jsonl` is
hand-built in the exact form `KVCacheEventSerializer.to_json_str` returns (tensorrt_llm/_utils.py, commit
ed53795b33fc139493f762a1c6c53f691cf52d38), one event a line. Every telemetry-join
precondition has a case that breaks it, and each fails closed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.kv_registry import REGISTRY_BROKEN, TOKENS, claim_observations, registry, write_registry

from kvclaims.refinement import ErrorClass, Outcome, check_trace
from kvclaims.refinement.abstractions.trtllm_kv_events import TrtllmKvEventsSource
from kvclaims.refinement.evidence import evidence_items
from kvclaims.spec.tables import DEPTH_SUPPLIES
from kvclaims.spec.vocabulary import AdapterDepth, TelemetryJoinPrecondition

P = TelemetryJoinPrecondition
DATA = Path(__file__).resolve().parents[2] / "descriptors" / "evidence" / "runtime-kv-events"
CAPTURE = DATA / "trtllm-serializer.jsonl"
REGISTRY = DATA / "claim-sys.registry.yaml"
B0, B1 = 5023410988123, 7781234001


def events() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CAPTURE.read_text().splitlines()]


def block(block_hash: int, tokens: list[int], level: int = 0, extra: int = 0) -> dict[str, Any]:
    return {
        "type": "stored_block",
        "block_hash": block_hash,
        "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": extra} for t in tokens],
        "cache_level": level,
        "priority": 35,
    }


def stored(*blocks: dict[str, Any], parent: int | None = None) -> dict[str, Any]:
    return {"type": "stored", "parent_hash": parent, "blocks": list(blocks)}


def _diff(new: int, old: int) -> dict[str, Any]:
    return {"type": "event_diff", "new_value": new, "old_value": old}


def capture(datas: list[dict[str, Any]], **envelope: Any) -> list[dict[str, Any]]:
    return [{"event_id": i, "data": d, "window_size": 4096, **envelope} for i, d in enumerate(datas)]


def run(tmp_path: Path, lines: list[dict[str, Any]] | bytes, document: dict[str, Any] | None = None):
    trace = tmp_path / "capture.jsonl"
    raw = lines if isinstance(lines, bytes) else b"".join(json.dumps(e).encode() + b"\n" for e in lines)
    trace.write_bytes(raw)
    reg = REGISTRY if document is None else write_registry(tmp_path, document)
    return check_trace(trace, registry=reg)


def test_the_capture_is_detected_and_accepted_with_telemetry_join_evidence_only(tmp_path: Path) -> None:
    verdict = check_trace(CAPTURE, registry=REGISTRY)
    assert verdict.format == "trtllm-kv-events"
    assert verdict.outcome is Outcome.accepted, verdict.reason
    supplied = {
        item.obligation for item in evidence_items(verdict, CAPTURE, relative_to=tmp_path, registry=REGISTRY)
    }
    assert supplied == DEPTH_SUPPLIES[AdapterDepth.telemetry_join]


def test_cache_level_updates_move_the_claims_block_between_tiers() -> None:
    """Line 2 stores both blocks on the primary level (materialized); line 4 moves block 1 to
    the secondary level (lost, 1 block); line 5 brings it back (materialized); line 6 is a
    priority change (nothing); line 7 removes block 1 (lost)."""
    with CAPTURE.open("rb") as stream:
        assert claim_observations(TrtllmKvEventsSource(stream, registry=REGISTRY)) == [
            (2, "resident_claim_materialized", 2),
            (4, "resident_claim_lost", 1),
            (5, "resident_claim_materialized", 2),
            (7, "resident_claim_lost", 1),
        ]


def _with_gap() -> list[dict[str, Any]]:
    lines = events()
    del lines[2]  # the buffer overflowed and discarded event 2
    return lines


def _with(index: int, **changes: Any) -> list[dict[str, Any]]:
    lines = events()
    lines[index] = lines[index] | changes
    return lines


BROKEN: dict[str, tuple[TelemetryJoinPrecondition, dict[str, Any], list[dict[str, Any]] | None]] = {
    "post-hoc registration": (P.external_claim_registry, {"claim.registered_before_seq": 2}, None),
    "tokens per block differ from the registry's": (
        P.fixed_cache_identity,
        {},
        capture([stored(block(B0, TOKENS))]),
    ),
    "an extra-id token in a joined block": (
        P.fixed_cache_identity,
        {},
        capture([stored(block(B0, TOKENS[:4], extra=9))]),
    ),
    "registry names an adapter the serializer cannot show": (
        P.fixed_cache_identity,
        {"identity.adapter_identity": "lora-x"},
        None,
    ),
    "registry names a salt the serializer cannot show": (
        P.fixed_cache_identity,
        {"identity.namespace": "t"},
        None,
    ),
    "gap in event_id (discarded events)": (P.joinable_backend_events, {}, _with_gap()),
    "a field the serializer does not write": (P.joinable_backend_events, {}, _with(1, lora_id=3)),
    "a type the serializer does not write": (
        P.joinable_backend_events,
        {},
        _with(0, data={"type": "evicted", "block_hashes": [1]}),
    ),
    "a cache level beyond secondary": (
        P.joinable_backend_events,
        {},
        capture([stored(block(B0, TOKENS[:4], level=2))]),
    ),
    "hash stored twice with other tokens": (
        P.ambiguity_fails_closed,
        {},
        capture([stored(block(B0, TOKENS[:4])), stored(block(B0, [9, 9, 9, 9]))]),
    ),
    "a move from a tier the block is not on": (
        P.ambiguity_fails_closed,
        {},
        capture(
            [
                stored(block(B0, TOKENS[:4], level=1)),
                {"type": "updated", "block_hash": B0, "cache_level": _diff(1, 0), "priority": None},
            ]
        ),
    ),
    "two window sizes": (P.ambiguity_fails_closed, {}, _with(3, window_size=512)),
    "a rank on some events only": (P.ambiguity_fails_closed, {}, _with(4, attention_dp_rank=0)),
    "two attention-DP ranks": (
        P.ambiguity_fails_closed,
        {},
        [e | {"attention_dp_rank": e["event_id"] % 2} for e in events()],
    ),
}
BROKEN |= {name: (p, overrides, None) for name, (p, overrides) in REGISTRY_BROKEN.items()}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_precondition_fails_closed_and_is_named(tmp_path: Path, name: str) -> None:
    precondition, overrides, lines = BROKEN[name]
    verdict = run(tmp_path, lines or events(), registry(**overrides))
    assert verdict.outcome is Outcome.inconclusive, verdict.reason
    assert verdict.error_class is ErrorClass.undecidable
    assert precondition.value in verdict.reason


def test_a_repeated_event_id_is_invalid(tmp_path: Path) -> None:
    """An event_id that does not increase is out of order (a skip forward is a gap, above)."""
    verdict = run(tmp_path, _with(2, event_id=1))
    assert verdict.outcome is Outcome.invalid and verdict.error_class is ErrorClass.ordering


def test_a_duplicate_key_is_invalid(tmp_path: Path) -> None:
    raw = CAPTURE.read_bytes().replace(
        b'"window_size": 4096}', b'"window_size": 4096, "window_size": 4096}', 1
    )
    assert run(tmp_path, raw).outcome is Outcome.invalid


def test_a_truncated_last_line_is_invalid(tmp_path: Path) -> None:
    assert run(tmp_path, CAPTURE.read_bytes()[:-20]).outcome is Outcome.invalid
