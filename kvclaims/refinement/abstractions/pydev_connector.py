"""The seed artifact's patched-OffloadingConnector lane (seed 000 s. 7,
`pydev_connector_failure_semantics/`): a real vLLM connector path with claim metadata joined
through a job-id registry and a scheduler-boundary outcome at vLLM's invalid-KV-load handling.

Records have a strictly increasing `event_sequence` and no `schema_version`. A record belongs to
a claim when it has `resident_claim: true` and a `resident_claim_id` (or `claim_id`). Mapping:

- `request_initialized` -> `resident_claim_accepted` the first time a claim appears with role
  `resident` (claim metadata accepted before the lifecycle, seed 000 s. 7; mode offloadable;
  footprint the request's `num_block_hashes`; predicate from `materialization_predicate`), then
  `active_request_admitted`
- `offload_worker_transfer_finished`, success, GPU->CPU, of a claim never materialized ->
  `resident_claim_materialized` with `src_block_count` leading blocks (the claim's blocks were
  resident and copied out)
- `offload_worker_transfer_finished`, failed under `failure_injection_flag` -> `fault_injected`
  (context, not a model step)
- `resident_claim_offloaded` -> `resident_claim_offloaded` (tier `destination_tier`)
- `resident_claim_restore_required` -> `resident_claim_restore_required`
- `resident_claim_restored` -> `resident_claim_restored` when `restored_from_offload_tier`; else
  nothing
- `scheduler_resident_claim_restoration_failed` -> `resident_claim_restoration_failed` for
  `outcome_claim_id`, when `outcome_type` is a model outcome (refusal, demotion, expiry, harm);
  `fallback_recompute_without_claim_satisfaction` is no claim outcome, so the restoration stays
  unresolved
- `scheduler_active_request_refused` -> `active_request_refused`, reason `restoration_failed`
- `offload_request_finished_(no_)pending_jobs` -> `request_finished`
- `resident_claim_restoration_failed`, `active_request_refused` (connector level) -> nothing when
  they repeat, with the same claim, outcome and blocking ids, what the scheduler boundary already
  reported for that request (the seed calls them downstream evidence); otherwise the same mapping
  as the scheduler events
- lookups, job creation and completion, transfer submission, load-failed notices, generic counters
  -> nothing: connector plumbing and claim-less counters are not model steps
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
)
from kvclaims.refinement.reader import HeaderInfo
from kvclaims.spec.vocabulary import ProtectionMode, RestorationOutcome

FORMAT = "pydev-connector"

_PLUMBING = frozenset(
    {
        "offload_lookup_result",
        "offload_store_job_created",
        "offload_load_job_created",
        "offload_worker_transfer_submitted",
        "offload_worker_load_failed",
        "offload_job_completed",
        "offload_load_job_failed",
        "generic_kv_transfer_failed_counter",
        "generic_request_error_counter",
    }
)
_FINISHED = frozenset({"offload_request_finished_pending_jobs", "offload_request_finished_no_pending_jobs"})

VOCABULARY: frozenset[str] = (
    _PLUMBING
    | _FINISHED
    | frozenset(
        {
            "request_initialized",
            "offload_worker_transfer_finished",
            "resident_claim_offloaded",
            "resident_claim_restore_required",
            "resident_claim_restored",
            "resident_claim_restoration_failed",
            "scheduler_resident_claim_restoration_failed",
            "scheduler_active_request_refused",
            "active_request_refused",
        }
    )
)

CLAIM_MODE = ProtectionMode.offloadable
"""The lane exists to witness the offloadable bundle; its claims are offloadable claims."""

_OUTCOMES = frozenset(o.value for o in RestorationOutcome)
_STORE = ["GPU", "CPU"]


class PydevConnectorAbstraction(RecordAbstraction):
    """Maps one patched-connector record at a time to trace v1 steps (see the module table)."""

    FORMAT = FORMAT
    VOCABULARY = VOCABULARY
    MARKED_BY = frozenset({"event_sequence"})
    NEVER_HAS = frozenset({"schema_version"})

    def __init__(self, first: dict[str, Any]) -> None:
        self.header = HeaderInfo(None, None, first.get("hook_scope"))
        self._accepted: set[str] = set()
        self._materialized: set[str] = set()
        self._failures: dict[tuple[str, str], str] = {}
        self._refusals: dict[str, list[str]] = {}

    def abstract(self, record: dict[str, Any], line: int) -> list[dict[str, Any]]:
        name = record["event"]
        if name in _PLUMBING:
            return []
        if name in _FINISHED:
            return [
                {
                    "event": "request_finished",
                    "request_id": require(record, "request_id", str, line),
                    "status": name.removeprefix("offload_request_"),
                }
            ]
        return getattr(self, "_" + name)(record, line)

    @staticmethod
    def _claim_of(r: dict[str, Any], line: int) -> str | None:
        if r.get("resident_claim") is not True:
            return None
        return optional(r, "resident_claim_id", str, line) or optional(r, "claim_id", str, line)

    def _request_initialized(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        request_id = require(r, "request_id", str, line)
        blocks = require(r, "num_block_hashes", int, line)
        steps: list[dict[str, Any]] = []
        claim_id = self._claim_of(r, line)
        if (
            claim_id is not None
            and r.get("resident_claim_role") == "resident"
            and claim_id not in self._accepted
        ):
            self._accepted.add(claim_id)
            predicate = require(r, "materialization_predicate", str, line)
            steps.append(
                {
                    "event": "resident_claim_accepted",
                    "claim_id": claim_id,
                    "owner_scope": require(r, "hook_scope", str, line),
                    "object_id": require(r, "reusable_object_id", str, line),
                    "mode": CLAIM_MODE.value,
                    "footprint_blocks": blocks,
                    "predicate": {
                        "kind": "leading_prefix_at_least",
                        "blocks": leading_prefix_blocks(predicate, line, "materialization_predicate"),
                    },
                }
            )
        steps.append(
            {"event": "active_request_admitted", "request_id": request_id, "active_live_blocks": blocks}
        )
        return steps

    def _offload_worker_transfer_finished(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        success = require(r, "success", bool, line)
        if not success:
            if r.get("failure_injection_flag") is not True:
                return []
            return [
                {
                    "event": "fault_injected",
                    "kind": optional(r, "failure_reason", str, line) or "load_failure",
                    "claim_id": optional(r, "failure_matched_claim_id", str, line),
                    "request_id": optional(r, "request_id", str, line),
                }
            ]
        claim_id = self._claim_of(r, line)
        if claim_id is None or r.get("transfer_type") != _STORE or claim_id in self._materialized:
            return []
        self._materialized.add(claim_id)
        return [
            {
                "event": "resident_claim_materialized",
                "claim_id": claim_id,
                "leading_blocks": require(r, "src_block_count", int, line),
            }
        ]

    def _resident_claim_offloaded(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return offloaded_step(r, line, "destination_tier")

    def _resident_claim_restore_required(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return [claim_request_step(r, line, "resident_claim_restore_required")]

    def _resident_claim_restored(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        if r.get("restored_from_offload_tier") is not True:
            return []
        return [restored_step(r, line)]

    def _failure(self, r: dict[str, Any], line: int) -> tuple[str, str, str]:
        claim_id = optional(r, "outcome_claim_id", str, line) or require(r, "claim_id", str, line)
        return claim_id, require(r, "request_id", str, line), require(r, "outcome_type", str, line)

    def _scheduler_resident_claim_restoration_failed(
        self, r: dict[str, Any], line: int
    ) -> list[dict[str, Any]]:
        claim_id, request_id, outcome = self._failure(r, line)
        if outcome not in _OUTCOMES:
            return []
        self._failures[(claim_id, request_id)] = outcome
        return [
            {
                "event": "resident_claim_restoration_failed",
                "claim_id": claim_id,
                "request_id": request_id,
                "outcome": outcome,
            }
        ]

    def _resident_claim_restoration_failed(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        claim_id, request_id, outcome = self._failure(r, line)
        if self._failures.get((claim_id, request_id)) == outcome:
            return []
        return self._scheduler_resident_claim_restoration_failed(r, line)

    def _scheduler_active_request_refused(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        request_id = require(r, "request_id", str, line)
        blocking = require(r, "blocking_claim_ids", list, line)
        self._refusals[request_id] = blocking
        return [
            {
                "event": "active_request_refused",
                "request_id": request_id,
                "reason": "restoration_failed",
                "blocking_claim_ids": blocking,
            }
        ]

    def _active_request_refused(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        request_id = require(r, "request_id", str, line)
        if self._refusals.get(request_id) == require(r, "blocking_claim_ids", list, line):
            return []
        return self._scheduler_active_request_refused(r, line)
