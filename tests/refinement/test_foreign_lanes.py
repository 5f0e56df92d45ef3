"""The seed artifact's three NDJSON lanes, abstracted record by record to trace v1 steps.

Each test writes a few records in the lane's own vocabulary, the way its instrumentation does,
and checks what the abstraction makes of them; the corpus test checks the real files.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.sources import detect
from kvclaims.spec.vocabulary import ConformanceRule, TraceWitness

R = ConformanceRule


def ndjson(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


# --- BlockPool lane ------------------------------------------------------------------------

POOL = {"schema_version": 1, "run_id": "run-1", "usable_blocks": 8, "policy": "probe"}


def pool(event: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, **POOL, **fields}


def pool_claim(blocks: int = 4) -> list[dict[str, Any]]:
    records = [
        pool(
            "resident_claim_accepted",
            claim_id="claim:r",
            prefix_id="prefix:r",
            protection_mode="hard_exclude",
            resident_blocks_required=blocks,
            useful_threshold_blocks=blocks,
        )
    ]
    for position in range(blocks):
        records.append(
            pool(
                "resident_block_materialized",
                claim_id="claim:r",
                physical_block_id=position + 1,
                logical_block_position=position,
                block_hash=f"b'{position}'",
            )
        )
    records.append(
        pool(
            "resident_claim_materialized",
            claim_id="claim:r",
            predicate_materialized=True,
            resident_blocks_materialized=blocks,
        )
    )
    return records


def victim(block: int, block_hash: str | None) -> dict[str, Any]:
    return pool("allocation_victim_selected", physical_block_id=block, block_hash=block_hash, claim_id=None)


def test_blockpool_is_detected_and_a_free_victim_loses_nothing() -> None:
    data = ndjson(
        [
            *pool_claim(),
            victim(9, None),
            pool("active_request_admitted", request_id="a", active_live_blocks_current=1),
        ]
    )
    assert detect(lambda: __import__("io").BytesIO(data)) == ("blockpool", True)
    assert check_bytes(data).outcome is Outcome.accepted


def test_blockpool_evicting_a_claimed_cached_block_without_harm_is_silent_harm() -> None:
    verdict = check_bytes(ndjson([*pool_claim(), victim(1, "b'0'")]))
    assert verdict.rule is R.no_silent_harm


def test_blockpool_harm_record_names_the_evicted_block_and_the_victim_line_is_its_echo() -> None:
    harmed = pool(
        "resident_claim_harmed",
        claim_id="claim:r",
        physical_block_id=4,
        resident_blocks_materialized=3,
        resident_blocks_required=4,
    )
    verdict = check_bytes(ndjson([*pool_claim(), harmed, victim(4, "b'3'")]))
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert TraceWitness.harm_reported in {w.kind for w in verdict.witnesses}


def test_blockpool_harm_while_the_named_block_is_not_the_claims_is_rejected() -> None:
    harmed = pool(
        "resident_claim_harmed",
        claim_id="claim:r",
        physical_block_id=99,
        resident_blocks_materialized=3,
        resident_blocks_required=4,
    )
    assert check_bytes(ndjson([*pool_claim(), harmed])).rule is R.no_silent_harm


def test_blockpool_refusal_with_the_live_traces_arithmetic_is_rejected() -> None:
    refusal = pool(
        "active_request_refused",
        request_id="a",
        blocking_claim_ids=["claim:r"],
        protected_resident_blocks=4,
        active_live_blocks_required=6,
        resident_plus_active_blocks=10,
        usable_blocks=8,
        capacity_shortfall_blocks=3,
    )
    assert check_bytes(ndjson([*pool_claim(), refusal])).rule is R.capacity_arithmetic


def test_blockpool_unknown_protection_mode_is_invalid() -> None:
    records = pool_claim()
    records[0]["protection_mode"] = "vibes"
    assert check_bytes(ndjson(records)).outcome is Outcome.invalid


def test_blockpool_record_missing_a_needed_field_is_invalid_and_names_it() -> None:
    records = pool_claim()
    del records[1]["physical_block_id"]
    verdict = check_bytes(ndjson(records))
    assert verdict.outcome is Outcome.invalid and verdict.finding.field == "physical_block_id"


# --- reference offload hook lane ------------------------------------------------------------


def hook(sequence: int, event: str, **fields: Any) -> dict[str, Any]:
    return {
        "event": event,
        "event_sequence": sequence,
        "schema_version": 1,
        "run_id": "ref",
        "claim_id": "claim:o",
        "usable_blocks": 16,
        **fields,
    }


def hook_accepted(registration: str = "pre_registered") -> dict[str, Any]:
    return hook(
        1,
        "resident_claim_accepted",
        claim_registration=registration,
        protection_mode="offloadable_reference",
        reusable_object_id="kv:o",
        resident_blocks_required=8,
        materialization_predicate="leading_prefix_at_least(8)",
    )


def hook_path(registration: str = "pre_registered") -> list[dict[str, Any]]:
    return [
        hook_accepted(registration),
        hook(2, "resident_claim_materialized", leading_blocks_survived=8),
        hook(3, "resident_claim_offloaded", cache_tier_to="host"),
        hook(4, "resident_claim_restore_required", request_id="reuse"),
        hook(
            5,
            "resident_claim_restored",
            request_id="reuse",
            restored_from_offload_tier=True,
            restoration_completed=True,
        ),
        hook(
            6,
            "resident_claim_reuse_after_restore",
            request_id="reuse",
            block_count_footprint=8,
            predicate_satisfied=True,
        ),
    ]


def test_offload_hook_success_path_is_accepted() -> None:
    verdict = check_bytes(ndjson(hook_path()))
    assert verdict.format == "offload-hook" and verdict.outcome is Outcome.accepted


def test_offload_hook_post_hoc_registration_accepts_no_claim() -> None:
    assert check_bytes(ndjson(hook_path("post_hoc"))).rule is R.identity


def test_offload_hook_event_sequence_must_increase() -> None:
    records = hook_path()
    records[3]["event_sequence"] = 2
    assert check_bytes(ndjson(records)).outcome is Outcome.invalid


def test_offload_hook_unknown_record_is_inconclusive() -> None:
    records = [*hook_path(), hook(7, "resident_claim_teleported")]
    assert check_bytes(ndjson(records)).outcome is Outcome.inconclusive


# --- patched OffloadingConnector lane -------------------------------------------------------

CLAIM = "run:claim:live"


def connector(sequence: int, event: str, request: str | None, **fields: Any) -> dict[str, Any]:
    record = {"event": event, "event_sequence": sequence, "hook_scope": "pydev:test", "resident_claim": True}
    record |= {"resident_claim_id": CLAIM, "claim_id": CLAIM, "request_id": request}
    return record | fields


def connector_failure(*, echo_blocking: list[str] | None = None) -> list[dict[str, Any]]:
    outcome = {"outcome_claim_id": CLAIM, "outcome_type": "refusal", "blocking_claim_ids": [CLAIM]}
    records = [
        connector(
            0,
            "request_initialized",
            "r0",
            resident_claim_role="resident",
            num_block_hashes=30,
            reusable_object_id="prefix",
            materialization_predicate="leading_prefix_at_least(1)",
        ),
        connector(
            1,
            "offload_worker_transfer_finished",
            "r0",
            success=True,
            transfer_type=["GPU", "CPU"],
            src_block_count=28,
        ),
        connector(2, "resident_claim_offloaded", "r0", destination_tier="CPU"),
        connector(3, "offload_request_finished_no_pending_jobs", "r0"),
        connector(4, "request_initialized", "r1", resident_claim_role="reuse", num_block_hashes=30),
        connector(5, "resident_claim_restore_required", "r1"),
        connector(6, "offload_worker_transfer_finished", "r1", success=False, failure_injection_flag=True),
        connector(7, "scheduler_resident_claim_restoration_failed", "r1", **outcome),
        connector(8, "scheduler_active_request_refused", "r1", blocking_claim_ids=[CLAIM]),
        connector(9, "offload_request_finished_pending_jobs", "r1"),
        connector(10, "resident_claim_restoration_failed", "r1", **outcome),
        connector(11, "active_request_refused", "r1", blocking_claim_ids=echo_blocking or [CLAIM]),
    ]
    return records


def test_connector_path_b_is_accepted_and_the_downstream_echoes_add_nothing() -> None:
    verdict = check_bytes(ndjson(connector_failure()))
    assert verdict.format == "pydev-connector" and verdict.outcome is Outcome.accepted, verdict.reason
    assert TraceWitness.restoration_failure_fail_closed in {w.kind for w in verdict.witnesses}


def test_connector_echo_that_disagrees_with_the_scheduler_boundary_is_checked_and_rejected() -> None:
    verdict = check_bytes(ndjson(connector_failure(echo_blocking=["run:claim:other"])))
    assert verdict.outcome is Outcome.rejected


@pytest.mark.parametrize("outcome", ["fallback_recompute_without_claim_satisfaction"])
def test_connector_failure_without_a_claim_outcome_leaves_the_restoration_unresolved(outcome: str) -> None:
    records = connector_failure()[:7]
    records.append(connector(7, "scheduler_resident_claim_restoration_failed", "r1", outcome_type=outcome))
    records.append(connector(8, "offload_request_finished_no_pending_jobs", "r1"))
    verdict = check_bytes(ndjson(records))
    assert verdict.rule is R.offload_order and "never restored or failed" in verdict.reason


def test_connector_claim_first_named_by_a_reuse_request_is_post_hoc() -> None:
    records = connector_failure()
    records[0]["resident_claim_role"] = "reuse"
    assert check_bytes(ndjson(records)).rule is R.identity


# --- dispatch ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "abstraction",
    ["blockpool.BlockPoolAbstraction", "offload_hook.OffloadHookAbstraction"],
)
def test_every_event_of_a_dispatching_lane_has_its_mapping(abstraction: str) -> None:
    """`RecordAbstraction.abstract` calls `_<event>`: a vocabulary name without that method
    would be an AttributeError in the middle of a check instead of a verdict."""
    import importlib

    module, name = abstraction.split(".")
    cls = getattr(importlib.import_module(f"kvclaims.refinement.abstractions.{module}"), name)
    assert [event for event in sorted(cls.VOCABULARY) if not callable(getattr(cls, "_" + event, None))] == []
