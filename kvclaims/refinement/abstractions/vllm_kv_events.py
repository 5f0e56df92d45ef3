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

The join (see `claim_registry` for the registry format) turns the stream into trace v1 steps:
every registered claim is accepted before the first batch; a stored block joins claim C at
position i when its tokens are C's block i and its parent is C's block i-1; at the end of each
batch (the named observation point) a claim whose joined leading prefix reaches its predicate is
`materialized`, and one that falls below it is `lost` (observational modes only: telemetry never
creates harm). All nine preconditions of seed 000 table 5 are checked, and every ambiguity fails
closed (`Undecidable`, an inconclusive verdict naming the precondition): a missing registry
field, duplicate claim ids or owners, a claim id equal to a request id, one object id for two
token maps, a block size, adapter or namespace that differs from the registry's cache identity,
a claim registered after a batch that already joins it (post-hoc naming), a gap or reordering in
the publisher's seq, a hash stored twice with different content, events from more than one
data-parallel rank, and a block that joins two claims.
"""

from __future__ import annotations

import struct as _struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from kvclaims.refinement.abstractions.claim_registry import ClaimRegistry, RegisteredClaim, load_registry
from kvclaims.refinement.checker import Undecidable
from kvclaims.refinement.decoding import convert_event
from kvclaims.refinement.reader import (
    HeaderInfo,
    Prefixed,
    TraceInputError,
    decode_json,
    exact_document,
    ordering_error,
    parse_error,
    push,
    read_exactly,
    read_lines,
)
from kvclaims.refinement.verdict import ErrorClass, Finding
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.vocabulary import TelemetryJoinPrecondition

FORMAT = "vllm-kv-events"

P = TelemetryJoinPrecondition
_FRAME_HEADER = _struct.Struct(">QI")
_MAX_FRAME = 64 * 1024 * 1024


class _BlockStored(msgspec.Struct, tag="BlockStored", tag_field="type"):
    block_hashes: list[Any]
    token_ids: list[int]
    block_size: int
    parent_block_hash: Any = None
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None


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


_HASH_TYPES = (bytes, int, str)
"""A block hash is bytes or an integer on the wire (a hex string or integer in JSON captures);
msgspec cannot tell bytes from str in one union, so hashes are checked after decoding."""


_MSGPACK_MAP_MARKERS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}


def detect_msgpack(head: bytes) -> bool:
    """A msgpack capture starts with a frame whose payload decodes as a KVEventBatch; a first
    frame longer than `head` counts when its length is within the cap and its payload starts
    as a batch does (a msgpack array or map): the frame reader then judges it whole."""
    if len(head) < _FRAME_HEADER.size or head[:1] in (b"{", b"[", b" ", b"\n"):
        return False
    _, length = _FRAME_HEADER.unpack_from(head)
    payload = head[_FRAME_HEADER.size : _FRAME_HEADER.size + length]
    if len(payload) != length:
        markers = _MSGPACK_ARRAY_MARKERS | _MSGPACK_MAP_MARKERS
        return length <= _MAX_FRAME and bool(payload) and payload[0] in markers
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


def _hash_text(value: Any) -> str:
    if type(value) not in _HASH_TYPES:
        raise TraceInputError(
            Finding(ErrorClass.parse, f"a block hash must be bytes, an integer or a string: {value!r}")
        )
    # Every domain is tagged: an integer, a string and bytes that print alike are different
    # blocks (a str "int:5" must never become the block of the integer 5).
    if isinstance(value, bytes):
        return f"bytes:{value.hex()}"
    return f"int:{value}" if isinstance(value, int) else f"str:{value}"


def unmet(precondition: TelemetryJoinPrecondition, message: str, line: int | None) -> Undecidable:
    """The inconclusive finding for a telemetry-join precondition that does not hold."""
    return Undecidable(
        Finding(
            ErrorClass.undecidable, f"telemetry_join precondition {precondition} fails: {message}", line=line
        )
    )


class _Join:
    """The registry-to-blocks join and the steps it yields, batch by batch."""

    def __init__(self, registry: ClaimRegistry) -> None:
        self.registry = registry
        identity = registry.cache_identity
        self.block_size = identity.block_size
        self.medium = registry.medium.lower()
        self.claims = {claim.claim_id: claim for claim in registry.claims}
        self.required = {c.claim_id: c.predicate.required_blocks(self.block_size) for c in registry.claims}
        self.blocks_of: dict[str, list[tuple[int, ...]]] = {}
        self.owner_of_root: dict[tuple[int, ...], str] = {}
        self.content: dict[str, tuple[str | None, tuple[int, ...]]] = {}
        self.joined: dict[str, tuple[str, int]] = {}
        self.block_ids: dict[str, int] = {}
        """Medium-qualified hash -> the step's block id. Ids come from a counter, never reused:
        a hash stored after another was removed must not take a live block's id."""
        self._next_block_id = 0
        self.present: dict[str, set[int]] = {c: set() for c in self.claims}
        self.materialized: set[str] = set()
        self.rank: int | None = None
        self._check_registry()

    def _check_registry(self) -> None:
        registry = self.registry
        ids = [c.claim_id for c in registry.claims]
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        if duplicated:
            raise unmet(P.stable_claim_id, f"claim ids registered twice: {duplicated}", None)
        clash = sorted(set(ids) & set(registry.request_ids))
        if clash:
            raise unmet(P.stable_claim_id, f"claim ids equal backend request ids: {clash}", None)
        tokens_of_object: dict[str, list[int]] = {}
        for claim in registry.claims:
            tokens = claim.token_map.token_ids
            if tokens_of_object.setdefault(claim.object_id, tokens) != tokens:
                raise unmet(P.reusable_object_id, f"object {claim.object_id} has two token maps", None)
            if self.required[claim.claim_id] > claim.footprint_blocks:
                raise unmet(
                    P.fixed_materialization_predicate,
                    f"{claim.claim_id}: predicate needs more blocks than its footprint",
                    None,
                )
            if len(tokens) < claim.footprint_blocks * self.block_size:
                raise unmet(
                    P.deterministic_request_token_map,
                    f"{claim.claim_id}: token map has {len(tokens)} tokens, fewer than "
                    f"{claim.footprint_blocks} blocks of {self.block_size}",
                    None,
                )
            bs = self.block_size
            blocks = [tuple(tokens[i * bs : (i + 1) * bs]) for i in range(claim.footprint_blocks)]
            self.blocks_of[claim.claim_id] = blocks
            for other, other_blocks in self.blocks_of.items():
                if other != claim.claim_id and other_blocks[0] == blocks[0]:
                    raise unmet(
                        P.ambiguity_fails_closed,
                        f"{other} and {claim.claim_id} own the same leading block (duplicate owner)",
                        None,
                    )

    def accepted_steps(self) -> list[dict[str, Any]]:
        return [_accepted(claim) for claim in self.registry.claims]

    def batch(self, seq: int, batch: _Batch | _ArrayBatch, line: int) -> list[dict[str, Any]]:
        if batch.data_parallel_rank is not None:
            if self.rank is None:
                self.rank = batch.data_parallel_rank
            elif self.rank != batch.data_parallel_rank:
                raise unmet(
                    P.ambiguity_fails_closed,
                    "events of more than one data-parallel rank are interleaved",
                    line,
                )
        steps: list[dict[str, Any]] = []
        for event in batch.events:
            if isinstance(event, _BlockStored):
                steps.extend(self._stored(seq, event, line))
            elif isinstance(event, _BlockRemoved):
                medium = (event.medium or "GPU").lower()
                steps.extend(self._removed([f"{medium}:{_hash_text(h)}" for h in event.block_hashes]))
            else:  # AllBlocksCleared: the device prefix cache was reset
                steps.extend(self._removed([k for k in self.block_ids if k.startswith("gpu:")]))
        steps.extend(self._observe())
        return steps

    def _stored(self, seq: int, event: _BlockStored, line: int) -> list[dict[str, Any]]:
        identity = self.registry.cache_identity
        bs = event.block_size
        if bs != self.block_size:
            raise unmet(
                P.fixed_cache_identity,
                f"BlockStored with block_size {bs}, registry says {self.block_size}",
                line,
            )
        if event.lora_name != identity.adapter_identity:
            raise unmet(
                P.fixed_cache_identity,
                f"BlockStored for adapter {event.lora_name!r}, registry says {identity.adapter_identity!r}",
                line,
            )
        if len(event.token_ids) != bs * len(event.block_hashes):
            raise unmet(
                P.joinable_backend_events,
                f"BlockStored carries {len(event.token_ids)} token ids for "
                f"{len(event.block_hashes)} blocks of {bs}",
                line,
            )
        medium = (event.medium or "GPU").lower()
        steps = []
        parent = (
            None if event.parent_block_hash is None else f"{medium}:{_hash_text(event.parent_block_hash)}"
        )
        for index, raw in enumerate(event.block_hashes):
            text = f"{medium}:{_hash_text(raw)}"
            tokens = tuple(event.token_ids[index * bs : (index + 1) * bs])
            content = (parent, tokens)
            known = self.content.get(text)
            if known is not None and known != content:
                raise unmet(
                    P.ambiguity_fails_closed, f"block {text} stored twice with different content", line
                )
            self.content[text] = content
            owner = self._join(text, parent, tokens, line)
            if owner is not None:
                claim_id, position = owner
                if seq < self.claims[claim_id].registered_before_seq:
                    raise unmet(
                        P.external_claim_registry,
                        f"{claim_id} was registered before seq "
                        f"{self.claims[claim_id].registered_before_seq}, "
                        f"after batch {seq} that already holds its block {position} (post-hoc claim naming)",
                        line,
                    )
                self._check_namespace(event, index, line)
                if medium == self.medium:
                    self.present[claim_id].add(position)
            block_id = self.block_ids.get(text)
            if block_id is None:
                block_id = self.block_ids[text] = self._next_block_id
                self._next_block_id += 1
            step: dict[str, Any] = {
                "event": "block_stored",
                "block_id": block_id,
                "block_hash": text,
                "cache_level": medium,
            }
            if owner is not None:
                step |= {"claim_id": owner[0], "position": owner[1]}
            steps.append(step)
            parent = text
        return steps

    def _check_namespace(self, event: _BlockStored, index: int, line: int) -> None:
        namespace = self.registry.cache_identity.namespace
        keys = event.extra_keys[index] if event.extra_keys and index < len(event.extra_keys) else None
        agrees = (keys is not None and namespace in [str(k) for k in keys]) if namespace else not keys
        if not agrees:
            raise unmet(
                P.fixed_cache_identity,
                f"a joined block's extra keys {keys!r} do not carry namespace {namespace!r}",
                line,
            )

    def _join(
        self, text: str, parent: str | None, tokens: tuple[int, ...], line: int
    ) -> tuple[str, int] | None:
        if parent is None:
            owners = [(c, 0) for c, blocks in self.blocks_of.items() if blocks[0] == tokens]
        else:
            above = self.joined.get(parent)
            owners = []
            if above is not None:
                claim_id, position = above
                blocks = self.blocks_of[claim_id]
                if position + 1 < len(blocks) and blocks[position + 1] == tokens:
                    owners = [(claim_id, position + 1)]
        if len(owners) > 1:
            raise unmet(P.ambiguity_fails_closed, f"block {text} joins {len(owners)} claims", line)
        if owners:
            self.joined[text] = owners[0]
            return owners[0]
        return None

    def _removed(self, keys: list[str]) -> list[dict[str, Any]]:
        steps = []
        for text in keys:
            medium = text.split(":", 1)[0]
            block_id = self.block_ids.pop(text, None)
            owner = self.joined.pop(text, None)
            self.content.pop(text, None)
            if block_id is None:
                continue
            step: dict[str, Any] = {
                "event": "block_removed",
                "block_id": block_id,
                "block_hash": text,
                "cache_level": medium,
            }
            if owner is not None:
                step |= {"claim_id": owner[0], "position": owner[1]}
                if medium == self.medium:
                    self.present[owner[0]].discard(owner[1])
            steps.append(step)
        return steps

    def _observe(self) -> list[dict[str, Any]]:
        """The named observation point: materialization and loss at the end of a batch."""
        steps = []
        for claim_id, present in self.present.items():
            leading = 0
            while leading in present:
                leading += 1
            holds = leading >= self.required[claim_id]
            if holds and claim_id not in self.materialized:
                self.materialized.add(claim_id)
                steps.append(
                    {"event": "resident_claim_materialized", "claim_id": claim_id, "leading_blocks": leading}
                )
            elif not holds and claim_id in self.materialized:
                self.materialized.discard(claim_id)
                steps.append(
                    {"event": "resident_claim_lost", "claim_id": claim_id, "leading_blocks": leading}
                )
        return steps


def _accepted(claim: RegisteredClaim) -> dict[str, Any]:
    return {
        "event": "resident_claim_accepted",
        "claim_id": claim.claim_id,
        "owner_scope": claim.owner_scope,
        "object_id": claim.object_id,
        "mode": claim.mode.value,
        "footprint_blocks": claim.footprint_blocks,
        "predicate": claim.predicate.model_dump(exclude_none=True),
    }


class KvEventsSource:
    """A capture of vLLM KV events (msgpack frames or JSON lines) joined with a registry.

    `events()` yields the registry's acceptances (line 0), then each batch's steps located by
    its record number (msgpack frame or JSON line). `preconditions` lists the nine
    telemetry-join preconditions once the stream has been read.
    """

    format = FORMAT
    records = 0
    """Batches read so far."""

    def __init__(self, stream: IO[bytes], *, registry: Path | None) -> None:
        if registry is None:
            raise InputError(
                [Problem("--registry", "vllm-kv-events traces need a claim registry (--registry FILE)")]
            )
        self._registry = load_registry(registry)
        head = stream.read(1 << 16)
        self._stream = Prefixed(head, stream)
        self._msgpack = detect_msgpack(head)
        self.header = HeaderInfo(
            None, self._registry.cache_identity.block_size, self._registry.observation_point
        )
        self.preconditions: dict[TelemetryJoinPrecondition, bool] = {
            p: False for p in TelemetryJoinPrecondition
        }

    def drive(self, sink: Any) -> None:
        push(self.events(), sink)

    def events(self) -> Iterator[tuple[int, int, Any]]:
        join = _Join(self._registry)
        seq = 0
        for step in join.accepted_steps():
            yield 0, 0, convert_event({**step, "seq": seq})
            seq += 1
        last = None
        index = 0
        for number, batch_seq, batch in self._batches():
            self.records = index + 1
            if last is not None:
                if batch_seq <= last:
                    raise ordering_error(batch_seq, last, number)
                if batch_seq != last + 1:
                    raise unmet(
                        P.joinable_backend_events,
                        f"publisher batches {last + 1}..{batch_seq - 1} are missing",
                        number,
                    )
            last = batch_seq
            for step in join.batch(batch_seq, batch, number):
                try:
                    event = convert_event({**step, "seq": seq})
                except msgspec.ValidationError as error:
                    raise parse_error(f"batch does not abstract to a valid step: {error}", number) from None
                yield number, index, event
                seq += 1
            index += 1
        self.preconditions = {p: True for p in TelemetryJoinPrecondition}

    def _batches(self) -> Iterator[tuple[int, int, _Batch | _ArrayBatch]]:
        if self._msgpack:
            yield from self._frames()
            return
        decoder = msgspec.json.Decoder(_JsonBatch)
        for number, content, terminated in read_lines(self._stream):  # type: ignore[arg-type]
            try:
                batch = decoder.decode(content)
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
                decode_json(content, number, terminated)  # raises the located parse finding
                raise unmet(P.joinable_backend_events, "batch line is not a KVEventBatch", number) from None
            exact_document(content, number)  # a duplicate key is invalid input (captures are small)
            if batch.seq < 0:
                raise parse_error("batch line needs a non-negative seq", number, "seq")
            yield number, batch.seq, batch

    def _frames(self) -> Iterator[tuple[int, int, _Batch | _ArrayBatch]]:
        number = 0
        while True:
            header = read_exactly(self._stream, _FRAME_HEADER.size)  # a live stream reads short
            if not header:
                return
            number += 1
            if len(header) < _FRAME_HEADER.size:
                raise TraceInputError(Finding(ErrorClass.parse, "truncated frame header", line=number))
            seq, length = _FRAME_HEADER.unpack(header)
            if length > _MAX_FRAME:
                raise TraceInputError(
                    Finding(ErrorClass.parse, f"frame of {length} bytes exceeds the cap", line=number)
                )
            payload = read_exactly(self._stream, length)
            if len(payload) < length:
                raise TraceInputError(Finding(ErrorClass.parse, "truncated frame payload", line=number))
            try:
                yield number, seq, _decode_payload(payload)
            except (msgspec.ValidationError, msgspec.DecodeError) as error:
                raise unmet(
                    P.joinable_backend_events, f"frame is not a KVEventBatch: {error}", number
                ) from None
