"""How long `kvclaims check` takes on a tiny trace, against a bare interpreter start (issue 18).

    .venv/bin/python bench/cli_start.py [--runs 15] [--importtime 15]

`--runs` bare starts `python -c pass`, then `--runs` times `python -m kvclaims check TRACE` (a
shipped 20-line trace v1 evidence file, stdout to a pipe, so no terminal output); each process
is measured from spawn to exit, wall time and CPU time (user + system). Prints best and median
of each and their ratios: the
target is a ratio of at most 5 (the check's cost is then its imports and start, nothing else).
`--importtime N` adds the N slowest imports (cumulative, from `python -X importtime`) of one
check. Nothing is asserted; timings depend on the machine and its load, the ratio less so.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

TRACE = Path(__file__).resolve().parent.parent / "descriptors/evidence/kvclaims-vllm/hard-refusal.ndjson"
BARE = [sys.executable, "-c", "pass"]
CHECK = [sys.executable, "-m", "kvclaims", "check", str(TRACE)]


def run_seconds(command: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of `command` from spawn to exit (it must exit 0); CPU time (user +
    system of the child) is what a loaded machine inflates least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def slowest_imports(count: int) -> list[tuple[int, int, str]]:
    """(cumulative us, self us, module) of the `count` slowest imports of one check."""
    profiled = [sys.executable, "-X", "importtime", *CHECK[1:]]
    done = subprocess.run(profiled, capture_output=True, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        rows.append((int(cumulative), int(own), name))
    return sorted(rows, reverse=True)[:count]


def summary(name: str, bare: list[float], check: list[float]) -> list[str]:
    """Best and median of each, and the ratios check / bare."""
    lines = [
        f"{name} {label:20} best {min(times) * 1e3:7.1f} ms  median {statistics.median(times) * 1e3:7.1f} ms"
        for label, times in (("python -c pass", bare), ("kvclaims check tiny", check))
    ]
    best = min(check) / min(bare)
    median = statistics.median(check) / statistics.median(bare)
    lines.append(
        f"{name} {'ratio check / bare':20} best {best:5.1f}x   median {median:5.1f}x  (target <= 5x)"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="rounds (one bare start, one check each)")
    parser.add_argument("--importtime", type=int, default=0, metavar="N", help="show the N slowest imports")
    args = parser.parse_args()
    bare = [run_seconds(BARE) for _ in range(args.runs)]
    check = [run_seconds(CHECK) for _ in range(args.runs)]
    for index, name in enumerate(("wall", "cpu ")):
        print("\n".join(summary(name, [b[index] for b in bare], [c[index] for c in check])))
    if args.importtime:
        print("\nslowest imports of one check (cumulative ms, self ms):")
        for cumulative, own, name in slowest_imports(args.importtime):
            print(f"  {cumulative / 1e3:7.1f} {own / 1e3:7.1f}  {name}")


if __name__ == "__main__":
    main()
