"""Time-bounded claims in the MicroRuntime: `duration_ms` on a simulated wall clock, with and
without `refresh_on_hit`, judged by refinement on the trace's `t_ns`."""

from __future__ import annotations

from typing import Any

import pytest

from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec
from kvclaims.microruntime.policies import POLICIES
from kvclaims.microruntime.runtime import MicroRuntime
from kvclaims.microruntime.tracing import TraceBuffer, encode_trace
from kvclaims.refinement import check_bytes
from kvclaims.spec.errors import InputError
from kvclaims.spec.vocabulary import ProtectionMode as M


def clocked(**claim: Any) -> tuple[MicroRuntime, TraceBuffer]:
    buffer = TraceBuffer()
    rt = MicroRuntime(80, policy=POLICIES["expiring"], sink=buffer.append, wall_clock=True)
    rt.submit_claim(ClaimSpec("ttl", "obj", M.expiring, 4, 4, **claim))
    rt.run_request(RequestSpec("prefill", "obj", 4, kind=RequestKind.resident))
    return rt, buffer


def verdict(rt: MicroRuntime, buffer: TraceBuffer) -> Any:
    return check_bytes(encode_trace(rt.header, buffer.events))


def expired_at_ns(buffer: TraceBuffer) -> list[int]:
    return [e["t_ns"] for e in buffer.events if e["event"] == "resident_claim_expired"]


def test_a_duration_ms_claim_expires_exactly_when_its_milliseconds_end() -> None:
    rt, buffer = clocked(duration_ms=1000)
    rt.advance_clock(999)
    rt.tick(5)  # engine steps do not end a wall-clock duration
    assert expired_at_ns(buffer) == []
    rt.advance_clock(1)
    assert expired_at_ns(buffer) == [1_000_000_000]
    assert rt.claims["ttl"].phase.value == "expired"
    assert verdict(rt, buffer).outcome.value == "accepted"


def test_refresh_on_hit_restarts_the_clock_on_a_satisfied_reuse_only() -> None:
    rt, buffer = clocked(duration_ms=1000, refresh_on_hit=True)
    rt.advance_clock(600)
    assert rt.run_request(RequestSpec("reuse", "obj", 4, reuse_claim="ttl")).value == "admitted"
    rt.advance_clock(999)  # 1599 ms after acceptance, 999 after the hit
    assert expired_at_ns(buffer) == []
    rt.advance_clock(1)
    assert expired_at_ns(buffer) == [1_600_000_000]
    assert verdict(rt, buffer).outcome.value == "accepted"


def test_without_refresh_a_hit_does_not_extend_the_claim() -> None:
    rt, buffer = clocked(duration_ms=1000)
    rt.advance_clock(600)
    rt.run_request(RequestSpec("reuse", "obj", 4, reuse_claim="ttl"))
    rt.advance_clock(400)
    assert expired_at_ns(buffer) == [1_000_000_000]


def test_an_early_expiry_in_the_same_trace_is_rejected_by_the_duration_rule() -> None:
    """Attack: the runtime's trace moved the expiry 1 ms earlier than its promise."""
    rt, buffer = clocked(duration_ms=1000)
    rt.advance_clock(1000)
    forged = [
        {**e, "t_ns": e["t_ns"] - 1_000_000} if e["event"] == "resident_claim_expired" else e
        for e in buffer.events
    ]
    result = check_bytes(encode_trace(rt.header, forged))
    assert result.outcome.value == "rejected"
    assert str(result.rule) == "duration"


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        ({"duration_ms": 10, "duration_steps": 3}, "not both"),
        ({"duration_ms": 0}, "must be positive"),
        ({}, "needs a positive duration_steps or duration_ms"),
    ],
)
def test_malformed_durations_are_input_errors(claim: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        clocked(**claim)


def test_duration_ms_without_a_wall_clock_is_an_input_error() -> None:
    rt = MicroRuntime(80, policy=POLICIES["expiring"])
    with pytest.raises(InputError, match="wall clock"):
        rt.submit_claim(ClaimSpec("ttl", "obj", M.expiring, 4, 4, duration_ms=10))
    with pytest.raises(InputError, match="no wall clock"):
        rt.advance_clock(5)
