"""`kvclaims check DIR`: sequential (`--jobs 1`) against parallel (`--jobs N`) and Ray wall time.

    .venv/bin/python bench/check_parallel.py [--traces 64] [--events 20000] [--jobs N] [--repeat 3]
    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python bench/check_parallel.py --ray'

Writes --traces valid trace v1 files of --events events each (`generate_valid_trace`, one seed
per file) into a temporary directory, adds the seed artifact's corpus (`/work/shared/corpus` or
$KVCLAIMS_CORPUS) when it is there, and times `kvclaims.cli.check.check_files` over all of them
with jobs=1 and jobs=N (default: every core), alternately, --repeat times each. The parallel
time includes starting the worker processes, as the command pays it. Prints the best time of
each, the speedup ratio taken within this run, and the efficiency (speedup / workers); checks
that both runs gave the same verdicts in the same order. Nothing is asserted about speed.

`--ray` adds two Ray modes (the ray extra; Ray listens on every interface, so run it in a
loopback-only network namespace as above): `ray-cold`, where each run starts a local cluster of
--jobs CPUs and stops it (what `kvclaims check --ray` pays), and `ray-warm`, one cluster kept
for every run (what a standing cluster pays). Also prints the per-core rate (events checked per
second by one process) and the cores a fleet needs at that rate (see docs/checking-at-scale.md).
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
from kvclaims.refinement.fanout import LOCAL, RAY_OBJECT_STORE_BYTES
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
    parser.add_argument("--ray", action="store_true", help="add the Ray modes (see above)")
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
        modes = {"jobs=1": {"jobs": 1}, f"jobs={args.jobs}": {"jobs": args.jobs}}
        if args.ray:
            modes |= {
                "ray-cold": {"jobs": args.jobs, "ray_address": LOCAL},
                "ray-warm": {"jobs": args.jobs, "ray_address": LOCAL},
            }
        best = dict.fromkeys(modes, float("inf"))
        answers = {}
        for _ in range(args.repeat):
            for mode, options in modes.items():
                warm = mode == "ray-warm"
                if warm:
                    _start_ray(args.jobs)
                started = time.perf_counter()
                verdicts = check_files(files, **options)
                best[mode] = min(best[mode], time.perf_counter() - started)
                answers[mode] = [v.to_json() for v in verdicts]
                if warm:
                    _stop_ray()
        first = next(iter(answers.values()))
        same = all(answer == first for answer in answers.values())
        outcomes = Counter(v["outcome"] for v in first)
        print(f"verdicts: {dict(outcomes)}; identical in every mode: {same}")
        sequential = best["jobs=1"]
        workers = min(args.jobs, len(files))
        for mode, seconds in best.items():
            speedup = sequential / seconds
            print(
                f"{mode}: {seconds:.3f} s (best of {args.repeat}); speedup {speedup:.2f}x "
                f"(efficiency {speedup / (1 if mode == 'jobs=1' else workers):.0%})"
            )
        total = sum(v["events"] for v in first)  # as the checker counted them
        rate = total / sequential
        print(f"per-core rate: {rate:,.0f} events/s ({total} events in {sequential:.3f} s on one core)")
        if not same:
            raise SystemExit("the modes' verdicts differ")


def _start_ray(cpus: int) -> None:
    import ray

    ray.init(num_cpus=cpus, include_dashboard=False, object_store_memory=RAY_OBJECT_STORE_BYTES)


def _stop_ray() -> None:
    import ray

    ray.shutdown()


if __name__ == "__main__":
    main()
