"""Hand-written histories the MicroRuntime's former self-check replay guarded against, kept as
checker tests when that replay was deleted: the refinement checker rejects each kind of bad
trace with its rule and accepts the lifecycle's good ones."""

from __future__ import annotations

from typing import Any

import pytest

from kvclaims.microruntime.tracing import encode_trace
from kvclaims.refinement import check_bytes
from kvclaims.refinement.verdict import Counterexample, Outcome, TraceVerdict
from kvclaims.spec.vocabulary import ConformanceRule

HEADER = {"kvclaims_trace": 1, "usable_blocks": 80, "block_size": 16}


class Trace:
    """A tiny builder for hand-written traces: each call appends one event."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, event: str, **fields: Any) -> Trace:
        self.events.append({"seq": len(self.events) + 1, "event": event, **fields})
        return self

    def claim(self, claim_id: str = "c", mode: str = "hard_protected", blocks: int = 2) -> Trace:
        terms = {
            "claim_id": claim_id,
            "owner_scope": "t",
            "object_id": "o",
            "mode": mode,
            "footprint_blocks": blocks,
            "predicate": {"kind": "leading_prefix_at_least", "blocks": blocks},
        }
        return self.add("resident_claim_submitted", **terms).add("resident_claim_accepted", **terms)

    def stored(self, claim_id: str, *positions: int) -> Trace:
        for p in positions:
            self.add("block_stored", block_id=p, block_hash=f"o#{p}", claim_id=claim_id, position=p)
        return self

    def removed(self, claim_id: str, *positions: int) -> Trace:
        for p in positions:
            self.add("block_removed", block_id=p, block_hash=f"o#{p}", claim_id=claim_id, position=p)
        return self

    def materialized(self, claim_id: str = "c", blocks: int = 2) -> Trace:
        return self.add("resident_claim_materialized", claim_id=claim_id, leading_blocks=blocks)

    def refused(self, request_id: str = "r", blocking: tuple[str, ...] = ("c",), **proof: int) -> Trace:
        numbers = {
            "protected_resident_blocks": 60,
            "active_live_blocks_required": 70,
            "resident_plus_active_blocks": 130,
            "usable_blocks": 80,
            "capacity_shortfall_blocks": 50,
        } | proof
        return self.add(
            "active_request_refused",
            request_id=request_id,
            reason="capacity",
            blocking_claim_ids=list(blocking),
            **numbers,
        )


def verdict_of(trace: Trace, header: dict[str, Any] = HEADER) -> TraceVerdict:
    return check_bytes(encode_trace(header, trace.events))


def accepted(trace: Trace) -> None:
    verdict = verdict_of(trace)
    assert verdict.outcome is Outcome.accepted, verdict.reason


def rejected_by(trace: Trace) -> Counterexample:
    verdict = verdict_of(trace)
    assert verdict.outcome is Outcome.rejected, verdict.reason
    assert verdict.counterexample is not None
    return verdict.counterexample


def test_a_materialized_hard_claim_refusing_with_a_correct_proof_is_accepted() -> None:
    trace = (
        Trace()
        .claim()
        .stored("c", 0, 1)
        .materialized()
        .refused()
        .add("request_finished", request_id="r", status="x")
    )
    accepted(trace)


def test_silent_harm_is_caught_at_the_end() -> None:
    trace = Trace().claim().stored("c", 0, 1).materialized().removed("c", 1)
    assert rejected_by(trace).rule is ConformanceRule.no_silent_harm


def test_reported_harm_after_the_loss_is_accepted() -> None:
    trace = Trace().claim().stored("c", 0, 1).materialized().removed("c", 1)
    trace.add("resident_claim_harmed", claim_id="c", leading_blocks=1, required_blocks=2)
    accepted(trace)


def test_harm_while_the_predicate_holds_is_rejected() -> None:
    trace = Trace().claim().stored("c", 0, 1).materialized()
    trace.add("resident_claim_harmed", claim_id="c", leading_blocks=2, required_blocks=2)
    assert rejected_by(trace).rule is ConformanceRule.no_silent_harm


def test_harm_after_release_is_rejected() -> None:
    trace = Trace().claim().stored("c", 0, 1).materialized().add("resident_claim_released", claim_id="c")
    trace.removed("c", 0).add("resident_claim_harmed", claim_id="c", leading_blocks=0, required_blocks=2)
    assert rejected_by(trace).rule is ConformanceRule.lifecycle


def test_loss_after_demotion_is_not_harm() -> None:
    trace = Trace().claim().stored("c", 0, 1).materialized().add("resident_claim_demoted", claim_id="c")
    accepted(trace.removed("c", 0, 1))


@pytest.mark.parametrize(
    ("proof", "why"),
    [
        ({"resident_plus_active_blocks": 129}, "resident_plus_active_blocks"),
        ({"capacity_shortfall_blocks": 51}, "capacity_shortfall_blocks"),
        ({"usable_blocks": 90, "capacity_shortfall_blocks": 40}, "header"),
        (
            {
                "protected_resident_blocks": 5,
                "resident_plus_active_blocks": 75,
                "capacity_shortfall_blocks": 0,
            },
            "positive shortfall",
        ),
    ],
)
def test_capacity_arithmetic_mismatches_are_rejected(proof: dict[str, int], why: str) -> None:
    trace = Trace().claim().stored("c", 0, 1).materialized().refused(**proof)
    violation = rejected_by(trace)
    assert violation.rule is ConformanceRule.capacity_arithmetic
    assert why in violation.message


def test_blocking_ids_must_name_claims_under_an_obligation() -> None:
    """A blocking claim that holds no block is not a trace-level error (block events need not
    name their claim); `MicroRuntimeMachine.blocking_ids_name_holding_hard_claims` checks it
    where the runtime's blocks are known."""
    observational = Trace().claim(mode="best_effort").stored("c", 0, 1).materialized().refused()
    assert rejected_by(observational).rule is ConformanceRule.attribution
    empty = Trace().claim().stored("c", 0, 1).materialized().refused(blocking=())
    assert rejected_by(empty).rule is ConformanceRule.attribution


def test_restore_needs_restore_required_for_the_same_request() -> None:
    trace = Trace().claim(mode="offloadable").stored("c", 0, 1).materialized()
    trace.add("resident_claim_offloaded", claim_id="c", tier="host")
    trace.add("resident_claim_restore_required", claim_id="c", request_id="r1")
    trace.add("resident_claim_restored", claim_id="c", request_id="r2")
    assert rejected_by(trace).rule is ConformanceRule.offload_order


def test_satisfied_reuse_of_an_offloaded_claim_before_restore_is_rejected() -> None:
    trace = Trace().claim(mode="offloadable").stored("c", 0, 1).materialized()
    trace.add("resident_claim_offloaded", claim_id="c", tier="host")
    trace.add("active_request_admitted", request_id="r", active_live_blocks=2)
    trace.add("request_reused", request_id="r", claim_id="c", cached_blocks=2, predicate_satisfied=True)
    assert rejected_by(trace).rule is ConformanceRule.offload_order


def test_two_key_value_hash_mismatch_must_end_in_a_restoration_failure() -> None:
    terms = {
        "claim_id": "h",
        "owner_scope": "t",
        "object_id": "o",
        "mode": "offloadable",
        "footprint_blocks": 2,
        "predicate": {"kind": "hybrid_two_key", "boundary_blocks": 2},
    }
    trace = Trace().add("resident_claim_accepted", **terms).stored("h", 0, 1)
    trace.add(
        "resident_claim_materialized",
        claim_id="h",
        leading_blocks=2,
        checkpoint={"boundary": 2, "payload_hash": "p", "value_hash": "v"},
    )
    trace.add("resident_claim_offloaded", claim_id="h", tier="host")
    trace.add("active_request_admitted", request_id="r", active_live_blocks=2)
    trace.add("resident_claim_restore_required", claim_id="h", request_id="r")
    trace.add("resident_claim_restored", claim_id="h", request_id="r")
    trace.add(
        "resident_claim_checkpoint_restored", claim_id="h", boundary=2, payload_hash="p", value_hash="w"
    )
    satisfied = Trace()
    satisfied.events = [*trace.events]
    satisfied.add("request_reused", request_id="r", claim_id="h", cached_blocks=2, predicate_satisfied=True)
    assert rejected_by(satisfied).rule is ConformanceRule.hybrid_two_key
    assert rejected_by(trace).rule is ConformanceRule.hybrid_two_key  # ended without a failure outcome
    trace.add("resident_claim_restoration_failed", claim_id="h", request_id="r", outcome="demotion")
    accepted(trace)


def test_block_events_naming_an_unaccepted_claim_are_identity_errors() -> None:
    trace = Trace().stored("ghost", 0)
    assert rejected_by(trace).rule is ConformanceRule.identity


def test_unknown_event_types_are_inconclusive_and_seq_must_increase() -> None:
    unknown = Trace().claim().add("something_new")
    assert verdict_of(unknown).outcome is Outcome.inconclusive
    repeated = Trace().add("active_request_admitted", request_id="r", active_live_blocks=1)
    repeated.add("request_finished", request_id="r", status="x", seq=1)
    assert verdict_of(repeated).outcome is Outcome.invalid


def test_a_header_that_is_not_trace_v1_is_rejected() -> None:
    verdict = verdict_of(Trace().claim(), header={"kvclaims_trace": 2})
    assert verdict.outcome is Outcome.invalid


def test_a_restoration_failure_is_never_satisfied_later_in_the_same_request() -> None:
    trace = Trace().claim(mode="offloadable").stored("c", 0, 1).materialized()
    trace.add("resident_claim_offloaded", claim_id="c", tier="host")
    trace.add("active_request_admitted", request_id="r", active_live_blocks=2)
    trace.add("resident_claim_restore_required", claim_id="c", request_id="r")
    trace.add("resident_claim_restoration_failed", claim_id="c", request_id="r", outcome="demotion")
    trace.add("request_reused", request_id="r", claim_id="c", cached_blocks=2, predicate_satisfied=True)
    assert rejected_by(trace).rule is ConformanceRule.offload_order
