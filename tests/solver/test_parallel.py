"""OrderedPool: results in submission order, in worker processes or in this one."""

import os
from types import MappingProxyType

import pytest

from kvclaims.solver.parallel import OrderedPool, available_cores


def _square_and_pid(n: int) -> tuple[int, int]:
    return n * n, os.getpid()


@pytest.mark.parametrize("jobs", [1, 2])
def test_results_come_back_in_submission_order(jobs: int) -> None:
    with OrderedPool(jobs, [_square_and_pid]) as pool:
        results = list(pool.map(_square_and_pid, list(range(20))))
    assert [value for value, _ in results] == [n * n for n in range(20)]
    pids = {pid for _, pid in results}
    assert (pids == {os.getpid()}) is (jobs == 1)


def test_an_exception_in_a_task_reaches_the_caller() -> None:
    with OrderedPool(2, [_inverse]) as pool, pytest.raises(ZeroDivisionError):
        list(pool.map(_inverse, [1, 0]))


def _inverse(n: int) -> float:
    return 1 / n


def test_a_task_that_does_not_pickle_runs_in_workers() -> None:
    """A closure over a mappingproxy (like `Facts`) pickles neither; the workers inherit it."""
    table = MappingProxyType({n: n + 1 for n in range(5)})

    def successor(n: int) -> int:
        return table[n]

    with OrderedPool(2, [successor]) as pool:
        assert list(pool.map(successor, [0, 1, 2, 3, 4])) == [1, 2, 3, 4, 5]


def test_only_the_pool_tasks_can_be_mapped() -> None:
    with OrderedPool(1, [_inverse]) as pool, pytest.raises(ValueError):
        pool.map(_square_and_pid, [1])


def test_available_cores_is_positive() -> None:
    assert available_cores() >= 1
