"""Units of checking work fanned out to processes or a Ray cluster, results back in input order.

A *unit* is whatever one call of the work function checks: one trace, or a group of files that
must be judged together (the per-engine streams of one fleet), or any other picklable item (a
positive row the adversary searches, a batch of fuzzing seeds); a unit's files are the `Path`
members of a tuple unit. The work function is a
module-level function (picklable) of one unit; it must be deterministic, so that the verdicts do
not depend on where a unit ran. `stream` yields the results in the order of the units whatever
order they finish in, and calls `on_done` once per unit yielded.

Three places run units:

- this process (`jobs` 1, no Ray): one after another;
- a process pool (`jobs` N): `concurrent.futures.ProcessPoolExecutor`, whose workers read
  their traces in one process each (no read-ahead child: the pool already fills the cores);
- a Ray cluster (`ray_address`): one Ray task per unit, at most `RAY_IN_FLIGHT_PER_CPU` tasks
  per cluster CPU in flight, each result fetched in unit order as soon as it and those before
  it are done (streamed: the driver never holds more than the in-flight window). `"local"`
  starts a cluster in this process (`ray.init` with `num_cpus=jobs`, no dashboard) and stops
  it afterwards; any other address joins that cluster. A process already connected to Ray
  (`ray.is_initialized()`) uses its cluster whatever the address, and keeps it. Ray listens on
  every interface of the machine whatever address it is given: run a local cluster only where
  that is acceptable (the project's tests run it inside a loopback-only network namespace).

`ray_map(address, jobs)` is `stream` on a cluster as a plain `map(work, units)`, for a caller
outside this package that must not import Ray itself.

On a cluster, the workers read the files themselves: every node must see the same paths (a
shared filesystem) and run the same kvclaims. Both are checked: each task returns the kvclaims
version it ran and the size it saw of each file, and a difference from the driver's is an
`InputError` naming `--ray`, never a verdict of another file. So is a missing Ray.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from kvclaims.refinement import read_ahead
from kvclaims.spec.errors import InputError, Problem

Unit = tuple[Path, ...]
"""One trace, or a group of files checked together."""

R = TypeVar("R")
U = TypeVar("U")

LOCAL = "local"
"""The `ray_address` that starts a Ray cluster in this process."""

RAY_IN_FLIGHT_PER_CPU = 4
"""Tasks in flight per cluster CPU: enough to keep every worker busy while the driver fetches
results in order, few enough that results waiting behind a slow unit stay bounded."""

RAY_OBJECT_STORE_BYTES = 128 * 1024 * 1024
"""The object store of a local cluster: results are verdicts, small; Ray's default (30% of
memory) would take gigabytes from a shared machine."""


@dataclass(frozen=True)
class _Seen:
    """What a worker saw: its kvclaims version and the size of each file of its unit."""

    version: str
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class _Task(Generic[R]):
    result: R
    seen: _Seen


def _files(unit: object) -> list[Path]:
    """The files of `unit`: the `Path` members of a tuple; a unit of another type has none."""
    return [member for member in unit if isinstance(member, Path)] if isinstance(unit, tuple) else []


def _sizes(unit: object) -> tuple[int, ...]:
    """The size of each file of `unit` (-1: not a file)."""
    return tuple(path.stat().st_size if path.is_file() else -1 for path in _files(unit))


def _version() -> str:
    from kvclaims import __version__

    return __version__


def _run_unit(work: Callable[[U], R], unit: U) -> _Task[R]:
    """Run `work` on `unit` where the task landed, with what that place saw of it."""
    return _Task(work(unit), _Seen(_version(), _sizes(unit)))


def stream(
    work: Callable[[U], R],
    units: Sequence[U],
    *,
    jobs: int = 1,
    ray_address: str | None = None,
    on_done: Callable[[], None] | None = None,
) -> Iterator[R]:
    """`work(unit)` of every unit, yielded in the order of `units` as soon as it and every unit
    before it are done (see the module). An exception of `work` is raised when its unit's turn
    comes, as a sequential run would raise it."""
    if ray_address is not None:
        yield from _on_ray(work, units, ray_address, jobs, on_done)
    elif min(jobs, len(units)) <= 1:
        for unit in units:
            result = work(unit)
            if on_done is not None:
                on_done()
            yield result
    else:
        yield from _in_processes(work, units, min(jobs, len(units)), on_done)


def _in_processes(
    work: Callable[[U], R], units: Sequence[U], workers: int, on_done: Callable[[], None] | None
) -> Iterator[R]:
    from concurrent.futures import ProcessPoolExecutor  # multiprocessing: only for a pool

    with ProcessPoolExecutor(max_workers=workers, initializer=_reading_alone) as pool:
        futures = [pool.submit(work, unit) for unit in units]
        try:
            for future in futures:
                result = future.result()
                if on_done is not None:
                    on_done()
                yield result
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _reading_alone() -> None:
    """A pool worker reads its traces in its own process: the pool already has a worker per
    core, and a read-ahead child each would only take turns with them."""
    os.environ[read_ahead.ENVIRONMENT] = "0"


def ray_map(address: str, jobs: int) -> Callable[[Callable[[U], R], Sequence[U]], Iterator[R]]:
    """`map(work, units)` that runs each unit as a Ray task on the cluster at `address` (`LOCAL`:
    one of `jobs` CPUs started for the call), results in the order of `units` (see `stream`)."""

    def on_ray(work: Callable[[U], R], units: Sequence[U]) -> Iterator[R]:
        return stream(work, units, jobs=jobs, ray_address=address)

    return on_ray


def _on_ray(
    work: Callable[[U], R],
    units: Sequence[U],
    address: str,
    jobs: int,
    on_done: Callable[[], None] | None,
) -> Iterator[R]:
    try:
        import ray
    except ImportError:
        raise _ray_problem("needs Ray: install the ray extra (pip install 'kvclaims[ray]')") from None
    started_here = False
    if not ray.is_initialized():
        if address == LOCAL:
            ray.init(
                num_cpus=jobs,
                include_dashboard=False,
                object_store_memory=RAY_OBJECT_STORE_BYTES,
                log_to_driver=False,
            )
        else:
            ray.init(address=address, log_to_driver=False)
        started_here = True
    try:
        remote = ray.remote(_run_unit)
        window = RAY_IN_FLIGHT_PER_CPU * max(1, int(ray.cluster_resources().get("CPU", 1)))
        version = _version()
        pending: deque[tuple[U, Any]] = deque()
        queued = iter(units)
        for unit in queued:
            pending.append((unit, remote.remote(work, unit)))
            if len(pending) >= window:
                break
        while pending:
            unit, ref = pending.popleft()
            task: _Task[R] = ray.get(ref)
            _check_seen(unit, task.seen, version)
            next_unit = next(queued, None)
            if next_unit is not None:
                pending.append((next_unit, remote.remote(work, next_unit)))
            if on_done is not None:
                on_done()
            yield task.result
    finally:
        if started_here:
            ray.shutdown()


def _check_seen(unit: object, seen: _Seen, version: str) -> None:
    if seen.version != version:
        raise _ray_problem(f"the cluster runs kvclaims {seen.version}, this driver {version}")
    local = _sizes(unit)
    if len(seen.sizes) != len(local):
        raise _ray_problem(f"the cluster saw {len(seen.sizes)} files of a unit of {len(local)}")
    if seen.sizes != local:
        names = ", ".join(str(p) for p, a, b in zip(_files(unit), local, seen.sizes, strict=True) if a != b)
        raise _ray_problem(f"the cluster does not see the same files as this driver: {names}")


def _ray_problem(message: str) -> InputError:
    return InputError([Problem("--ray", message)])
