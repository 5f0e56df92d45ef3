"""How long `kvclaims check` takes on a tiny trace, against a bare interpreter start (issue 18).

    .venv/bin/python bench/cli_start.py [--runs 15] [--importtime 15]

`--runs` bare starts `python -c pass`, then `--runs` times `python -m kvclaims check TRACE` (a
shipped 20-line trace v1 evidence file, stdout to a pipe, so no terminal output); each process
is measured from spawn to exit, wall time and CPU time (user + system). Prints best and median
of each and their ratios: the target is a ratio of at most 5 (the check's cost is then its
imports and start, nothing else).

Both are measured twice, in two states of Python's bytecode cache, each kept in a temporary
`PYTHONPYCACHEPREFIX` (nothing is written into the checkout):
- `installed`: every module's bytecode cached (one untimed start of each first), as for an
  installed kvclaims (pip compiles it); the target's state.
- `compiling`: the same, but kvclaims' own modules compiled from source on every start (what a
  checkout run with PYTHONDONTWRITEBYTECODE=1 pays: the cost of each module's size).

`--importtime N` adds the N slowest imports (cumulative, from `python -X importtime`) of one
check, bytecode cached. Nothing is asserted; timings depend on the machine and its load, the
ratio less so.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACE = Path(__file__).resolve().parent.parent / "descriptors/evidence/kvclaims-vllm/hard-refusal.ndjson"
BARE = [sys.executable, "-c", "pass"]
CHECK = [sys.executable, "-m", "kvclaims", "check", str(TRACE)]


def run_seconds(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of `command` from spawn to exit (it must exit 0); CPU time (user +
    system of the child) is what a loaded machine inflates least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cached_bytecode(cache: Path) -> dict[str, str]:
    """The environment of a child whose bytecode is read from (and written to) `cache`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPYCACHEPREFIX": str(cache)}


def compiling_kvclaims(cache: Path) -> dict[str, str]:
    """The environment of a child that finds every module's bytecode in `cache` but kvclaims'
    own (removed there), and writes none."""
    spec = importlib.util.find_spec("kvclaims")
    assert spec is not None and spec.submodule_search_locations
    package = Path(spec.submodule_search_locations[0]).resolve()
    shutil.rmtree(cache / package.relative_to(package.anchor), ignore_errors=True)
    return cached_bytecode(cache) | {"PYTHONDONTWRITEBYTECODE": "1"}


def measure(runs: int, env: dict[str, str]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """`runs` timed bare starts and checks, after one untimed start of each."""
    for command in (BARE, CHECK):
        run_seconds(command, env)
    bare = [run_seconds(BARE, env) for _ in range(runs)]
    check = [run_seconds(CHECK, env) for _ in range(runs)]
    return bare, check


def slowest_imports(count: int, env: dict[str, str]) -> list[tuple[int, int, str]]:
    """(cumulative us, self us, module) of the `count` slowest imports of one check."""
    profiled = [sys.executable, "-X", "importtime", *CHECK[1:]]
    done = subprocess.run(profiled, capture_output=True, text=True, check=True, env=env)
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
    print(f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="kvclaims-bytecode-") as directory:
        cache = Path(directory)
        for state, env in (("installed", cached_bytecode(cache)), ("compiling", None)):
            env = env or compiling_kvclaims(cache)
            bare, check = measure(args.runs, env)
            print(f"bytecode {state}:")
            for index, name in enumerate(("wall", "cpu ")):
                print("\n".join(summary(name, [b[index] for b in bare], [c[index] for c in check])))
        if args.importtime:
            print("\nslowest imports of one check, bytecode cached (cumulative ms, self ms):")
            for cumulative, own, name in slowest_imports(args.importtime, cached_bytecode(cache)):
                print(f"  {cumulative / 1e3:7.1f} {own / 1e3:7.1f}  {name}")


if __name__ == "__main__":
    main()
