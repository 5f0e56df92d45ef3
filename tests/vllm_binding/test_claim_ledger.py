"""The binding keeps claims only through the ledger: its claims' phases are the model's, and
an illegal step it attempts raises there, before anything is emitted or unpinned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvclaims.spec.errors import InputError
from kvclaims.statemachine.ledger import ConflictAction, IllegalTransition
from kvclaims.statemachine.lifecycle import Event, Phase
from kvclaims.statemachine.requests import RequestEvent, RequestPhase
from kvclaims.vllm_binding.config import ADDITIONAL_CONFIG_KEY, BindingConfig

BLOCK = 16


def _lane(tmp_path: Path):  # type: ignore[no-untyped-def]
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    binding = BindingConfig(trace_path=str(tmp_path / "trace.ndjson"))
    return SchedulerLane(LaneSpec(usable_blocks=80, binding=binding))


def _claimed(lane, claim_id: str, mode: str, blocks: int) -> None:  # type: ignore[no-untyped-def]
    from kvclaims.lab.scheduler_lane import prompt_tokens

    extra = {"kvclaims_claim_id": claim_id, "kvclaims_mode": mode, "kvclaims_footprint_blocks": blocks}
    lane.add(f"source-{claim_id}", prompt_tokens(claim_id, blocks * BLOCK), extra_args=extra)
    lane.run()


def _events(path: Path, kind: str) -> int:
    lines = path.read_text().splitlines()[1:]  # after the header
    return sum(json.loads(line)["event"] == kind for line in lines)


@pytest.mark.vllm
def test_the_binding_moves_its_claims_by_the_model(tmp_path: Path) -> None:
    lane = _lane(tmp_path)
    _claimed(lane, "c", "hard_protected", 10)
    ledger = lane.arbiter.ledger
    record = ledger.claims["c"]
    assert record.phase is Phase.materialized
    assert (Phase.accepted, Event.materialize, Phase.materialized) in ledger.transitions_taken
    assert list(ledger.protecting) == ["c"]
    lane.close()


@pytest.mark.vllm
def test_an_illegal_demotion_by_the_binding_raises_where_it_is_attempted(tmp_path: Path) -> None:
    lane = _lane(tmp_path)
    _claimed(lane, "c", "hard_protected", 10)
    _claimed(lane, "be", "best_effort", 4)
    arbiter = lane.arbiter
    record = arbiter.registry.claims["c"]
    with arbiter.entry():
        arbiter.demote(record, "first demotion")
    assert record.phase is Phase.demoted
    pins = arbiter.pinned_blocks()
    with pytest.raises(IllegalTransition, match=r"claim c: demote is illegal in phase demoted") as raised:
        with arbiter.entry():
            arbiter.demote(record, "a second demotion")
    assert (raised.value.phase, raised.value.event) == ("demoted", "demote")
    with pytest.raises(IllegalTransition, match=r"claim be: block is illegal in phase materialized"):
        arbiter.ledger.blame([arbiter.registry.claims["be"]])  # a best_effort claim never blocks
    assert record.phase is Phase.demoted and arbiter.pinned_blocks() == pins
    lane.close()
    assert _events(tmp_path / "trace.ndjson", "resident_claim_demoted") == 1  # nothing was emitted


@pytest.mark.vllm
def test_request_phases_move_by_the_request_lifecycle() -> None:
    from kvclaims.vllm_binding.arbiter import RequestBook

    book = RequestBook(trace_id="r")
    book.step(RequestEvent.admit)
    assert book.phase is RequestPhase.admitted and not book.queued
    with pytest.raises(IllegalTransition, match=r"request r: refuse_capacity is illegal in phase admitted"):
        book.step(RequestEvent.refuse_capacity)  # an admitted request is deferred before it is refused
    assert book.phase is RequestPhase.admitted


def test_one_conflict_action_enum_and_the_operator_values_still_parse() -> None:
    config = BindingConfig.from_additional_config(
        {ADDITIONAL_CONFIG_KEY: {"conflict_actions": {"demotable": "demote", "expiring": "defer"}}}
    )
    assert set(config.conflict_actions.values()) == {ConflictAction.demote, ConflictAction.defer}
    with pytest.raises(InputError, match="demotable may not offload_resident"):
        BindingConfig.from_additional_config(
            {ADDITIONAL_CONFIG_KEY: {"conflict_actions": {"demotable": "offload_resident"}}}
        )
