"""The capacity checks of a refusal's proof, on concrete numbers."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.solver.capacity_model import CAPACITY_FIELDS, violated_checks
from kvclaims.spec.capacity import capacity_problem


def _numbers(protected: int, active: int, total: int, usable: int, shortfall: int) -> dict[str, int]:
    return dict(zip(CAPACITY_FIELDS, (protected, active, total, usable, shortfall), strict=True))


def test_the_anchor_live_trace_fails_only_the_shortfall_check() -> None:
    assert violated_checks(_numbers(40, 46, 86, 68, 19), capacity_reason=True, header_usable=68) == [
        "shortfall"
    ]


def test_a_consistent_capacity_refusal_passes() -> None:
    assert violated_checks(_numbers(40, 46, 86, 68, 18), capacity_reason=True, header_usable=68) == []


def test_usable_must_equal_the_header_and_capacity_needs_a_shortfall() -> None:
    assert violated_checks(_numbers(10, 10, 20, 68, 0), capacity_reason=True, header_usable=70) == [
        "capacity_needs_shortfall",
        "header_usable",
    ]
    assert violated_checks(_numbers(10, 10, 20, 68, 0), capacity_reason=False, header_usable=None) == []


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=200), min_size=5, max_size=5), st.booleans())
def test_checks_match_plain_arithmetic(values: list[int], capacity: bool) -> None:
    protected, active, total, usable, shortfall = values
    expected = []
    if total != protected + active:
        expected.append("sum")
    if shortfall != max(0, total - usable):
        expected.append("shortfall")
    if capacity and shortfall <= 0:
        expected.append("capacity_needs_shortfall")
    assert violated_checks(_numbers(*values), capacity_reason=capacity, header_usable=None) == expected


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=200), min_size=5, max_size=5),
    st.booleans(),
    st.one_of(st.none(), st.integers(min_value=0, max_value=200)),
)
def test_z3_checks_agree_with_python_rule_3(values: list[int], capacity: bool, header: int | None) -> None:
    """The Z3 capacity model and `kvclaims.spec.capacity` (what runtimes and refinement use)
    accept exactly the same numbers."""
    python_problem = capacity_problem(*values, capacity_reason=capacity, header_usable=header)
    z3_violations = violated_checks(_numbers(*values), capacity_reason=capacity, header_usable=header)
    assert (python_problem is None) == (z3_violations == [])
