"""vLLM `BlockStored` events as vLLM's ZMQ publisher encodes them (maps tagged by `type`), for
the KV-event readers' tests."""

from __future__ import annotations

from typing import Any

from support.kv_registry import BLOCK


def stored(
    hashes: list[bytes], tokens: list[int], parent: bytes | None = None, **fields: Any
) -> dict[str, Any]:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": BLOCK,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        **fields,
    }
