"""Claim planners: the seed 001 5.1 materialization policies and the contract's admission."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.microruntime.inputs import ClaimSpec
from kvclaims.microruntime.policies import (
    CONTRACT_PROTECTION,
    POLICIES,
    PlanningContext,
    plan_complete_prefix_fair_share,
    plan_in_order,
    plan_naive_fair_share,
    plan_oracle,
    plan_value_density,
)
from kvclaims.spec.vocabulary import ProtectionMode as M

OBJECTS = {"A": 60, "B": 60, "C": 20}
Q1 = [
    ClaimSpec("a", "A", M.soft_priority, 60, 40, owner_scope="t1", value=10.0),
    ClaimSpec("b", "B", M.soft_priority, 60, 40, owner_scope="t2", value=8.0),
    ClaimSpec("c", "C", M.soft_priority, 40, 40, owner_scope="t3", value=4.0),
]


def context(budget: int, objects: dict[str, int] = OBJECTS) -> PlanningContext:
    return PlanningContext(budget, objects, CONTRACT_PROTECTION.__getitem__)


def test_naive_fair_share_splits_the_budget_below_the_threshold() -> None:
    plans = plan_naive_fair_share(Q1, context(100))
    assert [p.protected_blocks for p in plans] == [33, 33, 20]  # 100 // 3, capped by C's length
    assert all(p.accepted for p in plans)


def test_complete_prefix_policies_keep_whole_useful_prefixes_only() -> None:
    for planner in (plan_complete_prefix_fair_share, plan_value_density, plan_oracle):
        plans = planner(Q1, context(100))
        assert [(p.accepted, p.protected_blocks) for p in plans] == [(True, 40), (True, 40), (False, 0)]


def test_fair_rounds_serve_each_owner_before_a_second_claim_of_one_owner() -> None:
    claims = [
        ClaimSpec("x1", "A", M.soft_priority, 40, 40, owner_scope="x", value=9.0),
        ClaimSpec("x2", "B", M.soft_priority, 40, 40, owner_scope="x", value=8.0),
        ClaimSpec("y1", "C", M.soft_priority, 20, 20, owner_scope="y", value=1.0),
    ]
    fair = plan_complete_prefix_fair_share(claims, context(80, {"A": 40, "B": 40, "C": 20}))
    dense = plan_value_density(claims, context(80, {"A": 40, "B": 40, "C": 20}))
    assert [p.accepted for p in fair] == [True, False, True]
    assert [p.accepted for p in dense] == [True, True, False]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 30), st.floats(0, 50, allow_nan=False)), min_size=1, max_size=7),
    st.integers(1, 80),
)
def test_the_oracle_is_the_best_subset(items: list[tuple[int, float]], budget: int) -> None:
    claims = [ClaimSpec(f"c{i}", f"o{i}", M.soft_priority, n, n, value=v) for i, (n, v) in enumerate(items)]
    objects = {c.object_id: c.footprint_blocks for c in claims}
    plans = plan_oracle(claims, context(budget, objects))
    chosen = sum(c.value for c, p in zip(claims, plans, strict=True) if p.accepted)
    assert sum(c.required_blocks for c, p in zip(claims, plans, strict=True) if p.accepted) <= budget
    best = max(
        sum(c.value for c in subset)
        for r in range(len(claims) + 1)
        for subset in combinations(claims, r)
        if sum(c.required_blocks for c in subset) <= budget
    )
    assert abs(chosen - best) < 1e-6


def test_contract_admission_pins_within_budget_and_rejects_what_it_cannot_do() -> None:
    claims = [
        ClaimSpec("h1", "A", M.hard_protected, 50, 50),
        ClaimSpec("h2", "B", M.hard_protected, 50, 50),
        ClaimSpec("soft", "C", M.soft_priority, 20, 20),
        ClaimSpec("route", "C", M.routed_reuse, 20, 20),
    ]
    plans = plan_in_order(claims, context(80))
    assert [p.accepted for p in plans] == [True, False, True, False]
    assert "budget" in plans[1].reason and "router" in plans[3].reason


def test_native_policies_accept_no_claims_and_every_named_policy_is_consistent() -> None:
    assert not POLICIES["native_lru"].accepts_claims
    for name, policy in POLICIES.items():
        assert policy.name == name
        assert set(policy.protection) == set(M)
