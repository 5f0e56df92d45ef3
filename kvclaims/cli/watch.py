"""`kvclaims watch TRACE... [--interval S] [--metrics-port N]`: check live kvclaims-v1 trace
files as they grow.

Each TRACE is followed like `tail -f` (it may not exist yet; a partial last line waits for the
rest) and fed to the refinement checker as lines arrive, one thread per file. A violation is
printed with its counterexample as soon as the line that breaks the model is read; the trace
is final when its `trace_closed` line arrives (accepted, rejected or inconclusive as
`kvclaims check` would say) or when it becomes invalid (a bad line, a line after the close, or
a file that shrinks while followed). While a trace is open its state is `open` (no violation
so far); a line `open: N events, no violation` is printed when new events were checked.

`--metrics-port N` serves Prometheus metrics on 127.0.0.1:N (never another interface):
`kvclaims_trace_verdict{trace, outcome}` (1 for the current state: open, accepted, rejected,
inconclusive, invalid), `kvclaims_trace_events_total{trace, event}` (every event line read, by
type: claim outcomes, refusals, harm) and `kvclaims_trace_lines_total{trace}`. Alert on
`kvclaims_trace_verdict{outcome="rejected"} == 1`.

`--json` prints JSON lines instead: `{"path", "outcome": "open", "events"}` while a trace is
open, then its verdict in `kvclaims check --json`'s shape.

Watch exits when every trace is final, with the exit code of the worst (as `kvclaims check`:
0 accepted, 1 rejected, 2 invalid, 3 inconclusive); Ctrl-C stops it (130).
"""

from __future__ import annotations

import argparse
import re
import threading
import time
from pathlib import Path
from typing import IO, Any

import click
from rich.markup import escape

from kvclaims.cli._common import PathType, json_option, print_json, runs, stdout_console
from kvclaims.cli.check import EXIT_CODES
from kvclaims.cli.check import print_one as print_verdict

OUTCOMES = ("open", "accepted", "rejected", "inconclusive", "invalid")
_CLOSE = re.compile(rb'"event"\s*:\s*"trace_closed"')
_EVENT = re.compile(rb'"event"\s*:\s*"([a-z_]{1,64})"')


class Metrics:
    """Prometheus metrics of the followed traces (a registry of its own), or nothing."""

    def __init__(self, port: int | None) -> None:
        self.enabled = port is not None
        if not self.enabled:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.registry = CollectorRegistry()
        self.verdict = Gauge(
            "kvclaims_trace_verdict",
            "1 for the trace's current state",
            ["trace", "outcome"],
            registry=self.registry,
        )
        self.events = Counter(
            "kvclaims_trace_events", "event lines read, by type", ["trace", "event"], registry=self.registry
        )
        self.lines = Counter("kvclaims_trace_lines", "lines read", ["trace"], registry=self.registry)
        self.server, self.thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def state(self, trace: str, outcome: str) -> None:
        if self.enabled:
            for name in OUTCOMES:
                self.verdict.labels(trace, name).set(1 if name == outcome else 0)

    def read(self, trace: str, lines: list[bytes]) -> None:
        if self.enabled:
            self.lines.labels(trace).inc(len(lines))
            for line in lines:
                found = _EVENT.search(line)
                if found is not None:
                    self.events.labels(trace, found.group(1).decode()).inc()

    def close(self) -> None:
        if self.enabled:
            self.server.shutdown()


class Follow:
    """A binary stream over a growing trace file for the checker's source: `read` waits for
    new bytes and returns b"" only once the file's `trace_closed` line was read (then what
    follows it at that moment, then b"") or `stop` is set. A file that shrinks is an error."""

    def __init__(self, path: Path, interval: float, watcher: Watcher) -> None:
        self._path = path
        self._interval = interval
        self._watcher = watcher
        self._file: IO[bytes] | None = None
        self._partial = b""
        self._closed_seen = False
        self.lines = 0

    def read(self, size: int = -1) -> bytes:
        while not self._watcher.stop.is_set():
            if self._file is None:
                try:
                    self._file = self._path.open("rb")
                except FileNotFoundError:
                    time.sleep(self._interval)
                    continue
            data = self._file.read(size)
            if data or self._closed_seen:
                self._count(data)
                return data
            self._check_not_shrunk()
            self._watcher.caught_up(self)
            time.sleep(self._interval)
        return b""

    def _count(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        self.lines += len(lines)
        self._watcher.metrics.read(self._watcher.name, lines)
        if any(_CLOSE.search(line) for line in lines):
            self._closed_seen = True

    def _check_not_shrunk(self) -> None:
        assert self._file is not None
        if self._path.stat().st_size < self._file.tell():
            from kvclaims.refinement.reader import parse_error

            raise parse_error("the file shrank while it was followed (replaced or truncated)", None)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> Follow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Watcher:
    """Follows one trace to its verdict (`run`, in its own thread)."""

    def __init__(
        self, path: Path, interval: float, metrics: Metrics, stop: threading.Event, *, as_json: bool = False
    ) -> None:
        self.path = path
        self.as_json = as_json
        self.name = str(path)
        self.interval = interval
        self.metrics = metrics
        self.stop = stop
        self.verdict: Any = None
        self._reported = 0

    def run(self) -> None:
        from kvclaims.refinement.abstractions.kvclaims_v1 import FORMAT
        from kvclaims.refinement.api import check_source

        self.metrics.state(self.name, "open")
        if self.as_json:
            print_json({"path": self.name, "outcome": "open", "events": 0})
        else:
            stdout_console().print(f"watching {escape(self.name)}")
        self.verdict = check_source(
            lambda: Follow(self.path, self.interval, self),
            name=self.name,
            format=FORMAT,
            reopen=lambda: self.path.open("rb"),
        )
        self.metrics.state(self.name, self.verdict.outcome.value)
        if self.stop.is_set():
            return
        if self.as_json:
            print_json(self.verdict.to_json())
        else:
            print_verdict(self.verdict)

    def caught_up(self, follow: Follow) -> None:
        """The follower read everything written so far: say how far the check got."""
        if follow.lines > 1 and follow.lines != self._reported:
            self._reported = follow.lines
            if self.as_json:
                print_json({"path": self.name, "outcome": "open", "events": follow.lines - 1})
                return
            stdout_console().print(f"open: {escape(self.name)}: {follow.lines - 1} events, no violation")


def run(args: argparse.Namespace) -> int:
    from kvclaims.refinement.verdict import Outcome

    stop = threading.Event()
    metrics = Metrics(args.metrics_port)
    watchers = [Watcher(path, args.interval, metrics, stop, as_json=args.json) for path in args.traces]
    threads = [threading.Thread(target=w.run, name=f"watch {w.name}", daemon=True) for w in watchers]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        return 130
    finally:
        metrics.close()
    # a watcher that died without a verdict (an unexpected error, printed by its thread) counts
    # as invalid: never as a pass
    worst = Outcome.worst([w.verdict.outcome if w.verdict else Outcome.invalid for w in watchers])
    return EXIT_CODES[worst.value]


@click.command(
    "watch",
    help=__doc__,
    short_help="follow live trace files and check them as they grow (Prometheus metrics optional)",
)
@click.argument("traces", nargs=-1, required=True, type=PathType, metavar="TRACE...")
@click.option(
    "--interval",
    type=click.FloatRange(0.001, 60),
    default=0.1,
    show_default=True,
    metavar="S",
    help="poll period in seconds",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    metavar="N",
    help="serve Prometheus metrics on 127.0.0.1:N",
)
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
