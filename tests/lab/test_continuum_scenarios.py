"""Seed 003 on vLLM's real scheduler: the Continuum compatibility mode's claim outcomes, and
the multi-turn agent comparison of stock-Continuum-like pins with pins kept as claims."""

from __future__ import annotations

import pytest

from kvclaims.lab.continuum_scenarios import AGENT_POOL, JOBS, PIN_MS
from kvclaims.lab.scheduler_scenarios import ScenarioResult

pytestmark = pytest.mark.vllm
# (refinement's verdict on both traces: test_scheduler_scenarios' every-trace test)


def test_stock_like_pins_exhaust_the_pool_and_claims_keep_it_bounded(
    results: dict[str, ScenarioResult],
) -> None:
    numbers = results["continuum-agent-jobs"].numbers
    stock, claims = numbers["stock_continuum_like_pins"], numbers["claims"]
    # 8 jobs pinning up to 25 blocks each want 200 > 128 blocks: stock pins take nearly all of
    # the pool, and pins kept while their job waits never lapse: the jobs stall for good.
    assert stock["peak_pinned_blocks"] >= AGENT_POOL - 8
    assert stock["jobs_completed"] < JOBS
    assert stock["requests_left_waiting"] > 0 and stock["stuck"] is True
    assert stock["steps_nothing_ran_while_requests_waited"] > 0
    # Claims: the protected budget (half the pool) bounds pins; pins that do not fit are
    # rejected (a claim outcome), every job completes and nothing stalls unattributed.
    assert claims["peak_pinned_blocks"] <= AGENT_POOL // 2
    assert claims["jobs_completed"] == JOBS and claims["stuck"] is False
    assert claims["steps_nothing_ran_while_requests_waited"] == 0
    assert claims["rejected"] > 0 and claims["accepted"] > 0
    assert claims["satisfied_pin_reuses"] > 0
    assert claims["accepted"] == claims["materialized"] == claims["released"] + claims["expired"]
    assert claims["harmed"] == 0


def test_ttl_pins_expire_are_kept_while_their_job_waits_and_are_demoted_for_room(
    results: dict[str, ScenarioResult],
) -> None:
    numbers = results["continuum-ttl-pin"].numbers
    # b has no request waiting: its pin lapses at the first step at or after 2000 virtual ms.
    assert PIN_MS <= numbers["b_expired_after_ms"] < PIN_MS + 20
    # a's last turn waited behind a 3-second request: its pin was kept past the TTL and the
    # turn was served from it (a 72-token first prompt: 4 full blocks).
    assert numbers["a_reused_after_ms"] > PIN_MS
    assert numbers["a_expired_before_its_reuse"] is False
    assert numbers["a_reuse_satisfied"] is True
    assert numbers["a_reuse_cached_blocks"] == 72 // 16
    # c pinned 26 blocks; a 40-block prompt with 160 output tokens needs 50 blocks, and
    # 26 + 50 > 64: the pin is demoted (reported) before any of its blocks is evicted.
    assert numbers["c_footprint_blocks"] == 26
    assert numbers["c_demoted_before_first_loss"] is True
    assert numbers["c_blocks_lost_after_demotion"] > 0
    assert numbers["pinned_blocks_at_end"] == 0
    assert numbers["harmed"] == 0
    stops = numbers["stop_reasons"]
    assert stops["a-t0"].startswith("kvclaims:claim_accepted:continuum-pin:a:")
    assert stops["a-t1"] == stops["a-t0"].replace("claim_accepted", "claim_released")


def test_a_silent_ttl_lapse_is_what_the_control_measures(results: dict[str, ScenarioResult]) -> None:
    """The control's pin lapsed without a demotion or expiry and pressure then evicted every
    pinned block (refinement rejects it for no_silent_harm: test_scheduler_scenarios)."""
    numbers = results["control-continuum-silent-unpin"].numbers
    assert numbers["pins_lapsed"] == 1 and numbers["outcomes_reported"] == 0
    assert (
        numbers["claim_blocks_removed"] == numbers["pin_footprint"] == (9 * 16 - 8) // 16
    )  # turn 1: 9 blocks less its output
