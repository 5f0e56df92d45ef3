"""The claim registry: single-use ids, budgets, protected / resident indexes, overlap."""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvclaims.spec.claims import CacheIdentity, ResidentClaimInput
from kvclaims.spec.vocabulary import ClaimState
from kvclaims.vllm_binding.registry import ClaimRecord, ClaimRegistry

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
        keys=tuple(hashes),
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
    reg.claims["a"].state = ClaimState.demoted
    assert reg.protected_blocks == 15
    reg.unprotect(reg.claims["b"])
    reg.claims["b"].state = ClaimState.demoted
    assert reg.protected_blocks == 0


def test_best_effort_claims_protect_nothing() -> None:
    reg = registry()
    reg.add(record("a", prefix("p", 10), mode="best_effort"))
    assert reg.protected_blocks == 0
    assert reg.admission_problem("o", prefix("q", 60), preserving=False) is None


def test_global_and_owner_budgets() -> None:
    reg = registry(usable=80, fraction=0.5, owner_fraction=0.375)  # caps 40 and 30
    assert reg.protected_cap == 40 and reg.owner_protected_cap == 30
    reg.add(record("a1", prefix("a", 25), owner="alice"))
    owner_problem = reg.admission_problem("alice", prefix("x", 10), preserving=True)
    assert owner_problem is not None and owner_problem.startswith("owner budget")
    global_problem = reg.admission_problem("bob", prefix("y", 20), preserving=True)
    assert global_problem is not None and global_problem.startswith("protected-block budget")
    # sharing blocks costs nothing extra
    assert reg.admission_problem("alice", prefix("a", 25), preserving=True) is None


def test_claim_ids_are_single_use_and_bounded() -> None:
    reg = registry()
    rec = record("a", prefix("p", 3))
    reg.add(rec)
    reg.retire(rec)
    assert reg.is_decided("a") and "a" not in reg.claims
    for i in range(19):
        reg.decide(f"x{i}")
    problem = reg.admission_problem("o", prefix("q", 1), preserving=True)
    assert problem is not None and "already decided" in problem


def test_overlap_credits_resident_and_sourced_blocks_only() -> None:
    reg = registry()
    rec = record("a", prefix("p", 10))
    reg.add(rec)
    for position in range(4):
        rec.slots[position] = object()
        reg.set_resident(rec, position, True)
    request = [*prefix("p", 10), "own1", "own2"]
    overlap = reg.overlap(request, sourced=())
    assert overlap.credited == frozenset(prefix("p", 4)) and overlap.pending == 6
    as_source = reg.overlap(request, sourced=("a",))
    assert as_source.credited == frozenset(prefix("p", 10)) and as_source.pending == 0
    assert reg.overlap(["zzz", *prefix("p", 10)], sourced=()).credited == frozenset()


def test_blocking_names_claims_with_an_unshared_block() -> None:
    reg = registry()
    reg.add(record("a", prefix("p", 4)))
    reg.add(record("b", prefix("q", 4)))
    names = [r.claim_id for r in reg.blocking(frozenset(prefix("p", 4)))]
    assert names == ["b"]


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
            rec.slots[position] = object()
            self.reg.set_resident(rec, position, True)

    @precondition(lambda self: any(r.protected for r in self.reg.claims.values()))
    @rule(data=st.data(), retire=st.booleans())
    def settle(self, data: st.DataObject, retire: bool) -> None:
        rec = data.draw(st.sampled_from([r for r in self.reg.claims.values() if r.protected]))
        self.reg.unprotect(rec)
        rec.state = ClaimState.released if retire else ClaimState.demoted
        if retire:
            self.reg.retire(rec)

    @invariant()
    def indexes_match_a_recount(self) -> None:
        protected = [r for r in self.reg.claims.values() if r.protected]
        assert self.reg.protected_blocks == len({h for r in protected for h in r.hashes})
        resident = Counter(r.hashes[p] for r in protected for p, _ in r.held())
        assert dict(self.reg._resident) == dict(resident)
        for owner in ("o1", "o2"):
            mine = {h for r in protected if r.owner == owner for h in r.hashes}
            assert self.reg.owner_protected_blocks(owner) == len(mine)


TestRegistryIndexes = RegistryIndexes.TestCase
TestRegistryIndexes.settings = settings(
    max_examples=60, stateful_step_count=25, derandomize=True, database=None
)
