"""The controls of DESIGN 4: each is rejected with the right rule, and each is paired with a
conforming twin that has exactly the same event counts, so a checker that counts events (like
the seeds' own gates) could not tell them apart. Only order, identity or arithmetic differ."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.vocabulary import ConformanceRule

R = ConformanceRule


def materialized(
    trace: TraceBuilder, *claims: str, mode: str = "offloadable", blocks: int = 4
) -> TraceBuilder:
    for claim_id in claims:
        trace.accept(claim_id, mode=mode, blocks=blocks).store_prefix(claim_id, blocks).materialize(
            claim_id, blocks
        )
    return trace


def offloaded(trace: TraceBuilder, *claims: str) -> TraceBuilder:
    materialized(trace, *claims)
    for claim_id in claims:
        trace.offload(claim_id)
    return trace


def wrong_claim_failure(control: bool) -> TraceBuilder:
    trace = offloaded(TraceBuilder(usable_blocks=80), "A", "B").admit("r1").restore_required("A", "r1")
    failed = "B" if control else "A"
    trace.restoration_failed(failed, "r1").conflict("r1", [failed], reason="restoration_failed")
    return trace.finish("r1")


def unclaimed_failure(control: bool) -> TraceBuilder:
    trace = offloaded(TraceBuilder(usable_blocks=80), "A").admit("r1").restore_required("A", "r1")
    failed = "unclaimed:gpu-block-7" if control else "A"
    trace.restoration_failed(failed, "r1").conflict("r1", [failed], reason="restoration_failed")
    return trace.finish("r1")


def fallback_recompute(control: bool) -> TraceBuilder:
    """The failed request reports its (recomputed) reuse as satisfying the claim."""
    trace = offloaded(TraceBuilder(usable_blocks=80), "A").admit("r1").admit("r2")
    trace.restore_required("A", "r1").restoration_failed("A", "r1")
    if control:
        trace.reuse("r1", "A", 4).restore_required("A", "r2").restored("A", "r2")
        trace.conflict("r2", ["A"], reason="restoration_failed")
    else:
        trace.conflict("r1", ["A"], reason="restoration_failed").restore_required("A", "r2").restored(
            "A", "r2"
        )
        trace.reuse("r2", "A", 4)
    return trace.finish("r1").finish("r2")


def ordinary_offload_without_claim(control: bool) -> TraceBuilder:
    trace = materialized(TraceBuilder(usable_blocks=80), "A").offload(
        "object:ordinary-prefix" if control else "A"
    )
    return trace.admit("r1").restore_required("A", "r1").restored("A", "r1").reuse("r1", "A", 4).finish("r1")


def generic_counters(control: bool) -> TraceBuilder:
    """A generic failure counter (a fault naming no claim) is taken as the refusal's cause."""
    trace = offloaded(TraceBuilder(usable_blocks=80), "A").admit("r1").restore_required("A", "r1")
    trace.add("fault_injected", kind="generic_kv_transfer_failed_counter")
    if control:
        trace.conflict("r1", ["A"], reason="restoration_failed").restoration_failed("A", "r1")
    else:
        trace.restoration_failed("A", "r1").conflict("r1", ["A"], reason="restoration_failed")
    return trace.finish("r1")


def restore_after_reuse(control: bool) -> TraceBuilder:
    trace = offloaded(TraceBuilder(usable_blocks=80), "A").admit("r1").restore_required("A", "r1")
    if control:
        trace.reuse("r1", "A", 4).restored("A", "r1")
    else:
        trace.restored("A", "r1").reuse("r1", "A", 4)
    return trace.finish("r1")


def post_hoc_claim_naming(control: bool) -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80)
    if control:
        trace.store_prefix("A", 4).materialize("A", 4).accept("A", mode="offloadable")
    else:
        trace.accept("A", mode="offloadable").store_prefix("A", 4).materialize("A", 4)
    return trace.admit("r1").reuse("r1", "A", 4).finish("r1")


def smeared_blocking_ids(control: bool) -> TraceBuilder:
    """A capacity refusal that also blames a best_effort claim (no preservation obligation)."""
    trace = materialized(TraceBuilder(usable_blocks=80), "A", mode="hard_protected", blocks=60)
    materialized(trace, "B", mode="best_effort", blocks=10)
    blocking = ["A", "B"] if control else ["A"]
    trace.conflict("r1", blocking, protected=60, active=70)
    return trace.finish("r1")


def duplicate_ownership(control: bool) -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("A", owner="tenant-a")
    trace.accept("A" if control else "B", owner="tenant-b")
    return trace.store_prefix("A", 4).materialize("A", 4)


def arithmetic_mismatch(control: bool) -> TraceBuilder:
    """The anchor's live trace: usable 68, 40 + 46 = 86, shortfall recorded as 19."""
    trace = materialized(TraceBuilder(usable_blocks=68), "A", mode="hard_protected", blocks=40)
    trace.conflict("r1", ["A"], refused=False, protected=40, active=46, shortfall=19 if control else None)
    return trace.conflict("r1", ["A"], protected=40, active=46).finish("r1")


def silent_harm(control: bool) -> TraceBuilder:
    """The block loss that breaks A's predicate is reported as harm of B, whose blocks are intact."""
    trace = materialized(TraceBuilder(usable_blocks=80), "A", "B", mode="hard_protected")
    harmed = "B" if control else "A"
    return trace.remove_block("A", 0).claim_event("harmed", harmed, leading_blocks=0, required_blocks=4)


def harm_after_demotion(control: bool) -> TraceBuilder:
    trace = materialized(TraceBuilder(usable_blocks=80), "A", "B", mode="hard_protected")
    trace.claim_event("demoted", "A" if control else "B")
    return trace.remove_block("A", 0).claim_event("harmed", "A", leading_blocks=0, required_blocks=4)


CONTROLS: dict[str, tuple[Callable[[bool], TraceBuilder], ConformanceRule]] = {
    "wrong-claim failure": (wrong_claim_failure, R.offload_order),
    "unclaimed failure": (unclaimed_failure, R.identity),
    "fallback recompute counted as restoration": (fallback_recompute, R.offload_order),
    "ordinary offload without claim": (ordinary_offload_without_claim, R.identity),
    "generic counters": (generic_counters, R.attribution),
    "restore after reuse": (restore_after_reuse, R.offload_order),
    "post-hoc claim naming": (post_hoc_claim_naming, R.identity),
    "smeared blocking ids": (smeared_blocking_ids, R.attribution),
    "duplicate ownership": (duplicate_ownership, R.identity),
    "arithmetic mismatch": (arithmetic_mismatch, R.capacity_arithmetic),
    "silent harm": (silent_harm, R.no_silent_harm),
    "harm after demotion": (harm_after_demotion, R.lifecycle),
}


def event_counts(trace: TraceBuilder) -> Counter[str]:
    return Counter(event["event"] for event in trace.events)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_control_is_rejected_with_its_rule_while_its_same_count_twin_is_accepted(name: str) -> None:
    build, rule = CONTROLS[name]
    twin, control = build(False), build(True)
    assert event_counts(twin) == event_counts(control), "a count-based checker must not tell them apart"
    accepted = check_bytes(twin.ndjson())
    assert accepted.outcome is Outcome.accepted, accepted.reason
    rejected = check_bytes(control.ndjson())
    assert rejected.outcome is Outcome.rejected, rejected.reason
    assert rejected.rule is rule, rejected.reason
    assert rejected.counterexample is not None and rejected.counterexample.minimal_prefix
    assert rejected.counterexample.minimal_prefix[-1].line == rejected.counterexample.line


def test_every_design_control_has_a_case() -> None:
    assert len(CONTROLS) == 12
