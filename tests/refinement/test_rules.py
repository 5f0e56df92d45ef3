"""Issue 12's rule classes (items 1-7, 10-14): each violating history next to a conforming
twin of the same length, so that the verdict turns on the one thing the rule is about."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.vocabulary import ConformanceRule

R = ConformanceRule
TERMS = {
    "owner_scope": "tenant-a",
    "object_id": "object:C",
    "predicate": {"kind": "leading_prefix_at_least", "blocks": 4},
}


def twins(build: Callable[[bool], TraceBuilder]) -> tuple[Any, Any]:
    """The verdicts of the violating (True) and conforming (False) variants, checked to have
    the same number of events."""
    bad, good = build(True), build(False)
    assert len(bad.events) == len(good.events)
    return check_bytes(bad.ndjson()), check_bytes(good.ndjson())


def assert_twins(build: Callable[[bool], TraceBuilder], rule: ConformanceRule) -> None:
    bad, good = twins(build)
    assert bad.outcome is Outcome.rejected and bad.rule is rule, bad.reason
    assert good.outcome is Outcome.accepted, good.reason


def materialized(
    trace: TraceBuilder, claim_id: str = "C", mode: str = "hard_protected", **kw: Any
) -> TraceBuilder:
    return trace.accept(claim_id, mode=mode, **kw).store_prefix(claim_id, 4).materialize(claim_id, 4)


# --- 1. capacity proofs against the state ---------------------------------------------------


def test_materialized_claims_never_overcommit_the_pool() -> None:
    """Accepting more than fits is a plan (the runtime may offload one first); holding more
    than fits is an overcommit."""

    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("A", mode="offloadable", blocks=60).materialize("A", 60)
        trace.accept("B", blocks=30)
        if bad:
            return trace.materialize("B", 30).offload("A")  # the offload comes too late
        return trace.offload("A").materialize("B", 30)

    assert_twins(build, R.capacity_state)


def test_claims_sharing_blocks_count_each_block_once() -> None:
    """Two hard claims on one prefix object, 60 + 40 blocks of footprint in an 80-block pool:
    sharing their leading 40 blocks they hold 60 blocks, which fits; holding 40 blocks of their
    own they hold 100, which overcommits (the scheduler fuzzer found the false reject)."""

    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("A", blocks=60, object_id="doc")
        trace.store_prefix("A", 60).materialize("A", 60).accept("B", blocks=40, object_id="doc")
        for position in range(40):
            owner = "B" if bad else "A"
            trace.add(
                "block_stored",
                block_id=trace.block_id(owner, position),
                block_hash=f"h:{owner}:{position}",
                claim_id="B",
                position=position,
            )
        return trace.materialize("B", 40)

    assert_twins(build, R.capacity_state)


def test_the_protected_term_is_what_the_claims_reserve() -> None:
    """120 protected blocks in an 80-block pool whose claims reserve 60 is not a proof."""

    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("C", blocks=60).materialize("C", 60)
        return trace.conflict("r", ["C"], protected=120 if bad else 60, active=70)

    assert_twins(build, R.capacity_state)


def test_a_blocking_claim_must_be_inside_the_protected_term() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=16).accept("A", blocks=4).store_prefix("A", 4)
        trace.accept("B", blocks=8).store_prefix("B", 8)
        return trace.conflict("r", ["B"], protected=4 if bad else 12, active=13)

    assert_twins(build, R.capacity_state)


def test_an_offloaded_claim_reserves_no_device_blocks_to_blame() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = materialized(TraceBuilder(usable_blocks=8), mode="offloadable")
        trace.accept("D", blocks=4).store_prefix("D", 4)
        if bad:
            trace.offload("C")
        else:
            trace.offload("D")
        return trace.conflict("r", ["C"], protected=4, active=5)

    assert_twins(build, R.capacity_state)


def test_without_a_header_pool_every_proof_quotes_the_first_proofs_pool() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = materialized(TraceBuilder(usable_blocks=None))
        trace.conflict("r1", ["C"], protected=4, active=10, usable=8)
        return trace.conflict("r2", ["C"], protected=4, active=10, usable=9 if bad else 8)

    assert_twins(build, R.capacity_arithmetic)


# --- 2. time -------------------------------------------------------------------------------


def timed(clock: str, expires_at: int, *, refresh: bool = False, hit_at: int | None = None) -> TraceBuilder:
    duration = {"duration_steps": 5} if clock == "engine_step" else {"duration_ms": 5}
    scale = 1 if clock == "engine_step" else 1_000_000
    trace = TraceBuilder(usable_blocks=80)
    trace.add(
        "resident_claim_accepted",
        claim_id="C",
        mode="expiring",
        footprint_blocks=4,
        refresh_on_hit=refresh,
        **TERMS,
        **duration,
        **{clock: 0},
    )
    trace.store_prefix("C", 4).materialize("C", 4)
    if hit_at is not None:
        trace.add(
            "request_reused",
            request_id="r",
            claim_id="C",
            cached_blocks=4,
            predicate_satisfied=True,
            **{clock: hit_at * scale},
        )
    return trace.add("resident_claim_expired", claim_id="C", **{clock: expires_at * scale})


@pytest.mark.parametrize("clock", ["engine_step", "t_ns"])
def test_a_claim_may_not_expire_before_its_duration(clock: str) -> None:
    assert_twins(lambda bad: timed(clock, 3 if bad else 5), R.duration)


def test_refresh_on_hit_restarts_the_clock_only_when_the_claim_says_so() -> None:
    assert_twins(lambda bad: timed("t_ns", 7, refresh=bad, hit_at=4), R.duration)


def test_a_duration_without_its_clock_is_inconclusive_never_accepted() -> None:
    trace = timed("t_ns", 9)
    del trace.events[-1]["t_ns"]
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.inconclusive, verdict.reason


# --- 3. block identity ---------------------------------------------------------------------


def test_other_content_in_a_held_block_id_is_a_loss_for_its_holder() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = materialized(TraceBuilder(usable_blocks=80))
        block = trace.block_id("C", 0)
        return trace.add("block_stored", block_id=block, block_hash="other" if bad else "h:C:0")

    assert_twins(build, R.no_silent_harm)


def test_a_removal_affects_every_holder_whichever_claim_it_names() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("A", mode="best_effort", blocks=1)
        trace.accept("B", mode="hard_protected" if bad else "best_effort", blocks=1)
        trace.add("block_stored", block_id=7, block_hash="h", claim_id="A", position=0)
        trace.add("block_stored", block_id=7, block_hash="h", claim_id="B", position=0)
        return trace.add("block_removed", block_id=7, block_hash="h", claim_id="A", position=0)

    assert_twins(build, R.no_silent_harm)


def test_a_removal_must_name_the_content_the_block_holds() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = materialized(TraceBuilder(usable_blocks=80), mode="best_effort")
        block = trace.block_id("C", 3)
        return trace.add("block_removed", block_id=block, block_hash="forged" if bad else "h:C:3")

    assert_twins(build, R.block_identity)


def test_a_released_claims_blocks_stay_inside_its_footprint() -> None:
    """Naming a block outside a claim's footprint is an identity error after its release too
    (the long mutation profile found the retired claim's footprint forgotten)."""

    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=16).accept("C", blocks=4).claim_event("released", "C")
        position = 5 if bad else 3
        return trace.add("block_stored", block_id=9, block_hash="h9", claim_id="C", position=position)

    assert_twins(build, R.identity)


# --- 4. harm visible from blocks -----------------------------------------------------------


def test_blocks_that_showed_the_predicate_and_fell_owe_harm_without_materialized() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("C", mode="hard_protected" if bad else "best_effort")
        return trace.store_prefix("C", 4).remove_block("C", 0, named=False)

    assert_twins(build, R.no_silent_harm)


def test_a_later_partial_store_never_resets_a_reported_prefix() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("C", mode="hard_protected" if bad else "best_effort")
        trace.materialize("C", 4).store_prefix("C", 1, start=2)
        return trace.remove_block("C", 0)

    assert_twins(build, R.no_silent_harm)


# --- 5. confirmed restores -----------------------------------------------------------------


def offloaded(mode: str = "offloadable") -> TraceBuilder:
    trace = materialized(TraceBuilder(usable_blocks=80), mode=mode).offload("C")
    for position in range(4):  # the device copies go; the host tier holds the prefix
        trace.remove_block("C", position, named=False)
    return trace.admit("r").restore_required("C", "r")


def test_a_satisfied_reuse_needs_a_confirmed_restore() -> None:
    def build(bad: bool) -> TraceBuilder:
        return offloaded().restored("C", "r", blocks=None if bad else 4).reuse("r", "C", 4).finish("r")

    assert_twins(build, R.offload_order)


def test_a_two_key_claim_needs_both_keys() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("C", mode="offloadable", two_key=True)
        trace.store_prefix("C", 4)
        trace.materialize("C", 4, checkpoint={"boundary": 4, "payload_hash": "p", "value_hash": "v"})
        trace.offload("C").admit("r").restore_required("C", "r")
        checkpoint = {"boundary": 4, "payload_hash": "p", "value_hash": "v"}
        if bad:
            trace.claim_event("checkpoint_restored", "C", **checkpoint).restored("C", "r", blocks=4)
        else:
            trace.restored("C", "r", blocks=4).claim_event("checkpoint_restored", "C", **checkpoint)
        return trace.reuse("r", "C", 4).finish("r")

    assert_twins(build, R.hybrid_two_key)


# --- 5b. in-place checkpoint restores of two-key claims (seed 002) ------------------------

CHECKPOINT = {"boundary": 4, "payload_hash": "p", "value_hash": "v"}


def resuming(two_key: bool = True) -> TraceBuilder:
    """A materialized two-key claim (never offloaded) whose checkpoint a request restores in
    place: seed 002's hybrid resume is a restore of the non-KV state at the KV boundary."""
    trace = TraceBuilder(usable_blocks=80).accept("C", two_key=two_key).store_prefix("C", 4)
    trace.materialize("C", 4, **({"checkpoint": CHECKPOINT} if two_key else {}))
    return trace.admit("r").restore_required("C", "r").restored("C", "r", blocks=4)


def resume_in_place(bad: bool) -> TraceBuilder:
    """Another value hash restored in place, then a satisfied reuse: a silent resume."""
    trace = resuming().claim_event(
        "checkpoint_restored", "C", **{**CHECKPOINT, "value_hash": "w" if bad else "v"}
    )
    return trace.reuse("r", "C", 4).finish("r")


def refuse_after_resume(bad: bool) -> TraceBuilder:
    """A failed in-place restore has no other tier to return to: refusal is not its outcome."""
    trace = resuming().claim_event("checkpoint_restored", "C", **{**CHECKPOINT, "value_hash": "w"})
    trace.restoration_failed("C", "r", outcome="refusal" if bad else "demotion")
    return trace.reuse("r", "C", 4, satisfied=False).finish("r", "refused")


def resume_one_key(bad: bool) -> TraceBuilder:
    """Only a two-key claim restores in place; a one-key restore needs an offload first."""
    trace = resuming(two_key=not bad)
    return trace.claim_event("checkpoint_restored", "C", **CHECKPOINT).reuse("r", "C", 4).finish("r")


IN_PLACE_TWINS: dict[str, tuple[Callable[[bool], TraceBuilder], ConformanceRule]] = {
    "mismatch_then_satisfied_reuse": (resume_in_place, R.hybrid_two_key),
    "refusal_after_in_place_restore": (refuse_after_resume, R.hybrid_two_key),
    "one_key_restore_without_offload": (resume_one_key, R.offload_order),
}
"""Twins of the in-place restore rows (the oracle tests judge the same traces)."""


@pytest.mark.parametrize("name", sorted(IN_PLACE_TWINS))
def test_in_place_checkpoint_restores(name: str) -> None:
    build, rule = IN_PLACE_TWINS[name]
    assert_twins(build, rule)


# --- 6. terms ------------------------------------------------------------------------------


def submitted(trace: TraceBuilder) -> TraceBuilder:
    return trace.add(
        "resident_claim_submitted", claim_id="C", mode="hard_protected", footprint_blocks=4, **TERMS
    )


@pytest.mark.parametrize("change", [{"mode": "best_effort"}, {"footprint_blocks": 8}])
def test_accepted_terms_equal_submitted_terms_unless_conditionally_accepted(change: dict[str, Any]) -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = submitted(TraceBuilder(usable_blocks=80))
        terms = {"mode": "hard_protected", "footprint_blocks": 4, **TERMS, **change}
        event = "resident_claim_accepted" if bad else "resident_claim_conditionally_accepted"
        return trace.add(event, claim_id="C", **terms)

    assert_twins(build, R.terms)


def test_a_silent_downgrade_cannot_launder_harm_into_loss() -> None:
    """Submitted hard_protected, accepted best_effort without saying so, then its loss
    reported as `lost`: the acceptance is rejected, so the loss never counts as best effort."""

    def build(bad: bool) -> TraceBuilder:
        trace = submitted(TraceBuilder(usable_blocks=80))
        event = "resident_claim_accepted" if bad else "resident_claim_conditionally_accepted"
        trace.add(event, claim_id="C", mode="best_effort", footprint_blocks=4, **TERMS)
        trace.store_prefix("C", 4).remove_block("C", 0, named=False)
        return trace.claim_event("lost", "C", leading_blocks=0)

    assert_twins(build, R.terms)


def test_a_conditional_acceptance_needs_a_submission() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80)
        if not bad:
            submitted(trace)
        trace.add(
            "resident_claim_conditionally_accepted",
            claim_id="C",
            mode="best_effort",
            footprint_blocks=4,
            **TERMS,
        )
        return trace if not bad else trace.admit("r")

    assert_twins(build, R.terms)


# --- 7. lost and harmed agree with the blocks ----------------------------------------------


def test_a_loss_report_while_the_blocks_hold_the_predicate_is_rejected() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = materialized(TraceBuilder(usable_blocks=80), mode="best_effort")
        trace.remove_block("C", 0 if not bad else 3, named=False)
        return trace.claim_event("lost", "C", leading_blocks=0)

    assert_twins(build, R.no_silent_harm)


def test_a_harm_report_quotes_the_prefix_the_blocks_show() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = materialized(TraceBuilder(usable_blocks=80)).remove_block("C", 2, named=False)
        return trace.claim_event("harmed", "C", leading_blocks=0 if bad else 2, required_blocks=4)

    assert_twins(build, R.no_silent_harm)


def test_a_loss_after_demotion_agrees_with_the_blocks_stored_since() -> None:
    """The claim's blocks show one leading block after its demotion: a loss must report 1."""

    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=16).accept("C", mode="best_effort", blocks=2)
        trace.claim_event("demoted", "C").store_prefix("C", 1)
        return trace.claim_event("lost", "C", leading_blocks=0 if bad else 1)

    assert_twins(build, R.no_silent_harm)


# --- 10-12. offload of hard claims, deferral and release during a restore -----------------


def test_offload_and_restore_are_legal_for_a_hard_protected_claim() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = offloaded(mode="best_effort" if bad else "hard_protected")
        return trace.restored("C", "r", blocks=4).reuse("r", "C", 4).finish("r")

    bad, good = twins(build)
    assert good.outcome is Outcome.accepted, good.reason
    assert bad.rule is R.lifecycle, bad.reason


def failed_restore() -> TraceBuilder:
    return offloaded().restoration_failed("C", "r")


def test_a_deferral_for_a_failed_restoration_may_end_in_refusal() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = failed_restore().accept("D", blocks=1)
        trace.conflict("r", ["D" if bad else "C"], refused=False, reason="restoration_failed")
        return trace.conflict("r", ["C"], reason="restoration_failed").finish("r")

    assert_twins(build, R.attribution)


@pytest.mark.parametrize("then", ["admit", "finish"])
def test_a_deferral_for_a_failed_restoration_has_legal_continuations(then: str) -> None:
    trace = failed_restore().conflict("r", ["C"], refused=False, reason="restoration_failed")
    trace = trace.admit("r").finish("r") if then == "admit" else trace.finish("r")
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.accepted, verdict.reason


@pytest.mark.parametrize("settle", ["released", "demoted", "expired"])
def test_a_claim_settled_while_its_restore_is_pending_leaves_a_legal_finish(settle: str) -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = offloaded()
        if bad:
            trace.admit("other")
        else:
            trace.claim_event(settle, "C")
        return trace.reuse("r", "C", 0, satisfied=False).finish("r")

    assert_twins(build, R.offload_order)


# --- 14. request edge cases a real vLLM produces -------------------------------------------


def test_a_client_abort_before_the_pool_is_a_legal_finish_but_only_once() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).admit("r1").finish("r1").finish("aborted", status="aborted")
        return trace.finish("aborted" if bad else "aborted-too", status="aborted")

    assert_twins(build, R.identity)


def test_a_deferred_request_may_be_served_from_the_cache() -> None:
    def build(bad: bool) -> TraceBuilder:
        trace = materialized(TraceBuilder(usable_blocks=8), blocks=4)
        trace.conflict("r", ["C"], refused=False, protected=4, active=5)
        return trace.reuse("r", "C", 4 if not bad else 2).finish("r")

    assert_twins(build, R.lifecycle)


def test_a_two_key_claim_resumed_in_place_needs_the_recorded_value() -> None:
    """Seed 002 on the device tier (vLLM's alignment mode copies the cached state into the
    request's live slot): a satisfied resume must carry the value recorded at
    materialization; the same payload bytes read with another layout are another value."""

    def build(bad: bool) -> TraceBuilder:
        return resumed_in_place(satisfied=True, value="v-column-major" if bad else "v").finish("r")

    assert_twins(build, R.hybrid_two_key)


def resumed_in_place(*, satisfied: bool, value: str) -> TraceBuilder:
    """A two-key claim materialized with value `v`, then resumed by request r with `value`."""
    trace = TraceBuilder(usable_blocks=80).accept("C", two_key=True)
    trace.store_prefix("C", 4)
    trace.materialize("C", 4, checkpoint={"boundary": 4, "payload_hash": "p", "value_hash": "v"})
    resumed = {"boundary": 4, "payload_hash": "p", "value_hash": value}
    return trace.admit("r").add(
        "request_reused",
        request_id="r",
        claim_id="C",
        cached_blocks=4,
        predicate_satisfied=satisfied,
        checkpoint=resumed,
    )


def test_a_failed_in_place_resume_is_unsatisfied_demoted_and_the_request_never_served() -> None:
    """The binding's fail-closed outcome for a resume whose value differs: an unsatisfied
    reuse naming the restored checkpoint, the claim demoted, the request finished (aborted)."""
    trace = resumed_in_place(satisfied=False, value="w")
    trace.claim_event("demoted", "C", reason="state identity not established").finish("r", "abort")
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.accepted, verdict.reason


@pytest.mark.parametrize(
    ("tensor", "count", "field"),
    [
        ({"shape": [1] * 9}, 1, "tensors[0].shape"),
        ({"shape": [-1]}, 1, "tensors[0].shape[0]"),
        ({}, 4097, "checkpoint.tensors"),
        ({"layout": 7}, 1, "tensors[0].layout"),
    ],
)
def test_checkpoint_abi_metadata_is_bounded_and_typed(tensor: dict[str, Any], count: int, field: str) -> None:
    """A checkpoint's tensor list and shapes are bounded, and every metadata field typed."""
    metadata = {"kind": "ssm_state", "layer": "l0", "shape": [4, 64, 64]}
    metadata |= {"logical_dtype": "float32", "storage_dtype": "float32", "layout": "row_major", **tensor}
    trace = TraceBuilder(usable_blocks=80).accept("C", two_key=True).store_prefix("C", 4)
    checkpoint = {"boundary": 4, "payload_hash": "p", "value_hash": "v", "tensors": [metadata] * count}
    verdict = check_bytes(trace.materialize("C", 4, checkpoint=checkpoint).ndjson())
    assert verdict.outcome is Outcome.invalid and field in verdict.reason, verdict.reason
