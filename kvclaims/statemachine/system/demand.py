"""Requests and conflicts (DESIGN 4 rules 3 `lifecycle` of requests and 6 `attribution`): requests move
only through the request machine; a refusal or deferral names distinct, responsible preserving
claims, and a failed restoration's refusal names exactly the failed claim.

Events: active_request_admitted, active_request_deferred, active_request_refused
(blocking_claim_ids, reason), request_reused (claim_id, request_id, predicate_satisfied,
cached_blocks), request_finished.
"""

from __future__ import annotations

from typing import Any

from kvclaims.spec.vocabulary import (
    ConflictReason,
    TraceWitness,
)
from kvclaims.statemachine import lifecycle
from kvclaims.statemachine.lifecycle import (
    Event,
)
from kvclaims.statemachine.requests import (
    REQUEST_INITIAL,
    RequestEvent,
    RequestPhase,
    RequestViolation,
)
from kvclaims.statemachine.system.declarations import Rule
from kvclaims.statemachine.system.records import (
    _ADMITTED,
    _REQUEST_NEXT,
    RESPONSIBLE,
    ClaimRecord,
    R,
    RequestRecord,
)


class RequestModel:
    """The request and attribution rules, as `SystemState` methods."""

    def _request_step(
        self, request_id: str, event: RequestEvent, request: RequestRecord | None = None
    ) -> RequestRecord:
        if request is None:
            request = self.requests.get(request_id)
        if request is None:
            phase = RequestPhase.finished if request_id in self.finished else REQUEST_INITIAL
        else:
            phase = request.phase
        result = _REQUEST_NEXT[event][phase]
        if type(result) is RequestViolation:
            message = result.message
            if not self._event.startswith(("active_request_", "request_")):
                # a claim's event moving its request (restore_required is the request's reuse)
                message = f"{self._event} is a {event} of the request, and {message}"
            self._request_fail(
                result.rule,
                request_id,
                f"request {request_id}: {message}",
                f"request {phase}",
                tuple(e.value for e in result.allowed),
            )
        if request is None:
            request = self._new_request(request_id, result)  # type: ignore[arg-type]
        else:
            if request.phase is RequestPhase.admitted and result is not RequestPhase.admitted:
                self._release_live(request)
            request.phase = result  # type: ignore[assignment]
        return request

    def _new_request(self, request_id: str, phase: RequestPhase, live: int = 0) -> RequestRecord:
        request = self.requests[request_id] = RequestRecord(phase, live)
        self.requests_seen += 1
        return request

    def _release_live(self, request: RequestRecord) -> None:
        self.admitted_live_blocks -= request.live
        request.live = 0

    def _admitted(self, ev: Any) -> None:
        request_id = ev.request_id
        if request_id in self.requests or request_id in self.finished:
            request = self._request_step(request_id, RequestEvent.admit)
            request.live = ev.active_live_blocks
        else:
            self._new_request(request_id, _ADMITTED, ev.active_live_blocks)
        self.admitted_live_blocks += ev.active_live_blocks
        self._check_occupancy(f"admitting request {request_id}", ev.active_live_blocks)
        if ev.claim_shared_blocks is not None:
            self._check_admission_fits(request_id, ev.active_live_blocks, ev.claim_shared_blocks)
        if not self._seen_admission:
            self._seen_admission = True
            self._witness(TraceWitness.active_served_without_claim_block, (self._at,))

    def _deferred(self, ev: Any) -> None:
        self._conflict(ev, RequestEvent.defer)

    def _refused(self, ev: Any) -> None:
        capacity = ev.reason is ConflictReason.capacity
        self._conflict(ev, RequestEvent.refuse_capacity if capacity else RequestEvent.refuse_restoration)

    def _conflict(self, ev: Any, event: RequestEvent) -> None:
        request_id = ev.request_id
        blocking = ev.blocking_claim_ids
        self._check_capacity(ev)
        if not blocking:
            self._request_fail(
                R.attribution,
                request_id,
                f"{self._event} for request {request_id} names no blocking claim",
                self._request_state(request_id, "blocking claims"),
                ("blocking_claim_ids naming the accepted claims that caused it",),
            )
        if len(set(blocking)) != len(blocking):
            self._request_fail(
                R.attribution,
                request_id,
                f"blocking_claim_ids names a claim twice: {blocking}",
                self._request_state(request_id, "blocking claims"),
                ("each blocking claim once",),
                *blocking,
            )
        request = self.requests.get(request_id)
        if ev.reason is ConflictReason.restoration_failed:
            self._check_failed_restoration_named(request_id, request, blocking)
        request = self._request_step(request_id, event, request)
        full = self._blame(request_id, blocking, event)
        if ev.reason is ConflictReason.restoration_failed:
            request.owed = None
            if event is RequestEvent.refuse_restoration:
                request.refused_at = self._at
                lines = self._failure_witness.pop(f"{blocking[0]}\0{request_id}", None)
                if lines is not None:
                    self._witness(
                        TraceWitness.restoration_failure_fail_closed, (*lines, self._at), blocking[0]
                    )
            return
        self._check_protected_term(ev, blocking)
        if TraceWitness.capacity_conflict_attributed not in self._complete:
            self._witness(
                TraceWitness.capacity_conflict_attributed,
                (*(self.claims[c].accepted_at for c in blocking), self._at),
                *blocking,
            )
            for claim in full:
                claim.blocked_while_full = claim.blocked_while_full or self._at
        if TraceWitness.footprint_accounted not in self._complete:
            self._witness(
                TraceWitness.footprint_accounted,
                (*(self.claims[c].accepted_at for c in blocking), self._at),
                *blocking,
            )

    def _check_failed_restoration_named(
        self, request_id: str, request: RequestRecord | None, blocking: list[str]
    ) -> None:
        """A conflict for a failed restoration names exactly the claim whose restoration failed
        for this request (the owed refusal, or after a deferral for it, the failed claim)."""
        owed = request.owed if request is not None else None
        failed = owed[0] if owed is not None else None
        if (
            failed is None
            and request is not None
            and request.phase is RequestPhase.deferred
            and request.failed
        ):
            failed = next(reversed(request.failed))
        if failed is None:
            self._request_fail(
                R.attribution,
                request_id,
                f"refusal of request {request_id} for a failed restoration, but no claim's "
                "restoration failed for this request with outcome refusal: a generic or "
                "unclaimed failure is not a claim-scoped cause",
                f"request {request.phase if request else RequestPhase.absent}",
                ("resident_claim_restoration_failed for this request first",),
                *blocking,
            )
        if list(blocking) != [failed]:
            self._request_fail(
                R.attribution,
                request_id,
                f"the refusal of request {request_id} must name exactly {failed}, whose "
                f"restoration failed; it names {blocking}",
                f"request {request.phase}; restoration of {failed} failed",  # type: ignore[union-attr]
                (f"blocking_claim_ids == [{failed!r}]",),
                *blocking,
                failed,  # type: ignore[arg-type]
            )

    def _blame(self, request_id: str, blocking: list[str], event: RequestEvent) -> list[ClaimRecord]:
        """Every blocking claim must be one the lifecycle allows to block; returns those whose
        blocks held the predicate at that moment."""
        full: list[ClaimRecord] = []
        for claim_id in blocking:
            claim = self._known(claim_id) or ClaimRecord(claim_id)
            if claim.unconfirmed is not None:
                self._unconfirmed(claim)  # a report its blocks never showed cannot cause a conflict
            result = claim.table[claim.phase][Event.block]
            if type(result) is lifecycle.Violation:
                raise self._lifecycle_violation(
                    claim,
                    result,
                    f"{self._event} for request {request_id} blames {claim_id}: {result.message}",
                    (request_id, *blocking),
                )
            if event is RequestEvent.refuse_restoration:
                self._failure_named.add(claim_id)
            if claim.present is not None and claim.required is not None and claim.leading >= claim.required:
                full.append(claim)
        return full

    def _reused(self, ev: Any) -> None:
        claim = self.claims.get(ev.claim_id) or self._claim(ev.claim_id)
        request_id = ev.request_id
        request = self.requests.get(request_id)
        satisfied = ev.predicate_satisfied
        if satisfied and request is not None and claim.claim_id in request.failed:
            self._claim_fail(
                claim,
                R.offload_order,
                f"request {request_id} reports a satisfied reuse although its restoration failed "
                f"(at {request.failed[claim.claim_id]}): a fallback recompute is not a restoration",
                request_id,
            )
        self._advance(claim, Event.reuse_satisfied if satisfied else Event.reuse_unsatisfied)
        if satisfied and claim.required is not None and ev.cached_blocks < claim.required:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"request {request_id} reports the predicate satisfied with {ev.cached_blocks} cached "
                f"blocks; it needs {claim.required}",
                request_id,
            )
        # the state key binds while the runtime is responsible (after a release: ordinary cache)
        if satisfied and claim.profile.two_key and ev.checkpoint is not None and claim.phase in RESPONSIBLE:
            self._check_resumed_state(claim, ev)
        request = self._request_step(request_id, RequestEvent.reuse, request)
        if satisfied:
            self._refresh(claim, ev)
            if request.restored and claim.claim_id in request.restored:
                self._confirm_restore(claim, request_id)
                self._served_after_restore(claim.claim_id, request_id, request)

    def _served_after_restore(self, claim_id: str, request_id: str, request: RequestRecord) -> None:
        if request.restored.pop(claim_id, None) is None:
            return
        lines = self._restore_witness.pop(f"{claim_id}\0{request_id}", None)
        if lines is not None:
            self._witness(TraceWitness.restore_before_reuse, (*lines, self._at), claim_id)

    def _request_finished(self, ev: Any) -> None:
        request_id = ev.request_id
        request = self.requests.get(request_id)
        if request is not None:
            if request.owed is not None:
                claim_id, at = request.owed
                self._request_fail(
                    R.attribution,
                    request_id,
                    f"request {request_id} finished, but the restoration of {claim_id} failed with "
                    f"outcome refusal (at {at}) and the request was never refused or deferred: the "
                    "fail-closed outcome must come before request termination",
                    f"request {request.phase}; owes a refusal naming {claim_id}",
                    ("active_request_refused",),
                    claim_id,
                )
            if request.restoring:
                claim_id, at = next(iter(request.restoring.items()))
                self._request_fail(
                    R.offload_order,
                    request_id,
                    f"request {request_id} finished while its restoration of {claim_id} (at {at}) "
                    "never restored or failed: served without restoration (fallback recompute?)",
                    f"request {request.phase}; restoring {claim_id}",
                    ("resident_claim_restored", "resident_claim_restoration_failed"),
                    claim_id,
                )
        request = self._request_step(request_id, RequestEvent.finish, request)
        self._release_live(request)
        if request.restored and not request.refused_at:
            for claim_id in list(request.restored):
                self._served_after_restore(claim_id, request_id, request)
        del self.requests[request_id]
        self.finished.add(request_id)


RULES: tuple[Rule, ...] = (
    Rule(
        "attribution.blocking_claims_are_responsible_and_exact",
        R.attribution,
        "DESIGN 4 rule 6",
        "RequestModel._blame",
        {
            "active_request_deferred": ("blocking_claim_ids", "reason"),
            "active_request_refused": ("blocking_claim_ids", "reason"),
            "request_finished": ("request_id",),
        },
        (
            "lifecycle.blocking_ids_name_only_responsible_claims",
            "requests.no_restoration_refusal_after_finish",
        ),
    ),
    Rule(
        "requests.move_through_the_request_machine",
        R.lifecycle,
        "DESIGN 4 rule 3",
        "RequestModel._request_step",
        {
            "active_request_admitted": ("request_id",),
            "active_request_deferred": ("request_id",),
            "active_request_refused": ("request_id",),
            "request_reused": ("request_id",),
            "request_finished": ("request_id", "status"),
            "resident_claim_restore_required": ("request_id",),
        },
        ("requests.every_phase_reachable", "requests.nothing_after_finish"),
    ),
)
