"""A claim registry (`kvclaims_registry: 1`) for the KV-event readers' tests: one claim over two
blocks of four tokens (ids 100..107), block size 4, GPU medium, registered before batch 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvclaims.refinement.decoding import EVENT_NAME
from kvclaims.spec.vocabulary import TelemetryJoinPrecondition

BLOCK = 4
TOKENS = list(range(100, 108))  # two blocks of four tokens


def registry(**overrides: Any) -> dict[str, Any]:
    """The registry document; `claim.FIELD=value` overrides a field of the claim, `FIELD=value`
    a field of the document, `identity.FIELD=value` a field of the cache identity."""
    claim = {
        "claim_id": "claim:sys",
        "owner_scope": "tenant-a",
        "object_id": "prefix:sys",
        "mode": "best_effort",
        "predicate": {"kind": "leading_prefix_at_least", "blocks": 2},
        "footprint_blocks": 2,
        "registered_before_seq": 0,
        "token_map": {"tokenizer": "tok@rev1", "token_ids": TOKENS},
    }
    identity = {
        "cache_key_domain": "vllm-prefix",
        "model_id": "tiny@rev1",
        "token_hash_domain": "sha256_cbor",
        "block_size": BLOCK,
        "kv_format": "auto",
    }
    document = {
        "kvclaims_registry": 1,
        "observation_point": "end of each KVEventBatch (ZMQ publisher)",
        "medium": "GPU",
        "cache_identity": identity,
        "request_ids": ["req-1"],
        "claims": [claim],
    }
    for key, value in overrides.items():
        if key.startswith("claim."):
            claim[key.removeprefix("claim.")] = value
        elif key.startswith("identity."):
            identity[key.removeprefix("identity.")] = value
        else:
            document[key] = value
    return document


def write_registry(directory: Path, document: dict[str, Any]) -> Path:
    path = directory / "registry.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


REGISTRY_BROKEN: dict[str, tuple[TelemetryJoinPrecondition, dict[str, Any]]] = {
    "claim id equals a request id": (
        TelemetryJoinPrecondition.stable_claim_id,
        {"request_ids": ["claim:sys"]},
    ),
    "predicate longer than footprint": (
        TelemetryJoinPrecondition.fixed_materialization_predicate,
        {"claim.predicate": {"kind": "leading_prefix_at_least", "blocks": 3}},
    ),
    "token map too short": (
        TelemetryJoinPrecondition.deterministic_request_token_map,
        {"claim.token_map": {"tokenizer": "t", "token_ids": [1]}},
    ),
}
"""Registries that break a precondition whatever the events (every reader must refuse them):
name -> (the precondition, the `registry()` overrides)."""


def claim_observations(source: Any) -> list[tuple[int, str, int]]:
    """`(line, event, leading_blocks)` of each materialization and loss a source's join yields."""
    observed = []
    for line, _, event in source.events():
        name = EVENT_NAME[type(event)]
        if name in ("resident_claim_materialized", "resident_claim_lost"):
            observed.append((line, name, event.leading_blocks))
    return observed
