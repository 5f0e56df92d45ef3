"""Per-core rate of the runtimes' KV-event readers (the registry join), against trace v1.

    .venv/bin/python bench/kv_event_join_rate.py [--events 100000] [--claims 64] [--repeat 3]

Writes one synthetic capture per reader in its runtime's wire form (vLLM and SGLang: msgpack
frames of `[ts, events, rank]`; TensorRT-LLM: one serialized event a line) and a registry of
--claims claims of 8 blocks of 16 tokens, all from one seeded workload: a claim's prefix stored
again (its blocks keep their hashes), an unrelated chain stored, or a live block removed. Times
`check_trace` on each (best of --repeat, one process) and prints the source records and the
trace v1 steps per second, with a generated trace v1 of about the same step count for scale.
Every capture must be accepted. Nothing is asserted about speed.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import yaml

from kvclaims.refinement import check_trace
from kvclaims.refinement.testing import generate_valid_trace

BLOCK = 16
CLAIM_BLOCKS = 8

Op = tuple[str, list[tuple[int, list[int]]], int | None]
"""("store", [(hash, tokens)...], parent) or ("remove", [(hash, [])...], None)."""


def workload(events: int, claims: int, seed: int) -> list[Op]:
    rng = random.Random(seed)
    live: dict[int, None] = {}
    next_hash = 10**9
    ops: list[Op] = []
    while len(ops) < events:
        roll = rng.random()
        if roll < 0.3:
            c = rng.randrange(claims)
            blocks = [
                (c * 1000 + j + 1, claim_tokens(c)[j * BLOCK : (j + 1) * BLOCK]) for j in range(CLAIM_BLOCKS)
            ]
            ops.append(("store", blocks, None))
        elif roll < 0.6 or not live:
            length = rng.randrange(1, 5)
            blocks = []
            for _ in range(length):
                next_hash += 1
                blocks.append((next_hash, [rng.randrange(50_000, 60_000) for _ in range(BLOCK)]))
            ops.append(("store", blocks, None))
        else:
            victim = rng.choice(list(live))
            ops.append(("remove", [(victim, [])], None))
        kind, blocks, _ = ops[-1]
        for h, _ in blocks:
            if kind == "store":
                live[h] = None
            else:
                live.pop(h, None)
    return ops


def claim_tokens(c: int) -> list[int]:
    return [c * 10_000 + i for i in range(CLAIM_BLOCKS * BLOCK)]


def registry(claims: int) -> dict[str, Any]:
    return {
        "kvclaims_registry": 1,
        "observation_point": "end of each batch / event",
        "medium": "GPU",
        "cache_identity": {
            "cache_key_domain": "bench",
            "model_id": "bench@1",
            "token_hash_domain": "bench",
            "block_size": BLOCK,
            "kv_format": "auto",
        },
        "claims": [
            {
                "claim_id": f"claim:{c}",
                "owner_scope": "bench",
                "object_id": f"prefix:{c}",
                "mode": "best_effort",
                "predicate": {"kind": "leading_prefix_at_least", "blocks": CLAIM_BLOCKS},
                "footprint_blocks": CLAIM_BLOCKS,
                "registered_before_seq": 0,
                "token_map": {"tokenizer": "bench", "token_ids": claim_tokens(c)},
            }
            for c in range(claims)
        ],
    }


def zmq_capture(ops: list[Op], removed_extra: dict[str, Any]) -> bytes:
    """vLLM's and SGLang's shared wire form, one batch per operation."""
    frames = []
    for seq, (kind, blocks, _) in enumerate(ops):
        hashes = [h for h, _ in blocks]
        if kind == "store":
            event = {
                "type": "BlockStored",
                "block_hashes": hashes,
                "parent_block_hash": None,
                "token_ids": [t for _, tokens in blocks for t in tokens],
                "block_size": BLOCK,
                "lora_id": None,
                "medium": "GPU",
            }
        else:
            event = {"type": "BlockRemoved", "block_hashes": hashes, **removed_extra}
        payload = msgspec.msgpack.encode([float(seq), [event], 0])
        frames.append(struct.pack(">QI", seq, len(payload)) + payload)
    return b"".join(frames)


def trtllm_capture(ops: list[Op]) -> bytes:
    lines = []
    for event_id, (kind, blocks, _) in enumerate(ops):
        if kind == "store":
            data: dict[str, Any] = {
                "type": "stored",
                "parent_hash": None,
                "blocks": [
                    {
                        "type": "stored_block",
                        "block_hash": h,
                        "tokens": [
                            {"type": "unique_token", "token_id": t, "token_extra_id": 0} for t in tokens
                        ],
                        "cache_level": 0,
                        "priority": 35,
                    }
                    for h, tokens in blocks
                ],
            }
        else:
            data = {"type": "removed", "block_hashes": [h for h, _ in blocks]}
        lines.append(json.dumps({"event_id": event_id, "data": data, "window_size": 4096}))
    return ("\n".join(lines) + "\n").encode()


def _token(token_id: int) -> dict[str, Any]:
    return {"type": "unique_token", "token_id": token_id, "token_extra_id": 0}


def best(path: Path, repeat: int, **options: Any) -> tuple[float, Any]:
    seconds, verdict = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        verdict = check_trace(path, **options)
        seconds = min(seconds, time.perf_counter() - started)
    return seconds, verdict


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000, help="source records per capture")
    parser.add_argument("--claims", type=int, default=64, help="registered claims")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each capture")
    args = parser.parse_args()
    ops = workload(args.events, args.claims, seed=0)
    with tempfile.TemporaryDirectory(prefix="kvclaims-join-rate-") as scratch:
        root = Path(scratch)
        reg = root / "registry.yaml"
        reg.write_text(yaml.safe_dump(registry(args.claims)))
        captures = {
            "vllm-kv-events": (root / "vllm.kvevents", zmq_capture(ops, {"medium": "GPU"})),
            "sglang-kv-events": (root / "sglang.kvevents", zmq_capture(ops, {"medium": "GPU"})),
            "trtllm-kv-events": (root / "trtllm.jsonl", trtllm_capture(ops)),
        }
        steps = 0
        for fmt, (path, data) in captures.items():
            path.write_bytes(data)
            seconds, verdict = best(path, args.repeat, format=fmt, registry=reg)
            if verdict.outcome != "accepted":
                raise SystemExit(f"{fmt}: {verdict.outcome}: {verdict.reason}")
            steps = verdict.steps
            print(
                f"{fmt}: {verdict.events} records, {verdict.steps} steps in {seconds:.3f} s: "
                f"{verdict.events / seconds:,.0f} records/s, {verdict.steps / seconds:,.0f} steps/s"
            )
        v1 = root / "generated.ndjson"
        with v1.open("wb") as out:
            written = generate_valid_trace(out, steps, seed=0)
        seconds, verdict = best(v1, args.repeat)
        print(
            f"kvclaims-v1 (generated): {written} events in {seconds:.3f} s: {written / seconds:,.0f} events/s"
        )


if __name__ == "__main__":
    main()
