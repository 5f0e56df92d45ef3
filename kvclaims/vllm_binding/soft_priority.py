"""soft_priority claims: their priority orders which claimed prefix vLLM's free queue evicts first.

vLLM evicts cached free blocks from the head of its LRU free queue (`FreeKVCacheBlockQueue`).
A soft_priority claim pins nothing: its blocks stay in that queue and can always be evicted, so
it never blocks admission. After each step, `order_free_queue` permutes only the queue positions
that blocks of soft_priority claims occupy: the blocks of lower-priority claims take the earlier
(evicted first) positions, higher-priority ones the later. Every other free block keeps its
position, so when claimed blocks go (relative to unclaimed ones) is still vLLM's LRU; priority
decides only which claim's block goes at each of those positions. Equal priorities are
interleaved block by block (no preference): a pressure event that evicts two of their blocks
takes one of each.

Priorities are vLLM request priorities of the submitting request (lower value = higher
priority, as `scheduling_policy="priority"` reads them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SoftRank = tuple[int, str]
"""A soft-claimed block's (vLLM priority of its claim, claim id)."""


def eviction_order(blocks: list[Any], rank_of: Mapping[int, SoftRank]) -> list[Any]:
    """`blocks` (free-queue order, head first) with the soft-claimed ones (`rank_of`, by block
    id) permuted among their own positions: lowest priority (highest value) first; equal
    priorities interleaved, each claim's blocks keeping their own queue order."""
    positions = [i for i, block in enumerate(blocks) if block.block_id in rank_of]
    seen: dict[str, int] = {}
    key: dict[int, tuple[int, int]] = {}
    for i in positions:
        priority, claim_id = rank_of[blocks[i].block_id]
        key[i] = (-priority, seen.get(claim_id, 0))
        seen[claim_id] = key[i][1] + 1
    ranked = sorted(positions, key=key.__getitem__)
    reordered = list(blocks)
    for position, source in zip(positions, ranked, strict=True):
        reordered[position] = blocks[source]
    return reordered


def reorder_free_queue(queue: Any, rank_of: Mapping[int, SoftRank]) -> bool:
    """Apply `eviction_order` to vLLM's `FreeKVCacheBlockQueue` with its own `remove` / `append`
    (the suffix from the first moved block on); True when anything moved."""
    blocks = queue.get_all_free_blocks()
    wanted = eviction_order(blocks, rank_of)
    first = next((i for i, (a, b) in enumerate(zip(blocks, wanted, strict=True)) if a is not b), None)
    if first is None:
        return False
    for block in blocks[first:]:
        queue.remove(block)
    for block in wanted[first:]:
        queue.append(block)
    return True
