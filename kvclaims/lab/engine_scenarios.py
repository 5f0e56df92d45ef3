"""Engine-lane scenarios: seed 000's paths A-C, its controls, and issue 6's cases on `vllm.LLM`.

Every scenario runs on an `EngineLane` (one real vLLM engine with the binding, its connector and
the tiny model), writes one kvclaims trace v1 and returns numbers measured from vLLM's outputs
and from the trace. The pool is 23 usable blocks of 32 tokens, the CPU tier 32 chunks; a
claimed prefix is 4 (paths) or 8 (capacity cases) blocks, and the "pressure" request's 22
prompt blocks plus one decode block take the whole pool, evicting every cached block.

Expectations (checked by refinement in the tests, `kvclaims vllm scenario` and `repeat`):
- positive scenarios must be **accepted**;
- `control-*` scenarios are negative controls: honest runs of a mechanism that must not count
  as a claim outcome. Each is either **rejected** with a named rule, or accepted while its
  evidence export supplies no restoration outcome (RF) and no restorability (R) for the claim
  the control is about (`Expectation.not_evidenced_for`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvclaims.lab import continuum_engine
from kvclaims.lab.engine_lane import engine_prompt
from kvclaims.lab.scheduler_scenarios import Expectation, Scenario, ScenarioResult, read_events
from kvclaims.lab.seed_cases import Lane, SeedCase, on_lane, recorded_proof, trace_numbers
from kvclaims.vllm_binding.faults import LoadFaultPlan

if TYPE_CHECKING:
    from kvclaims.lab.engine_lane import EngineLane, ScenarioRun

BLOCK = 32
PATH_A = on_lane(Lane.engine, "path-a-restore")
HARD = on_lane(Lane.engine, "hard-refusal")
CLAIM_BLOCKS = PATH_A.resident_blocks
CAPACITY_CLAIM_BLOCKS = HARD.resident_blocks
PRESSURE_BLOCKS = PATH_A.active_blocks - 1
"""The pressure request's prompt blocks: with its decode block it needs the seed case's live blocks."""
ACTIVE_BLOCKS = HARD.active_blocks - 1
"""The capacity cases' active prompt blocks (plus one decode block: the case's live blocks)."""
TAIL_TOKENS = 5


ENGINE_SCENARIOS: dict[str, Scenario] = {}

PATH_GATES: dict[str, str] = {
    "path-a-restore": "restore before reuse (path A)",
    "path-b-restore-failure": "same-claim restoration failure -> fail-closed refusal (path B)",
    "path-c-multi-claim": "multi-claim attribution (path C)",
}
"""The seed's gates, by the scenario that exercises each."""


def _scenario(
    name: str, summary: str, expect: Expectation | None = None
) -> Callable[[Callable[[EngineLane, Path], dict[str, Any]]], Callable[[EngineLane, Path], dict[str, Any]]]:
    def register(
        run: Callable[[EngineLane, Path], dict[str, Any]],
    ) -> Callable[[EngineLane, Path], dict[str, Any]]:
        ENGINE_SCENARIOS[name] = Scenario(name, summary, run, expect or Expectation())
        return run

    return register


def engine_scenario_names() -> list[str]:
    return list(ENGINE_SCENARIOS)


# -- building blocks --------------------------------------------------------------------------


def claim(claim_id: str, mode: str, blocks: int, **extra: Any) -> dict[str, Any]:
    return {
        "kvclaims_claim_id": claim_id,
        "kvclaims_mode": mode,
        "kvclaims_footprint_blocks": blocks,
        **{f"kvclaims_{k}": v for k, v in extra.items()},
    }


def attach(claim_id: str) -> dict[str, Any]:
    return {"kvclaims_claim_id": claim_id}


def prefix(tag: str, blocks: int) -> list[int]:
    return engine_prompt(tag, blocks * BLOCK)


def _source(lane: EngineLane, name: str, tag: str, blocks: int, extra: dict[str, Any] | None) -> list[int]:
    """Compute (and cache) `blocks` blocks of prefix `tag` with a request; returns the prefix."""
    tokens = prefix(tag, blocks)
    lane.submit(name, tokens + engine_prompt(f"{name}:tail", TAIL_TOKENS), claim=extra)
    return tokens


def _pressure(lane: EngineLane, name: str = "pressure") -> None:
    """A request whose 22 prompt blocks and one decode block take the whole 23-block pool."""
    lane.submit(name, engine_prompt(name, PRESSURE_BLOCKS * BLOCK))


def _events(run: ScenarioRun) -> list[Any]:
    return read_events(run.trace_path)


def _of(events: list[Any], kind: str, **match: Any) -> list[Any]:
    return [e for e in events if e.event == kind and all(getattr(e, k, None) == v for k, v in match.items())]


def _rid(run: ScenarioRun, name: str) -> str:
    return run.internal_ids[name]


def _failure_latencies(events: list[Any], start: str = "failure_reported_mono_ns") -> list[int]:
    """ns from each failed load's report into vLLM's invalid-KV-load path (worker side,
    monotonic clock) to its refusal event; with `start="scheduler_received_mono_ns"`, from the
    moment the scheduler received that report (the binding's own share)."""
    out = []
    for event in _of(events, "active_request_refused", reason="restoration_failed"):
        extra = event.model_extra or {}
        if "mono_ns" in extra and start in extra:
            out.append(int(extra["mono_ns"]) - int(extra[start]))
    return out


def _restoration(run: ScenarioRun, events: list[Any], name: str, claim_id: str) -> dict[str, Any]:
    """The claim-side story of one reuse request."""
    rid = _rid(run, name)
    done = run.finished.get(name)
    reused = _of(events, "request_reused", request_id=rid, claim_id=claim_id)
    refused = _of(events, "active_request_refused", request_id=rid)
    return {
        f"{name}_restore_required": bool(_of(events, "resident_claim_restore_required", request_id=rid)),
        f"{name}_restored": bool(_of(events, "resident_claim_restored", request_id=rid, claim_id=claim_id)),
        f"{name}_restoration_failed": bool(
            _of(events, "resident_claim_restoration_failed", request_id=rid, claim_id=claim_id)
        ),
        f"{name}_refused_blocking": list(refused[0].blocking_claim_ids) if refused else None,
        f"{name}_reuse_cached_blocks": reused[0].cached_blocks if reused else None,
        f"{name}_reuse_satisfied": reused[0].predicate_satisfied if reused else None,
        f"{name}_finish_reason": done.finish_reason if done else None,
        f"{name}_stop_reason": done.stop_reason if done else None,
        f"{name}_num_cached_tokens": done.num_cached_tokens if done else None,
    }


def _seed_case(case: SeedCase, run: ScenarioRun, events: list[Any], **names: str) -> dict[str, Any]:
    """`seed_cases.NUMBERS` for `case` from this run's trace; `names` maps `active` / `reuser`
    to the scenario's request names (the trace carries vLLM's internal ids)."""
    dumped = [e.model_dump(mode="json") for e in events]
    return trace_numbers(case, dumped, **{role: _rid(run, name) for role, name in names.items()})


def _counts(events: list[Any]) -> dict[str, int]:
    kinds = (
        "resident_claim_accepted",
        "resident_claim_offloaded",
        "resident_claim_restore_required",
        "resident_claim_restored",
        "resident_claim_restoration_failed",
        "resident_claim_harmed",
        "fault_injected",
    )
    return {kind.removeprefix("resident_claim_"): len(_of(events, kind)) for kind in kinds}


# -- paths A, B, C ------------------------------------------------------------------------------


def _offload_restore(
    lane: EngineLane,
    trace: Path,
    *,
    faults: LoadFaultPlan | None = None,
    policy: str = "fail",
    binding: dict[str, Any] | None = None,
    claim_mode: str | None = "offloadable",
    reuse_claim: bool = True,
    capture: bool = False,
) -> tuple[ScenarioRun, list[Any], list[int]]:
    """Claim A over a 4-block prefix, computed; pressure evicts it from the device (offloaded
    to the CPU tier); a reuser of the same prefix loads it back."""
    kv_events = trace.with_suffix(".kvevents") if capture and lane.capture is not None else None
    lane.begin(trace, faults=faults, kv_load_failure_policy=policy, binding=binding, kv_events_path=kv_events)  # type: ignore[arg-type]
    extra = claim("claim:A", claim_mode, CLAIM_BLOCKS) if claim_mode else None
    tokens = _source(lane, "source", "A", CLAIM_BLOCKS, extra)
    _pressure(lane)
    lane.submit(
        "reuse", tokens + engine_prompt("reuse:tail", 37), claim=attach("claim:A") if reuse_claim else None
    )
    run = lane.end()
    if kv_events is not None:
        _write_registry(lane, run, [("claim:A", tokens)])
    return run, _events(run), tokens


def _write_registry(lane: EngineLane, run: ScenarioRun, claims: list[tuple[str, list[int]]]) -> None:
    from kvclaims.lab.kv_events import RegisteredPrefix, write_registry
    from kvclaims.lab.tiny_model import SERVED_MODEL_NAME

    assert run.kv_events_path is not None and lane.capture is not None
    write_registry(
        run.kv_events_path.with_suffix(".registry.yaml"),
        claims=[RegisteredPrefix(c, "default", t, CLAIM_BLOCKS, CLAIM_BLOCKS) for c, t in claims],
        block_size=BLOCK,
        model_id=SERVED_MODEL_NAME,
        registered_before_seq=lane.capture.first_seq or 0,
        request_ids=list(run.internal_ids.values()),
    )


@_scenario("path-a-restore", "offloadable claim offloaded to the CPU tier, restored before a satisfied reuse")
def path_a(lane: EngineLane, trace: Path) -> dict[str, Any]:
    run, events, _ = _offload_restore(lane, trace, capture=True)
    return {
        **_counts(events),
        **_restoration(run, events, "reuse", "claim:A"),
        "engine_steps": run.steps,
        "seed_case": _seed_case(PATH_A, run, events, reuser="reuse"),
    }


@_scenario(
    "path-b-restore-failure",
    "the claim's CPU->GPU restoration fails: claim-scoped outcome, then a refusal naming it, then the finish",
)
def path_b(lane: EngineLane, trace: Path) -> dict[str, Any]:
    faults = LoadFaultPlan(enabled=True, target_claim="claim:A")
    run, events, _ = _offload_restore(lane, trace, faults=faults)
    return {
        **_counts(events),
        **_restoration(run, events, "reuse", "claim:A"),
        "failure_to_outcome_ns": _failure_latencies(events),
        "scheduler_to_outcome_ns": _failure_latencies(events, "scheduler_received_mono_ns"),
        "engine_steps": run.steps,
        "seed_case": _seed_case(on_lane(Lane.engine, "path-b-restore-failure"), run, events, reuser="reuse"),
    }


@_scenario(
    "path-c-multi-claim",
    "two offloaded claims; only the target's restoration fails and only it is named; the other restores",
)
def path_c(lane: EngineLane, trace: Path) -> dict[str, Any]:
    lane.begin(trace, faults=LoadFaultPlan(enabled=True, target_claim="claim:A"))
    tokens_a = _source(lane, "source-a", "A", CLAIM_BLOCKS, claim("claim:A", "offloadable", CLAIM_BLOCKS))
    tokens_b = _source(lane, "source-b", "B", CLAIM_BLOCKS, claim("claim:B", "offloadable", CLAIM_BLOCKS))
    _pressure(lane)
    lane.add("reuse-a", tokens_a + engine_prompt("reuse-a:tail", 37), claim=attach("claim:A"))
    lane.add("reuse-b", tokens_b + engine_prompt("reuse-b:tail", 37), claim=attach("claim:B"))
    lane.drain()
    run = lane.end()
    events = _events(run)
    return {
        **_counts(events),
        **_restoration(run, events, "reuse-a", "claim:A"),
        **_restoration(run, events, "reuse-b", "claim:B"),
        "failure_to_outcome_ns": _failure_latencies(events),
        "scheduler_to_outcome_ns": _failure_latencies(events, "scheduler_received_mono_ns"),
    }


@_scenario(
    "recompute-transient-fault",
    "kv_load_failure_policy=recompute: the first load fails, vLLM retries, the claim is restored",
)
def recompute_transient(lane: EngineLane, trace: Path) -> dict[str, Any]:
    faults = LoadFaultPlan(enabled=True, target_claim="claim:A", max_failures=1)
    run, events, _ = _offload_restore(lane, trace, faults=faults, policy="recompute")
    return {**_counts(events), **_restoration(run, events, "reuse", "claim:A"), "engine_steps": run.steps}


@_scenario(
    "recompute-persistent-fault",
    "policy recompute, persistent CPU-tier fault: capped at 3 attempts, then refused (no livelock)",
)
def recompute_persistent(lane: EngineLane, trace: Path) -> dict[str, Any]:
    faults = LoadFaultPlan(enabled=True, target_claim="claim:A")
    run, events, _ = _offload_restore(lane, trace, faults=faults, policy="recompute")
    failed = _of(events, "resident_claim_restoration_failed")
    return {
        **_counts(events),
        **_restoration(run, events, "reuse", "claim:A"),
        "attempts": (failed[0].model_extra or {}).get("attempts") if failed else None,
        "failure_to_outcome_ns": _failure_latencies(events),
        "scheduler_to_outcome_ns": _failure_latencies(events, "scheduler_received_mono_ns"),
        "engine_steps": run.steps,
    }


@_scenario(
    "restore-logits-match",
    "a prompt computed from scratch, then with its prefix restored from the CPU tier: same tokens, logprobs",
)
def restore_logits(lane: EngineLane, trace: Path) -> dict[str, Any]:
    lane.begin(trace)
    tokens = prefix("L", CLAIM_BLOCKS) + engine_prompt("L:tail", 37)
    original = lane.submit(
        "original", tokens, max_tokens=4, claim=claim("claim:L", "offloadable", CLAIM_BLOCKS)
    )
    _pressure(lane)
    restored = lane.submit("restored", tokens, max_tokens=4, claim=attach("claim:L"))
    run = lane.end()
    events = _events(run)
    diffs = [abs(a - b) for a, b in zip(original.logprobs, restored.logprobs, strict=False)]
    return {
        **_counts(events),
        **_restoration(run, events, "restored", "claim:L"),
        "original_tokens": original.token_ids,
        "restored_tokens": restored.token_ids,
        "original_logprobs": original.logprobs,
        "restored_logprobs": restored.logprobs,
        "max_abs_logprob_diff": max(diffs) if diffs else None,
        "restored_num_cached_tokens": restored.num_cached_tokens,
    }


# -- issue 6's capacity cases on the engine -----------------------------------------------------


def _capacity(
    lane: EngineLane, trace: Path, case: SeedCase, **claim_extra: Any
) -> tuple[ScenarioRun, list[Any], list[int]]:
    """The seed case's claim over its resident prefix, computed; then its active request (its
    live blocks less the decode block as prompt); a hard claim's prefix is then reused."""
    assert case.mode is not None and case.claim_id is not None
    lane.begin(trace)
    extra = claim(case.claim_id, case.mode, case.resident_blocks, **claim_extra)
    tokens = _source(lane, "resident", "resident", case.resident_blocks, extra)
    lane.submit("active", engine_prompt("active", (case.active_blocks - 1) * BLOCK))
    if case.mode == "hard_protected":
        lane.submit("reuse", tokens + engine_prompt("reuse:tail", 7), claim=attach(case.claim_id))
    run = lane.end()
    return run, _events(run), tokens


@_scenario(
    "hard-refusal", "hard claim over 8 blocks; a 20-block prefill is refused (8 + 21 > 23) with the proof"
)
def hard_refusal(lane: EngineLane, trace: Path) -> dict[str, Any]:
    run, events, _ = _capacity(lane, trace, HARD)
    refused = _of(events, "active_request_refused", request_id=_rid(run, "active"))
    reused = _of(events, "request_reused", request_id=_rid(run, "reuse"))
    done = run.finished["active"]
    return {
        **_counts(events),
        "active_refused": bool(refused),
        **(recorded_proof(refused[0]) if refused else {}),
        "active_finish_reason": done.finish_reason,
        "active_stop_reason": done.stop_reason,
        "reuse_cached_blocks": reused[0].cached_blocks if reused else None,
        "reuse_satisfied": reused[0].predicate_satisfied if reused else None,
        "reuse_num_cached_tokens": run.finished["reuse"].num_cached_tokens,
        "seed_case": _seed_case(HARD, run, events, active="active"),
    }


@_scenario(
    "demote-before-loss", "demotable claim demoted to admit the 20-block prefill; its loss is post-release"
)
def demote_before_loss(lane: EngineLane, trace: Path) -> dict[str, Any]:
    case = on_lane(Lane.engine, "demote-before-loss")
    run, events, _ = _capacity(lane, trace, case)
    demoted = _of(events, "resident_claim_demoted")
    removed = _of(events, "block_removed", claim_id=case.claim_id)
    return {
        **_counts(events),
        "claim_demoted": bool(demoted),
        "demoted_before_first_loss": bool(demoted) and bool(removed) and demoted[0].seq < removed[0].seq,
        "claim_blocks_lost_after_demotion": len(removed),
        "active_finish_reason": run.finished["active"].finish_reason,
        "seed_case": _seed_case(case, run, events, active="active"),
    }


EXPIRY_STEPS = 8
"""How long the expiring case's claim lives here (engine steps, this lane's time unit)."""


@_scenario(
    "expire-before-loss",
    "expiring claim (8 steps) defers the prefill until it expires; its loss is post-expiry",
)
def expire_before_loss(lane: EngineLane, trace: Path) -> dict[str, Any]:
    case = on_lane(Lane.engine, "expire-before-loss")
    run, events, _ = _capacity(lane, trace, case, duration_steps=EXPIRY_STEPS)
    expired = _of(events, "resident_claim_expired")
    deferred = _of(events, "active_request_deferred", request_id=_rid(run, "active"))
    admitted = _of(events, "active_request_admitted", request_id=_rid(run, "active"))
    removed = _of(events, "block_removed", claim_id=case.claim_id)
    return {
        **_counts(events),
        "claim_expired_at_step": (expired[0].model_extra or {}).get("engine_step") if expired else None,
        "active_deferred": bool(deferred),
        "active_admitted_at_step": (admitted[0].model_extra or {}).get("engine_step") if admitted else None,
        "expired_before_first_loss": bool(expired) and bool(removed) and expired[0].seq < removed[0].seq,
        "claim_blocks_lost_after_expiry": len(removed),
        "active_finish_reason": run.finished["active"].finish_reason,
        "seed_case": _seed_case(case, run, events, active="active"),
    }


# -- the CPU tier under claims: harm when the host copy never existed; demotion under pressure ---


def _fill_cpu_tier(lane: EngineLane) -> None:
    """Two 16-block offloadable claims: their host copies hold all 32 CPU-tier chunks."""
    for tag in ("H1", "H2"):
        _source(lane, f"source-{tag}", tag, 16, claim(f"claim:{tag}", "offloadable", 16))


@_scenario(
    "offload-harm",
    "CPU tier full of claimed copies: a new claim's store is dropped, so its device loss is harm",
)
def offload_harm(lane: EngineLane, trace: Path) -> dict[str, Any]:
    lane.begin(trace)
    _fill_cpu_tier(lane)
    _source(lane, "source-V", "V", CLAIM_BLOCKS, claim("claim:V", "offloadable", CLAIM_BLOCKS))
    _pressure(lane)
    run = lane.end()
    events = _events(run)
    harmed = _of(events, "resident_claim_harmed")
    return {
        **_counts(events),
        "harmed": [e.claim_id for e in harmed],
        "offloaded": [e.claim_id for e in _of(events, "resident_claim_offloaded")],
        "harm_leading_blocks": harmed[0].leading_blocks if harmed else None,
        "harm_required_blocks": harmed[0].required_blocks if harmed else None,
    }


@_scenario(
    "cpu-tier-demote",
    "cpu_tier_pressure=demote: a new store needs room, the oldest claim is demoted before its host copy goes",
)
def cpu_tier_demote(lane: EngineLane, trace: Path) -> dict[str, Any]:
    lane.begin(trace, binding={"cpu_tier_pressure": "demote"})
    _fill_cpu_tier(lane)
    _source(lane, "source-V", "V", CLAIM_BLOCKS, claim("claim:V", "offloadable", CLAIM_BLOCKS))
    _pressure(lane)
    run = lane.end()
    events = _events(run)
    return {
        **_counts(events),
        "demoted": [e.claim_id for e in _of(events, "resident_claim_demoted")],
        "demotion_reasons": [e.reason for e in _of(events, "resident_claim_demoted")],
        "harmed": [e.claim_id for e in _of(events, "resident_claim_harmed")],
        "offloaded": [e.claim_id for e in _of(events, "resident_claim_offloaded")],
    }


# -- store faults: a failed store and a late worker -------------------------------------------


def _store_fault(lane: EngineLane, trace: Path, faults: LoadFaultPlan) -> dict[str, Any]:
    """Claim A over a 4-block prefix with `faults` on its stores; pressure evicts it."""
    lane.begin(trace, faults=faults)
    _source(lane, "source", "A", CLAIM_BLOCKS, claim("claim:A", "offloadable", CLAIM_BLOCKS))
    _pressure(lane)
    run = lane.end()
    events = _events(run)
    stored = _of(events, "block_stored", claim_id="claim:A", cache_level="cpu")
    offloaded = _of(events, "resident_claim_offloaded", claim_id="claim:A")
    return {
        **_counts(events),
        "harmed": [e.claim_id for e in _of(events, "resident_claim_harmed")],
        "offloaded": [e.claim_id for e in offloaded],
        "host_positions_stored": sorted(e.position for e in stored),
        "first_store_seq": min((e.seq for e in stored), default=None),
        "last_store_seq": max((e.seq for e in stored), default=None),
        "source_finished_seq": _of(events, "request_finished", request_id=_rid(run, "source"))[0].seq,
        "offloaded_seq": offloaded[0].seq if offloaded else None,
        "store_faults": [e.claim_id for e in _of(events, "fault_injected") if e.kind == "store_failure"],
    }


@_scenario(
    "store-failure",
    "the worker's store of the claim's host copy fails: no host copy is reported, the device loss is harm",
)
def store_failure(lane: EngineLane, trace: Path) -> dict[str, Any]:
    return _store_fault(lane, trace, LoadFaultPlan(enabled=True, target_claim="claim:A", stores=True))


@_scenario(
    "late-store",
    "the worker reports the claim's store 3 reports late: offloaded only after the store is confirmed",
)
def late_store(lane: EngineLane, trace: Path) -> dict[str, Any]:
    late = LoadFaultPlan(enabled=True, target_claim="claim:A", stores=True, late_by=3)
    return _store_fault(lane, trace, late)


# -- negative controls -------------------------------------------------------------------------


@_scenario(
    "control-wrong-claim-failure",
    "NEGATIVE CONTROL: failure injection targets claim B; claim A restores untouched (no outcome counted)",
    Expectation(not_evidenced_for=("claim:B",), no_failure_outcome=True),
)
def control_wrong_claim(lane: EngineLane, trace: Path) -> dict[str, Any]:
    lane.begin(trace, faults=LoadFaultPlan(enabled=True, target_claim="claim:B"))
    tokens_a = _source(lane, "source-a", "A", CLAIM_BLOCKS, claim("claim:A", "offloadable", CLAIM_BLOCKS))
    _source(lane, "source-b", "B", CLAIM_BLOCKS, claim("claim:B", "offloadable", CLAIM_BLOCKS))
    _pressure(lane)
    lane.submit("reuse-a", tokens_a + engine_prompt("reuse-a:tail", 37), claim=attach("claim:A"))
    run = lane.end()
    events = _events(run)
    return {
        **_counts(events),
        **_restoration(run, events, "reuse-a", "claim:A"),
        "loads_failed": lane.set_fault_plan(LoadFaultPlan()),
    }


@_scenario(
    "control-unclaimed-failure",
    "NEGATIVE CONTROL: an unclaimed load fails (separate switch): vLLM errors the request, no claim outcome",
    Expectation(not_evidenced_for=("claim:A",), no_failure_outcome=True),
)
def control_unclaimed(lane: EngineLane, trace: Path) -> dict[str, Any]:
    lane.begin(trace, faults=LoadFaultPlan(enabled=True, target_claim="claim:none", unclaimed=True))
    _source(lane, "source-a", "A", CLAIM_BLOCKS, claim("claim:A", "offloadable", CLAIM_BLOCKS))
    tokens_u = _source(lane, "source-u", "U", CLAIM_BLOCKS, None)
    _pressure(lane)
    done = lane.submit("reuse-u", tokens_u + engine_prompt("reuse-u:tail", 37))
    run = lane.end()
    events = _events(run)
    return {
        **_counts(events),
        "reuse_u_finish_reason": done.finish_reason,
        "loads_failed": lane.set_fault_plan(LoadFaultPlan()),
    }


@_scenario(
    "control-fallback-recompute",
    "NEGATIVE CONTROL: a failed restoration falls back to recompute with no claim outcome (must be rejected)",
    Expectation(outcome="rejected", rule="offload_order"),
)
def control_fallback(lane: EngineLane, trace: Path) -> dict[str, Any]:
    faults = LoadFaultPlan(enabled=True, target_claim="claim:A")
    binding = {"negative_control": "fallback_recompute"}
    run, events, _ = _offload_restore(lane, trace, faults=faults, policy="recompute", binding=binding)
    return {**_counts(events), **_restoration(run, events, "reuse", "claim:A")}


@_scenario(
    "control-offload-without-claim",
    "NEGATIVE CONTROL: an ordinary prefix offloaded and loaded back, no claim (bytes move, nothing counted)",
    Expectation(no_failure_outcome=True),
)
def control_without_claim(lane: EngineLane, trace: Path) -> dict[str, Any]:
    run, events, _ = _offload_restore(lane, trace, claim_mode=None, reuse_claim=False)
    return {**_counts(events), "reuse_num_cached_tokens": run.finished["reuse"].num_cached_tokens}


@_scenario(
    "control-generic-counters",
    "NEGATIVE CONTROL: only a generic load-failure counter is seen; blaming the reused claim is rejected",
    Expectation(outcome="rejected", rule="attribution"),
)
def control_generic(lane: EngineLane, trace: Path) -> dict[str, Any]:
    faults = LoadFaultPlan(enabled=True, target_claim="claim:A")
    binding = {"negative_control": "generic_counters"}
    run, events, _ = _offload_restore(lane, trace, faults=faults, binding=binding)
    return {**_counts(events), **_restoration(run, events, "reuse", "claim:A")}


# -- running and judging ----------------------------------------------------------------------

RESTORATION_OBLIGATIONS = ("offload_restorability", "restoration_failure_outcome")


def run_engine_scenario(lane: EngineLane, name: str, trace_path: Path) -> ScenarioResult:
    """Run one engine-lane scenario on `lane`, writing its trace to `trace_path`."""
    scenario = ENGINE_SCENARIOS.get(name)
    if scenario is None:
        raise KeyError(name)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    return ScenarioResult(name, trace_path, scenario.run(lane, trace_path))


def judge(
    scenario: Scenario, outcome: str, rule: str | None, evidence: list[tuple[str, list[str]]]
) -> str | None:
    """Why refinement's answer (`outcome`, `rule`, and the `(obligation, claim ids)` of the
    evidence an accepted trace exports) is not what the scenario expects; None when it is."""
    expect = scenario.expect
    if outcome != expect.outcome:
        return f"expected {expect.outcome}, refinement says {outcome}"
    if expect.rule is not None and rule != expect.rule:
        return f"expected rule {expect.rule}, refinement names {rule}"
    for obligation, claim_ids in evidence:
        if obligation not in RESTORATION_OBLIGATIONS:
            continue
        if expect.no_failure_outcome and obligation == "restoration_failure_outcome":
            return f"a control's trace evidences {obligation} for {claim_ids}"
        named = sorted(set(claim_ids) & set(expect.not_evidenced_for))
        if named:
            return f"a control's trace evidences {obligation} for {named}"
    return None


_scenario(continuum_engine.NAME, continuum_engine.SUMMARY)(continuum_engine.continuum_agent_turns)
