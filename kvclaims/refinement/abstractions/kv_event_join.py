"""A runtime's block events joined with an external claim registry (telemetry_join depth).

Runtimes that publish KV-cache block events (vLLM, SGLang, TensorRT-LLM) know nothing of
claims. Each runtime's reader (`vllm_kv_events`, `sglang_kv_events`, `trtllm_kv_events`)
decodes its own wire format into the runtime-neutral records below (`Stored`, `Removed`,
`Cleared`, `Moved`) grouped in numbered batches; `KvEventStream` checks the batch order and
`Join` turns the records into trace v1 steps:

- every registered claim is accepted before the first batch;
- a stored block joins claim C at position i when its tokens are C's block i and its parent is
  C's block i-1 (no parent for i = 0): the join needs no hash function;
- a position held by several KV cache groups (a hybrid model's) is one block in the steps: on
  the device while every group that has held it holds it, gone with the first group's removal;
- at the end of each batch (the named observation point) a claim whose joined leading prefix
  reaches its predicate is `materialized`, and one that falls below it is `lost`
  (observational modes only: telemetry never creates harm).

All nine preconditions of seed 000 table 5 are checked and every ambiguity fails closed
(`Undecidable`, an inconclusive verdict naming the precondition): a missing registry field,
duplicate claim ids or owners, a claim id equal to a request id, one object id for two token
maps, a block size, adapter or namespace that differs from the registry's cache identity, a
claim registered after a batch that already joins it (post-hoc naming), a gap in the batch
numbers, a hash stored twice with different content, and events from more than one
data-parallel rank. A block never joins two claims: two claims whose prefixes begin with the
same block (duplicate owners) fail at registration, and a child block joins its parent's claim.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

import msgspec

from kvclaims.refinement.checker import Undecidable
from kvclaims.refinement.decoding import convert_event
from kvclaims.refinement.reader import (
    HeaderInfo,
    Prefixed,
    TraceInputError,
    ordering_error,
    parse_error,
    push,
    read_exactly,
)
from kvclaims.refinement.verdict import ErrorClass, Finding
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.vocabulary import TelemetryJoinPrecondition

if TYPE_CHECKING:
    from kvclaims.refinement.abstractions.claim_registry import ClaimRegistry, RegisteredClaim

P = TelemetryJoinPrecondition
Slot = tuple[str, int]
"""A claim id and one of its positions."""


@dataclass(frozen=True)
class Stored:
    """Blocks entered the cache on `medium`: consecutive hashes, each child of the one before,
    the first a child of `parent`; `token_ids` holds `block_size` tokens per hash.
    `foreign_namespace[i]` says what cache namespace block i carries when it is not the
    registry's (None: it agrees); it matters only for blocks that join a claim. `group` names
    the runtime's KV cache group (None: the stream has one); a hash is a block of its group
    only, so a removal matches the store of its group. `window_tokens`: the group keeps only
    that many tokens of a sequence (sliding window), so a block counts toward a claim's
    prefix only where the prefix up to it fits in the window."""

    hashes: Sequence[str]
    parent: str | None
    token_ids: Sequence[int]
    block_size: int
    medium: str
    adapter: str | None
    foreign_namespace: Sequence[str | None]
    group: int | None = None
    window_tokens: int | None = None


@dataclass(frozen=True)
class Removed:
    """Blocks left the cache on `medium` (on whichever medium holds them when None)."""

    hashes: Sequence[str]
    medium: str | None
    group: int | None = None


def block_key(medium: str, group: int | None, raw: str) -> str:
    """The join's key of a block: its medium, its KV cache group (when the stream names one)
    and its hash. The medium comes first: `Cleared` and the steps' cache level read it."""
    return f"{medium}:{raw}" if group is None else f"{medium}:g{group}/{raw}"


def block_content(key: str) -> str:
    """The content the model reads for the block keyed `key` (`block_key`): its medium and
    hash, without its KV cache group. A hybrid model's groups each hold a position's content in
    a block of their own: one content under several block ids, as the model's identity rule
    (a claim position keeps the content it was stored with) reads it."""
    medium, rest = key.split(":", 1)
    group, slash, raw = rest.partition("/")
    is_group = slash and group[:1] == "g" and group[1:].isdigit()  # a hash text is tagged, never g<n>
    return f"{medium}:{raw}" if is_group else key


@dataclass(frozen=True)
class Cleared:
    """Every block on `medium` (on every medium when None) left the cache (a prefix-cache
    reset)."""

    medium: str | None


@dataclass(frozen=True)
class Moved:
    """One block changed tier (TensorRT-LLM's cache-level update): it left `source` and is now
    on `target`, with the content it was stored with."""

    hash: str
    source: str
    target: str


Record = Stored | Removed | Cleared | Moved


@dataclass(frozen=True)
class Batch:
    """One numbered unit of the runtime's stream, located at `line` (a frame or a line)."""

    line: int
    seq: int
    rank: int | None
    records: Sequence[Record]


HASH_TYPES = (bytes, int, str)


def hash_text(value: Any, line: int) -> str:
    """A wire block hash as text. Every domain is tagged: an integer, a string and bytes that
    print alike are different blocks (a str "int:5" must never become the block of 5)."""
    if type(value) not in HASH_TYPES:
        raise TraceInputError(
            Finding(
                ErrorClass.parse, f"a block hash must be bytes, an integer or a string: {value!r}", line=line
            )
        )
    if isinstance(value, bytes):
        return f"bytes:{value.hex()}"
    return f"int:{value}" if isinstance(value, int) else f"str:{value}"


class WireStored(Protocol):
    """The fields vLLM's and SGLang's `BlockStored` share on the wire (read only)."""

    @property
    def block_hashes(self) -> Sequence[Any]: ...
    @property
    def parent_block_hash(self) -> Any: ...
    @property
    def token_ids(self) -> Sequence[int]: ...
    @property
    def block_size(self) -> int: ...
    @property
    def medium(self) -> str | None: ...


def wire_stored(
    event: WireStored, adapter: str | None, foreign_namespace: Sequence[str | None], line: int
) -> Stored:
    """A `Stored` from a ZMQ publisher's `BlockStored` (hashes as on the wire)."""
    return Stored(
        hashes=[hash_text(h, line) for h in event.block_hashes],
        parent=None if event.parent_block_hash is None else hash_text(event.parent_block_hash, line),
        token_ids=event.token_ids,
        block_size=event.block_size,
        medium=wire_medium(event.medium),
        adapter=adapter,
        foreign_namespace=foreign_namespace,
    )


def wire_medium(value: str | None) -> str:
    """A ZMQ publisher's `medium` as a medium name: absent is the device (vLLM's and SGLang's
    default), names compare case-insensitively with the registry's."""
    return (value or "GPU").lower()


def undecidable(precondition: TelemetryJoinPrecondition, message: str, line: int | None) -> Undecidable:
    return Undecidable(
        Finding(
            ErrorClass.undecidable, f"telemetry_join precondition {precondition} fails: {message}", line=line
        )
    )


_UNSEEN = object()
"""No batch read yet."""


class Join:
    """The registry-to-blocks join and the steps it yields, batch by batch."""

    def __init__(self, registry: ClaimRegistry) -> None:
        self.registry = registry
        self.block_size = registry.cache_identity.block_size
        self.medium = registry.medium.lower()
        self.claims = {claim.claim_id: claim for claim in registry.claims}
        self.required = {c.claim_id: c.predicate.required_blocks(self.block_size) for c in registry.claims}
        self.blocks_of: dict[str, list[tuple[int, ...]]] = {}
        self.owner_of_root: dict[tuple[int, ...], str] = {}
        """A claim's first block's tokens -> the claim (unique: a second owner fails closed)."""
        self.joined: dict[str, tuple[str, int]] = {}
        self.content: dict[str, tuple[str | None, tuple[int, ...], str | None]] = {}
        """Medium-qualified hash -> (parent hash, tokens, foreign namespace) it was stored with."""
        self.block_ids: dict[str, int] = {}
        """Medium-qualified hash -> the step's block id. Ids come from a counter, never reused:
        a hash stored after another was removed must not take a live block's id."""
        self._next_block_id = 0
        self.media: set[str] = set()
        """Every medium a block was stored on."""
        self.present: dict[str, set[int]] = {c: set() for c in self.claims}
        self.counted: set[str] = set()
        """Keys of joined blocks that count toward their claim's prefix (on the registry's
        medium, within a window) with other content than the position was first stored with:
        steps of their own, which the model judges."""
        self.first_content: dict[Slot, str] = {}
        """A claim position -> the content (`block_content`) it was first stored with."""
        self.members: dict[str, tuple[Slot, int | None]] = {}
        """Keys of counted blocks with their position's first content -> the position and the KV
        cache group holding it. A hybrid model's groups each hold the position in a block of
        their own; the steps give the position one block (`on_device`)."""
        self.holding: dict[Slot, dict[int | None, str]] = {}
        """A claim position -> the member block of each group holding it now."""
        self.groups: dict[Slot, set[int | None]] = {}
        """A claim position -> every group that has held it: the position is on the device while
        each of them holds it (a prefix hit needs every group's block)."""
        self.on_device: dict[Slot, int] = {}
        """A claim position on the device -> the block id its steps give it."""
        self.outside: set[str] = set()
        """Keys of blocks beyond their group's window: chained to a claim, never its blocks."""
        self.materialized: set[str] = set()
        self.changed: set[str] = set()
        """Claims whose present blocks changed since the last observation point."""
        self.order = {claim_id: index for index, claim_id in enumerate(self.claims)}
        self.rank: object = _UNSEEN
        """The first batch's data-parallel rank (None: it names none). A stream that mixes
        ranks, or named and unnamed ones, fails closed."""
        self._check_registry()

    def _check_registry(self) -> None:
        registry = self.registry
        ids = [c.claim_id for c in registry.claims]
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        if duplicated:
            raise undecidable(P.stable_claim_id, f"claim ids registered twice: {duplicated}", None)
        clash = sorted(set(ids) & set(registry.request_ids))
        if clash:
            raise undecidable(P.stable_claim_id, f"claim ids equal backend request ids: {clash}", None)
        tokens_of_object: dict[str, list[int]] = {}
        for claim in registry.claims:
            tokens = claim.token_map.token_ids
            if tokens_of_object.setdefault(claim.object_id, tokens) != tokens:
                raise undecidable(P.reusable_object_id, f"object {claim.object_id} has two token maps", None)
            if self.required[claim.claim_id] > claim.footprint_blocks:
                raise undecidable(
                    P.fixed_materialization_predicate,
                    f"{claim.claim_id}: predicate needs more blocks than its footprint",
                    None,
                )
            if len(tokens) < claim.footprint_blocks * self.block_size:
                raise undecidable(
                    P.deterministic_request_token_map,
                    f"{claim.claim_id}: token map has {len(tokens)} tokens, fewer than "
                    f"{claim.footprint_blocks} blocks of {self.block_size}",
                    None,
                )
            bs = self.block_size
            blocks = [tuple(tokens[i * bs : (i + 1) * bs]) for i in range(claim.footprint_blocks)]
            self.blocks_of[claim.claim_id] = blocks
            other = self.owner_of_root.setdefault(blocks[0], claim.claim_id)
            if other != claim.claim_id:
                raise undecidable(
                    P.ambiguity_fails_closed,
                    f"{other} and {claim.claim_id} own the same leading block (duplicate owner)",
                    None,
                )

    def accepted_steps(self) -> list[dict[str, Any]]:
        return [_accepted(claim) for claim in self.registry.claims]

    def batch(self, batch: Batch) -> list[dict[str, Any]]:
        """The steps of one batch; raises `Undecidable` where the join is ambiguous."""
        if self.rank is _UNSEEN:
            self.rank = batch.rank
        elif self.rank != batch.rank:
            raise undecidable(
                P.ambiguity_fails_closed,
                f"batches of data-parallel ranks {self.rank} and {batch.rank} are interleaved",
                batch.line,
            )
        steps: list[dict[str, Any]] = []
        for record in batch.records:
            if isinstance(record, Stored):
                steps.extend(self._stored(batch.seq, record, batch.line))
            elif isinstance(record, Removed):
                media = sorted(self.media) if record.medium is None else [record.medium]
                keys = [block_key(m, record.group, h) for h in record.hashes for m in media]
                steps.extend(self._removed(keys))
            elif isinstance(record, Cleared):
                prefix = "" if record.medium is None else f"{record.medium}:"
                steps.extend(self._removed([k for k in self.block_ids if k.startswith(prefix)]))
            else:
                steps.extend(self._moved(batch.seq, record, batch.line))
        steps.extend(self._observe())
        return steps

    def _stored(self, seq: int, record: Stored, line: int) -> list[dict[str, Any]]:
        identity = self.registry.cache_identity
        bs = record.block_size
        if bs != self.block_size:
            raise undecidable(
                P.fixed_cache_identity,
                f"blocks stored with block size {bs}, registry says {self.block_size}",
                line,
            )
        if record.adapter != identity.adapter_identity:
            raise undecidable(
                P.fixed_cache_identity,
                f"blocks stored for adapter {record.adapter!r}, registry says {identity.adapter_identity!r}",
                line,
            )
        if len(record.token_ids) != bs * len(record.hashes):
            raise undecidable(
                P.joinable_backend_events,
                f"a store carries {len(record.token_ids)} token ids for {len(record.hashes)} blocks of {bs}",
                line,
            )
        steps = []
        parent = None if record.parent is None else block_key(record.medium, record.group, record.parent)
        for index, raw in enumerate(record.hashes):
            tokens = tuple(record.token_ids[index * bs : (index + 1) * bs])
            key = block_key(record.medium, record.group, raw)
            foreign = record.foreign_namespace[index]
            steps.extend(
                self._store_one(
                    seq, record.medium, key, parent, tokens, foreign, line, record.window_tokens, record.group
                )
            )
            parent = key
        return steps

    def _store_one(
        self,
        seq: int,
        medium: str,
        text: str,
        parent: str | None,
        tokens: tuple[int, ...],
        foreign: str | None,
        line: int,
        window_tokens: int | None = None,
        group: int | None = None,
    ) -> list[dict[str, Any]]:
        """The steps of one block stored under key `text` (`block_key`), child of the block
        keyed `parent`."""
        self.media.add(medium)
        known = self.content.get(text)
        if known is not None and known[:2] != (parent, tokens):
            raise undecidable(
                P.ambiguity_fails_closed, f"block {text} stored twice with different content", line
            )
        self.content[text] = (parent, tokens, foreign)
        owner = self._join(text, parent, tokens)
        if owner is not None:
            claim_id, position = owner
            registered = self.claims[claim_id].registered_before_seq
            if seq < registered:
                raise undecidable(
                    P.external_claim_registry,
                    f"{claim_id} was registered before seq {registered}, after batch {seq} that "
                    f"already holds its block {position} (post-hoc claim naming)",
                    line,
                )
            if foreign is not None:
                raise undecidable(
                    P.fixed_cache_identity,
                    f"a joined block carries {foreign}, registry namespace is "
                    f"{self.registry.cache_identity.namespace!r}",
                    line,
                )
            in_window = window_tokens is None or (position + 1) * self.block_size <= window_tokens
            if medium == self.medium and in_window:
                content = block_content(text)
                if self.first_content.setdefault(owner, content) == content:
                    self.members[text] = (owner, group)
                    self.holding.setdefault(owner, {})[group] = text
                    self.groups.setdefault(owner, set()).add(group)
                    return self._position_changed(owner, medium, self._block_id(text), text)
                self.present[claim_id].add(position)
                self.changed.add(claim_id)
                self.counted.add(text)
            elif not in_window:
                self.outside.add(text)
                owner = None  # held by a group that no longer holds the prefix up to it
        return [_block_step("block_stored", self._block_id(text), text, medium, owner)]

    def _block_id(self, text: str) -> int:
        block_id = self.block_ids.get(text)
        if block_id is None:
            block_id = self.block_ids[text] = self._next_block_id
            self._next_block_id += 1
        return block_id

    def _position_changed(self, slot: Slot, medium: str, block_id: int, text: str) -> list[dict[str, Any]]:
        """The step, if any, of a member block of `slot` stored or removed: the position comes
        onto the device when every group that has held it holds it, in the block that
        completed it, and leaves it with the first of them to go (one holder per position, so
        the model loses the position exactly when a prefix hit would miss it)."""
        claim_id, position = slot
        on_device = len(self.holding.get(slot, ())) == len(self.groups[slot])
        held_as = self.on_device.get(slot)
        if on_device == (held_as is not None):
            return []
        self.changed.add(claim_id)
        if on_device:
            self.on_device[slot] = block_id
            self.present[claim_id].add(position)
            return [_block_step("block_stored", block_id, text, medium, slot)]
        del self.on_device[slot]
        self.present[claim_id].discard(position)
        return [_block_step("block_removed", held_as, text, medium, slot)]

    def _moved(self, seq: int, record: Moved, line: int) -> list[dict[str, Any]]:
        known = self.content.get(f"{record.source}:{record.hash}")
        if known is None:
            elsewhere = sorted(m for m in self.media if f"{m}:{record.hash}" in self.content)
            if elsewhere:
                raise undecidable(
                    P.ambiguity_fails_closed,
                    f"block {record.hash} moves from {record.source}, but the stream holds it on {elsewhere}",
                    line,
                )
            return []  # a block this stream never stored: like the removal of one, no step
        parent, tokens, foreign = known
        target_parent = None if parent is None else f"{record.target}:{parent.split(':', 1)[1]}"
        steps = self._removed([f"{record.source}:{record.hash}"])
        steps.extend(
            self._store_one(
                seq, record.target, f"{record.target}:{record.hash}", target_parent, tokens, foreign, line
            )
        )
        return steps

    def _join(self, text: str, parent: str | None, tokens: tuple[int, ...]) -> tuple[str, int] | None:
        """The claim and position a block joins, if any. At most one: a root block's owner is
        unique (a duplicate owner fails at registration) and a child joins its parent's claim."""
        owner = None
        if parent is None:
            root_owner = self.owner_of_root.get(tokens)
            owner = None if root_owner is None else (root_owner, 0)
        else:
            above = self.joined.get(parent)
            if above is not None:
                claim_id, position = above
                blocks = self.blocks_of[claim_id]
                if position + 1 < len(blocks) and blocks[position + 1] == tokens:
                    owner = (claim_id, position + 1)
        if owner is not None:
            self.joined[text] = owner
        return owner

    def _removed(self, keys: list[str]) -> list[dict[str, Any]]:
        steps = []
        for text in keys:
            medium = text.split(":", 1)[0]
            block_id = self.block_ids.pop(text, None)
            owner = self.joined.pop(text, None)
            self.content.pop(text, None)
            if block_id is None:
                continue
            member = self.members.pop(text, None)
            if member is not None:
                slot, group = member
                holding = self.holding[slot]
                del holding[group]
                if not holding:
                    del self.holding[slot]
                steps.extend(self._position_changed(slot, medium, block_id, text))
                continue
            if text in self.outside:
                self.outside.discard(text)
                owner = None
            if owner is not None and text in self.counted:
                self.counted.discard(text)
                self.present[owner[0]].discard(owner[1])
                self.changed.add(owner[0])
            steps.append(_block_step("block_removed", block_id, text, medium, owner))
        return steps

    def _observe(self) -> list[dict[str, Any]]:
        """The named observation point: materialization and loss at the end of a batch."""
        steps = []
        changed, self.changed = self.changed, set()
        for claim_id in sorted(changed, key=self.order.__getitem__):  # registry order
            present = self.present[claim_id]
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


def _block_step(
    event: str, block_id: int, text: str, medium: str, owner: tuple[str, int] | None
) -> dict[str, Any]:
    step: dict[str, Any] = {
        "event": event,
        "block_id": block_id,
        "block_hash": block_content(text),
        "cache_level": medium,
    }
    if owner is not None:
        step |= {"claim_id": owner[0], "position": owner[1]}
    return step


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


class KvEventStream:
    """A runtime's block-event capture joined with a registry: the shared part of every
    runtime's reader. A subclass sets `format` and `gap_message` and implements `batches()`
    (the capture's batches in file order).

    `events()` yields the registry's acceptances (line 0), then each batch's steps located by
    its record number. Batch numbers must increase by exactly one: a decrease is invalid
    (ordering), a gap fails closed. `preconditions` lists the nine telemetry-join
    preconditions once the stream has been read.
    """

    format: str
    records = 0
    """Batches read so far."""

    def __init__(self, stream: IO[bytes], *, registry: Path | None) -> None:
        if registry is None:
            raise InputError(
                [Problem("--registry", f"{self.format} traces need a claim registry (--registry FILE)")]
            )
        # the registry's YAML loader is imported with the first capture, not with `check`
        from kvclaims.refinement.abstractions.claim_registry import load_registry

        self.registry = load_registry(registry)
        head = stream.read(1 << 16)
        self.head = head
        self.stream = Prefixed(head, stream)
        self.header = HeaderInfo(
            None, self.registry.cache_identity.block_size, self.registry.observation_point
        )
        self.preconditions: dict[TelemetryJoinPrecondition, bool] = {
            p: False for p in TelemetryJoinPrecondition
        }

    def check_identity(self) -> None:
        """Refuse a registry this runtime's events cannot be checked against (none by default)."""

    def batches(self) -> Iterator[Batch]:
        raise NotImplementedError

    def drive(self, sink: Any) -> None:
        push(self.events(), sink)

    def events(self) -> Iterator[tuple[int, int, Any]]:
        join = Join(self.registry)
        self.check_identity()
        seq = 0
        for step in join.accepted_steps():
            yield 0, 0, convert_event({**step, "seq": seq})
            seq += 1
        last = None
        index = 0
        for batch in self.batches():
            self.records = index + 1
            if last is not None:
                if batch.seq <= last:
                    raise ordering_error(batch.seq, last, batch.line)
                if batch.seq != last + 1:
                    raise undecidable(
                        P.joinable_backend_events,
                        f"batches {last + 1}..{batch.seq - 1} are missing",
                        batch.line,
                    )
            last = batch.seq
            for step in join.batch(batch):
                try:
                    event = convert_event({**step, "seq": seq})
                except msgspec.ValidationError as error:
                    raise parse_error(
                        f"batch does not abstract to a valid step: {error}", batch.line
                    ) from None
                yield batch.line, index, event
                seq += 1
            index += 1
        self.preconditions = {p: True for p in TelemetryJoinPrecondition}


FRAME_HEADER = struct.Struct(">QI")
"""A capture frame: `seq (8 bytes, big-endian) | length (4 bytes, big-endian) | payload`, the
payload being the ZMQ publisher's msgpack bytes verbatim (vLLM and SGLang publish the same
multipart `(topic, 8-byte big-endian seq, payload)`)."""

MAX_FRAME = 64 * 1024 * 1024


def first_frame(head: bytes) -> bytes | None:
    """The payload of the first frame of a msgpack capture, or None when `head` is no frame."""
    if len(head) < FRAME_HEADER.size or head[:1] in (b"{", b"[", b" ", b"\n"):
        return None
    _, length = FRAME_HEADER.unpack_from(head)
    payload = head[FRAME_HEADER.size : FRAME_HEADER.size + length]
    return payload if len(payload) == length else None


_MSGPACK_CONTAINER_MARKERS = frozenset(range(0x80, 0xA0)) | {0xDC, 0xDD, 0xDE, 0xDF}
"""First byte of a msgpack map or array (fix, 16 and 32 forms)."""


def first_frame_outgrows(head: bytes) -> bool:
    """`head` starts a frame longer than itself whose length is within the cap and whose payload
    starts as a batch does (a msgpack array or map): a long first batch, which the frame reader
    then judges whole (detection reads only 64 KiB)."""
    if len(head) <= FRAME_HEADER.size or head[:1] in (b"{", b"[", b" ", b"\n"):
        return False
    _, length = FRAME_HEADER.unpack_from(head)
    return (
        len(head) - FRAME_HEADER.size < length <= MAX_FRAME
        and head[FRAME_HEADER.size] in _MSGPACK_CONTAINER_MARKERS
    )


def read_frames(stream: IO[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """`(frame number, seq, payload)` of each frame; truncation and absurd sizes are invalid."""
    number = 0
    while True:
        header = read_exactly(stream, FRAME_HEADER.size)  # a live stream reads short
        if not header:
            return
        number += 1
        if len(header) < FRAME_HEADER.size:
            raise TraceInputError(Finding(ErrorClass.parse, "truncated frame header", line=number))
        seq, length = FRAME_HEADER.unpack(header)
        if length > MAX_FRAME:
            raise TraceInputError(
                Finding(ErrorClass.parse, f"frame of {length} bytes exceeds the cap", line=number)
            )
        payload = read_exactly(stream, length)
        if len(payload) < length:
            raise TraceInputError(Finding(ErrorClass.parse, "truncated frame payload", line=number))
        yield number, seq, payload
