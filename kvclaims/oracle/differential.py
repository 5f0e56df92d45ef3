"""A randomized differential of the oracle and the checker over the whole trace v1 vocabulary
(issue 26 item 3). `random_trace` draws a history event by event from every event type of the
format, each field from a small universe (three claims, three requests, six blocks, two
checkpoint values, every mode, both clocks, caps and extensions, optional fields present or
absent), steered toward legal histories: at each step up to `tries` candidates are drawn and
the first the oracle does not reject is kept (a legal extension), else the last is kept (a
violation). Some histories are then mutated once (`mutations.mutate`). Both judge the result;
the outcomes must agree.

    python -m kvclaims.oracle.differential --cases 20000 [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from typing import Any

from kvclaims.oracle.exhaustive import (
    CLOSED,
    HEADER,
    Checker,
    Disagreement,
    classify,
    refinement_checker_unshrunk,
)
from kvclaims.oracle.format import SCHEMA, parse_event
from kvclaims.oracle.interpreter import Oracle, judge
from kvclaims.oracle.known_disagreements import known
from kvclaims.oracle.mutations import MUTATIONS, encode, mutate
from kvclaims.oracle.state import MODES, OUTCOMES, BadInput, Verdict

CLAIMS, REQUESTS, BLOCKS, HASHES = ("c1", "c2", "c3"), ("r1", "r2", "r3"), 6, ("h0", "h1", "h2", "hx")
VALUES = ("va", "vb")
EVENT_TYPES = tuple(name for name in SCHEMA if name != "trace_closed")


def _maybe(rng: random.Random, value: Any, p: float = 0.5) -> Any:
    return value if rng.random() < p else None


def _predicate(rng: random.Random, footprint: int) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.2:
        return {"kind": "hybrid_two_key", "boundary_blocks": rng.randint(1, footprint)}
    if roll < 0.35:
        return {"kind": "leading_prefix_at_least", "tokens": rng.randint(1, 16 * footprint)}
    return {"kind": "leading_prefix_at_least", "blocks": rng.randint(1, footprint)}


def _checkpoint(rng: random.Random) -> dict[str, Any]:
    return {"boundary": rng.randint(0, 3), "payload_hash": "pa", "value_hash": rng.choice(VALUES)}


def _terms(rng: random.Random, claim_id: str) -> dict[str, Any]:
    footprint = rng.randint(1, 3)
    steps = _maybe(rng, rng.randint(1, 3), 0.25)
    ms = _maybe(rng, rng.randint(1, 3), 0.25)
    return {
        "claim_id": claim_id,
        "owner_scope": rng.choice(("o", "o", "o2")),
        "object_id": f"p-{claim_id}",
        "mode": rng.choice(MODES),
        "footprint_blocks": footprint,
        "predicate": _predicate(rng, footprint),
        "duration_steps": steps,
        "duration_ms": ms,
        "refresh_on_hit": _maybe(rng, rng.random() < 0.5, 0.25),
        "max_duration_steps": _cap(rng, steps),
        "max_duration_ms": _cap(rng, ms),
    }


def _cap(rng: random.Random, duration: int | None) -> int | None:
    """A cap (soft terms, DESIGN 6.3) on a clock the terms carry, as long as its duration or
    up to 3 longer (shorter, or without the duration, is not a trace)."""
    if duration is None or rng.random() < 0.5:
        return None
    return duration + rng.randint(0, 3)


def _extension(rng: random.Random, claim_id: str) -> dict[str, Any]:
    """An extension (soft terms) on one clock or both, 1..4 units from its stamp."""
    clocks = rng.choice((("steps",), ("ms",), ("steps", "ms")))
    fields: dict[str, Any] = {"claim_id": claim_id, "reason": _maybe(rng, "lease", 0.3)}
    for clock in clocks:
        fields[f"duration_{clock}"] = rng.randint(1, 4)
    return fields


def _proof(rng: random.Random) -> dict[str, int]:
    protected, active, usable = rng.randint(0, 4), rng.randint(0, 5), HEADER["usable_blocks"]
    total = protected + active + rng.choice((0, 0, 0, 1))
    return {
        "protected_resident_blocks": protected,
        "active_live_blocks_required": active,
        "resident_plus_active_blocks": total,
        "usable_blocks": rng.choice((usable, usable, usable, usable + 1)),
        "capacity_shortfall_blocks": max(0, total - usable) + rng.choice((0, 0, 0, 1)),
    }


def random_event(rng: random.Random, clock: dict[str, int]) -> dict[str, Any]:
    """One event of a type drawn from the whole vocabulary, its fields from the small universe."""
    name = rng.choice(EVENT_TYPES)
    claim, request = rng.choice(CLAIMS), rng.choice(REQUESTS)
    block = rng.randrange(BLOCKS)
    fields: dict[str, Any]
    if name in (
        "resident_claim_submitted",
        "resident_claim_accepted",
        "resident_claim_conditionally_accepted",
    ):
        fields = _terms(rng, claim)
    elif name == "resident_claim_rejected":
        fields = {"claim_id": claim, "reason": "full"}
    elif name == "resident_claim_extended":
        fields = _extension(rng, claim)
    elif name == "resident_claim_materialized":
        fields = {
            "claim_id": claim,
            "leading_blocks": rng.randint(0, 3),
            "checkpoint": _maybe(rng, _checkpoint(rng)),
        }
    elif name in ("resident_claim_demoted", "resident_claim_expired", "resident_claim_released"):
        fields = {"claim_id": claim}
    elif name == "resident_claim_harmed":
        fields = {
            "claim_id": claim,
            "leading_blocks": rng.randint(0, 2),
            "required_blocks": rng.randint(1, 3),
        }
    elif name == "resident_claim_lost":
        fields = {"claim_id": claim, "leading_blocks": rng.randint(0, 2)}
    elif name == "resident_claim_offloaded":
        fields = {"claim_id": claim, "tier": "cpu"}
    elif name == "resident_claim_restore_required":
        fields = {"claim_id": claim, "request_id": request}
    elif name == "resident_claim_restored":
        fields = {"claim_id": claim, "request_id": request, "restored_blocks": _maybe(rng, rng.randint(0, 3))}
    elif name == "resident_claim_restoration_failed":
        fields = {"claim_id": claim, "request_id": request, "outcome": rng.choice(OUTCOMES)}
    elif name == "resident_claim_checkpoint_restored":
        fields = {"claim_id": claim, **_checkpoint(rng)}
    elif name == "active_request_admitted":
        fields = {
            "request_id": request,
            "active_live_blocks": rng.randint(0, 5),
            "claim_shared_blocks": _maybe(rng, rng.randint(0, 2)),
        }
    elif name in ("active_request_deferred", "active_request_refused"):
        reason = rng.choice(("capacity", "restoration_failed"))
        blocking = rng.sample(CLAIMS, rng.choice((1, 1, 1, 2)))
        proof = _proof(rng) if reason == "capacity" or rng.random() < 0.3 else {}
        fields = {"request_id": request, "reason": reason, "blocking_claim_ids": blocking, **proof}
    elif name == "request_reused":
        fields = {
            "request_id": request,
            "claim_id": claim,
            "cached_blocks": rng.randint(0, 3),
            "predicate_satisfied": rng.random() < 0.7,
            "checkpoint": _maybe(rng, _checkpoint(rng), 0.2),
        }
    elif name == "request_finished":
        fields = {"request_id": request, "status": "finished"}
    elif name in ("block_stored", "block_removed"):
        named = rng.random() < 0.7
        fields = {
            "block_id": block,
            "block_hash": rng.choice(HASHES),
            "cache_level": _maybe(rng, rng.choice(("gpu", "cpu")), 0.2),
            "claim_id": claim if named else None,
            "position": rng.randint(0, 2) if named else None,
        }
    else:
        fields = {
            "kind": "restore_failure",
            "claim_id": _maybe(rng, claim),
            "request_id": _maybe(rng, request),
        }
    for field_name, unit in (("engine_step", 1), ("t_ns", 1_000_000)):
        clock[field_name] += rng.choice((0, 1, 1, 2)) * unit
        if rng.random() < 0.7:
            fields[field_name] = clock[field_name]
    return {"event": name, **{k: v for k, v in fields.items() if v is not None}}


def _rejects(oracle: Oracle, event: dict[str, Any], seq: int) -> bool:
    try:
        parsed = parse_event(json.dumps({"seq": seq, **event}).encode(), seq - 1)
        oracle.clone().step(parsed)
    except (BadInput, Exception):
        return True
    return False


def random_trace(seed: int, length: int = 12, tries: int = 8, mutated: float = 0.3) -> list[dict[str, Any]]:
    """The events of one generated history (see the module docstring), `trace_closed` last."""
    rng = random.Random(seed)
    oracle = Oracle(HEADER["usable_blocks"], HEADER["block_size"])
    clock = {"engine_step": 0, "t_ns": 0}
    events: list[dict[str, Any]] = []
    for seq in range(1, rng.randint(1, length) + 1):
        for _ in range(tries):
            event = random_event(rng, clock)
            if not _rejects(oracle, event, seq):
                break
        events.append(event)
        if _rejects(oracle, event, seq):
            break  # the trace is decided here: nothing after it is judged
        oracle.step(parse_event(json.dumps({"seq": seq, **event}).encode(), seq - 1))
    if rng.random() < mutated:
        mutant = mutate(events, rng.choice(MUTATIONS), rng)
        events = mutant.events if mutant is not None else events
    return [*events, dict(CLOSED)]


def compare(seed: int, checker: Checker = refinement_checker_unshrunk) -> tuple[Verdict, Disagreement | None]:
    """The oracle's verdict on the trace of `seed` and the disagreement, if the checker's
    outcome differs."""
    events = random_trace(seed)
    data = encode(HEADER, events)
    oracle, found = judge(data), checker(data)
    if oracle.outcome == found.outcome:
        return oracle, None
    trace = tuple((e["event"], {k: v for k, v in e.items() if k != "event"}) for e in events)
    return oracle, Disagreement(trace, oracle, found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvclaims.oracle.differential", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument(
        "--seed", type=int, default=0, help="the first case's seed; cases are seed, seed+1, ..."
    )
    args = parser.parse_args(argv)
    outcomes: Counter[str] = Counter()
    classes: dict[str, tuple[int, Disagreement]] = {}
    for seed in range(args.seed, args.seed + args.cases):
        verdict, found = compare(seed)
        outcomes[verdict.outcome] += 1
        if found is not None and known(classify(found)) is None:
            classes.setdefault(classify(found), (seed, found))
    print(
        json.dumps(
            {
                "cases": args.cases,
                "oracle_outcomes": dict(sorted(outcomes.items())),
                "new_classes": len(classes),
            }
        )
    )
    for signature, (seed, found) in classes.items():
        print(f"\n{signature}\n  seed {seed}: {found.checker.message}")
        for name, fields in found.trace:
            print(f"    {name} {json.dumps(fields, sort_keys=True)}")
    return 1 if classes else 0


if __name__ == "__main__":
    sys.exit(main())
