"""The engine's claim registry: who holds which claim, what it protects, and what it costs.

Pure bookkeeping (no vLLM import): a claim is identified by its prompt-prefix block hashes,
its physical blocks are opaque handles the scheduler pins. The registry answers the questions
the arbiter asks: may this claim be accepted (ids, owner scope, budgets), how many distinct
blocks are protected, which of a request's leading blocks are shared with protected claims
(and which of those are guaranteed resident), and which claims block a request.

Claims are kept in the registry's `ClaimLedger` (`kvclaims.statemachine.ledger`): their
phases move only by the model's step, their positions and leading prefix are the ledger's.

Invariants: a claim id is decided at most once (single-use ids); decided ids and held claims
stay within their global caps and within each owner's quota (so one owner cannot exhaust what
the others need, and the registry's memory is bounded whatever clients send); the
protected-block index
counts exactly the hashes of claims that are `protected` (a pinned mode, responsible),
globally and per owner; `version` changes whenever that index or a protected
claim's pins change, so cached feasibility answers expire.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from kvclaims.spec.claims import HybridTwoKey, ResidentClaimInput
from kvclaims.spec.tables import OFFLOAD_MODES, PRESERVING_MODES
from kvclaims.spec.vocabulary import ClaimState, ProtectionMode
from kvclaims.statemachine.ledger import Claim, ClaimLedger
from kvclaims.statemachine.lifecycle import ClaimProfile

UNATTRIBUTED = ""
"""The owner charged for ids of claim operations whose owner could not be established
(malformed metadata, a forged owner token): never a valid owner identifier, so a flood of such
operations exhausts only its own quota."""

PINNED_MODES: frozenset[ProtectionMode] = PRESERVING_MODES - OFFLOAD_MODES
"""Modes whose blocks are pinned in device memory while responsible. An offloadable claim is
preserving too, but its guarantee is "resident or restorable": its device blocks may go once
its host copy is complete, so it is watched on the device and held in the CPU tier instead."""


class ClaimRecord(Claim):
    """One accepted claim: a ledger claim (`slots[i]`: the vLLM block it holds at position i,
    pinned while the claim is protected, only watched otherwise, or None) plus its identity on
    this engine: `hashes[i]` is the request-level hash of prefix block i, `keys[i]` the cache
    key a block carries while it holds that prefix; `feeders` are the requests whose blocks it
    may hold. `keys` is a list: a held position's entry is the key object its block carries
    (equal to the computed one; the arbiter's loss check then compares by identity)."""

    __slots__ = (
        "accepted_step",
        "cap_ends",
        "claim",
        "feeders",
        "hashes",
        "keys",
        "priority",
        "source_request_id",
        "term_ends",
    )

    def __init__(
        self,
        *,
        claim: ResidentClaimInput,
        hashes: tuple[Any, ...],
        keys: list[Any],
        source_request_id: str,
        accepted_step: int,
        required_blocks: int,
        priority: int = 0,
    ) -> None:
        mode = claim.protection_mode
        super().__init__(
            claim_id=claim.claim_id,
            mode=mode,
            footprint_blocks=len(hashes),
            required_blocks=required_blocks,
            profile=ClaimProfile.of(mode, two_key=isinstance(claim.materialization_predicate, HybridTwoKey)),
        )
        self.claim, self.hashes, self.keys = claim, hashes, keys
        self.source_request_id, self.accepted_step = source_request_id, accepted_step
        self.feeders = {source_request_id}
        self.priority = priority
        """The submitting request's vLLM priority (lower is higher); soft_priority ranks by it."""
        self.cap_ends: dict[str, int] = {}
        """Per clock ("steps": engine step, "ms": t_ns), where the claim's cap ends its protected
        life: from the acceptance's own stamp, so an extension clipped there is never past the
        cap the trace shows."""
        self.term_ends: dict[str, int] = {}
        """Per clock, where the term the binding has armed ends (never earlier than the trace's
        promised end: each start is read after the event that starts it was stamped)."""

    @property
    def owner(self) -> str:
        return self.claim.owner_scope

    @property
    def state(self) -> ClaimState | None:
        """The DESIGN 2.1 state the claim's phase reports as."""
        return self.phase.claim_state

    @property
    def preserving(self) -> bool:
        return self.mode in PRESERVING_MODES

    @property
    def offloadable(self) -> bool:
        return self.mode in OFFLOAD_MODES

    @property
    def protected(self) -> bool:
        """Its blocks are pinned and count against the pool: a pinned mode, responsible."""
        return self.protects and self.responsible

    @property
    def expires_at_step(self) -> int | None:
        duration = self.claim.duration_steps
        return None if duration is None else self.accepted_step + duration

    def held(self) -> Iterator[tuple[int, Any]]:
        return ((p, b) for p, b in enumerate(self.slots) if b is not None)


def agreement(left: Sequence[Any], right: Sequence[Any]) -> int:
    """Length of the common leading prefix of two prefix-hash chains.

    Block i's hash covers every earlier token, so equal hashes at i imply equal hashes at every
    j < i: agreement is monotone and found by binary search, O(log n) comparisons."""
    size = min(len(left), len(right))
    if size == 0 or left[0] != right[0]:
        return 0
    if left[size - 1] == right[size - 1]:
        return size
    low, high = 1, size - 1  # left[low - 1] == right[low - 1]; left[high] != right[high]
    while low < high:
        middle = (low + high + 1) // 2
        if left[middle - 1] == right[middle - 1]:
            low = middle
        else:
            high = middle - 1
    return low


class Overlap(NamedTuple):
    """A request's leading blocks shared with protected claims.

    The request's first `shared` blocks are blocks of protected claims; the first `credited`
    of them may be counted as already present (pinned now, contiguously from block 0, or the
    request's own claim's blocks, which its computation produces); the rest (`pending`) belong
    to claims not yet materialized that far, which the request would have to compute itself.
    `depths` maps each protected claim on the request's chain to its agreement with it.
    (A named tuple: one is built for every admission decision.)
    """

    prefix: Sequence[Any]
    shared: int
    credited: int
    depths: dict[str, int]

    @property
    def pending(self) -> int:
        return self.shared - self.credited

    @property
    def credited_hashes(self) -> frozenset[Any]:
        return frozenset(self.prefix[: self.credited])

    def covers(self, record: ClaimRecord) -> bool:
        """Every block `record` reserves is one the request shares and may count as present."""
        footprint = len(record.hashes)
        return self.depths.get(record.claim_id, 0) >= footprint and self.credited >= footprint


class ClaimRegistry:
    """Claims by id, budgets, and the protected-block index."""

    def __init__(
        self,
        *,
        usable_blocks: int,
        protected_fraction: float,
        owner_protected_fraction: float,
        max_claims: int,
        max_decided_claim_ids: int,
        max_claims_per_owner: int | None = None,
        max_decided_claim_ids_per_owner: int | None = None,
    ) -> None:
        self.usable_blocks = usable_blocks
        self.protected_cap = math.floor(protected_fraction * usable_blocks)
        self.owner_protected_cap = math.floor(owner_protected_fraction * usable_blocks)
        self.max_claims = max_claims
        self.max_decided_claim_ids = max_decided_claim_ids
        self.max_claims_per_owner = max_claims_per_owner or max_claims
        self.max_decided_claim_ids_per_owner = max_decided_claim_ids_per_owner or max_decided_claim_ids
        self.ledger = ClaimLedger()
        self.claims: dict[str, ClaimRecord] = self.ledger.claims  # type: ignore[assignment]
        self._decided: set[str] = set()
        self._decided_by_owner: Counter[str] = Counter()
        self._held_by_owner: Counter[str] = Counter()
        self._held_by_mode: Counter[ProtectionMode] = Counter()
        self._protected: Counter[Any] = Counter()
        self._owner_protected: dict[str, Counter[Any]] = {}
        self._by_first_hash: dict[Any, list[ClaimRecord]] = {}
        self.version = 0

    # -- identity and budgets -------------------------------------------------------------

    def is_decided(self, claim_id: str) -> bool:
        """Whether `claim_id` was already spent (changes nothing)."""
        return claim_id in self._decided

    def spend_problem(self, owner: str) -> str | None:
        """Why no further claim id may be spent for `owner` (`UNATTRIBUTED`: an operation whose
        owner is unknown), or None (changes nothing)."""
        if len(self._decided) >= self.max_decided_claim_ids:
            return f"claim registry full: {self.max_decided_claim_ids} claim ids already decided"
        if self._decided_by_owner[owner] >= self.max_decided_claim_ids_per_owner:
            quota = self.max_decided_claim_ids_per_owner
            return f"owner quota: {quota} claim ids already decided for this owner"
        return None

    def decide(self, claim_id: str, owner: str) -> None:
        """Spend a claim id for `owner`: it will never be decided again (DESIGN 4 rule 1).
        Call only when `spend_problem(owner)` is None."""
        self._decided.add(claim_id)
        self._decided_by_owner[owner] += 1

    def admission_problem(self, owner: str, hashes: Sequence[Any], pinned: bool) -> str | None:
        """Why a new claim of `owner` over `hashes` may not be accepted now, or None (`pinned`:
        it would pin its blocks, so the protected-block budgets apply)."""
        if len(self.claims) >= self.max_claims:
            return f"claim registry full: {self.max_claims} claims held"
        if self._held_by_owner[owner] >= self.max_claims_per_owner:
            return f"owner quota: {self.max_claims_per_owner} claims held by this owner"
        if not pinned:
            return None
        new = set(hashes)
        total = len(self._protected.keys() | new)
        if total > self.protected_cap:
            return (
                f"protected-block budget: {total} distinct protected blocks would exceed the cap of "
                f"{self.protected_cap} ({len(self._protected)} protected now)"
            )
        owned = self._owner_protected.get(owner, Counter())
        owner_total = len(owned.keys() | new)
        if owner_total > self.owner_protected_cap:
            return (
                f"owner budget: owner would protect {owner_total} distinct blocks, cap "
                f"{self.owner_protected_cap} ({len(owned)} now)"
            )
        return None

    def protected_blocks_with(self, hashes: Iterable[Any]) -> int:
        """Distinct protected blocks if a claim over `hashes` were protected too."""
        return len(self._protected.keys() | set(hashes))

    # -- membership -----------------------------------------------------------------------

    def add(self, record: ClaimRecord) -> None:
        """Spend the record's id and enter it into the ledger, submitted then accepted (a
        pinned mode protects); a protected claim's hashes join the protected index."""
        self.decide(record.claim_id, record.owner)
        self._held_by_owner[record.owner] += 1
        self._held_by_mode[record.mode] += 1
        self.ledger.submit(record)
        self.ledger.accept(record, protects=record.mode in PINNED_MODES)
        if record.hashes:
            self._by_first_hash.setdefault(record.hashes[0], []).append(record)
        if record.protected:
            self._count(record, +1)

    def retire(self, record: ClaimRecord) -> None:
        """Forget a released or harmed claim (its id stays spent)."""
        self.unprotect(record)
        if self.claims.get(record.claim_id) is record:
            self._held_by_owner[record.owner] -= 1
            if self._held_by_owner[record.owner] <= 0:
                del self._held_by_owner[record.owner]
            self._held_by_mode[record.mode] -= 1
        self.ledger.forget(record)
        siblings = self._by_first_hash.get(record.hashes[0], [])
        if record in siblings:
            siblings.remove(record)
            if not siblings:
                del self._by_first_hash[record.hashes[0]]

    def unprotect(self, record: ClaimRecord) -> None:
        """Take a claim out of the protected index (call before leaving a protected state)."""
        if record.protected:
            self._count(record, -1)

    def pins_changed(self) -> None:
        """A protected claim pinned or lost blocks: what requests may count as present moved."""
        self.version += 1

    def _count(self, record: ClaimRecord, delta: int) -> None:
        owned = self._owner_protected.setdefault(record.owner, Counter())
        for key in record.hashes:
            for index in (self._protected, owned):
                index[key] += delta
                if index[key] <= 0:
                    del index[key]
        if not owned:
            del self._owner_protected[record.owner]
        self.version += 1

    # -- capacity questions ---------------------------------------------------------------

    @property
    def protected_blocks(self) -> int:
        """Distinct blocks protected claims reserve: the capacity proof's resident term."""
        return len(self._protected)

    def owner_protected_blocks(self, owner: str) -> int:
        """Distinct blocks `owner`'s protected claims reserve (changes nothing)."""
        return len(self._owner_protected.get(owner, ()))

    def protected(self) -> Iterator[ClaimRecord]:
        """Protected claims, in acceptance order."""
        return iter(self.ledger.protecting.values())  # type: ignore[arg-type]

    def on_chain(self, first_hash: Any) -> list[ClaimRecord]:
        """Claims whose prefix starts with the block hashed `first_hash` (the only ones a
        request starting with that block can share anything with)."""
        return list(self._by_first_hash.get(first_hash, ()))

    def overlap(self, block_hashes: Sequence[Any], sourced: Collection[str]) -> Overlap:
        """Leading blocks of a request shared with protected claims.

        Only claims starting with the request's first block can share any (hash chains), and
        the union of the request's prefixes shared with each is its longest one. A shared
        prefix is credited as far as the claim holds it pinned contiguously from block 0, or
        entirely when the request is the claim's source (its blocks become the claim's).
        """
        depths: dict[str, int] = {}
        shared = credited = 0
        if self._protected and block_hashes:
            for record in self._by_first_hash.get(block_hashes[0], ()):
                if not record.protected:
                    continue
                depth = agreement(block_hashes, record.hashes)
                depths[record.claim_id] = depth
                shared = max(shared, depth)
                present = depth if record.claim_id in sourced else min(depth, record.leading_blocks)
                credited = max(credited, present)
        return Overlap(block_hashes, shared, credited, depths)

    def blocking(self, overlap: Overlap) -> list[ClaimRecord]:
        """Protected claims that reserve at least one block the request cannot share."""
        return sorted((r for r in self.protected() if not overlap.covers(r)), key=lambda r: r.claim_id)

    def freed_by(self, records: Iterable[ClaimRecord]) -> frozenset[Any]:
        """Hashes that would stop being protected if `records` were all relaxed."""
        removed: Counter[Any] = Counter()
        for record in records:
            removed.update(record.hashes)
        return frozenset(k for k, n in removed.items() if self._protected.get(k, 0) <= n)

    def holds_mode(self, mode: ProtectionMode) -> bool:
        """Whether a held claim has protection mode `mode` (changes nothing)."""
        return self._held_by_mode[mode] > 0

    def with_blocks(self) -> list[ClaimRecord]:
        """Claims holding or watching at least one physical block."""
        return [r for r in self.claims.values() if r.held_count]
