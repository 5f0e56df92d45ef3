"""vLLM's native KV cache events, joined with an external claim registry (telemetry_join depth).

vLLM 0.32's `vllm/distributed/kv_events.py` publishes `KVEventBatch{ts, events,
data_parallel_rank}` over ZMQ as multipart `(topic, 8-byte big-endian seq, msgpack payload)`;
events are tagged (`type`) `BlockStored{block_hashes, parent_block_hash, token_ids, block_size,
lora_id, medium, lora_name, extra_keys, ...}`, `BlockRemoved{block_hashes, medium, ...}` and
`AllBlocksCleared`. Block hashes are bytes or integers. This module reads two capture forms:

- **msgpack capture**: frames `seq (8 bytes, big-endian) | length (4 bytes, big-endian) |
  payload`, the payload being the publisher's msgpack bytes verbatim. vLLM 0.32's `EventBatch`
  is `array_like`, so a real payload is the array `[ts, events, data_parallel_rank]` (events are
  tagged maps); a map `{ts, events, data_parallel_rank}` is read too;
- **JSON capture**: NDJSON, one decoded batch per line, `{"seq": n, "ts": ..., "events": [...],
  "data_parallel_rank": ...}`, hashes as strings or integers.

The join and its preconditions are `kv_event_join`'s; here a batch's events become its records.
A block's cache namespace is its `extra_keys` (vLLM's cache salt travels there): a joined block
agrees with the registry when its extra keys carry the registry's namespace, or carry nothing
when the namespace is empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from kvclaims.refinement.abstractions.kv_event_join import (
    Batch,
    Cleared,
    KvEventStream,
    P,
    Record,
    Removed,
    first_frame,
    first_frame_outgrows,
    hash_text,
    read_frames,
    undecidable,
    wire_medium,
    wire_stored,
)
from kvclaims.refinement.reader import decode_json, exact_document, parse_error, read_lines

FORMAT = "vllm-kv-events"


class _BlockStored(msgspec.Struct, tag="BlockStored", tag_field="type"):
    block_hashes: list[Any]
    token_ids: list[int]
    block_size: int
    parent_block_hash: Any = None
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    cache_salt: Any = None
    session_id: Any = None
    """SGLang's fields: never in vLLM's stream (vLLM's salt travels in `extra_keys`); a frame
    that has them is SGLang's, read here only when `--format auto` took it for vLLM's."""


class _BlockRemoved(msgspec.Struct, tag="BlockRemoved", tag_field="type"):
    block_hashes: list[Any]
    medium: str | None = None


class _AllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", tag_field="type"):
    pass


_KvEvent = _BlockStored | _BlockRemoved | _AllBlocksCleared


class _Batch(msgspec.Struct):
    ts: float
    events: list[_KvEvent]
    data_parallel_rank: int | None = None


class _ArrayBatch(msgspec.Struct, array_like=True):
    """The publisher's wire form: vLLM 0.32's `EventBatch` is `array_like`."""

    ts: float
    events: list[_KvEvent]
    data_parallel_rank: int | None = None


class _JsonBatch(_Batch):
    seq: int = -1


_MSGPACK_ARRAY_MARKERS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
"""First byte of a msgpack array (fixarray, array 16, array 32)."""


def _decode_payload(payload: bytes) -> _Batch | _ArrayBatch:
    """A msgpack batch in either form; raises msgspec errors when it is neither."""
    if payload and payload[0] in _MSGPACK_ARRAY_MARKERS:
        return msgspec.msgpack.decode(payload, type=_ArrayBatch)
    return msgspec.msgpack.decode(payload, type=_Batch)


def detect_msgpack(head: bytes) -> bool:
    """A msgpack capture starts with a frame whose payload decodes as a KVEventBatch (or, when
    that frame is longer than `head`, starts as one: `first_frame_outgrows`)."""
    payload = first_frame(head)
    if payload is None:
        return first_frame_outgrows(head)
    try:
        _decode_payload(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return True


def detect_json(record: Any) -> bool:
    """A JSON capture line is a batch: `seq`, `ts` and a list of `events`."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("events"), list)
        and "ts" in record
        and "seq" in record
    )


def _records(batch: _Batch | _ArrayBatch, namespace: str, line: int) -> list[Record]:
    records: list[Record] = []
    for event in batch.events:
        if isinstance(event, _BlockStored):
            if event.cache_salt is not None or event.session_id is not None:
                raise undecidable(
                    P.fixed_cache_identity,
                    "a store carries SGLang's cache_salt or session_id: "
                    "read it with --format sglang-kv-events",
                    line,
                )
            foreign = [_foreign_namespace(event, i, namespace) for i in range(len(event.block_hashes))]
            records.append(wire_stored(event, event.lora_name, foreign, line))
        elif isinstance(event, _BlockRemoved):
            records.append(
                Removed([hash_text(h, line) for h in event.block_hashes], wire_medium(event.medium))
            )
        else:  # AllBlocksCleared: the device prefix cache was reset
            records.append(Cleared("gpu"))
    return records


def _foreign_namespace(event: _BlockStored, index: int, namespace: str) -> str | None:
    keys = event.extra_keys[index] if event.extra_keys and index < len(event.extra_keys) else None
    agrees = (keys is not None and namespace in [str(k) for k in keys]) if namespace else not keys
    return None if agrees else f"extra keys {keys!r}"


class KvEventsSource(KvEventStream):
    """A capture of vLLM KV events (msgpack frames or JSON lines) joined with a registry."""

    format = FORMAT

    def batches(self) -> Iterator[Batch]:
        namespace = self.registry.cache_identity.namespace
        for line, seq, batch in self._decoded():
            yield Batch(line, seq, batch.data_parallel_rank, _records(batch, namespace, line))

    def _decoded(self) -> Iterator[tuple[int, int, _Batch | _ArrayBatch]]:
        if detect_msgpack(self.head):
            for number, seq, payload in read_frames(self.stream):  # type: ignore[arg-type]
                try:
                    yield number, seq, _decode_payload(payload)
                except (msgspec.ValidationError, msgspec.DecodeError) as error:
                    raise undecidable(
                        P.joinable_backend_events, f"frame is not a KVEventBatch: {error}", number
                    ) from None
            return
        decoder = msgspec.json.Decoder(_JsonBatch)
        for number, content, terminated in read_lines(self.stream):  # type: ignore[arg-type]
            try:
                batch = decoder.decode(content)
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
                decode_json(content, number, terminated)  # raises the located parse finding
                raise undecidable(
                    P.joinable_backend_events, "batch line is not a KVEventBatch", number
                ) from None
            exact_document(content, number)  # a duplicate key is invalid input (captures are small)
            if batch.seq < 0:
                raise parse_error("batch line needs a non-negative seq", number, "seq")
            yield number, batch.seq, batch
