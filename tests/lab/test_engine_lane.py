"""The engine lane: `vllm.LLM` end to end with the binding, one run of every scenario.

One engine serves every scenario of this module (each starts a fresh arbiter on empty prefix
caches). Every trace is checked by refinement here: positives accepted, controls rejected with
their rule or accepted without restoration evidence for the claim they are about. The numbers
come from vLLM's outputs and the traces and are compared with the scenarios' arithmetic
(23 usable blocks of 32 tokens, 4-block claims, a 22-block pressure prompt).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvclaims.spec.tables import MODE_BUNDLES, OBLIGATION_CODES
from kvclaims.spec.vocabulary import ProtectionMode

pytestmark = pytest.mark.vllm

BLOCK = 32


@dataclass
class Checked:
    numbers: dict[str, Any]
    trace: Path
    outcome: str
    rule: str | None
    reason: str
    witnesses: set[str]
    evidence: list[tuple[str, list[str]]]


@pytest.fixture(scope="module")
def lane() -> Any:
    from conftest import require_vllm

    require_vllm()
    from kvclaims.lab.engine_lane import EngineLane, EngineSpec

    engine = EngineLane(EngineSpec(capture_kv_events=True))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def runs(lane: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Checked]:
    from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS, run_engine_scenario
    from kvclaims.refinement import check_trace
    from kvclaims.refinement.evidence import evidence_items

    out = tmp_path_factory.mktemp("engine-lane")
    checked = {}
    for name in ENGINE_SCENARIOS:
        result = run_engine_scenario(lane, name, out / f"{name}.ndjson")
        verdict = check_trace(result.trace_path)
        items = (
            evidence_items(verdict, result.trace_path, relative_to=out)
            if verdict.outcome == "accepted"
            else []
        )
        checked[name] = Checked(
            numbers=result.numbers,
            trace=result.trace_path,
            outcome=str(verdict.outcome),
            rule=str(verdict.rule) if verdict.rule else None,
            reason=verdict.reason,
            witnesses={w.kind.value for w in verdict.witnesses},
            evidence=[(item.obligation.value, list(item.anchor.claim_ids)) for item in items],
        )
    return checked


def test_every_scenario_gets_the_verdict_it_expects(runs: dict[str, Checked]) -> None:
    from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS, judge

    problems = {
        name: judge(ENGINE_SCENARIOS[name], run.outcome, run.rule, run.evidence) for name, run in runs.items()
    }
    assert {n: p for n, p in problems.items() if p} == {}, {
        n: runs[n].reason for n in problems if problems[n]
    }
    assert sum(s.control for s in ENGINE_SCENARIOS.values()) == 5


def test_path_a_offload_restore_then_a_satisfied_reuse(runs: dict[str, Checked]) -> None:
    n = runs["path-a-restore"].numbers
    assert (n["offloaded"], n["restore_required"], n["restored"], n["restoration_failed"]) == (1, 1, 1, 0)
    assert n["reuse_reuse_satisfied"] is True and n["reuse_reuse_cached_blocks"] == 4
    assert n["reuse_num_cached_tokens"] == 4 * BLOCK, "vLLM served the 4 restored blocks from the CPU tier"
    assert "restore_before_reuse" in runs["path-a-restore"].witnesses


def test_the_claims_host_copy_is_reported_position_by_position_before_it_is_offloaded(
    runs: dict[str, Checked],
) -> None:
    """Store jobs carry the claim's tag: each copied position is a CPU-tier block event of the
    claim, all four before the offload; a claim whose store never fit has none."""
    from kvclaims.lab.scheduler_scenarios import read_events

    events = read_events(runs["path-a-restore"].trace)
    host = [e for e in events if e.event == "block_stored" and e.cache_level == "cpu"]
    offloaded = next(e for e in events if e.event == "resident_claim_offloaded")
    assert sorted((e.claim_id, e.position) for e in host) == [("claim:A", p) for p in range(4)]
    assert all(e.seq < offloaded.seq for e in host)
    harm_events = read_events(runs["offload-harm"].trace)
    assert not [
        e
        for e in harm_events
        if e.event == "block_stored" and e.cache_level == "cpu" and e.claim_id == "claim:V"
    ]


def test_path_b_same_claim_failure_is_refused_naming_the_claim_before_the_finish(
    runs: dict[str, Checked],
) -> None:
    from kvclaims.lab.scheduler_scenarios import read_events

    run = runs["path-b-restore-failure"]
    n = run.numbers
    assert n["reuse_restoration_failed"] and n["reuse_refused_blocking"] == ["claim:A"]
    assert (n["reuse_finish_reason"], n["reuse_stop_reason"]) == (
        "abort",
        "kvclaims:refused:restoration_failed:claim:A",
    )
    assert n["restored"] == 0 and n["reuse_reuse_satisfied"] is None
    events = read_events(run.trace)
    order = [
        e.event for e in events if e.event in ("resident_claim_restoration_failed", "active_request_refused")
    ]
    finished = [e for e in events if e.event == "request_finished" and e.request_id.startswith("reuse-")]
    refused = [e for e in events if e.event == "active_request_refused"]
    assert order == ["resident_claim_restoration_failed", "active_request_refused"]
    assert refused[0].seq < finished[0].seq
    assert len(n["failure_to_outcome_ns"]) == 1 and n["failure_to_outcome_ns"][0] > 0
    assert "restoration_failure_fail_closed" in run.witnesses


def test_path_c_only_the_target_is_named_and_the_other_claim_restores(runs: dict[str, Checked]) -> None:
    run = runs["path-c-multi-claim"]
    n = run.numbers
    assert n["reuse-a_refused_blocking"] == ["claim:A"] and n["reuse-a_finish_reason"] == "abort"
    assert n["reuse-b_restored"] and n["reuse-b_reuse_satisfied"] and not n["reuse-b_restoration_failed"]
    assert n["reuse-b_refused_blocking"] is None and n["reuse-b_num_cached_tokens"] == 4 * BLOCK
    assert "multi_claim_attribution" in run.witnesses


def test_recompute_retries_a_transient_fault_under_one_restoration(runs: dict[str, Checked]) -> None:
    n = runs["recompute-transient-fault"].numbers
    assert (n["fault_injected"], n["restore_required"], n["restored"]) == (1, 1, 1)
    assert n["reuse_reuse_satisfied"] and n["reuse_num_cached_tokens"] == 4 * BLOCK


def test_recompute_caps_a_persistent_fault_with_a_refusal(runs: dict[str, Checked]) -> None:
    n = runs["recompute-persistent-fault"].numbers
    assert n["attempts"] == 3 and n["fault_injected"] == 3
    assert n["reuse_refused_blocking"] == ["claim:A"] and n["reuse_finish_reason"] == "abort"
    assert n["engine_steps"] < 20


def test_a_restored_prefix_gives_the_same_tokens_and_logprobs(runs: dict[str, Checked]) -> None:
    n = runs["restore-logits-match"].numbers
    assert n["restored_restored"] and n["restored_num_cached_tokens"] >= 4 * BLOCK
    assert n["restored_tokens"] == n["original_tokens"] and len(n["original_tokens"]) == 4
    assert n["max_abs_logprob_diff"] <= 1e-5, n


def test_hard_claim_refusal_carries_the_capacity_proof_to_the_client(runs: dict[str, Checked]) -> None:
    n = runs["hard-refusal"].numbers
    # 8 protected + 21 live (20 prompt blocks + 1 for the decode) = 29 > 23: shortfall 6
    assert n["blocking_claim_ids"] == ["claim:hard_protected"]
    assert (n["protected_resident_blocks"], n["active_live_blocks_required"]) == (8, 21)
    assert (n["resident_plus_active_blocks"], n["usable_blocks"], n["capacity_shortfall_blocks"]) == (
        29,
        23,
        6,
    )
    assert n["active_finish_reason"] == "abort"
    assert n["active_stop_reason"].startswith("kvclaims:refused:capacity:claim:hard_protected;others=0;")
    assert (
        n["reuse_satisfied"] and n["reuse_cached_blocks"] == 8 and n["reuse_num_cached_tokens"] == 8 * BLOCK
    )
    assert {"capacity_conflict_attributed", "protected_under_pressure", "footprint_accounted"} <= runs[
        "hard-refusal"
    ].witnesses


def test_demotion_and_expiry_come_before_any_loss(runs: dict[str, Checked]) -> None:
    demote = runs["demote-before-loss"].numbers
    assert demote["demoted_before_first_loss"] and demote["harmed"] == 0
    assert demote["active_finish_reason"] == "length"
    expire = runs["expire-before-loss"].numbers
    assert expire["active_deferred"] and expire["expired_before_first_loss"] and expire["harmed"] == 0
    assert expire["claim_expired_at_step"] == expire["active_admitted_at_step"]
    assert "demoted_before_loss" in runs["demote-before-loss"].witnesses
    assert "expired_before_loss" in runs["expire-before-loss"].witnesses


def test_continuum_turns_are_served_from_their_pins_and_an_unfollowed_pin_lapses(
    runs: dict[str, Checked],
) -> None:
    """Seed 003 on the engine: the context grows by each turn's real output and a tool result;
    every non-last turn's pin (its prompt's full blocks) serves the next turn's prefix hit."""
    n = runs["continuum-agent-turns"].numbers
    assert n["prompt_tokens"] == [69, 112, 155]  # 2 blocks + 5, then + 4 output + 39 tool tokens
    assert n["pin_footprints"] == [69 // BLOCK, 112 // BLOCK, 69 // BLOCK]
    assert n["turn_reuses_satisfied"] == [True, True]
    for turn in (1, 2):
        assert n["cached_tokens"][turn] >= n["pin_footprints"][turn - 1] * BLOCK
    assert any(p.startswith("continuum-pin:other:") and p in n["expired"] for p in n["pins_accepted"])
    assert min(n["expired_after_ms"]) >= n["pin_ms"]
    assert n["pinned_blocks_at_end"] == 0 and n["harmed"] == 0
    assert n["last_turn_stop_reason"] == "kvclaims:claim_released:continuum-pin:agent:2"


def test_a_claim_whose_host_copy_never_fit_is_harmed_the_others_are_offloaded(
    runs: dict[str, Checked],
) -> None:
    n = runs["offload-harm"].numbers
    assert n["harmed"] == ["claim:V"] and n["offloaded"] == ["claim:H1", "claim:H2"]
    assert n["harm_leading_blocks"] < n["harm_required_blocks"] == 4
    assert "harm_reported" in runs["offload-harm"].witnesses


def test_cpu_tier_pressure_demotes_the_oldest_claim_before_its_copy_goes(runs: dict[str, Checked]) -> None:
    n = runs["cpu-tier-demote"].numbers
    assert n["demoted"] == ["claim:H1"] and n["harmed"] == []
    assert "claim:V" in n["offloaded"], "the new claim's copy was stored in the room made"


def test_the_controls_measure_what_they_claim(runs: dict[str, Checked]) -> None:
    wrong = runs["control-wrong-claim-failure"].numbers
    assert wrong["loads_failed"] == 0 and wrong["reuse-a_restored"] and wrong["restoration_failed"] == 0
    unclaimed = runs["control-unclaimed-failure"].numbers
    assert unclaimed["loads_failed"] == 1 and unclaimed["reuse_u_finish_reason"] == "error"
    assert unclaimed["restoration_failed"] == 0 and unclaimed["offloaded"] == 1
    without = runs["control-offload-without-claim"].numbers
    assert without["accepted"] == 0 and without["reuse_num_cached_tokens"] == 4 * BLOCK
    assert runs["control-offload-without-claim"].evidence == []
    assert runs["control-fallback-recompute"].numbers["reuse_finish_reason"] == "length"
    assert runs["control-generic-counters"].numbers["restoration_failed"] == 0


def test_accepted_positive_traces_evidence_every_obligation_of_five_modes(runs: dict[str, Checked]) -> None:
    from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS

    supplied = {
        o for name, run in runs.items() if not ENGINE_SCENARIOS[name].control for o, _ in run.evidence
    }
    for mode in ("best_effort", "hard_protected", "demotable", "expiring", "offloadable"):
        missing = {o.value for o in MODE_BUNDLES[ProtectionMode(mode)]} - supplied
        assert not missing, f"{mode}: no accepted trace evidences {[OBLIGATION_CODES[m] for m in missing]}"


def test_kv_events_joined_with_the_registry_agree_with_the_binding_on_materialization(
    runs: dict[str, Checked],
) -> None:
    from kvclaims.lab.scheduler_scenarios import read_events
    from kvclaims.refinement import check_trace
    from kvclaims.refinement.abstractions.vllm_kv_events import KvEventsSource
    from kvclaims.refinement.decoding import EVENT_NAME

    trace = runs["path-a-restore"].trace
    capture, registry = trace.with_suffix(".kvevents"), trace.with_suffix(".registry.yaml")
    verdict = check_trace(capture, registry=registry)
    assert verdict.outcome == "accepted", verdict.reason
    with capture.open("rb") as stream:
        joined = [
            (EVENT_NAME[type(e)], e.leading_blocks)
            for _, _, e in KvEventsSource(stream, registry=registry).events()
            if EVENT_NAME[type(e)] in ("resident_claim_materialized", "resident_claim_lost")
        ]
    holds = {"resident_claim_materialized": True, "resident_claim_restored": True}
    holds |= {"resident_claim_lost": False, "resident_claim_offloaded": False}
    binding = [holds[e.event] for e in read_events(trace) if e.event in holds]
    assert [holds[kind] for kind, _ in joined] == binding == [True, False, True]
    materialized = [e.leading_blocks for e in read_events(trace) if e.event == "resident_claim_materialized"]
    assert [leading for kind, leading in joined if kind == "resident_claim_materialized"] == materialized * 2


def test_a_corrupted_host_copy_changes_the_logprobs(lane: Any, tmp_path: Path) -> None:
    """The logits check is sensitive: restoring from a zeroed host buffer is not the same KV."""
    from kvclaims.lab.engine_lane import engine_prompt
    from kvclaims.lab.engine_scenarios import attach, claim, prefix

    tokens = prefix("corrupt", 4) + engine_prompt("corrupt:tail", 37)
    lane.begin(tmp_path / "corrupt.ndjson")
    original = lane.submit("original", tokens, max_tokens=4, claim=claim("claim:C", "offloadable", 4))
    lane.submit("pressure", engine_prompt("pressure", 22 * BLOCK))
    lane.llm.collective_rpc(_zero_host_copy)
    restored = lane.submit("restored", tokens, max_tokens=4, claim=attach("claim:C"))
    lane.end()
    assert restored.num_cached_tokens >= 4 * BLOCK
    assert max(abs(a - b) for a, b in zip(original.logprobs, restored.logprobs, strict=True)) > 1e-3


def _zero_host_copy(worker: Any) -> None:
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    for tensor in get_kv_transfer_group().connector_worker.worker.inner.host_tensors:
        tensor.zero_()


def test_without_the_cap_a_persistent_fault_livelocks_the_request(lane: Any, tmp_path: Path) -> None:
    """What stock vLLM does under `recompute` (the binding caps it): the same CPU hit is loaded
    and fails every step, and the request never finishes."""
    from kvclaims.lab.engine_lane import engine_prompt
    from kvclaims.lab.engine_scenarios import attach, claim, prefix
    from kvclaims.vllm_binding.faults import LoadFaultPlan

    lane.begin(
        tmp_path / "livelock.ndjson",
        binding={"max_restore_attempts": 10**6},
        kv_load_failure_policy="recompute",
        faults=LoadFaultPlan(enabled=True, target_claim="claim:L"),
    )
    tokens = prefix("livelock", 4)
    lane.submit("source", tokens + engine_prompt("s", 5), claim=claim("claim:L", "offloadable", 4))
    lane.submit("pressure", engine_prompt("pressure", 22 * BLOCK))
    internal = lane.add("reuse", tokens + engine_prompt("r", 37), claim=attach("claim:L"))
    with pytest.raises(RuntimeError, match="livelock"):
        lane.drain(max_steps=60)
    failures = lane.set_fault_plan(LoadFaultPlan())
    lane.llm.llm_engine.abort_request([internal], internal=True)
    lane.drain()
    lane.end()
    assert failures >= 50, "one failed load per step, and no end in sight"


def test_an_unclaimed_load_is_not_failed_without_its_switch(lane: Any, tmp_path: Path) -> None:
    from kvclaims.lab.engine_lane import engine_prompt
    from kvclaims.lab.engine_scenarios import prefix
    from kvclaims.vllm_binding.faults import LoadFaultPlan

    lane.begin(tmp_path / "switch.ndjson", faults=LoadFaultPlan(enabled=True))
    tokens = prefix("switch", 4)
    lane.submit("source", tokens + engine_prompt("s", 5))
    lane.submit("pressure", engine_prompt("pressure", 22 * BLOCK))
    served = lane.submit("reuse", tokens + engine_prompt("r", 37))
    lane.end()
    assert served.finish_reason == "length" and served.num_cached_tokens == 4 * BLOCK
    assert lane.set_fault_plan(LoadFaultPlan()) == 0


def test_every_engine_seed_case_gives_the_catalogue_numbers(runs: dict[str, Checked]) -> None:
    """The engine part of `tests/lab/test_seed_cases.py`, here because it reads this module's
    engine runs (one engine at a time)."""
    from kvclaims.lab.seed_cases import Lane, cases_on, mismatches

    cases = cases_on(Lane.engine)
    assert cases
    for case in cases:
        assert mismatches(case, runs[case.scenario(Lane.engine)].numbers["seed_case"]) == {}, case.name


def test_an_offload_precedes_the_removal_of_a_block_it_shares_with_another_claim(
    lane: Any, tmp_path: Path
) -> None:
    """Two claims on one prefix, a watched one accepted first and an offloadable one: when
    pressure evicts the prefix, the offload must be reported before any claim's removal of the
    shared blocks (a block is removed for every claim at its first `block_removed`). Found by
    the soak (bench/soak.py): the removals of the first claim came first."""
    from kvclaims.lab.engine_lane import engine_prompt
    from kvclaims.lab.engine_scenarios import claim, prefix
    from kvclaims.lab.scheduler_scenarios import read_events
    from kvclaims.refinement import check_trace

    trace = tmp_path / "shared.ndjson"
    tokens = prefix("shared", 4)
    lane.begin(trace)
    lane.submit("watched", tokens + engine_prompt("w:tail", 37), claim=claim("claim:W", "best_effort", 4))
    lane.submit("offloaded", tokens + engine_prompt("o:tail", 37), claim=claim("claim:O", "offloadable", 4))
    lane.submit("pressure", engine_prompt("pressure", 22 * BLOCK))
    lane.end()
    events = read_events(trace)
    offload = next(e for e in events if e.event == "resident_claim_offloaded")
    removals = [e for e in events if e.event == "block_removed" and e.claim_id in ("claim:W", "claim:O")]
    assert offload.claim_id == "claim:O" and removals
    assert all(offload.seq < e.seq for e in removals)
    verdict = check_trace(trace)
    assert verdict.outcome == "accepted", verdict.reason


def test_a_failed_store_is_attributed_and_its_claim_harmed_never_offloaded(runs: dict[str, Checked]) -> None:
    """The worker's store of claim A's host copy fails (injected): vLLM's engine stays up, no
    host copy is reported, the fault names the claim and the later device loss is harm."""
    run = runs["store-failure"]
    n = run.numbers
    assert run.outcome == "accepted", run.reason
    assert n["store_faults"] == ["claim:A"] and n["host_positions_stored"] == []
    assert n["offloaded"] == [] and n["harmed"] == ["claim:A"]


def test_a_late_store_is_offloaded_only_after_its_confirmation(runs: dict[str, Checked]) -> None:
    """The store's report is held back: its host copy is confirmed only after the source
    request finished (on time it is confirmed before), and the offload only after that."""
    run = runs["late-store"]
    n = run.numbers
    assert run.outcome == "accepted", run.reason
    assert n["first_store_seq"] > n["source_finished_seq"], "the report was not late"
    assert n["host_positions_stored"] == [0, 1, 2, 3] and n["harmed"] == []
    assert n["offloaded"] == ["claim:A"] and n["offloaded_seq"] > n["last_store_seq"]


def test_the_engine_serves_on_one_torch_thread_unless_omp_num_threads_says_otherwise(
    lane: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM's CPU worker hides torch.set_num_threads before its own reduction to 1 runs in-process
    import torch

    from kvclaims.lab.engine_lane import serve_on_one_thread

    assert torch.get_num_threads() == 1
    try:
        torch._C.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        serve_on_one_thread()
        assert torch.get_num_threads() == 2  # the user's setting is kept
        monkeypatch.delenv("OMP_NUM_THREADS")
        serve_on_one_thread()
        assert torch.get_num_threads() == 1
    finally:
        torch._C.set_num_threads(1)
