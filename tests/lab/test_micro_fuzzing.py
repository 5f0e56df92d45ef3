"""The exported state machines: the CI profile reaches every lifecycle phase with every
invariant holding, finds the planted bug, and its traces are accepted by refinement."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import settings

from kvclaims.lab.fuzz_settings import bounded
from kvclaims.lab.micro_fuzzing import (
    MIN_USABLE_BLOCKS,
    Coverage,
    EmittedTraceCheck,
    InvariantBroken,
    MicroRuntimeMachine,
    PlantedBugMachine,
    SeededBatch,
    failing_example,
    fresh_machine,
    run_machine,
)
from kvclaims.microruntime.policies import POLICIES
from kvclaims.microruntime.runtime import MicroClaim, MicroRuntime
from kvclaims.microruntime.tracing import write_trace
from kvclaims.refinement import check_trace
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.statemachine.lifecycle import Phase

CI = settings.get_profile("ci")


@pytest.mark.slow
def test_ci_profile_reaches_every_lifecycle_phase_with_all_invariants_holding() -> None:
    coverage = run_machine(fresh_machine(), CI)
    assert coverage.phases == set(Phase), f"missed: {set(Phase) - coverage.phases}"
    assert coverage.examples >= CI.max_examples


PLANTED_BUG_FOUND = (
    "victim_exclusion_before_violation",  # the machine's own invariant
    "emitted_trace_accepted: [capacity_state]",  # the checker: a proof that leaves out a pinned block
)


@pytest.mark.slow
def test_ci_profile_finds_the_planted_victim_exclusion_bug() -> None:
    """The off-by-one pin is found, by the victim-exclusion invariant or by the refinement
    checker judging the emitted trace against the pool state, and by nothing else."""
    with pytest.raises((InvariantBroken, ExceptionGroup)) as caught:
        run_machine(fresh_machine(PlantedBugMachine), CI)
    failures = list(caught.value.exceptions) if isinstance(caught.value, ExceptionGroup) else [caught.value]
    for failure in failures:
        assert isinstance(failure, InvariantBroken), failure
        assert str(failure).startswith(PLANTED_BUG_FOUND), failure
        example = failing_example(failure)
        assert example[0].startswith("state = ") and len(example) > 1
        assert not any("victim_exclusion_before_violation" in line for line in example)


def test_the_planted_bug_really_is_off_by_one() -> None:
    """The same rules over the correct runtime pin the whole footprint; the bug pins one less."""
    correct, buggy = MicroRuntimeMachine(), PlantedBugMachine()
    for machine in (correct, buggy):
        machine.submit_claim(
            mode=ProtectionMode.hard_protected,
            object_id="doc-b",
            footprint_cut=0,
            required_cut=0,
            two_key=False,
            duration=1,
        )
        machine.materialize(index=0)
    assert correct.runtime.pool.census().pinned == 8
    assert buggy.runtime.pool.census().pinned == 7


class RefinementCheckedMachine(MicroRuntimeMachine):
    """Every example's whole trace also goes through `kvclaims.refinement.check_trace`."""

    coverage = Coverage()
    trace_dir: ClassVar[Path]
    verdicts: ClassVar[list[str]] = []

    def teardown(self) -> None:
        super().teardown()
        path = self.trace_dir / f"example-{len(self.verdicts)}.ndjson"
        verdict = check_trace(write_trace(path, self.runtime.header, self.buffer.events))
        type(self).verdicts.append(verdict.outcome.value)
        # a trace with no event at all (only ticks happened) has nothing to accept
        expected = "accepted" if self.buffer.events else "inconclusive"
        assert verdict.outcome.value == expected, verdict.counterexample or verdict.finding


def test_machine_traces_are_accepted_by_refinement(tmp_path: Path) -> None:
    RefinementCheckedMachine.trace_dir = tmp_path
    RefinementCheckedMachine.verdicts = []
    run_machine(RefinementCheckedMachine, settings(CI, max_examples=60))
    assert RefinementCheckedMachine.verdicts.count("accepted") >= 50


def test_a_small_pool_machine_runs_and_a_too_small_one_is_refused_clearly() -> None:
    """The documented override: a pool just large enough for every prefix object fuzzes with
    every invariant holding (active requests are capped at the pool); a smaller one is a clear
    error, not an InputError from deep inside a rule."""
    small = fresh_machine(MicroRuntimeMachine, usable_blocks=MIN_USABLE_BLOCKS)
    run_machine(small, bounded(max_examples=30, stateful_step_count=30))
    assert small.coverage.examples > 0
    too_small = fresh_machine(MicroRuntimeMachine, usable_blocks=MIN_USABLE_BLOCKS - 1)
    with pytest.raises(ValueError, match="MIN_USABLE_BLOCKS"):
        too_small()


HEADER = {"kvclaims_trace": 1, "usable_blocks": 80, "block_size": 16}
TERMS = {
    "claim_id": "c",
    "owner_scope": "t",
    "object_id": "o",
    "mode": "hard_protected",
    "footprint_blocks": 2,
    "predicate": {"kind": "leading_prefix_at_least", "blocks": 2},
}


def _fed(*events: dict[str, object]) -> EmittedTraceCheck:
    check = EmittedTraceCheck(HEADER)
    for seq, event in enumerate(events):
        check.feed({"seq": seq, **event})
    return check


def test_the_streamed_check_rejects_an_illegal_step_where_it_happens_and_then_stops() -> None:
    check = _fed({"event": "resident_claim_materialized", "claim_id": "c", "leading_blocks": 2})
    assert check.failure is not None and check.failure.startswith("[")
    first = check.failure
    check.feed({"seq": 9, "event": "resident_claim_accepted", **TERMS})
    assert check.failure == first


def test_the_streamed_check_needs_increasing_seq_known_events_and_owed_outcomes() -> None:
    accepted = {"event": "resident_claim_accepted", **TERMS}
    repeated = EmittedTraceCheck(HEADER)
    repeated.feed({"seq": 3, **accepted})
    assert repeated.feed({"seq": 3, "event": "resident_claim_released", "claim_id": "c"}) is not None
    assert _fed({"event": "something_new"}).failure is not None
    stored = [
        {"event": "block_stored", "block_id": p, "block_hash": f"o#{p}", "claim_id": "c", "position": p}
        for p in (0, 1)
    ]
    materialized = {"event": "resident_claim_materialized", "claim_id": "c", "leading_blocks": 2}
    silent = _fed(
        accepted,
        *stored,
        materialized,
        {"event": "block_removed", "block_id": 1, "block_hash": "o#1", "claim_id": "c", "position": 1},
    )
    assert silent.failure is None
    owed = silent.finish()
    assert owed is not None and "no_silent_harm" in owed
    clean = _fed(
        accepted, *stored, {"event": "resident_claim_materialized", "claim_id": "c", "leading_blocks": 2}
    )
    assert clean.finish() is None


class EarlyTimedExpiry(MicroRuntime):
    """Planted bug: a `duration_ms` claim is armed to expire one millisecond before its
    promised end (its duration, refreshed, extended or capped)."""

    def _arm_expiry(self, claim: MicroClaim) -> None:
        super()._arm_expiry(claim)
        end = claim.promised_end("ms")
        if end is not None:
            self.ledger.expire_at(claim, ms=end / 1_000_000 - 1)


class NeverTimedExpiry(MicroRuntime):
    """Planted bug: wall-clock durations are never armed (claims outlive their TTL)."""

    def _arm_expiry(self, claim: MicroClaim) -> None:
        if claim.spec.duration_ms is None:
            super()._arm_expiry(claim)


@pytest.mark.parametrize(
    ("runtime_class", "found"),
    [
        (EarlyTimedExpiry, "emitted_trace_accepted: [duration]"),
        (NeverTimedExpiry, "timed_claims_expire_on_time"),
    ],
)
def test_ci_profile_finds_planted_wall_clock_bugs(runtime_class: type[MicroRuntime], found: str) -> None:
    with pytest.raises((InvariantBroken, ExceptionGroup)) as caught:
        run_machine(fresh_machine(runtime_class=runtime_class), settings(CI, max_examples=200))
    failures = list(caught.value.exceptions) if isinstance(caught.value, ExceptionGroup) else [caught.value]
    assert all(str(f).startswith(found) for f in failures), failures


@pytest.mark.parametrize(
    ("runtime_class", "offset_ms", "phase", "found"),
    [
        (MicroRuntime, -1, Phase.accepted, None),  # 1 ms before the end: still responsible
        (MicroRuntime, 0, Phase.expired, None),  # at the end: expired, on time
        (MicroRuntime, 1, Phase.expired, None),
        (EarlyTimedExpiry, -1, Phase.expired, "emitted_trace_accepted: [duration]"),
    ],
)
def test_advancing_to_a_term_end_lands_on_the_instants_an_off_by_one_shows(
    runtime_class: type[MicroRuntime], offset_ms: int, phase: Phase, found: str | None
) -> None:
    """The boundary rule moves the clock to the end the trace promises (its acceptance's t_ns
    plus duration_ms here), offset by a millisecond: the correct runtime expires the claim at
    the end and not before; the runtime that arms it 1 ms early is caught by the checker."""
    machine = fresh_machine(runtime_class=runtime_class)()
    machine.submit_timed_claim(object_id="doc-b", duration_ms=50, refresh_on_hit=False)
    (claim,) = machine.runtime.claims.values()
    accepted_at = machine.runtime.now_ns
    machine.advance_clock_to_a_term_end(index=0, offset_ms=offset_ms)
    assert machine.runtime.now_ns == accepted_at + (50 + offset_ms) * 1_000_000
    assert claim.phase is phase
    machine.timed_claims_expire_on_time()
    if found is None:
        machine.emitted_trace_accepted()
    else:
        with pytest.raises(InvariantBroken, match=re.escape(found)):
            machine.emitted_trace_accepted()


def test_ci_profile_holds_under_stock_continuum_ttl_pins() -> None:
    """Job turns under the stock TTL-pin policy (claims rejected, the runtime pins finished
    turns itself): every invariant holds and pins lapse."""
    machine = fresh_machine(policy=POLICIES["continuum_ttl_pin"])
    coverage = run_machine(machine, settings(CI, max_examples=150))
    assert coverage.examples >= 150


def test_job_turns_keep_continuum_pins_as_timed_claims() -> None:
    """A job's non-last turn pins its context as a duration_ms claim; the next turn reuses it
    and releases it; the clock ends an unreused pin."""
    machine = MicroRuntimeMachine()
    machine.job_turn(job=0, last=False, pin_ms=100)
    (pin,) = machine.job_pins.values()
    machine.job_turn(job=0, last=False, pin_ms=100)
    assert machine.runtime.claims[pin].phase is Phase.released
    (second,) = machine.job_pins.values()
    machine.advance_clock(ms=100)
    assert machine.runtime.claims[second].phase is Phase.expired
    machine.timed_claims_expire_on_time()
    machine.emitted_trace_accepted()
    machine.teardown()


def test_a_seeded_batch_is_a_function_of_its_seed_not_of_the_process() -> None:
    """Hypothesis draws literals of the local modules a process imported; a seeded batch must
    not (a CLI, a pool worker and a Ray worker import different modules): `kvclaims fuzz
    --seeds` in a fresh process gives each seed the outcome it has here, and seeds differ."""
    batch = SeededBatch("full_arbiter", examples=8)
    here = [batch(seed).to_json() for seed in (3, 4)]
    argv = [sys.executable, "-m", "kvclaims", "fuzz", "--seeds", "2", "--first-seed", "3", "--examples", "8"]
    done = subprocess.run([*argv, "--jobs", "1", "--json"], capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout.decode().splitlines()[-1])["seeds"] == here
    assert here[0] != here[1] and here[0]["failure"] is None and here[0]["examples"] >= 8
