"""Replay a trace through the lifecycle and request machines: the MicroRuntime's self-check.

This is not the refinement checker (`kvclaims.refinement`, DESIGN 4): it reads only this
package's own trace dialect and stops at the first violation with an exception. It replays
claim and request events through `lifecycle.step` and `requests.request_step` (the same single
semantics), re-derives each claim's leading prefix from block events that carry `claim_id` and
`position` (so a predicate broken without a harm report is caught), and re-checks the capacity
proof of every refusal and deferral. The Hypothesis state machines and the scenario tests feed
every emitted event through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvclaims.spec.capacity import recorded_capacity_problem
from kvclaims.spec.tables import PRESERVING_MODES
from kvclaims.spec.trace import EVENT_MODELS
from kvclaims.spec.vocabulary import ConformanceRule, ProtectionMode
from kvclaims.statemachine.lifecycle import NOT_ACCEPTED, ClaimProfile, Event, Phase, Violation, at_end, step
from kvclaims.statemachine.requests import (
    REQUEST_INITIAL,
    RequestEvent,
    RequestPhase,
    RequestViolation,
    request_step,
)

_CLAIM_STEPS = {
    "resident_claim_submitted": Event.submit,
    "resident_claim_accepted": Event.accept,
    "resident_claim_rejected": Event.reject,
    "resident_claim_materialized": Event.materialize,
    "resident_claim_demoted": Event.demote,
    "resident_claim_expired": Event.expire,
    "resident_claim_released": Event.release,
    "resident_claim_harmed": Event.harm,
    "resident_claim_lost": Event.lose,
    "resident_claim_offloaded": Event.offload,
    "resident_claim_restore_required": Event.require_restore,
    "resident_claim_restored": Event.restore,
}
_FAILED = {
    "refusal": Event.fail_restoration_refusal,
    "demotion": Event.fail_restoration_demotion,
    "expiry": Event.fail_restoration_expiry,
    "harm": Event.fail_restoration_harm,
}


class ReplayViolation(AssertionError):
    """A trace the model does not accept: which rule, at which event, and why."""

    def __init__(self, rule: ConformanceRule | str, seq: int | None, message: str) -> None:
        self.rule = ConformanceRule(rule) if rule in ConformanceRule.__members__ else rule
        self.seq = seq
        super().__init__(f"[{rule}] at seq {seq}: {message}")


class ReplayInconclusive(ReplayViolation):
    """An event type this trace format does not define: never accepted."""


@dataclass
class _ClaimView:
    mode: ProtectionMode
    profile: ClaimProfile
    required: int
    phase: Phase = Phase.absent
    present: set[int] = field(default_factory=set)
    leading: int = 0
    value_hash: str | None = None
    restore_requests: set[str] = field(default_factory=set)
    faults: int = 0


@dataclass
class TraceReplay:
    """Feed events in order; `finish` at the end. Raises `ReplayViolation` on the first error."""

    usable_blocks: int | None = None
    block_size: int | None = None
    claims: dict[str, _ClaimView] = field(default_factory=dict)
    requests: dict[str, RequestPhase] = field(default_factory=dict)
    failed_restorations: dict[str, str] = field(default_factory=dict)
    unexplained_harm: list[str] = field(default_factory=list)
    events_seen: int = 0
    _last_seq: int = -1

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> TraceReplay:
        if header.get("kvclaims_trace") != 1:
            raise ReplayViolation("parse", None, "line 1 is not a kvclaims trace v1 header")
        return cls(usable_blocks=header.get("usable_blocks"), block_size=header.get("block_size"))

    def feed(self, event: dict[str, Any]) -> None:
        seq = event.get("seq")
        name = event.get("event")
        if not isinstance(seq, int) or seq <= self._last_seq:
            raise ReplayViolation("ordering", seq, f"seq {seq} does not increase past {self._last_seq}")
        self._last_seq = seq
        if name not in EVENT_MODELS:
            raise ReplayInconclusive("unknown_event", seq, f"unknown event type {name!r}")
        self.events_seen += 1
        handler = getattr(self, f"_on_{name}", None)
        if handler is not None:
            handler(seq, event)
        else:
            self._claim_step(seq, event, _CLAIM_STEPS[name])

    def finish(self) -> None:
        for claim_id, claim in self.claims.items():
            owed = at_end(claim.phase)
            if owed is not None:
                raise ReplayViolation(owed.rule, None, f"claim {claim_id}: {owed.message}")

    # ------------------------------------------------------------------ claims

    def _required(self, predicate: dict[str, Any]) -> int:
        if predicate.get("kind") == "hybrid_two_key":
            return int(predicate["boundary_blocks"])
        if predicate.get("blocks") is not None:
            return int(predicate["blocks"])
        return math.ceil(int(predicate["tokens"]) / (self.block_size or 16))

    def _view(self, seq: int, event: dict[str, Any]) -> _ClaimView:
        claim_id = event["claim_id"]
        claim = self.claims.get(claim_id)
        if claim is None:
            if "mode" not in event:
                raise ReplayViolation(
                    ConformanceRule.identity, seq, f"{event['event']} names unknown claim {claim_id}"
                )
            mode = ProtectionMode(event["mode"])
            predicate = event["predicate"]
            two_key = predicate.get("kind") == "hybrid_two_key"
            claim = _ClaimView(mode, ClaimProfile.of(mode, two_key=two_key), self._required(predicate))
            self.claims[claim_id] = claim
        return claim

    def _advance(self, seq: int, claim_id: str, claim: _ClaimView, event: Event) -> None:
        target = step(claim.profile, claim.phase, event)
        if isinstance(target, Violation):
            raise ReplayViolation(target.rule, seq, f"claim {claim_id}: {target.message}")
        claim.phase = target

    def _claim_step(self, seq: int, event: dict[str, Any], lifecycle_event: Event) -> _ClaimView:
        claim = self._view(seq, event)
        claim_id = event["claim_id"]
        if lifecycle_event is Event.harm:
            if claim.present and claim.leading >= claim.required:
                raise ReplayViolation(
                    ConformanceRule.no_silent_harm,
                    seq,
                    f"claim {claim_id} reported harmed while its predicate holds",
                )
            if claim.faults == 0:
                self.unexplained_harm.append(claim_id)
        if lifecycle_event is Event.restore and event["request_id"] not in claim.restore_requests:
            raise ReplayViolation(
                ConformanceRule.offload_order,
                seq,
                f"claim {claim_id} restored for a request that never required it",
            )
        self._advance(seq, claim_id, claim, lifecycle_event)
        if lifecycle_event is Event.require_restore:
            claim.restore_requests.add(event["request_id"])
        return claim

    def _on_resident_claim_materialized(self, seq: int, event: dict[str, Any]) -> None:
        claim = self._claim_step(seq, event, Event.materialize)
        if event["leading_blocks"] < claim.required or (claim.present and claim.leading < claim.required):
            raise ReplayViolation(
                ConformanceRule.lifecycle,
                seq,
                f"claim {event['claim_id']} materialized with {event['leading_blocks']} leading blocks, "
                f"needs {claim.required}",
            )
        checkpoint = event.get("checkpoint")
        if claim.profile.two_key:
            if checkpoint is None:
                raise ReplayViolation(
                    ConformanceRule.hybrid_two_key, seq, "a two-key claim materialized without checkpoint"
                )
            claim.value_hash = checkpoint["value_hash"]

    def _on_resident_claim_restoration_failed(self, seq: int, event: dict[str, Any]) -> None:
        claim = self._view(seq, event)
        if event["request_id"] not in claim.restore_requests:
            raise ReplayViolation(
                ConformanceRule.offload_order,
                seq,
                "restoration_failed for a request that never required a restore",
            )
        self._claim_step(seq, event, _FAILED[event["outcome"]])
        if event["outcome"] == "harm" and claim.faults == 0:
            self.unexplained_harm.append(event["claim_id"])
        self.failed_restorations[event["request_id"]] = event["claim_id"]

    def _on_resident_claim_checkpoint_restored(self, seq: int, event: dict[str, Any]) -> None:
        claim = self._view(seq, event)
        if claim.value_hash is None:
            raise ReplayViolation(
                ConformanceRule.hybrid_two_key, seq, "checkpoint restored with no recorded checkpoint"
            )
        matched = event["value_hash"] == claim.value_hash
        event_kind = Event.restore_checkpoint_match if matched else Event.restore_checkpoint_mismatch
        self._advance(seq, event["claim_id"], claim, event_kind)

    def _on_fault_injected(self, seq: int, event: dict[str, Any]) -> None:
        claim_id = event.get("claim_id")
        if claim_id is not None and claim_id in self.claims:
            self.claims[claim_id].faults += 1

    # ------------------------------------------------------------------ blocks

    def _block_claim(self, seq: int, event: dict[str, Any]) -> tuple[str, _ClaimView, int] | None:
        claim_id = event.get("claim_id")
        if claim_id is None:
            return None
        claim = self.claims.get(claim_id)
        if claim is None or claim.phase in NOT_ACCEPTED:
            raise ReplayViolation(
                ConformanceRule.identity, seq, f"block event names claim {claim_id}, never accepted"
            )
        position = event.get("position")
        return (claim_id, claim, position) if isinstance(position, int) else None

    def _on_block_stored(self, seq: int, event: dict[str, Any]) -> None:
        found = self._block_claim(seq, event)
        if found is not None:
            _, claim, position = found
            claim.present.add(position)
            while claim.leading in claim.present:
                claim.leading += 1

    def _on_block_removed(self, seq: int, event: dict[str, Any]) -> None:
        found = self._block_claim(seq, event)
        if found is None:
            return
        claim_id, claim, position = found
        claim.present.discard(position)
        before = claim.leading
        claim.leading = min(claim.leading, position)
        if before >= claim.required > claim.leading:
            self._advance(seq, claim_id, claim, Event.predicate_broken)

    # ------------------------------------------------------------------ requests

    def _request(self, seq: int, request_id: str, event: RequestEvent) -> None:
        phase = self.requests.get(request_id, REQUEST_INITIAL)
        target = request_step(phase, event)
        if isinstance(target, RequestViolation):
            raise ReplayViolation(target.rule, seq, f"request {request_id}: {target.message}")
        self.requests[request_id] = target

    def _on_active_request_admitted(self, seq: int, event: dict[str, Any]) -> None:
        self._request(seq, event["request_id"], RequestEvent.admit)

    def _conflict(self, seq: int, event: dict[str, Any], request_event: RequestEvent) -> None:
        problem = recorded_capacity_problem(event, self.usable_blocks)
        if problem is not None:
            raise ReplayViolation(ConformanceRule.capacity_arithmetic, seq, problem.message)
        blocking = event["blocking_claim_ids"]
        if not blocking:
            raise ReplayViolation(
                ConformanceRule.attribution, seq, "a refusal or deferral names no blocking claim"
            )
        if event["reason"] == "restoration_failed":
            failed = self.failed_restorations.get(event["request_id"])
            if blocking != [failed]:
                raise ReplayViolation(
                    ConformanceRule.attribution,
                    seq,
                    f"restoration refusal names {blocking}, the failed restoration was {failed}",
                )
        for claim_id in blocking:
            claim = self.claims.get(claim_id)
            if claim is None:
                raise ReplayViolation(
                    ConformanceRule.attribution, seq, f"blocking claim {claim_id} is unknown"
                )
            if event["reason"] == "capacity" and (claim.mode not in PRESERVING_MODES or not claim.present):
                raise ReplayViolation(
                    ConformanceRule.attribution,
                    seq,
                    f"blocking claim {claim_id} holds no blocks or carries no preservation obligation",
                )
            self._advance(seq, claim_id, claim, Event.block)
        self._request(seq, event["request_id"], request_event)

    def _on_active_request_deferred(self, seq: int, event: dict[str, Any]) -> None:
        self._conflict(seq, event, RequestEvent.defer)

    def _on_active_request_refused(self, seq: int, event: dict[str, Any]) -> None:
        restoration = event["reason"] == "restoration_failed"
        self._conflict(
            seq, event, RequestEvent.refuse_restoration if restoration else RequestEvent.refuse_capacity
        )

    def _on_request_reused(self, seq: int, event: dict[str, Any]) -> None:
        claim = self._view(seq, event)
        satisfied = event["predicate_satisfied"]
        if satisfied and self.failed_restorations.get(event["request_id"]) == event["claim_id"]:
            raise ReplayViolation(
                ConformanceRule.offload_order,
                seq,
                f"reuse of {event['claim_id']} reported satisfied after its restoration failed "
                "in this request",
            )
        if satisfied and claim.present and claim.leading < claim.required:
            raise ReplayViolation(
                ConformanceRule.lifecycle,
                seq,
                f"reuse of {event['claim_id']} reported satisfied below its predicate",
            )
        lifecycle_event = Event.reuse_satisfied if satisfied else Event.reuse_unsatisfied
        self._advance(seq, event["claim_id"], claim, lifecycle_event)
        self._request(seq, event["request_id"], RequestEvent.reuse)

    def _on_request_finished(self, seq: int, event: dict[str, Any]) -> None:
        self._request(seq, event["request_id"], RequestEvent.finish)


def replay_events(header: dict[str, Any], events: list[dict[str, Any]]) -> TraceReplay:
    """Replay a whole trace; return the final replay state (raises on the first violation)."""
    replay = TraceReplay.from_header(header)
    for event in events:
        replay.feed(event)
    replay.finish()
    return replay
