"""The claim-aware CPU policy: never evicts a claimed host copy; asks its guardian only for a
claim's own store; tells it before a reset drops the copies."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

pytestmark = pytest.mark.vllm


def key(index: int) -> Any:
    from vllm.v1.kv_offload.base import make_offload_key

    return make_offload_key(index.to_bytes(8, "big"), 0)


def policy_with(*indexes: int) -> Any:
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

    from kvclaims.vllm_binding.cache_policy import ClaimAwareLRUPolicy

    policy = ClaimAwareLRUPolicy(cache_capacity=len(indexes))
    for chunk_id, index in enumerate(indexes):
        status = ChunkStatus(chunk_id)
        status.ref_cnt = 0  # stored and idle: evictable
        insert(policy, key(index), status)
    return policy


def insert(policy: Any, chunk_key: Any, status: Any) -> None:
    """vLLM 0.33's `insert` also takes the storing request's context; one that knows no key
    position ranks the chunk globally, as 0.32's two-argument `insert` does."""
    if "req_context" in inspect.signature(policy.insert).parameters:
        from vllm.v1.kv_offload.base import ReqContext

        policy.insert(chunk_key, status, ReqContext(req_id="test"))
    else:
        policy.insert(chunk_key, status)


class Guardian:
    def __init__(self, policy: Any, releases: list[str]) -> None:
        self.policy, self.releases = policy, releases
        self.asked: list[int] = []
        self.dropped: list[frozenset[str]] = []

    def release_for_space(self, needed_chunks: int) -> bool:
        self.asked.append(needed_chunks)
        for claim_id in self.releases:
            self.policy.release(claim_id)
        return bool(self.releases)

    def host_copies_dropped(self, claim_ids: frozenset[str]) -> None:
        self.dropped.append(claim_ids)


def test_held_chunks_are_never_victims_while_others_go_in_lru_order() -> None:
    policy = policy_with(1, 2, 3, 4)
    policy.hold("claim:A", [key(1), key(2)])
    victims = policy.evict(2, set())
    assert [k for k, _ in victims] == [key(3), key(4)]
    assert policy.evict(1, set()) is None, "only held chunks are left"
    assert policy.holders(key(1)) == {"claim:A"} and policy.held_claims() == {"claim:A"}


def test_an_unclaimed_store_never_asks_the_guardian() -> None:
    policy = policy_with(1, 2)
    policy.hold("claim:A", [key(1), key(2)])
    guardian = Guardian(policy, ["claim:A"])
    policy.guardian = guardian
    assert policy.evict(1, {key(9)}) is None and guardian.asked == []


def test_a_claims_own_store_asks_the_guardian_which_may_release_a_claim() -> None:
    policy = policy_with(1, 2)
    policy.hold("claim:old", [key(1), key(2)])
    policy.hold("claim:new", [key(9)])
    guardian = Guardian(policy, ["claim:old"])
    policy.guardian = guardian
    victims = policy.evict(1, {key(9)})
    assert guardian.asked == [1] and [k for k, _ in victims] == [key(1)]


def test_a_guardian_that_keeps_every_copy_drops_the_store() -> None:
    policy = policy_with(1)
    policy.hold("claim:old", [key(1)])
    policy.hold("claim:new", [key(9)])
    guardian = Guardian(policy, [])
    policy.guardian = guardian
    assert policy.evict(1, {key(9)}) is None and guardian.asked == [1]
    assert policy.holders(key(1)) == {"claim:old"}


def test_release_makes_a_chunk_evictable_again_and_shared_keys_need_every_holder_gone() -> None:
    policy = policy_with(1)
    policy.hold("claim:A", [key(1)])
    policy.hold("claim:B", [key(1)])
    policy.release("claim:A")
    assert policy.evict(1, set()) is None
    policy.release("claim:B")
    assert [k for k, _ in policy.evict(1, set())] == [key(1)]


def test_clear_tells_the_guardian_first() -> None:
    policy = policy_with(1, 2)
    policy.hold("claim:A", [key(1)])
    guardian = Guardian(policy, [])
    policy.guardian = guardian
    policy.clear()
    assert guardian.dropped == [frozenset({"claim:A"})] and policy.held_claims() == frozenset()
