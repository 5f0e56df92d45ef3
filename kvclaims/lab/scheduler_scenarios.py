"""Scheduler-lane scenarios: the seeds' cases on vLLM's real scheduler, one trace each.

Every scenario builds a `SchedulerLane`, drives it, writes one kvclaims trace v1 and returns
the numbers it observed. The numbers come from vLLM's own state (its block pool's hash table,
its request outputs) and from the trace's events, never from constants: tests compare them
with the scenario's arithmetic (60 + 70 = 130 > 80, shortfall 50, ...).

Names starting with `control-` are negative controls: honest runs of stock vLLM observed by
an outside claim registry that cannot enforce anything, whose traces refinement must reject.
Every other scenario's trace must be accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from kvclaims.lab import continuum_scenarios
from kvclaims.lab.seed_cases import (
    BY_NAME,
    SWEEP_POOLS,
    Lane,
    SeedCase,
    on_lane,
    recorded_proof,
    trace_numbers,
)
from kvclaims.spec.trace import TraceEvent
from kvclaims.vllm_binding.config import BindingConfig

BLOCK = 16
"""Tokens per block in every scenario (the seeds' 16-token blocks)."""

_EVENTS: TypeAdapter[Any] = TypeAdapter(TraceEvent)


@dataclass(frozen=True)
class ScenarioResult:
    """One run: where its trace is and what it measured."""

    name: str
    trace_path: Path
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Expectation:
    """What refinement must say of a vLLM lane scenario's trace. `outcome` is `accepted` or
    `rejected` (then `rule`); `not_evidenced_for` lists claims for which an accepted control's
    evidence must contain no `offload_restorability` / `restoration_failure_outcome` item (and
    `no_failure_outcome` forbids any restoration-failure evidence at all)."""

    outcome: str = "accepted"
    rule: str | None = None
    not_evidenced_for: tuple[str, ...] = ()
    no_failure_outcome: bool = False


@dataclass(frozen=True)
class Scenario:
    """A named scenario of a vLLM lane: `run` drives the lane (the scheduler lane's runs take
    the trace path, the engine lane's the engine and the trace path), writes one trace and
    returns what it measured."""

    name: str
    summary: str
    run: Callable[..., dict[str, Any]]
    expect: Expectation = field(default_factory=Expectation)

    @property
    def control(self) -> bool:
        return self.name.startswith("control-")


SCENARIOS: dict[str, Scenario] = {}


def _scenario(name: str, summary: str) -> Callable[[Callable[[Path], dict[str, Any]]], Callable[..., Any]]:
    def register(run: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
        SCENARIOS[name] = Scenario(name, summary, run)
        return run

    return register


def scenario_names(lane: str = "scheduler") -> list[str]:
    """Scenario names of a lane, in definition order (only the scheduler lane exists here)."""
    if lane != "scheduler":
        raise ValueError(f"unknown lane {lane!r}; this build has the 'scheduler' lane")
    return list(SCENARIOS)


def run_scenario(name: str, trace_path: Path) -> ScenarioResult:
    """Run one scenario on vLLM's real scheduler and write its trace to `trace_path`."""
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise KeyError(name)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    numbers = scenario.run(trace_path)
    return ScenarioResult(name, trace_path, numbers)


def read_events(trace_path: Path) -> list[Any]:
    """The events of a trace, validated against trace v1 (header skipped)."""
    lines = trace_path.read_text(encoding="utf-8").splitlines()
    return [_EVENTS.validate_json(line) for line in lines[1:]]


def _of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.event == kind]


# -- building blocks -------------------------------------------------------------------------


def _lane(usable: int, binding: BindingConfig | None, *, async_scheduling: bool = False, **spec: Any) -> Any:
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    return SchedulerLane(
        LaneSpec(usable_blocks=usable, binding=binding, async_scheduling=async_scheduling, **spec)
    )


def _binding(trace: Path, **overrides: Any) -> BindingConfig:
    return BindingConfig(
        trace_path=str(trace), trace_source="vllm 0.32.0 scheduler lane + kvclaims", **overrides
    )


def _prompt(tag: str, blocks: int, extra_tokens: int = 0) -> list[int]:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    return prompt_tokens(tag, blocks * BLOCK + extra_tokens)


def _claim(claim_id: str, mode: str, footprint: int, **extra: Any) -> dict[str, Any]:
    return {
        "kvclaims_claim_id": claim_id,
        "kvclaims_mode": mode,
        "kvclaims_footprint_blocks": footprint,
        **{f"kvclaims_{k}": v for k, v in extra.items()},
    }


def _finish(lane: Any, request_id: str) -> tuple[str | None, str | None]:
    done = lane.records[request_id].finished
    if done is None:
        return None, None
    stop = done.stop_reason if isinstance(done.stop_reason, str) else None
    return str(done.finish_reason), stop


def _seed_case(case: SeedCase, events: list[Any], **lane_measured: Any) -> dict[str, Any]:
    """`seed_cases.NUMBERS` for `case`: from this trace's events (the active request is
    `active`), plus what this lane measured in vLLM's cache."""
    dumped = [e.model_dump(mode="json") for e in events]
    return trace_numbers(case, dumped, active="active") | lane_measured


def _claim_counts(events: list[Any]) -> dict[str, int]:
    return {
        "claims_accepted": len(_of(events, "resident_claim_accepted")),
        "harm_events": len(_of(events, "resident_claim_harmed")),
    }


# -- the seed's 60 / 70 / 80 case and its capacity sweep --------------------------------------

HARD = BY_NAME["hard-60-70-80"]
"""The 60 / 70 / 80 inputs the scenarios beyond the catalogue reuse."""


def native_60_70(trace: Path, case: SeedCase) -> dict[str, Any]:
    """Stock vLLM: a resident prefix, then an active prefill (the case's blocks and pool)."""
    from kvclaims.lab.scheduler_lane import NativeObserver

    usable = case.usable_blocks
    lane = _lane(usable, None)
    observer = NativeObserver(lane, trace, f"vllm 0.32.0 stock Scheduler, usable {usable} (observed)")
    resident = _prompt("resident", case.resident_blocks)
    lane.add("resident", resident)
    lane.run()
    stored = observer.watch("resident", case.resident_blocks)
    lane.add("active", _prompt("active", case.active_blocks))
    lane.run()
    leading_after = lane.cached_leading_blocks(resident)
    lane.close()
    events = read_events(trace)
    finish = _finish(lane, "active")[0]
    return {
        "usable_blocks": usable,
        "resident_blocks_cached": stored,
        "active_blocks": case.active_blocks,
        "active_finish_reason": finish,
        "resident_blocks_evicted": len(_of(events, "block_removed")),
        "resident_leading_blocks_after": leading_after,
        **_claim_counts(events),
        "seed_case": _seed_case(
            case,
            events,
            active_outcome="admitted" if finish == "length" else finish,
            resident_blocks_evicted=len(_of(events, "block_removed")),
            resident_leading_blocks_after=leading_after,
        ),
    }


def hard_60_70(trace: Path, case: SeedCase, *, async_scheduling: bool = False) -> dict[str, Any]:
    """The binding: the resident prefix is a hard_protected claim, then the active prefill."""
    binding = _binding(trace, protected_fraction=0.75, owner_protected_fraction=0.75)
    lane = _lane(case.usable_blocks, binding, async_scheduling=async_scheduling)
    resident = _prompt("resident", case.resident_blocks)
    claim_id = case.claim_id or "claim:resident"
    lane.add("resident", resident, extra_args=_claim(claim_id, "hard_protected", case.resident_blocks))
    lane.run()
    lane.add("active", _prompt("active", case.active_blocks))
    lane.run()
    leading_after = lane.cached_leading_blocks(resident)
    lane.add("reuse", resident + _prompt("reuse", 1), extra_args={"kvclaims_claim_id": claim_id})
    lane.run()
    lane.close()
    events = read_events(trace)
    refused = _of(events, "active_request_refused")
    reused = _of(events, "request_reused")
    finish, stop = _finish(lane, "active")
    return {
        "usable_blocks": case.usable_blocks,
        "active_refused": bool(refused),
        "active_finish_reason": finish,
        "active_stop_reason": stop,
        **(recorded_proof(refused[0]) if refused else {}),
        "resident_leading_blocks_after": leading_after,
        "reuse_cached_blocks": reused[0].cached_blocks if reused else None,
        "reuse_predicate_satisfied": reused[0].predicate_satisfied if reused else None,
        **_claim_counts(events),
        "seed_case": _seed_case(
            case,
            events,
            active_outcome="refused" if refused else "admitted",
            resident_leading_blocks_after=leading_after,
        ),
    }


_scenario(
    "native-60-70-80",
    "stock vLLM: 60-block resident prefix, 70-block active prefill, 80 usable: resident eviction, no claim",
)(lambda trace: native_60_70(trace, BY_NAME["native-60-70-80"]))
_scenario(
    "hard-60-70-80",
    "binding: hard claim over the 60 resident blocks; the 70-block prefill is refused (130 > 80)",
)(lambda trace: hard_60_70(trace, HARD))
_scenario("hard-60-70-80-async", "hard-60-70-80 on ClaimAsyncScheduler (async scheduling)")(
    lambda trace: hard_60_70(trace, HARD, async_scheduling=True)
)
for _capacity in SWEEP_POOLS:
    _scenario(f"sweep-native-{_capacity}", f"capacity sweep, stock vLLM, {_capacity} usable blocks")(
        lambda trace, c=_capacity: native_60_70(trace, BY_NAME[f"sweep-native-{c}"])
    )
    _scenario(
        f"sweep-hard-{_capacity}", f"capacity sweep, binding with a hard claim, {_capacity} usable blocks"
    )(lambda trace, c=_capacity: hard_60_70(trace, BY_NAME[f"sweep-hard-{c}"]))


def capacity_sweep(out_dir: Path) -> list[dict[str, Any]]:
    """Both policies at every sweep capacity; one row per capacity."""
    rows = []
    for capacity in SWEEP_POOLS:
        native = run_scenario(f"sweep-native-{capacity}", out_dir / f"sweep-native-{capacity}.ndjson").numbers
        hard = run_scenario(f"sweep-hard-{capacity}", out_dir / f"sweep-hard-{capacity}.ndjson").numbers
        rows.append(
            {
                "usable_blocks": capacity,
                "native_resident_evicted": native["resident_blocks_evicted"],
                "native_resident_leading_after": native["resident_leading_blocks_after"],
                "native_active_served": native["active_finish_reason"] == "length",
                "hard_active_refused": hard["active_refused"],
                "hard_capacity_shortfall": hard.get("capacity_shortfall_blocks", 0),
                "hard_resident_leading_after": hard["resident_leading_blocks_after"],
            }
        )
    return rows


# -- the live-scheduler pressure case (seed 001: 40 resident + 46 active) -------------------


def live_pressure(trace: Path, case: SeedCase, *, async_scheduling: bool = False) -> dict[str, Any]:
    """A 40-block hard claim and a 46-block active request against a 68-block pool: deferred
    (hard claims configured to defer, at most 3 steps), then refused with shortfall 18."""
    binding = _binding(
        trace,
        protected_fraction=0.6,
        owner_protected_fraction=0.6,
        conflict_actions={"hard_protected": "defer"},
        max_deferral_steps=3,
    )
    lane = _lane(case.usable_blocks, binding, async_scheduling=async_scheduling)
    lane.add(
        "resident",
        _prompt("live-resident", case.resident_blocks),
        extra_args=_claim(case.claim_id, "hard_protected", case.resident_blocks),
    )
    lane.run()
    lane.add("active", _prompt("live-active", case.active_blocks))
    lane.run()
    lane.close()
    events = read_events(trace)
    deferred, refused = _of(events, "active_request_deferred"), _of(events, "active_request_refused")
    finish, stop = _finish(lane, "active")
    return {
        "deferral_events": len(deferred),
        "deferred_steps": (refused[0].engine_step - deferred[0].engine_step) if deferred and refused else 0,
        "active_refused": bool(refused),
        "active_finish_reason": finish,
        "active_stop_reason": stop,
        **(recorded_proof(refused[0]) if refused else {}),
        **_claim_counts(events),
        "seed_case": _seed_case(case, events),
    }


_LIVE = on_lane(Lane.scheduler, "live-pressure-40-46")
_scenario(
    "live-pressure-40-46", "40-block hard claim vs a 46-block request in 68 usable: deferred, then refused"
)(lambda trace: live_pressure(trace, _LIVE))
_scenario("live-pressure-40-46-async", "live-pressure-40-46 on ClaimAsyncScheduler")(
    lambda trace: live_pressure(trace, _LIVE, async_scheduling=True)
)


# -- demotion and expiry before loss; best-effort loss -------------------------------------


def _claim_then_active(lane: Any, case: SeedCase, claim: dict[str, Any]) -> int:
    """`claim` over the case's resident prefix, computed; then the case's active request; then
    the lane is closed. Returns the resident prefix's leading cached blocks at the end."""
    resident = _prompt("resident", case.resident_blocks)
    lane.add("resident", resident, extra_args=claim)
    lane.run()
    lane.add("active", _prompt("active", case.active_blocks))
    lane.run()
    leading_after = lane.cached_leading_blocks(resident)
    lane.close()
    return leading_after


def demote_before_loss(trace: Path, case: SeedCase) -> dict[str, Any]:
    binding = _binding(trace, protected_fraction=0.75, owner_protected_fraction=0.75)
    lane = _lane(case.usable_blocks, binding)
    leading_after = _claim_then_active(lane, case, _claim(case.claim_id, "demotable", case.resident_blocks))
    events = read_events(trace)
    demoted = _of(events, "resident_claim_demoted")
    removed = [e for e in _of(events, "block_removed") if e.claim_id == case.claim_id]
    finish = _finish(lane, "active")[0]
    return {
        "claim_demoted": bool(demoted),
        "demoted_before_first_loss": bool(demoted) and (not removed or demoted[0].seq < removed[0].seq),
        "claim_blocks_lost_after_demotion": len(removed),
        "active_finish_reason": finish,
        "resident_leading_blocks_after": leading_after,
        **_claim_counts(events),
        "seed_case": _seed_case(case, events, active_outcome="admitted" if finish == "length" else finish),
    }


EXPIRY_STEPS = 12
"""How long the expiring case's claim lives here (engine steps, this lane's time unit)."""


def expire_before_loss(trace: Path, case: SeedCase, *, async_scheduling: bool = False) -> dict[str, Any]:
    binding = _binding(trace, protected_fraction=0.75, owner_protected_fraction=0.75)
    lane = _lane(case.usable_blocks, binding, async_scheduling=async_scheduling)
    claim = _claim(case.claim_id, "expiring", case.resident_blocks, duration_steps=EXPIRY_STEPS)
    leading_after = _claim_then_active(lane, case, claim)
    events = read_events(trace)
    expired = _of(events, "resident_claim_expired")
    deferred = _of(events, "active_request_deferred")
    admitted = [e for e in _of(events, "active_request_admitted") if e.request_id == "active"]
    removed = [e for e in _of(events, "block_removed") if e.claim_id == case.claim_id]
    return {
        "claim_expired_at_step": expired[0].engine_step if expired else None,
        "active_deferred_at_step": deferred[0].engine_step if deferred else None,
        "active_admitted_at_step": admitted[0].engine_step if admitted else None,
        **(recorded_proof(deferred[0]) if deferred else {}),
        "expired_before_first_loss": bool(expired) and (not removed or expired[0].seq < removed[0].seq),
        "claim_blocks_lost_after_expiry": len(removed),
        "active_finish_reason": _finish(lane, "active")[0],
        "resident_leading_blocks_after": leading_after,
        **_claim_counts(events),
        "seed_case": _seed_case(case, events),
    }


def best_effort_lost(trace: Path) -> dict[str, Any]:
    lane = _lane(HARD.usable_blocks, _binding(trace))
    claim = _claim("claim:best-effort", "best_effort", HARD.resident_blocks)
    leading_after = _claim_then_active(lane, HARD, claim)
    events = read_events(trace)
    lost = _of(events, "resident_claim_lost")
    return {
        "claim_lost": bool(lost),
        "lost_at_leading_blocks": lost[0].leading_blocks if lost else None,
        "claim_blocks_removed": len([e for e in _of(events, "block_removed") if e.claim_id]),
        "active_finish_reason": _finish(lane, "active")[0],
        "resident_leading_blocks_after": leading_after,
        **_claim_counts(events),
    }


_scenario(
    "demote-before-loss", "demotable claim demoted to admit the 70-block prefill; its loss is post-release"
)(lambda trace: demote_before_loss(trace, BY_NAME["demote-before-loss"]))
_scenario(
    "expire-before-loss", "expiring claim (12 steps) defers the prefill until it expires; loss is post-expiry"
)(lambda trace: expire_before_loss(trace, BY_NAME["expire-before-loss"]))
_scenario("expire-before-loss-async", "expire-before-loss on ClaimAsyncScheduler")(
    lambda trace: expire_before_loss(trace, BY_NAME["expire-before-loss"], async_scheduling=True)
)
_scenario("best-effort-lost", "best_effort claim is not protected: its loss is reported as lost, not harm")(
    best_effort_lost
)


# -- deferral until a claim materializes ----------------------------------------------------


def defer_until_materialized(trace: Path, *, async_scheduling: bool = False) -> dict[str, Any]:
    """A 40-block hard claim still prefilling; a same-owner request reusing it plus 38 own
    blocks (78 live) cannot be promised the prefix yet (40 + 78 > 80): deferred until the
    claim materializes, then admitted needing only 38 new blocks and served from the cache."""
    lane = _lane(80, _binding(trace), async_scheduling=async_scheduling)
    prefix = _prompt("tools", 40)
    lane.add("source", prefix, extra_args=_claim("claim:tools", "hard_protected", 40))
    lane.add("reuser", prefix + _prompt("reuser", 38), extra_args={"kvclaims_claim_id": "claim:tools"})
    lane.run()
    lane.close()
    events = read_events(trace)
    deferred = [e for e in _of(events, "active_request_deferred") if e.request_id == "reuser"]
    materialized = _of(events, "resident_claim_materialized")
    admitted = [e for e in _of(events, "active_request_admitted") if e.request_id == "reuser"]
    reused = _of(events, "request_reused")
    return {
        "reuser_deferred_at_step": deferred[0].engine_step if deferred else None,
        **(recorded_proof(deferred[0]) if deferred else {}),
        "claim_materialized_at_step": materialized[0].engine_step if materialized else None,
        "reuser_admitted_at_step": admitted[0].engine_step if admitted else None,
        "reuser_active_live_blocks": admitted[0].active_live_blocks if admitted else None,
        "reuse_cached_blocks": reused[0].cached_blocks if reused else None,
        "reuse_predicate_satisfied": reused[0].predicate_satisfied if reused else None,
        "reuser_finish_reason": _finish(lane, "reuser")[0],
        **_claim_counts(events),
    }


_scenario("defer-until-materialized", "a reuser is deferred until the claim it reuses materializes")(
    defer_until_materialized
)
_scenario("defer-until-materialized-async", "defer-until-materialized on ClaimAsyncScheduler")(
    lambda trace: defer_until_materialized(trace, async_scheduling=True)
)


# -- owner scopes, budgets, hostile metadata --------------------------------------------------


def owner_scope(trace: Path) -> dict[str, Any]:
    lane = _lane(80, _binding(trace))
    prefix = _prompt("alice-sys", 20)
    lane.add("alice-1", prefix, extra_args=_claim("alice:sys", "hard_protected", 20, owner="alice"))
    lane.run()
    attempts = {
        "bob-attach": {"kvclaims_claim_id": "alice:sys", "kvclaims_owner": "bob"},
        "bob-release": {"kvclaims_op": "release", "kvclaims_claim_id": "alice:sys", "kvclaims_owner": "bob"},
        "bob-demote": {"kvclaims_op": "demote", "kvclaims_claim_id": "alice:sys", "kvclaims_owner": "bob"},
        "bob-duplicate": _claim("alice:sys", "hard_protected", 20, owner="bob"),
    }
    for request_id, extra in attempts.items():
        lane.add(request_id, prefix + _prompt(request_id, 1), extra_args=extra)
    lane.run()
    leading_before_release = lane.cached_leading_blocks(prefix)
    held_before_release = len(lane.arbiter.pinned_blocks())
    lane.add(
        "alice-release",
        _prompt("alice-op", 1),
        extra_args={"kvclaims_op": "release", "kvclaims_claim_id": "alice:sys", "kvclaims_owner": "alice"},
    )
    lane.run()
    lane.close()
    events = read_events(trace)
    rejected = _of(events, "resident_claim_rejected")
    return {
        "foreign_operations": len(attempts),
        "foreign_operations_rejected": len([e for e in rejected if e.request_id in attempts]),
        "foreign_requests_served": sum(_finish(lane, r)[0] == "length" for r in attempts),
        "foreign_reuse_events": len([e for e in _of(events, "request_reused") if e.request_id in attempts]),
        "claim_pinned_blocks_before_release": held_before_release,
        "claim_leading_blocks_before_release": leading_before_release,
        "released_by_owner": any(e.claim_id == "alice:sys" for e in _of(events, "resident_claim_released")),
        "rejection_reasons": [e.reason for e in rejected],
        **_claim_counts(events),
    }


def budgets(trace: Path) -> dict[str, Any]:
    """Global cap 40 (0.5 of 80), owner cap 30 (0.375 of 80)."""
    lane = _lane(80, _binding(trace, protected_fraction=0.5, owner_protected_fraction=0.375))
    steps = [
        ("a1", "alice", 25),
        ("a2", "alice", 10),  # alice would hold 35 > 30: owner budget
        ("b1", "bob", 20),  # 25 + 20 = 45 > 40: global budget
    ]
    for claim, owner, footprint in steps:
        lane.add(
            claim,
            _prompt(claim, footprint),
            extra_args=_claim(claim, "hard_protected", footprint, owner=owner),
        )
        lane.run()
    lane.add(
        "a1-release",
        _prompt("op", 1),
        extra_args={"kvclaims_op": "release", "kvclaims_claim_id": "a1", "kvclaims_owner": "alice"},
    )
    lane.run()
    lane.add("b2", _prompt("b2", 20), extra_args=_claim("b2", "hard_protected", 20, owner="bob"))
    lane.run()
    lane.close()
    events = read_events(trace)
    return {
        "protected_cap": 40,
        "owner_cap": 30,
        "accepted": [e.claim_id for e in _of(events, "resident_claim_accepted")],
        "rejected": {e.claim_id: e.reason for e in _of(events, "resident_claim_rejected")},
        "all_requests_served": all(_finish(lane, r)[0] == "length" for r in lane.records),
        **_claim_counts(events),
    }


HOSTILE_METADATA: dict[str, dict[str, Any]] = {
    "wrong-type-footprint": _claim("h:type", "hard_protected", 4) | {"kvclaims_footprint_blocks": "4"},
    "bool-footprint": _claim("h:bool", "hard_protected", 4) | {"kvclaims_footprint_blocks": True},
    "float-footprint": _claim("h:float", "hard_protected", 4) | {"kvclaims_footprint_blocks": 4.0},
    "unknown-mode": _claim("h:mode", "ultra_protected", 4),
    "unsupported-mode": _claim("h:offload", "offloadable", 4),
    "negative-footprint": _claim("h:neg", "hard_protected", -3),
    # vLLM itself refuses extra_args integers beyond 64 bits; this is the largest it passes on.
    "huge-footprint": _claim("h:huge", "hard_protected", 2**63 - 1),
    "footprint-beyond-prompt": _claim("h:beyond", "hard_protected", 2**31 - 1),
    "megabyte-claim-id": _claim("x" * 1_000_000, "hard_protected", 4),
    "non-string-claim-id": _claim("h:id", "hard_protected", 4) | {"kvclaims_claim_id": ["a", 1]},
    "unknown-key": _claim("h:key", "hard_protected", 4) | {"kvclaims_priority": 9},
    "expiring-without-duration": _claim("h:exp", "expiring", 4),
    "predicate-beyond-footprint": _claim("h:pred", "hard_protected", 4, predicate_blocks=9),
    "duplicate-claim-id": _claim("h:dup", "hard_protected", 4),
    "attach-to-foreign-claim": {"kvclaims_claim_id": "h:dup", "kvclaims_owner": "mallory"},
    "release-unknown-claim": {"kvclaims_op": "release", "kvclaims_claim_id": "h:nobody"},
    "release-with-terms": {
        "kvclaims_op": "release",
        "kvclaims_claim_id": "h:dup",
        "kvclaims_mode": "best_effort",
    },
}
"""Malformed or hostile claim metadata; each must be rejected with a reason and its request
served. `duplicate-claim-id` reuses the id of a valid claim submitted first."""


def hostile_metadata(trace: Path) -> dict[str, Any]:
    lane = _lane(80, _binding(trace))
    lane.add("valid", _prompt("valid", 4), extra_args=_claim("h:dup", "hard_protected", 4))
    lane.run()
    for name, extra in HOSTILE_METADATA.items():
        lane.add(name, _prompt(name, 8), max_tokens=2, extra_args=extra)
    steps = lane.run()
    lane.close()
    events = read_events(trace)
    rejected = {e.request_id: e.reason for e in _of(events, "resident_claim_rejected")}
    return {
        "hostile_requests": len(HOSTILE_METADATA),
        "hostile_rejected": sum(name in rejected for name in HOSTILE_METADATA),
        "hostile_served": sum(_finish(lane, name)[0] == "length" for name in HOSTILE_METADATA),
        "steps_to_drain": steps,
        "reasons": {name: rejected.get(name) for name in HOSTILE_METADATA},
        "largest_event_line_bytes": max(len(line) for line in trace.read_text().splitlines()),
        **_claim_counts(events),
    }


_scenario("owner-scope", "another owner cannot attach to, release, demote or re-submit a claim")(owner_scope)
_scenario("budgets", "claims beyond the owner and global protected-block caps are rejected with a reason")(
    budgets
)
_scenario("hostile-metadata", "malformed and hostile claim metadata: claims rejected, requests served")(
    hostile_metadata
)


# -- the traps: reset_prefix_cache with pins; invalid-load eviction of pinned blocks -----------


def reset_with_pins(trace: Path) -> dict[str, Any]:
    lane = _lane(80, _binding(trace))
    prefix = _prompt("sys", 30)
    lane.add("sys-1", prefix, extra_args=_claim("claim:sys", "hard_protected", 30))
    lane.run()
    pinned_before = len(lane.arbiter.pinned_blocks())
    reset_ok = lane.scheduler.reset_prefix_cache()
    leading_after_reset = lane.cached_leading_blocks(prefix)
    lane.add("sys-2", prefix, extra_args=_claim("claim:sys-2", "hard_protected", 30))
    lane.run()
    leading_rematerialized = lane.cached_leading_blocks(prefix)
    lane.close()
    events = read_events(trace)
    return {
        "pinned_blocks_before_reset": pinned_before,
        "reset_succeeded": reset_ok,
        "demoted_before_reset": [e.claim_id for e in _of(events, "resident_claim_demoted")],
        "blocks_removed_by_reset": len(
            [e for e in _of(events, "block_removed") if e.claim_id == "claim:sys"]
        ),
        "leading_blocks_after_reset": leading_after_reset,
        "rematerialized": [e.claim_id for e in _of(events, "resident_claim_materialized")],
        "leading_blocks_after_rematerialization": leading_rematerialized,
        **_claim_counts(events),
    }


def kv_load_failure_harm(trace: Path, *, async_scheduling: bool = False) -> dict[str, Any]:
    """vLLM's invalid-KV-load path with policy `fail` evicts the failed block and everything
    after it from the prefix cache, pinned or not: the claim falls to 5 of 20 leading blocks
    and the binding reports the harm (it cannot prevent it: vLLM strips the hashes itself)."""
    lane = _lane(80, _binding(trace), async_scheduling=async_scheduling, kv_load_failure_policy="fail")
    prefix = _prompt("shared", 20)
    lane.add("source", prefix, extra_args=_claim("claim:shared", "hard_protected", 20))
    lane.run()
    record = lane.arbiter.registry.claims["claim:shared"]
    failing_block = record.slots[5].block_id
    lane.arbiter.note_fault("kv_load_failure", claim_id="claim:shared", request_id="loader")
    lane.add(
        "loader",
        prefix + _prompt("loader", 1),
        max_tokens=2,
        extra_args={"kvclaims_claim_id": "claim:shared"},
    )
    lane.inject_invalid_blocks([failing_block])
    lane.run()
    leading_after = lane.cached_leading_blocks(prefix)
    lane.close()
    events = read_events(trace)
    harmed = _of(events, "resident_claim_harmed")
    return {
        "failed_block_position": 5,
        "loader_finish_reason": _finish(lane, "loader")[0],
        "claim_blocks_removed": len(
            [e for e in _of(events, "block_removed") if e.claim_id == "claim:shared"]
        ),
        "harm_leading_blocks": harmed[0].leading_blocks if harmed else None,
        "harm_required_blocks": harmed[0].required_blocks if harmed else None,
        "leading_blocks_after": leading_after,
        **_claim_counts(events),
    }


_scenario(
    "reset-with-pins", "reset_prefix_cache with pinned claims: demote, reset, re-submit, re-materialize"
)(reset_with_pins)
_scenario(
    "kv-load-failure-harm", "invalid-load `fail` path strips hashes from pinned blocks: reported as harm"
)(kv_load_failure_harm)
_scenario("kv-load-failure-harm-async", "kv-load-failure-harm on ClaimAsyncScheduler")(
    lambda trace: kv_load_failure_harm(trace, async_scheduling=True)
)


# -- negative controls -------------------------------------------------------------------------


def _unenforced(trace: Path, *, late_demotion: bool) -> dict[str, Any]:
    from kvclaims.lab.scheduler_lane import NativeObserver

    lane = _lane(80, None)
    observer = NativeObserver(
        lane, trace, "vllm 0.32.0 stock Scheduler + external claim registry (no enforcement)"
    )
    mode = "demotable" if late_demotion else "hard_protected"
    lane.add("resident", _prompt("resident", HARD.resident_blocks))
    lane.run()
    observer.claim("claim:resident", mode, HARD.resident_blocks)
    observer.watch("resident", HARD.resident_blocks, claim_id="claim:resident")
    lane.add("active", _prompt("active", HARD.active_blocks))
    lane.run()
    if late_demotion:
        observer.demote("claim:resident", "demoted after the loss was observed")
    lane.close()
    events = read_events(trace)
    return {
        "claim_blocks_removed": len([e for e in _of(events, "block_removed") if e.claim_id]),
        **_claim_counts(events),
    }


_scenario(
    "control-unenforced-claim",
    "NEGATIVE CONTROL: stock vLLM + an external hard claim it cannot enforce: silent harm (must be rejected)",
)(lambda trace: _unenforced(trace, late_demotion=False))
_scenario(
    "control-late-demotion",
    "NEGATIVE CONTROL: the external registry demotes only after the loss (must be rejected)",
)(lambda trace: _unenforced(trace, late_demotion=True))


for _name, _summary, _run in continuum_scenarios.SCENARIOS:  # seed 003's, in their own module
    _scenario(_name, _summary)(_run)
