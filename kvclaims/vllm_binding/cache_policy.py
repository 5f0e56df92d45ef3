"""The claim-aware CPU-tier eviction policy: vLLM's LRU that never evicts a claimed host copy.

Selected with `kv_connector_extra_config = {"eviction_policy": "ClaimAwareLRUPolicy",
"cache_policy_module_path": "kvclaims.vllm_binding.cache_policy"}` (or the registered name
`kvclaims_claim_lru`, see `plugin`). vLLM's `CPUOffloadingManager` asks its policy for victims
when a store needs room (`evict(n, protected)`); this policy answers like `LRUCachePolicy`
except that chunks held by a responsible claim are never candidates.

When the tier cannot make room without a claimed chunk, an unclaimed store is dropped (as vLLM
drops any store that does not fit). A store of a claim's own host copy asks the policy's
guardian (the binding's arbiter) first: depending on the binding's `cpu_tier_pressure`, it
either keeps every claimed copy (the store is dropped too) or demotes the oldest claims holding
copies (reported in the trace before any of their chunks can go) and the eviction proceeds.
A `clear()` (CPU-tier reset) tells the guardian before the copies are dropped, so no claim loses
its host copy while it is still responsible.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from vllm.v1.kv_offload.base import OffloadKey
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy


class HostCopyGuardian(Protocol):
    """Who decides what happens to claimed host copies (the binding's arbiter)."""

    def release_for_space(self, needed_chunks: int) -> bool:
        """The tier needs `needed_chunks` more evictable chunks: relax claims (and `release`
        their keys) if policy allows; True when anything was released."""
        ...

    def host_copies_dropped(self, claim_ids: frozenset[str]) -> None:
        """Every host copy is about to be dropped (a reset): end these claims' responsibility
        first."""
        ...


class ClaimAwareLRUPolicy(LRUCachePolicy):
    """LRU over unclaimed chunks. Invariant: `evict` never returns a key held by a claim."""

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity)
        self.guardian: HostCopyGuardian | None = None
        self._keys_of: dict[str, frozenset[OffloadKey]] = {}
        self._holders: dict[OffloadKey, set[str]] = {}

    # -- claims ------------------------------------------------------------------------------

    def hold(self, claim_id: str, keys: Iterable[OffloadKey]) -> None:
        """Keep `keys` (the claim's host chunks, present or future) out of eviction."""
        self.release(claim_id)
        held = frozenset(keys)
        self._keys_of[claim_id] = held
        for key in held:
            self._holders.setdefault(key, set()).add(claim_id)

    def release(self, claim_id: str) -> None:
        """The claim no longer needs its host copy kept."""
        for key in self._keys_of.pop(claim_id, ()):
            holders = self._holders[key]
            holders.discard(claim_id)
            if not holders:
                del self._holders[key]

    def holders(self, key: OffloadKey) -> frozenset[str]:
        return frozenset(self._holders.get(key, ()))

    def held_claims(self) -> frozenset[str]:
        return frozenset(self._keys_of)

    # -- vLLM's CachePolicy ----------------------------------------------------------------

    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        """`n` unclaimed victims (atomic: None and no change when there are not enough)."""
        victims = super().evict(n, protected | self._holders.keys())
        if victims is None and self.guardian is not None and not protected.isdisjoint(self._holders):
            # Only a claim's own host copy may ask for claimed room; other stores are dropped.
            if self.guardian.release_for_space(n):
                victims = super().evict(n, protected | self._holders.keys())
        return victims

    def clear(self) -> None:
        if self._keys_of and self.guardian is not None:
            self.guardian.host_copies_dropped(frozenset(self._keys_of))
        self._keys_of.clear()
        self._holders.clear()
        super().clear()
