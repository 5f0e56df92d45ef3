"""`kvclaims.testing`: its strategies produce what they promise (inputs a MicroRuntime takes,
traces the checker accepts) and its machine runs as a runtime author would subclass it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.lab.fuzz_settings import DETERMINISTIC
from kvclaims.microruntime.runtime import MicroRuntime
from kvclaims.microruntime.tracing import TraceBuffer
from kvclaims.refinement import Outcome, check_bytes
from kvclaims.spec.tracefile import closing_line
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.testing import (
    OBJECTS,
    ClaimSpec,
    RequestSpec,
    assert_refines,
    claim_specs,
    fresh_machine,
    request_specs,
    run_machine,
    valid_traces,
)

BOUNDED = settings(DETERMINISTIC, max_examples=40)


@BOUNDED
@given(
    st.lists(claim_specs(), min_size=1, max_size=6, unique_by=lambda c: c.claim_id),
    st.lists(request_specs(), max_size=6, unique_by=lambda r: r.request_id),
)
def test_drawn_claims_and_requests_are_taken_by_a_micro_runtime(
    claims: list[ClaimSpec], requests: list[RequestSpec]
) -> None:
    buffer = TraceBuffer()
    runtime = MicroRuntime(48, sink=buffer.append)
    for object_id, blocks in OBJECTS.items():
        runtime.register_object(object_id, blocks)
    for claim in claims:
        runtime.submit_claim(claim)  # an InputError here is a strategy that drew bad input
    for request in requests:
        runtime.submit_request(request)
    runtime.close()
    trace = [runtime.header, *buffer.events]
    closing = closing_line(buffer.events[-1]["seq"] + 1 if buffer.events else 0)
    assert_refines(b"".join(json.dumps(doc).encode() + b"\n" for doc in trace) + closing)


@BOUNDED
@given(claim_specs(objects={"tiny": 1}, modes=(ProtectionMode.expiring,)))
def test_claim_specs_respect_the_objects_and_modes_given(claim: ClaimSpec) -> None:
    assert (claim.object_id, claim.footprint_blocks, claim.required_blocks) == ("tiny", 1, 1)
    assert claim.mode is ProtectionMode.expiring and claim.duration_steps


@settings(BOUNDED, max_examples=15)
@given(valid_traces(max_events=200))
def test_valid_traces_are_accepted_by_the_checker(trace: bytes) -> None:
    verdict = check_bytes(trace)
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.steps >= 20


@pytest.mark.parametrize(
    "build",
    [
        lambda: claim_specs(objects={}),
        lambda: request_specs(max_blocks=0),
        lambda: valid_traces(min_events=0),
    ],
)
def test_strategies_refuse_impossible_parameters(build: object) -> None:
    with pytest.raises(ValueError):
        build()  # type: ignore[operator]


def test_the_machine_runs_as_a_subclass_with_its_own_coverage() -> None:
    machine = fresh_machine(usable_blocks=32)
    coverage = run_machine(machine, settings(BOUNDED, max_examples=5, stateful_step_count=10))
    assert coverage.examples >= 5 and coverage.events > 0 and machine.coverage is coverage
