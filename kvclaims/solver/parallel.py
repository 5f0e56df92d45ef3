"""Independent solver tasks on several cores, results in submission order.

Each obligation and each descriptor's upgrade search builds its own `z3.Context`, so they share
nothing and can run in separate processes. Workers are forked, and the task functions are
handed to them at the fork (a pool is made for the tasks it runs): a task may hold values that
do not pickle (the read-only tables of `Facts`); only the items and the results cross a pipe.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

Task = Callable[[Any], Any]

_installed: tuple[Task, ...] = ()
"""In a worker: the pool's tasks, installed at its start."""


def _install(tasks: tuple[Task, ...]) -> None:
    global _installed
    _installed = tasks


def _call(task: int, item: Any) -> Any:
    return _installed[task](item)


def available_cores() -> int:
    """The cores this process may run on (the affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class OrderedPool:
    """`jobs` forked workers that run `tasks` (none when `jobs` is 1: tasks then run in this
    process, lazily, when their results are asked for)."""

    def __init__(self, jobs: int, tasks: Sequence[Task]) -> None:
        self._tasks = tuple(tasks)
        self._executor = (
            ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_install,
                initargs=(self._tasks,),  # not pickled: a forked worker inherits them
            )
            if jobs > 1
            else None
        )

    def __enter__(self) -> OrderedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def map(self, task: Task, items: Sequence[Any]) -> Iterator[Any]:
        """`task(item)` for each item (`task` one of the pool's), yielded in the order of
        `items`; every item is submitted at once."""
        index = self._tasks.index(task)
        if self._executor is None:
            return map(task, items)
        futures: list[Future[Any]] = [self._executor.submit(_call, index, item) for item in items]
        return (future.result() for future in futures)
