"""The system model's API: init / step / step_run / finish / describe, on pydantic events and
on the checker's msgspec Structs alike."""

from __future__ import annotations

import io
import json

import pytest

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.decoding import convert_event
from kvclaims.refinement.testing import TraceBuilder, generate_valid_trace
from kvclaims.spec.trace import EVENT_MODELS, TraceHeader
from kvclaims.spec.vocabulary import ConformanceRule
from kvclaims.statemachine import system
from kvclaims.statemachine.lifecycle import Phase


def builder() -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("C", blocks=2).store_prefix("C", 2).materialize("C", 2)
    return trace.admit("r").reuse("r", "C", 2).finish("r")


def test_step_advances_the_same_state_and_describes_it() -> None:
    trace = builder()
    state = system.init(TraceHeader.model_validate(trace.header))
    for at, document in enumerate(trace.events, start=2):
        event = EVENT_MODELS[document["event"]].model_validate(document)
        assert system.step(state, event, at) is state
    assert system.finish(state) is None
    assert state.claims["C"].phase is Phase.materialized and state.claims["C"].leading == 2
    assert state.reserved_blocks == 2 and state.admitted_live_blocks == 0
    assert "1 materialized" in system.describe(state)


def test_a_violation_names_its_rule_position_and_ids() -> None:
    state = system.init(TraceHeader(kvclaims_trace=1, usable_blocks=80))
    event = convert_event({"seq": 0, "event": "resident_claim_released", "claim_id": "X"})
    violation = system.step(state, event, 7)
    assert isinstance(violation, system.Violation)
    assert violation.rule is ConformanceRule.identity and violation.at == 7 and violation.ids == {"X"}
    assert violation.event == "resident_claim_released"


def test_finish_names_what_the_trace_still_owes() -> None:
    trace = TraceBuilder(usable_blocks=80).accept("C", blocks=2).store_prefix("C", 2)
    trace.remove_block("C", 0, named=False)
    state = system.init(TraceHeader.model_validate(trace.header))
    assert system.step_run(state, [convert_event(e) for e in trace.events], 2) is None
    owed = system.finish(state)
    assert (
        owed is not None and owed.rule is ConformanceRule.no_silent_harm and owed.event == system.END_OF_TRACE
    )


def test_step_run_is_step_folded_over_the_run() -> None:
    out = io.BytesIO()
    generate_valid_trace(out, 20_000, seed=3)
    lines = out.getvalue().splitlines()
    header = TraceHeader.model_validate_json(lines[0])
    # the model judges the events between the header and the writer's trace_closed
    assert json.loads(lines[-1])["event"] == "trace_closed"
    events = [convert_event(json.loads(line)) for line in lines[1:-1]]
    by_run, by_step = system.init(header), system.init(header)
    assert system.step_run(by_run, events, 2) is None
    for at, event in enumerate(events, start=2):
        assert system.step(by_step, event, at) is by_step
    assert system.finish(by_run) is None and system.finish(by_step) is None
    assert system.witnesses(by_run) == system.witnesses(by_step)
    assert (by_run.steps, by_run.reserved_blocks, len(by_run.claims)) == (
        by_step.steps,
        by_step.reserved_blocks,
        len(by_step.claims),
    )


def test_a_second_in_place_resume_names_its_kv_key_before_its_checkpoint() -> None:
    """Seed 002: each hybrid resume is one restore where both keys meet; the KV key restored
    for an earlier resume does not stand in for the next one's."""
    checkpoint = {"boundary": 2, "payload_hash": "p", "value_hash": "v"}

    def build(bad: bool) -> TraceBuilder:
        trace = TraceBuilder(usable_blocks=80).accept("C", blocks=2, two_key=True).store_prefix("C", 2)
        trace.materialize("C", 2, checkpoint=checkpoint)
        for request_id in ("r1", "r2"):
            trace.admit(request_id).restore_required("C", request_id)
            if bad and request_id == "r2":
                trace.claim_event("checkpoint_restored", "C", **checkpoint).restored(
                    "C", request_id, blocks=2
                )
            else:
                trace.restored("C", request_id, blocks=2).claim_event(
                    "checkpoint_restored", "C", **checkpoint
                )
            trace.reuse(request_id, "C", 2).finish(request_id)
        return trace

    verdicts = []
    for bad in (True, False):
        trace = build(bad)
        state = system.init(TraceHeader.model_validate(trace.header))
        verdicts.append(
            system.step_run(state, [convert_event(e) for e in trace.events], 2) or system.finish(state)
        )
    assert len(build(True).events) == len(build(False).events)
    violation, conforming = verdicts
    assert isinstance(violation, system.Violation) and violation.rule is ConformanceRule.hybrid_two_key
    assert conforming is None


def _hold_the_shared_prefix(trace: TraceBuilder, claim: str) -> None:
    """`claim` stores its two positions in blocks 0 and 1 with the same contents as every other
    claim that does: one cached prefix, held by each of them."""
    for position in range(2):
        trace.add(
            "block_stored", block_id=position, block_hash=f"h{position}", claim_id=claim, position=position
        )


def _sharing_trace(bystanders: int, conflicts: int) -> TraceBuilder:
    """Claims A and B hold the same two blocks (one content cached once, held by both), a
    bystander claim holds `bystanders` blocks, then `conflicts` refusals blame A and B with the
    exact protected term: each forces an exact count (their footprints, summed, overcount)."""
    trace = TraceBuilder(usable_blocks=bystanders + 8)
    trace.accept("A", blocks=2).accept("B", blocks=2).accept("Z", blocks=bystanders)
    for claim in ("A", "B"):
        _hold_the_shared_prefix(trace, claim)
    trace.store_prefix("Z", bystanders).materialize("A", 2).materialize("B", 2).materialize("Z", bystanders)
    for number in range(conflicts):
        trace.conflict(f"r{number}", ["A", "B"], protected=2, active=bystanders + 7)
    return trace


def _checked(trace: TraceBuilder) -> tuple[system.SystemState, system.Violation | None]:
    state = system.init(TraceHeader.model_validate(trace.header))
    return state, system.step_run(state, [convert_event(e) for e in trace.events], 2)


def test_an_exact_count_visits_the_blamed_claims_blocks_not_every_tracked_block() -> None:
    few, violation = _checked(_sharing_trace(bystanders=5, conflicts=50))
    assert violation is None and system.finish(few) is None
    many, violation = _checked(_sharing_trace(bystanders=5_000, conflicts=50))
    assert violation is None and system.finish(many) is None
    # the counts walk A's and B's maps and blocks (before: every tracked block, the bystander's too)
    assert many.scanned == few.scanned > 0


def test_re_storing_the_first_block_of_a_long_prefix_again_and_again_runs_out_of_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each re-store of position 0 re-extends the leading prefix over the whole footprint: a
    walk per event, charged, so the attack ends inconclusive instead of quadratic."""
    monkeypatch.setattr(system.kernel, "SCAN_ALLOWANCE", 10_000)
    monkeypatch.setattr(system.kernel, "SCAN_PER_STEP", 1)
    trace = TraceBuilder(usable_blocks=4_000).accept("A", blocks=1, footprint=2_000)
    trace.store_prefix("A", 2_000).materialize("A", 2_000)
    for _ in range(20):
        trace.remove_block("A", 0).store_prefix("A", 1)
    state = system.init(TraceHeader.model_validate(trace.header))
    with pytest.raises(system.OutOfBudget, match="walks over claim blocks"):
        system.step_run(state, [convert_event(e) for e in trace.events], 2)
    assert 10_000 + state.steps < state.scanned <= 10_000 + state.steps + 2_000  # stopped at once


def test_a_trace_forcing_exact_counts_at_every_event_runs_out_of_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(system.kernel, "SCAN_ALLOWANCE", 100)
    monkeypatch.setattr(system.kernel, "SCAN_PER_STEP", 1)
    trace = _sharing_trace(bystanders=4, conflicts=200)
    with pytest.raises(system.OutOfBudget, match="walks over claim blocks and prefixes"):
        _checked(trace)
    verdict = check_bytes(trace.ndjson())  # the driver: undecidable, never a pass or a violation
    assert verdict.outcome is Outcome.inconclusive and "walks over claim blocks" in verdict.reason


def _claims_on_one_prefix(claims: int) -> TraceBuilder:
    """`claims` claims of 2 blocks, all held in the same two device blocks (one cached prefix):
    their footprints sum past the 4-block pool, so each one that materializes forces an exact
    count of the distinct blocks the materialized claims hold."""
    trace = TraceBuilder(usable_blocks=4)
    for number in range(claims):
        claim = f"C{number}"
        trace.accept(claim, blocks=2)
        _hold_the_shared_prefix(trace, claim)
    return trace


def test_claims_sharing_one_prefix_fit_the_pool_counted_once() -> None:
    state, violation = _checked(_claims_on_one_prefix(40))
    assert violation is None and system.finish(state) is None
    assert state.resident_blocks == 80 > state.usable_blocks  # the bound overcounts; the count does not
    assert all(claim.phase is Phase.materialized for claim in state.claims.values()) and state.scanned > 0


def test_materializing_many_sharing_claims_runs_out_of_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each materialization counts the blocks of every materialized claim: charged, so many
    claims on one prefix end inconclusive instead of quadratic."""
    monkeypatch.setattr(system.kernel, "SCAN_ALLOWANCE", 1_000)
    monkeypatch.setattr(system.kernel, "SCAN_PER_STEP", 1)
    with pytest.raises(system.OutOfBudget, match="walks over claim blocks"):
        _checked(_claims_on_one_prefix(100))


def test_sharing_claims_whose_distinct_blocks_exceed_the_pool_overcommit_it() -> None:
    """The twin of the test above: the count is exact in both directions (a block missed by the
    per-claim index would pass an overcommitted pool)."""
    trace = _claims_on_one_prefix(2).accept("Z", blocks=3)
    for position in range(3):
        trace.add(
            "block_stored", block_id=10 + position, block_hash=f"z{position}", claim_id="Z", position=position
        )
    _, violation = _checked(trace)
    assert violation is not None and violation.rule is ConformanceRule.capacity_state
    assert "5 blocks held" in violation.message


@pytest.mark.parametrize("run", [1, 7, 10_000])
def test_a_budget_runs_out_at_the_same_event_however_the_events_are_batched(
    run: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan allowance counts the steps up to the event that walks, not the rest of its run,
    and the event that runs out is named and not counted: a reader's chunking (one chunk, line
    by line, read ahead) cannot move a budget verdict."""
    monkeypatch.setattr(system.kernel, "SCAN_ALLOWANCE", 100)
    monkeypatch.setattr(system.kernel, "SCAN_PER_STEP", 1)
    events = [convert_event(e) for e in _sharing_trace(bystanders=4, conflicts=200).events]
    state = system.init(TraceHeader.model_validate(_sharing_trace(bystanders=4, conflicts=200).header))
    with pytest.raises(system.OutOfBudget) as exhausted:
        for start in range(0, len(events), run):
            assert system.step_run(state, events[start : start + run], 2 + start) is None
    one_by_one = system.init(TraceHeader.model_validate(_sharing_trace(bystanders=4, conflicts=200).header))
    with pytest.raises(system.OutOfBudget) as alone:
        for position, event in enumerate(events):
            assert system.step(one_by_one, event, 2 + position) is one_by_one
    assert exhausted.value.at == alone.value.at is not None
    assert state.steps == one_by_one.steps == alone.value.at - 2
    assert state.scanned == one_by_one.scanned
