"""Continuum compatibility mode and wall-clock claims in the binding (scheduler lane).

A virtual clock stands in for the wall clock (the arbiter reads `clock`), so durations are
exact; every trace is checked by refinement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kvclaims.refinement import check_trace
from kvclaims.vllm_binding.config import BindingConfig, ContinuumSettings
from kvclaims.vllm_binding.continuum import JobKeyProblem, JobTurn, parse_job_keys

BLOCK = 16
MS = 1_000_000


@pytest.mark.parametrize(
    ("extra_args", "expected"),
    [
        (None, None),
        ({}, None),
        ({"job_id": None}, None),  # seed 003's fork crashes here; it is an ordinary request
        ({"job_id": "j"}, JobTurn("j", False)),
        ({"job_id": "j", "is_last_step": True}, JobTurn("j", True)),
        ({"job_id": "j", "is_last_step": 1}, JobTurn("j", True)),  # vLLM coerced JSON true
    ],
)
def test_job_keys_parse(extra_args: Any, expected: Any) -> None:
    assert parse_job_keys(extra_args) == expected


@pytest.mark.parametrize(
    ("extra_args", "fragment"),
    [
        ({"job_id": 7}, "got int 7"),
        ({"job_id": ""}, "job_id must be a string"),
        ({"job_id": "x" * 1_000_000}, "1000000 characters"),
        ({"job_id": "j", "is_last_step": "yes"}, "is_last_step must be a boolean"),
        ({"job_id": "j", "is_last_step": 2}, "got int 2"),
    ],
)
def test_malformed_job_keys_are_a_bounded_problem(extra_args: dict[str, Any], fragment: str) -> None:
    problem = parse_job_keys(extra_args)
    assert isinstance(problem, JobKeyProblem) and fragment in problem.reason
    assert len(problem.reason) < 200


def test_continuum_refuses_owner_authentication_and_non_pin_modes() -> None:
    with pytest.raises(ValidationError, match="no owner authentication"):
        BindingConfig(owner_hmac_key="k" * 16, continuum=ContinuumSettings())
    with pytest.raises(ValidationError, match="demotable or expiring"):
        ContinuumSettings(mode="hard_protected")


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def lane(tmp_path: Path, usable: int = 64, **config: Any) -> tuple[Any, Clock]:
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    binding = BindingConfig(trace_path=str(tmp_path / "trace.ndjson"), **config)
    built = SchedulerLane(LaneSpec(usable_blocks=usable, binding=binding))
    clock = Clock()
    built.arbiter.clock = clock
    return built, clock


def tokens(tag: str, count: int) -> list[int]:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    return prompt_tokens(tag, count)


def events(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    import json

    lines = (tmp_path / "trace.ndjson").read_text().splitlines()[1:]
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def accepted(tmp_path: Path) -> None:
    verdict = check_trace(tmp_path / "trace.ndjson")
    assert verdict.outcome == "accepted", verdict.reason


def expiring(claim_id: str, footprint: int, **terms: Any) -> dict[str, Any]:
    """An expiring claim's request metadata with `terms` as further `kvclaims_*` keys."""
    return {
        "kvclaims_claim_id": claim_id,
        "kvclaims_mode": "expiring",
        "kvclaims_footprint_blocks": footprint,
        **{f"kvclaims_{k}": v for k, v in terms.items()},
    }


def still_kept_then_expired(built: Any, clock: Clock, tmp_path: Path, before_ms: int) -> dict[str, Any]:
    """After `before_ms` more virtual ms the claim `ttl` is still kept (checked one step
    later); 100 ms on, it expires. Returns the expiry event (the lane is closed)."""
    clock.ns += before_ms * MS
    built.add("other", tokens("q", 2 * BLOCK))
    built.step()
    assert built.arbiter.claim_states()["ttl"] == "materialized"
    clock.ns += 100 * MS
    step_until_idle(built, clock)
    built.close()
    (expiry,) = events(tmp_path, "resident_claim_expired")
    return expiry


def step_until_idle(built: Any, clock: Clock, ms_per_step: int = 10) -> None:
    while built.scheduler.has_requests():
        built.step()
        clock.ns += ms_per_step * MS


pytestmark = pytest.mark.vllm


def test_duration_ms_claim_expires_on_the_arbiters_clock(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    claim = expiring("ttl", 4, duration_ms=500)
    built.add("owner", tokens("p", 4 * BLOCK), extra_args=claim)
    step_until_idle(built, clock)
    expiry = still_kept_then_expired(built, clock, tmp_path, 400)  # 400 + a few 10 ms steps < 500
    (acceptance,) = events(tmp_path, "resident_claim_accepted")
    assert acceptance["duration_ms"] == 500
    assert expiry["t_ns"] - acceptance["t_ns"] >= 500 * MS
    assert expiry["reason"] == "duration of 500 ms ended"
    accepted(tmp_path)


def test_a_clock_stepped_back_never_makes_an_expiry_early(tmp_path: Path) -> None:
    """Attack: the wall clock jumps back 10 s after acceptance. The arbiter's clock never runs
    backwards, so the expiry still comes 500 ms after the acceptance stamp."""
    built, clock = lane(tmp_path)
    clock.ns = 20_000 * MS
    built.add("owner", tokens("p", 2 * BLOCK), extra_args=expiring("ttl", 2, duration_ms=500))
    step_until_idle(built, clock)
    clock.ns = 10_000 * MS
    built.add("other", tokens("q", BLOCK), max_tokens=80)
    step_until_idle(built, clock)  # 800 ms pass on a clock that reads 10.0 .. 10.8 s
    assert built.arbiter.claim_states()["ttl"] == "materialized"
    clock.ns = 20_600 * MS
    built.add("later", tokens("r", BLOCK))
    step_until_idle(built, clock)
    built.close()
    (acceptance,) = events(tmp_path, "resident_claim_accepted")
    (expiry,) = events(tmp_path, "resident_claim_expired")
    assert expiry["t_ns"] - acceptance["t_ns"] >= 500 * MS
    accepted(tmp_path)


def test_refresh_on_hit_restarts_the_clock_at_a_satisfied_reuse(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    claim = expiring("ttl", 2, duration_ms=300, refresh_on_hit=True)
    prompt = tokens("p", 2 * BLOCK + 3)
    built.add("owner", prompt, extra_args=claim)
    step_until_idle(built, clock)
    clock.ns += 250 * MS
    built.add("reuser", prompt, extra_args={"kvclaims_claim_id": "ttl"})
    step_until_idle(built, clock)
    expiry = still_kept_then_expired(built, clock, tmp_path, 250)  # 500 ms after acceptance
    (reuse,) = events(tmp_path, "request_reused")
    assert reuse["predicate_satisfied"] is True
    assert expiry["t_ns"] - reuse["t_ns"] >= 300 * MS
    accepted(tmp_path)


def test_a_cap_ends_a_refreshed_term_at_the_cap(tmp_path: Path) -> None:
    """A hit at 250 ms would run a 300 ms term to 550; the 400 ms cap ends it first, and the
    checker, which knows the cap, accepts that expiry (without the cap it would be early)."""
    built, clock = lane(tmp_path)
    claim = expiring("ttl", 2, duration_ms=300, refresh_on_hit=True, max_duration_ms=400)
    prompt = tokens("p", 2 * BLOCK + 3)
    built.add("owner", prompt, extra_args=claim)
    step_until_idle(built, clock)
    clock.ns += 250 * MS
    built.add("reuser", prompt, extra_args={"kvclaims_claim_id": "ttl"})
    step_until_idle(built, clock)
    clock.ns += 200 * MS
    built.add("other", tokens("q", 2 * BLOCK))
    step_until_idle(built, clock)
    built.close()
    (acceptance,) = events(tmp_path, "resident_claim_accepted")
    (reuse,) = events(tmp_path, "request_reused")
    (expiry,) = events(tmp_path, "resident_claim_expired")
    assert acceptance["max_duration_ms"] == 400 and reuse["predicate_satisfied"] is True
    assert 400 * MS <= expiry["t_ns"] - acceptance["t_ns"] < reuse["t_ns"] + 300 * MS - acceptance["t_ns"]
    accepted(tmp_path)


def extend(claim_id: str, **durations: int) -> dict[str, Any]:
    """The metadata of an owner's request to extend `claim_id` by `durations`."""
    return {
        "kvclaims_claim_id": claim_id,
        "kvclaims_op": "extend",
        **{f"kvclaims_{k}": v for k, v in durations.items()},
    }


def test_an_owner_extends_its_claim_and_the_expiry_moves_later(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    built.add(
        "owner", tokens("p", 2 * BLOCK), extra_args=expiring("ttl", 2, duration_ms=300, max_duration_ms=2000)
    )
    step_until_idle(built, clock)
    clock.ns += 100 * MS
    built.add("extender", tokens("q", BLOCK), extra_args=extend("ttl", duration_ms=500))
    step_until_idle(built, clock)
    clock.ns += 350 * MS  # past the first 300 ms, before the extension's end
    built.add("other", tokens("r", BLOCK))
    built.step()
    assert built.arbiter.claim_states()["ttl"] == "materialized"
    clock.ns += 300 * MS
    step_until_idle(built, clock)
    built.close()
    (extension,) = events(tmp_path, "resident_claim_extended")
    (expiry,) = events(tmp_path, "resident_claim_expired")
    assert extension["duration_ms"] == 500
    assert expiry["t_ns"] >= extension["t_ns"] + 500 * MS
    accepted(tmp_path)


def test_an_extension_is_clipped_at_the_cap_and_a_useless_one_is_rejected(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    built.add(
        "owner", tokens("p", 2 * BLOCK), extra_args=expiring("ttl", 2, duration_ms=300, max_duration_ms=400)
    )
    step_until_idle(built, clock)
    clock.ns += 100 * MS
    for name, asked in (
        ("clipped", {"duration_ms": 1000}),
        ("useless", {"duration_ms": 1000}),
        ("clock", {"duration_steps": 5}),
    ):
        built.add(name, tokens(name, BLOCK), extra_args=extend("ttl", **asked))
        step_until_idle(built, clock)
    built.close()
    (acceptance,) = events(tmp_path, "resident_claim_accepted")
    (extension,) = events(tmp_path, "resident_claim_extended")
    end = extension["t_ns"] + extension["duration_ms"] * MS
    assert acceptance["t_ns"] + 300 * MS < end <= acceptance["t_ns"] + 400 * MS
    reasons = [e["reason"] for e in events(tmp_path, "resident_claim_rejected")]
    assert any("would not end later than the term" in r for r in reasons)
    assert any("carry no duration_steps" in r for r in reasons)
    accepted(tmp_path)


def test_an_extension_of_another_owners_claim_or_an_ended_one_is_rejected(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    built.add("owner", tokens("p", 2 * BLOCK), extra_args=expiring("ttl", 2, duration_ms=50))
    step_until_idle(built, clock)
    built.add(
        "thief", tokens("t", BLOCK), extra_args=extend("ttl", duration_ms=500) | {"kvclaims_owner": "mallory"}
    )
    step_until_idle(built, clock)
    clock.ns += 100 * MS
    built.add("stepper", tokens("s", BLOCK))  # expiry runs at engine steps
    step_until_idle(built, clock)
    assert built.arbiter.claim_states().get("ttl") in (None, "expired", "released")
    built.add("late", tokens("l", BLOCK), extra_args=extend("ttl", duration_ms=500))
    step_until_idle(built, clock)
    built.close()
    assert events(tmp_path, "resident_claim_extended") == []
    reasons = [e["reason"] for e in events(tmp_path, "resident_claim_rejected")]
    assert any("belongs to another owner" in r for r in reasons)
    assert any("no such live claim" in r or "already expired" in r for r in reasons)
    accepted(tmp_path)


def test_a_cap_without_its_duration_is_rejected_with_a_reason(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    claim = expiring("capped", 2, duration_steps=3, max_duration_ms=300)
    built.add("owner", tokens("p", 2 * BLOCK), extra_args=claim)
    step_until_idle(built, clock)
    built.close()
    (rejection,) = events(tmp_path, "resident_claim_rejected")
    assert "a cap needs duration_ms" in rejection["reason"]
    accepted(tmp_path)


def test_both_durations_at_once_are_rejected_with_a_reason(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    claim = expiring("two-clocks", 2, duration_ms=300, duration_steps=3)
    built.add("owner", tokens("p", 2 * BLOCK), extra_args=claim)
    step_until_idle(built, clock)
    built.close()
    (rejection,) = events(tmp_path, "resident_claim_rejected")
    assert "not both" in rejection["reason"]
    accepted(tmp_path)


def test_job_keys_next_to_a_claim_operation_reject_the_job_part(tmp_path: Path) -> None:
    built, clock = lane(tmp_path, continuum=ContinuumSettings())
    built.add("r", tokens("p", 2 * BLOCK), extra_args={"job_id": "j", "kvclaims_claim_id": "nothing"})
    step_until_idle(built, clock)
    built.close()
    reasons = [e["reason"] for e in events(tmp_path, "resident_claim_rejected")]
    assert any("takes no kvclaims_* claim operation" in r for r in reasons)
    assert events(tmp_path, "resident_claim_accepted") == []  # no pin either
    accepted(tmp_path)


def test_an_aborted_turn_pins_nothing_and_releases_its_jobs_pin(tmp_path: Path) -> None:
    built, clock = lane(tmp_path, continuum=ContinuumSettings())
    prompt = tokens("p", 3 * BLOCK)
    built.add("t0", prompt, max_tokens=2, extra_args={"job_id": "j"})
    step_until_idle(built, clock)
    assert len(built.arbiter.pinned_blocks()) == 3
    built.add("t1", prompt + tokens("q", BLOCK), max_tokens=50, extra_args={"job_id": "j"})
    built.step()
    built.abort("t1")
    built.close()
    assert built.arbiter.pinned_blocks() == {}
    released = events(tmp_path, "resident_claim_released")
    assert [e["reason"].split(":")[0] for e in released] == ["superseded"]
    assert len(events(tmp_path, "resident_claim_accepted")) == 1
    accepted(tmp_path)


def test_without_the_mode_job_keys_are_ignored(tmp_path: Path) -> None:
    built, clock = lane(tmp_path)
    built.add("t0", tokens("p", 3 * BLOCK), extra_args={"job_id": "j", "is_last_step": False})
    step_until_idle(built, clock)
    built.close()
    assert built.arbiter.pinned_blocks() == {}
    assert events(tmp_path, "resident_claim_submitted") == []
