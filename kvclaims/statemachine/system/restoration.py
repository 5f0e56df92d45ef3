"""Materialization, offload and restoration (DESIGN 4 rules 3 `lifecycle` and 8 `offload_order`):
restore events need a prior offload and a pending restore_required of the same claim and request; a
satisfied reuse after a restore needs a confirmed restore; a failure is never retried. Pending
restorations are kept per claim and request.

Events: resident_claim_materialized, resident_claim_offloaded, resident_claim_restore_required,
resident_claim_restored (restored_blocks), resident_claim_restoration_failed (outcome),
request_reused (via `_confirm_restore`).
"""

from __future__ import annotations

from typing import Any

from kvclaims.spec.vocabulary import (
    RestorationOutcome,
    TraceWitness,
)
from kvclaims.statemachine.lifecycle import (
    Event,
    Phase,
)
from kvclaims.statemachine.requests import (
    RequestEvent,
)
from kvclaims.statemachine.system.blocks import _assume_prefix
from kvclaims.statemachine.system.declarations import Rule
from kvclaims.statemachine.system.records import (
    _FAILURE_EVENT,
    _NONE,
    ClaimRecord,
    R,
)

_ENDING_OF: dict[RestorationOutcome, Event] = {
    RestorationOutcome.demotion: Event.demote,
    RestorationOutcome.expiry: Event.expire,
    RestorationOutcome.harm: Event.harm,
}
"""What a failure outcome is for a claim another request already restored (it is on the device)."""


class RestorationModel:
    """The offload and restore rules, as `SystemState` methods."""

    def _materialized(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.materialize)
        required = claim.required
        if required is not None and ev.leading_blocks < required:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"materialized with {ev.leading_blocks} leading blocks; its predicate needs {required}",
            )
        if ev.leading_blocks > claim.footprint:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"materialized with {ev.leading_blocks} leading blocks, more than its footprint "
                f"of {claim.footprint}",
            )
        if claim.profile.two_key:
            self._record_checkpoint(claim, ev.checkpoint)
        claim.reported_leading = max(claim.reported_leading, ev.leading_blocks)
        self._owe_confirmation(claim, ev.leading_blocks)
        if TraceWitness.claim_materialized not in self._complete:
            self._witness(TraceWitness.claim_materialized, (claim.accepted_at, self._at), claim.claim_id)

    def _unconfirmed(self, claim: ClaimRecord) -> None:
        reported, at, event = claim.unconfirmed  # type: ignore[misc]
        self._claim_fail(
            claim,
            R.lifecycle if event == "resident_claim_materialized" else R.offload_order,
            f"{event} (at {at}) reported {reported} leading blocks on the device, but the "
            f"claim's own block events show only {claim.leading} contiguous leading blocks "
            "(a block counts only if every block before it survives)",
        )

    def _owe_confirmation(self, claim: ClaimRecord, leading: int | None) -> None:
        """A report of `leading` device blocks (materialized, restored) that the claim's tracked
        blocks do not show yet: they must show it before the claim's next lifecycle step and
        before the end (runtimes report just before the last block's store, seed 001)."""
        if claim.present is not None and leading is not None and claim.leading < leading:
            claim.unconfirmed = (leading, self._at, self._event)

    def _offloaded(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.offload)
        claim.offload_at = self._at
        claim.kv_restored = False
        claim.reported_leading = 0  # a restore must be confirmed anew

    def _restore_required(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        request = self.requests.get(request_id)
        if request_id in claim.pending:
            self._claim_fail(
                claim,
                R.offload_order,
                f"restore_required again for request {request_id} while its previous restoration "
                f"(at {claim.pending[request_id]}) has neither restored nor failed: a silent "
                "failure and retry (or fallback recompute) is not a restoration outcome",
                request_id,
            )
        if request is not None and claim.claim_id in request.failed:
            self._claim_fail(
                claim,
                R.offload_order,
                f"its restoration for request {request_id} already failed (at "
                f"{request.failed[claim.claim_id]}); a failure is never retried or recomputed into "
                "a satisfied reuse for the same request",
                request_id,
            )
        resuming = claim.phase is Phase.materialized
        if resuming and claim.profile.two_key and claim.checkpoint is None:
            self._claim_fail(
                claim,
                R.offload_order,
                f"restore_required for request {request_id} of a two-key claim that is on the device "
                "and recorded no state key at materialization: there is nothing to restore in place",
                request_id,
            )
        self._advance(claim, Event.require_restore)
        if resuming and claim.phase is Phase.restoring_in_place:
            claim.kv_restored = False  # an in-place resume names its KV key anew too
        request = self._request_step(request_id, RequestEvent.reuse, request)
        if claim.pending is _NONE:
            claim.pending = {}
        claim.pending[request_id] = self._at
        request.note("restoring", claim.claim_id, self._at)

    def _take_pending(self, claim: ClaimRecord, request_id: str, what: str) -> int:
        at = claim.pending.pop(request_id, None) if claim.pending else None
        if at is None:
            self._claim_fail(
                claim,
                R.offload_order,
                f"{what} for request {request_id} without a pending resident_claim_restore_required "
                "of the same claim and request",
                request_id,
            )
        request = self.requests.get(request_id)
        if request is not None and request.restoring:
            request.restoring.pop(claim.claim_id, None)
        return at  # type: ignore[return-value]

    def _cancel_restorations(self, claim: ClaimRecord) -> None:
        """The claim left responsibility (demoted, expired, released) while restorations were
        pending: they are moot, and their requests may finish (as unsatisfied reuses)."""
        for request_id in claim.pending:
            request = self.requests.get(request_id)
            if request is not None and request.restoring:
                request.restoring.pop(claim.claim_id, None)
        claim.pending = _NONE

    def _restored(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        if request_id not in claim.pending:
            self._advance(claim, Event.restore)  # the lifecycle names the sharper rule first
            self._take_pending(claim, request_id, "restored")
        if ev.restored_blocks is not None:
            if ev.restored_blocks > claim.footprint:
                self._claim_fail(
                    claim,
                    R.offload_order,
                    f"restored {ev.restored_blocks} blocks, more than its footprint of {claim.footprint}",
                )
            claim.reported_leading = ev.restored_blocks
            if claim.present is not None:  # the restored blocks are back, named or not
                self._count_scan(len(claim.present))
                _assume_prefix(claim, ev.restored_blocks)
        # the blocks are back before the restore completes, so the pool check counts them
        if not self._restored_by_another(claim):
            self._advance(claim, Event.restore)
        claim.kv_restored = True
        if claim.profile.two_key:
            return  # the KV side is back; the pending restoration resolves on the checkpoint
        self._resolve_restore(claim, request_id, "restored")
        self._owe_confirmation(claim, claim.required)  # class 5: blocks confirm a restore

    def _resolve_restore(
        self, claim: ClaimRecord, request_id: str, what: str, *, in_place: bool = False
    ) -> None:
        required_at = self._take_pending(claim, request_id, what)
        request = self.requests.get(request_id)
        if request is not None:
            request.note("restored", claim.claim_id, self._at)
        if not in_place:  # the witness is of an offloaded claim restored before reuse
            self._restore_witness[f"{claim.claim_id}\0{request_id}"] = (
                claim.offload_at,
                required_at,
                self._at,
            )

    @staticmethod
    def _restored_by_another(claim: ClaimRecord) -> bool:
        """DESIGN 4 rule 8 binds per claim and request: two requests may restore one claim
        concurrently. A claim back on the device (materialized, not two-key: its restore
        resolves on the checkpoint) with this request's restoration still pending was restored
        for another request; this one's outcome does not move the claim back."""
        return claim.phase is Phase.materialized and not claim.profile.two_key

    def _restoration_failed(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        request_id = ev.request_id
        event = _FAILURE_EVENT[ev.outcome]
        if request_id not in claim.pending:
            self._advance(claim, event)
            self._take_pending(claim, request_id, "restoration_failed")
        restored_by_another = self._restored_by_another(claim)
        required_at = self._take_pending(claim, request_id, "restoration_failed")
        if ev.outcome is RestorationOutcome.refusal and (
            restored_by_another or (claim.pending and claim.phase is Phase.restoring)
        ):
            pass  # refused for this request only: another request's restoration goes on or is done
        elif restored_by_another:
            self._end_protection(claim, ev, _ENDING_OF[ev.outcome])
        else:
            self._end_protection(claim, ev, event)
        self._failure_named.add(claim.claim_id)
        request = self.requests.get(request_id)
        if request is not None:
            request.note("failed", claim.claim_id, self._at)
            if ev.outcome is RestorationOutcome.refusal:
                request.owed = (claim.claim_id, self._at)
                self._failure_witness[f"{claim.claim_id}\0{request_id}"] = (
                    claim.offload_at,
                    required_at,
                    self._at,
                )

    def _confirm_restore(self, claim: ClaimRecord, request_id: str) -> None:
        """A satisfied reuse after a restore counts only if the restore was confirmed: the
        restore event's block count or the claim's own device-tier blocks reach the predicate."""
        required = claim.required
        if required is None:
            return
        shown = claim.leading if claim.present is not None else 0
        if max(shown, claim.reported_leading) < required:
            self._claim_fail(
                claim,
                R.offload_order,
                f"request {request_id} reports a satisfied reuse after a restore that nothing "
                f"confirmed: neither restored_blocks nor the claim's device-tier blocks show the "
                f"{required} leading blocks its predicate needs",
                request_id,
            )


RULES: tuple[Rule, ...] = (
    Rule(
        "restore.per_claim_and_request",
        R.offload_order,
        "DESIGN 4 rule 8",
        "RestorationModel._take_pending",
        {
            "resident_claim_offloaded": ("tier",),
            "resident_claim_restore_required": ("request_id",),
            "resident_claim_restored": ("request_id", "restored_blocks"),
            "resident_claim_restoration_failed": ("request_id", "outcome"),
            "request_reused": ("request_id", "predicate_satisfied", "cached_blocks"),
            "request_finished": ("request_id",),
        },
        (
            "restore.satisfied_reuse_only_after_confirmed_restore",
            "lifecycle.restoration_failed_only_after_restore_required",
            "lifecycle.restore_before_satisfied_reuse",
        ),
    ),
    Rule(
        "lifecycle.materialized_prefix_reaches_the_predicate",
        R.lifecycle,
        "DESIGN 4 rule 3",
        "RestorationModel._materialized",
        {"resident_claim_materialized": ("leading_blocks",), "request_reused": ("cached_blocks",)},
        ("lifecycle.every_transition_fires",),
    ),
)
