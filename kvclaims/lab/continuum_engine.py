"""Seed 003's agent turns on `vllm.LLM` (engine lane): the Continuum compatibility mode with a
real model, a real wall clock and vLLM's real request path.

One job runs three turns whose context carries each turn's real output and a tool result (seed
003 3.2); every non-last turn is pinned as a claim and the next turn is served from it; the last
turn releases it. A second job's pin, with no turn following, lapses on the wall clock at the
first engine step after `PIN_MS`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvclaims.lab.continuum_scenarios import _of, read_events
from kvclaims.lab.engine_lane import ENGINE_BLOCK_SIZE as BLOCK
from kvclaims.lab.engine_lane import engine_prompt
from kvclaims.spec.vocabulary import NS_PER_MS

if TYPE_CHECKING:
    from kvclaims.lab.engine_lane import EngineLane

PIN_MS = 2000
"""Continuum's fixed pin (seed 003 10.3); the job's turns follow each other well within it."""
TURNS = 3


def _job(job_id: str, last: bool) -> dict[str, Any]:
    return {"job_id": job_id, "is_last_step": last}


NAME = "continuum-agent-turns"
SUMMARY = (
    "Continuum job keys on vllm.LLM: each non-last turn pinned, the next served from it, the last "
    "releases; an unfollowed pin lapses on the wall clock"
)


def continuum_agent_turns(lane: EngineLane, trace: Path) -> dict[str, Any]:
    lane.begin(trace, binding={"continuum": {"pin_ms": PIN_MS}})
    context = engine_prompt("agent:system", 2 * BLOCK + 5)
    cached: list[int] = []
    prompts: list[int] = []
    for turn in range(TURNS):
        done = lane.submit(f"turn-{turn}", context, max_tokens=4, claim=_job("agent", turn == TURNS - 1))
        cached.append(done.num_cached_tokens)
        prompts.append(len(context))
        context = context + list(done.token_ids) + engine_prompt(f"agent:tool-{turn}", BLOCK + 7)
    lane.submit("other-0", engine_prompt("other", 2 * BLOCK + 3), claim=_job("other", False))
    time.sleep(PIN_MS / 1000 + 0.05)
    lane.submit("later", engine_prompt("later", 8))  # an engine step: the lapsed pin expires
    pinned_at_end = len(lane.arbiter.pinned_blocks())
    run = lane.end()
    events = read_events(run.trace_path)
    accepted = {e.claim_id: e for e in _of(events, "resident_claim_accepted")}
    expired = _of(events, "resident_claim_expired")
    reuses = [
        e
        for e in _of(events, "request_reused")
        if e.request_id in {run.internal_ids[f"turn-{t}"] for t in range(TURNS)}
    ]
    return {
        "pin_ms": PIN_MS,
        "prompt_tokens": prompts,
        "cached_tokens": cached,
        "pins_accepted": sorted(accepted),
        "pin_footprints": [accepted[c].footprint_blocks for c in sorted(accepted)],
        "turn_reuses_satisfied": [e.predicate_satisfied for e in reuses],
        "turn_reuse_cached_blocks": [e.cached_blocks for e in reuses],
        "released": len(_of(events, "resident_claim_released")),
        "expired": [e.claim_id for e in expired],
        "expired_after_ms": [(e.t_ns - accepted[e.claim_id].t_ns) / NS_PER_MS for e in expired],
        "pinned_blocks_at_end": pinned_at_end,
        "last_turn_stop_reason": run.finished["turn-2"].stop_reason,
        "harmed": len(_of(events, "resident_claim_harmed")),
    }
