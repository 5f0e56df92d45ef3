"""Scheduler-lane scenarios on vLLM's real scheduler: every number, every trace checked.

Expected numbers are the scenarios' arithmetic (60 + 70 = 130 > 80, ...), written here
independently of the code under test; the measured numbers come from vLLM's block pool and
outputs and from the trace's events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvclaims.lab.scheduler_scenarios import HOSTILE_METADATA, SCENARIOS, ScenarioResult
from kvclaims.lab.seed_cases import SWEEP_POOLS
from kvclaims.refinement import check_trace

pytestmark = pytest.mark.vllm

RESIDENT, ACTIVE = 60, 70


def numbers(results: dict[str, ScenarioResult], name: str) -> dict[str, Any]:
    return results[name].numbers


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_trace_gets_its_expected_verdict(results: dict[str, ScenarioResult], name: str) -> None:
    verdict = check_trace(results[name].trace_path)
    if SCENARIOS[name].control:
        assert verdict.outcome == "rejected", verdict.reason
        assert "no_silent_harm" in verdict.reason
    else:
        assert verdict.outcome == "accepted", verdict.reason


def test_native_eviction_loses_resident_blocks_without_claim_harm(results: dict[str, ScenarioResult]) -> None:
    got = numbers(results, "native-60-70-80")
    assert got["resident_blocks_cached"] == RESIDENT
    assert got["active_finish_reason"] == "length"  # the active request is served
    assert got["resident_blocks_evicted"] == RESIDENT + ACTIVE - 80  # 50 victims
    assert got["resident_leading_blocks_after"] == RESIDENT - (RESIDENT + ACTIVE - 80)  # tail evicted first
    assert got["claims_accepted"] == 0 and got["harm_events"] == 0


@pytest.mark.parametrize("name", ["hard-60-70-80", "hard-60-70-80-async"])
def test_hard_claim_refuses_the_infeasible_prefill(results: dict[str, ScenarioResult], name: str) -> None:
    got = numbers(results, name)
    assert got["active_refused"] is True
    assert got["active_finish_reason"] == "abort"
    assert got["active_stop_reason"].startswith("kvclaims:refused:capacity:claim:resident;others=0;")
    assert got["blocking_claim_ids"] == ["claim:resident"]
    assert got["protected_resident_blocks"] == RESIDENT
    assert got["active_live_blocks_required"] == ACTIVE
    assert got["resident_plus_active_blocks"] == RESIDENT + ACTIVE == 130
    assert got["capacity_shortfall_blocks"] == 130 - 80 == 50
    assert got["resident_leading_blocks_after"] == RESIDENT  # nothing evicted
    assert got["reuse_cached_blocks"] == RESIDENT and got["reuse_predicate_satisfied"] is True
    assert got["harm_events"] == 0


def test_capacity_sweep(results: dict[str, ScenarioResult]) -> None:
    rows = []
    for usable in SWEEP_POOLS:
        native = numbers(results, f"sweep-native-{usable}")
        hard = numbers(results, f"sweep-hard-{usable}")
        lost = max(0, RESIDENT + ACTIVE - usable)
        assert native["resident_blocks_evicted"] == lost
        assert native["resident_leading_blocks_after"] == RESIDENT - lost
        assert native["active_finish_reason"] == "length"
        assert hard["resident_leading_blocks_after"] == RESIDENT
        assert hard["active_refused"] is (usable < RESIDENT + ACTIVE)
        assert hard.get("capacity_shortfall_blocks", 0) == lost
        assert native["harm_events"] == hard["harm_events"] == 0
        rows.append((usable, lost, hard["active_refused"]))
    assert [r for r in rows if not r[2]] == [(130, 0, False), (140, 0, False), (150, 0, False)]


@pytest.mark.parametrize("name", ["live-pressure-40-46", "live-pressure-40-46-async"])
def test_live_pressure_defers_then_refuses_with_the_right_shortfall(
    results: dict[str, ScenarioResult], name: str
) -> None:
    got = numbers(results, name)
    assert got["deferral_events"] == 1  # reported once; repeated deferrals with the same proof are quiet
    assert got["deferred_steps"] == 3  # max_deferral_steps
    assert got["active_refused"] is True
    assert got["protected_resident_blocks"] == 40
    assert got["active_live_blocks_required"] == 46
    assert got["resident_plus_active_blocks"] == 86
    assert got["usable_blocks"] == 68
    assert got["capacity_shortfall_blocks"] == 86 - 68 == 18  # the seed's anchor said 19


def test_demotion_comes_before_any_loss(results: dict[str, ScenarioResult]) -> None:
    got = numbers(results, "demote-before-loss")
    assert got["claim_demoted"] and got["demoted_before_first_loss"]
    assert got["active_finish_reason"] == "length"
    assert got["claim_blocks_lost_after_demotion"] == RESIDENT + ACTIVE - 80
    assert got["resident_leading_blocks_after"] == 10
    assert got["harm_events"] == 0


@pytest.mark.parametrize("name", ["expire-before-loss", "expire-before-loss-async"])
def test_expiry_ends_the_deferral_and_comes_before_any_loss(
    results: dict[str, ScenarioResult], name: str
) -> None:
    got = numbers(results, name)
    assert got["claim_expired_at_step"] == 12  # accepted at step 0, duration 12 steps
    assert got["active_deferred_at_step"] < got["claim_expired_at_step"]
    assert got["active_admitted_at_step"] == got["claim_expired_at_step"]
    assert got["capacity_shortfall_blocks"] == 50
    assert got["expired_before_first_loss"]
    assert got["claim_blocks_lost_after_expiry"] == 50
    assert got["active_finish_reason"] == "length"
    assert got["harm_events"] == 0


def test_best_effort_loss_is_lost_not_harm(results: dict[str, ScenarioResult]) -> None:
    got = numbers(results, "best-effort-lost")
    assert got["claim_lost"] is True
    assert got["claim_blocks_removed"] == 50
    assert got["lost_at_leading_blocks"] < RESIDENT
    assert got["resident_leading_blocks_after"] == 10
    assert got["harm_events"] == 0


@pytest.mark.parametrize("name", ["defer-until-materialized", "defer-until-materialized-async"])
def test_deferral_until_the_claim_materializes(results: dict[str, ScenarioResult], name: str) -> None:
    got = numbers(results, name)
    assert got["reuser_deferred_at_step"] == 1
    assert got["protected_resident_blocks"] == 40
    assert got["active_live_blocks_required"] == 40 + 38  # the prefix is not guaranteed yet
    assert got["capacity_shortfall_blocks"] == 40 + 78 - 80
    assert got["reuser_admitted_at_step"] > got["claim_materialized_at_step"] - 1
    # At admission vLLM allocated the 40 pinned prefix blocks (credited to the claim) and its
    # first chunk: the lane's 256-token budget is 16 blocks of 16 (not the 38-block peak).
    assert got["reuser_active_live_blocks"] == 256 // 16
    assert got["reuse_cached_blocks"] == 40 and got["reuse_predicate_satisfied"] is True
    assert got["reuser_finish_reason"] == "length"


def test_owner_scope(results: dict[str, ScenarioResult]) -> None:
    got = numbers(results, "owner-scope")
    assert got["foreign_operations_rejected"] == got["foreign_operations"] == 4
    assert got["foreign_requests_served"] == 4
    assert got["foreign_reuse_events"] == 0
    assert got["claim_pinned_blocks_before_release"] == 20
    assert got["claim_leading_blocks_before_release"] == 20
    assert got["released_by_owner"] is True
    reasons = " | ".join(got["rejection_reasons"])
    for op in ("attach", "release", "demote"):
        assert f"{op}: the claim belongs to another owner" in reasons
    assert "already decided" in reasons


def test_budgets(results: dict[str, ScenarioResult]) -> None:
    got = numbers(results, "budgets")
    assert got["accepted"] == ["a1", "b2"]
    assert got["rejected"]["a2"].startswith("owner budget: owner would protect 35")
    assert got["rejected"]["b1"].startswith("protected-block budget: 45")
    assert got["all_requests_served"] is True


def test_hostile_metadata(results: dict[str, ScenarioResult]) -> None:
    got = numbers(results, "hostile-metadata")
    assert got["hostile_rejected"] == got["hostile_requests"] == len(HOSTILE_METADATA)
    assert got["hostile_served"] == len(HOSTILE_METADATA)
    assert all(got["reasons"].values())
    assert got["largest_event_line_bytes"] < 2000  # the megabyte id never reached the trace
    assert "1000000 characters" in got["reasons"]["megabyte-claim-id"]


def test_reset_with_pins_demotes_then_rematerializes(results: dict[str, ScenarioResult]) -> None:
    got = numbers(results, "reset-with-pins")
    assert got["pinned_blocks_before_reset"] == 30
    assert got["reset_succeeded"] is True
    assert got["demoted_before_reset"] == ["claim:sys"]
    assert got["blocks_removed_by_reset"] == 30
    assert got["leading_blocks_after_reset"] == 0
    assert got["rematerialized"] == ["claim:sys", "claim:sys-2"]
    assert got["leading_blocks_after_rematerialization"] == 30
    assert got["harm_events"] == 0


@pytest.mark.parametrize("name", ["kv-load-failure-harm", "kv-load-failure-harm-async"])
def test_invalid_load_eviction_of_pinned_blocks_is_reported_harm(
    results: dict[str, ScenarioResult], name: str
) -> None:
    got = numbers(results, name)
    assert got["loader_finish_reason"] == "error"
    assert got["claim_blocks_removed"] == 20 - 5
    assert got["harm_leading_blocks"] == got["leading_blocks_after"] == 5
    assert got["harm_required_blocks"] == 20
    assert got["harm_events"] == 1


def test_controls_lose_claimed_blocks_silently(results: dict[str, ScenarioResult]) -> None:
    for name in ("control-unenforced-claim", "control-late-demotion"):
        got = numbers(results, name)
        assert got["claims_accepted"] == 1 and got["harm_events"] == 0
        assert got["claim_blocks_removed"] == 50


def test_sync_and_async_measure_the_same(results: dict[str, ScenarioResult]) -> None:
    step_keys = {k for name in SCENARIOS for k in numbers(results, name) if k.endswith("_step")} | {
        "deferred_steps"
    }
    for name in SCENARIOS:
        if name.endswith("-async"):
            sync = {
                k: v for k, v in numbers(results, name.removesuffix("-async")).items() if k not in step_keys
            }
            asynchronous = {k: v for k, v in numbers(results, name).items() if k not in step_keys}
            assert sync == asynchronous, name


def test_kvclaims_check_cli_accepts_a_binding_trace(results: dict[str, ScenarioResult], capsys: Any) -> None:
    from kvclaims.cli import main

    assert main(["check", str(results["hard-60-70-80"].trace_path)]) == 0
    assert main(["check", str(results["control-unenforced-claim"].trace_path)]) != 0
    capsys.readouterr()


def test_scenario_traces_stay_under_the_trace_size_cap(results: dict[str, ScenarioResult]) -> None:
    for result in results.values():
        assert Path(result.trace_path).stat().st_size < 1_000_000
