"""Two-key state keys (DESIGN 4 rule 11 `hybrid_two_key`): the checkpoint recorded at materialization
is the claim's state key; a restore or a satisfied resume matches it by boundary and value hash,
after the KV blocks.

Events: resident_claim_materialized (checkpoint), resident_claim_checkpoint_restored (boundary,
value_hash), request_reused (checkpoint).
"""

from __future__ import annotations

from typing import Any

from kvclaims.statemachine.lifecycle import (
    Event,
    Phase,
)
from kvclaims.statemachine.system.declarations import Rule
from kvclaims.statemachine.system.records import (
    ClaimRecord,
    R,
)


class TwoKeyModel:
    """The state-key rules, as `SystemState` methods."""

    def _record_checkpoint(self, claim: ClaimRecord, checkpoint: Any) -> None:
        if checkpoint is None:
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                "a two-key claim materialized without a checkpoint: logical state identity "
                "could never be established later",
            )
        if checkpoint.boundary != claim.required:
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                f"checkpoint boundary {checkpoint.boundary} is not the predicate's boundary {claim.required}",
            )
        recorded = claim.checkpoint
        if recorded is not None and (recorded.boundary, recorded.value_hash) != (
            checkpoint.boundary,
            checkpoint.value_hash,
        ):
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                f"materialized again with state key value_hash {checkpoint.value_hash}, but its key "
                f"was recorded as value_hash {recorded.value_hash}: a two-key claim's state key is "
                "fixed when first recorded",
            )
        claim.checkpoint = checkpoint

    def _checkpoint_restored(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        recorded = claim.checkpoint
        restoring = claim.phase in (Phase.restoring, Phase.restoring_in_place)
        in_place = claim.phase is Phase.restoring_in_place
        if restoring and not claim.kv_restored:
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                "its checkpoint was restored before its KV blocks: a two-key claim needs both keys, "
                "resident_claim_restored first",
            )
        match = (
            recorded is not None
            and ev.boundary == recorded.boundary
            and ev.value_hash == recorded.value_hash
            and restoring
        )
        self._advance(claim, Event.restore_checkpoint_match if match else Event.restore_checkpoint_mismatch)
        if match:
            for request_id in list(claim.pending):
                self._resolve_restore(claim, request_id, "checkpoint_restored", in_place=in_place)
            self._owe_confirmation(claim, claim.required)

    def _check_resumed_state(self, claim: ClaimRecord, ev: Any) -> None:
        """A two-key claim resumed in place (its state copied from the device tier into the
        request's live slot): a satisfied reuse needs the restored state's value to be the one
        recorded at materialization (seed 002: payload equality is not state identity)."""
        recorded, resumed = claim.checkpoint, ev.checkpoint
        if recorded is None or (resumed.boundary, resumed.value_hash) != (
            recorded.boundary,
            recorded.value_hash,
        ):
            expected = "no checkpoint" if recorded is None else f"value_hash {recorded.value_hash}"
            self._claim_fail(
                claim,
                R.hybrid_two_key,
                f"request {ev.request_id} reports a satisfied resume whose restored state has "
                f"value_hash {resumed.value_hash} at boundary {resumed.boundary}; materialization "
                f"recorded {expected}: the state identity key does not hold",
                ev.request_id,
            )


RULES: tuple[Rule, ...] = (
    Rule(
        "two_key.state_key_fixed_when_first_recorded",
        R.hybrid_two_key,
        "DESIGN 4 rule 11",
        "TwoKeyModel._record_checkpoint (recording) and TwoKeyModel._check_resumed_state (presenting)",
        {
            "resident_claim_materialized": ("checkpoint",),
            "resident_claim_checkpoint_restored": ("boundary", "value_hash", "payload_hash"),
            "request_reused": ("checkpoint",),
        },
        ("restore.satisfied_reuse_only_after_confirmed_restore",),
    ),
)
