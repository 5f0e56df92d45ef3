"""Small trace v1 runs that evidence and refuse, shared by the evidence tests."""

from __future__ import annotations

from kvclaims.refinement.testing import TraceBuilder


def offloadable_run(*, hard_claim: bool = False) -> TraceBuilder:
    """Paths A and B for one offloadable claim C, and a reported harm of another, D; with
    `hard_claim`, a hard_protected claim H accepted and materialized besides (so identity is
    witnessed for claims of two modes)."""
    trace = TraceBuilder(usable_blocks=80)
    for claim_id in ("C", "D"):
        trace.accept(claim_id, mode="offloadable").store_prefix(claim_id, 4).materialize(claim_id, 4)
    if hard_claim:
        trace.accept("H", mode="hard_protected").store_prefix("H", 4).materialize("H", 4)
    trace.offload("C").admit("a").restore_required("C", "a").restored("C", "a").reuse("a", "C", 4).finish("a")
    trace.offload("C").admit("b").restore_required("C", "b").restoration_failed("C", "b")
    trace.conflict("b", ["C"], reason="restoration_failed").finish("b")
    trace.remove_block("D", 0).claim_event("harmed", "D", leading_blocks=0, required_blocks=4)
    return trace


def rejected_run(*, hard_claim: bool = False) -> TraceBuilder:
    """Harm reported after the claim was demoted: post-release loss is not harm."""
    trace = offloadable_run(hard_claim=hard_claim).claim_event("demoted", "C")
    return trace.claim_event("harmed", "C", leading_blocks=0, required_blocks=4)
