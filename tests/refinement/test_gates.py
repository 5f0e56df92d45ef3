"""The seeds' gates as refinement properties, not event lists.

Paths A, B and C of seed 000 and L1-L7 of seed 001 are checked as properties of whole traces:
every ordering of a path's events is tried, and exactly the order the model allows is accepted;
identity is checked (the wrong claim or request never passes); and no gate is true by
construction (a capacity-rich conforming run passes L1/L2, a vacuous trace is not accepted).
"""

from __future__ import annotations

import itertools

import pytest

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.vocabulary import ConformanceRule, TraceWitness

W = TraceWitness
R = ConformanceRule


def claim(trace: TraceBuilder, claim_id: str, *, mode: str = "offloadable", blocks: int = 4) -> TraceBuilder:
    return (
        trace.accept(claim_id, mode=mode, blocks=blocks)
        .store_prefix(claim_id, blocks)
        .materialize(claim_id, blocks)
    )


def witnessed(trace: TraceBuilder) -> set[TraceWitness]:
    verdict = check_bytes(trace.ndjson())
    assert verdict.outcome is Outcome.accepted, verdict.reason
    return {w.kind for w in verdict.witnesses}


# --- seed 000 path A: restore before reuse ----------------------------------------------------

PATH_A = ("offload", "restore_required", "restored", "reuse")


def path_a(order: tuple[str, ...]) -> TraceBuilder:
    trace = claim(TraceBuilder(usable_blocks=80), "C").admit("r")
    steps = {
        "offload": lambda: trace.offload("C"),
        "restore_required": lambda: trace.restore_required("C", "r"),
        "restored": lambda: trace.restored("C", "r"),
        "reuse": lambda: trace.reuse("r", "C", 4),
    }
    for name in order:
        steps[name]()
    return trace.finish("r")


def restore_before_reuse(order: tuple[str, ...]) -> bool:
    """The property: offload, restore_required and restored in that order, and the satisfied
    reuse never while the claim is away (between the offload and its restoration)."""
    at = {name: order.index(name) for name in order}
    restored_in_order = at["offload"] < at["restore_required"] < at["restored"]
    return restored_in_order and not at["offload"] < at["reuse"] < at["restored"]


@pytest.mark.parametrize("order", list(itertools.permutations(PATH_A)))
def test_path_a_is_accepted_exactly_when_restore_precedes_reuse(order: tuple[str, ...]) -> None:
    verdict = check_bytes(path_a(order).ndjson())
    if restore_before_reuse(order):
        assert verdict.outcome is Outcome.accepted, verdict.reason
        assert W.restore_before_reuse in {w.kind for w in verdict.witnesses}
    else:
        assert verdict.outcome is Outcome.rejected
        assert verdict.rule in (R.offload_order, R.lifecycle), verdict.reason


def test_path_a_restore_for_another_request_does_not_satisfy_this_reuse() -> None:
    trace = claim(TraceBuilder(usable_blocks=80), "C").admit("r").admit("other").offload("C")
    trace.restore_required("C", "r").restored("C", "other")
    verdict = check_bytes(trace.ndjson())
    assert verdict.rule is R.offload_order, verdict.reason


# --- seed 000 path B: same-claim failure -> claim-scoped failure -> fail-closed outcome ---------

PATH_B = ("restore_required", "restoration_failed", "refused", "finished")


def path_b(order: tuple[str, ...], *, failed: str = "C", blamed: str = "C") -> TraceBuilder:
    trace = claim(TraceBuilder(usable_blocks=80), "C").admit("r").offload("C")
    steps = {
        "restore_required": lambda: trace.restore_required("C", "r"),
        "restoration_failed": lambda: trace.restoration_failed(failed, "r"),
        "refused": lambda: trace.conflict("r", [blamed], reason="restoration_failed"),
        "finished": lambda: trace.finish("r"),
    }
    for name in order:
        steps[name]()
    return trace


@pytest.mark.parametrize("order", list(itertools.permutations(PATH_B)))
def test_path_b_only_the_ordered_fail_closed_sequence_is_accepted(order: tuple[str, ...]) -> None:
    verdict = check_bytes(path_b(order).ndjson())
    if order == PATH_B:
        assert verdict.outcome is Outcome.accepted, verdict.reason
        assert W.restoration_failure_fail_closed in {w.kind for w in verdict.witnesses}
    else:
        assert verdict.outcome is Outcome.rejected, f"{order}: {verdict.reason}"


def test_path_b_request_termination_before_the_refusal_is_an_attribution_error() -> None:
    verdict = check_bytes(path_b(("restore_required", "restoration_failed", "finished")).ndjson())
    assert verdict.rule is R.attribution
    assert "before request termination" in verdict.reason


def test_path_b_refusal_owed_at_trace_end_is_rejected() -> None:
    verdict = check_bytes(path_b(("restore_required", "restoration_failed")).ndjson())
    assert verdict.rule is R.attribution and "trace ended" in verdict.reason


# --- seed 000 path C: multi-claim attribution -----------------------------------------------


def path_c(blamed: list[str]) -> TraceBuilder:
    trace = claim(claim(TraceBuilder(usable_blocks=80), "target"), "other")
    trace.offload("target").offload("other").admit("r-other").admit("r-target")
    trace.restore_required("other", "r-other").restored("other", "r-other").reuse("r-other", "other", 4)
    trace.restore_required("target", "r-target").restoration_failed("target", "r-target")
    trace.conflict("r-target", blamed, reason="restoration_failed")
    return trace.finish("r-other").finish("r-target")


def test_path_c_only_the_target_is_named_and_the_other_claim_restores() -> None:
    kinds = witnessed(path_c(["target"]))
    assert {W.multi_claim_attribution, W.restore_before_reuse, W.restoration_failure_fail_closed} <= kinds


@pytest.mark.parametrize("blamed", [["other"], ["target", "other"], ["other", "target"]])
def test_path_c_naming_the_non_target_is_rejected(blamed: list[str]) -> None:
    verdict = check_bytes(path_c(blamed).ndjson())
    assert verdict.rule is R.attribution, verdict.reason


def test_path_c_is_not_witnessed_when_the_other_claim_was_also_blamed() -> None:
    trace = claim(claim(TraceBuilder(usable_blocks=80), "target"), "other").offload("target").offload("other")
    trace.admit("r1").restore_required("other", "r1").restored("other", "r1").reuse("r1", "other", 4).finish(
        "r1"
    )
    trace.offload("other")
    for request, claim_id in (("r2", "target"), ("r3", "other")):
        trace.admit(request).restore_required(claim_id, request).restoration_failed(claim_id, request)
        trace.conflict(request, [claim_id], reason="restoration_failed").finish(request)
    assert W.multi_claim_attribution not in witnessed(trace)


# --- seed 001 L1-L7 ---------------------------------------------------------------------------


def capacity_rich_run() -> TraceBuilder:
    """Plenty of room: unclaimed blocks come and go, requests are served, nothing is evicted
    under pressure and no claim exists."""
    trace = TraceBuilder(usable_blocks=4096)
    for index in range(5):
        trace.add("block_stored", block_id=index, block_hash=f"h{index}")
        trace.admit(f"r{index}", blocks=10).finish(f"r{index}")
    return trace


def test_l1_and_l2_hold_on_a_capacity_rich_conforming_run() -> None:
    verdict = check_bytes(capacity_rich_run().ndjson())
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert W.harm_reported not in {w.kind for w in verdict.witnesses}


def test_l1_ordinary_eviction_without_a_claim_is_not_harm() -> None:
    trace = capacity_rich_run().add("block_removed", block_id=1, block_hash="h1")
    assert W.ordinary_eviction_without_claim in witnessed(trace)


def test_l1_harm_of_a_claim_never_accepted_is_rejected() -> None:
    trace = capacity_rich_run().claim_event("harmed", "claim:resident", leading_blocks=0, required_blocks=60)
    assert check_bytes(trace.ndjson()).rule is R.identity


def test_l2_a_rejected_future_reuse_claim_never_blocks_active_work() -> None:
    trace = capacity_rich_run().add(
        "resident_claim_rejected", claim_id="claim:denied", reason="write_no_admit"
    )
    assert check_bytes(trace.ndjson()).outcome is Outcome.accepted
    trace.conflict("active", ["claim:denied"], protected=60, active=4090)
    verdict = check_bytes(trace.ndjson())
    assert verdict.rule is R.identity and "never accepted" in verdict.reason


def l3_trace(**numbers: int) -> TraceBuilder:
    trace = claim(TraceBuilder(usable_blocks=80), "claim:resident", mode="hard_protected", blocks=60)
    return trace.conflict("active", ["claim:resident"], **({"protected": 60, "active": 70} | numbers))


def test_l3_hard_claim_infeasibility_is_explicit_attributed_and_arithmetically_sound() -> None:
    kinds = witnessed(l3_trace())
    assert {W.capacity_conflict_attributed, W.protected_under_pressure} <= kinds


def test_l3_a_proof_whose_protected_term_holds_the_claims_footprint_evidences_f() -> None:
    assert W.footprint_accounted in witnessed(l3_trace())


@pytest.mark.parametrize(
    "numbers", [{"protected": 40, "active": 90}, {"protected": 70, "active": 60}], ids=["under", "over"]
)
def test_l3_a_protected_term_that_is_not_what_the_claims_reserve_is_rejected(numbers: dict[str, int]) -> None:
    """Arithmetic that adds up, but a protected term below the blocking claim's 60-block
    footprint (or above every responsible claim's footprint together) is not the state's:
    issue 12 item 1 (this was an accept without the F witness before)."""
    assert check_bytes(l3_trace(**numbers).ndjson()).rule is R.capacity_state


@pytest.mark.parametrize(
    "numbers",
    [{"shortfall": 49}, {"total": 129}, {"usable": 81}, {"active": 10}],
    ids=["shortfall", "sum", "usable", "fits"],
)
def test_l3_a_capacity_proof_that_does_not_add_up_is_rejected(numbers: dict[str, int]) -> None:
    assert check_bytes(l3_trace(**numbers).ndjson()).rule is R.capacity_arithmetic


@pytest.mark.parametrize(
    ("settle", "witness"), [("demoted", W.demoted_before_loss), ("expired", W.expired_before_loss)]
)
def test_l4_l5_loss_after_demotion_or_expiry_is_not_harm(settle: str, witness: TraceWitness) -> None:
    trace = claim(TraceBuilder(usable_blocks=80), "C", mode="hard_protected", blocks=60).claim_event(
        settle, "C"
    )
    for position in range(59, -1, -1):
        trace.remove_block("C", position, named=False)
    kinds = witnessed(trace)
    assert witness in kinds and W.harm_reported not in kinds


def test_l4_the_same_loss_without_demotion_owes_harm() -> None:
    trace = claim(TraceBuilder(usable_blocks=80), "C", mode="hard_protected", blocks=60)
    trace.remove_block("C", 59, named=False)
    assert check_bytes(trace.ndjson()).rule is R.no_silent_harm
    trace.claim_event("harmed", "C", leading_blocks=59, required_blocks=60)
    assert W.harm_reported in witnessed(trace)


def test_l6_surviving_blocks_without_block_zero_do_not_materialize() -> None:
    trace = TraceBuilder(usable_blocks=80).accept("C", blocks=60).store_prefix("C", 59, start=1)
    trace.materialize("C", 59)
    assert check_bytes(trace.ndjson()).rule is R.lifecycle
    confirmed = TraceBuilder(usable_blocks=80).accept("C", blocks=60).store_prefix("C", 59, start=1)
    confirmed.materialize("C", 60).store_prefix("C", 1)
    assert check_bytes(confirmed.ndjson()).outcome is Outcome.accepted


def test_l6_a_materialization_that_its_blocks_never_confirm_is_rejected() -> None:
    trace = TraceBuilder(usable_blocks=80).accept("C", blocks=60).store_prefix("C", 59, start=1)
    trace.materialize("C", 60).admit("r").reuse("r", "C", 60)
    verdict = check_bytes(trace.ndjson())
    assert verdict.rule is R.lifecycle and "0 contiguous leading blocks" in verdict.reason


def test_l7_the_verdict_reconstructs_acceptance_materialization_conflict_and_blame() -> None:
    trace = l3_trace()
    verdict = check_bytes(trace.ndjson())
    by_kind = {w.kind: w for w in verdict.witnesses}
    accepted_line, refusal_line = 2, len(trace.events) + 1
    materialized_line = refusal_line - 1
    assert by_kind[W.claim_accepted].lines == (accepted_line,)
    assert by_kind[W.claim_materialized].lines == (accepted_line, materialized_line)
    conflict = by_kind[W.capacity_conflict_attributed]
    assert conflict.lines == (accepted_line, refusal_line) and conflict.claim_ids == ("claim:resident",)


def test_a_trace_with_no_model_step_is_never_accepted() -> None:
    trace = TraceBuilder(usable_blocks=80).add("fault_injected", kind="generic_kv_transfer_failed_counter")
    assert check_bytes(trace.ndjson()).outcome is Outcome.inconclusive
