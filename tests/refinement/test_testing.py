"""The benchmark generator writes valid traces (the checker accepts them) that exercise the
behaviours the checker is meant to be fast on, and it is deterministic per seed."""

from __future__ import annotations

import io

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.testing import generate_valid_trace
from kvclaims.spec.vocabulary import TraceWitness as W


def generated(events: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    generate_valid_trace(buffer, events, seed=seed, live_claims=64)
    return buffer.getvalue()


def test_generated_traces_are_accepted_and_exercise_every_path() -> None:
    verdict = check_bytes(generated(40_000, seed=3))
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.events >= 40_000 and verdict.claims > 100 and verdict.requests > 1000
    exercised = {w.kind for w in verdict.witnesses}
    assert {
        W.restore_before_reuse,
        W.restoration_failure_fail_closed,
        W.multi_claim_attribution,
        W.capacity_conflict_attributed,
        W.demoted_before_loss,
        W.harm_reported,
        W.ordinary_eviction_without_claim,
    } <= exercised


def test_generation_is_deterministic_per_seed() -> None:
    assert generated(5_000, seed=1) == generated(5_000, seed=1)
    assert generated(5_000, seed=1) != generated(5_000, seed=2)
