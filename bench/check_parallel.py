"""`kvclaims check DIR`: sequential (`--jobs 1`) against parallel (`--jobs N`) wall time.

    .venv/bin/python bench/check_parallel.py [--traces 64] [--events 20000] [--jobs N] [--repeat 3]

Writes --traces valid trace v1 files of --events events each (`generate_valid_trace`, one seed
per file) into a temporary directory, adds the seed artifact's corpus (`/work/shared/corpus` or
$KVCLAIMS_CORPUS) when it is there, and times `kvclaims.cli.check.check_files` over all of them
with jobs=1 and jobs=N (default: every core), alternately, --repeat times each. The parallel
time includes starting the worker processes, as the command pays it. Prints the best time of
each, the speedup ratio taken within this run, and the efficiency (speedup / workers); checks
that both runs gave the same verdicts in the same order. Nothing is asserted about speed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from kvclaims.cli.check import check_files, trace_files
from kvclaims.refinement.corpus import default_corpus
from kvclaims.refinement.testing import generate_valid_trace


def write_traces(directory: Path, traces: int, events: int) -> int:
    """`traces` generated valid traces in `directory`; returns the total number of events."""
    total = 0
    for seed in range(traces):
        with (directory / f"generated-{seed:03d}.ndjson").open("wb") as out:
            total += generate_valid_trace(out, events, seed=seed)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, default=64, help="generated traces (default 64)")
    parser.add_argument("--events", type=int, default=20_000, help="events per generated trace")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel workers")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each mode")
    parser.add_argument("--no-corpus", action="store_true", help="generated traces only")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kvclaims-check-parallel-") as scratch:
        generated = Path(scratch)
        events = write_traces(generated, args.traces, args.events)
        targets = [generated]
        corpus = default_corpus()
        if not args.no_corpus and corpus.is_dir():
            targets.append(corpus)
        files = trace_files(targets)
        size = sum(f.stat().st_size for f in files)
        print(
            f"cores: os.cpu_count()={os.cpu_count()}, usable={len(os.sched_getaffinity(0))}; "
            f"workers: {min(args.jobs, len(files))}"
        )
        print(
            f"traces: {len(files)} ({args.traces} generated x {args.events} events = {events} events"
            + (f", plus the corpus at {corpus}" if len(targets) > 1 else "")
            + f"), {size / 2**20:.1f} MiB"
        )
        best = {1: float("inf"), args.jobs: float("inf")}
        answers = {}
        for _ in range(args.repeat):
            for jobs in (1, args.jobs):
                started = time.perf_counter()
                verdicts = check_files(files, jobs=jobs)
                best[jobs] = min(best[jobs], time.perf_counter() - started)
                answers[jobs] = [v.to_json() for v in verdicts]
        same = answers[1] == answers[args.jobs]
        outcomes = Counter(v["outcome"] for v in answers[1])
        print(f"verdicts: {dict(outcomes)}; identical in both modes: {same}")
        sequential, parallel = best[1], best[args.jobs]
        speedup = sequential / parallel
        workers = min(args.jobs, len(files))
        print(f"jobs=1: {sequential:.3f} s (best of {args.repeat})")
        print(f"jobs={args.jobs}: {parallel:.3f} s (best of {args.repeat})")
        print(f"speedup: {speedup:.2f}x on {workers} workers (efficiency {speedup / workers:.0%})")
        if not same:
            raise SystemExit("the parallel run's verdicts differ from the sequential run's")


if __name__ == "__main__":
    main()
