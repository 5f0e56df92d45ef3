"""The MicroRuntime's block pool: usable blocks, reference counts, prefix hashes, free queue.

It follows vLLM v1's `BlockPool` / `FreeKVCacheBlockQueue` (read, not copied):

- every block is either held (reference count > 0) or in the free queue, never both;
- allocation pops the head of the free queue; a popped block that still carries a prefix hash
  is an eviction (its hash leaves the cache);
- a finished request frees its blocks tail first (the last block of a prefix hashes the most
  tokens and is the least likely to be reused), so its leading blocks are evicted last;
- freed blocks that carry a hash go to the tail (LRU: reused last); freed blocks without a hash
  hold nothing reusable and go to the head (reused first);
- a prefix hit holds the cached blocks, taking them out of the middle of the queue (O(1)).

Two references are kept apart because the contract needs to tell them apart: `request_refs`
(active live KV of running requests) and `pin_refs` (resident KV kept by a claim's victim
exclusion or a TTL pin). A second queue, `retained`, holds free blocks that a soft-priority
claim ranks above ordinary ones (`retain_refs > 0`): they are evicted only when the ordinary
queue is empty (a priority ranks victims; it never excludes them).

vLLM's null block is not modelled: `usable_blocks` already excludes it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Evicted = tuple[int, str, str, int]
"""A block an allocation took from the cache: (block, hash, object id, position)."""


class PoolCorruption(AssertionError):
    """The pool's bookkeeping contradicts itself: a MicroRuntime bug, never bad input."""


@dataclass(frozen=True)
class Census:
    """Every usable block counted once, from block state (not from running counters).

    `free`: in the free queue with no hash. `resident`: reusable KV not held by a running
    request (hashed blocks in the free queue, plus blocks only pins hold). `active`: blocks a
    running request holds. `pinned`: the part of `resident` that pins hold (not evictable).
    """

    usable: int
    free: int
    resident: int
    active: int
    pinned: int

    @property
    def conserved(self) -> bool:
        return self.free + self.resident + self.active == self.usable


class BlockPool:
    """A fixed set of `usable_blocks` KV blocks of `block_size` tokens each.

    Invariant (checked by `census`): a block is in exactly one free queue iff both its
    reference counts are zero; `by_hash[h] == b` iff `hash_of[b] == h`.
    """

    __slots__ = (
        "block_size",
        "by_hash",
        "free",
        "hash_of",
        "object_of",
        "pin_refs",
        "position_of",
        "request_refs",
        "retain_refs",
        "retained",
        "usable",
    )

    def __init__(self, usable_blocks: int, block_size: int) -> None:
        if usable_blocks <= 0 or block_size <= 0:
            raise ValueError("a pool needs a positive number of blocks of a positive size")
        self.usable = usable_blocks
        self.block_size = block_size
        self.request_refs = [0] * usable_blocks
        self.pin_refs = [0] * usable_blocks
        self.retain_refs = [0] * usable_blocks
        self.hash_of: list[str | None] = [None] * usable_blocks
        self.object_of: list[str | None] = [None] * usable_blocks
        self.position_of = [-1] * usable_blocks
        self.by_hash: dict[str, int] = {}
        # Head = next victim. Initially ordered by block id, like vLLM.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(usable_blocks))
        self.retained: OrderedDict[int, None] = OrderedDict()

    @property
    def available(self) -> int:
        """Blocks an allocation may take now (evicting cached ones): both free queues."""
        return len(self.free) + len(self.retained)

    def room_beside(self, hits: Sequence[int]) -> int:
        """Blocks an allocation could take once `hits` (cached blocks a request is about to
        hold) are held: `available` less the hits that sit in a free queue."""
        request_refs, pin_refs = self.request_refs, self.pin_refs
        queued_hits = [b for b in hits if request_refs[b] == 0 and pin_refs[b] == 0]
        return self.available - len(queued_hits)

    def allocate(self, count: int) -> tuple[list[int], list[Evicted]]:
        """Pop `count` victims (ordinary queue first, then retained) and hold each for a running
        request. Returns the blocks and the cached content they evicted (already dropped from
        the index). The caller checks `available` first."""
        from_free = min(count, len(self.free))
        pop_free, pop_retained = self.free.popitem, self.retained.popitem
        blocks = [pop_free(last=False)[0] for _ in range(from_free)]
        blocks += [pop_retained(last=False)[0] for _ in range(count - from_free)]
        request_refs, hash_of, by_hash = self.request_refs, self.hash_of, self.by_hash
        object_of, position_of = self.object_of, self.position_of
        evicted: list[Evicted] = []
        for block in blocks:
            request_refs[block] = 1
            block_hash = hash_of[block]
            if block_hash is not None:
                evicted.append((block, block_hash, object_of[block], position_of[block]))  # type: ignore[arg-type]
                del by_hash[block_hash]
                hash_of[block] = object_of[block] = None
                position_of[block] = -1
        return blocks, evicted

    def hold(self, blocks: Iterable[int]) -> None:
        """A running request references `blocks` (a prefix hit); each unreferenced one leaves
        its free queue."""
        request_refs, pin_refs = self.request_refs, self.pin_refs
        for block in blocks:
            if request_refs[block] == 0 and pin_refs[block] == 0:
                self._dequeue(block)
            request_refs[block] += 1

    def pin(self, block: int) -> None:
        """Exclude `block` from eviction (victim exclusion or a TTL pin): one more pin
        reference; the first reference on an unreferenced block takes it off its free queue."""
        if self.request_refs[block] == 0 and self.pin_refs[block] == 0:
            self._dequeue(block)
        self.pin_refs[block] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """Running requests drop their references, in the given order (tail first for a
        finished request); a block left with no reference joins a free queue."""
        # `_enqueue` inlined: this loop runs once per block of every finished request.
        request_refs, pin_refs, hash_of, retain_refs = (
            self.request_refs,
            self.pin_refs,
            self.hash_of,
            self.retain_refs,
        )
        free, retained = self.free, self.retained
        for block in blocks:
            refs = request_refs[block] - 1
            request_refs[block] = refs
            if refs == 0 and pin_refs[block] == 0:
                if hash_of[block] is None:
                    free[block] = None
                    free.move_to_end(block, last=False)
                elif retain_refs[block] > 0:
                    retained[block] = None
                else:
                    free[block] = None

    def unpin(self, block: int) -> None:
        """Drop one pin reference of `block`; with no reference left it joins the tail of a
        free queue (evicted last among the free)."""
        self.pin_refs[block] -= 1
        if self.request_refs[block] == 0 and self.pin_refs[block] == 0:
            self._enqueue(block)

    def retain(self, block: int) -> None:
        """A soft-priority claim ranks `block` above ordinary free blocks: one more retention;
        a free cached block moves from the ordinary to the retained free queue."""
        self.retain_refs[block] += 1
        if self.retain_refs[block] == 1 and block in self.free and self.hash_of[block] is not None:
            del self.free[block]
            self.retained[block] = None

    def unretain(self, block: int) -> None:
        """Drop one retention of `block`; with none left, a free retained block moves to the
        tail of the ordinary free queue."""
        self.retain_refs[block] -= 1
        if self.retain_refs[block] == 0 and block in self.retained:
            del self.retained[block]
            self.free[block] = None

    def store(self, blocks: Sequence[int], object_id: str, start: int, hashes: Sequence[str]) -> list[int]:
        """Make `blocks` the cached copies of `hashes[start:]`, in order; returns the positions
        actually stored. A hash another block already carries is skipped: vLLM does not
        de-duplicate either, and the second copy is never hit, so it stays unhashed here (and
        is freed to the head like any block without a hash)."""
        by_hash, hash_of, object_of, position_of = (
            self.by_hash,
            self.hash_of,
            self.object_of,
            self.position_of,
        )
        stored = []
        position = start
        for block in blocks:
            block_hash = hashes[position]
            if block_hash not in by_hash:
                by_hash[block_hash] = block
                hash_of[block] = block_hash
                object_of[block] = object_id
                position_of[block] = position
                stored.append(position)
            position += 1
        return stored

    def drop_hash(self, block: int) -> None:
        """Forget `block`'s cached content (an invalid load dropping the hash)."""
        block_hash = self.hash_of[block]
        if block_hash is not None:
            del self.by_hash[block_hash]
            self.hash_of[block] = None
            self.object_of[block] = None
            self.position_of[block] = -1
            if block in self.retained:
                del self.retained[block]
                self._enqueue(block)

    def cached_blocks(self, hashes: Sequence[str]) -> list[int]:
        """The blocks caching the leading run of a prefix with these hashes (a prefix hit)."""
        by_hash = self.by_hash
        blocks = []
        for block_hash in hashes:
            block = by_hash.get(block_hash)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def cached_prefix(self, hashes: Sequence[str]) -> int:
        """How many leading blocks of a prefix with these hashes are cached (a prefix hit)."""
        return len(self.cached_blocks(hashes))

    def _enqueue(self, block: int) -> None:
        if self.hash_of[block] is None:
            self.free[block] = None
            self.free.move_to_end(block, last=False)
        elif self.retain_refs[block] > 0:
            self.retained[block] = None
        else:
            self.free[block] = None

    def _dequeue(self, block: int) -> None:
        if block in self.free:
            del self.free[block]
        elif block in self.retained:
            del self.retained[block]
        else:
            raise PoolCorruption(f"block {block} has no references but is in no free queue")

    def census(self) -> Census:
        """Recount every block from its state and check the pool's structural invariants."""
        free = resident = active = pinned = 0
        for block in range(self.usable):
            queued = (block in self.free) + (block in self.retained)
            held = self.request_refs[block] > 0 or self.pin_refs[block] > 0
            if self.request_refs[block] < 0 or self.pin_refs[block] < 0 or self.retain_refs[block] < 0:
                raise PoolCorruption(f"block {block} has a negative reference count")
            if queued > 1 or (queued == 1) == held:
                raise PoolCorruption(f"block {block}: queued {queued} times, held {held}")
            block_hash = self.hash_of[block]
            if block_hash is not None and self.by_hash.get(block_hash) != block:
                raise PoolCorruption(f"block {block} carries hash {block_hash} the cache lost")
            if block in self.retained and (block_hash is None or self.retain_refs[block] == 0):
                raise PoolCorruption(f"block {block} is in the retained queue without a retaining claim")
            if self.request_refs[block] > 0:
                active += 1
            elif self.pin_refs[block] > 0:
                resident += 1
                pinned += 1
            elif block_hash is not None:
                resident += 1
            else:
                free += 1
        if len(self.by_hash) != sum(h is not None for h in self.hash_of):
            raise PoolCorruption("the hash index names blocks that do not carry the hash")
        return Census(self.usable, free, resident, active, pinned)
