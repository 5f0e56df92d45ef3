"""vLLM's native KV cache events, joined with an external claim registry (telemetry_join depth).

vLLM's `vllm/distributed/kv_events.py` (0.32, 0.33) publishes `KVEventBatch{ts, events,
data_parallel_rank}` over ZMQ as multipart `(topic, 8-byte big-endian seq, msgpack payload)`;
events are tagged (`type`) `BlockStored`, `BlockRemoved` and `AllBlocksCleared`. This reader
knows every field of them (`READ_FIELDS`; each field's meaning for claims is the field table in
docs/vllm-binding.md) and a field it does not know fails closed, naming it. Two capture forms:

- **msgpack capture**: frames `seq (8 bytes, big-endian) | length (4 bytes, big-endian) |
  payload`, the payload being the publisher's msgpack bytes verbatim. vLLM's `EventBatch` is
  `array_like`, so a real payload is the array `[ts, events, data_parallel_rank]` (events are
  tagged maps); a map `{ts, events, data_parallel_rank}` is read too;
- **JSON capture**: NDJSON, one decoded batch per line, `{"seq": n, "ts": ..., "events": [...],
  "data_parallel_rank": ...}`, hashes as strings or integers.

The join and its preconditions are `kv_event_join`'s; here a batch's events become its records:
a store's tier (the join's medium) is the device only for a LOCAL block of the publisher's own
pool in an attention group; a Mamba group's blocks are state (`<medium>-state`), a sliding
window counts within its window, and each block is keyed by its group.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import msgspec

from kvclaims.refinement.abstractions.kv_event_join import (
    Batch,
    Cleared,
    KvEventStream,
    P,
    Record,
    Removed,
    Stored,
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


class _BlockStored(msgspec.Struct, tag="BlockStored", tag_field="type", forbid_unknown_fields=True):
    block_hashes: list[Any]
    token_ids: list[int]
    block_size: int
    parent_block_hash: Any = None
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[list[Any] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None
    cache_salt: Any = None
    """SGLang's field, never in vLLM's stream (vLLM's salt travels in `extra_keys`): a frame
    that has it is SGLang's, read here only when `--format auto` took it for vLLM's."""


class _BlockRemoved(msgspec.Struct, tag="BlockRemoved", tag_field="type", forbid_unknown_fields=True):
    block_hashes: list[Any]
    medium: str | None = None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class _AllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", tag_field="type", forbid_unknown_fields=True):
    pass


_KvEvent = _BlockStored | _BlockRemoved | _AllBlocksCleared


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    ts: float
    events: list[_KvEvent]
    data_parallel_rank: int | None = None


class _ArrayBatch(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The publisher's wire form: vLLM 0.32's `EventBatch` is `array_like`."""

    ts: float
    events: list[_KvEvent]
    data_parallel_rank: int | None = None


class _JsonBatch(_Batch, forbid_unknown_fields=True):
    seq: int = -1


READ_FIELDS: dict[str, tuple[str, ...]] = {
    "EventBatch": _Batch.__struct_fields__,
    "BlockStored": tuple(f for f in _BlockStored.__struct_fields__ if f != "cache_salt"),
    "BlockRemoved": _BlockRemoved.__struct_fields__,
    "AllBlocksCleared": _AllBlocksCleared.__struct_fields__,
}
"""The fields of vLLM's event Structs this reader reads (the field table in
docs/vllm-binding.md gives each one's meaning for claims); any other field fails closed."""

KV_KINDS = frozenset({"full_attention", "mla_attention", "sink_full_attention"})
"""`KVCacheSpecKind`s whose group holds every block of a sequence's prefix on its medium."""
WINDOW_KINDS = frozenset({"sliding_window", "sliding_window_mla"})
"""Kinds that keep only the last `kv_cache_spec_sliding_window` tokens."""
STATE_KINDS = frozenset({"mamba"})
"""Kinds whose blocks are recurrent state (the state side of a two-key claim), not KV."""
OTHER_KINDS = frozenset({"chunked_local_attention", "encoder_only_attention", "cross_attention"})
"""Kinds whose blocks are not the KV of the prompt prefix a claim names."""
LOCALITIES = frozenset({"LOCAL", "REMOTE"})


_MSGPACK_ARRAY_MARKERS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
"""First byte of a msgpack array (fixarray, array 16, array 32)."""


def _decode_payload(payload: bytes) -> _Batch | _ArrayBatch:
    """A msgpack batch in either form; raises msgspec errors when it is neither."""
    if payload and payload[0] in _MSGPACK_ARRAY_MARKERS:
        return msgspec.msgpack.decode(payload, type=_ArrayBatch)
    return msgspec.msgpack.decode(payload, type=_Batch)


def detect_msgpack(head: bytes) -> bool:
    """A msgpack capture starts with a frame whose payload has a KVEventBatch's shape (or, when
    that frame is longer than `head`, starts as one: `first_frame_outgrows`). The shape, not the
    schema: a batch with a field this reader does not know is vLLM's, and fails closed there."""
    payload = first_frame(head)
    if payload is None:
        return first_frame_outgrows(head)
    try:
        batch = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError:
        return False
    if isinstance(batch, list) and len(batch) >= 2:
        events = batch[1]
    elif isinstance(batch, dict) and "ts" in batch:
        events = batch.get("events")
    else:
        return False
    return isinstance(events, list) and all(
        isinstance(e, dict) and e.get("type") in _EVENT_TAGS for e in events
    )


_EVENT_TAGS = frozenset({"BlockStored", "BlockRemoved", "AllBlocksCleared"})


def detect_json(record: Any) -> bool:
    """A JSON capture line is a batch: `seq`, `ts` and a list of `events`."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("events"), list)
        and "ts" in record
        and "seq" in record
    )


class _Groups:
    """What a stream has said about its KV cache groups: the kind of each group index, learned
    from the stores that name one. vLLM's device pool publishes `group_idx` without a kind;
    such a store is read as the full-attention group only while the stream names no group but
    this one, index 0 (vLLM's single-group layout)."""

    def __init__(self) -> None:
        self.kinds: dict[int, str] = {}
        self.seen: set[int | None] = set()
        self.unnamed_counted: set[int] = set()

    def kind(self, event: _BlockStored, line: int) -> str:
        group, kind = event.group_idx, event.kv_cache_spec_kind
        self.seen.add(group)
        if len(self.seen - {None}) > 1 and None in self.seen:
            raise undecidable(P.ambiguity_fails_closed, "stores with and without group_idx are mixed", line)
        if kind is not None:
            if kind not in KV_KINDS | WINDOW_KINDS | STATE_KINDS | OTHER_KINDS:
                raise undecidable(
                    P.joinable_backend_events, f"kv_cache_spec_kind {kind!r} is not known", line
                )
            if group is not None:
                known = self.kinds.setdefault(group, kind)
                if known != kind or (group in self.unnamed_counted and kind not in KV_KINDS):
                    raise undecidable(
                        P.ambiguity_fails_closed, f"group {group} is named {kind!r} after {known!r}", line
                    )
            return kind
        if group is None:
            return "full_attention"
        if group in self.kinds:
            return self.kinds[group]
        if self.seen - {None} != {0}:
            raise undecidable(
                P.ambiguity_fails_closed,
                f"a store from group {group} of a multi-group stream names no kv_cache_spec_kind",
                line,
            )
        self.unnamed_counted.add(0)
        return "full_attention"

    def removal_checked(self, group: int | None, line: int) -> None:
        self.seen.add(group)
        if len(self.seen - {None}) >= 1 and None in self.seen:
            raise undecidable(P.ambiguity_fails_closed, "events with and without group_idx are mixed", line)


def _tier(medium: str | None, locality: str | None, ownership: str | None, line: int) -> str:
    """The tier a block is on, as the join's medium: the device only for a LOCAL (or
    unspecified) block of the publisher's own pool."""
    if locality is not None and locality not in LOCALITIES:
        raise undecidable(
            P.joinable_backend_events, f"locality {locality!r} is neither LOCAL nor REMOTE", line
        )
    tier = wire_medium(medium)
    if ownership is not None:
        tier = f"{tier}-owned-{quote(ownership, safe='')}"
    return f"remote-{tier}" if locality == "REMOTE" else tier


def _stored(event: _BlockStored, groups: _Groups, namespace: str, line: int) -> Stored:
    if event.cache_salt is not None:
        raise undecidable(
            P.fixed_cache_identity,
            "a store carries SGLang's cache_salt: read it with --format sglang-kv-events",
            line,
        )
    if event.lookahead_token_ids is not None and len(event.lookahead_token_ids) != len(event.block_hashes):
        raise undecidable(
            P.joinable_backend_events, "lookahead_token_ids needs one list per block hash", line
        )
    kind = groups.kind(event, line)
    tier = _tier(event.medium, event.locality, event.ownership, line)
    window = None
    if kind in WINDOW_KINDS:
        window = event.kv_cache_spec_sliding_window
        if window is None or window <= 0:
            raise undecidable(P.joinable_backend_events, f"a {kind} store names no positive window", line)
    elif kind in STATE_KINDS:
        tier = f"{tier}-state"
    elif kind in OTHER_KINDS:
        tier = f"{tier}-{kind.replace('_', '-')}"
    adapter = _adapter(event, line)
    foreign = [_foreign_keys(event, i, namespace) for i in range(len(event.block_hashes))]
    record = wire_stored(event, adapter, foreign, line)
    return replace(record, medium=tier, group=event.group_idx, window_tokens=window)


def _adapter(event: _BlockStored, line: int) -> str | None:
    """A store's adapter identity: vLLM's LoRA name and id together, `<lora_name>#<lora_id>`
    (a registry names a vLLM adapter that way); neither: no adapter."""
    if event.lora_id is None and event.lora_name is None:
        return None
    if event.lora_id is None or event.lora_name is None:
        raise undecidable(
            P.fixed_cache_identity, "a store names a LoRA by only one of lora_id and lora_name", line
        )
    return f"{event.lora_name}#{event.lora_id}"


def _foreign_keys(event: _BlockStored, index: int, namespace: str) -> str | None:
    """What cache identity block `index` carries beyond the registry's, None when it agrees.

    vLLM's published extra keys are, in order: the LoRA name (when `lora_name` is set),
    `(mm_identifier, offset)` pairs, the cache salt (on a sequence's first block only) and
    prompt-embedding digests. Multimodal and prompt-embedding keys are part of the block's
    identity, which a claim's token map does not name: such a block is foreign."""
    keys = list(event.extra_keys[index] or ()) if event.extra_keys and index < len(event.extra_keys) else []
    if event.lora_name is not None and keys[:1] == [event.lora_name]:
        keys = keys[1:]
    first = index == 0 and event.parent_block_hash is None
    salt = [namespace] if first and namespace else []
    return None if keys == salt else f"extra keys {keys!r}"


def _records(batch: _Batch | _ArrayBatch, groups: _Groups, namespace: str, line: int) -> list[Record]:
    records: list[Record] = []
    for event in batch.events:
        if isinstance(event, _BlockStored):
            records.append(_stored(event, groups, namespace, line))
        elif isinstance(event, _BlockRemoved):
            groups.removal_checked(event.group_idx, line)
            tier = _tier(event.medium, event.locality, event.ownership, line)
            group = event.group_idx
            hashes = [hash_text(h, line) for h in event.block_hashes]
            kind = groups.kinds.get(group) if group is not None else None
            if kind in STATE_KINDS:
                tier = f"{tier}-state"
            elif kind in OTHER_KINDS:
                tier = f"{tier}-{kind.replace('_', '-')}"
            records.append(Removed(hashes, tier, group))
        else:  # AllBlocksCleared: the device prefix cache was reset
            records.append(Cleared("gpu"))
    return records


class KvEventsSource(KvEventStream):
    """A capture of vLLM KV events (msgpack frames or JSON lines) joined with a registry."""

    format = FORMAT

    def batches(self) -> Iterator[Batch]:
        namespace = self.registry.cache_identity.namespace
        groups = _Groups()
        for line, seq, batch in self._decoded():
            yield Batch(line, seq, batch.data_parallel_rank, _records(batch, groups, namespace, line))

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
                    P.joinable_backend_events, f"batch line is not a KVEventBatch: {_why(content)}", number
                ) from None
            exact_document(content, number)  # a duplicate key is invalid input (captures are small)
            if batch.seq < 0:
                raise parse_error("batch line needs a non-negative seq", number, "seq")
            yield number, batch.seq, batch


def _why(content: bytes) -> str:
    """msgspec's reason a JSON batch line is not a KVEventBatch (it names an unknown field)."""
    try:
        msgspec.json.decode(content, type=_JsonBatch)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        return str(error)
    return "undecodable"
