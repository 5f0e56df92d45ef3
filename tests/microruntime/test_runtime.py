"""The MicroRuntime's own contracts: it emits only what its lifecycle allows, refuses bad input,
and keeps active, resident and future-reusable KV apart."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec
from kvclaims.microruntime.policies import POLICIES, ConflictAction
from kvclaims.microruntime.runtime import FaultKind, LifecycleBug, MicroRuntime, RequestOutcome
from kvclaims.microruntime.tracing import TraceBuffer, encode_trace
from kvclaims.refinement import check_bytes
from kvclaims.spec.errors import InputError
from kvclaims.spec.trace import RestorationOutcome
from kvclaims.spec.vocabulary import ProtectionMode as M
from kvclaims.statemachine.lifecycle import Event, Phase


def assert_accepted(header: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """The refinement checker accepts the trace so far."""
    verdict = check_bytes(encode_trace(header, events))
    assert verdict.outcome.value == "accepted", verdict.reason


def runtime(
    usable: int = 80, policy: str = "hard_protected", **changes: object
) -> tuple[MicroRuntime, TraceBuffer]:
    buffer = TraceBuffer()
    chosen = dataclasses.replace(POLICIES[policy], **changes) if changes else POLICIES[policy]
    return MicroRuntime(usable, policy=chosen, sink=buffer.append), buffer


def resident(rt: MicroRuntime, claim_id: str, mode: M, blocks: int, **claim: object) -> None:
    rt.submit_claim(ClaimSpec(claim_id, f"obj-{claim_id}", mode, blocks, blocks, **claim))  # type: ignore[arg-type]
    rt.run_request(RequestSpec(f"prefill-{claim_id}", f"obj-{claim_id}", blocks, kind=RequestKind.resident))


def test_an_illegal_event_is_a_runtime_bug_not_a_trace_line() -> None:
    rt, buffer = runtime()
    resident(rt, "c", M.hard_protected, 4)
    emitted = len(buffer.events)
    with pytest.raises(LifecycleBug, match="claim c"):
        rt._advance(rt.claims["c"], Event.restore)  # a restore without an offload
    assert len(buffer.events) == emitted


def test_operations_the_phase_forbids_are_input_errors() -> None:
    rt, _ = runtime()
    resident(rt, "c", M.best_effort, 4)
    with pytest.raises(InputError, match="offload is not allowed"):
        rt.offload("c")  # best_effort carries no preservation obligation to offload
    rt.release("c")
    with pytest.raises(InputError, match="demote is not allowed"):
        rt.demote("c")
    with pytest.raises(InputError, match="unknown claim"):
        rt.release("nobody")


def test_duplicate_claim_and_request_ids_are_input_errors() -> None:
    rt, _ = runtime()
    spec = ClaimSpec("c", "o", M.hard_protected, 4, 4)
    with pytest.raises(InputError, match="duplicate claim id"):
        rt.submit_claims([spec, spec])
    rt.submit_claim(spec)
    with pytest.raises(InputError, match="already submitted"):
        rt.submit_claim(spec)
    rt.run_request(RequestSpec("r", "o", 4))
    with pytest.raises(InputError, match="already used"):
        rt.run_request(RequestSpec("r", "o", 4))


@pytest.mark.parametrize("usable", [0, -1])
def test_a_pool_without_blocks_is_an_input_error(usable: int) -> None:
    with pytest.raises(InputError, match="positive number of usable blocks"):
        MicroRuntime(usable)


def test_a_footprint_larger_than_the_pool_is_an_input_error() -> None:
    rt, _ = runtime(usable=16)
    with pytest.raises(InputError, match="larger than the pool"):
        rt.submit_claim(ClaimSpec("c", "o", M.hard_protected, 17, 17))


def test_write_no_admit_serves_the_request_but_admits_nothing_reusable() -> None:
    rt, buffer = runtime(policy="write_no_admit")
    assert rt.run_request(RequestSpec("bulky", "bulky", 70)) is RequestOutcome.admitted
    assert buffer.counts()["block_stored"] == 0
    assert rt.residency("bulky", 70) == (0, 0)
    rt.run_request(RequestSpec("prefill", "doc", 10, kind=RequestKind.resident))
    assert rt.residency("doc", 10) == (10, 10)  # resident prefills are still admitted


def test_chunks_stay_live_under_full_attention_until_the_request_finishes() -> None:
    rt, _ = runtime(usable=100, policy="native_lru")
    rt.submit_request(RequestSpec("a", "a", 70, chunks=(20, 20, 20, 10)))
    assert rt.requests["a"].live_after_chunk == (20, 40, 60, 70)
    assert rt.pool.census().active == 70
    rt.finish_request("a")
    assert rt.pool.census().active == 0


def test_a_running_request_blocks_nothing_it_is_not_blamed_for() -> None:
    """Other active work holding the pool is a wait, not a claim-attributed refusal."""
    rt, buffer = runtime(usable=20)
    rt.submit_request(RequestSpec("holder", "h", 15))
    assert rt.submit_request(RequestSpec("late", "l", 10)) is RequestOutcome.waiting
    assert "active_request_refused" not in buffer.counts()
    rt.finish_request("holder")
    rt.tick()
    assert rt.newly_admitted() == ["late"]


def test_victim_exclusion_keeps_pinned_blocks_out_of_the_free_queue() -> None:
    rt, _ = runtime()
    resident(rt, "c", M.hard_protected, 60)
    census = rt.pool.census()
    assert (census.pinned, rt.pool.available) == (60, 20)


def test_demotable_claims_are_relaxed_before_their_blocks_are_lost() -> None:
    rt, buffer = runtime(policy="demotable")
    resident(rt, "c", M.demotable, 60)
    assert rt.run_request(RequestSpec("a", "a", 70)) is RequestOutcome.admitted
    names = [e["event"] for e in buffer.events]
    assert names.index("resident_claim_demoted") < names.index("block_removed")
    assert rt.claims["c"].phase is Phase.demoted


def test_expiring_claims_expire_on_the_clock_and_unpin() -> None:
    rt, _ = runtime(policy="expiring")
    resident(rt, "c", M.expiring, 10, duration_steps=2)
    rt.tick()
    assert rt.claims["c"].phase is Phase.materialized
    rt.tick()
    assert rt.claims["c"].phase is Phase.expired
    assert rt.pool.census().pinned == 0


def test_an_invalid_load_on_a_pinned_block_is_reported_as_harm() -> None:
    rt, buffer = runtime()
    resident(rt, "c", M.hard_protected, 8)
    rt.inject_fault(FaultKind.invalid_kv_load, "c", position=3)
    harmed = [e for e in buffer.events if e["event"] == "resident_claim_harmed"]
    assert harmed == [{"seq": harmed[0]["seq"], "event": "resident_claim_harmed", "engine_step": 0,
                       "claim_id": "c", "leading_blocks": 3, "required_blocks": 8}]  # fmt: skip
    assert rt.pool.census().pinned == 0
    assert_accepted(rt.header, buffer.events)


@pytest.mark.parametrize("outcome", list(RestorationOutcome))
def test_every_restoration_failure_outcome_is_claim_scoped_and_never_satisfied(
    outcome: RestorationOutcome,
) -> None:
    rt, buffer = runtime(policy="offloadable")
    resident(rt, "c", M.offloadable, 8)
    rt.offload("c")
    rt.inject_fault(FaultKind.restore_failure, "c", outcome=outcome)
    rt.run_request(RequestSpec("r", "obj-c", 8, reuse_claim="c"))
    failed = [e for e in buffer.events if e["event"] == "resident_claim_restoration_failed"]
    assert [(e["claim_id"], e["outcome"]) for e in failed] == [("c", outcome.value)]
    assert not any(e["event"] == "request_reused" and e["predicate_satisfied"] for e in buffer.events)
    assert_accepted(rt.header, buffer.events)


def test_a_two_key_claim_that_cannot_be_restored_is_rejected() -> None:
    rt, buffer = runtime()
    plan = rt.submit_claim(ClaimSpec("c", "o", M.hard_protected, 4, 4, two_key=True))
    assert not plan.accepted and "checkpoint restore" in plan.reason
    assert buffer.events[-1]["event"] == "resident_claim_rejected"


def test_the_protected_budget_rejects_claims_beyond_it() -> None:
    rt, _ = runtime(protected_budget_blocks=10)
    assert rt.submit_claim(ClaimSpec("a", "a", M.hard_protected, 8, 8)).accepted
    plan = rt.submit_claim(ClaimSpec("b", "b", M.hard_protected, 8, 8))
    assert not plan.accepted and "budget" in plan.reason


def test_deferral_is_bounded_then_the_request_is_refused() -> None:
    rt, buffer = runtime(conflict_actions=(ConflictAction.defer, ConflictAction.refuse), max_deferrals=2)
    resident(rt, "c", M.hard_protected, 60)
    assert rt.submit_request(RequestSpec("a", "a", 70)) is RequestOutcome.deferred
    rt.tick(3)
    counts = buffer.counts()
    assert (counts["active_request_deferred"], counts["active_request_refused"]) == (2, 1)
    assert rt.pending == ()


def test_close_reports_a_claim_that_still_owes_an_event() -> None:
    rt, _ = runtime()
    resident(rt, "c", M.hard_protected, 4)
    rt.claims["c"].phase = Phase.breached
    with pytest.raises(LifecycleBug, match="without resident_claim_harmed"):
        rt.close()


def test_a_reuse_reads_the_claims_object_and_is_satisfied_only_if_it_covers_the_predicate() -> None:
    rt, buffer = runtime(policy="offloadable")
    resident(rt, "c", M.offloadable, 8)
    with pytest.raises(InputError, match="not the claim's object"):
        rt.submit_request(RequestSpec("other", "elsewhere", 8, reuse_claim="c"))
    rt.run_request(RequestSpec("short", "obj-c", 4, reuse_claim="c"))
    rt.offload("c")
    rt.run_request(RequestSpec("short-offloaded", "obj-c", 4, reuse_claim="c"))
    reuses = [
        (e["request_id"], e["predicate_satisfied"]) for e in buffer.events if e["event"] == "request_reused"
    ]
    assert reuses == [("short", False), ("short-offloaded", False)]
    assert rt.claims["c"].phase is Phase.offloaded  # nothing was restored for a request that did not need it
    assert_accepted(rt.header, buffer.events)


@pytest.mark.parametrize("corrupted", [False, True])
def test_a_two_key_reuse_restores_its_checkpoint_in_place(corrupted: bool) -> None:
    """Seed 002: reusing a materialized two-key claim is a restore of its non-KV state at the
    KV boundary; a checkpoint whose meaning changed in place (payload bytes kept) fails closed
    with an outcome that ends responsibility (the policy's refusal has no tier to return to)."""
    rt, buffer = runtime(policy="offloadable")
    resident(rt, "c", M.offloadable, 4, two_key=True)
    if corrupted:
        rt.inject_fault(FaultKind.checkpoint_in_place_mutation, "c")
    rt.run_request(RequestSpec("reuse", "obj-c", 4, reuse_claim="c"))
    names = [e["event"] for e in buffer.events]
    start = names.index("resident_claim_restore_required")
    restore = [
        "resident_claim_restore_required",
        "resident_claim_restored",
        "resident_claim_checkpoint_restored",
    ]
    assert names[start : start + 3] == restore
    reused = next(e for e in buffer.events if e["event"] == "request_reused")
    failed = [e["outcome"] for e in buffer.events if e["event"] == "resident_claim_restoration_failed"]
    assert reused["predicate_satisfied"] is not corrupted
    assert failed == (["demotion"] if corrupted else [])
    assert rt.claims["c"].phase is (Phase.demoted if corrupted else Phase.materialized)


def test_an_offloaded_claim_pins_no_device_block_its_object_stores_again() -> None:
    """An offloaded claim reserves no device block until its restore: a request that recomputes
    its object after its device copies were evicted must not re-pin them for the claim (it
    was then blamed for capacity conflicts it reserved nothing for)."""
    rt, buffer = runtime(usable=20, policy="offloadable")
    resident(rt, "c", M.offloadable, 8)
    claim = rt.claims["c"]
    assert len(claim.pinned) == 8
    rt.offload("c")
    rt.run_request(RequestSpec("pressure", "obj-pressure", 20))  # evicts the claim's device copies
    rt.run_request(RequestSpec("again", "obj-c", 8))  # stores its object's blocks again
    assert claim.phase is Phase.offloaded
    assert all(block is not None for block in claim.slots)  # the blocks are tagged to the claim
    assert claim.pinned == [] and sum(rt.pool.pin_refs) == 0  # but not pinned for it
    assert_accepted(rt.header, buffer.events)
