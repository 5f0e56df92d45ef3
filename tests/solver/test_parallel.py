"""OrderedPool: results in submission order, in worker processes or in this one."""

import os

import pytest

from kvclaims.solver.parallel import OrderedPool, available_cores


def _square_and_pid(n: int) -> tuple[int, int]:
    return n * n, os.getpid()


@pytest.mark.parametrize("jobs", [1, 2])
def test_results_come_back_in_submission_order(jobs: int) -> None:
    with OrderedPool(jobs) as pool:
        results = list(pool.map(_square_and_pid, list(range(20))))
    assert [value for value, _ in results] == [n * n for n in range(20)]
    pids = {pid for _, pid in results}
    assert (pids == {os.getpid()}) is (jobs == 1)


def test_an_exception_in_a_task_reaches_the_caller() -> None:
    with OrderedPool(2) as pool, pytest.raises(ZeroDivisionError):
        list(pool.map(lambda_free_divide, [1, 0]))


def lambda_free_divide(n: int) -> float:
    return 1 / n


def test_available_cores_is_positive() -> None:
    assert available_cores() >= 1
