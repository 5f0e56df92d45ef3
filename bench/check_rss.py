"""Peak memory of checking a trace, against its length: is the checker's memory flat?

    .venv/bin/python bench/check_rss.py [--events 100000 1000000 10000000] [--keep]

For each length, a valid trace v1 (`kvclaims.refinement.testing.generate_valid_trace`, a
stationary workload: claims retire as fast as they are accepted) is streamed to a temporary
file (never held in memory), then a fresh process checks it and reports its peak RSS (VmHWM,
which starts afresh at exec), that of its read-ahead child (ru_maxrss), and the sizes of the
model's state that grow with the trace (the ids its identity rules remember). The same is
measured in one process (`KVCLAIMS_READ_AHEAD=0`). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvclaims.refinement.testing import generate_valid_trace

_PROBE = r"""
import json, resource, sys, time
from kvclaims.refinement import api
from kvclaims.refinement.checker import Checker

sizes = {}
finish = Checker.finish


def measured_finish(self):  # the model's remembered sets at the end of the trace
    state = self.state
    for name in ("retired", "finished", "claims", "requests", "block_owner", "block_hash"):
        value = getattr(state, name, None)
        if value is not None:
            try:
                sizes[name] = len(value)
            except TypeError:
                pass
    return finish(self)


Checker.finish = measured_finish
started = time.perf_counter()
verdict = api.check_trace(sys.argv[1])
seconds = time.perf_counter() - started
status = open("/proc/self/status").read()
peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"outcome": verdict.outcome.value, "events": verdict.events, "seconds": seconds,
                  "peak_kb": peak, "child_kb": child, "sizes": sizes}))
"""


def probe(path: Path, *, read_ahead: bool) -> dict:
    environment = dict(os.environ, KVCLAIMS_READ_AHEAD="1" if read_ahead else "0")
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, check=True, env=environment
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(
        f"{'events':>10}{'MB file':>9}{'peak MB':>9}{'child MB':>10}{'1-proc MB':>11}{'s':>7}"
        "  model state at the end"
    )
    with tempfile.TemporaryDirectory(prefix="kvclaims-rss-") as scratch:
        for events in args.events:
            path = Path(scratch) / f"valid-{events}.ndjson"
            started = time.perf_counter()
            with path.open("wb") as out:
                generate_valid_trace(out, events, seed=args.seed)
            generated = time.perf_counter() - started
            ahead = probe(path, read_ahead=True)
            alone = probe(path, read_ahead=False)
            if ahead["outcome"] != "accepted" or alone["outcome"] != "accepted":
                raise SystemExit(f"not accepted: {ahead['outcome']}, {alone['outcome']}")
            print(
                f"{ahead['events']:>10}{path.stat().st_size / 1e6:>9.0f}{ahead['peak_kb'] / 1024:>9.1f}"
                f"{ahead['child_kb'] / 1024:>10.1f}{alone['peak_kb'] / 1024:>11.1f}{ahead['seconds']:>7.1f}"
                f"  {alone['sizes']} (generated in {generated:.0f}s)"
            )
            path.unlink()


if __name__ == "__main__":
    sys.exit(main())
