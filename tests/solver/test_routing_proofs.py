"""The routing rules in Z3: obligations proved with witnesses, and one class of fleet histories
per rule that the fleet check (`check_fleet`) rejects with exactly that rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvclaims.refinement.fleet import check_fleet
from kvclaims.refinement.testing import write_routed_history
from kvclaims.refinement.verdict import Outcome
from kvclaims.solver.proofs import Verdict, run_obligation
from kvclaims.solver.routing_proofs import OBLIGATIONS, ROUTING_CLASSES, accepted_histories, find_histories
from kvclaims.solver.z3env import Job, SolverBudgetExhausted
from kvclaims.spec.vocabulary import ConformanceRule


@pytest.mark.parametrize("obligation", OBLIGATIONS, ids=lambda o: o.name)
def test_every_obligation_is_proved_with_a_vacuity_witness(obligation) -> None:  # type: ignore[no-untyped-def]
    result = run_obligation(obligation)
    assert result.verdict is Verdict.proved, result.detail
    assert result.detail["vacuity_witness"] is not None
    assert "counterexample" not in result.detail


def test_the_three_routing_rules_each_have_a_class() -> None:
    assert {c.rule for c in ROUTING_CLASSES} == {
        ConformanceRule.route_placement,
        ConformanceRule.route_attribution,
        ConformanceRule.route_miss_reported,
    }


@pytest.mark.parametrize("cls", ROUTING_CLASSES, ids=lambda c: c.name)
def test_every_history_of_a_class_is_rejected_with_its_rule(cls, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    histories = find_histories(cls, Job(seed=0))
    assert len(histories) == 8  # the class is not empty, and the check sees several members
    for index, history in enumerate(histories):
        directory = tmp_path / str(index)
        directory.mkdir()
        verdict = check_fleet(*write_routed_history(history, directory))
        assert verdict.outcome is Outcome.rejected, (history, verdict.reason)
        assert verdict.counterexample is not None and verdict.counterexample.rule is cls.rule, (
            history,
            verdict.reason,
        )


def test_accepted_histories_are_accepted_by_the_fleet_check(tmp_path: Path) -> None:
    histories = accepted_histories(Job(seed=0))
    assert len(histories) == 16
    assert {h["report_outcome"] for h in histories[:2]} == {"delivered", "missed"}
    for index, history in enumerate(histories):
        directory = tmp_path / str(index)
        directory.mkdir()
        verdict = check_fleet(*write_routed_history(history, directory))
        assert verdict.outcome is Outcome.accepted, (history, verdict.reason)


def test_a_tiny_budget_is_unknown_never_a_history() -> None:
    with pytest.raises(SolverBudgetExhausted):
        find_histories(ROUTING_CLASSES[2], Job(seed=0, rlimit=1))
