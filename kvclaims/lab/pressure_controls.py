"""Seed 000's soft-priority pressure controls on vLLM's real scheduler (scheduler lane).

Two tracked prompts, A and B, are computed and cached (their requests finish), each with a
priority; then two-block filler requests arrive one at a time until both tracked prompts have
lost a cached block. A control is observed when the lower-priority prompt loses a block first
in every trial (original: A high, B low; swapped: A low, B high) or, for equal priority, when
both lose their first block in the same filler step (a filler evicts two blocks, so one pressure
event can take a block of each; with one-block fillers no runtime could ever observe it). Every
control runs with both warm-up orders (A then B, B then A), so recency alone can never pass one.

Two runtimes are controlled:
- `stock`: vLLM 0.32 unmodified with `scheduling_policy="priority"`; A and B carry vLLM request
  priorities (lower value = higher priority), as that policy reads them;
- `binding`: the kvclaims binding; A and B each submit a `soft_priority` claim over their prompt
  (and carry the same vLLM priorities), which orders their blocks in vLLM's free queue
  (`kvclaims.vllm_binding.soft_priority`).

What each trial saw is read from vLLM's own block pool (its prefix-cache hash table, probed
after every filler), never from the runtime's bookkeeping. `write_artifact` writes the result
as the JSON artifact descriptors anchor their pressure-control observations on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

BLOCK = 16
POOL = 32
TRACKED_BLOCKS = 6
MAX_FILLERS = 64
FILLER_BLOCKS = 2
HIGH, LOW = 0, 10
"""vLLM request priorities: lower value is served first under `scheduling_policy="priority"`."""

Runtime = Literal["stock", "binding"]


@dataclass(frozen=True)
class Control:
    """One of seed 000's three pressure controls: the two prompts' priorities and which prompt
    must lose a block first for the control to be observed (`both`: in the same step)."""

    name: str
    atom: str
    priority_a: int
    priority_b: int
    expected_first_loss: Literal["A", "B", "both"]


CONTROLS = (
    Control("original", "pressure_control_original", HIGH, LOW, "B"),
    Control("swapped", "pressure_control_swapped", LOW, HIGH, "A"),
    Control("equal", "pressure_control_equal", HIGH, HIGH, "both"),
)
WARM_ORDERS = ("AB", "BA")


def _prompt(tag: str) -> list[int]:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    return prompt_tokens(tag, TRACKED_BLOCKS * BLOCK)


def run_trial(
    runtime: Runtime, control: Control, warm_order: str, trace_path: Path | None = None
) -> dict[str, Any]:
    """One trial on a fresh lane; returns what vLLM's block pool showed. With `trace_path`, the
    binding writes its claim trace there."""
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane, prompt_tokens
    from kvclaims.vllm_binding.config import BindingConfig

    binding = None
    if runtime == "binding":
        binding = BindingConfig(trace_path=None if trace_path is None else str(trace_path))
    lane = SchedulerLane(LaneSpec(usable_blocks=POOL, binding=binding, scheduling_policy="priority"))
    prompts = {"A": _prompt("tracked-A"), "B": _prompt("tracked-B")}
    priority = {"A": control.priority_a, "B": control.priority_b}
    try:
        for name in warm_order:
            extra = None
            if runtime == "binding":
                extra = {
                    "kvclaims_claim_id": f"claim-{name}",
                    "kvclaims_mode": "soft_priority",
                    "kvclaims_footprint_blocks": TRACKED_BLOCKS,
                }
            lane.add(f"warm-{name}", prompts[name], extra_args=extra, priority=priority[name])
            lane.run()
        notes = {name: _stop(lane, f"warm-{name}") for name in "AB"}
        cached_before = {name: lane.cached_blocks(prompts[name]) for name in "AB"}
        first_loss: dict[str, int] = {}
        fillers = 0
        while len(first_loss) < 2 and fillers < MAX_FILLERS:
            fillers += 1
            lane.add(
                f"filler-{fillers}", prompt_tokens(f"filler-{fillers}", FILLER_BLOCKS * BLOCK), priority=HIGH
            )
            lane.run()
            for name in "AB":
                if name not in first_loss and lane.cached_blocks(prompts[name]) < TRACKED_BLOCKS:
                    first_loss[name] = fillers
    finally:
        lane.close()
    return {
        "warm_order": warm_order,
        "priorities": priority,
        "claim_outcomes": notes,
        "cached_blocks_before_pressure": cached_before,
        "first_loss_at_filler": first_loss,
        "first_lost": _first_lost(first_loss),
    }


def _first_lost(first_loss: dict[str, int]) -> str | None:
    if len(first_loss) < 2:
        return None
    if first_loss["A"] == first_loss["B"]:
        return "both"
    return min(first_loss, key=first_loss.__getitem__)


def _stop(lane: Any, request_id: str) -> str | None:
    done = lane.records[request_id].finished
    return done.stop_reason if done is not None and isinstance(done.stop_reason, str) else None


def run_controls(runtime: Runtime) -> dict[str, Any]:
    """Every control under both warm-up orders; `observed` per control says whether the
    expected first loss happened in every trial."""
    from kvclaims.vllm_binding.plugin import installed_vllm_version

    results: dict[str, Any] = {}
    for control in CONTROLS:
        trials = [run_trial(runtime, control, order) for order in WARM_ORDERS]
        results[control.name] = {
            "atom": control.atom,
            "expected_first_loss": control.expected_first_loss,
            "trials": trials,
            "passes": sum(t["first_lost"] == control.expected_first_loss for t in trials),
            "runs": len(trials),
            "observed": all(t["first_lost"] == control.expected_first_loss for t in trials),
        }
    return {
        "artifact": "kvclaims priority pressure controls (seed 000 section 6.1)",
        "runtime": runtime,
        "vllm": installed_vllm_version(),
        "lane": "scheduler lane: vLLM's real Scheduler / KVCacheManager / BlockPool, no model",
        "scheduling_policy": "priority",
        "usable_blocks": POOL,
        "tracked_prompt_blocks": TRACKED_BLOCKS,
        "controls": results,
    }


def write_artifact(result: dict[str, Any], path: Path) -> str:
    """Write the controls' result as canonical JSON; returns its sha256."""
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


ARTIFACT_NAME = "priority_pressure_controls.json"
"""The artifact's file name in a descriptor's evidence directory."""


def _summary(result: dict[str, Any]) -> str:
    controls = [result["controls"][c.name] for c in CONTROLS]
    counts = ", ".join(f"{c.name} {r['passes']}/{r['runs']}" for c, r in zip(CONTROLS, controls, strict=True))
    trials = [t for c in controls for t in c["trials"]]
    text = f"Trials in which the loss order matched soft priority: {counts}."
    if trials and all(t["first_lost"] == t["warm_order"][0] for t in trials):
        text += (
            " In every trial the prompt cached first lost a block first, whatever its priority: "
            "recency (vLLM's LRU free queue), not priority, decided the loss order."
        )
    rejected = {o for t in trials for o in t["claim_outcomes"].values() if o and "claim_rejected" in o}
    if rejected:
        text += f" The soft_priority claims were rejected: {sorted(rejected)[0].split(':', 3)[-1]}."
    return text


def descriptor_entries(result: dict[str, Any], path: str, sha256: str) -> dict[str, Any]:
    """What a descriptor says from a controls artifact at `path` (relative to the descriptor):
    an observation per control that was observed in every trial, and a `priority_influence`
    evidence item, supported only when all three were (otherwise `missing`, with why)."""
    controls = {c.name: result["controls"][c.name] for c in CONTROLS}

    def anchor(section: str, note: str) -> dict[str, Any]:
        return {"kind": "artifact", "path": path, "section": section, "note": note, "sha256": sha256}

    observations = [
        {
            "atom": c["atom"],
            "scope": "controlled_pressure",
            "anchor": anchor(
                f"controls.{name}",
                f"{c['expected_first_loss']} lost a block first in {c['passes']}/{c['runs']} trials "
                "(both warm-up orders).",
            ),
        }
        for name, c in controls.items()
        if c["observed"]
    ]
    influenced = all(c["observed"] for c in controls.values())
    item = {
        "obligation": "priority_influence",
        "status": "supported" if influenced else "missing",
        "scope": "controlled_pressure",
        "anchor": anchor("controls", _summary(result)),
    }
    return {"observations": observations, "evidence": item}
