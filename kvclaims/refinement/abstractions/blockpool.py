"""The seed artifact's BlockPool lane (seed 001): direct vLLM BlockPool probes and the live
`vllm.LLM.generate` telemetry (`conformance/`, `claim_lifecycle/`, `claim_metadata/`,
`live_scheduler*/` of the corpus).

Records have `schema_version` and no `event_sequence`: order is line order. The mapping, record
by record (fields in parentheses are the ones read):

- `resident_block_materialized` (physical_block_id, block_hash, claim_id?, logical_block_position)
  -> `block_stored`, with claim and position when the block is claimed
- `allocation_victim_selected` with a `block_hash` -> `block_removed` of that physical block (a
  cached block was evicted); without a hash the victim was a free, uncached block and nothing is
  lost
- `resident_claim_accepted` (claim_id, run_id, prefix_id, protection_mode,
  resident_blocks_required, useful_threshold_blocks) -> `resident_claim_accepted`: owner is the
  run, object the prefix, predicate `leading_prefix_at_least(useful_threshold_blocks)`
- `resident_claim_materialized` (resident_blocks_materialized, predicate_materialized) ->
  `resident_claim_materialized` when `predicate_materialized` is true, else nothing
- `resident_claim_demoted` / `_expired` -> `resident_claim_demoted` / `_expired`
- `resident_claim_harmed` (physical_block_id, resident_blocks_materialized,
  resident_blocks_required) -> `block_removed` of the named block (the record reports the eviction
  that broke the predicate), then `resident_claim_harmed`
- `resident_claim_block_lost_after_release` (physical_block_id) -> `block_removed` of the named
  block
- `active_request_refused` / `_deferred` -> the same event, reason `capacity`, with its capacity
  proof
- `active_request_admitted` -> `active_request_admitted` the first time a request is served (later
  records are per-step slot allocations of a running request: no step)
- `future_reuse_denied` / `future_reuse_admitted` (request_id, active_live_blocks_current,
  active_live_blocks_required) -> `active_request_admitted` when the request is not yet served and
  holds all its required live blocks; otherwise nothing. Write-no-admit concerns the request's own
  future KV, not a claim (no claim_id)

The probes log a claim-level record just before the allocator's record for the same block
(harm, then the victim line): the victim line then removes a block that is already gone, which
is no step. `protection_mode` `hard_exclude` is the prototype's name for `hard_protected`.
"""

from __future__ import annotations

from typing import Any

from kvclaims.refinement.abstractions import RecordAbstraction, optional, require, usable_blocks_of
from kvclaims.refinement.reader import HeaderInfo, parse_error
from kvclaims.spec.tables import CAPACITY_PROOF_FIELDS
from kvclaims.spec.vocabulary import ProtectionMode

FORMAT = "blockpool"

VOCABULARY: frozenset[str] = frozenset(
    {
        "allocation_victim_selected",
        "resident_block_materialized",
        "resident_claim_accepted",
        "resident_claim_materialized",
        "resident_claim_demoted",
        "resident_claim_expired",
        "resident_claim_harmed",
        "resident_claim_block_lost_after_release",
        "active_request_refused",
        "active_request_deferred",
        "active_request_admitted",
        "future_reuse_denied",
        "future_reuse_admitted",
    }
)

MODES: dict[str, ProtectionMode] = {"hard_exclude": ProtectionMode.hard_protected}
"""The prototype's protection modes, by the contract mode they implement."""


class BlockPoolAbstraction(RecordAbstraction):
    """Maps one BlockPool-lane record at a time to trace v1 steps (see the module table)."""

    FORMAT = FORMAT
    VOCABULARY = VOCABULARY
    MARKED_BY = frozenset({"schema_version"})
    NEVER_HAS = frozenset({"event_sequence"})

    def __init__(self, first: dict[str, Any]) -> None:
        self.header = HeaderInfo(usable_blocks_of(first), None, first.get("run_id"))
        self._hashes: dict[int, str] = {}
        self._served: set[str] = set()

    def _resident_block_materialized(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        block = require(r, "physical_block_id", int, line)
        block_hash = require(r, "block_hash", str, line)
        self._hashes[block] = block_hash
        claim_id = optional(r, "claim_id", str, line)
        step: dict[str, Any] = {"event": "block_stored", "block_id": block, "block_hash": block_hash}
        if claim_id is not None:
            step |= {"claim_id": claim_id, "position": require(r, "logical_block_position", int, line)}
        return [step]

    def _allocation_victim_selected(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        block_hash = optional(r, "block_hash", str, line)
        if block_hash is None:
            return []
        block = require(r, "physical_block_id", int, line)
        return [{"event": "block_removed", "block_id": block, "block_hash": block_hash}]

    def _removed(self, r: dict[str, Any], line: int) -> dict[str, Any]:
        block = require(r, "physical_block_id", int, line)
        return {"event": "block_removed", "block_id": block, "block_hash": self._hashes.get(block, "")}

    def _resident_claim_accepted(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        mode = require(r, "protection_mode", str, line)
        if mode not in MODES:
            raise parse_error(f"unknown BlockPool protection_mode {mode!r}", line, "protection_mode")
        return [
            {
                "event": "resident_claim_accepted",
                "claim_id": require(r, "claim_id", str, line),
                "owner_scope": require(r, "run_id", str, line),
                "object_id": require(r, "prefix_id", str, line),
                "mode": MODES[mode].value,
                "footprint_blocks": require(r, "resident_blocks_required", int, line),
                "predicate": {
                    "kind": "leading_prefix_at_least",
                    "blocks": require(r, "useful_threshold_blocks", int, line),
                },
            }
        ]

    def _resident_claim_materialized(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        if require(r, "predicate_materialized", bool, line) is not True:
            return []
        return [
            {
                "event": "resident_claim_materialized",
                "claim_id": require(r, "claim_id", str, line),
                "leading_blocks": require(r, "resident_blocks_materialized", int, line),
            }
        ]

    def _settled(self, r: dict[str, Any], line: int, event: str) -> list[dict[str, Any]]:
        reason = optional(r, "arbiter_action", str, line)
        return [{"event": event, "claim_id": require(r, "claim_id", str, line), "reason": reason}]

    def _resident_claim_demoted(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return self._settled(r, line, "resident_claim_demoted")

    def _resident_claim_expired(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return self._settled(r, line, "resident_claim_expired")

    def _resident_claim_harmed(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return [
            self._removed(r, line),
            {
                "event": "resident_claim_harmed",
                "claim_id": require(r, "claim_id", str, line),
                "leading_blocks": require(r, "resident_blocks_materialized", int, line),
                "required_blocks": require(r, "resident_blocks_required", int, line),
            },
        ]

    def _resident_claim_block_lost_after_release(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return [self._removed(r, line)]

    def _conflict(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        request_id = require(r, "request_id", str, line)
        self._served.discard(request_id)
        return [
            {
                "event": r["event"],
                "request_id": request_id,
                "reason": "capacity",
                "blocking_claim_ids": require(r, "blocking_claim_ids", list, line),
                **{name: require(r, name, int, line) for name in CAPACITY_PROOF_FIELDS},
            }
        ]

    _active_request_refused = _conflict
    _active_request_deferred = _conflict

    def _active_request_admitted(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        request_id = require(r, "request_id", str, line)
        if request_id in self._served:
            return []
        self._served.add(request_id)
        blocks = require(r, "active_live_blocks_current", int, line)
        return [{"event": "active_request_admitted", "request_id": request_id, "active_live_blocks": blocks}]

    def _future_reuse_denied(self, r: dict[str, Any], line: int) -> list[dict[str, Any]]:
        request_id = require(r, "request_id", str, line)
        current = require(r, "active_live_blocks_current", int, line)
        if request_id in self._served or current < require(r, "active_live_blocks_required", int, line):
            return []
        self._served.add(request_id)
        return [{"event": "active_request_admitted", "request_id": request_id, "active_live_blocks": current}]

    _future_reuse_admitted = _future_reuse_denied
