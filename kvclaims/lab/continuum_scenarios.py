"""Seed 003 (Continuum TTL pins) on vLLM's real scheduler: the compatibility mode's run and the
multi-turn agent comparison, stock-Continuum-like pins against pins kept as claims.

Both run on a virtual wall clock of `MS_PER_STEP` per engine step (the scheduler lane has no
model, so real time would measure this machine, not the schedule): the binding's arbiter reads
it through its `clock`, so the trace's `t_ns` and every `duration_ms` are judged on it.

Stock Continuum is not installed here (it is a fork of vLLM 0.7); `ContinuumLikePins` does on
stock vLLM 0.32 what seed 003 10.3 shows its scheduler doing to blocks: a finished non-last
turn's cached prompt blocks get one extra reference (the free it skips), dropped when the TTL
lapses with no request of the job waiting, or when the job's next request finishes. It has no
budget and tells nobody; that is the behaviour under comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from kvclaims.lab.virtual_clock import VirtualClock
from kvclaims.spec.trace import TraceEvent
from kvclaims.spec.vocabulary import NS_PER_MS
from kvclaims.vllm_binding.config import BindingConfig, ContinuumSettings

BLOCK = 16
"""Tokens per block on the scheduler lane (the seeds' 16-token blocks)."""

_EVENTS: TypeAdapter[Any] = TypeAdapter(TraceEvent)

MS_PER_STEP = 10
"""Virtual milliseconds per engine step."""

PIN_MS = 2000
"""Continuum's fixed pin (seed 003 10.3: FIXED_THRESHOLD_CONTINUUM = 2.0 s)."""

TURN_BLOCKS = (5, 9, 18, 25, 32)
"""KV blocks of each turn's context (seed 003 4.2: 66 -> 131 -> 279 -> 397 -> 503 prompt tokens
plus output, 5 -> 9 -> 18 -> 25 -> 32 blocks of 16 tokens)."""

OUTPUT_TOKENS = 8
JOBS = 8
JOB_START_GAP_STEPS = 3
TOOL_GAP_STEPS = 30
"""Simulated tool execution between turns: 300 virtual ms, a fast tool that Continuum pins for."""

AGENT_POOL = 128
"""Usable blocks: 8 jobs pinning up to 25 blocks each need 200 (seed 003 8.6 at 1/42 scale)."""

HORIZON_STEPS = 1500

STUCK_STEPS = 2 * PIN_MS // MS_PER_STEP
"""A run where nothing was scheduled for this long (twice the TTL) and nothing is due to arrive
is stuck: no pin will lapse any more."""


def _turn_prompt(job: str, turn: int) -> list[int]:
    """Turn `turn`'s prompt: the previous turn's prompt, its output, and new tool text, so it
    fills `TURN_BLOCKS[turn]` blocks with its output (equal prefixes across turns)."""
    from kvclaims.lab.scheduler_lane import SAMPLED_TOKEN, prompt_tokens

    tokens = prompt_tokens(f"{job}:0", TURN_BLOCKS[0] * BLOCK - OUTPUT_TOKENS)
    for t in range(1, turn + 1):
        grown = TURN_BLOCKS[t] * BLOCK - OUTPUT_TOKENS - len(tokens) - OUTPUT_TOKENS
        tokens = tokens + [SAMPLED_TOKEN] * OUTPUT_TOKENS + prompt_tokens(f"{job}:{t}", grown)
    return tokens


@dataclass
class ContinuumLikePins:
    """Seed 003's pin on stock vLLM (see the module docstring): job -> (expiry ns, blocks)."""

    lane: Any
    clock: VirtualClock
    pins: dict[str, tuple[int, list[Any]]] = field(default_factory=dict)

    def finished(self, job: str, prompt: list[int], last: bool) -> None:
        """A request of `job` finished: unpin the job's old pin, pin this turn unless last."""
        self._unpin(job)
        if last:
            return
        blocks = []
        for block_hash in self.lane.block_hashes(prompt):
            found = self.lane.block_pool.get_cached_block(block_hash, [0])
            if found is None:
                break
            blocks.append(found[0])
        self.lane.block_pool.touch(blocks)
        self.pins[job] = (self.clock.ns + PIN_MS * NS_PER_MS, blocks)

    def lapse(self, waiting_jobs: set[str]) -> int:
        """Unpin every pin whose TTL ended and whose job has no request waiting."""
        now = self.clock.ns
        lapsed = [j for j, (until, _) in self.pins.items() if until <= now and j not in waiting_jobs]
        for job in lapsed:
            self._unpin(job)
        return len(lapsed)

    def pinned_blocks(self) -> int:
        return len({b.block_id for _, blocks in self.pins.values() for b in blocks})

    def _unpin(self, job: str) -> None:
        entry = self.pins.pop(job, None)
        if entry is not None:
            self.lane.block_pool.free_blocks(reversed(entry[1]))


def _agent_jobs(lane: Any, clock: VirtualClock, stock: ContinuumLikePins | None) -> dict[str, Any]:
    """Drive `JOBS` agent jobs of `len(TURN_BLOCKS)` turns through the lane (module docstring).
    Everything returned is read from vLLM's scheduler and block pool as the run goes."""
    turns = len(TURN_BLOCKS)
    next_turn: dict[int, list[tuple[str, int]]] = {}
    for j in range(JOBS):
        next_turn.setdefault(j * JOB_START_GAP_STEPS, []).append((f"job{j}", 0))
    live: dict[str, tuple[str, int]] = {}
    hits: dict[str, int] = {}
    done_jobs = turns_done = stalls = streak = peak_pinned = lapsed = 0
    step = 0
    for step in range(HORIZON_STEPS):
        for job, turn in next_turn.pop(step, []):
            request_id = f"{job}-t{turn}"
            extra = {"job_id": job, "is_last_step": turn == turns - 1}
            lane.add(request_id, _turn_prompt(job, turn), max_tokens=OUTPUT_TOKENS, extra_args=extra)
            live[request_id] = (job, turn)
        waiting_jobs = {live[r.request_id][0] for r in lane.scheduler.waiting if r.request_id in live}
        if stock is not None:
            lapsed += stock.lapse(waiting_jobs)
        if lane.scheduler.has_requests():
            output = lane.step()
            for data in output.scheduled_new_reqs:
                hits.setdefault(data.req_id, data.num_computed_tokens // BLOCK)
            stalled = bool(lane.scheduler.waiting) and not lane.scheduler.running
            stalls += stalled
            streak = streak + 1 if stalled else 0
        clock.advance(MS_PER_STEP)
        for request_id, (job, turn) in list(live.items()):
            if lane.records[request_id].finished is None:
                continue
            del live[request_id]
            turns_done += 1
            if stock is not None:
                stock.finished(job, _turn_prompt(job, turn), turn == turns - 1)
            if turn == turns - 1:
                done_jobs += 1
            else:
                next_turn.setdefault(step + TOOL_GAP_STEPS, []).append((job, turn + 1))
        pinned = stock.pinned_blocks() if stock is not None else len(lane.arbiter.pinned_blocks())
        peak_pinned = max(peak_pinned, pinned)
        if done_jobs == JOBS or (streak > STUCK_STEPS and not next_turn):
            break  # done, or stuck: nothing ran for longer than any pin's TTL
    resumed = [r for r in hits if not r.endswith("-t0")]
    reused = sum(hits[r] for r in resumed)
    return {
        "jobs_completed": done_jobs,
        "turns_completed": turns_done,
        "steps_run": step + 1,
        "virtual_ms": clock.ns // NS_PER_MS,
        "peak_pinned_blocks": peak_pinned,
        "peak_pinned_fraction": round(peak_pinned / AGENT_POOL, 3),
        "steps_nothing_ran_while_requests_waited": stalls,
        "requests_left_waiting": len(live),
        "stuck": streak > STUCK_STEPS,
        "resumed_turns_admitted": len(resumed),
        "resumed_prefix_hit_blocks": reused,
        "stock_pins_lapsed": lapsed if stock is not None else None,
    }


def continuum_agent_jobs(trace: Path) -> dict[str, Any]:
    clock = VirtualClock()
    stock_lane = _lane(AGENT_POOL, None)
    try:
        stock = _agent_jobs(stock_lane, clock, ContinuumLikePins(stock_lane, clock))
    finally:
        stock_lane.close()
    clock = VirtualClock()
    lane = _lane(AGENT_POOL, _binding(trace, continuum=ContinuumSettings(pin_ms=PIN_MS)))
    lane.arbiter.clock = clock
    try:
        claims = _agent_jobs(lane, clock, None)
    finally:
        lane.close()
    events = read_events(trace)
    claims |= {
        kind: len(_of(events, f"resident_claim_{kind}"))
        for kind in ("accepted", "rejected", "materialized", "demoted", "expired", "released", "harmed")
    }
    claims["satisfied_pin_reuses"] = sum(1 for e in _of(events, "request_reused") if e.predicate_satisfied)
    claims["attributed_deferrals"] = len(_of(events, "active_request_deferred"))
    claims["attributed_refusals"] = len(_of(events, "active_request_refused"))
    return {
        "usable_blocks": AGENT_POOL,
        "jobs": JOBS,
        "turn_blocks": list(TURN_BLOCKS),
        "pin_ms": PIN_MS,
        "stock_continuum_like_pins": stock,
        "claims": claims,
    }


TTL_POOL = 64


def continuum_ttl_pin(trace: Path) -> dict[str, Any]:
    """One engine slot (`max_num_seqs=1`) so a request can be made to wait: job a's and job b's
    first turns are pinned; a long unrelated request then runs for 3 virtual seconds with job a's
    last turn queued behind it, so b's pin lapses and a's is kept until a's turn is served from
    it. Then job c pins 20 blocks and a 50-block request needs the room: c's pin is demoted."""
    clock = VirtualClock()
    lane = _lane(TTL_POOL, _binding(trace, continuum=ContinuumSettings(pin_ms=PIN_MS)), max_num_seqs=1)
    lane.arbiter.clock = clock

    def run(request_id: str, prompt: list[int], max_tokens: int, job: str | None, last: bool = False) -> None:
        extra = None if job is None else {"job_id": job, "is_last_step": last}
        lane.add(request_id, prompt, max_tokens=max_tokens, extra_args=extra)

    def drain() -> None:
        while lane.scheduler.has_requests():
            lane.step()
            clock.advance(MS_PER_STEP)

    try:
        run("a-t0", _turn_prompt("a", 0), OUTPUT_TOKENS, "a")
        run("b-t0", _turn_prompt("b", 0), OUTPUT_TOKENS, "b")
        drain()
        run("tool-busy", _turn_prompt("other", 0), 300, None)
        lane.step()
        clock.advance(MS_PER_STEP)
        run("a-t1", _turn_prompt("a", 1), OUTPUT_TOKENS, "a", last=True)
        drain()
        run("c-t0", _turn_prompt("c", 3) + [7] * 24, OUTPUT_TOKENS, "c")  # 26 full prompt blocks
        drain()
        run("big", _turn_prompt("big", 4)[: 40 * BLOCK], 10 * BLOCK, None)
        drain()
        stop_reasons = {r: _stop(lane, r) for r in ("a-t0", "b-t0", "a-t1", "c-t0")}
        pinned_after = len(lane.arbiter.pinned_blocks())
    finally:
        lane.close()
    events = read_events(trace)
    accepted = {e.claim_id: e for e in _of(events, "resident_claim_accepted")}
    expired = {e.claim_id: e for e in _of(events, "resident_claim_expired")}
    demoted = {e.claim_id: e for e in _of(events, "resident_claim_demoted")}
    reuses = _of(events, "request_reused")
    pin = {job: next(c for c in accepted if c.startswith(f"continuum-pin:{job}:")) for job in "abc"}
    a_reuse = next(e for e in reuses if e.claim_id == pin["a"])
    removed_c = [e for e in _of(events, "block_removed") if e.claim_id == pin["c"]]

    def held_ms(claim_id: str, until: Any) -> float:
        return (until.t_ns - accepted[claim_id].t_ns) / NS_PER_MS

    return {
        "pin_ms": PIN_MS,
        "stop_reasons": stop_reasons,
        "b_expired_after_ms": held_ms(pin["b"], expired[pin["b"]]) if pin["b"] in expired else None,
        "a_expired_before_its_reuse": pin["a"] in expired and expired[pin["a"]].seq < a_reuse.seq,
        "a_reused_after_ms": held_ms(pin["a"], a_reuse),
        "a_reuse_satisfied": a_reuse.predicate_satisfied,
        "a_reuse_cached_blocks": a_reuse.cached_blocks,
        "c_footprint_blocks": accepted[pin["c"]].footprint_blocks,
        "c_demoted": pin["c"] in demoted,
        "c_demoted_before_first_loss": pin["c"] in demoted
        and (not removed_c or demoted[pin["c"]].seq < removed_c[0].seq),
        "c_blocks_lost_after_demotion": len(removed_c),
        "pins_accepted": len(accepted),
        "pinned_blocks_at_end": pinned_after,
        "harmed": len(_of(events, "resident_claim_harmed")),
    }


def _stop(lane: Any, request_id: str) -> str | None:
    done = lane.records[request_id].finished
    return done.stop_reason if done is not None and isinstance(done.stop_reason, str) else None


def control_silent_unpin(trace: Path) -> dict[str, Any]:
    """What a telemetry join over stock Continuum would claim: the pin is a demotable claim
    while it lasts; the TTL lapse is only `free()`, so no demotion or expiry is reported, and
    the pressure that follows evicts the blocks of a claim still called responsible."""
    from kvclaims.lab.scheduler_lane import NativeObserver, prompt_tokens

    clock = VirtualClock()
    lane = _lane(TTL_POOL, None)
    observer = NativeObserver(lane, trace, "vllm 0.32.0 stock Scheduler + Continuum-like pins (no outcomes)")
    pins = ContinuumLikePins(lane, clock)
    prompt = _turn_prompt("a", 1)
    try:
        lane.add("a-t0", prompt, max_tokens=OUTPUT_TOKENS)
        lane.run()
        pins.finished("a", prompt, last=False)
        footprint = len(pins.pins["a"][1])
        observer.claim("continuum-pin:a", "demotable", footprint)
        observer.watch("a-t0", footprint, claim_id="continuum-pin:a")
        clock.advance(PIN_MS)
        lapsed = pins.lapse(set())
        for n in range(TTL_POOL // 4):
            lane.add(f"pressure-{n}", prompt_tokens(f"pressure-{n}", 4 * BLOCK), max_tokens=2)
            lane.run()
    finally:
        lane.close()
    events = read_events(trace)
    return {
        "pin_footprint": footprint,
        "pins_lapsed": lapsed,
        "claim_blocks_removed": len([e for e in _of(events, "block_removed") if e.claim_id]),
        "outcomes_reported": len(_of(events, "resident_claim_demoted"))
        + len(_of(events, "resident_claim_expired")),
    }


SCENARIOS: tuple[tuple[str, str, Any], ...] = (
    (
        "continuum-ttl-pin",
        "Continuum job keys as claims: pin, TTL expiry, pin kept while its job waits, last step, demotion",
        continuum_ttl_pin,
    ),
    (
        "continuum-agent-jobs",
        "seed 003 at small scale: 8 agent jobs, context 5->32 blocks, stock-Continuum-like pins vs claims",
        continuum_agent_jobs,
    ),
    (
        "control-continuum-silent-unpin",
        "NEGATIVE CONTROL: a stock-Continuum-like pin reported as a claim, its TTL lapse unreported, "
        "then evicted: silent harm (must be rejected)",
        control_silent_unpin,
    ),
)
"""(name, summary, run) of seed 003's scheduler-lane scenarios (registered by scheduler_scenarios)."""


def _lane(usable: int, binding: BindingConfig | None, **spec: Any) -> Any:
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    return SchedulerLane(LaneSpec(usable_blocks=usable, binding=binding, **spec))


def _binding(trace: Path, **overrides: Any) -> BindingConfig:
    return BindingConfig(
        trace_path=str(trace), trace_source="vllm 0.32.0 scheduler lane + kvclaims", **overrides
    )


def read_events(trace: Path) -> list[Any]:
    """The events of a trace, validated against trace v1 (header skipped)."""
    return [_EVENTS.validate_json(line) for line in trace.read_text(encoding="utf-8").splitlines()[1:]]


def _of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.event == kind]
