"""Bounded-exhaustive comparison of the oracle with the refinement checker (issue 12).

Every trace up to `length` events over a small universe (claims c1 and c2, blocks 0-3, requests
r1 and r2, a pool of 4 blocks), built from a menu of events per type that includes wrong field
values. Tractable the Stateright way: breadth-first over the prefixes the oracle has not yet
rejected, deduplicated by the oracle's abstract state (`Oracle.key`), each extended by every
menu event, legal or not. A trace is decided at its first violating event, so a rejected
extension is compared and never extended. Every generated trace (each prefix + one event) is
checked by both and compared by outcome (and by rule when both reject).

    python -m kvclaims.oracle.exhaustive --length 6 [--menu core|full|whole] [--no-checker]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvclaims.oracle.interpreter import REJECTED, BadInput, Oracle, Verdict, Violation, conclude, parse_event

USABLE = 4
HEADER: dict[str, Any] = {
    "kvclaims_trace": 1,
    "source": "kvclaims.oracle.exhaustive",
    "usable_blocks": USABLE,
    "block_size": 16,
}


def _terms(
    claim_id: str, mode: str, footprint: int, predicate: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "claim_id": claim_id,
        "owner_scope": "o",
        "object_id": f"p-{claim_id}",
        "mode": mode,
        "footprint_blocks": footprint,
        "predicate": predicate,
        **extra,
    }


def _blocks(k: int) -> dict[str, Any]:
    return {"kind": "leading_prefix_at_least", "blocks": k}


HARD1 = _terms("c1", "hard_protected", 2, _blocks(2))
BEST1 = _terms("c1", "best_effort", 2, _blocks(2))
OFF2 = _terms("c2", "offloadable", 2, _blocks(1))
TWOKEY2 = _terms("c2", "offloadable", 2, {"kind": "hybrid_two_key", "boundary_blocks": 1})
EXPIRING2 = _terms("c2", "expiring", 1, _blocks(1), duration_steps=2, engine_step=0)
CHECKPOINT = {"boundary": 1, "payload_hash": "pa", "value_hash": "va"}


def _proof(protected: int, active: int, shortfall: int | None = None) -> dict[str, int]:
    total = protected + active
    return {
        "protected_resident_blocks": protected,
        "active_live_blocks_required": active,
        "resident_plus_active_blocks": total,
        "usable_blocks": USABLE,
        "capacity_shortfall_blocks": max(0, total - USABLE) if shortfall is None else shortfall,
    }


def _stored(
    block: int, block_hash: str, claim_id: str | None = None, position: int | None = None
) -> tuple[str, dict[str, Any]]:
    fields: dict[str, Any] = {"block_id": block, "block_hash": block_hash}
    if claim_id is not None:
        fields |= {"claim_id": claim_id, "position": position}
    return ("block_stored", fields)


def _removed(
    block: int, block_hash: str, claim_id: str | None = None, position: int | None = None
) -> tuple[str, dict[str, Any]]:
    return ("block_removed", _stored(block, block_hash, claim_id, position)[1])


# (event, fields): the core menu exercises classes 1, 3, 4, 5, 6, 7, 10, 11, 12 and the seven
# rules; `full` adds the two-key, expiring and further wrong-value variants.
CORE_MENU: tuple[tuple[str, dict[str, Any]], ...] = (
    ("resident_claim_submitted", HARD1),
    ("resident_claim_accepted", HARD1),
    ("resident_claim_accepted", BEST1),
    ("resident_claim_accepted", OFF2),
    ("resident_claim_materialized", {"claim_id": "c1", "leading_blocks": 2}),
    ("resident_claim_materialized", {"claim_id": "c2", "leading_blocks": 1, "checkpoint": CHECKPOINT}),
    ("resident_claim_demoted", {"claim_id": "c1"}),
    ("resident_claim_released", {"claim_id": "c2"}),
    ("resident_claim_harmed", {"claim_id": "c1", "leading_blocks": 0, "required_blocks": 2}),
    ("resident_claim_lost", {"claim_id": "c1", "leading_blocks": 0}),
    ("resident_claim_offloaded", {"claim_id": "c1", "tier": "cpu"}),
    ("resident_claim_offloaded", {"claim_id": "c2", "tier": "cpu"}),
    ("resident_claim_restore_required", {"claim_id": "c2", "request_id": "r1"}),
    ("resident_claim_restored", {"claim_id": "c2", "request_id": "r1"}),
    ("resident_claim_restoration_failed", {"claim_id": "c2", "request_id": "r1", "outcome": "refusal"}),
    ("active_request_admitted", {"request_id": "r1", "active_live_blocks": 1}),
    ("active_request_admitted", {"request_id": "r2", "active_live_blocks": 3}),
    ("active_request_admitted", {"request_id": "r2", "active_live_blocks": 3, "claim_shared_blocks": 1}),
    (
        "active_request_deferred",
        {"request_id": "r1", "reason": "restoration_failed", "blocking_claim_ids": ["c2"]},
    ),
    (
        "active_request_refused",
        {"request_id": "r1", "reason": "capacity", "blocking_claim_ids": ["c1"], **_proof(2, 3)},
    ),
    (
        "active_request_refused",
        {"request_id": "r1", "reason": "capacity", "blocking_claim_ids": ["c1"], **_proof(4, 1)},
    ),
    (
        "active_request_refused",
        {"request_id": "r1", "reason": "restoration_failed", "blocking_claim_ids": ["c2"]},
    ),
    (
        "request_reused",
        {"request_id": "r1", "claim_id": "c2", "cached_blocks": 1, "predicate_satisfied": True},
    ),
    ("request_finished", {"request_id": "r1", "status": "finished"}),
    _stored(0, "h0", "c1", 0),
    _stored(1, "h1", "c1", 1),
    _stored(2, "h2", "c2", 0),
    _stored(1, "hx"),
    _removed(0, "h0"),
    _removed(2, "h2"),
)

FULL_MENU: tuple[tuple[str, dict[str, Any]], ...] = (
    *CORE_MENU,
    ("resident_claim_accepted", TWOKEY2),
    ("resident_claim_accepted", EXPIRING2),
    ("resident_claim_rejected", {"claim_id": "c1", "reason": "full"}),
    ("resident_claim_materialized", {"claim_id": "c1", "leading_blocks": 1}),
    ("resident_claim_materialized", {"claim_id": "c2", "leading_blocks": 1}),
    ("resident_claim_released", {"claim_id": "c1"}),
    ("resident_claim_demoted", {"claim_id": "c2"}),
    ("resident_claim_expired", {"claim_id": "c2", "engine_step": 1}),
    ("resident_claim_expired", {"claim_id": "c2", "engine_step": 2}),
    ("resident_claim_harmed", {"claim_id": "c1", "leading_blocks": 1, "required_blocks": 2}),
    ("resident_claim_harmed", {"claim_id": "c2", "leading_blocks": 0, "required_blocks": 1}),
    ("resident_claim_restore_required", {"claim_id": "c1", "request_id": "r1"}),
    ("resident_claim_restored", {"claim_id": "c1", "request_id": "r1"}),
    ("resident_claim_restored", {"claim_id": "c2", "request_id": "r1", "restored_blocks": 1}),
    ("resident_claim_restoration_failed", {"claim_id": "c2", "request_id": "r1", "outcome": "demotion"}),
    (
        "resident_claim_checkpoint_restored",
        {"claim_id": "c2", "boundary": 1, "payload_hash": "pa", "value_hash": "va"},
    ),
    (
        "resident_claim_checkpoint_restored",
        {"claim_id": "c2", "boundary": 1, "payload_hash": "pa", "value_hash": "vb"},
    ),
    (
        "active_request_deferred",
        {"request_id": "r1", "reason": "capacity", "blocking_claim_ids": ["c1"], **_proof(2, 3)},
    ),
    (
        "active_request_refused",
        {"request_id": "r1", "reason": "capacity", "blocking_claim_ids": ["c2"], **_proof(2, 3)},
    ),
    (
        "active_request_refused",
        {"request_id": "r1", "reason": "capacity", "blocking_claim_ids": ["c1"], **_proof(2, 3, 2)},
    ),
    (
        "request_reused",
        {"request_id": "r1", "claim_id": "c1", "cached_blocks": 2, "predicate_satisfied": True},
    ),
    (
        "request_reused",
        {"request_id": "r1", "claim_id": "c1", "cached_blocks": 0, "predicate_satisfied": False},
    ),
    ("request_finished", {"request_id": "r2", "status": "finished"}),
    _stored(0, "h0", "c2", 0),
    _removed(1, "h1"),
    _removed(0, "h0", "c2", 0),
)

# Submitted terms of c2 for the conditional acceptances (issue 26 item 3: the whole vocabulary).
SUBMITTED2 = _terms("c2", "hard_protected", 2, _blocks(2))
TTL2 = _terms("c2", "expiring", 1, _blocks(1), duration_ms=2, refresh_on_hit=True, t_ns=0)
TOKENS1 = _terms("c1", "hard_protected", 2, {"kind": "leading_prefix_at_least", "tokens": 17})
# Soft terms (DESIGN 6.3, issue 28): c2 capped on both clocks (1 step within 2; 1 ms within 4),
# refreshed by r2's hit (step 1, 2 ms), against the menu's expiries of c2 (steps 1, 2, 5; 1, 3
# and 5 ms) and its extensions below.
CAPPED2 = _terms(
    "c2", "expiring", 1, _blocks(1), duration_steps=1, max_duration_steps=2, duration_ms=1,
    max_duration_ms=4, refresh_on_hit=True,
)  # fmt: skip

# `whole` adds every event type and field of trace v1 the smaller menus leave out: conditional
# acceptance (changed terms, another owner, no submission), the wall clock (`duration_ms` on
# `t_ns`, refresh on hit), token predicates, resumes in place carrying a checkpoint, other tiers,
# faults, every restoration outcome and the context fields.
WHOLE_MENU: tuple[tuple[str, dict[str, Any]], ...] = (
    *FULL_MENU,
    ("resident_claim_submitted", SUBMITTED2),
    ("resident_claim_submitted", {**TTL2, "duration_steps": 1, "engine_step": 0}),
    ("resident_claim_conditionally_accepted", {**OFF2, "reason": "smaller"}),
    ("resident_claim_conditionally_accepted", {**TTL2, "duration_steps": 2, "engine_step": 0}),
    ("resident_claim_conditionally_accepted", {**SUBMITTED2, "owner_scope": "o2"}),
    ("resident_claim_accepted", TTL2),
    ("resident_claim_accepted", TOKENS1),
    ("resident_claim_expired", {"claim_id": "c2", "t_ns": 1_000_000, "reason": "ttl"}),
    ("resident_claim_expired", {"claim_id": "c2", "t_ns": 3_000_000}),
    (
        "resident_claim_restoration_failed",
        {"claim_id": "c2", "request_id": "r1", "outcome": "expiry", "t_ns": 5_000_000, "engine_step": 5},
    ),
    ("resident_claim_restoration_failed", {"claim_id": "c2", "request_id": "r1", "outcome": "harm"}),
    ("resident_claim_lost", {"claim_id": "c2", "leading_blocks": 0}),
    (
        "request_reused",
        {
            "request_id": "r2",
            "claim_id": "c2",
            "cached_blocks": 1,
            "predicate_satisfied": True,
            "checkpoint": {"boundary": 1, "payload_hash": "pa", "value_hash": "vb"},
            "t_ns": 2_000_000,
            "engine_step": 1,
        },
    ),
    (
        "block_stored",
        {"block_id": 3, "block_hash": "h3", "cache_level": "cpu", "claim_id": "c2", "position": 0},
    ),
    ("block_removed", {"block_id": 2, "block_hash": "h2", "cache_level": "cpu"}),
    ("fault_injected", {"kind": "restore_failure", "claim_id": "c2", "request_id": "r1"}),
    # paths the hidden hostile cases took: a second request restoring the same claim, a second
    # state key, a claim-scoped block event without a position
    ("resident_claim_restore_required", {"claim_id": "c2", "request_id": "r2"}),
    ("resident_claim_restored", {"claim_id": "c2", "request_id": "r2", "restored_blocks": 1}),
    (
        "resident_claim_materialized",
        {"claim_id": "c2", "leading_blocks": 1, "checkpoint": {**CHECKPOINT, "value_hash": "vb"}},
    ),
    ("block_stored", {"block_id": 1, "block_hash": "h1", "claim_id": "c2"}),
    # a position's content in a new block (a restore's), beside the other content menus store there
    _stored(4, "h2", "c2", 0),
    # soft terms (issue 28): caps submitted, repeated or changed (with no decision stamp, so the
    # cap's end is unknown), and extensions: past a cap or binding (3 steps), a new or a longer
    # wall clock (3 ms), a shorter one on both clocks, one with no stamp, one of c1 (no term)
    ("resident_claim_submitted", CAPPED2),
    ("resident_claim_accepted", {**CAPPED2, "engine_step": 0, "t_ns": 0}),
    ("resident_claim_conditionally_accepted", {**CAPPED2, "max_duration_steps": 3, "reason": "longer cap"}),
    ("resident_claim_extended", {"claim_id": "c2", "duration_steps": 2, "engine_step": 1}),
    ("resident_claim_extended", {"claim_id": "c2", "duration_ms": 1, "t_ns": 2_000_000, "reason": "lease"}),
    (
        "resident_claim_extended",
        {"claim_id": "c2", "duration_steps": 1, "duration_ms": 1, "engine_step": 0, "t_ns": 0},
    ),
    ("resident_claim_extended", {"claim_id": "c2", "duration_steps": 3}),
    ("resident_claim_extended", {"claim_id": "c1", "duration_steps": 1, "engine_step": 0}),
)

MENUS = {"core": CORE_MENU, "full": FULL_MENU, "whole": WHOLE_MENU}


CLOSED = {"event": "trace_closed", "reason": "closed"}


def encode(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    """Header + events + `trace_closed` as trace v1 NDJSON, seq 1, 2, ... (complete traces)."""
    lines = [json.dumps(HEADER)]
    lines += [
        json.dumps({"seq": seq, "event": name, **fields}) for seq, (name, fields) in enumerate(events, 1)
    ]
    lines.append(json.dumps({"seq": len(events) + 1, **CLOSED}))
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True)
class CheckerVerdict:
    outcome: str
    rule: str | None
    message: str


Checker = Callable[[bytes], CheckerVerdict]


@dataclass(frozen=True)
class Disagreement:
    trace: tuple[tuple[str, dict[str, Any]], ...]
    oracle: Verdict
    checker: CheckerVerdict


@dataclass
class Report:
    length: int
    menu: str
    traces: int = 0
    states: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    rule_mismatches: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "length": self.length,
            "menu": self.menu,
            "traces": self.traces,
            "states": self.states,
            "seconds": round(self.seconds, 1),
            "oracle_outcomes": dict(sorted(self.outcomes.items())),
            "rule_mismatches": self.rule_mismatches,
            "disagreements": len(self.disagreements),
        }


def refinement_checker(data: bytes) -> CheckerVerdict:
    """`kvclaims.refinement.api.check_bytes`: outcome, rule (for a rejection) and why."""
    from kvclaims.refinement.api import check_bytes

    return _checker_verdict(check_bytes(data))


def refinement_checker_unshrunk(data: bytes) -> CheckerVerdict:
    """The same verdict as `refinement_checker` without the minimal counterexample prefix that
    `check_source` derives after a rejection (its cost is quadratic in the projection, and
    outcome, rule and message do not depend on it). For long mutation runs."""
    from kvclaims.refinement.api import DEFAULT_BUDGET, _Run
    from kvclaims.refinement.sources import detect, open_source

    opener = lambda: io.BytesIO(data)  # noqa: E731
    fmt, _ = detect(opener)  # unrecognised input is read as trace v1, whose reader says why
    return _checker_verdict(
        _Run("<bytes>", fmt, DEFAULT_BUDGET).check(lambda: open_source(opener(), fmt, registry=None))
    )


def _checker_verdict(verdict: Any) -> CheckerVerdict:
    found = verdict.counterexample
    if found is not None:
        return CheckerVerdict(verdict.outcome.value, found.rule.value, found.message)
    return CheckerVerdict(verdict.outcome.value, None, verdict.finding.message if verdict.finding else "")


def _extend(state: Oracle, name: str, fields: dict[str, Any], seq: int) -> tuple[Verdict, Oracle | None]:
    """The oracle's verdict on the trace that ends with this event, and the state to extend
    from (None when the event decided the trace)."""
    try:
        event = parse_event(json.dumps({"seq": seq, "event": name, **fields}).encode(), seq - 1)
    except BadInput as error:
        return Verdict("invalid", message=str(error)), None
    after = state.clone()
    try:
        after.step(event)
    except Violation as violation:
        return Verdict(REJECTED, violation.rule, seq + 1, violation.message), None
    return conclude(after), after


def explore(
    length: int,
    menu: str = "core",
    checker: Checker | None = refinement_checker,
    progress: Callable[[int, int, int], None] | None = None,
) -> Report:
    """Compare every trace up to `length` events (see the module docstring)."""
    events = MENUS[menu]
    report = Report(length, menu)
    start = time.perf_counter()
    root = Oracle(USABLE, HEADER["block_size"])
    seen = {root.key()}
    frontier: list[tuple[tuple[int, ...], Oracle]] = [((), root)]
    for depth in range(1, length + 1):
        following: list[tuple[tuple[int, ...], Oracle]] = []
        for prefix, state in frontier:
            for index, (name, fields) in enumerate(events):
                verdict, after = _extend(state, name, fields, depth)
                trace = tuple(events[i] for i in (*prefix, index))
                report.traces += 1
                report.outcomes[verdict.outcome] += 1
                if checker is not None:
                    _compare(report, trace, verdict, checker(encode(list(trace))))
                if after is not None:
                    key = after.key()
                    if key not in seen:
                        seen.add(key)
                        following.append(((*prefix, index), after))
        frontier = following
        if progress is not None:
            progress(depth, len(seen), report.traces)
    report.states = len(seen)
    report.seconds = time.perf_counter() - start
    return report


def _compare(report: Report, trace: tuple[Any, ...], oracle: Verdict, checker: CheckerVerdict) -> None:
    if checker.outcome != oracle.outcome:
        report.disagreements.append(Disagreement(trace, oracle, checker))
    elif checker.outcome == REJECTED and checker.rule != oracle.rule:
        report.rule_mismatches += 1


def _generic(text: str) -> str:
    for word in ("c1", "c2", "r1", "r2"):
        text = text.replace(word, "_")
    return "".join("#" if ch.isdigit() else ch for ch in text)


def classify(disagreement: Disagreement) -> str:
    """A disagreement's signature: both verdicts and the reason of the side that objected
    (ids and numbers taken out)."""
    oracle, checker = disagreement.oracle, disagreement.checker
    reason = oracle.message if oracle.outcome != "accepted" else checker.message
    return (
        f"oracle {oracle.outcome}/{oracle.rule or '-'} vs checker {checker.outcome}/{checker.rule or '-'}: "
        f"{_generic(reason)}"
    )


def _lines(trace: tuple[tuple[str, dict[str, Any]], ...]) -> Iterator[str]:
    for name, fields in trace:
        yield f"    {name} {json.dumps(fields, sort_keys=True)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvclaims.oracle.exhaustive", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--length", type=int, default=4, help="longest trace, in events")
    parser.add_argument("--menu", choices=sorted(MENUS), default="core")
    parser.add_argument("--no-checker", action="store_true", help="count the oracle's states only")
    parser.add_argument("--examples", type=int, default=1, help="shortest example traces shown per class")
    args = parser.parse_args(argv)

    def progress(depth: int, states: int, traces: int) -> None:
        print(f"depth {depth}: {states} states, {traces} traces", file=sys.stderr, flush=True)

    checker = None if args.no_checker else refinement_checker
    report = explore(args.length, args.menu, checker, progress)
    print(json.dumps(report.summary(), indent=2))
    classes: dict[str, list[Disagreement]] = {}
    for disagreement in report.disagreements:
        classes.setdefault(classify(disagreement), []).append(disagreement)
    for signature, members in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{len(members):7d}  {signature}")
        for example in sorted(members, key=lambda d: len(d.trace))[: args.examples]:
            print("\n".join(_lines(example.trace)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
