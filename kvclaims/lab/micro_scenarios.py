"""Named MicroRuntime scenarios: the seed papers' cases, run as simulations.

Each scenario builds one or more MicroRuntimes, drives them with claims, requests, ticks and
faults, and returns their traces plus a summary. Every number in a summary is read from a
runtime (its pool, its records, its arbiter log) or counted from its trace after the run; no
scenario states an expected result. Scenarios whose name starts with `control-` run a
deliberately broken runtime variant: their traces must be rejected, and the summary says by
which rule.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvclaims.lab.seed_cases import BY_NAME, SWEEP_POOLS, SeedCase, recorded_proof, trace_numbers
from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec, validate_inputs
from kvclaims.microruntime.policies import POLICIES, Policy
from kvclaims.microruntime.runtime import (
    FaultKind,
    LifecycleBug,
    MicroClaim,
    MicroRuntime,
    RequestOutcome,
)
from kvclaims.microruntime.tracing import TraceBuffer, encode_trace
from kvclaims.refinement.api import check_bytes
from kvclaims.spec.capacity import CapacityProof
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.statemachine.ledger import ConflictAction
from kvclaims.statemachine.lifecycle import Event, Phase

M = ProtectionMode
BLOCK_SIZE = 16


@dataclass
class ScenarioRun:
    """One runtime's trace within a scenario."""

    label: str
    header: dict[str, Any]
    events: list[dict[str, Any]]

    def counts(self) -> Counter[str]:
        return Counter(event["event"] for event in self.events)


@dataclass
class ScenarioResult:
    """What a scenario produced: its runs' traces and the numbers measured from them."""

    name: str
    title: str
    control: bool
    runs: list[ScenarioRun] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def trace_checks(self) -> dict[str, str]:
        """Each run's refinement verdict: 'accepted', 'rejected: [rule] line N: message', or
        'inconclusive: ...' / 'invalid: ...' with the checker's reason."""
        verdicts = {}
        for run in self.runs:
            verdict = check_bytes(encode_trace(run.header, run.events), name=run.label)
            found = verdict.counterexample
            if found is not None:
                verdicts[run.label] = f"rejected: [{found.rule.value}] line {found.line}: {found.message}"
            elif verdict.outcome.value == "accepted":
                verdicts[run.label] = "accepted"
            else:
                verdicts[run.label] = f"{verdict.outcome.value}: {verdict.reason}"
        return verdicts


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    run: Callable[[int | None], ScenarioResult]
    default_pool: int | None = None
    """The pool a `--usable-blocks` override replaces; None: the scenario's pools are fixed."""

    @property
    def control(self) -> bool:
        return self.name.startswith("control-")


class _Session:
    """A runtime plus the buffer that keeps its trace."""

    def __init__(
        self, label: str, usable: int, policy: Policy, runtime: type[MicroRuntime] = MicroRuntime
    ) -> None:
        self.label = label
        self.buffer = TraceBuffer()
        self.rt = runtime(
            usable,
            block_size=BLOCK_SIZE,
            policy=policy,
            sink=self.buffer.append,
            source=f"kvclaims-microruntime/{label}",
        )

    def done(self, *, check_end: bool = True) -> ScenarioRun:
        if check_end:
            self.rt.close()
        return ScenarioRun(self.label, self.rt.header, self.buffer.events)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.buffer.events if e["event"] == name]

    def prefill(self, request_id: str, object_id: str, blocks: int) -> RequestOutcome:
        """Compute a prefix that is meant to become reusable resident state."""
        return self.rt.run_request(RequestSpec(request_id, object_id, blocks, kind=RequestKind.resident))


def _pool(usable: int | None, default: int) -> int:
    pool = default if usable is None else usable
    validate_inputs(pool, source="scenario --usable-blocks")
    return pool


def _policy(name: str, **changes: Any) -> Policy:
    return dataclasses.replace(POLICIES[name], **changes) if changes else POLICIES[name]


def _removed_for(session: _Session, claim_id: str, after_event: str) -> int:
    """Block removals naming `claim_id` after the claim's `after_event` (post-release loss)."""
    seen, count = False, 0
    for event in session.buffer.events:
        if event["event"] == after_event and event.get("claim_id") == claim_id:
            seen = True
        elif seen and event["event"] == "block_removed" and event.get("claim_id") == claim_id:
            count += 1
    return count


def _refusal(session: _Session) -> dict[str, Any] | None:
    refusals = session.events("active_request_refused")
    return refusals[0] if refusals else None


def _proof_of(event: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if event is None else recorded_proof(event)


# ---------------------------------------------------------------------- 60 / 70 / 80

RESIDENT = "resident-prefix"
ACTIVE = "bulky-active"


def _resident_active(
    label: str, case: SeedCase, policy: Policy, runtime: type[MicroRuntime] = MicroRuntime
) -> tuple[_Session, RequestOutcome]:
    """The seed 001 2.3 case in `case`'s numbers: a claimed resident prefix (stock policies
    reject the claim), then the active request."""
    session = _Session(label, case.usable_blocks, policy, runtime)
    mode = M(case.mode or M.hard_protected)
    blocks = case.resident_blocks
    session.rt.submit_claim(ClaimSpec(case.claim_id or "claim:resident", RESIDENT, mode, blocks, blocks))
    session.prefill("resident-prefill", RESIDENT, blocks)
    return session, session.rt.run_request(RequestSpec("active", ACTIVE, case.active_blocks))


def _resident_numbers(session: _Session, outcome: RequestOutcome, case: SeedCase) -> dict[str, Any]:
    surviving, leading = session.rt.residency(RESIDENT, case.resident_blocks)
    counts = session.buffer.counts()
    return {
        "usable_blocks": session.rt.pool.usable,
        "active_outcome": outcome.value,
        "resident_blocks_evicted": case.resident_blocks - surviving,
        "resident_blocks_remaining": surviving,
        "resident_leading_blocks": leading,
        "claims_accepted": counts["resident_claim_accepted"],
        "claim_harm_events": counts["resident_claim_harmed"],
        "capacity_proof": _proof_of(_refusal(session)),
    }


def _case(name: str, usable: int | None = None) -> SeedCase:
    """Seed case `name` of the catalogue, on `usable` blocks if given."""
    case = BY_NAME[name]
    return case if usable is None else dataclasses.replace(case, usable_blocks=_pool(usable, usable))


def run_resident_active(
    label: str, usable: int, policy: Policy, mode: ProtectionMode = M.hard_protected
) -> tuple[ScenarioRun, dict[str, Any]]:
    """The seed 001 2.3 case run once on a fresh runtime with a claim of `mode` on `usable`
    blocks: its trace and what it measured (the scenarios' resident numbers plus the claim's
    final `claim_phase`)."""
    case = dataclasses.replace(BY_NAME["hard-60-70-80"], mode=mode.value, usable_blocks=usable)
    session, outcome = _resident_active(label, case, policy)
    phase = session.rt.claims["claim:resident"].phase
    numbers = _resident_numbers(session, outcome, case) | {"claim_phase": str(phase)}
    return session.done(), numbers


def native_60_70_80(usable: int | None) -> ScenarioResult:
    case = _case("native-60-70-80", usable)
    session, outcome = _resident_active("native-60-70-80", case, POLICIES["native_lru"])
    result = ScenarioResult(
        "native-60-70-80", "native LRU serves the active request by evicting residents", False
    )
    result.runs.append(session.done())
    result.summary = _resident_numbers(session, outcome, case)
    return result


def hard_claim_60_70_80(usable: int | None) -> ScenarioResult:
    case = _case("hard-60-70-80", usable)
    session, outcome = _resident_active("hard-claim-60-70-80", case, POLICIES["hard_protected"])
    result = ScenarioResult(
        "hard-claim-60-70-80", "an accepted hard claim turns eviction into refusal", False
    )
    result.runs.append(session.done())
    result.summary = _resident_numbers(session, outcome, case) | {"arbiter": session.rt.arbiter_log}
    return result


def soft_priority_60_70_80(usable: int | None) -> ScenarioResult:
    case = dataclasses.replace(_case("hard-60-70-80", usable), mode=M.soft_priority.value)
    session, outcome = _resident_active("soft-priority-60-70-80", case, POLICIES["soft_priority"])
    result = ScenarioResult(
        "soft-priority-60-70-80", "soft priority ranks victims; it does not exclude them", False
    )
    result.runs.append(session.done())
    result.summary = _resident_numbers(session, outcome, case) | {
        "claim_lost_events": session.buffer.counts()["resident_claim_lost"]
    }
    return result


def arbiter_actions(usable: int | None) -> ScenarioResult:
    """Every conflict action in order: which the pool lacks, which do not apply, which is taken."""
    policy = _policy("full_arbiter", live_bound_blocks=20)
    session = _Session("arbiter-actions", _pool(usable, 80), policy)
    session.rt.submit_claim(ClaimSpec("claim:resident", RESIDENT, M.hard_protected, 60, 60))
    session.prefill("resident-prefill", RESIDENT, 60)
    outcome = session.rt.run_request(RequestSpec("active", ACTIVE, 70, chunks=(20, 20, 20, 10)))
    record = session.rt.requests["active"]
    result = ScenarioResult(
        "arbiter-actions", "the arbiter's actions of seed 001 table 5, tried in order", False
    )
    result.runs.append(session.done())
    result.summary = {
        "active_outcome": outcome.value,
        "live_blocks_after_each_chunk": list(record.live_after_chunk),
        "recomputed_blocks": session.rt.stats.recomputed_blocks,
        "resident_blocks_remaining": session.rt.residency(RESIDENT, 60)[0],
        "arbiter": session.rt.arbiter_log,
    }
    return result


SWEEP_POLICIES = {
    "native_lru": "sweep-native",
    "write_no_admit": "sweep-native",
    "hard_protected": "sweep-hard",
}
"""Each policy of the sweep and the seed cases whose inputs it runs (`<case>-<pool>`)."""


def capacity_sweep(usable: int | None) -> ScenarioResult:
    if usable is not None:
        raise _fixed_pool("capacity-sweep")
    result = ScenarioResult(
        "capacity-sweep", "60 resident + 70 active across usable pools (seed 001 fig. 4)", False
    )
    rows = []
    for pool in SWEEP_POOLS:
        for name, case_name in SWEEP_POLICIES.items():
            case = BY_NAME[f"{case_name}-{pool}"]
            session, outcome = _resident_active(f"{name}-{pool}", case, POLICIES[name])
            result.runs.append(session.done())
            numbers = _resident_numbers(session, outcome, case)
            proof = numbers["capacity_proof"]
            rows.append(
                {
                    "usable_blocks": pool,
                    "policy": name,
                    "active_outcome": numbers["active_outcome"],
                    "resident_blocks_lost": numbers["resident_blocks_evicted"],
                    "capacity_shortfall_blocks": proof["capacity_shortfall_blocks"] if proof else None,
                    "residents_intact": numbers["resident_blocks_remaining"] == 60,
                }
            )
    result.summary = {"rows": rows}
    return result


# ---------------------------------------------------------------------- chunking and bounding

CHUNKS = (20, 20, 20, 10)


def chunked_prefill(usable: int | None) -> ScenarioResult:
    pool = _pool(usable, 80)
    result = ScenarioResult(
        "chunked-prefill",
        "chunking schedules compute; only bounding live KV lets resident and active coexist",
        False,
    )
    alone = _Session("chunked-alone", pool, POLICIES["native_lru"])
    alone.rt.run_request(RequestSpec("active", ACTIVE, 70, chunks=CHUNKS))
    result.runs.append(alone.done())
    chunked, chunked_outcome = _chunked_with_resident(
        "chunked-with-hard-claim", pool, POLICIES["hard_protected"]
    )
    result.runs.append(chunked.done())
    bounded, bounded_outcome = _chunked_with_resident("bounded-live", pool, POLICIES["bounded_live"])
    result.runs.append(bounded.done())
    result.summary = {
        "chunks": list(CHUNKS),
        "full_attention_live_after_each_chunk": list(alone.rt.requests["active"].live_after_chunk),
        "with_hard_claim": {
            "active_outcome": chunked_outcome.value,
            "capacity_proof": _proof_of(_refusal(chunked)),
        },
        "bounded_live": {
            "active_outcome": bounded_outcome.value,
            "live_bound_blocks": bounded.rt.policy.live_bound_blocks,
            "live_after_each_chunk": list(bounded.rt.requests["active"].live_after_chunk),
            "recomputed_blocks": bounded.rt.stats.recomputed_blocks,
            "resident_blocks_remaining": bounded.rt.residency(RESIDENT, 60)[0],
            "claim_phase": bounded.rt.claims["claim:resident"].phase.value,
        },
    }
    return result


def _chunked_with_resident(label: str, pool: int, policy: Policy) -> tuple[_Session, RequestOutcome]:
    session = _Session(label, pool, policy)
    session.rt.submit_claim(ClaimSpec("claim:resident", RESIDENT, M.hard_protected, 60, 60))
    session.prefill("resident-prefill", RESIDENT, 60)
    return session, session.rt.run_request(RequestSpec("active", ACTIVE, 70, chunks=CHUNKS))


# ---------------------------------------------------------------------- Q1 materialization

Q1_PREFIXES = (("A", 60, 40, 10.0, "t1"), ("B", 60, 40, 8.0, "t2"), ("C", 20, 40, 4.0, "t3"))
"""Seed 001's fair-share fragmentation regime (public MicroRuntime, regime
`fair_share_fragmentation`): object, blocks, useful threshold, value, tenant."""
Q1_POLICIES = ("native_lru", "naive_fair_share", "complete_prefix_fair_share", "value_density", "oracle")


def materialization_q1(usable: int | None) -> ScenarioResult:
    if usable is not None:
        raise _fixed_pool("materialization-q1")
    result = ScenarioResult(
        "materialization-q1",
        "retained blocks versus thresholded leading-prefix value (seed 001 table 6)",
        False,
    )
    rows = []
    for name in (*Q1_POLICIES, "salted"):
        session = _Session(f"q1-{name}", 100, POLICIES["native_lru" if name == "salted" else name])
        rows.append(_q1_run(session, salted=name == "salted") | {"policy": name})
        result.runs.append(session.done())
    result.summary = {"pressure_blocks": 20, "usable_blocks": 100, "rows": rows}
    return result


def _q1_run(session: _Session, *, salted: bool) -> dict[str, Any]:
    """Claims, prefill A B C, 20 blocks of pressure, then A, B and C return in order (each
    return is a real request: it allocates what it misses, as the seed's carrier requests did)."""
    rt = session.rt
    for object_id, blocks, *_ in Q1_PREFIXES:
        rt.register_object(object_id, blocks)
    rt.submit_claims(
        [
            ClaimSpec(f"claim-{o}", o, M.soft_priority, max(b, t), t, owner_scope=tenant, value=v)
            for o, b, t, v, tenant in Q1_PREFIXES
        ]
    )
    for object_id, blocks, *_ in Q1_PREFIXES:
        session.prefill(f"prefill-{object_id}", object_id, blocks)
    rt.run_request(RequestSpec("pressure", "pressure", 20))
    cached, first_missing = {}, {}
    for object_id, blocks, *_ in Q1_PREFIXES:
        claim = rt.claims[f"claim-{object_id}"]
        reusable = claim.phase not in (Phase.rejected,) and not salted
        target = f"{object_id}@salt" if salted else object_id
        rt.run_request(
            RequestSpec(
                f"return-{object_id}", target, blocks, reuse_claim=claim.spec.claim_id if reusable else None
            )
        )
        hit = rt.requests[f"return-{object_id}"].hit_blocks
        cached[object_id], first_missing[object_id] = hit * BLOCK_SIZE, hit
    value = sum(
        rt.claims[e["claim_id"]].spec.value
        for e in session.events("request_reused")
        if e["predicate_satisfied"]
    )
    return {
        "claims_accepted": [e["claim_id"] for e in session.events("resident_claim_accepted")],
        "cached_tokens": cached,
        "first_missing_block": first_missing,
        "total_cached_tokens": sum(cached.values()),
        "thresholded_value": value,
    }


# ---------------------------------------------------------------------- Q2 write no-admit


def write_no_admit(usable: int | None) -> ScenarioResult:
    if usable is not None:
        raise _fixed_pool("write-no-admit")
    result = ScenarioResult(
        "write-no-admit",
        "no-admit stops future reuse of the bulky request; residents still die (table 7)",
        False,
    )
    rows = []
    for name in ("native_lru", "write_no_admit"):
        session = _Session(f"q2-{name}", 80, POLICIES[name])
        rt = session.rt
        session.prefill("prefill-small_hot", "small_hot", 30)
        session.prefill("prefill-small_warm", "small_warm", 30)
        served = rt.run_request(RequestSpec("bulky", "bulky", 70))
        rt.run_request(RequestSpec("bulky-repeat", "bulky", 70))
        rt.run_request(RequestSpec("return-small_hot", "small_hot", 30))
        rt.run_request(RequestSpec("return-small_warm", "small_warm", 30))
        hits = {
            rid: rt.requests[rid].hit_blocks
            for rid in ("bulky-repeat", "return-small_hot", "return-small_warm")
        }
        rows.append(
            {
                "policy": name,
                "bulky_served": served.value,
                "bulky_repeat_cached_tokens": hits["bulky-repeat"] * BLOCK_SIZE,
                "small_hot_cached_tokens": hits["return-small_hot"] * BLOCK_SIZE,
                "small_warm_cached_tokens": hits["return-small_warm"] * BLOCK_SIZE,
                "residents_meeting_30_block_threshold": sum(
                    hits[rid] >= 30 for rid in ("return-small_hot", "return-small_warm")
                ),
            }
        )
        result.runs.append(session.done())
    result.summary = {"rows": rows}
    return result


# ---------------------------------------------------------------------- demotion, expiry, failure


def demote_before_loss(usable: int | None) -> ScenarioResult:
    case = _case("demote-before-loss", usable)
    session, outcome = _resident_active("demote-before-loss", case, POLICIES["demotable"])
    result = ScenarioResult(
        "demote-before-loss", "demotion precedes loss: post-release loss is not harm (L4)", False
    )
    result.runs.append(session.done())
    counts = session.buffer.counts()
    result.summary = {
        "active_outcome": outcome.value,
        "claim_demoted_events": counts["resident_claim_demoted"],
        "claim_harm_events": counts["resident_claim_harmed"],
        "post_release_block_losses": _removed_for(session, case.claim_id, "resident_claim_demoted"),
    }
    return result


EXPIRY_TICKS = 3
"""How long the expiring seed cases' claims live on the MicroRuntime (ticks, its time unit)."""


def _expiring(label: str, case: SeedCase) -> tuple[_Session, RequestOutcome]:
    """An expiring claim on the resident prefix; the active request is deferred until the
    claim expires, then admitted and finished."""
    session = _Session(label, case.usable_blocks, POLICIES["expiring"])
    rt, blocks = session.rt, case.resident_blocks
    claim = ClaimSpec(case.claim_id, RESIDENT, M.expiring, blocks, blocks, duration_steps=EXPIRY_TICKS)
    rt.submit_claim(claim)
    session.prefill("resident-prefill", RESIDENT, blocks)
    rt.tick()
    first = rt.submit_request(RequestSpec("active", ACTIVE, case.active_blocks))
    while "active" in rt.pending:
        rt.tick()
    rt.finish_request("active")
    return session, first


def expire_before_loss(usable: int | None) -> ScenarioResult:
    case = _case("expire-before-loss", usable)
    session, first = _expiring("expire-before-loss", case)
    rt = session.rt
    result = ScenarioResult(
        "expire-before-loss", "expiry precedes loss: post-expiry loss is not harm (L5)", False
    )
    result.runs.append(session.done())
    counts = session.buffer.counts()
    result.summary = {
        "first_outcome": first.value,
        "deferrals_before_expiry": counts["active_request_deferred"],
        "claim_expiry_step": rt.claims[case.claim_id].expires_at,
        "request_admitted_at_step": rt.step,
        "claim_expired_events": counts["resident_claim_expired"],
        "claim_harm_events": counts["resident_claim_harmed"],
        "post_expiry_block_losses": _removed_for(session, case.claim_id, "resident_claim_expired"),
        "first_deferral_proof": _proof_of(session.events("active_request_deferred")[0]),
    }
    return result


def materialization_failure(usable: int | None) -> ScenarioResult:
    session = _Session("materialization-failure", _pool(usable, 80), POLICIES["hard_protected"])
    rt = session.rt
    rt.submit_claim(ClaimSpec("claim:leading", "leading-prefix", M.best_effort, 60, 60))
    session.prefill("prefill", "leading-prefix", 60)
    rt.inject_fault(FaultKind.invalid_kv_load, "claim:leading", position=0)
    surviving, leading = rt.residency("leading-prefix", 60)
    rt.run_request(RequestSpec("return", "leading-prefix", 60, reuse_claim="claim:leading"))
    reuse = session.events("request_reused")[0]
    result = ScenarioResult(
        "materialization-failure", "surviving blocks are not a leading prefix: 59 survive, 0 lead (L6)", False
    )
    result.runs.append(session.done())
    result.summary = {
        "surviving_blocks": surviving,
        "leading_blocks": leading,
        "required_blocks": rt.claims["claim:leading"].required_blocks,
        "reuse_cached_blocks": reuse["cached_blocks"],
        "predicate_satisfied": reuse["predicate_satisfied"],
        "claim_lost_events": session.buffer.counts()["resident_claim_lost"],
    }
    return result


def _deferring(label: str, case: SeedCase) -> tuple[_Session, RequestOutcome]:
    """A hard claim whose conflicts are deferred once, then refused: the active request is
    deferred, and refused at the next tick."""
    policy = _policy(
        "hard_protected", conflict_actions=(ConflictAction.defer, ConflictAction.refuse), max_deferrals=1
    )
    session = _Session(label, case.usable_blocks, policy)
    rt, blocks = session.rt, case.resident_blocks
    rt.submit_claim(ClaimSpec(case.claim_id, RESIDENT, M.hard_protected, blocks, blocks))
    session.prefill("resident-prefill", RESIDENT, blocks)
    first = rt.submit_request(RequestSpec("active", ACTIVE, case.active_blocks))
    rt.tick()
    return session, first


def live_scheduler_pressure(usable: int | None) -> ScenarioResult:
    """Seed 001 table 10's shape: 40 protected + 46 active against a 68-block pool."""
    session, first = _deferring("live-scheduler-pressure", _case("live-pressure-40-46-68", usable))
    rt = session.rt
    result = ScenarioResult(
        "live-scheduler-pressure", "deferred, then refused, with the shortfall computed", False
    )
    result.runs.append(session.done())
    counts = session.buffer.counts()
    result.summary = {
        "first_outcome": first.value,
        "final_phase": rt.requests["active"].phase.value,
        "materialized_leading_blocks": session.events("resident_claim_materialized")[0]["leading_blocks"],
        "deferred_events": counts["active_request_deferred"],
        "refused_events": counts["active_request_refused"],
        "capacity_proof": _proof_of(_refusal(session)),
        "seed_reported_shortfall": 19,
        "arbiter": rt.arbiter_log,
    }
    return result


# ---------------------------------------------------------------------- offload and two-key


def offload_restore(usable: int | None) -> ScenarioResult:
    """Seed 000 paths A and B: restore before reuse, and a claim-scoped restoration failure."""
    session = _Session("offload-restore", _pool(usable, 80), POLICIES["offloadable"])
    rt = session.rt
    rt.submit_claim(ClaimSpec("claim:offload", RESIDENT, M.offloadable, 60, 60))
    session.prefill("resident-prefill", RESIDENT, 60)
    active = rt.run_request(RequestSpec("active", ACTIVE, 70))
    evicted_while_offloaded = _removed_for(session, "claim:offload", "resident_claim_offloaded")
    rt.run_request(RequestSpec("reuse-a", RESIDENT, 60, reuse_claim="claim:offload"))
    path_a = session.events("request_reused")[-1]
    restored_blocks = rt.stats.host_restored_blocks
    rt.offload("claim:offload")
    rt.inject_fault(FaultKind.restore_failure, "claim:offload")
    path_b_outcome = rt.run_request(RequestSpec("reuse-b", RESIDENT, 60, reuse_claim="claim:offload"))
    failure = session.events("resident_claim_restoration_failed")[0]
    refusal = _refusal(session)
    result = ScenarioResult(
        "offload-restore", "restore before reuse (path A) and restoration failure (path B)", False
    )
    result.runs.append(session.done())
    result.summary = {
        "active_outcome": active.value,
        "claim_blocks_evicted_while_offloaded": evicted_while_offloaded,
        "path_a": {
            "restored_blocks_from_host": restored_blocks,
            "reuse_cached_blocks": path_a["cached_blocks"],
            "predicate_satisfied": path_a["predicate_satisfied"],
        },
        "path_b": {
            "request_outcome": path_b_outcome.value,
            "restoration_outcome": failure["outcome"],
            "refusal_reason": refusal["reason"] if refusal else None,
            "refusal_blocking_claim_ids": refusal["blocking_claim_ids"] if refusal else None,
        },
    }
    return result


def hybrid_two_key_resume(usable: int | None) -> ScenarioResult:
    """Seed 002: checkpoint payload/value hashes; an in-place corruption keeps the payload hash."""
    session = _Session("hybrid-two-key-resume", _pool(usable, 64), POLICIES["offloadable"])
    rt = session.rt
    claim_id = "claim:hybrid"
    rt.submit_claim(ClaimSpec(claim_id, "hybrid-session", M.offloadable, 16, 16, two_key=True))
    session.prefill("turn-1", "hybrid-session", 16)
    recorded = session.events("resident_claim_materialized")[0]["checkpoint"]
    rt.offload(claim_id)
    rt.run_request(RequestSpec("turn-2", "hybrid-session", 20, reuse_claim=claim_id))
    rt.offload(claim_id)
    rt.inject_fault(FaultKind.checkpoint_in_place_mutation, claim_id)
    turn_3 = rt.run_request(RequestSpec("turn-3", "hybrid-session", 24, reuse_claim=claim_id))
    restores = session.events("resident_claim_checkpoint_restored")
    reuses = session.events("request_reused")
    result = ScenarioResult(
        "hybrid-two-key-resume", "payload equality is not state identity (seed 002)", False
    )
    result.runs.append(session.done())
    after_corruption = restores[1]
    result.summary = {
        "recorded_checkpoint": recorded,
        "turn_2": {
            "value_hash_matches": restores[0]["value_hash"] == recorded["value_hash"],
            "predicate_satisfied": reuses[0]["predicate_satisfied"],
        },
        "turn_3": {
            "payload_hash_matches": after_corruption["payload_hash"] == recorded["payload_hash"],
            "value_hash_matches": after_corruption["value_hash"] == recorded["value_hash"],
            "restoration_failed": [e["outcome"] for e in session.events("resident_claim_restoration_failed")],
            "request_outcome": turn_3.value,
            "satisfied_reuses": sum(
                1 for e in reuses if e["request_id"] == "turn-3" and e["predicate_satisfied"]
            ),
        },
        "claim_phase": rt.claims[claim_id].phase.value,
    }
    return result


# ---------------------------------------------------------------------- Continuum TTL pinning

JOBS, TURNS, JOBS_PER_STEP, TOOL_GAP, TTL = 64, 6, 8, 2, 6
CONTINUUM_POOL = 540
"""Seed 003 8.6 scaled by 1/10: 5,402 blocks -> 540; 64 concurrent agent jobs."""


def _context_blocks(turn: int) -> int:
    """A job's context grows each turn (seed 003 4.2: 5 -> 9 -> 18 -> 25 -> 32 blocks)."""
    return 6 + 5 * turn


def continuum_ttl_pinning(usable: int | None) -> ScenarioResult:
    if usable is not None:
        raise _fixed_pool("continuum-ttl-pinning")
    result = ScenarioResult(
        "continuum-ttl-pinning",
        "64 agent jobs pinning between turns: stock TTL pins vs claims (seed 003 8.6)",
        False,
    )
    stock = _Session("continuum-stock", CONTINUUM_POOL, _policy("continuum_ttl_pin", ttl_pin_steps=TTL))
    contract = _Session(
        "continuum-claims",
        CONTINUUM_POOL,
        _policy("continuum_as_claims", protected_budget_blocks=CONTINUUM_POOL // 2),
    )
    result.summary = {
        "usable_blocks": CONTINUUM_POOL,
        "jobs": JOBS,
        "turns_per_job": TURNS,
        "stock_ttl_pin": _agent_jobs(stock, claims=False),
        "contract_claims": _agent_jobs(contract, claims=True),
    }
    result.runs += [stock.done(), contract.done()]
    return result


def _agent_jobs(session: _Session, *, claims: bool, horizon: int = 400) -> dict[str, Any]:
    """Drive 64 jobs of `TURNS` turns: each turn runs one step, then a tool call of `TOOL_GAP`
    steps. Stock: the scheduler pins a finished turn's blocks for `TTL` steps. Contract: the
    job submits an expiring claim over its context instead, and releases it when it resumes."""
    rt = session.rt
    arrivals: dict[int, list[tuple[int, int, int]]] = {}
    for job in range(JOBS):
        arrivals.setdefault(job // JOBS_PER_STEP, []).append((job, 0, 0))
    running: dict[str, tuple[int, int]] = {}
    waiting: dict[str, tuple[int, int]] = {}
    held_claim: dict[int, str] = {}
    lost_context = completed_turns = completed_jobs = retries = idle_stalls = 0
    pinned_peak = 0
    for now in range(horizon):
        for request_id, (job, turn) in list(running.items()):
            del running[request_id]
            rt.finish_request(request_id)
            completed_turns += 1
            if turn == TURNS - 1:
                completed_jobs += 1
                continue
            if claims:
                claim_id = f"claim-job{job}-t{turn}"
                context = _context_blocks(turn)
                plan = rt.submit_claim(
                    ClaimSpec(
                        claim_id,
                        f"job{job}",
                        M.expiring,
                        context,
                        context,
                        owner_scope=f"job{job}",
                        duration_steps=TTL,
                    )
                )
                if plan.accepted:
                    held_claim[job] = claim_id
            arrivals.setdefault(now + TOOL_GAP, []).append((job, turn + 1, retries))
        for job, turn, _ in arrivals.pop(now, []):
            retries += 1
            request_id = f"job{job}-t{turn}-{retries}"
            reuse = held_claim.pop(job, None)
            spec = RequestSpec(
                request_id,
                f"job{job}",
                _context_blocks(turn),
                reuse_claim=reuse,
                job_id=f"job{job}",
                last_turn=turn == TURNS - 1,
            )
            outcome = rt.submit_request(spec)
            if outcome is RequestOutcome.refused:
                arrivals.setdefault(now + 1, []).append((job, turn, retries))
                if reuse is not None and rt.allows(reuse, Event.release):
                    rt.release(reuse, "job retries later")
            elif outcome is RequestOutcome.admitted:
                running[request_id] = (job, turn)
                lost_context += _lost(rt, request_id, turn)
                _release_resumed(rt, reuse)
            else:
                waiting[request_id] = (job, turn)
        rt.tick()
        for request_id, (job, turn) in list(waiting.items()):
            record = rt.requests[request_id]
            if record.outcome is RequestOutcome.admitted:
                del waiting[request_id]
                running[request_id] = (job, turn)
                lost_context += _lost(rt, request_id, turn)
                _release_resumed(rt, record.spec.reuse_claim)
            elif record.outcome is RequestOutcome.refused:
                del waiting[request_id]
                arrivals.setdefault(now + 1, []).append((job, turn, retries))
        pinned_peak = max(pinned_peak, rt.pool.census().pinned)
        idle_stalls += bool(waiting) and not running
        if completed_jobs == JOBS:
            break
    counts = session.buffer.counts()
    return {
        "jobs_completed": completed_jobs,
        "turns_completed": completed_turns,
        "steps_run": rt.step,
        "peak_pinned_blocks": pinned_peak,
        "peak_pinned_fraction": round(pinned_peak / rt.pool.usable, 3),
        "steps_nothing_ran_while_requests_waited": idle_stalls,
        "unattributed_waiting_request_steps": rt.stats.waiting_request_steps,
        "requests_that_waited_unattributed": len(rt.stats.requests_that_waited),
        "lost_context_blocks_recomputed": lost_context,
        "ttl_pins_expired": rt.stats.ttl_pins_expired,
        "claims_accepted": counts["resident_claim_accepted"],
        "claims_rejected": counts["resident_claim_rejected"],
        "claims_expired": counts["resident_claim_expired"],
        "attributed_deferrals": counts["active_request_deferred"],
        "attributed_refusals": counts["active_request_refused"],
        "claim_harm_events": counts["resident_claim_harmed"],
    }


def _lost(rt: MicroRuntime, request_id: str, turn: int) -> int:
    """Context from the previous turn that the cache no longer had (recomputed work)."""
    if turn == 0:
        return 0
    return max(0, _context_blocks(turn - 1) - rt.requests[request_id].hit_blocks)


def _release_resumed(rt: MicroRuntime, claim_id: str | None) -> None:
    if claim_id is not None and rt.allows(claim_id, Event.release):
        rt.release(claim_id, "job resumed")


# ---------------------------------------------------------------------- negative controls


class _SilentHarmRuntime(MicroRuntime):
    """Broken on purpose: it loses claim blocks without reporting harm or loss."""

    def _lose(self, claim: MicroClaim, position: int) -> None:
        claim.slots[position] = None
        claim.leading_blocks = min(claim.leading_blocks, position)


class _NullBlockShortfallRuntime(MicroRuntime):
    """Broken on purpose: it computes the shortfall against usable - 1 (counting vLLM's null
    block twice), the arithmetic of the seed's live trace (86 - 67 = 19)."""

    def _proof_fields(self, proof: CapacityProof) -> dict[str, int]:
        fields = proof.fields()
        fields["capacity_shortfall_blocks"] = max(
            0, proof.resident_plus_active_blocks - (proof.usable_blocks - 1)
        )
        return fields


class _FallbackRecomputeRuntime(MicroRuntime):
    """Broken on purpose: after a failed restore it recomputes the prefix and reports the reuse
    as satisfied (it also ignores its own lifecycle, as such a runtime would)."""

    def _advance(self, claim: MicroClaim, event: Event) -> None:
        try:
            super()._advance(claim, event)
        except LifecycleBug:
            pass

    def _restoration_failed(self, record: Any, claim: MicroClaim, outcome: Any) -> bool:
        spec, claim_id = record.spec, claim.spec.claim_id
        self._emit(
            "resident_claim_restoration_failed",
            {"claim_id": claim_id, "request_id": spec.request_id, "outcome": outcome.value},
        )
        self._advance(claim, Event.fail_restoration_refusal)
        record.hit_blocks = claim.required_blocks
        self.stats.recomputed_blocks += claim.required_blocks
        claim.phase = Phase.materialized
        return True


def control_silent_harm(usable: int | None) -> ScenarioResult:
    case = _case("hard-60-70-80", usable)
    session, outcome = _resident_active(
        "control-silent-harm", case, POLICIES["soft_priority"], _SilentHarmRuntime
    )
    result = ScenarioResult(
        "control-silent-harm", "a hard claim lowered to priority loses blocks and reports nothing", True
    )
    result.runs.append(session.done(check_end=False))
    result.summary = _resident_numbers(session, outcome, case)
    return result


def control_null_block_shortfall(usable: int | None) -> ScenarioResult:
    policy = _policy(
        "hard_protected", conflict_actions=(ConflictAction.defer, ConflictAction.refuse), max_deferrals=1
    )
    session = _Session("control-null-block-shortfall", _pool(usable, 68), policy, _NullBlockShortfallRuntime)
    rt = session.rt
    rt.submit_claim(ClaimSpec("claim:live-resident", "live-resident", M.hard_protected, 40, 40))
    session.prefill("resident-prefill", "live-resident", 40)
    rt.submit_request(RequestSpec("active", "live-active", 46))
    rt.tick()
    result = ScenarioResult(
        "control-null-block-shortfall", "the seed's 40 + 46 = 86 > 68 with shortfall 19", True
    )
    result.runs.append(session.done())
    result.summary = {"capacity_proof": _proof_of(_refusal(session))}
    return result


def control_fallback_recompute(usable: int | None) -> ScenarioResult:
    session = _Session(
        "control-fallback-recompute", _pool(usable, 80), POLICIES["offloadable"], _FallbackRecomputeRuntime
    )
    rt = session.rt
    rt.submit_claim(ClaimSpec("claim:offload", RESIDENT, M.offloadable, 60, 60))
    session.prefill("resident-prefill", RESIDENT, 60)
    rt.offload("claim:offload")
    rt.inject_fault(FaultKind.restore_failure, "claim:offload")
    rt.run_request(RequestSpec("reuse", RESIDENT, 60, reuse_claim="claim:offload"))
    result = ScenarioResult(
        "control-fallback-recompute", "a failed restore recomputed and counted as a satisfied reuse", True
    )
    result.runs.append(session.done(check_end=False))
    result.summary = {"reuse": session.events("request_reused")}
    return result


# ---------------------------------------------------------------------- the seed cases


def _offload_path(label: str, case: SeedCase) -> _Session:
    """Seed 000 paths A and B: an offloadable claim, computed; the pressure request offloads
    it; a reuser restores it (path A) or its restoration fails (path B)."""
    session = _Session(label, case.usable_blocks, POLICIES["offloadable"])
    rt, blocks = session.rt, case.resident_blocks
    rt.submit_claim(ClaimSpec(case.claim_id, RESIDENT, M.offloadable, blocks, blocks))
    session.prefill("resident-prefill", RESIDENT, blocks)
    rt.run_request(RequestSpec("active", ACTIVE, case.active_blocks))
    if case.restore_fails:
        rt.inject_fault(FaultKind.restore_failure, case.claim_id)
    rt.run_request(RequestSpec("reuse", RESIDENT, blocks, reuse_claim=case.claim_id))
    return session


def seed_case_numbers(case: SeedCase) -> dict[str, Any]:
    """Run seed case `case` on a fresh MicroRuntime; the `seed_cases.NUMBERS` it measured."""
    label = f"seed-case/{case.name}"
    if case.mode == M.offloadable:
        session = _offload_path(label, case)
        return trace_numbers(case, session.done().events, reuser="reuse")
    if case.mode == M.expiring:
        session, _ = _expiring(label, case)
    elif case.defer:
        session, _ = _deferring(label, case)
    else:
        session, _ = _resident_active(label, case, POLICIES[case.mode or "native_lru"])
    surviving, leading = session.rt.residency(RESIDENT, case.resident_blocks)
    return trace_numbers(case, session.done().events, active="active") | {
        "resident_blocks_evicted": case.resident_blocks - surviving,
        "resident_leading_blocks_after": leading,
    }


# ---------------------------------------------------------------------- registry


def _fixed_pool(name: str) -> InputError:
    return InputError(
        [Problem("scenario --usable-blocks", f"scenario {name} runs fixed pools; drop the option")]
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "native-60-70-80", "native LRU: 70 active blocks evict 50 of 60 residents", native_60_70_80, 80
        ),
        Scenario(
            "hard-claim-60-70-80", "hard claim: refusal with 60 + 70 = 130 > 80", hard_claim_60_70_80, 80
        ),
        Scenario(
            "soft-priority-60-70-80", "soft priority: residents lost, not harmed", soft_priority_60_70_80, 80
        ),
        Scenario("arbiter-actions", "the conflict actions of seed 001 table 5 in order", arbiter_actions, 80),
        Scenario("capacity-sweep", "60 + 70 across 80..150 usable blocks", capacity_sweep),
        Scenario("chunked-prefill", "20/20/20/10 chunks accumulate 70 live blocks", chunked_prefill, 80),
        Scenario("materialization-q1", "fair-share fragmentation: blocks vs value", materialization_q1),
        Scenario("write-no-admit", "no-admit: bulky repeat 1120 -> 0, residents still die", write_no_admit),
        Scenario(
            "demote-before-loss", "demotion, then 50 post-release losses, 0 harm", demote_before_loss, 80
        ),
        Scenario("expire-before-loss", "expiry, then 50 post-expiry losses, 0 harm", expire_before_loss, 80),
        Scenario(
            "materialization-failure",
            "59 surviving blocks, 0 leading, 60 required",
            materialization_failure,
            80,
        ),
        Scenario("live-scheduler-pressure", "40 + 46 = 86 against 68 usable", live_scheduler_pressure, 68),
        Scenario("offload-restore", "restore before reuse; restoration failure", offload_restore, 80),
        Scenario("hybrid-two-key-resume", "two-key resume; in-place corruption", hybrid_two_key_resume, 64),
        Scenario("continuum-ttl-pinning", "64 agent jobs pinning: stock vs claims", continuum_ttl_pinning),
        Scenario("control-silent-harm", "negative control: unreported harm", control_silent_harm, 80),
        Scenario(
            "control-null-block-shortfall", "negative control: shortfall 19", control_null_block_shortfall, 68
        ),
        Scenario(
            "control-fallback-recompute",
            "negative control: recompute counted as restore",
            control_fallback_recompute,
            80,
        ),
    )
}
"""Every scenario, by name (the order `kvclaims scenario --list` prints)."""


def run_scenario(name: str, *, usable_blocks: int | None = None) -> ScenarioResult:
    """Run one named scenario; an unknown name or a bad pool is an `InputError`."""
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise InputError(
            [Problem("scenario", f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}", field="name")]
        )
    return scenario.run(usable_blocks)
