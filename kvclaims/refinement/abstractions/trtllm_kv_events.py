"""TensorRT-LLM's KV cache events, joined with an external claim registry (telemetry_join depth).

Written from TensorRT-LLM's public serializer and event manager:

- `tensorrt_llm/_utils.py` (`KVCacheEventSerializer`, commit ed53795b33fc139493f762a1c6c53f691cf52d38):
  what `LLM.get_kv_cache_events()` and the serve endpoint `/kv_cache_events` return, one dict
  per event: `{"event_id", "data", "window_size"}` plus `"attention_dp_rank"` when attention
  data parallelism is on. `data` is tagged by `type`: `created{num_blocks_per_cache_level}`,
  `stored{parent_hash, blocks: [stored_block{block_hash, tokens: [unique_token{token_id,
  token_extra_id}], cache_level, priority}]}`, `removed{block_hashes}`, `updated{block_hash,
  cache_level, priority}` whose two fields are `event_diff{new_value, old_value}`. The
  serializer leaves `lora_id` out (a TODO in its source).
- `cpp/tensorrt_llm/batch_manager/kvCacheEventManager.cpp` (commit
  05843b0a704070599c938655ada137b66143a445): one `event_id` counter per manager, shared by all
  window sizes; a stored event's `parent_hash` is the previous block's hash (absent at the
  root); `cache_level` is 0 for a primary (GPU) block and 1 for a secondary (offloaded) one;
  consecutive removals of one window size are batched into one event; when the buffer
  (`event_buffer_max_size`) overflows, the oldest events are discarded (a gap in event_id);
  attention-DP rank 0 gathers the other ranks' events, each with its own counter.

A capture is NDJSON, one serialized event per line, as the serializer returns them (JSON keeps
the integers exact). Each event is a batch: `event_id` is its number, the end of each event is
the observation point. Cache level 0 is medium `gpu`, level 1 is medium `secondary`.

Where it fails closed:

- a gap in `event_id` (discarded events) fails joinable_backend_events; a decrease is invalid;
- a field outside the serializer's, a `type` it does not write, a cache level other than 0
  or 1 fail joinable_backend_events; a duplicate key is invalid;
- a stored block whose token count is not the registry's block size, a joined block with a
  nonzero `token_extra_id` (a multimodal or extra-id token is not the registry's token), and a
  registry that names an adapter or a namespace fail fixed_cache_identity: the serializer
  publishes neither, so the join can only hold for a registry without them (the registry then
  states that no adapter and no salt were in use);
- events of more than one window size or attention-DP rank fail ambiguity_fails_closed (the
  registry names one cache).

`updated` with a cache-level change moves the block between media (a demotion to the
secondary tier is a removal from `gpu`); a priority change is no model step (priority is not
evidence at telemetry_join depth). A `created` event is no step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import msgspec

from kvclaims.refinement.abstractions.kv_event_join import (
    Batch,
    KvEventStream,
    Moved,
    P,
    Record,
    Removed,
    Stored,
    hash_text,
    undecidable,
)
from kvclaims.refinement.reader import decode_json, exact_document, read_lines

FORMAT = "trtllm-kv-events"

MEDIUM_OF_LEVEL: dict[int, str] = {0: "gpu", 1: "secondary"}
"""kvCacheEventManager's kPrimaryLevel and kSecondaryLevel."""


class _UniqueToken(msgspec.Struct, tag="unique_token", tag_field="type", forbid_unknown_fields=True):
    token_id: int
    token_extra_id: int


class _StoredBlock(msgspec.Struct, tag="stored_block", tag_field="type", forbid_unknown_fields=True):
    block_hash: int
    tokens: list[_UniqueToken]
    cache_level: Literal[0, 1]
    priority: int | None


class _Created(msgspec.Struct, tag="created", tag_field="type", forbid_unknown_fields=True):
    num_blocks_per_cache_level: list[int]


class _Stored(msgspec.Struct, tag="stored", tag_field="type", forbid_unknown_fields=True):
    parent_hash: int | None
    blocks: list[_StoredBlock]


class _Removed(msgspec.Struct, tag="removed", tag_field="type", forbid_unknown_fields=True):
    block_hashes: list[int]


class _Diff(msgspec.Struct, tag="event_diff", tag_field="type", forbid_unknown_fields=True):
    new_value: int | None
    old_value: int | None


class _Updated(msgspec.Struct, tag="updated", tag_field="type", forbid_unknown_fields=True):
    block_hash: int
    cache_level: _Diff | None
    priority: _Diff | None


class _Event(msgspec.Struct, forbid_unknown_fields=True):
    event_id: int
    data: _Created | _Stored | _Removed | _Updated
    window_size: int
    attention_dp_rank: int | None = None


def detect(record: Any) -> bool:
    """A capture line is one serialized event: `event_id`, `data` (a typed map), `window_size`."""
    return (
        isinstance(record, dict)
        and {"event_id", "data", "window_size"} <= record.keys()
        and isinstance(record["data"], dict)
        and "type" in record["data"]
    )


def _records(event: _Event, line: int) -> list[Record]:
    data = event.data
    if isinstance(data, _Stored):
        return _stored(data, line)
    if isinstance(data, _Removed):
        return [Removed([hash_text(h, line) for h in data.block_hashes], None)]
    if isinstance(data, _Updated) and data.cache_level is not None:
        old, new = data.cache_level.old_value, data.cache_level.new_value
        if old not in MEDIUM_OF_LEVEL or new not in MEDIUM_OF_LEVEL:
            raise undecidable(P.joinable_backend_events, f"cache level change {old} -> {new}", line)
        if old != new:
            return [Moved(hash_text(data.block_hash, line), MEDIUM_OF_LEVEL[old], MEDIUM_OF_LEVEL[new])]
    return []  # created, a priority change: no model step


def _stored(data: _Stored, line: int) -> list[Record]:
    """One store per block: each block carries its own cache level and token count."""
    records: list[Record] = []
    parent = None if data.parent_hash is None else hash_text(data.parent_hash, line)
    for block in data.blocks:
        text = hash_text(block.block_hash, line)
        extra = sorted({t.token_extra_id for t in block.tokens} - {0})
        records.append(
            Stored(
                hashes=[text],
                parent=parent,
                token_ids=[t.token_id for t in block.tokens],
                block_size=len(block.tokens),
                medium=MEDIUM_OF_LEVEL[block.cache_level],
                adapter=None,
                foreign_namespace=[f"token_extra_id {extra}" if extra else None],
            )
        )
        parent = text
    return records


class TrtllmKvEventsSource(KvEventStream):
    """A capture of TensorRT-LLM KV events (NDJSON, one serialized event a line) joined with a
    registry."""

    format = FORMAT

    def check_identity(self) -> None:
        identity = self.registry.cache_identity
        for name, value in (
            ("adapter_identity", identity.adapter_identity),
            ("namespace", identity.namespace),
        ):
            if value:
                raise undecidable(
                    P.fixed_cache_identity,
                    f"the registry's {name} is {value!r}; TensorRT-LLM's event serializer publishes "
                    "no adapter and no cache salt, so the events cannot be checked against it",
                    None,
                )

    def batches(self) -> Iterator[Batch]:
        decoder = msgspec.json.Decoder(_Event)
        window: int | None = None
        for number, content, terminated in read_lines(self.stream):  # type: ignore[arg-type]
            try:
                event = decoder.decode(content)
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError) as error:
                decode_json(content, number, terminated)  # raises the located parse finding
                raise undecidable(
                    P.joinable_backend_events, f"line is not a TensorRT-LLM KV cache event: {error}", number
                ) from None
            exact_document(content, number)
            if window is None:
                window = event.window_size
            elif event.window_size != window:
                raise undecidable(
                    P.ambiguity_fails_closed,
                    f"events of window sizes {window} and {event.window_size} are interleaved",
                    number,
                )
            yield Batch(number, event.event_id, event.attention_dp_rank, _records(event, number))
