"""Refinement checker throughput, memory and scaling on generated valid traces.

    .venv/bin/python bench/check_throughput.py [--events 1000000] [--big 10000000] [--repeat 5]

Generates (once, cached in --dir) a valid kvclaims trace v1 of --events events with
`kvclaims.refinement.testing.generate_valid_trace` (many claims, requests, offload and failed
restore cycles, conflicts, demotions, harm, unclaimed block churn), then measures, in one run:

- decode-only rate: every event line decoded by the same generated msgspec decoder the reader
  uses, chunked exactly as the reader chunks (the floor any NDJSON checker pays);
- end-to-end rate: `check_trace(path)` (read, decode, validate, check, witnesses), as users run
  it: on Linux with two CPUs or more, a child process reads ahead (decodes and audits the
  chunks) while this one checks them (`kvclaims.refinement.read_ahead`);
- the same in one process (`KVCLAIMS_READ_AHEAD=0`), for comparison;
- their ratios to decode-only, all timed best-of---repeat, interleaved, so machine noise hits
  them alike;
- peak RSS of a fresh process that only checks the trace, and of its read-ahead child;
- with --big: the time to check a --big trace against the --events time (scaling), each the
  best of --big-repeat runs taken alternately.

Figures are printed; nothing is asserted (performance never gates a test).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec

from kvclaims.refinement import check_trace
from kvclaims.refinement.decoding import event_decoder
from kvclaims.refinement.read_ahead import ENVIRONMENT, available
from kvclaims.refinement.reader import CHUNK_BYTES
from kvclaims.refinement.testing import generate_valid_trace
from kvclaims.userdirs import cache_directory

CLOCK = time.perf_counter
"""Wall clock by default; --cpu times process CPU instead (steadier on a shared machine)."""

_RSS_PROBE = (
    "import resource, sys\n"
    "from kvclaims.refinement import check_trace\n"
    "verdict = check_trace(sys.argv[1])\n"
    "status = open('/proc/self/status').read()\n"
    "peak = next(line.split()[1] for line in status.splitlines() if line.startswith('VmHWM:'))\n"
    "child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(verdict.outcome.value, peak, child)\n"
)
"""Peak RSS from VmHWM: unlike ru_maxrss, it starts afresh at exec and is not inherited from
the (large) benchmark process that forks the probe. The read-ahead child's is its ru_maxrss
(forked from the probe, so it counts the probe's pages it shares until then)."""


def trace_file(directory: Path, events: int, seed: int) -> Path:
    path = directory / f"valid-{events}-seed{seed}.ndjson"
    if not path.exists():
        started = time.perf_counter()
        partial = path.with_suffix(".partial")
        with partial.open("wb") as out:
            written = generate_valid_trace(out, events, seed=seed)
        partial.rename(path)
        size = path.stat().st_size / 1e6
        print(f"generated {path} ({written} events, {size:.0f} MB) in {time.perf_counter() - started:.1f}s")
    return path


def decode_only(path: Path) -> tuple[int, float]:
    decode = event_decoder().decode
    started = CLOCK()
    count = 0
    with path.open("rb") as stream:
        stream.readline()
        pending = b""
        for chunk in iter(lambda: stream.read(CHUNK_BYTES), b""):
            pieces = (pending + chunk if pending else chunk).split(b"\n")
            pending = pieces.pop()
            for piece in pieces:
                decode(piece)
            count += len(pieces)
        if pending:
            decode(pending)
            count += 1
    return count, CLOCK() - started


def end_to_end(path: Path, *, read_ahead: bool = True) -> tuple[int, float, str]:
    os.environ[ENVIRONMENT] = "1" if read_ahead else "0"
    try:
        started = CLOCK()
        verdict = check_trace(path)
        return verdict.events, CLOCK() - started, verdict.outcome.value
    finally:
        del os.environ[ENVIRONMENT]


def event_mix(path: Path) -> str:
    """The share of each event type, from the first 200000 lines."""
    counts: Counter[str] = Counter()
    with path.open("rb") as stream:
        stream.readline()
        for line in itertools.islice(stream, 200_000):
            counts[msgspec.json.decode(line)["event"]] += 1
    total = sum(counts.values())
    return ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in counts.most_common())


def peak_rss_mb(path: Path) -> tuple[str, float, float]:
    """The outcome, and the peak RSS (MB) of a process checking `path` and of its child."""
    result = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(path)], capture_output=True, text=True, check=True
    )
    outcome, kilobytes, child = result.stdout.split()
    return outcome, int(kilobytes) / 1024, int(child) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=0, help="also time a trace this long (e.g. 10000000)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--big-repeat", type=int, default=2, help="runs of the --big trace (best is kept)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--dir", type=Path, default=cache_directory() / "bench", help="where generated traces are kept"
    )
    parser.add_argument("--cpu", action="store_true", help="time process CPU instead of wall clock")
    args = parser.parse_args()
    global CLOCK
    if args.cpu:
        CLOCK = time.process_time
    args.dir.mkdir(parents=True, exist_ok=True)
    path = trace_file(args.dir, args.events, args.seed)
    print("event mix:", event_mix(path))

    decode_times, check_times, alone_times = [], [], []
    for _ in range(args.repeat):
        count, seconds = decode_only(path)
        decode_times.append(seconds)
        events, seconds, outcome = end_to_end(path)
        check_times.append(seconds)
        _, seconds, alone = end_to_end(path, read_ahead=False)
        alone_times.append(seconds)
        if outcome != "accepted" or alone != "accepted":
            raise SystemExit(f"the generated trace was not accepted: {outcome}, {alone} in one process")
    decode_rate = count / min(decode_times)
    check_rate = events / min(check_times)
    alone_rate = events / min(alone_times)
    clock = "process CPU time (this process only)" if args.cpu else "wall clock"
    print(
        f"trace: {path} ({events} events, {path.stat().st_size / 1e6:.0f} MB), best of {args.repeat}, {clock}"
    )
    print(f"decode-only: {decode_rate:,.0f} events/s ({min(decode_times):.2f}s)")
    ahead = "read ahead by a child process" if available() else "read in one process: read-ahead unavailable"
    print(f"end-to-end check: {check_rate:,.0f} events/s ({min(check_times):.2f}s), accepted, {ahead}")
    print(f"end-to-end check in one process: {alone_rate:,.0f} events/s ({min(alone_times):.2f}s)")
    print(
        f"ratio end-to-end / decode-only: {check_rate / decode_rate:.2f} "
        f"(in one process: {alone_rate / decode_rate:.2f})"
    )
    decodes = [round(t, 2) for t in decode_times]
    checks, alones = [round(t, 2) for t in check_times], [round(t, 2) for t in alone_times]
    print(f"all runs (s): decode {decodes} check {checks} in one process {alones}")
    outcome, rss, child = peak_rss_mb(path)
    print(f"peak RSS of a process checking it: {rss:.0f} MB, its read-ahead child {child:.0f} MB ({outcome})")

    if args.big:
        big = trace_file(args.dir, args.big, args.seed)
        small_runs, big_runs = [], []
        for _ in range(args.big_repeat):  # interleaved, same count: same statistic for both
            small_runs.append(end_to_end(path)[1])
            big_runs.append(end_to_end(big))
        big_events, big_outcome = big_runs[0][0], big_runs[0][2]
        big_seconds = min(run[1] for run in big_runs)
        small = min(small_runs)
        print(
            f"scaling: {big_events} events in {big_seconds:.1f}s ({big_events / big_seconds:,.0f} events/s, "
            f"{big_outcome}); {big_seconds / small:.2f}x the {events}-event time "
            f"for {big_events / events:.1f}x the events"
        )
        outcome, rss, child = peak_rss_mb(big)
        print(
            f"peak RSS checking the big trace: {rss:.0f} MB, its read-ahead child {child:.0f} MB ({outcome})"
        )


if __name__ == "__main__":
    sys.exit(main())
