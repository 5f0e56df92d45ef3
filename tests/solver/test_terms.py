"""`Terms` builds what z3py's operators build: the same terms with the same AST ids.

Each case builds one formula twice, in two fresh contexts with the same history: once with
z3py, once with `Terms`. Equal ids mean the same nodes were created in the same order, which is
what keeps every committed proof and adversary output unchanged."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import z3

from kvclaims.solver.terms import Terms
from kvclaims.solver.z3env import Job, all_of, any_of

Vars = tuple[z3.ArithRef, z3.ArithRef, z3.BoolRef, z3.BoolRef]


def _vars(job: Job) -> Vars:
    return job.int("x"), job.int("y"), job.bool("p"), job.bool("q")


def _z3py_cases() -> dict[str, Callable[[Job, Vars], z3.ExprRef]]:
    return {
        "eq numeral": lambda job, v: v[0] == 7,
        "ne": lambda job, v: v[0] != v[1],
        "ge gt lt": lambda job, v: z3.And(v[0] >= 3, v[1] > 0, v[0] < 12),
        "le": lambda job, v: v[1] <= v[0],
        "not implies": lambda job, v: z3.Implies(z3.Not(v[2]), v[3]),
        "or": lambda job, v: z3.Or(v[2], v[3], v[0] == 1),
        "ite numerals": lambda job, v: z3.If(v[2], z3.IntVal(41, job.ctx), z3.IntVal(42, job.ctx)),
        "ite chain": lambda job, v: z3.If(v[2], v[0], z3.If(v[3], z3.IntVal(5, job.ctx), v[1])),
        "all_of empty": lambda job, v: all_of(job.ctx, []),
        "any_of empty": lambda job, v: any_of(job.ctx, []),
        "any_of one": lambda job, v: any_of(job.ctx, [v[0] == 2]),
        "negative numeral": lambda job, v: z3.And(v[0] >= -1, v[0] < 4),
    }


def _terms_cases() -> dict[str, Callable[[Terms, list], z3.ExprRef]]:
    return {
        "eq numeral": lambda t, v: t.bool_ref(t.eq(v[0], 7)),
        "ne": lambda t, v: t.bool_ref(t.ne(v[0], v[1])),
        "ge gt lt": lambda t, v: t.bool_ref(t.and_([t.ge(v[0], 3), t.gt(v[1], 0), t.lt(v[0], 12)])),
        "le": lambda t, v: t.bool_ref(t.le(v[1], v[0])),
        "not implies": lambda t, v: t.bool_ref(t.implies(t.not_(v[2]), v[3])),
        "or": lambda t, v: t.bool_ref(t.or_([v[2], v[3], t.eq(v[0], 1)])),
        "ite numerals": lambda t, v: t.int_ref(t.ite(v[2], 41, 42)),
        "ite chain": lambda t, v: t.int_ref(t.ite(v[2], v[0], t.ite(v[3], 5, v[1]))),
        "all_of empty": lambda t, v: t.bool_ref(t.all_of([])),
        "any_of empty": lambda t, v: t.bool_ref(t.any_of([])),
        "any_of one": lambda t, v: t.bool_ref(t.any_of([t.eq(v[0], 2)])),
        "negative numeral": lambda t, v: t.bool_ref(t.in_range(v[0], -1, 4)),
    }


@pytest.mark.parametrize("case", sorted(_z3py_cases()))
def test_terms_builds_the_z3py_term_with_the_same_ids(case: str) -> None:
    reference_job = Job()
    reference_variables = _vars(reference_job)
    reference = _z3py_cases()[case](reference_job, reference_variables)
    job = Job()
    variables = _vars(job)  # the z3py references keep the raw terms alive
    t = Terms(job.ctx)
    built = _terms_cases()[case](t, [var.as_ast() for var in variables])
    t.release()
    assert built.sexpr() == reference.sexpr()
    assert built.get_id() == reference.get_id()
    # the next fresh node gets the same id too: no node was created or freed differently
    assert z3.Int("after", job.ctx).get_id() == z3.Int("after", reference_job.ctx).get_id()


def test_released_terms_live_on_in_z3py_references() -> None:
    job = Job()
    x = job.int("x")
    t = Terms(job.ctx)
    kept = t.bool_ref(t.and_([t.ge(x.as_ast(), 0), t.lt(x.as_ast(), 3)]))
    t.release()
    solver = job.solver()
    solver.add(kept, x != 0, x != 1)
    assert solver.check() == z3.sat
    assert solver.model().eval(x).as_long() == 2


def test_release_frees_unused_terms_in_the_order_z3py_does() -> None:
    """Terms nothing else references are freed at release; the ids they free are reused by the
    next terms made, so they must be freed in z3py's order (a dying list: newest first)."""
    reference_job = Job()
    x = reference_job.int("x")
    unused = [x == 100 + k for k in range(4)]
    del unused
    reference_next = [x >= 200 + k for k in range(4)]
    job = Job()
    y = job.int("x")
    t = Terms(job.ctx)
    for k in range(4):
        t.eq(y.as_ast(), 100 + k)
    t.release()
    made_next = [y >= 200 + k for k in range(4)]
    assert [term.get_id() for term in made_next] == [term.get_id() for term in reference_next]
