"""What re-checking cited traces costs `kvclaims lower` on every shipped descriptor (issue 26).

    .venv/bin/python bench/lower_recheck.py [--runs 5]

In one process, in this order, each the best of `--runs`: loading the shipped descriptors and
lowering every row with no re-check (the lowering alone); cold (an empty cache directory and
no readings in memory: every cited trace is checked); warm from disk (readings in the cache
directory, none in memory: what a new `kvclaims lower` pays); warm in memory (a second lowering
in the same process). Then the re-check alone (the descriptors loaded), cold and warm from disk.
Then whole `python -m kvclaims lower` processes, cold and warm. Caches go
to a temporary `KVCLAIMS_CACHE_DIR`, never the user's or the checkout. Nothing is asserted:
timings depend on the machine and its load; their ratios, in one run, less so.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESCRIPTORS = ROOT / "descriptors"


def best(runs: int, prepare: Callable[[], None], work: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        prepare()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from kvclaims.cli import _recheck
    from kvclaims.spec.descriptor import load_descriptors
    from kvclaims.spec.lowering import lower_row

    def lower_all(loaded: list) -> int:
        return sum(1 for _, d in loaded for row in d.rows() if lower_row(d, row).label.is_sound)

    with tempfile.TemporaryDirectory(prefix="kvclaims-bench-") as folder:
        cache = Path(folder)
        os.environ["KVCLAIMS_CACHE_DIR"] = str(cache)

        def empty_cache() -> None:
            _recheck._READINGS.clear()
            for entry in cache.rglob("*.json"):
                entry.unlink()

        loaded = load_descriptors([DESCRIPTORS])
        rows = sum(len(d.rows()) for _, d in loaded)
        cited = len({a.resolved for _, d in loaded for a in _recheck._cited_traces(d)})
        figures = {
            "no re-check": best(args.runs, lambda: None, lambda: lower_all(load_descriptors([DESCRIPTORS]))),
            "cold": best(args.runs, empty_cache, lambda: lower_all(_recheck.load_rechecked([DESCRIPTORS]))),
            "warm (disk)": best(
                args.runs, _recheck._READINGS.clear, lambda: lower_all(_recheck.load_rechecked([DESCRIPTORS]))
            ),
            "warm (memory)": best(
                args.runs, lambda: None, lambda: lower_all(_recheck.load_rechecked([DESCRIPTORS]))
            ),
        }
        figures["re-check alone, cold"] = best(
            args.runs, empty_cache, lambda: _recheck.recheck_cited_traces(d for _, d in loaded)
        )
        figures["re-check alone, warm (disk)"] = best(
            args.runs, _recheck._READINGS.clear, lambda: _recheck.recheck_cited_traces(d for _, d in loaded)
        )
        command = [sys.executable, "-m", "kvclaims", "lower", str(DESCRIPTORS)]
        env = os.environ | {"PYTHONPATH": str(ROOT)}

        def process() -> object:
            return subprocess.run(command, capture_output=True, env=env, check=False)

        figures["process cold"] = best(args.runs, empty_cache, process)
        figures["process warm"] = best(args.runs, lambda: None, process)
    print(f"{len(loaded)} descriptors, {rows} rows, {cited} cited traces re-checked; best of {args.runs}")
    base = figures["no re-check"]
    for name, seconds in figures.items():
        print(f"{name:>28}: {seconds * 1000:8.1f} ms  ({seconds / base:5.2f} x no re-check)")


if __name__ == "__main__":
    main()
