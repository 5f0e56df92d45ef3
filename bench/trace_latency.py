"""How late a trace line reaches the file, and how late `kvclaims watch` reports it.

    .venv/bin/python bench/trace_latency.py [--samples 40] [--watch-samples 8]

1. Idle flush delay: the binding's sink (`TraceSink`, through the one trace writer
   `kvclaims.spec.tracefile`) emits an event and hands it over as an engine step's end does,
   then nothing else happens; the delay is from the hand-over to the moment the line is
   visible in the file (polled every 1 ms). Its bound is `tracefile.FLUSH_SECONDS`.
2. Watch latency: a `kvclaims watch` process follows a growing trace (poll interval 0.1 s);
   the delay is from appending a line that breaks the model to watch printing `rejected`
   (its counterexample included). Each sample is a fresh file and a fresh process.

Prints median, p95 and max of each. Nothing is asserted; the figures go to docs/vllm-binding.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.trace import ActiveRequestAdmitted, TraceHeader
from kvclaims.spec.tracefile import FLUSH_SECONDS
from kvclaims.vllm_binding.telemetry import TraceSink


def flush_delays(directory: Path, samples: int) -> list[float]:
    delays = []
    header = TraceHeader(kvclaims_trace=1, usable_blocks=8)
    for sample in range(samples):
        path = directory / f"flush-{sample}.ndjson"
        sink = TraceSink.open(path, header)
        size = path.stat().st_size
        time.sleep(FLUSH_SECONDS * (sample % 5) / 5)  # spread over the flusher's period
        sink.emit(ActiveRequestAdmitted, request_id="r", active_live_blocks=1)
        sink.flush()
        start = time.monotonic()
        while path.stat().st_size == size:
            time.sleep(0.001)
        delays.append(time.monotonic() - start)
        sink.close()
    return delays


def watch_delays(directory: Path, samples: int) -> list[float]:
    trace = TraceBuilder(usable_blocks=80).accept("A", blocks=2).store_prefix("A", 2).materialize("A", 2)
    prefix = trace.admit("r1").finish("r1").ndjson(closed=False)
    breaking = b'{"seq":99,"event":"request_finished","request_id":"r1","status":"again"}\n'
    delays = []
    for sample in range(samples):
        path = directory / f"watch-{sample}.ndjson"
        path.write_bytes(prefix)
        command = [sys.executable, "-m", "kvclaims", "watch", "--interval", "0.1", str(path)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        while "no violation" not in process.stdout.readline():
            pass
        start = time.monotonic()
        with path.open("ab") as handle:
            handle.write(breaking)
        while "rejected" not in process.stdout.readline():
            pass
        delays.append(time.monotonic() - start)
        process.wait(timeout=60)
    return delays


def summary(name: str, delays: list[float]) -> str:
    ordered = sorted(delays)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"{name}: n={len(ordered)} median {statistics.median(ordered) * 1000:.1f} ms, "
        f"p95 {p95 * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--watch-samples", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        print(f"flush bound (tracefile.FLUSH_SECONDS): {FLUSH_SECONDS * 1000:.0f} ms")
        print(
            summary(
                "idle flush delay (hand-over -> visible in the file)", flush_delays(directory, args.samples)
            )
        )
        print(
            summary(
                "watch latency (line appended -> 'rejected' printed)",
                watch_delays(directory, args.watch_samples),
            )
        )


if __name__ == "__main__":
    main()
