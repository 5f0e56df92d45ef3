"""The block pool follows vLLM's free-queue order and keeps its bookkeeping consistent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.microruntime.pool import BlockPool, PoolCorruption


def hashes(name: str, n: int) -> list[str]:
    return [f"{name}#{i}" for i in range(n)]


def compute(pool: BlockPool, name: str, n: int) -> list[int]:
    """A request computes `n` blocks of prefix `name` and finishes (freed tail first)."""
    blocks, _ = pool.allocate(n)
    pool.store(blocks, name, 0, hashes(name, n))
    pool.release(reversed(blocks))
    return blocks


def test_initial_queue_is_ordered_by_block_id() -> None:
    pool = BlockPool(4, 16)
    blocks, evicted = pool.allocate(4)
    assert blocks == [0, 1, 2, 3]
    assert evicted == []


def test_finished_request_frees_tail_first_so_its_leading_blocks_are_evicted_last() -> None:
    pool = BlockPool(6, 16)
    compute(pool, "p", 4)  # blocks 0..3; 4 and 5 never used
    taken, evicted = pool.allocate(4)
    # never-used blocks first, then the prefix from its tail: position 3, then 2
    assert taken == [4, 5, 3, 2]
    assert [(position, h) for _, h, _, position in evicted] == [(3, "p#3"), (2, "p#2")]
    assert pool.cached_prefix(hashes("p", 4)) == 2


def test_unhashed_free_blocks_are_reused_before_cached_ones() -> None:
    pool = BlockPool(4, 16)
    compute(pool, "cached", 2)  # blocks 0, 1 cached, at the tail
    scratch, _ = pool.allocate(2)  # 2, 3: never hashed (write no-admit)
    pool.release(reversed(scratch))
    taken, evicted = pool.allocate(2)
    assert sorted(taken) == [2, 3]
    assert evicted == []
    assert pool.cached_prefix(hashes("cached", 2)) == 2


def test_a_prefix_hit_takes_blocks_out_of_the_middle_of_the_queue() -> None:
    pool = BlockPool(3, 16)
    compute(pool, "a", 1)  # block 0
    compute(pool, "b", 1)  # block 1
    pool.hold([0])  # a hit on "a"
    assert pool.available == 2
    taken, evicted = pool.allocate(2)
    assert sorted(taken) == [1, 2]
    assert [h for _, h, _, _ in evicted] == ["b#0"]


def test_pins_exclude_victims_and_retention_only_reorders_them() -> None:
    pool = BlockPool(4, 16)
    pinned, retained = compute(pool, "pinned", 1)[0], compute(pool, "retained", 1)[0]
    pool.pin(pinned)
    pool.retain(retained)
    assert pool.available == 3
    taken, evicted = pool.allocate(3)
    assert pinned not in taken
    assert taken[-1] == retained  # evicted last, but evicted
    assert [h for _, h, _, _ in evicted] == ["retained#0"]


def test_a_second_copy_of_a_hash_stays_unhashed() -> None:
    pool = BlockPool(4, 16)
    first = compute(pool, "p", 1)[0]
    blocks, _ = pool.allocate(1)
    assert pool.store(blocks, "p", 0, hashes("p", 1)) == []
    assert pool.by_hash["p#0"] == first
    assert pool.hash_of[blocks[0]] is None


def test_census_counts_free_resident_and_active_from_block_state() -> None:
    pool = BlockPool(10, 16)
    compute(pool, "cached", 3)
    live, _ = pool.allocate(4)
    pool.store(live[:2], "live", 0, hashes("live", 2))
    pool.pin(pool.by_hash["cached#0"])
    census = pool.census()
    assert (census.free, census.resident, census.active, census.pinned) == (3, 3, 4, 1)
    assert census.conserved


def test_census_detects_a_leaked_block() -> None:
    pool = BlockPool(4, 16)
    blocks, _ = pool.allocate(1)
    pool.request_refs[blocks[0]] = 0  # dropped without returning to a queue
    with pytest.raises(PoolCorruption, match="queued 0 times"):
        pool.census()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(("compute", "hold", "pin", "unpin", "retain", "unretain")), st.integers(0, 15)
        ),
        max_size=60,
    )
)
def test_any_sequence_of_pool_operations_conserves_blocks(operations: list[tuple[str, int]]) -> None:
    pool = BlockPool(16, 16)
    pins: list[int] = []
    retains: list[int] = []
    for operation, argument in operations:
        if operation == "compute" and 1 + argument % 5 <= pool.available:
            compute(pool, f"p{argument}", 1 + argument % 5)
        elif operation == "hold" and pool.request_refs[argument] + pool.pin_refs[argument] == 0:
            pool.hold([argument])
            pool.release([argument])
        elif operation == "pin":
            pool.pin(argument)
            pins.append(argument)
        elif operation == "unpin" and pins:
            pool.unpin(pins.pop())
        elif operation == "retain" and pool.hash_of[argument] is not None:
            pool.retain(argument)
            retains.append(argument)
        elif operation == "unretain" and retains:
            pool.unretain(retains.pop())
        assert pool.census().conserved
