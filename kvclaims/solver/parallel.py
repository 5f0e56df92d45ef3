"""Independent solver tasks on several cores, results in submission order.

Each obligation and each descriptor's upgrade search builds its own `z3.Context`, so they share
nothing and can run in separate processes. Workers are forked: the task functions and their
arguments need no import-time re-run, and a `Job` is created inside the worker, never shared.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def available_cores() -> int:
    """The cores this process may run on (the affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class OrderedPool:
    """A pool of `jobs` forked workers (none when `jobs` is 1: tasks then run in this process,
    lazily, when their results are asked for)."""

    def __init__(self, jobs: int) -> None:
        self._executor = (
            ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"))
            if jobs > 1
            else None
        )

    def __enter__(self) -> OrderedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def map(self, fn: Callable[[Item], Result], items: Sequence[Item]) -> Iterator[Result]:
        """`fn(item)` for each item, yielded in the order of `items`; submitted at once."""
        if self._executor is None:
            return map(fn, items)
        futures: list[Future[Result]] = [self._executor.submit(fn, item) for item in items]
        return (future.result() for future in futures)
