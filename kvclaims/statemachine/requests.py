"""The active-request lifecycle: the other half of a trace, as one pure transition function.

Refusal and deferral are outcomes of an active request, attributed to claims by
`blocking_claim_ids` (DESIGN 2.1); this machine only orders them. A refusal caused by a failed
restoration must reach the request before `request_finished` (seed 000 path B, DESIGN 4 rule
4), and a finished request id is never reused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from kvclaims.spec.vocabulary import ConformanceRule


class RequestPhase(StrEnum):
    absent = "absent"
    deferred = "deferred"
    admitted = "admitted"
    refused = "refused"
    finished = "finished"


class RequestEvent(StrEnum):
    admit = "admit"
    defer = "defer"
    refuse_capacity = "refuse_capacity"
    refuse_restoration = "refuse_restoration"
    reuse = "reuse"
    finish = "finish"


_R, _E = RequestPhase, RequestEvent

REQUEST_TRANSITIONS: Mapping[tuple[RequestPhase, RequestEvent], RequestPhase] = MappingProxyType(
    {
        (_R.absent, _E.admit): _R.admitted,
        (_R.absent, _E.defer): _R.deferred,
        (_R.absent, _E.refuse_capacity): _R.refused,
        (_R.absent, _E.reuse): _R.admitted,
        # a client abort of a request that never reached the pool (vLLM finishes it ABORTED
        # from the waiting queue): it held no blocks and no claim, so nothing is owed
        (_R.absent, _E.finish): _R.finished,
        (_R.deferred, _E.defer): _R.deferred,
        (_R.deferred, _E.admit): _R.admitted,
        (_R.deferred, _E.refuse_capacity): _R.refused,
        (_R.deferred, _E.finish): _R.finished,
        # a deferred request later scheduled with a prefix-cache hit is served from the cache
        (_R.deferred, _E.reuse): _R.admitted,
        # a deferral for a failed restoration may still end in the fail-closed refusal
        (_R.deferred, _E.refuse_restoration): _R.refused,
        (_R.admitted, _E.reuse): _R.admitted,
        (_R.admitted, _E.defer): _R.deferred,
        (_R.admitted, _E.refuse_restoration): _R.refused,
        (_R.admitted, _E.finish): _R.finished,
        (_R.refused, _E.finish): _R.finished,
    }
)
"""Every legal (phase, event) of one request; everything else is a violation."""

REQUEST_INITIAL = RequestPhase.absent


@dataclass(frozen=True)
class RequestViolation:
    rule: ConformanceRule
    phase: RequestPhase
    event: RequestEvent
    message: str
    allowed: tuple[RequestEvent, ...]


def request_step(phase: RequestPhase, event: RequestEvent) -> RequestPhase | RequestViolation:
    """The next phase of a request, or why the event is out of order."""
    target = REQUEST_TRANSITIONS.get((phase, event))
    if target is not None:
        return target
    allowed = tuple(e for e in RequestEvent if (phase, e) in REQUEST_TRANSITIONS)
    if phase is RequestPhase.finished:
        rule = (
            ConformanceRule.attribution
            if event is RequestEvent.refuse_restoration
            else ConformanceRule.identity
        )
        message = (
            "the fail-closed refusal came after the request had already finished"
            if event is RequestEvent.refuse_restoration
            else f"{event} for a request id that already finished"
        )
        return RequestViolation(rule, phase, event, message, allowed)
    return RequestViolation(
        ConformanceRule.lifecycle,
        phase,
        event,
        f"{event} is not a transition from {phase}",
        allowed,
    )
