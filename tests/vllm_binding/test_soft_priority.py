"""soft_priority's free-queue order: only soft-claimed positions move, lowest priority first."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvclaims.vllm_binding.soft_priority import eviction_order, reorder_free_queue


@dataclass(frozen=True)
class Block:
    block_id: int


def ids(blocks: list) -> list[int]:  # type: ignore[type-arg]
    return [b.block_id for b in blocks]


def test_lower_priority_blocks_take_the_earlier_claimed_positions() -> None:
    queue = [Block(i) for i in range(8)]
    # claim hi (priority 0) holds 1, 2; claim lo (priority 10) holds 5, 6; 0, 3, 4, 7 unclaimed
    rank = {1: (0, "hi"), 2: (0, "hi"), 5: (10, "lo"), 6: (10, "lo")}
    assert ids(eviction_order(queue, rank)) == [0, 5, 6, 3, 4, 1, 2, 7]


def test_unclaimed_blocks_keep_their_lru_positions() -> None:
    queue = [Block(i) for i in range(6)]
    rank = {0: (0, "hi"), 4: (10, "lo")}
    order = ids(eviction_order(queue, rank))
    assert [order[i] for i in (1, 2, 3, 5)] == [1, 2, 3, 5]
    assert order[0] == 4 and order[4] == 0


def test_equal_priorities_interleave_each_claim_in_its_own_order() -> None:
    queue = [Block(i) for i in range(6)]
    rank = {0: (5, "a"), 1: (5, "a"), 2: (5, "a"), 3: (5, "b"), 4: (5, "b"), 5: (5, "b")}
    assert ids(eviction_order(queue, rank)) == [0, 3, 1, 4, 2, 5]


def test_already_ordered_and_unclaimed_queues_are_unchanged() -> None:
    queue = [Block(i) for i in range(4)]
    assert ids(eviction_order(queue, {})) == [0, 1, 2, 3]
    assert ids(eviction_order(queue, {0: (9, "lo"), 3: (1, "hi")})) == [0, 1, 2, 3]


@pytest.mark.vllm
def test_vllms_free_queue_is_reordered_with_its_own_operations() -> None:
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock

    blocks = [KVCacheBlock(i) for i in range(6)]
    queue = FreeKVCacheBlockQueue(blocks)
    rank = {1: (0, "hi"), 4: (10, "lo")}
    assert reorder_free_queue(queue, rank)
    assert ids(queue.get_all_free_blocks()) == [0, 4, 2, 3, 1, 5]
    assert queue.num_free_blocks == 6
    assert ids([queue.popleft(), queue.popleft()]) == [0, 4]
    assert not reorder_free_queue(queue, rank)  # what is left is already in order
