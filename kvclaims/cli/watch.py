"""`kvclaims watch [TRACE...] [--zmq ENDPOINT --registry FILE] [--interval S] [--metrics-port N]`:
check live kvclaims-v1 trace files, and vLLM's live KV-event stream, as they grow.

Each TRACE is followed like `tail -f` (it may not exist yet: watch says it waits; a partial
last line waits for the rest) and fed to the refinement checker as lines arrive, one thread per
file. A violation is printed with its counterexample as soon as the line that breaks the model
is read; a run is final when its `trace_closed` line arrives (accepted, rejected or
inconclusive as `kvclaims check` would say) or when it becomes invalid (a bad line, a line
after the close, or a file that shrinks while followed). Watch is a service: after a run's
verdict it waits for the next stream at the same path (an engine that restarts moves the old
trace aside to `<stem>.prevN` and starts a new file: a new run). A file replaced before its
close ends its run as `kvclaims check` judges the old file as it stands (a crash leaves it
truncated: inconclusive). `--once` stops at each file's first verdict, for scripts. While a
run is open its state is `open` (no violation so far); a line `open: N events, no violation`
is printed when new events were checked.

`--zmq tcp://127.0.0.1:PORT` (loopback only; repeatable) follows vLLM's KV-event publisher
(`--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
"tcp://127.0.0.1:PORT"}'`: vLLM's publisher connects to an endpoint that names a host, so watch
binds a SUB socket there; if the port is already bound, by a publisher given `tcp://*:PORT`,
watch connects to it instead). Each batch `(topic, seq, msgpack payload)` is checked as it
arrives with the telemetry-join abstraction (`--format vllm-kv-events`) against the claim
registry `--registry FILE`. The stream has no end: it is followed until a verdict is final (a
precondition fails: inconclusive; a malformed batch: invalid; a model violation: rejected) or
watch is stopped. A batch missing from the publisher's seq (a gap, or batches published before
watch subscribed: the first must be seq 0) fails closed. Its verdict says when vLLM stamped the
batch that decided it (`published_ts`, the batch's `ts`) and when watch reported it.

`--metrics-port N` serves Prometheus metrics on 127.0.0.1:N (never another interface):
`kvclaims_trace_verdict{trace, outcome}` (1 for the current state: open, accepted, rejected,
inconclusive, invalid), `kvclaims_trace_events_total{trace, event}` (every event line read, by
type: claim outcomes, refusals, harm) and `kvclaims_trace_lines_total{trace}`. Alert on
`kvclaims_trace_verdict{outcome="rejected"} == 1`.

`--json` prints JSON lines instead: `{"path", "outcome": "open", "events"}` while a trace is
open, then its verdict in `kvclaims check --json`'s shape.

With `--once` (or KV-event streams only), watch exits when every stream is final, with the
exit code of the worst (as `kvclaims check`: 0 accepted, 1 rejected, 2 invalid, 3
inconclusive); Ctrl-C stops it (130). A KV-event stream
counts batches as `kvclaims_trace_lines_total`.
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any, Self
from urllib.parse import urlsplit

import click
import msgspec
from rich.markup import escape

from kvclaims.cli._common import PathType, json_option, print_json, runs, stdout_console
from kvclaims.cli.check import EXIT_CODES
from kvclaims.cli.check import print_one as print_verdict
from kvclaims.spec.errors import InputError, Problem

OUTCOMES = ("open", "accepted", "rejected", "inconclusive", "invalid")
_CLOSE = re.compile(rb'"event"\s*:\s*"trace_closed"')
_EVENT = re.compile(rb'"event"\s*:\s*"([a-z_]{1,64})"')
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_FRAME = struct.Struct(">QI")
HISTORY_CAP = 64 * 1024 * 1024
"""Bytes of a KV-event stream kept to re-read the part before a rejection (its minimal
prefix); past it the history is dropped and a rejection is reported without the prefix."""


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


class _Stream:
    """A followed stream is its own context manager (the checker opens it with `with`)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Follow(_Stream):
    """A binary stream over a growing trace file for the checker's source: `read` waits for
    new bytes and returns b"" only once the file's `trace_closed` line was read (then what
    follows it at that moment, then b"") or `stop` is set. A file that shrinks is an error."""

    def __init__(self, path: Path, interval: float, watcher: FileWatcher) -> None:
        self._path = path
        self._interval = interval
        self._watcher = watcher
        self._file: IO[bytes] | None = None
        self._partial = b""
        self._closed_seen = False
        self._rotated = False
        self.lines = 0

    def read(self, size: int = -1) -> bytes:
        while not self._watcher.stop.is_set():
            if self._file is None:
                self._file = self._watcher.open_next_run()
                if self._file is None:
                    time.sleep(self._interval)
                    continue
            data = self._file.read(size)
            if data or self._closed_seen or self._rotated:
                self._count(data)
                return data
            self._rotated = self._watcher.service and _replaced(self._path, self._file)
            if self._rotated:
                continue  # drain what the old file got before its writer moved it aside
            self._check_not_shrunk()
            self._watcher.caught_up(self.lines - 1)  # the header is no event
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


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _replaced(path: Path, file: IO[bytes]) -> bool:
    """Whether `path` now names another file than `file` (moved aside by a restarted engine,
    or rotated), or no file at all."""
    try:
        return _identity(path.stat()) != _identity(os.fstat(file.fileno()))
    except FileNotFoundError:
        return True


def zmq_subscriber(endpoint: str, topic: str) -> Any:
    """A SUB socket on `endpoint` (`tcp://` on a loopback host only) subscribed to `topic`:
    bound there, or connected when the port is already bound (a publisher given `tcp://*:PORT`).
    Raises `InputError` for any other endpoint or a socket error."""
    import zmq

    parts = urlsplit(endpoint)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or parts.hostname not in LOOPBACK_HOSTS or not port or parts.path:
        message = "must be tcp://127.0.0.1:PORT (loopback only)"
        raise InputError([Problem("--zmq", f"{endpoint!r} {message}", field="--zmq")])
    socket = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, 100_000)  # vLLM's publisher default; beyond it, a gap
    socket.setsockopt(zmq.MAXMSGSIZE, HISTORY_CAP)  # a larger message is dropped: a gap
    socket.setsockopt(zmq.SUBSCRIBE, topic.encode())
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as error:
        if error.errno != zmq.EADDRINUSE:
            socket.close()
            raise InputError([Problem("--zmq", f"{endpoint}: {error}", field="--zmq")]) from None
        socket.connect(endpoint)
    return socket


class _Stamp(msgspec.Struct, array_like=True):
    """The first field of vLLM's array-like `KVEventBatch`: when the engine made it."""

    ts: float


class ZmqFollow(_Stream):
    """vLLM's live KV-event batches, received on a ZMQ SUB socket, as a binary stream in the
    msgpack capture format the vllm-kv-events reader reads (`seq | length | payload` frames, the
    payload verbatim). `read` waits for a batch and returns b"" only once `stop` is set.

    Fails closed: a message that is not `(topic, 8-byte seq, payload)` is invalid input; a first
    batch other than seq 0 (batches published before the subscription) is a gap. Gaps later on
    are the reader's to find. The bytes read are kept (`history`, up to `HISTORY_CAP`) so a
    rejection's prefix can be re-read; `stamps` maps recent frame numbers to the batch's `ts`."""

    def __init__(self, socket: Any, interval: float, watcher: Watcher) -> None:
        self._socket = socket
        self._interval_ms = max(1, round(interval * 1000))
        self._watcher = watcher
        self._pending = bytearray()
        self.history: bytearray | None = bytearray()
        self.frames = 0
        self.stamps: deque[tuple[int, float]] = deque(maxlen=1024)

    def read(self, size: int = -1) -> bytes:
        while not self._pending:
            if self._watcher.stop.is_set():
                return b""
            if not self._receive():
                self._watcher.caught_up(self.frames)
        count = len(self._pending) if size < 0 else min(size, len(self._pending))
        data = bytes(self._pending[:count])
        del self._pending[:count]
        return data

    def _receive(self) -> bool:
        """Wait up to one poll period for a message; queue it as a frame."""
        if not self._socket.poll(self._interval_ms):
            return False
        parts = self._socket.recv_multipart()
        number = self.frames + 1
        if len(parts) != 3 or len(parts[1]) != 8:
            from kvclaims.refinement.reader import parse_error

            shape = f"{len(parts)} parts" + (f", a {len(parts[1])}-byte seq" if len(parts) > 1 else "")
            raise parse_error(f"a ZMQ message that is not (topic, 8-byte seq, payload): {shape}", number)
        seq = int.from_bytes(parts[1], "big")
        if self.frames == 0 and seq != 0:
            from kvclaims.refinement.abstractions.kv_event_join import P, undecidable

            raise undecidable(
                P.joinable_backend_events,
                f"the first batch received is seq {seq}: batches 0..{seq - 1} were published "
                "before watch subscribed (start watch before the engine publishes)",
                number,
            )
        frame = _FRAME.pack(seq, len(parts[2])) + parts[2]
        self._pending += frame
        self.frames = number
        self._keep(frame)
        try:
            self.stamps.append((number, msgspec.msgpack.decode(parts[2], type=_Stamp).ts))
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # not an array-like batch: the reader says what is wrong with it
        self._watcher.metrics.read(self._watcher.name, [b""])
        return True

    def _keep(self, frame: bytes) -> None:
        if self.history is not None:
            if len(self.history) + len(frame) > HISTORY_CAP:
                self.history = None
            else:
                self.history += frame

    def stamp(self, frame: int | None) -> float | None:
        """The `ts` vLLM gave batch `frame`, if it is among the recent ones."""
        return next((ts for number, ts in self.stamps if number == frame), None)

    def close(self) -> None:
        self._socket.close()


class Watcher:
    """Follows one stream (a trace file, or a KV-event endpoint) to its verdict (`run`, in its
    own thread)."""

    def __init__(
        self,
        name: str,
        interval: float,
        metrics: Metrics,
        stop: threading.Event,
        *,
        as_json: bool = False,
        unit: str = "events",
    ) -> None:
        self.name = name
        self.as_json = as_json
        self.interval = interval
        self.metrics = metrics
        self.stop = stop
        self.unit = unit
        self.verdict: Any = None
        self.service = False
        """Keep following new runs after a verdict (`FileWatcher` without --once)."""
        self._reported = 0

    def check(self, *, minimize: bool) -> Any:
        """The stream's verdict (waits for it); `minimize`: a rejection with its minimal prefix
        (the part read so far, re-read)."""
        raise NotImplementedError

    def run(self) -> None:
        self.opened()
        self.run_once()
        while self.service and not self.stop.is_set():
            self._reported = 0
            self.run_once()

    def opened(self) -> None:
        """A run begins: its state is open."""
        self.metrics.state(self.name, "open")
        if self.as_json:
            print_json({"path": self.name, "outcome": "open", self.unit: 0})
            sys.stdout.flush()
        else:
            stdout_console().print(f"watching {escape(self.name)}")

    def run_once(self) -> None:
        # Report at once; shrinking a rejection to its minimal prefix is quadratic in the
        # steps before it (a second pass over what was read), so it follows the report.
        self.verdict = self.check(minimize=False)
        self.metrics.state(self.name, self.verdict.outcome.value)
        if self.stop.is_set():
            return
        self.report(self.verdict, {})
        if self.verdict.counterexample is not None:
            minimized = self.check(minimize=True).counterexample
            if minimized is not None and minimized.minimal_prefix:
                self.report_prefix(minimized)

    def report_prefix(self, counterexample: Any) -> None:
        if self.as_json:
            prefix = [
                {"line": p.line, "event": p.event, "summary": p.summary}
                for p in counterexample.minimal_prefix
            ]
            print_json({"path": self.name, "minimal_prefix": prefix})
            sys.stdout.flush()
        else:
            from kvclaims.refinement.rendering import prefix_lines

            for line in prefix_lines(counterexample):
                stdout_console().print(escape(line))

    def report(self, verdict: Any, extra: dict[str, Any]) -> None:
        if self.as_json:
            print_json(verdict.to_json() | extra)
            sys.stdout.flush()
        else:
            print_verdict(verdict)
            for key, value in extra.items():
                stdout_console().print(f"  {key}: {value}")

    def caught_up(self, count: int) -> None:
        """The follower read everything sent so far: say how far the check got."""
        if count > 0 and count != self._reported:
            self._reported = count
            if self.as_json:
                print_json({"path": self.name, "outcome": "open", self.unit: count})
                sys.stdout.flush()
                return
            stdout_console().print(f"open: {escape(self.name)}: {count} {self.unit}, no violation")


class FileWatcher(Watcher):
    """A kvclaims-v1 trace file, followed to its `trace_closed`."""

    def __init__(
        self,
        path: Path,
        interval: float,
        metrics: Metrics,
        stop: threading.Event,
        *,
        service: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(str(path), interval, metrics, stop, **kw)
        self.path = path
        self.service = service
        self._last: tuple[int, int] | None = None
        self._waiting_said = False

    def open_next_run(self) -> IO[bytes] | None:
        """The file of the next run (a file at `path` that is not the last run's), or None
        (said once) while there is none yet."""
        try:
            file = self.path.open("rb")
        except FileNotFoundError:
            self._say_waiting("does not exist yet")
            return None
        if _identity(os.fstat(file.fileno())) == self._last:
            file.close()
            self._say_waiting("is the stream already checked; waiting for a new one")
            return None
        later, self._last = self._last is not None, _identity(os.fstat(file.fileno()))
        self._waiting_said = False
        if later:
            self.opened()
        return file

    def _say_waiting(self, why: str) -> None:
        if self._waiting_said:
            return
        self._waiting_said = True
        if self.as_json:
            print_json({"path": self.name, "outcome": "waiting", "reason": f"{self.name} {why}"})
            sys.stdout.flush()
        else:
            stdout_console().print(f"waiting: {escape(self.name)} {why}")

    def check(self, *, minimize: bool) -> Any:
        from kvclaims.refinement.abstractions.kvclaims_v1 import FORMAT
        from kvclaims.refinement.api import check_source

        if minimize:  # the file as it is now: the rejection lies in the part already read
            return check_source(lambda: self.path.open("rb"), name=self.name, format=FORMAT, open=True)
        return check_source(
            lambda: Follow(self.path, self.interval, self), name=self.name, format=FORMAT, minimize=False
        )


class ZmqWatcher(Watcher):
    """vLLM's KV-event publisher, joined with a claim registry, followed until a verdict is
    final or watch stops."""

    def __init__(
        self,
        socket: Any,
        endpoint: str,
        registry: Path,
        interval: float,
        metrics: Metrics,
        stop: threading.Event,
        **kw: Any,
    ) -> None:
        super().__init__(endpoint, interval, metrics, stop, unit="batches", **kw)
        self.follow = ZmqFollow(socket, interval, self)
        self.registry = registry

    def check(self, *, minimize: bool) -> Any:
        import io

        from kvclaims.refinement.abstractions.vllm_kv_events import FORMAT
        from kvclaims.refinement.api import check_source

        follow = self.follow
        if minimize:  # the batches read so far (none kept past HISTORY_CAP: no prefix then)
            opener: Any = lambda: io.BytesIO(bytes(follow.history or b""))  # noqa: E731
        else:
            opener = lambda: follow  # noqa: E731
        return check_source(opener, name=self.name, format=FORMAT, registry=self.registry, minimize=minimize)

    def report(self, verdict: Any, extra: dict[str, Any]) -> None:
        at = verdict.counterexample.line if verdict.counterexample is not None else None
        if at is None and verdict.finding is not None:
            at = verdict.finding.line
        published = self.follow.stamp(at)
        if published is not None:
            extra = extra | {"published_ts": published, "reported_ts": time.time()}
        super().report(verdict, extra)


def _watchers(args: argparse.Namespace, metrics: Metrics, stop: threading.Event) -> list[Watcher]:
    """One watcher per trace file and per KV-event endpoint; bad input raises `InputError`
    before anything is followed."""
    if not args.traces and not args.zmq:
        raise InputError([Problem("kvclaims watch", "name a TRACE file or a --zmq endpoint")])
    if args.zmq and args.registry is None:
        raise InputError([Problem("--registry", "--zmq needs the claim registry to join the events with")])
    if args.registry is not None and not args.zmq:
        raise InputError([Problem("--registry", "--registry goes with --zmq")])
    options: dict[str, Any] = {"as_json": args.json}
    service = not args.once
    watchers: list[Watcher] = [
        FileWatcher(p, args.interval, metrics, stop, service=service, **options) for p in args.traces
    ]
    if args.zmq:
        from kvclaims.refinement.abstractions.claim_registry import load_registry

        load_registry(args.registry)  # a malformed registry is bad input now, not a dead thread
        for endpoint in args.zmq:
            socket = zmq_subscriber(endpoint, args.topic)
            watchers.append(
                ZmqWatcher(socket, endpoint, args.registry, args.interval, metrics, stop, **options)
            )
    return watchers


def run(args: argparse.Namespace) -> int:
    from kvclaims.refinement.verdict import Outcome

    stop = threading.Event()
    metrics = Metrics(args.metrics_port)
    try:
        watchers = _watchers(args, metrics, stop)
    except BaseException:
        metrics.close()
        raise
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
    short_help="follow live trace files and vLLM's KV-event stream, checking them as they grow",
)
@click.argument("traces", nargs=-1, type=PathType, metavar="[TRACE]...")
@click.option(
    "--zmq",
    multiple=True,
    metavar="ENDPOINT",
    help="follow vLLM's KV-event publisher at tcp://127.0.0.1:PORT (repeatable)",
)
@click.option("--registry", type=PathType, metavar="FILE", help="claim registry for --zmq (telemetry join)")
@click.option("--topic", default="", show_default=True, help="ZMQ topic prefix to subscribe to (--zmq)")
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
@click.option(
    "--once",
    is_flag=True,
    help="stop each trace file at its first verdict (a close, a violation); default: keep following new runs",
)
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
