"""The seed cases, each defined once: its inputs, the numbers it must produce, the seed section
it comes from, and the lanes that run it.

A lane is one way of running a case: `micro` (the MicroRuntime, simulated), `scheduler` (vLLM's
real scheduler with fabricated model outputs) or `engine` (`vllm.LLM` end to end on the tiny
model). Each lane keeps its own mechanics (how a prefix is computed, what a step is) and takes
the case's inputs from here: the claim's mode and id, the usable pool, the resident prefix and
the live blocks the active request needs. Whatever lane runs a case reports the numbers of
`NUMBERS` it measured: `micro_scenarios.seed_case_numbers(case)` on the MicroRuntime; on the
vLLM lanes, the `seed_case` entry of the case's scenario's numbers (`case.scenario(lane)`).
`trace_numbers` reads the ones a trace shows, the same way for every lane; each lane adds what
only its cache can say. `tests/lab/test_seed_cases.py` checks that every lane a case names
gives exactly `expect`.

`expect` is the seeds' arithmetic written out (60 + 70 = 130 > 80, shortfall 50), never
computed by a runtime. Lane-specific numbers (engine steps, finish reasons, timings) stay in each
lane's own scenario summary; so do durations, which count ticks on the MicroRuntime and engine
steps in vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any


class Lane(StrEnum):
    micro = "micro"
    scheduler = "scheduler"
    engine = "engine"


NUMBERS: Mapping[str, str] = MappingProxyType(
    {
        "active_outcome": "what became of the active request: admitted (served) or refused",
        "deferred_first": "the active request was deferred before that outcome",
        "blocking_claim_ids": "the first refusal's or deferral's blocking claims",
        "protected_resident_blocks": "its capacity proof: blocks pinned by the blocking claims",
        "active_live_blocks_required": "its capacity proof: live blocks the request needs",
        "resident_plus_active_blocks": "its capacity proof: the sum",
        "usable_blocks": "its capacity proof: the pool it was measured against",
        "capacity_shortfall_blocks": "its capacity proof: max(0, sum - usable)",
        "resident_blocks_evicted": "resident prefix blocks the run evicted",
        "resident_leading_blocks_after": "leading blocks of the resident prefix still cached at the end",
        "claims_accepted": "claims accepted",
        "released_before_loss": "the claim was demoted or expired before its first block was lost",
        "claim_blocks_lost_after_release": "the claim's blocks lost after that demotion or expiry",
        "restored_before_reuse": "the offloaded claim was restored before the reuse that needed it",
        "reuse_satisfied": "that reuse was reported with the claim's predicate satisfied",
        "restoration_failed": "the claim's restoration failed with a claim-scoped outcome",
        "refusal_blocking_claim_ids": "the claims the reuser's refusal names",
        "harm_events": "claims reported harmed",
    }
)
"""The lane-independent numbers a seed case may expect, and what each means."""


@dataclass(frozen=True)
class SeedCase:
    """One case of the seeds. `mode` is the claim's protection mode (None: stock behaviour, no
    claim); `resident_blocks` the claimed (or merely cached) prefix; `active_blocks` the live
    blocks the active request (or, for offload paths, the pressure request) needs. `names`
    gives a vLLM lane's scenario name where it differs from `name` (the MicroRuntime runs a
    case directly: `micro_scenarios.seed_case_numbers`). `defer`: the runtime is set to
    defer a capacity conflict before refusing it (for how long is the lane's mechanics);
    `restore_fails`: the claim's restoration from the offload tier fails."""

    name: str
    seed: str
    summary: str
    mode: str | None
    claim_id: str | None
    usable_blocks: int
    resident_blocks: int
    active_blocks: int
    expect: Mapping[str, Any]
    lanes: frozenset[Lane]
    names: Mapping[Lane, str] = field(default_factory=dict)
    defer: bool = False
    restore_fails: bool = False

    def scenario(self, lane: Lane) -> str:
        """This case's scenario name on `lane`."""
        return self.names.get(lane, self.name)


def _expected_proof(claim_id: str, resident: int, active: int, usable: int) -> dict[str, Any]:
    """The capacity proof of DESIGN 2.2 a case expects for `resident` protected and `active`
    live blocks (the seed's arithmetic, written out)."""
    return {
        "blocking_claim_ids": [claim_id],
        "protected_resident_blocks": resident,
        "active_live_blocks_required": active,
        "resident_plus_active_blocks": resident + active,
        "usable_blocks": usable,
        "capacity_shortfall_blocks": max(0, resident + active - usable),
    }


MICRO_SCHEDULER = frozenset({Lane.micro, Lane.scheduler})
MICRO_ENGINE = frozenset({Lane.micro, Lane.engine})

SWEEP_POOLS: tuple[int, ...] = tuple(range(80, 151, 10))
"""Usable pools of the 60-resident / 70-active capacity sweep (seed 001 figure 4)."""


def _sweep() -> list[SeedCase]:
    cases = []
    for pool in SWEEP_POOLS:
        lost = max(0, 60 + 70 - pool)
        cases.append(
            SeedCase(
                f"sweep-native-{pool}",
                "001 fig. 4",
                f"capacity sweep, stock LRU, {pool} usable blocks",
                None,
                None,
                pool,
                60,
                70,
                {
                    "active_outcome": "admitted",
                    "resident_blocks_evicted": lost,
                    "resident_leading_blocks_after": 60 - lost,
                    "harm_events": 0,
                },
                MICRO_SCHEDULER,
            )
        )
        refused = lost > 0
        cases.append(
            SeedCase(
                f"sweep-hard-{pool}",
                "001 fig. 4",
                f"capacity sweep, a hard claim on the resident prefix, {pool} usable blocks",
                "hard_protected",
                "claim:resident",
                pool,
                60,
                70,
                {
                    "active_outcome": "refused" if refused else "admitted",
                    **(_expected_proof("claim:resident", 60, 70, pool) if refused else {}),
                    "resident_leading_blocks_after": 60,
                    "harm_events": 0,
                },
                MICRO_SCHEDULER,
            )
        )
    return cases


CASES: tuple[SeedCase, ...] = (
    SeedCase(
        "native-60-70-80",
        "001 §2.3",
        "stock LRU: a 70-block active request evicts 50 of 60 resident blocks, no claim, no harm",
        None,
        None,
        80,
        60,
        70,
        {
            "active_outcome": "admitted",
            "resident_blocks_evicted": 50,
            "resident_leading_blocks_after": 10,
            "claims_accepted": 0,
            "harm_events": 0,
        },
        MICRO_SCHEDULER,
    ),
    SeedCase(
        "hard-60-70-80",
        "001 §2.3",
        "a hard claim on the 60 resident blocks refuses the 70-block request: 60 + 70 = 130 > 80",
        "hard_protected",
        "claim:resident",
        80,
        60,
        70,
        {
            "active_outcome": "refused",
            **_expected_proof("claim:resident", 60, 70, 80),
            "resident_leading_blocks_after": 60,
            "claims_accepted": 1,
            "harm_events": 0,
        },
        MICRO_SCHEDULER,
    ),
    *_sweep(),
    SeedCase(
        "demote-before-loss",
        "001 L4",
        "a demotable claim is demoted to admit the 70-block request; its 50 lost blocks are post-release",
        "demotable",
        "claim:resident",
        80,
        60,
        70,
        {
            "active_outcome": "admitted",
            "released_before_loss": True,
            "claim_blocks_lost_after_release": 50,
            "harm_events": 0,
        },
        MICRO_SCHEDULER,
    ),
    SeedCase(
        "expire-before-loss",
        "001 L5",
        "an expiring claim defers the 70-block request until it expires; its 50 lost blocks are post-expiry",
        "expiring",
        "claim:resident",
        80,
        60,
        70,
        {
            "active_outcome": "admitted",
            "deferred_first": True,
            **_expected_proof("claim:resident", 60, 70, 80),
            "released_before_loss": True,
            "claim_blocks_lost_after_release": 50,
            "harm_events": 0,
        },
        MICRO_SCHEDULER,
    ),
    SeedCase(
        "live-pressure-40-46-68",
        "001 table 10",
        "40 protected + 46 active against 68 usable: deferred, then refused, shortfall 18 (seed: 19)",
        "hard_protected",
        "claim:live-resident",
        68,
        40,
        46,
        {
            "active_outcome": "refused",
            "deferred_first": True,
            **_expected_proof("claim:live-resident", 40, 46, 68),
            "harm_events": 0,
        },
        MICRO_SCHEDULER,
        {Lane.scheduler: "live-pressure-40-46"},
        defer=True,
    ),
    SeedCase(
        "hard-8-21-23",
        "001 §2.3 (engine pool)",
        "a hard claim on 8 blocks refuses a request needing 21 live blocks: 8 + 21 = 29 > 23",
        "hard_protected",
        "claim:hard_protected",
        23,
        8,
        21,
        {"active_outcome": "refused", **_expected_proof("claim:hard_protected", 8, 21, 23), "harm_events": 0},
        MICRO_ENGINE,
        {Lane.engine: "hard-refusal"},
    ),
    SeedCase(
        "demote-8-21-23",
        "001 L4 (engine pool)",
        "a demotable 8-block claim is demoted to admit a request needing 21 of 23 blocks",
        "demotable",
        "claim:demotable",
        23,
        8,
        21,
        {"active_outcome": "admitted", "released_before_loss": True, "harm_events": 0},
        MICRO_ENGINE,
        {Lane.engine: "demote-before-loss"},
    ),
    SeedCase(
        "expire-8-21-23",
        "001 L5 (engine pool)",
        "an expiring 8-block claim defers a request needing 21 of 23 blocks until it expires",
        "expiring",
        "claim:expiring",
        23,
        8,
        21,
        {
            "active_outcome": "admitted",
            "deferred_first": True,
            "released_before_loss": True,
            "harm_events": 0,
        },
        MICRO_ENGINE,
        {Lane.engine: "expire-before-loss"},
    ),
    SeedCase(
        "path-a-restore",
        "000 path A",
        "an offloadable 4-block claim, offloaded under 23 blocks of pressure, is restored before reuse",
        "offloadable",
        "claim:A",
        23,
        4,
        23,
        {
            "restored_before_reuse": True,
            "reuse_satisfied": True,
            "restoration_failed": False,
            "harm_events": 0,
        },
        MICRO_ENGINE,
    ),
    SeedCase(
        "path-b-restore-failure",
        "000 path B",
        "the offloaded claim's restoration fails: a claim-scoped outcome, then a refusal naming the claim",
        "offloadable",
        "claim:A",
        23,
        4,
        23,
        {
            "restored_before_reuse": False,
            "reuse_satisfied": False,
            "restoration_failed": True,
            "refusal_blocking_claim_ids": ["claim:A"],
            "harm_events": 0,
        },
        MICRO_ENGINE,
        restore_fails=True,
    ),
)
"""Every seed case, in the seeds' order."""

BY_NAME: Mapping[str, SeedCase] = MappingProxyType({case.name: case for case in CASES})


def cases_on(lane: Lane) -> tuple[SeedCase, ...]:
    """The cases `lane` runs, in catalogue order."""
    return tuple(case for case in CASES if lane in case.lanes)


def on_lane(lane: Lane, scenario: str) -> SeedCase:
    """The case that `lane` runs as `scenario` (KeyError if none)."""
    for case in cases_on(lane):
        if case.scenario(lane) == scenario:
            return case
    raise KeyError(f"no seed case runs as {scenario!r} on the {lane} lane")


PROOF_FIELDS = (
    "blocking_claim_ids",
    "protected_resident_blocks",
    "active_live_blocks_required",
    "resident_plus_active_blocks",
    "usable_blocks",
    "capacity_shortfall_blocks",
)
_CONFLICTS = ("active_request_refused", "active_request_deferred")


def recorded_proof(event: Any) -> dict[str, Any]:
    """The capacity proof a refusal or deferral recorded (a trace v1 event, as dict or model)."""
    fields = event if isinstance(event, Mapping) else vars(event)
    return {key: list(fields[key]) if key == "blocking_claim_ids" else fields[key] for key in PROOF_FIELDS}


_RELEASES = ("resident_claim_demoted", "resident_claim_expired")


def trace_numbers(
    case: SeedCase, events: list[Mapping[str, Any]], *, active: str | None = None, reuser: str | None = None
) -> dict[str, Any]:
    """The `NUMBERS` a lane's trace v1 events show for `case` (`active`: the active request's
    id in the trace, `reuser`: the reusing request's); what only the lane's cache can say
    (evicted and leading blocks, whether the request was served) the lane adds itself."""
    claim = case.claim_id

    def of(*kinds: str, **match: Any) -> list[tuple[int, Mapping[str, Any]]]:
        return [
            (i, e)
            for i, e in enumerate(events)
            if e["event"] in kinds and all(e.get(k) == v for k, v in match.items())
        ]

    numbers: dict[str, Any] = {
        "claims_accepted": len(of("resident_claim_accepted")),
        "harm_events": len(of("resident_claim_harmed")),
    }
    if active is not None:
        if of("active_request_refused", request_id=active):
            numbers["active_outcome"] = "refused"
        elif of("active_request_admitted", request_id=active):
            numbers["active_outcome"] = "admitted"
        conflicts = of(*_CONFLICTS, request_id=active)
        numbers["deferred_first"] = bool(conflicts) and conflicts[0][1]["event"] == "active_request_deferred"
        if conflicts:
            numbers |= recorded_proof(conflicts[0][1])
    if claim is not None:
        released = of(*_RELEASES, claim_id=claim)
        removed = of("block_removed", claim_id=claim)
        if released:
            numbers["released_before_loss"] = not removed or released[0][0] < removed[0][0]
            numbers["claim_blocks_lost_after_release"] = sum(i > released[0][0] for i, _ in removed)
        else:
            numbers["released_before_loss"] = False
    if reuser is not None and claim is not None:
        restored = of("resident_claim_restored", claim_id=claim, request_id=reuser)
        reused = of("request_reused", claim_id=claim, request_id=reuser)
        refused = of("active_request_refused", request_id=reuser)
        satisfied = [i for i, e in reused if e["predicate_satisfied"]]
        numbers |= {
            "restored_before_reuse": bool(restored and satisfied) and restored[0][0] < satisfied[0],
            "reuse_satisfied": bool(satisfied),
            "restoration_failed": bool(of("resident_claim_restoration_failed", claim_id=claim)),
            "refusal_blocking_claim_ids": list(refused[0][1]["blocking_claim_ids"]) if refused else None,
        }
    return numbers


def mismatches(case: SeedCase, measured: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each expected number a lane did not produce: name -> (expected, measured)."""
    return {
        key: (value, measured.get(key, "<not measured>"))
        for key, value in case.expect.items()
        if measured.get(key, "<not measured>") != value
    }
