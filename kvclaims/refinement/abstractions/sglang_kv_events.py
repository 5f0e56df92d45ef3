"""SGLang's KV cache events, joined with an external claim registry (telemetry_join depth).

Written from SGLang 0.5.23 (the release on the package index): `python/sglang/srt/
disaggregation/kv_events.py` defines the wire types and `python/sglang/srt/mem_cache/events.py`
(`KVEventRecorder.record_store / record_remove / record_all_cleared`) emits them.

- `EventBatch` is `array_like`: a batch is the msgpack array `[ts, events, attn_dp_rank]`.
- `KVCacheEvent` is a tagged map (`type` = class name, `omit_defaults`):
  `BlockStored{block_hashes: list[int], parent_block_hash: int | None, token_ids: list[int],
  block_size: int, lora_id: int | None, medium, cache_salt, session_id, lora_name}` (the last
  four optional, omitted when None), `BlockRemoved{block_hashes, medium}`, `AllBlocksCleared`.
- `medium` is a `StorageMedium` value: `GPU`, `CPU_PINNED`, `DISK`, `EXTERNAL` (absent: GPU).
- `ZmqEventPublisher` sends `(topic, seq as 8 bytes big-endian, payload)`, seq from 0 by one.
- `record_store` emits one store per page (coalesced while each continues the last's chain),
  `block_size = len(page_tokens)`; a bigram page publishes token pairs.

Captures are kvclaims's msgpack frames (`kv_event_join.FRAME_HEADER`) around the publisher's
payload bytes, as `kvclaims.lab.kv_events.KvEventCapture` writes them. The wire form is the
same as vLLM's, so `--format auto` reads such a frame as vLLM's: name this format.

Mapping, and where it fails closed:

- a field outside the list above, a medium outside `StorageMedium`, or token pairs (bigram
  pages) are not a batch this reader knows: joinable_backend_events;
- a store whose `block_size` is not the registry's (a page-size mismatch, or a partial last
  page) fails fixed_cache_identity; so does a store whose adapter (`lora_name`, else
  `lora_id`) is not the registry's, and a joined block whose `cache_salt` is not the
  registry's namespace (`""` = no salt);
- `AllBlocksCleared` clears every medium (the reset that emits it drops the radix tree; the
  stream does not say which tiers went with it, so nothing stays counted as present);
- `session_id` is attribution only (SGLang's comment: blocks may be shared): never a claim.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import msgspec

from kvclaims.refinement.abstractions.kv_event_join import (
    Batch,
    Cleared,
    KvEventStream,
    P,
    Record,
    Removed,
    hash_text,
    read_frames,
    undecidable,
    wire_medium,
    wire_stored,
)

FORMAT = "sglang-kv-events"

_Medium = Literal["GPU", "CPU_PINNED", "DISK", "EXTERNAL"]


class _BlockStored(msgspec.Struct, tag="BlockStored", tag_field="type", forbid_unknown_fields=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: _Medium | None = None
    cache_salt: str | None = None
    session_id: str | None = None
    lora_name: str | None = None


class _BlockRemoved(msgspec.Struct, tag="BlockRemoved", tag_field="type", forbid_unknown_fields=True):
    block_hashes: list[int]
    medium: _Medium | None = None


class _AllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", tag_field="type", forbid_unknown_fields=True):
    pass


class _EventBatch(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    ts: float
    events: list[_BlockStored | _BlockRemoved | _AllBlocksCleared]
    attn_dp_rank: int | None = None


def _records(batch: _EventBatch, namespace: str, line: int) -> list[Record]:
    records: list[Record] = []
    for event in batch.events:
        if isinstance(event, _BlockStored):
            adapter = event.lora_name
            if adapter is None and event.lora_id is not None:
                adapter = f"lora_id {event.lora_id}"  # a numeric adapter id no registry names
            salt = event.cache_salt or ""
            foreign = None if salt == namespace else f"cache_salt {event.cache_salt!r}"
            records.append(wire_stored(event, adapter, [foreign] * len(event.block_hashes), line))
        elif isinstance(event, _BlockRemoved):
            records.append(
                Removed([hash_text(h, line) for h in event.block_hashes], wire_medium(event.medium))
            )
        else:
            records.append(Cleared(None))
    return records


class SglangKvEventsSource(KvEventStream):
    """A capture of SGLang KV events (msgpack frames) joined with a registry."""

    format = FORMAT

    def batches(self) -> Iterator[Batch]:
        namespace = self.registry.cache_identity.namespace
        decoder = msgspec.msgpack.Decoder(_EventBatch)
        for number, seq, payload in read_frames(self.stream):  # type: ignore[arg-type]
            try:
                batch = decoder.decode(payload)
            except (msgspec.ValidationError, msgspec.DecodeError) as error:
                raise undecidable(
                    P.joinable_backend_events, f"frame is not an SGLang KVEventBatch: {error}", number
                ) from None
            yield Batch(number, seq, batch.attn_dp_rank, _records(batch, namespace, number))
