"""Checker throughput on every shape a user's writer produces, each against decode-only.

    .venv/bin/python bench/check_shapes.py [--events 300000] [--repeat 3] [--cpu]

One valid trace v1 (`kvclaims.refinement.testing.generate_valid_trace`) is written in each
shape a writer produces, as a temporary file:

- compact: msgspec / `model_dump_json` style, no whitespace (what the generator writes);
- json.dumps: Python's default separators (", " and ": ");
- pretty-ish: spaces around every separator and inside the braces;
- reordered: the keys of every object in reverse order (compact);
- explicit nulls: every absent field whose default is null written as null, nested objects too
  (compact), as `json.dumps(model.model_dump())` writes it without the spaces;
- json.dumps + nulls: both (the pydantic user's `json.dumps(event.model_dump())`);
- CRLF: compact lines ended by CRLF;
- gzip: the compact file gzip-compressed (the reader inflates it as it reads; it cannot be
  read ahead by position).

For each shape, in one run, interleaved round by round so that machine noise hits every shape
alike, best of --repeat:

- decode-only: every event line decoded by the reader's own msgspec decoder, chunked as the
  reader chunks (for gzip: inflated as the reader inflates it), the floor any NDJSON checker
  pays for these bytes;
- check: `check_trace(path)` as users run it (a read-ahead child where available);
- check in one process (`KVCLAIMS_READ_AHEAD=0`).

It prints a table of rates and ratios (check / decode-only of the same bytes), and the spread
(slowest shape's check time per event over the fastest's) across the shapes. Nothing is
asserted: performance never gates a test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from kvclaims.refinement import check_trace
from kvclaims.refinement.decoding import EVENT_STRUCTS, event_decoder
from kvclaims.refinement.read_ahead import ENVIRONMENT, available
from kvclaims.refinement.reader import CHUNK_BYTES
from kvclaims.refinement.testing import generate_valid_trace
from kvclaims.spec import trace_structs

CLOCK = time.perf_counter
"""Wall clock by default; --cpu times this process's CPU (the read-ahead child not included)."""


def _null_fields(struct: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(field.encode_name for field in msgspec.structs.fields(struct) if field.default is None)


_TOP_NULLS = {name: _null_fields(struct) for name, struct in EVENT_STRUCTS.items()}
_NESTED_NULLS = {  # tagged nested objects (a claim's predicate), by their tag
    struct.__struct_config__.tag: _null_fields(struct)
    for struct in vars(trace_structs).values()
    if isinstance(struct, type)
    and issubclass(struct, msgspec.Struct)
    and struct.__struct_config__.tag_field == "kind"
}


def _with_nulls(document: dict[str, Any]) -> dict[str, Any]:
    names = _TOP_NULLS.get(document.get("event"), ()) or _NESTED_NULLS.get(document.get("kind"), ())
    full = {key: _with_nulls(value) if isinstance(value, dict) else value for key, value in document.items()}
    for name in names:
        full.setdefault(name, None)
    return full


def _reversed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reversed(value[key]) for key in reversed(value)}
    return value


def _compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _pretty(document: Any) -> bytes:
    return b"{ " + json.dumps(document, separators=(" , ", " : ")).encode()[1:-1] + b" }"


Shape = Callable[[bytes], bytes]

SHAPES: dict[str, Shape] = {
    "compact": lambda line: line,
    "json.dumps": lambda line: json.dumps(json.loads(line)).encode(),
    "pretty-ish": lambda line: _pretty(json.loads(line)),
    "reordered": lambda line: _compact(_reversed(json.loads(line))),
    "explicit nulls": lambda line: _compact(_with_nulls(json.loads(line))),
    "json.dumps + nulls": lambda line: json.dumps(_with_nulls(json.loads(line))).encode(),
    "CRLF": lambda line: line,
    "gzip": lambda line: line,
}


def write_shapes(compact: Path, directory: Path) -> dict[str, Path]:
    """Every shape of the trace at `compact`, streamed line by line into `directory`."""
    paths = {}
    for name, shape in SHAPES.items():
        path = directory / (
            name.replace(" ", "_").replace("+", "and") + (".ndjson.gz" if name == "gzip" else ".ndjson")
        )
        newline = b"\r\n" if name == "CRLF" else b"\n"
        opener: Any = gzip.open if name == "gzip" else open
        with compact.open("rb") as lines, opener(path, "wb") as out:
            out.write(lines.readline().rstrip(b"\n") + newline)  # the header as written
            for line in lines:
                out.write(shape(line.rstrip(b"\n")) + newline)
        paths[name] = path
    return paths


def _chunks(path: Path) -> Iterator[bytes]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        yield from iter(lambda: stream.read(CHUNK_BYTES), b"")


def decode_only(path: Path) -> tuple[int, float]:
    """Events decoded, and seconds: the reader's decoder on every event line, as it chunks."""
    decode = event_decoder().decode
    started = CLOCK()
    count = 0
    pending = b""
    header = True
    for chunk in _chunks(path):
        pieces = (pending + chunk if pending else chunk).split(b"\n")
        pending = pieces.pop()
        if header and pieces:
            pieces.pop(0)
            header = False
        for piece in pieces:
            decode(piece)
        count += len(pieces)
    if pending:
        decode(pending)
        count += 1
    return count, CLOCK() - started


def check(path: Path, *, read_ahead: bool) -> tuple[int, float]:
    os.environ[ENVIRONMENT] = "1" if read_ahead else "0"
    try:
        started = CLOCK()
        verdict = check_trace(path)
        seconds = CLOCK() - started
    finally:
        del os.environ[ENVIRONMENT]
    if verdict.outcome.value != "accepted":
        raise SystemExit(f"{path.name} was not accepted: {verdict.outcome.value} {verdict.reason}")
    return verdict.events, seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cpu", action="store_true", help="time this process's CPU instead of wall clock")
    parser.add_argument("--only", nargs="*", choices=sorted(SHAPES), help="measure only these shapes")
    args = parser.parse_args()
    global CLOCK
    if args.cpu:
        CLOCK = time.process_time
    with tempfile.TemporaryDirectory(prefix="kvclaims-shapes-") as scratch:
        directory = Path(scratch)
        compact = directory / "generated.ndjson"
        with compact.open("wb") as out:
            generate_valid_trace(out, args.events, seed=args.seed)
        paths = write_shapes(compact, directory)
        if args.only:
            paths = {name: paths[name] for name in args.only}
        times: dict[str, dict[str, list[float]]] = {
            name: {"decode": [], "ahead": [], "alone": []} for name in paths
        }
        events: dict[str, int] = {}
        for _ in range(args.repeat):
            for name, path in paths.items():
                count, seconds = decode_only(path)
                times[name]["decode"].append(seconds)
                checked, seconds = check(path, read_ahead=True)
                times[name]["ahead"].append(seconds)
                _, seconds = check(path, read_ahead=False)
                times[name]["alone"].append(seconds)
                if checked != count:
                    raise SystemExit(f"{name}: checked {checked} events, decoded {count}")
                events[name] = checked
        report(paths, times, events, args)


def report(
    paths: dict[str, Path], times: dict[str, dict[str, list[float]]], events: dict[str, int], args: Any
) -> None:
    clock = "process CPU time (this process only)" if args.cpu else "wall clock"
    ahead = "read ahead by a child" if available() else "read-ahead unavailable: one process"
    print(f"{args.events} events, best of {args.repeat}, {clock}; check: {ahead} (gzip never is)")
    header = (
        f"{'shape':<20}{'MB':>6}{'decode ev/s':>13}{'check ev/s':>12}{'ratio':>7}"
        f"{'1-proc ev/s':>13}{'ratio':>7}"
    )
    print(header)
    print("-" * len(header))
    rates: dict[str, tuple[float, float, float]] = {}
    for name, path in paths.items():
        n = events[name]
        decode, ahead_, alone = (n / min(times[name][kind]) for kind in ("decode", "ahead", "alone"))
        rates[name] = (decode, ahead_, alone)
        size = path.stat().st_size / 1e6
        print(
            f"{name:<20}{size:>6.0f}{decode:>13,.0f}{ahead_:>12,.0f}{ahead_ / decode:>7.2f}"
            f"{alone:>13,.0f}{alone / decode:>7.2f}"
        )
    for column, label in ((1, "check"), (2, "check in one process")):
        fastest = max(rates, key=lambda name: rates[name][column])
        slowest = min(rates, key=lambda name: rates[name][column])
        spread = rates[fastest][column] / rates[slowest][column]
        print(f"spread, {label}: {spread:.2f}x (slowest {slowest}, fastest {fastest})")
    for name in paths:
        runs = {kind: [round(t, 2) for t in values] for kind, values in times[name].items()}
        print(f"runs (s) {name}: {runs}")


if __name__ == "__main__":
    sys.exit(main())
