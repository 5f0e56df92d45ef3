"""The seed artifact's reference offload hook lane (seed 000, `offload_lifecycle/`).

Records carry `schema_version` and a strictly increasing `event_sequence`. The mapping:

- `resident_claim_accepted` (claim_id, run_id, reusable_object_id, protection_mode,
  resident_blocks_required, materialization_predicate, claim_registration) ->
  `resident_claim_accepted` when `claim_registration` is `pre_registered`; a claim registered any
  other way (post hoc) is accepted by nothing, so its later events name an unknown claim
- `resident_claim_materialized` (leading_blocks_survived) -> `resident_claim_materialized`
- `resident_claim_offloaded` (cache_tier_to) -> `resident_claim_offloaded`
- `resident_claim_restore_required` (request_id) -> `resident_claim_restore_required`
- `resident_claim_restored` (restored_from_offload_tier, restoration_completed) ->
  `resident_claim_restored` only when the KV came back from the offload tier; a fallback recompute
  restores nothing
- `resident_claim_reuse_after_restore` (request_id, block_count_footprint, predicate_satisfied) ->
  `request_reused`
- `resident_claim_restoration_failed` (outcome_claim_id, outcome_type, request_id) ->
  `resident_claim_restoration_failed` attributed to the outcome's claim, when the outcome is one
  of the model's (refusal, demotion, expiry, harm); any other outcome is no claim outcome
- `active_request_refused` (request_id, blocking_claim_ids, arbiter_action / feasibility) ->
  `active_request_refused`, reason `restoration_failed` for `restore_unavailable_refuse` /
  `infeasible_restore_claimed_kv`, else `capacity`
- `generic_kv_blocks_offloaded` / `_onboarded` -> nothing: generic substrate counters name no
  claim

`protection_mode` `offloadable_reference` is the reference hook's `offloadable`.
"""

from __future__ import annotations

from typing import Any

from kvclaims.refinement.abstractions import (
    RecordAbstraction,
    claim_request_step,
    leading_prefix_blocks,
    offloaded_step,
    optional,
    require,
    restored_step,
    usable_blocks_of,
)
from kvclaims.refinement.reader import HeaderInfo, parse_error
from kvclaims.spec.tables import CAPACITY_PROOF_FIELDS
from kvclaims.spec.vocabulary import ProtectionMode, RestorationOutcome

FORMAT = "offload-hook"

VOCABULARY: frozenset[str] = frozenset(
    {
        "resident_claim_accepted",
        "resident_claim_materialized",
        "resident_claim_offloaded",
        "resident_claim_restore_required",
        "resident_claim_restored",
        "resident_claim_reuse_after_restore",
        "resident_claim_restoration_failed",
        "active_request_refused",
        "generic_kv_blocks_offloaded",
        "generic_kv_blocks_onboarded",
    }
)

MODES: dict[str, ProtectionMode] = {"offloadable_reference": ProtectionMode.offloadable}

RESTORATION_REFUSALS = frozenset({"restore_unavailable_refuse", "infeasible_restore_claimed_kv"})
"""`arbiter_action` / `feasibility` values that mark a refusal caused by a failed restoration."""

_OUTCOMES = frozenset(o.value for o in RestorationOutcome)


class OffloadHookAbstraction(RecordAbstraction):
    """Maps one reference-hook record at a time to trace v1 steps (see the module table)."""

    FORMAT = FORMAT
    VOCABULARY = VOCABULARY
    MARKED_BY = frozenset({"schema_version", "event_sequence"})

    def __init__(self, first: dict[str, Any]) -> None:
        self.header = HeaderInfo(usable_blocks_of(first), None, first.get("run_id"))

    def _resident_claim_accepted(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        if r.get("claim_registration") != "pre_registered":
            return []
        mode = require(r, "protection_mode", str, line)
        if mode not in MODES:
            raise parse_error(f"unknown offload-hook protection_mode {mode!r}", line, "protection_mode")
        predicate = require(r, "materialization_predicate", str, line)
        return [
            {
                "event": "resident_claim_accepted",
                "claim_id": require(r, "claim_id", str, line),
                "owner_scope": require(r, "run_id", str, line),
                "object_id": require(r, "reusable_object_id", str, line),
                "mode": MODES[mode].value,
                "footprint_blocks": require(r, "resident_blocks_required", int, line),
                "predicate": {
                    "kind": "leading_prefix_at_least",
                    "blocks": leading_prefix_blocks(predicate, line, "materialization_predicate"),
                },
            }
        ]

    def _resident_claim_materialized(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return [
            {
                "event": "resident_claim_materialized",
                "claim_id": require(r, "claim_id", str, line),
                "leading_blocks": require(r, "leading_blocks_survived", int, line),
            }
        ]

    def _resident_claim_offloaded(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return offloaded_step(r, line, "cache_tier_to")

    def _resident_claim_restore_required(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return [claim_request_step(r, line, "resident_claim_restore_required")]

    def _resident_claim_restored(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        from_tier = r.get("restored_from_offload_tier") is True and r.get("restoration_completed") is True
        return [restored_step(r, line)] if from_tier else []

    def _resident_claim_reuse_after_restore(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return [
            {
                "event": "request_reused",
                "request_id": require(r, "request_id", str, line),
                "claim_id": require(r, "claim_id", str, line),
                "cached_blocks": require(r, "block_count_footprint", int, line),
                "predicate_satisfied": require(r, "predicate_satisfied", bool, line),
            }
        ]

    def _resident_claim_restoration_failed(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        outcome = require(r, "outcome_type", str, line)
        if outcome not in _OUTCOMES:
            return []
        claim_id = optional(r, "outcome_claim_id", str, line) or require(r, "claim_id", str, line)
        return [
            {
                "event": "resident_claim_restoration_failed",
                "claim_id": claim_id,
                "request_id": require(r, "request_id", str, line),
                "outcome": outcome,
            }
        ]

    def _active_request_refused(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        causes = {r.get("arbiter_action"), r.get("feasibility")}
        step: dict[str, Any] = {
            "event": "active_request_refused",
            "request_id": require(r, "request_id", str, line),
            "reason": "restoration_failed" if causes & RESTORATION_REFUSALS else "capacity",
            "blocking_claim_ids": require(r, "blocking_claim_ids", list, line),
        }
        for name in CAPACITY_PROOF_FIELDS:
            if name != "usable_blocks" or "capacity_shortfall_blocks" in r:
                value = optional(r, name, int, line)
                if value is not None:
                    step[name] = value
        return [step]

    def _generic_kv_blocks_offloaded(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return []

    _generic_kv_blocks_onboarded = _generic_kv_blocks_offloaded
