"""The claim registry: single-use ids, budgets, the protected-block index, overlap."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvclaims.spec.claims import CacheIdentity, ResidentClaimInput
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.statemachine.lifecycle import Event
from kvclaims.vllm_binding.registry import ClaimRecord, ClaimRegistry, agreement

IDENTITY = CacheIdentity(
    cache_key_domain="d", model_id="m", token_hash_domain="h", block_size=16, kv_format="f"
)


def record(
    claim_id: str, hashes: list[str], *, owner: str = "o", mode: str = "hard_protected"
) -> ClaimRecord:
    claim = ResidentClaimInput(
        claim_id=claim_id,
        owner_scope=owner,
        cache_identity=IDENTITY,
        object_id=claim_id,
        materialization_predicate={"kind": "leading_prefix_at_least", "blocks": len(hashes)},
        footprint_blocks=len(hashes),
        protection_mode=mode,
        duration_steps=5 if mode == "expiring" else None,
    )
    return ClaimRecord(
        claim=claim,
        hashes=tuple(hashes),
        keys=list(hashes),
        source_request_id=f"req-{claim_id}",
        accepted_step=0,
        required_blocks=len(hashes),
    )


def registry(usable: int = 100, fraction: float = 0.5, owner_fraction: float = 0.5) -> ClaimRegistry:
    return ClaimRegistry(
        usable_blocks=usable,
        protected_fraction=fraction,
        owner_protected_fraction=owner_fraction,
        max_claims=8,
        max_decided_claim_ids=20,
    )


def prefix(tag: str, n: int) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_protected_blocks_are_distinct_blocks() -> None:
    reg = registry()
    reg.add(record("a", prefix("p", 10)))
    reg.add(record("b", prefix("p", 15)))  # shares its first 10 blocks with a
    assert reg.protected_blocks == 15
    reg.unprotect(reg.claims["a"])
    reg.ledger.advance(reg.claims["a"], Event.demote)
    assert reg.protected_blocks == 15
    reg.unprotect(reg.claims["b"])
    reg.ledger.advance(reg.claims["b"], Event.demote)
    assert reg.protected_blocks == 0


def test_holds_mode_follows_the_held_claims() -> None:
    reg = registry()
    assert not reg.holds_mode(ProtectionMode.soft_priority)
    soft = record("s", prefix("p", 2), mode="soft_priority")
    reg.add(soft)
    reg.add(record("h", prefix("q", 2)))
    assert reg.holds_mode(ProtectionMode.soft_priority) and reg.holds_mode(ProtectionMode.hard_protected)
    reg.ledger.advance(soft, Event.release)
    reg.retire(soft)
    reg.retire(soft)  # retiring twice counts once
    assert not reg.holds_mode(ProtectionMode.soft_priority)
    assert reg.holds_mode(ProtectionMode.hard_protected)


def test_best_effort_claims_protect_nothing() -> None:
    reg = registry()
    reg.add(record("a", prefix("p", 10), mode="best_effort"))
    assert reg.protected_blocks == 0
    assert reg.admission_problem("o", prefix("q", 60), pinned=False) is None


def test_global_and_owner_budgets() -> None:
    reg = registry(usable=80, fraction=0.5, owner_fraction=0.375)  # caps 40 and 30
    assert reg.protected_cap == 40 and reg.owner_protected_cap == 30
    reg.add(record("a1", prefix("a", 25), owner="alice"))
    owner_problem = reg.admission_problem("alice", prefix("x", 10), pinned=True)
    assert owner_problem is not None and owner_problem.startswith("owner budget")
    global_problem = reg.admission_problem("bob", prefix("y", 20), pinned=True)
    assert global_problem is not None and global_problem.startswith("protected-block budget")
    # sharing blocks costs nothing extra
    assert reg.admission_problem("alice", prefix("a", 25), pinned=True) is None


def test_claim_ids_are_single_use_and_bounded() -> None:
    reg = registry()
    rec = record("a", prefix("p", 3))
    reg.add(rec)
    reg.retire(rec)
    assert reg.is_decided("a") and "a" not in reg.claims
    for i in range(19):
        reg.decide(f"x{i}", f"owner-{i % 3}")
    problem = reg.spend_problem("o")
    assert problem == "claim registry full: 20 claim ids already decided"


def test_each_owner_has_its_own_quota_of_ids_and_held_claims() -> None:
    reg = ClaimRegistry(
        usable_blocks=100,
        protected_fraction=0.5,
        owner_protected_fraction=0.5,
        max_claims=8,
        max_decided_claim_ids=20,
        max_claims_per_owner=2,
        max_decided_claim_ids_per_owner=5,
    )
    for i in range(5):
        reg.decide(f"m{i}", "mallory")
    assert reg.spend_problem("mallory") == "owner quota: 5 claim ids already decided for this owner"
    assert reg.spend_problem("alice") is None
    first, second = record("a1", prefix("p", 1), owner="alice"), record("a2", prefix("q", 1), owner="alice")
    reg.add(first)
    reg.add(second)
    assert reg.admission_problem("alice", prefix("r", 1), pinned=False) == (
        "owner quota: 2 claims held by this owner"
    )
    assert reg.admission_problem("bob", prefix("r", 1), pinned=False) is None
    reg.retire(first)
    reg.retire(first)  # idempotent: the count is not taken twice
    assert reg.admission_problem("alice", prefix("r", 1), pinned=False) is None


def test_overlap_credits_resident_and_sourced_blocks_only() -> None:
    reg = registry()
    rec = record("a", prefix("p", 10))
    reg.add(rec)
    for position in range(4):
        rec.hold(position, object())
    request = [*prefix("p", 10), "own1", "own2"]
    overlap = reg.overlap(request, sourced=())
    assert overlap.shared == 10 and overlap.credited == 4 and overlap.pending == 6
    assert overlap.credited_hashes == frozenset(prefix("p", 4))
    as_source = reg.overlap(request, sourced=("a",))
    assert as_source.credited == 10 and as_source.pending == 0
    assert reg.overlap(["zzz", *prefix("p", 10)], sourced=()).shared == 0
    # a diverging request shares only the common prefix
    assert reg.overlap([*prefix("p", 6), "x6", "x7"], sourced=("a",)).credited == 6


@pytest.mark.parametrize("size", range(0, 9))
@pytest.mark.parametrize("common", range(0, 9))
def test_agreement_is_the_common_prefix_of_two_chains(size: int, common: int) -> None:
    left = [f"c{i}" for i in range(min(common, size))] + [f"l{i}" for i in range(min(common, size), size)]
    right = [f"c{i}" for i in range(common)] + [f"r{i}" for i in range(common, 8)]
    assert agreement(left, right) == min(common, size)


def test_blocking_names_claims_with_an_unshared_block() -> None:
    reg = registry()
    reg.add(record("a", prefix("p", 4)))
    reg.add(record("b", prefix("q", 4)))
    overlap = reg.overlap([*prefix("p", 4), "own"], sourced=("a",))
    assert [r.claim_id for r in reg.blocking(overlap)] == ["b"]
    unsourced = reg.overlap([*prefix("p", 4), "own"], sourced=())  # a's blocks are not pinned
    assert [r.claim_id for r in reg.blocking(unsourced)] == ["a", "b"]


def test_freed_by_counts_only_blocks_no_one_else_protects() -> None:
    reg = registry()
    a, b = record("a", prefix("p", 10)), record("b", prefix("p", 4))
    reg.add(a)
    reg.add(b)
    assert reg.freed_by([a]) == frozenset(prefix("p", 10)[4:])
    assert reg.freed_by([a, b]) == frozenset(prefix("p", 10))


class RegistryIndexes(RuleBasedStateMachine):
    """The incremental indexes always equal a recount from the claims."""

    def __init__(self) -> None:
        super().__init__()
        self.reg = registry(usable=1000, fraction=1.0, owner_fraction=1.0)
        self.count = 0

    @rule(tag=st.sampled_from("pqr"), size=st.integers(1, 6), owner=st.sampled_from(["o1", "o2"]))
    def add(self, tag: str, size: int, owner: str) -> None:
        self.count += 1
        self.reg.add(record(f"c{self.count}", prefix(tag, size), owner=owner))

    @precondition(lambda self: any(r.protected for r in self.reg.claims.values()))
    @rule(data=st.data())
    def pin(self, data: st.DataObject) -> None:
        rec = data.draw(st.sampled_from([r for r in self.reg.claims.values() if r.protected]))
        position = rec.leading_blocks
        if position < len(rec.slots):
            rec.hold(position, object())
            self.reg.pins_changed()

    @precondition(lambda self: any(r.held_count for r in self.reg.claims.values()))
    @rule(data=st.data())
    def lose(self, data: st.DataObject) -> None:
        rec = data.draw(st.sampled_from([r for r in self.reg.claims.values() if r.held_count]))
        position = data.draw(st.sampled_from([p for p, b in enumerate(rec.slots) if b is not None]))
        rec.drop(position)
        self.reg.pins_changed()

    @precondition(lambda self: any(r.protected for r in self.reg.claims.values()))
    @rule(data=st.data(), retire=st.booleans())
    def settle(self, data: st.DataObject, retire: bool) -> None:
        rec = data.draw(st.sampled_from([r for r in self.reg.claims.values() if r.protected]))
        self.reg.unprotect(rec)
        self.reg.ledger.advance(rec, Event.release if retire else Event.demote)
        if retire:
            self.reg.retire(rec)

    @invariant()
    def indexes_match_a_recount(self) -> None:
        protected = [r for r in self.reg.claims.values() if r.protected]
        assert self.reg.protected_blocks == len({h for r in protected for h in r.hashes})
        for rec in self.reg.claims.values():
            assert rec.held_count == sum(b is not None for b in rec.slots)
            leading = next((p for p, b in enumerate(rec.slots) if b is None), len(rec.slots))
            assert rec.leading_blocks == leading
        for owner in ("o1", "o2"):
            mine = {h for r in protected if r.owner == owner for h in r.hashes}
            assert self.reg.owner_protected_blocks(owner) == len(mine)


TestRegistryIndexes = RegistryIndexes.TestCase
TestRegistryIndexes.settings = settings(
    max_examples=60, stateful_step_count=25, derandomize=True, database=None, deadline=None
)
