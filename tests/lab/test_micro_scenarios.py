"""Every number of issue 3's scenario list, produced by running the MicroRuntime.

Expected values here come from the seed papers (001 tables 6-10, L1-L7; 002; 003 section 8.6)
or from working vLLM's free-queue rules by hand, never from running the code under test.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from kvclaims.lab.micro_scenarios import SCENARIOS, ScenarioResult, run_scenario
from kvclaims.microruntime.tracing import write_trace
from kvclaims.refinement import check_trace
from kvclaims.spec.errors import InputError
from kvclaims.spec.trace import TraceEvent, TraceHeader

EVENT = TypeAdapter(TraceEvent)


@cache
def scenario(name: str) -> ScenarioResult:
    return run_scenario(name)


def summary(name: str) -> dict[str, Any]:
    return scenario(name).summary


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_trace_line_is_trace_v1(name: str) -> None:
    for run in scenario(name).runs:
        TraceHeader.model_validate(run.header)
        seqs = [EVENT.validate_python(event).seq for event in run.events]
        assert seqs == sorted(set(seqs)), "seq must strictly increase"


@pytest.mark.parametrize("name", [n for n in SCENARIOS if not n.startswith("control-")])
def test_every_scenario_trace_is_accepted(name: str, tmp_path: Path) -> None:
    for run in scenario(name).runs:
        verdict = check_trace(write_trace(tmp_path / f"{run.label}.ndjson", run.header, run.events))
        assert verdict.outcome.value == "accepted", verdict.counterexample


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("control-silent-harm", "no_silent_harm"),
        ("control-null-block-shortfall", "capacity_arithmetic"),
        ("control-fallback-recompute", "offload_order"),
    ],
)
def test_negative_controls_are_rejected_for_their_defect(name: str, rule: str, tmp_path: Path) -> None:
    (run,) = scenario(name).runs
    verdict = check_trace(write_trace(tmp_path / "control.ndjson", run.header, run.events))
    assert verdict.outcome.value == "rejected"
    assert verdict.counterexample.rule.value == rule


def test_native_serves_70_by_evicting_50_of_60_residents_without_claim_harm() -> None:
    numbers = summary("native-60-70-80")
    assert numbers["active_outcome"] == "admitted"
    assert numbers["resident_blocks_evicted"] == 50
    assert numbers["resident_blocks_remaining"] == 10
    assert numbers["claims_accepted"] == 0
    assert numbers["claim_harm_events"] == 0


def test_hard_claim_refuses_with_the_capacity_proof() -> None:
    numbers = summary("hard-claim-60-70-80")
    assert numbers["active_outcome"] == "refused"
    assert numbers["resident_blocks_remaining"] == 60
    assert numbers["capacity_proof"] == {
        "blocking_claim_ids": ["claim:resident"],
        "protected_resident_blocks": 60,
        "active_live_blocks_required": 70,
        "resident_plus_active_blocks": 130,
        "usable_blocks": 80,
        "capacity_shortfall_blocks": 50,
    }


def test_soft_priority_loses_residents_and_reports_loss_not_harm() -> None:
    numbers = summary("soft-priority-60-70-80")
    assert numbers["resident_blocks_evicted"] == 50
    assert numbers["claim_lost_events"] == 1
    assert numbers["claim_harm_events"] == 0


SEED_SWEEP = {80: 50, 90: 40, 100: 30, 110: 20, 120: 10, 130: 0, 150: 0}
"""Seed 001 figure 4: resident blocks lost by native and write no-admit per usable pool."""


def test_capacity_sweep_matches_the_seed() -> None:
    rows = {(r["usable_blocks"], r["policy"]): r for r in summary("capacity-sweep")["rows"]}
    for pool, lost in SEED_SWEEP.items():
        for policy in ("native_lru", "write_no_admit"):
            assert rows[pool, policy]["active_outcome"] == "admitted"
            assert rows[pool, policy]["resident_blocks_lost"] == lost
        hard = rows[pool, "hard_protected"]
        assert hard["resident_blocks_lost"] == 0 and hard["residents_intact"]
        if pool < 130:
            assert hard["active_outcome"] == "refused"
            assert hard["capacity_shortfall_blocks"] == 130 - pool
        else:
            assert hard["active_outcome"] == "admitted"
            assert hard["capacity_shortfall_blocks"] is None


def test_chunked_prefill_accumulates_and_only_a_bound_lets_both_fit() -> None:
    numbers = summary("chunked-prefill")
    assert numbers["full_attention_live_after_each_chunk"] == [20, 40, 60, 70]
    assert numbers["with_hard_claim"]["active_outcome"] == "refused"
    assert numbers["with_hard_claim"]["capacity_proof"]["capacity_shortfall_blocks"] == 50
    bounded = numbers["bounded_live"]
    assert bounded["active_outcome"] == "admitted"
    assert max(bounded["live_after_each_chunk"]) <= bounded["live_bound_blocks"] == 20
    assert bounded["resident_blocks_remaining"] == 60
    assert bounded["claim_phase"] == "materialized"
    assert bounded["recomputed_blocks"] == 70 - 20  # every chunk but the last window is shed


def q1(policy: str) -> dict[str, Any]:
    return next(row for row in summary("materialization-q1")["rows"] if row["policy"] == policy)


def test_q1_complete_prefix_and_value_density_keep_640_640_0_with_value_18() -> None:
    for policy in ("complete_prefix_fair_share", "value_density", "oracle"):
        row = q1(policy)
        assert row["cached_tokens"] == {"A": 640, "B": 640, "C": 0}
        assert row["thresholded_value"] == 18.0


def test_q1_naive_fair_share_retains_blocks_with_value_zero() -> None:
    """Hand derivation with vLLM's order (pool 100, shares 33/33/20 retained by priority):
    prefills leave 14 ordinary free blocks, so 20 blocks of pressure evict all 14 and then
    A's protected blocks 32..27 (tail first): A keeps 27 leading blocks. A's return allocates
    its missing 33 blocks: 20 pressure blocks, then B's retained 32..20, leaving B 20. B's
    return allocates 40: A's 27 ordinary blocks, then C's retained 19..7, leaving C 7.
    The seed reports 480 / 320 / 304 (30 / 20 / 19 blocks; 304 is vLLM's last-token cap
    on C's 20 intact blocks); B matches, A and C differ (see the report)."""
    row = q1("naive_fair_share")
    assert row["thresholded_value"] == 0
    assert row["total_cached_tokens"] > 0
    assert row["first_missing_block"] == {"A": 27, "B": 20, "C": 7}
    assert row["cached_tokens"]["B"] == 320


def test_q1_native_and_salted_keep_nothing() -> None:
    for policy in ("native_lru", "salted"):
        assert q1(policy)["total_cached_tokens"] == 0
        assert q1(policy)["thresholded_value"] == 0


def test_write_no_admit_stops_bulky_reuse_but_residents_still_die() -> None:
    rows = {row["policy"]: row for row in summary("write-no-admit")["rows"]}
    assert rows["native_lru"]["bulky_repeat_cached_tokens"] == 1120
    assert rows["write_no_admit"]["bulky_repeat_cached_tokens"] == 0
    for row in rows.values():
        assert row["bulky_served"] == "admitted"
        assert row["small_hot_cached_tokens"] == 0
        assert row["residents_meeting_30_block_threshold"] == 0


def test_demotion_before_loss_is_zero_harm_and_50_post_release_losses() -> None:
    numbers = summary("demote-before-loss")
    assert numbers["active_outcome"] == "admitted"
    assert numbers["claim_demoted_events"] == 1
    assert numbers["claim_harm_events"] == 0
    assert numbers["post_release_block_losses"] == 50


def test_expiry_before_loss_is_zero_harm_and_50_post_expiry_losses() -> None:
    numbers = summary("expire-before-loss")
    assert numbers["first_outcome"] == "deferred"
    assert numbers["first_deferral_proof"]["capacity_shortfall_blocks"] == 50
    assert numbers["request_admitted_at_step"] == numbers["claim_expiry_step"] == 3
    assert numbers["claim_harm_events"] == 0
    assert numbers["post_expiry_block_losses"] == 50


def test_materialization_failure_59_surviving_0_leading_60_required() -> None:
    numbers = summary("materialization-failure")
    assert (numbers["surviving_blocks"], numbers["leading_blocks"], numbers["required_blocks"]) == (59, 0, 60)
    assert numbers["reuse_cached_blocks"] == 0
    assert numbers["predicate_satisfied"] is False


def test_live_scheduler_pressure_computes_the_shortfall_the_seed_got_wrong() -> None:
    numbers = summary("live-scheduler-pressure")
    assert numbers["first_outcome"] == "deferred"
    assert (numbers["deferred_events"], numbers["refused_events"]) == (1, 1)
    assert numbers["materialized_leading_blocks"] == 40
    proof = numbers["capacity_proof"]
    assert proof["blocking_claim_ids"] == ["claim:live-resident"]
    assert (proof["protected_resident_blocks"], proof["active_live_blocks_required"]) == (40, 46)
    assert proof["resident_plus_active_blocks"] == 86
    assert proof["usable_blocks"] == 68
    assert proof["capacity_shortfall_blocks"] == 86 - 68 != numbers["seed_reported_shortfall"]


def test_offload_restores_before_reuse_and_fails_closed() -> None:
    numbers = summary("offload-restore")
    assert numbers["active_outcome"] == "admitted"
    assert numbers["claim_blocks_evicted_while_offloaded"] == 50
    assert numbers["path_a"] == {
        "restored_blocks_from_host": 50,
        "reuse_cached_blocks": 60,
        "predicate_satisfied": True,
    }
    assert numbers["path_b"] == {
        "request_outcome": "refused",
        "restoration_outcome": "refusal",
        "refusal_reason": "restoration_failed",
        "refusal_blocking_claim_ids": ["claim:offload"],
    }


def test_hybrid_corruption_keeping_the_payload_hash_ends_in_restoration_failure() -> None:
    numbers = summary("hybrid-two-key-resume")
    assert numbers["turn_2"] == {"value_hash_matches": True, "predicate_satisfied": True}
    turn_3 = numbers["turn_3"]
    assert turn_3["payload_hash_matches"] is True
    assert turn_3["value_hash_matches"] is False
    assert turn_3["restoration_failed"] == ["refusal"]
    assert turn_3["request_outcome"] == "refused"
    assert turn_3["satisfied_reuses"] == 0


def test_continuum_stock_pinning_exhausts_the_pool_and_stalls_unattributed() -> None:
    numbers = summary("continuum-ttl-pinning")
    stock, contract = numbers["stock_ttl_pin"], numbers["contract_claims"]
    assert stock["peak_pinned_fraction"] == 1.0
    assert stock["steps_nothing_ran_while_requests_waited"] > 0
    assert stock["unattributed_waiting_request_steps"] > 0
    assert stock["claims_accepted"] == stock["attributed_deferrals"] == stock["attributed_refusals"] == 0
    assert contract["peak_pinned_blocks"] <= numbers["usable_blocks"] // 2
    assert contract["claims_rejected"] > 0 and contract["claims_accepted"] > 0
    assert contract["steps_nothing_ran_while_requests_waited"] == 0
    assert contract["claim_harm_events"] == 0
    assert stock["jobs_completed"] == contract["jobs_completed"] == numbers["jobs"]
    assert contract["steps_run"] < stock["steps_run"]


def test_arbiter_reports_route_and_capacity_as_unavailable_then_bounds_live_kv() -> None:
    numbers = summary("arbiter-actions")
    (decision,) = numbers["arbiter"]
    results = {a["action"]: a["result"] for a in decision["actions"]}
    assert results["route_elsewhere"] == results["add_capacity"] == "unavailable"
    assert results["bound_active_live"] == "taken"
    assert numbers["active_outcome"] == "admitted"
    assert numbers["resident_blocks_remaining"] == 60


@pytest.mark.parametrize("pool", [0, -5])
def test_a_zero_or_negative_pool_is_an_input_error(pool: int) -> None:
    with pytest.raises(InputError, match="positive number of usable blocks"):
        run_scenario("hard-claim-60-70-80", usable_blocks=pool)


def test_a_pool_smaller_than_the_claim_is_an_input_error() -> None:
    with pytest.raises(InputError, match="larger than the pool"):
        run_scenario("hard-claim-60-70-80", usable_blocks=50)


def test_unknown_scenarios_and_fixed_pools_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown scenario"):
        run_scenario("no-such-scenario")
    with pytest.raises(InputError, match="fixed pools"):
        run_scenario("capacity-sweep", usable_blocks=100)
