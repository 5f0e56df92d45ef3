"""The oracle on the seeds' facts, DESIGN 4's controls and hostile input. Expected verdicts
here come from the seeds and DESIGN, never from running the oracle or the checker."""

from __future__ import annotations

import io
import json

import pytest
from refinement.test_controls import CONTROLS
from refinement.test_rules import IN_PLACE_TWINS

from kvclaims.oracle.interpreter import ACCEPTED, INCONCLUSIVE, INVALID, REJECTED, judge
from kvclaims.refinement.testing import TraceBuilder, generate_valid_trace


def ndjson(*events: dict, usable: int | None = 80) -> bytes:
    header = {"kvclaims_trace": 1, "usable_blocks": usable, "block_size": 16}
    closed = {"event": "trace_closed", "reason": "closed"}
    lines = [json.dumps(header)] + [json.dumps({"seq": i, **e}) for i, e in enumerate((*events, closed), 1)]
    return ("\n".join(lines) + "\n").encode()


def accepted(claim_id: str, mode: str, footprint: int, blocks: int, **extra) -> dict:
    predicate = {"kind": "leading_prefix_at_least", "blocks": blocks}
    return {
        "event": "resident_claim_accepted", "claim_id": claim_id, "owner_scope": "o", "object_id": "p",
        "mode": mode, "footprint_blocks": footprint, "predicate": predicate, **extra,
    }  # fmt: skip


def refusal(protected: int, active: int, usable: int, shortfall: int, blocking=("A",), request="r1") -> dict:
    return {
        "event": "active_request_refused", "request_id": request, "reason": "capacity",
        "blocking_claim_ids": list(blocking), "protected_resident_blocks": protected,
        "active_live_blocks_required": active, "resident_plus_active_blocks": protected + active,
        "usable_blocks": usable, "capacity_shortfall_blocks": shortfall,
    }  # fmt: skip


REUSE = {
    "event": "request_reused",
    "request_id": "r1",
    "claim_id": "A",
    "cached_blocks": 1,
    "predicate_satisfied": True,
}


def materialized(claim_id: str, leading: int) -> dict:
    return {"event": "resident_claim_materialized", "claim_id": claim_id, "leading_blocks": leading}


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_design_controls_are_rejected_and_their_twins_accepted(name: str) -> None:
    build, _ = CONTROLS[name]
    assert judge(build(False).ndjson()).outcome == ACCEPTED
    assert judge(build(True).ndjson()).outcome == REJECTED


@pytest.mark.parametrize("name", sorted(IN_PLACE_TWINS))
def test_seed_002_in_place_checkpoint_restores_judged_like_the_model(name: str) -> None:
    build, rule = IN_PLACE_TWINS[name]
    bad = judge(build(True).ndjson())
    assert (bad.outcome, bad.rule) == (REJECTED, rule.value), bad.message
    assert judge(build(False).ndjson()).outcome == ACCEPTED


def test_seed_001_canonical_refusal_60_70_80_is_accepted() -> None:
    trace = ndjson(accepted("A", "hard_protected", 60, 60), materialized("A", 60), refusal(60, 70, 80, 50))
    assert judge(trace).outcome == ACCEPTED


def test_seed_001_live_trace_numbers_40_46_68_19_are_rejected() -> None:
    trace = ndjson(
        accepted("A", "hard_protected", 40, 40), materialized("A", 40), refusal(40, 46, 68, 19), usable=68
    )
    verdict = judge(trace)
    assert (verdict.outcome, verdict.rule) == (REJECTED, "capacity_arithmetic")


def test_class_1_protecting_120_blocks_in_an_80_block_pool_is_rejected() -> None:
    trace = ndjson(accepted("A", "hard_protected", 120, 10), materialized("A", 10), refusal(120, 10, 80, 50))
    assert judge(trace).rule == "capacity_arithmetic"


def test_class_1_admission_that_overcommits_the_pool_is_rejected_and_one_that_fits_accepted() -> None:
    # seed 001 3.4: 60 claim-held + the request's live blocks not shared with the claim <= 80
    prefix = (accepted("A", "hard_protected", 60, 60), materialized("A", 60))
    admit = {"event": "active_request_admitted", "request_id": "r1", "active_live_blocks": 30}
    assert judge(ndjson(*prefix, {**admit, "claim_shared_blocks": 10})).outcome == ACCEPTED
    assert judge(ndjson(*prefix, {**admit, "claim_shared_blocks": 9})).rule == "capacity_arithmetic"
    # without the field the sharing is unknown (requests share prefix blocks): it fits alone
    assert judge(ndjson(*prefix, admit)).outcome == ACCEPTED
    assert judge(ndjson(*prefix, {**admit, "active_live_blocks": 81})).rule == "capacity_arithmetic"


def test_class_2_expiry_before_the_promised_duration_is_rejected() -> None:
    claim = accepted("A", "expiring", 2, 2, duration_steps=5, engine_step=10)
    early = {"event": "resident_claim_expired", "claim_id": "A", "engine_step": 14}
    on_time = {"event": "resident_claim_expired", "claim_id": "A", "engine_step": 15}
    no_clock = {"event": "resident_claim_expired", "claim_id": "A"}
    assert judge(ndjson(claim, early)).rule == "duration"  # the checker's rule name too
    assert judge(ndjson(claim, on_time)).outcome == ACCEPTED
    assert judge(ndjson(claim, no_clock)).outcome == INCONCLUSIVE


def test_class_4_a_materialized_report_is_confirmed_only_by_the_blocks_it_lacked() -> None:
    """C5: re-storing the one block the claim's events showed does not confirm a report of two
    (it once did: the report was also assumed, so any block event "confirmed" it); storing the
    missing second block does."""
    first = {"event": "block_stored", "block_id": 0, "block_hash": "h0", "claim_id": "A", "position": 0}
    second = {**first, "block_id": 1, "block_hash": "h1", "position": 1}
    reported = (accepted("A", "best_effort", 2, 2), first, materialized("A", 2))
    assert judge(ndjson(*reported, first)).rule == "lifecycle"
    assert judge(ndjson(*reported, second)).outcome == ACCEPTED


def test_class_1_only_protected_blocks_count_against_an_admission() -> None:
    """C1: a block stored toward a predicate not yet shown is evictable cache; once the claim
    holds its predicate its blocks are protected and count against the pool (here the request
    says it shares none of them)."""
    first = {"event": "block_stored", "block_id": 0, "block_hash": "h0", "claim_id": "A", "position": 0}
    second = {**first, "block_id": 1, "block_hash": "h1", "position": 1}
    admit = {
        "event": "active_request_admitted",
        "request_id": "r1",
        "active_live_blocks": 3,
        "claim_shared_blocks": 0,
    }
    claim = accepted("A", "hard_protected", 2, 2)
    assert judge(ndjson(claim, first, admit, usable=4)).outcome == ACCEPTED
    assert judge(ndjson(claim, first, second, admit, usable=4)).rule == "capacity_arithmetic"


def test_class_4_a_loss_ends_the_prefix_a_report_let_the_oracle_assume() -> None:
    """C5: after `lost` the reported (assumed) prefix is gone, so a new report of two blocks
    needs both blocks stored again (the length-6 comparison found the prefix kept)."""
    first = {"event": "block_stored", "block_id": 0, "block_hash": "h0", "claim_id": "A", "position": 0}
    second = {**first, "block_id": 1, "block_hash": "h1", "position": 1}
    lost = {"event": "resident_claim_lost", "claim_id": "A", "leading_blocks": 0}
    history = (accepted("A", "best_effort", 2, 2), materialized("A", 2), lost, first, materialized("A", 2))
    assert judge(ndjson(*history)).rule == "lifecycle"
    assert judge(ndjson(*history, second)).outcome == ACCEPTED


def test_class_3_new_content_in_a_held_block_breaks_every_holder() -> None:
    stored = {"event": "block_stored", "block_id": 7, "block_hash": "h", "claim_id": "A", "position": 0}
    shared = {**stored, "claim_id": "B"}
    replaced = {"event": "block_stored", "block_id": 7, "block_hash": "other"}
    harmed = {"event": "resident_claim_harmed", "leading_blocks": 0, "required_blocks": 1}
    claims = (accepted("A", "hard_protected", 1, 1), accepted("B", "hard_protected", 1, 1), stored, shared)
    assert judge(ndjson(*claims)).outcome == ACCEPTED
    assert judge(ndjson(*claims, replaced)).rule == "no_silent_harm"  # both owe harm
    both = (*claims, replaced, {**harmed, "claim_id": "A"}, {**harmed, "claim_id": "B"})
    assert judge(ndjson(*both)).outcome == ACCEPTED


def test_class_5_a_matching_checkpoint_alone_does_not_restore_a_two_key_claim() -> None:
    predicate = {"kind": "hybrid_two_key", "boundary_blocks": 1}
    checkpoint = {"boundary": 1, "payload_hash": "p", "value_hash": "v"}
    prefix = (
        {**accepted("A", "offloadable", 1, 1), "predicate": predicate},
        {**materialized("A", 1), "checkpoint": checkpoint},
        {"event": "resident_claim_offloaded", "claim_id": "A", "tier": "cpu"},
        {"event": "resident_claim_restore_required", "claim_id": "A", "request_id": "r1"},
    )
    value_side = {"event": "resident_claim_checkpoint_restored", "claim_id": "A", **checkpoint}
    kv_side = {"event": "resident_claim_restored", "claim_id": "A", "request_id": "r1", "restored_blocks": 1}
    assert judge(ndjson(*prefix, kv_side, REUSE)).rule == "offload_order"
    assert judge(ndjson(*prefix, kv_side, value_side, REUSE)).outcome == ACCEPTED
    # trace-format.md: the KV blocks are restored before the checkpoint
    assert judge(ndjson(*prefix, value_side, kv_side, REUSE)).rule == "hybrid_two_key"
    # class 5: with no block events, only restored_blocks confirms the KV side for the reuse
    unconfirmed = {key: value for key, value in kv_side.items() if key != "restored_blocks"}
    assert judge(ndjson(*prefix, unconfirmed, value_side, REUSE)).rule == "offload_order"


def test_generated_valid_histories_are_accepted() -> None:
    for seed in range(3):
        out = io.BytesIO()
        generate_valid_trace(out, 2000, seed=seed, usable_blocks=512, live_claims=16)
        assert judge(out.getvalue()).outcome == ACCEPTED


@pytest.mark.parametrize(
    "line",
    [
        b'{"seq": true, "event": "request_finished", "request_id": "r", "status": "s"}',
        b'{"seq": 1.0, "event": "request_finished", "request_id": "r", "status": "s"}',
        b'{"seq": 1, "seq": 2, "event": "request_finished", "request_id": "r", "status": "s"}',
        b'{"seq": 1, "event": "active_request_admitted", "request_id": "r", "active_live_blocks": "3"}',
        b'{"seq": 1, "event": "request_finished", "request_id": "r"',
    ],
)
def test_malformed_lines_are_invalid(line: bytes) -> None:
    header = b'{"kvclaims_trace": 1, "usable_blocks": 8}\n'
    assert judge(header + line + b"\n").outcome == INVALID


def test_absurd_sizes_give_a_verdict_without_an_allocation_sized_by_them() -> None:
    assert judge(ndjson(accepted("A", "hard_protected", 2**62, 2**62), usable=None)).outcome == INVALID
    huge = 2**24  # the largest prefix trace-format.md allows
    trace = ndjson(accepted("A", "hard_protected", huge, huge), materialized("A", huge), usable=None)
    assert judge(trace).outcome == ACCEPTED
    removed = {"event": "block_removed", "block_id": 1, "block_hash": "h", "claim_id": "A", "position": 5}
    assert (
        judge(
            ndjson(accepted("A", "hard_protected", huge, huge), materialized("A", huge), removed, usable=None)
        ).rule
        == "no_silent_harm"
    )
    # in a pool smaller than the claim, its materialization overcommits the pool first (C1b)
    assert (
        judge(ndjson(accepted("A", "hard_protected", huge, huge), materialized("A", huge))).rule
        == "capacity_arithmetic"
    )


def test_a_builder_trace_of_the_header_only_is_inconclusive() -> None:
    assert judge(TraceBuilder(usable_blocks=8).ndjson()).outcome == INCONCLUSIVE


OFFLOADED = (
    accepted("A", "offloadable", 1, 1),
    materialized("A", 1),
    {"event": "resident_claim_offloaded", "claim_id": "A", "tier": "cpu"},
    {"event": "active_request_admitted", "request_id": "r1", "active_live_blocks": 1},
    {"event": "resident_claim_restore_required", "claim_id": "A", "request_id": "r1"},
)
FINISH = {"event": "request_finished", "request_id": "r1", "status": "finished"}
FAILED = {
    "event": "resident_claim_restoration_failed",
    "claim_id": "A",
    "request_id": "r1",
    "outcome": "refusal",
}
FAILURE_DEFERRAL = {
    "event": "active_request_deferred",
    "request_id": "r1",
    "reason": "restoration_failed",
    "blocking_claim_ids": ["A"],
}


def test_class_10_offload_and_restore_of_a_hard_protected_claim_is_legal() -> None:
    hard = (accepted("A", "hard_protected", 1, 1), *OFFLOADED[1:])
    restored = {"event": "resident_claim_restored", "claim_id": "A", "request_id": "r1", "restored_blocks": 1}
    assert judge(ndjson(*hard, restored, REUSE, FINISH)).outcome == ACCEPTED
    demotable = (accepted("A", "demotable", 1, 1), *OFFLOADED[1:3])
    assert judge(ndjson(*demotable)).rule == "lifecycle"


@pytest.mark.parametrize(
    "continuation",
    [
        [FINISH],
        [{"event": "active_request_admitted", "request_id": "r1", "active_live_blocks": 1}, FINISH],
        [{**FAILURE_DEFERRAL, "event": "active_request_refused"}, FINISH],
    ],
    ids=["finish", "admission", "refusal"],
)
def test_class_11_a_restoration_failure_deferral_has_legal_continuations(continuation: list) -> None:
    assert judge(ndjson(*OFFLOADED, FAILED, FAILURE_DEFERRAL, *continuation)).outcome == ACCEPTED
    assert judge(ndjson(*OFFLOADED, FAILED, FINISH)).rule == "attribution"  # no fail-closed outcome


@pytest.mark.parametrize("ending", ["resident_claim_released", "resident_claim_demoted"])
def test_class_12_release_or_demotion_with_a_pending_restore_lets_the_request_finish(ending: str) -> None:
    assert judge(ndjson(*OFFLOADED, {"event": ending, "claim_id": "A"}, FINISH)).outcome == ACCEPTED
    assert judge(ndjson(*OFFLOADED, FINISH)).rule == "offload_order"  # still responsible: no silent skip


def test_class_14_request_edge_cases() -> None:
    assert judge(ndjson(FINISH)).outcome == ACCEPTED  # a client abort before the pool (choice C12)
    assert judge(ndjson(FINISH, FINISH)).rule == "identity"  # the id is retired
    deferred = {**FAILURE_DEFERRAL, "reason": "capacity", "protected_resident_blocks": 1,
                "active_live_blocks_required": 80, "resident_plus_active_blocks": 81, "usable_blocks": 80,
                "capacity_shortfall_blocks": 1}  # fmt: skip
    hard = (accepted("A", "hard_protected", 1, 1), materialized("A", 1), deferred)
    admitted = {"event": "active_request_admitted", "request_id": "r1", "active_live_blocks": 1}
    assert judge(ndjson(*hard, REUSE, FINISH)).outcome == ACCEPTED  # served from the cache (C12)
    assert judge(ndjson(*hard, admitted, REUSE, FINISH)).outcome == ACCEPTED
    refused = {**deferred, "event": "active_request_refused"}
    assert judge(ndjson(*hard[:2], refused, REUSE)).rule == "lifecycle"  # a refused request is done


def test_a_satisfied_reuse_must_agree_with_the_claims_blocks() -> None:
    stored = {"event": "block_stored", "block_id": 1, "block_hash": "h", "claim_id": "A", "position": 0}
    removed = {"event": "block_removed", "block_id": 1, "block_hash": "h"}
    prefix = (accepted("A", "best_effort", 1, 1), stored, materialized("A", 1))
    assert judge(ndjson(*prefix, REUSE)).outcome == ACCEPTED
    assert judge(ndjson(*prefix, removed, REUSE)).rule == "lifecycle"


def test_an_unclosed_trace_is_truncated_and_a_line_after_the_close_is_invalid() -> None:
    header = b'{"kvclaims_trace": 1, "usable_blocks": 8}\n'
    finish = b'{"seq": 1, "event": "request_finished", "request_id": "r", "status": "s"}\n'
    closed = b'{"seq": 2, "event": "trace_closed", "reason": "closed"}\n'
    assert judge(header + finish + closed).outcome == ACCEPTED
    assert judge(header + finish).outcome == INCONCLUSIVE
    after = b'{"seq": 3, "event": "request_finished", "request_id": "q", "status": "s"}\n'
    assert judge(header + finish + closed + after).outcome == INVALID


def _submitted(claim_id: str, mode: str, footprint: int, blocks: int, **extra) -> dict:
    return {**accepted(claim_id, mode, footprint, blocks, **extra), "event": "resident_claim_submitted"}


def _conditionally(claim_id: str, mode: str, footprint: int, blocks: int, **extra) -> dict:
    return {
        **accepted(claim_id, mode, footprint, blocks, **extra),
        "event": "resident_claim_conditionally_accepted",
    }


def test_changed_terms_bind_only_through_a_conditional_acceptance_of_a_submission() -> None:
    asked = _submitted("A", "hard_protected", 2, 2)
    assert judge(ndjson(asked, accepted("A", "hard_protected", 2, 2))).outcome == ACCEPTED
    assert judge(ndjson(asked, accepted("A", "best_effort", 2, 2))).rule == "terms"
    assert judge(ndjson(asked, _conditionally("A", "best_effort", 2, 2, reason="full"))).outcome == ACCEPTED
    assert judge(ndjson(_conditionally("A", "best_effort", 2, 2))).rule == "terms"  # never submitted
    other_owner = {**_conditionally("A", "best_effort", 2, 2), "owner_scope": "o2"}
    assert judge(ndjson(asked, other_owner)).rule == "identity"
    # the changed terms are the ones judged: a best_effort claim's loss is not harm
    lost = {"event": "resident_claim_lost", "claim_id": "A", "leading_blocks": 0}
    changed = _conditionally("A", "best_effort", 2, 2)
    assert judge(ndjson(asked, changed, materialized("A", 2), lost)).outcome == ACCEPTED
    assert judge(ndjson(asked, accepted("A", "hard_protected", 2, 2), materialized("A", 2), lost)).rule == (
        "no_silent_harm"
    )


def test_the_step_clock_is_an_integer_on_every_event() -> None:
    finish = {"event": "request_finished", "request_id": "r1", "status": "finished"}
    assert judge(ndjson({**finish, "engine_step": 3})).outcome == ACCEPTED
    for wrong in ("3", 1.5, True, -1):
        assert judge(ndjson({**finish, "engine_step": wrong})).outcome == INVALID


def test_a_block_outside_the_footprint_of_a_submitted_claim_is_an_identity_violation() -> None:
    def stored(position: int) -> dict:
        return {
            "event": "block_stored",
            "block_id": 0,
            "block_hash": "h",
            "claim_id": "A",
            "position": position,
        }

    asked = _submitted("A", "hard_protected", 2, 2)
    assert judge(ndjson(asked, stored(1))).outcome == ACCEPTED
    assert judge(ndjson(asked, stored(2))).rule == "identity"


def test_terms_in_tokens_and_blocks_without_a_block_size_are_undecidable() -> None:
    """C7 compares in one unit; a trace without `block_size` cannot convert 16 tokens to blocks,
    so whether the accepted terms repeat the submitted ones is unknown (never accepted)."""
    tokens = {**accepted("A", "hard_protected", 1, 1), "event": "resident_claim_submitted"}
    tokens["predicate"] = {"kind": "leading_prefix_at_least", "tokens": 16}
    header = {"kvclaims_trace": 1, "usable_blocks": 80}
    closed = {"event": "trace_closed", "reason": "closed"}
    events = (tokens, accepted("A", "hard_protected", 1, 1), closed)
    lines = [json.dumps(header)] + [json.dumps({"seq": i, **e}) for i, e in enumerate(events, 1)]
    assert judge(("\n".join(lines) + "\n").encode()).outcome == INCONCLUSIVE
    assert judge(ndjson(tokens, accepted("A", "hard_protected", 1, 1))).outcome == ACCEPTED
    assert (
        judge(
            ndjson(
                {**tokens, "predicate": {**tokens["predicate"], "tokens": 17}},
                accepted("A", "hard_protected", 1, 1),
            )
        ).outcome
        == REJECTED
    )
