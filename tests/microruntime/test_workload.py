"""A long generated workload: deterministic, busy in every part of the runtime, and its whole
trace is accepted by refinement."""

from __future__ import annotations

from pathlib import Path

from kvclaims.microruntime.policies import POLICIES
from kvclaims.microruntime.runtime import MicroRuntime
from kvclaims.microruntime.tracing import TraceBuffer, write_trace
from kvclaims.microruntime.workload import WorkloadShape, apply, generate
from kvclaims.refinement import check_trace

SHAPE = WorkloadShape(operations=3000, usable_blocks=512, objects=120)


def run() -> tuple[MicroRuntime, TraceBuffer]:
    buffer = TraceBuffer()
    runtime = MicroRuntime(SHAPE.usable_blocks, policy=POLICIES["full_arbiter"], sink=buffer.append)
    apply(runtime, generate(SHAPE))
    runtime.close()
    return runtime, buffer


def test_the_workload_is_deterministic() -> None:
    assert generate(SHAPE) == generate(SHAPE)
    assert run()[1].events == run()[1].events


def test_the_long_trace_is_accepted_and_exercises_claims_and_the_arbiter(tmp_path: Path) -> None:
    runtime, buffer = run()
    counts = buffer.counts()
    for event in (
        "block_removed",
        "resident_claim_materialized",
        "resident_claim_lost",
        "resident_claim_demoted",
    ):
        assert counts[event] > 0, event
    assert runtime.arbiter_log, "the workload never made the arbiter act"
    assert runtime.pool.census().conserved
    verdict = check_trace(write_trace(tmp_path / "workload.ndjson", runtime.header, buffer.events))
    assert verdict.outcome.value == "accepted", verdict.counterexample
