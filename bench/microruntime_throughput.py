"""MicroRuntime throughput: trace v1 events emitted per second on a long generated workload.

    .venv/bin/python bench/microruntime_throughput.py [--operations 100000] [--repeat 3]

The workload (`kvclaims.microruntime.workload`, seeded) is generated once, outside the timed
region: --operations operations over a 2048-block pool and 400 prefix objects of 2-48 blocks
with Zipf-like popularity (hits on hot prefixes, LRU eviction of cold ones); a claim of a
random mode every 25 operations (hard_protected, soft_priority, best_effort, demotable,
expiring, offloadable) under the contract's protected budget, later demoted, released,
offloaded or reused; a large chunked request every 200 operations that conflicts with pinned
claims (the `full_arbiter` policy relaxes, offloads or bounds live KV); a clock tick every 10.

Each repeat builds a fresh runtime and applies the whole workload; timed best-of---repeat:

- memory: events kept as dicts in a list (`TraceBuffer`), the sink the fuzzer and scenarios use;
- count:  events counted by type only (the runtime's own cost);
- ndjson: events encoded and written to a file as they are emitted (msgspec, buffered).

Prints events, seconds and events/s for each sink (wall time, and the process's CPU time: on a
shared machine wall time also measures the neighbours) and the ratios between them (taken
within this one run). Nothing is asserted: performance never gates a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from kvclaims.microruntime.policies import POLICIES
from kvclaims.microruntime.runtime import MicroRuntime
from kvclaims.microruntime.tracing import EventCounter, NdjsonTraceWriter, TraceBuffer
from kvclaims.microruntime.workload import WorkloadShape, apply, generate

TARGET_EVENTS_PER_SECOND = 500_000
"""Issue 18's target for the memory sink."""


def _run(
    shape: WorkloadShape, ops: list, sink_kind: str, directory: Path
) -> tuple[int, float, float, Counter[str]]:
    """(events, wall seconds, CPU seconds, events by type) of one run with this sink."""
    if sink_kind == "memory":
        buffer = TraceBuffer()
        sink, counts = buffer.append, buffer.counts
    elif sink_kind == "count":
        counter = EventCounter()
        sink, counts = counter, lambda: counter.counts
    else:
        writer = NdjsonTraceWriter(directory / "bench.ndjson", {"kvclaims_trace": 1})
        counter = EventCounter()

        def sink(event: dict) -> None:
            writer(event)
            counter(event)

        counts = lambda: counter.counts  # noqa: E731
    runtime = MicroRuntime(shape.usable_blocks, policy=POLICIES["full_arbiter"], sink=sink)
    start, cpu_start = time.perf_counter(), time.process_time()
    apply(runtime, ops)
    runtime.close()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if sink_kind == "ndjson":
        writer.close()
    return runtime.events_emitted, elapsed, cpu, counts()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--operations", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    shape = WorkloadShape(operations=args.operations)
    generated = time.perf_counter()
    ops = generate(shape)
    print(
        f"workload: {len(ops)} operations ({args.operations} drawn), pool {shape.usable_blocks} blocks, "
        f"{shape.objects} objects, generated in {time.perf_counter() - generated:.1f}s (not timed)"
    )
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for sink_kind in ("memory", "count", "ndjson"):
                events, seconds, cpu_seconds, counts = _run(shape, ops, sink_kind, Path(tmp))
                wall.setdefault(sink_kind, []).append(seconds)
                cpu.setdefault(sink_kind, []).append(cpu_seconds)
    print(f"events per run: {events}")
    print("event mix: " + ", ".join(f"{name} {n}" for name, n in counts.most_common()))
    for sink_kind in wall:
        for clock, times in (("wall", wall[sink_kind]), ("CPU", cpu[sink_kind])):
            best, median = min(times), statistics.median(times)
            print(
                f"{sink_kind:>7} {clock:>4}: best {best:.2f}s = {events / best:,.0f} events/s, "
                f"median {median:.2f}s = {events / median:,.0f} events/s (of {args.repeat})"
            )
    for clock, times in (("wall", wall), ("CPU", cpu)):
        print(
            f"ratios of best {clock} times: ndjson/memory {min(times['ndjson']) / min(times['memory']):.2f}, "
            f"memory/count {min(times['memory']) / min(times['count']):.2f}"
        )
    for clock, times in (("wall", wall), ("CPU", cpu)):
        verdict = "meets" if events / min(times["memory"]) >= TARGET_EVENTS_PER_SECOND else "misses"
        print(f"target {TARGET_EVENTS_PER_SECOND:,} events/s (memory sink, best {clock} time): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
