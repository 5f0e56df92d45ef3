"""The Z3 claim and request relations agree with the Python machines on every input."""

import z3

from kvclaims.solver.lifecycle_model import (
    EVENTS,
    PHASES,
    PROFILES,
    REQUEST_EVENTS,
    REQUEST_PHASES,
    claim_step,
    request_step,
)
from kvclaims.solver.z3env import Job
from kvclaims.statemachine.lifecycle import ALL_PROFILES, TRANSITIONS, Violation, step
from kvclaims.statemachine.requests import RequestViolation
from kvclaims.statemachine.requests import request_step as python_request_step


def _evaluate(term: z3.ExprRef, substitution: list[tuple[z3.ExprRef, z3.ExprRef]]) -> z3.ExprRef:
    return z3.simplify(z3.substitute(term, *substitution))


def test_claim_relation_agrees_with_step_on_every_profile_phase_and_event() -> None:
    job = Job()
    profile, phase, event = job.int("profile"), job.int("phase"), job.int("event")
    relation = claim_step(profile, phase, event)
    checked = 0
    for p_index, p in enumerate(PROFILES):
        for s_index, s in enumerate(PHASES):
            for e_index, e in enumerate(EVENTS):
                values = [(profile, job.val(p_index)), (phase, job.val(s_index)), (event, job.val(e_index))]
                legal = z3.is_true(_evaluate(relation.legal, values))
                expected = step(p, s, e)
                assert legal == (not isinstance(expected, Violation)), (p, s, e)
                if legal:
                    assert PHASES[_evaluate(relation.target, values).as_long()] is expected, (p, s, e)
                checked += 1
    assert checked == len(ALL_PROFILES) * len(PHASES) * len(EVENTS)


def test_request_relation_agrees_with_request_step_on_every_phase_and_event() -> None:
    job = Job()
    phase, event = job.int("phase"), job.int("event")
    relation = request_step(phase, event)
    for s_index, s in enumerate(REQUEST_PHASES):
        for e_index, e in enumerate(REQUEST_EVENTS):
            values = [(phase, job.val(s_index)), (event, job.val(e_index))]
            expected = python_request_step(s, e)
            legal = z3.is_true(_evaluate(relation.legal, values))
            assert legal == (not isinstance(expected, RequestViolation)), (s, e)
            if legal:
                assert REQUEST_PHASES[_evaluate(relation.target, values).as_long()] is expected


def test_no_transition_row_is_shadowed_by_an_earlier_row() -> None:
    """Regression: `materialized --predicate_broken--> stay` was listed after the two guarded
    rows that already cover every profile, so it could never fire (found by the
    lifecycle.every_transition_fires proof)."""
    for index, row in enumerate(TRANSITIONS):
        earlier = [t for t in TRANSITIONS[:index] if (t.source, t.event) == (row.source, row.event)]
        reachable_by = [
            p for p in ALL_PROFILES if p.admits(row.guard) and not any(p.admits(t.guard) for t in earlier)
        ]
        assert reachable_by, f"row {index} {row} is shadowed"


def test_specialised_claim_relation_agrees_with_step() -> None:
    from kvclaims.solver.lifecycle_model import claim_step_for

    job = Job()
    phase = job.int("phase")
    for p in PROFILES:
        for e in EVENTS:
            relation = claim_step_for(p, phase, e)
            for s_index, s in enumerate(PHASES):
                values = [(phase, job.val(s_index))]
                expected = step(p, s, e)
                legal = z3.is_true(_evaluate(relation.legal, values))
                assert legal == (not isinstance(expected, Violation)), (p, s, e)
                if legal:
                    assert PHASES[_evaluate(relation.target, values).as_long()] is expected
