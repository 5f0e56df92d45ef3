"""Claim-filtered failure injection: off unless enabled, by claim, unclaimed only by its switch."""

from __future__ import annotations

import pytest

from kvclaims.vllm_binding.faults import LoadFaultInjector, LoadFaultPlan


def test_a_default_plan_fails_nothing() -> None:
    plan = LoadFaultPlan()
    assert not plan.selects(["claim:A"]) and not plan.selects([])


def test_a_targeted_plan_fails_only_loads_restoring_its_claim() -> None:
    plan = LoadFaultPlan(enabled=True, target_claim="claim:A")
    assert plan.selects(["claim:A"]) and plan.selects(["claim:B", "claim:A"])
    assert not plan.selects(["claim:B"])
    assert not plan.selects([]), "an unclaimed load needs the separate switch"


def test_an_untargeted_plan_fails_every_claimed_load_but_still_no_unclaimed_one() -> None:
    plan = LoadFaultPlan(enabled=True)
    assert plan.selects(["claim:X"]) and not plan.selects([])
    assert LoadFaultPlan(enabled=True, unclaimed=True).selects([])


def test_the_injector_counts_and_stops_a_transient_fault() -> None:
    injector = LoadFaultInjector(LoadFaultPlan(enabled=True, target_claim="claim:A", max_failures=2))
    decisions = [injector.should_fail(["claim:A"]) for _ in range(4)]
    assert decisions == [True, True, False, False] and injector.failures == 2
    assert not injector.should_fail(["claim:B"]) and injector.failures == 2
    injector.set_plan(LoadFaultPlan(enabled=True))
    assert injector.failures == 0 and injector.should_fail(["claim:B"])


def test_a_persistent_fault_never_stops() -> None:
    injector = LoadFaultInjector(LoadFaultPlan(enabled=True, target_claim="claim:A"))
    assert all(injector.should_fail(["claim:A"]) for _ in range(100))


@pytest.mark.parametrize(
    "data",
    [
        "yes",
        {"enabled": "true"},
        {"enabled": True, "target_claim": 3},
        {"enabled": True, "max_failures": 0},
        {"enabled": True, "max_failures": 1.5},
        {"enabled": True, "surprise": 1},
        {"enabled": True, "target_claim": ""},
        {"enabled": True, "stores": 1},
        {"enabled": True, "late_by": 0},
        {"enabled": True, "late_by": True},
        {"enabled": True, "late_by": "3"},
    ],
)
def test_malformed_plans_are_refused(data: object) -> None:
    with pytest.raises(ValueError):
        LoadFaultPlan.from_mapping(data)


def test_a_plan_round_trips_through_plain_data() -> None:
    plan = LoadFaultPlan(enabled=True, target_claim="claim:A", unclaimed=True, max_failures=3)
    assert LoadFaultPlan.from_mapping(plan.to_dict()) == plan
    late = LoadFaultPlan(enabled=True, stores=True, late_by=2)
    assert LoadFaultPlan.from_mapping(late.to_dict()) == late
    assert LoadFaultPlan.from_mapping(None) == LoadFaultPlan()


def test_a_store_plan_selects_only_claimed_stores_and_never_a_load() -> None:
    injector = LoadFaultInjector(LoadFaultPlan(enabled=True, stores=True, unclaimed=True))
    assert not injector.should_fail(["claim:A"]), "a store plan fails no load"
    assert not injector.should_fail([], store=True), "a store writing no claim's chunk is never selected"
    assert injector.should_fail(["claim:A"], store=True) and injector.failures == 1
    loads = LoadFaultInjector(LoadFaultPlan(enabled=True))
    assert not loads.should_fail(["claim:A"], store=True), "a load plan fails no store"
