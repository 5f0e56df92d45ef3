"""Solver jobs: fresh contexts, budgets that end in `unknown`, sparse witnesses."""

import pytest
import z3

from kvclaims.solver.z3env import Job, SolverBudgetExhausted, decided, sparse_model


def test_every_job_has_its_own_context() -> None:
    assert Job().ctx is not Job().ctx


def test_an_exhausted_rlimit_is_unknown_never_a_verdict() -> None:
    job = Job(rlimit=1)
    solver = job.solver()
    x, y = job.int("x"), job.int("y")
    solver.add(x * x * x - 17 * x * y == 12345678901, y > 3)
    with pytest.raises(SolverBudgetExhausted):
        decided(solver.check(), solver)


def test_sparse_model_keeps_preferred_literals_the_target_allows() -> None:
    job = Job()
    flags = [job.bool(f"b{i}") for i in range(6)]
    solver = job.solver()
    solver.add(z3.Or(flags[0], flags[1]))
    model = sparse_model(solver, [flags[4]], [z3.Not(f) for f in flags])
    assert model is not None
    chosen = [z3.is_true(model.eval(f, model_completion=True)) for f in flags]
    assert chosen[4] and sum(chosen) == 2  # the target, and one of b0/b1


def test_sparse_model_of_an_unsat_target_is_none_and_leaves_the_solver_clean() -> None:
    job = Job()
    flag = job.bool("b")
    solver = job.solver()
    assert sparse_model(solver, [flag, z3.Not(flag)], []) is None
    assert solver.check() == z3.sat


def test_the_finite_domain_solver_decides_bounded_integers() -> None:
    job = Job()
    x = job.int("x")
    solver = job.finite_domain_solver()
    solver.add(x > 5, x < 9, x != 6, x != 8)
    assert decided(solver.check(), solver)
    assert solver.model().eval(x).as_long() == 7
    solver.add(x != 7)
    assert not decided(solver.check(), solver)


def test_the_finite_domain_solver_is_unknown_outside_its_fragment() -> None:
    """An unbounded integer is not a finite domain: `unknown`, never a verdict."""
    job = Job()
    x = job.int("x")
    solver = job.finite_domain_solver()
    solver.add(x > 5)
    with pytest.raises(SolverBudgetExhausted):
        decided(solver.check(), solver)
