"""The proof engines on a small counter whose answers are known by hand."""

import z3

from kvclaims.solver.engines import TransitionSystem, bmc, k_induction, prove_valid, spacer_invariant
from kvclaims.solver.z3env import Job


def _counter(job: Job, step: int) -> TransitionSystem:
    """x starts at 0 and grows by `step`; the input is ignored."""
    int_sort = z3.IntSort(job.ctx)
    return TransitionSystem(
        job,
        [("x", int_sort)],
        [("u", int_sort)],
        lambda s: s[0] == 0,
        lambda s, i, t: t[0] == s[0] + step,
    )


def test_spacer_proves_an_invariant_and_it_is_rechecked() -> None:
    result = spacer_invariant(_counter(Job(), 2), lambda s, i: s[0] == 5)
    assert result.holds and result.rechecked and result.invariant


def test_spacer_refutes_with_the_shortest_counterexample() -> None:
    result = spacer_invariant(_counter(Job(), 1), lambda s, i: s[0] == 3)
    assert not result.holds
    assert [step.state["x"] for step in result.counterexample or []] == [0, 1, 2, 3]


def test_bmc_finds_nothing_beyond_its_bound() -> None:
    assert bmc(_counter(Job(), 1), lambda s, i: s[0] == 9, bound=5) is None


def test_k_induction_needs_simple_paths_for_a_non_inductive_property() -> None:
    job = Job()
    int_sort = z3.IntSort(job.ctx)
    # x cycles 0 -> 1 -> 2 -> 0 over a domain of 0..3; 3 is unreachable and "bad".
    system = TransitionSystem(
        job,
        [("x", int_sort)],
        [("u", int_sort)],
        lambda s: s[0] == 0,
        lambda s, i, t: z3.And(s[0] >= 0, s[0] <= 3, t[0] == z3.If(s[0] == 2, 0, s[0] + 1)),
    )
    result = k_induction(system, lambda s, i: s[0] == 3)
    assert result.holds and result.k is not None


def test_validity_reports_a_counterexample() -> None:
    job = Job()
    x = job.int("x")
    assert prove_valid(job, x * x >= 0).holds
    failed = prove_valid(job, x > 0)
    assert not failed.holds and failed.counterexample is not None
