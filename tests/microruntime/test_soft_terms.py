"""Soft terms in the MicroRuntime (DESIGN 6.3): capped TTLs (`max_duration_steps` /
`max_duration_ms`) and extend-only deadlines (`extend_claim`, `resident_claim_extended`), each
trace judged by the refinement checker's `duration` rule."""

from __future__ import annotations

from typing import Any

import pytest

from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec
from kvclaims.microruntime.policies import POLICIES
from kvclaims.microruntime.runtime import ExtensionOutcome, MicroRuntime
from kvclaims.microruntime.tracing import TraceBuffer, encode_trace
from kvclaims.refinement import check_bytes
from kvclaims.spec.errors import InputError
from kvclaims.spec.vocabulary import ProtectionMode as M
from kvclaims.statemachine.lifecycle import Phase

MS = 1_000_000


def claimed(mode: M = M.expiring, policy: str = "expiring", **claim: Any) -> tuple[MicroRuntime, TraceBuffer]:
    buffer = TraceBuffer()
    rt = MicroRuntime(80, policy=POLICIES[policy], sink=buffer.append, wall_clock=True)
    plan = rt.submit_claim(ClaimSpec("c", "obj", mode, 4, 4, **claim))
    assert plan.accepted, plan.reason
    rt.run_request(RequestSpec("prefill", "obj", 4, kind=RequestKind.resident))
    return rt, buffer


def hit(rt: MicroRuntime, n: int) -> None:
    assert rt.run_request(RequestSpec(f"reuse-{n}", "obj", 4, reuse_claim="c")).value == "admitted"


def assert_accepted(rt: MicroRuntime, events: list[dict[str, Any]]) -> None:
    verdict = check_bytes(encode_trace(rt.header, events))
    assert verdict.outcome.value == "accepted", verdict.reason


def named(buffer: TraceBuffer, event: str) -> list[dict[str, Any]]:
    return [e for e in buffer.events if e["event"] == event]


# ------------------------------------------------------------------ caps


def test_caps_are_carried_in_the_submitted_and_accepted_terms() -> None:
    rt, buffer = claimed(duration_ms=100, max_duration_ms=300, refresh_on_hit=True)
    for event in ("resident_claim_submitted", "resident_claim_accepted"):
        (terms,) = named(buffer, event)
        assert terms["duration_ms"] == 100 and terms["max_duration_ms"] == 300
        assert "max_duration_steps" not in terms
    assert_accepted(rt, buffer.events)


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (
            {"duration_steps": 3, "max_duration_steps": 2},
            "max_duration_steps 2 is shorter than duration_steps",
        ),
        ({"duration_ms": 30, "max_duration_ms": 29}, "max_duration_ms 29 is shorter than duration_ms 30"),
        ({"duration_ms": 30, "max_duration_steps": 5}, "a cap needs duration_steps, the term it caps"),
        ({"duration_steps": 3, "max_duration_steps": 0}, "a cap must be positive"),
    ],
)
def test_a_cap_without_its_duration_or_below_it_is_invalid(claim: dict[str, Any], message: str) -> None:
    rt = MicroRuntime(80, policy=POLICIES["expiring"], wall_clock=True)
    with pytest.raises(InputError, match=message):
        rt.submit_claim(ClaimSpec("c", "obj", M.expiring, 4, 4, **claim))
    assert "c" not in rt.claims


def test_refreshing_hits_never_keep_a_claim_past_its_ms_cap() -> None:
    rt, buffer = claimed(duration_ms=100, max_duration_ms=250, refresh_on_hit=True)
    for n in range(6):  # a hit every 50 ms: without the cap it would never expire
        rt.advance_clock(50)
        if rt.claims["c"].phase is Phase.materialized:
            hit(rt, n)
    assert [e["t_ns"] for e in named(buffer, "resident_claim_expired")] == [250 * MS]
    assert_accepted(rt, buffer.events)


def test_refreshing_hits_never_keep_a_claim_past_its_step_cap() -> None:
    rt, buffer = claimed(duration_steps=2, max_duration_steps=5, refresh_on_hit=True)
    for n in range(6):
        rt.tick()
        if rt.claims["c"].phase is Phase.materialized:
            hit(rt, n)
    assert [e["engine_step"] for e in named(buffer, "resident_claim_expired")] == [5]
    assert_accepted(rt, buffer.events)


def test_a_cap_longer_than_the_refreshed_term_does_not_shorten_it() -> None:
    rt, buffer = claimed(duration_ms=100, max_duration_ms=1000, refresh_on_hit=True)
    rt.advance_clock(50)
    hit(rt, 0)
    rt.advance_clock(99)
    assert rt.claims["c"].phase is Phase.materialized
    rt.advance_clock(1)
    assert [e["t_ns"] for e in named(buffer, "resident_claim_expired")] == [150 * MS]
    assert_accepted(rt, buffer.events)


# ------------------------------------------------------------------ extensions


def test_an_extension_moves_a_ms_expiry_later_and_is_emitted_with_its_reason() -> None:
    rt, buffer = claimed(duration_ms=100)
    rt.advance_clock(40)
    result = rt.extend_claim("c", duration_ms=200, reason="agent still thinking")
    assert result.outcome is ExtensionOutcome.granted and result.granted
    assert (result.duration_ms, result.duration_steps) == (200, None)
    (extended,) = named(buffer, "resident_claim_extended")
    assert extended == {
        "seq": extended["seq"],
        "event": "resident_claim_extended",
        "engine_step": 0,
        "t_ns": 40 * MS,
        "claim_id": "c",
        "duration_ms": 200,
        "reason": "agent still thinking",
    }
    rt.advance_clock(199)  # 239 ms: past the original 100 ms, before the extension's end
    assert rt.claims["c"].phase is Phase.materialized
    rt.advance_clock(1)
    assert [e["t_ns"] for e in named(buffer, "resident_claim_expired")] == [240 * MS]
    assert_accepted(rt, buffer.events)


def test_an_extension_moves_a_step_expiry_later() -> None:
    rt, buffer = claimed(duration_steps=2)
    rt.tick()
    assert rt.extend_claim("c", duration_steps=4).outcome is ExtensionOutcome.granted
    rt.tick(3)
    assert rt.claims["c"].phase is Phase.materialized
    rt.tick()
    assert [e["engine_step"] for e in named(buffer, "resident_claim_expired")] == [5]
    assert rt.claims["c"].expires_at == 5
    assert_accepted(rt, buffer.events)


def test_a_request_past_the_cap_is_clipped_to_it() -> None:
    rt, buffer = claimed(duration_ms=100, max_duration_ms=300)
    rt.advance_clock(50)
    result = rt.extend_claim("c", duration_ms=1000)
    assert result.outcome is ExtensionOutcome.clipped and result.granted
    assert result.duration_ms == 250  # 50 + 250 = the 300 ms cap
    assert [e["duration_ms"] for e in named(buffer, "resident_claim_extended")] == [250]
    rt.advance_clock(249)
    assert rt.claims["c"].phase is Phase.materialized
    rt.advance_clock(1)
    assert [e["t_ns"] for e in named(buffer, "resident_claim_expired")] == [300 * MS]
    assert_accepted(rt, buffer.events)


def test_refused_extensions_emit_nothing_and_change_nothing() -> None:
    rt, buffer = claimed(duration_steps=3, max_duration_steps=6)
    rt.tick()
    shorter = rt.extend_claim("c", duration_steps=1)  # would end at 2, before 3
    same = rt.extend_claim("c", duration_steps=2)  # would end at 3: no longer
    assert shorter.outcome is same.outcome is ExtensionOutcome.refused
    assert not shorter.granted and shorter.duration_steps is None and shorter.why
    assert rt.extend_claim("c", duration_steps=9).outcome is ExtensionOutcome.clipped  # to 6
    at_cap = rt.extend_claim("c", duration_steps=9)
    assert at_cap.outcome is ExtensionOutcome.refused and "cap" in (at_cap.why or "")
    assert len(named(buffer, "resident_claim_extended")) == 1
    rt.tick(4)
    assert rt.claims["c"].phase is Phase.materialized
    rt.tick()
    assert [e["engine_step"] for e in named(buffer, "resident_claim_expired")] == [6]
    assert_accepted(rt, buffer.events)


def test_a_refreshing_hit_after_an_extension_keeps_the_later_of_the_two() -> None:
    rt, buffer = claimed(duration_ms=100, refresh_on_hit=True)
    rt.advance_clock(10)
    rt.extend_claim("c", duration_ms=300)  # ends at 310
    rt.advance_clock(40)
    hit(rt, 0)  # 50 + 100 = 150 < 310: the extension still holds
    rt.advance_clock(259)
    assert rt.claims["c"].phase is Phase.materialized
    rt.advance_clock(1)
    hit_then = [e["t_ns"] for e in named(buffer, "resident_claim_expired")]
    assert hit_then == [310 * MS]
    assert_accepted(rt, buffer.events)


def test_extensions_of_a_claim_that_does_not_expire_are_judged_from_its_last_hit() -> None:
    """A hard claim with a refreshing duration: the runtime never expires it, but its
    extensions must still end after the term its last hit restarted."""
    rt, buffer = claimed(M.hard_protected, "hard_protected", duration_steps=3, refresh_on_hit=True)
    rt.tick(2)
    hit(rt, 0)  # the term now ends at step 5
    assert rt.extend_claim("c", duration_steps=2).outcome is ExtensionOutcome.refused  # 4 < 5
    assert rt.extend_claim("c", duration_steps=4).outcome is ExtensionOutcome.granted  # 6
    rt.tick(10)
    assert rt.claims["c"].phase is Phase.materialized
    assert_accepted(rt, buffer.events)


@pytest.mark.parametrize(
    ("claim_id", "asked", "message"),
    [
        ("nobody", {"duration_steps": 2}, "unknown claim"),
        ("c", {}, "give duration_steps or duration_ms"),
        ("c", {"duration_steps": 0}, "must be positive"),
        ("c", {"duration_ms": 50}, "carries no duration_ms: an extension adds no clock"),
        ("c", {"duration_steps": 5, "duration_ms": 50}, "carries no duration_ms"),
    ],
)
def test_an_extension_the_contract_cannot_take_is_an_input_error(
    claim_id: str, asked: dict[str, Any], message: str
) -> None:
    rt, buffer = claimed(duration_steps=3)
    emitted = len(buffer.events)
    with pytest.raises(InputError, match=message):
        rt.extend_claim(claim_id, **asked)
    assert len(buffer.events) == emitted
    assert rt.claims["c"].expires_at == 3


@pytest.mark.parametrize("end", ["expire", "release"])
def test_an_ended_claim_cannot_be_extended(end: str) -> None:
    rt, buffer = claimed(duration_steps=2)
    if end == "expire":
        rt.tick(2)
    else:
        rt.release("c")
    emitted = len(buffer.events)
    with pytest.raises(InputError, match="extend is not allowed for claim c"):
        rt.extend_claim("c", duration_steps=5)
    assert len(buffer.events) == emitted
    assert_accepted(rt, buffer.events)


def test_a_forged_extension_past_the_cap_is_rejected_by_the_duration_rule() -> None:
    """Attack: the trace claims a longer grant than the runtime's cap allows."""
    rt, buffer = claimed(duration_ms=100, max_duration_ms=300)
    rt.advance_clock(50)
    rt.extend_claim("c", duration_ms=1000)
    forged = [
        {**e, "duration_ms": 251} if e["event"] == "resident_claim_extended" else e for e in buffer.events
    ]
    verdict = check_bytes(encode_trace(rt.header, forged))
    assert verdict.outcome.value == "rejected"
    assert str(verdict.rule) == "duration"
