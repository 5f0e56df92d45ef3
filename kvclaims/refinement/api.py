"""`check_trace(path) -> TraceVerdict`: the pytest-friendly entry point, and how a verdict is
assembled from a source, the checker and (for rejections) a minimal counterexample prefix.

    from kvclaims import check_trace
    verdict = check_trace("run.ndjson")
    assert verdict.outcome == "accepted", verdict.reason

The trace is streamed once. A rejection re-reads it up to the offending event, projects the
steps onto the claims and requests the violation is about, and shrinks that projection one
step at a time while the checker still rejects it with the same rule, at the same event, from
the same abstract state: what remains is the minimal prefix of the counterexample.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from kvclaims.refinement.abstractions.kvclaims_v1 import FORMAT as KVCLAIMS_V1
from kvclaims.refinement.checker import Budget, Checker, Rejection, Undecidable
from kvclaims.refinement.decoding import EVENT_NAME
from kvclaims.refinement.reader import HeaderInfo, TraceInputError, TraceStream
from kvclaims.refinement.sources import AUTO, FORMATS, Opener, detect, open_source
from kvclaims.refinement.verdict import (
    RULE_ERROR_CLASS,
    Counterexample,
    ErrorClass,
    Finding,
    Outcome,
    PrefixEvent,
    TraceVerdict,
)
from kvclaims.spec.tables import KV_EVENT_FORMATS

DEFAULT_BUDGET = Budget()

MAX_MINIMIZED_STEPS = 200
"""Projections longer than this are reported unshrunk (shrinking is quadratic)."""

Progress = Callable[[int], None]
"""Called with the number of bytes read so far."""


TraceInput = str | Path | bytes | IO[bytes]
"""A trace file's path, its bytes, or a binary file object (read from where it stands)."""


def check_trace(
    trace: TraceInput,
    *,
    format: str = AUTO,
    registry: str | Path | None = None,
    budget: Budget = DEFAULT_BUDGET,
    progress: Progress | None = None,
    strict: bool = False,
    open: bool = False,
) -> TraceVerdict:
    """Check one trace: a path, bytes or a binary file object (plain, or gzip-compressed).
    `format` is `auto` or one of `FORMATS`; `registry` is the claim registry that KV-event
    captures (`KV_EVENT_FORMATS`) need: without one such a capture is `inconclusive`, never an
    error. `strict` refuses fields outside trace v1 instead of keeping them as context. Bad
    trace input never raises: it is an `invalid` verdict. A bad registry or format name raises
    `InputError` / `ValueError`. `open=True` judges a kvclaims-v1 trace without its
    `trace_closed` end as if it ended there (a live or cut file); by default such a trace is
    truncated: `inconclusive`."""
    options: dict[str, Any] = {
        "format": format,
        "registry": registry,
        "budget": budget,
        "strict": strict,
        "open": open,
    }
    if isinstance(trace, bytes):
        return check_source(lambda: io.BytesIO(trace), name="<bytes>", **options)
    if not isinstance(trace, (str, Path)):
        with _rereadable(trace) as opener:
            return check_source(
                opener, name=str(getattr(trace, "name", "<stream>")), progress=progress, **options
            )
    path = Path(trace)
    if not path.is_file():
        what = "is a directory, not a trace file" if path.is_dir() else "no such trace file"
        finding = Finding(ErrorClass.parse, f"{what}: {path.resolve()}")
        return _verdict(str(path), format, Outcome.invalid, finding=finding)
    return check_source(lambda: path.open("rb"), name=str(path), progress=progress, **options)


def check_bytes(
    data: bytes,
    *,
    name: str = "<bytes>",
    format: str = AUTO,
    registry: str | Path | None = None,
    open: bool = False,
) -> TraceVerdict:
    """Check a trace held in memory (tests, generated adversarial traces)."""
    return check_source(lambda: io.BytesIO(data), name=name, format=format, registry=registry, open=open)


@contextlib.contextmanager
def _rereadable(stream: IO[bytes]) -> Iterator[Opener]:
    """An opener for a file object: the checker reads a trace more than once (detection, the
    check, a counterexample's prefix), so a stream that cannot seek (a pipe, stdin) is first
    copied to a temporary file, chunk by chunk. The caller's stream is never closed."""
    if getattr(stream, "seekable", lambda: False)():
        start = stream.tell()
        yield lambda: _Unclosed(stream, start)
        return
    import shutil  # with tempfile, only for a stream that cannot seek
    import tempfile

    with tempfile.TemporaryFile() as copy:
        shutil.copyfileobj(stream, copy)
        yield lambda: _Unclosed(copy, 0)


class _Unclosed:
    """A view of a caller's seekable stream from `start` that `close` leaves open."""

    def __init__(self, stream: IO[bytes], start: int) -> None:
        stream.seek(start)
        self.read = stream.read

    def close(self) -> None:
        pass

    def __enter__(self) -> _Unclosed:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def check_source(
    opener: Opener,
    *,
    name: str,
    format: str = AUTO,
    registry: str | Path | None = None,
    budget: Budget = DEFAULT_BUDGET,
    progress: Progress | None = None,
    strict: bool = False,
    open: bool = False,
    reopen: Opener | None = None,
    minimize: bool = True,
) -> TraceVerdict:
    """Check the trace that `opener` opens; `open` as in `check_trace`. A rejection re-reads
    the trace up to the offending event through `reopen` (default: `opener`), so a caller that
    follows a live file can re-read the part already written without waiting for more, and
    shrinks it to its minimal prefix; `minimize=False` skips that (a live follower reports
    first and minimizes after)."""
    if format != AUTO and format not in FORMATS:
        raise ValueError(f"unknown trace format {format!r}; choose auto or one of {', '.join(FORMATS)}")
    trace = _unwrapped(opener)
    recognised = True
    try:
        fmt, recognised = detect(trace) if format == AUTO else (format, True)
    except TraceInputError as error:
        undecided = error.finding.error_class is ErrorClass.undecidable
        outcome = Outcome.inconclusive if undecided else Outcome.invalid
        return _verdict(name, format, outcome, finding=error.finding)
    if registry is None and fmt in KV_EVENT_FORMATS:
        return _verdict(name, fmt, Outcome.inconclusive, finding=_no_registry(name, fmt))
    registry_path = Path(registry) if registry is not None else None
    run = _Run(name, fmt, budget, judge_open=open)
    with opener() as raw:
        counted: IO[bytes] = _Counting(raw, progress) if progress is not None else raw
        verdict = run.check(
            lambda: open_source(TraceStream(counted), fmt, registry=registry_path, strict=strict)
        )
    if not recognised and verdict.finding is not None:
        finding = verdict.finding
        message = f"no trace format recognises this file; read as {fmt}: {finding.message}"
        verdict = replace(verdict, finding=replace(finding, message=message))
    if minimize and verdict.outcome is Outcome.rejected and run.rejection is not None:
        prefix = _minimal_prefix(
            _unwrapped(reopen) if reopen is not None else trace, fmt, registry_path, run.header, run.rejection
        )
        verdict = _with_prefix(verdict, prefix)
    return verdict


def _no_registry(name: str, fmt: str) -> Finding:
    """Why a KV-event capture checked without a registry is undecided: its blocks join no claim
    (one file's verdict, so that the other traces of a run are still judged)."""
    return Finding(
        ErrorClass.undecidable,
        f"{name}: a {fmt} capture needs a claim registry (--registry FILE); without one no block "
        "joins a claim",
        field="registry",
    )


def _unwrapped(opener: Opener) -> Opener:
    return lambda: TraceStream(opener())


class _Run:
    """One pass of a source through the checker, collecting what the verdict needs."""

    def __init__(self, name: str, fmt: str, budget: Budget, *, judge_open: bool = False) -> None:
        self.name = name
        self.format = fmt
        self.budget = budget
        self.judge_open = judge_open
        self.rejection: Rejection | None = None
        self.header: HeaderInfo | None = None

    def check(self, make_source: Callable[[], Any]) -> TraceVerdict:
        checker: Checker | None = None
        source: Any = None
        try:
            source = make_source()
            self.header = source.header
            checker = Checker(
                usable_blocks=source.header.usable_blocks,
                block_size=source.header.block_size,
                budget=self.budget,
            )
            source.drive(checker)
            truncated = end_of_stream(self.format, checker, judge_open=self.judge_open)
            if truncated is not None:
                return self._verdict(Outcome.inconclusive, source, checker, finding=truncated)
            checker.finish()
        except TraceInputError as error:
            return self._verdict(Outcome.invalid, source, checker, finding=error.finding)
        except Undecidable as error:
            return self._verdict(Outcome.inconclusive, source, checker, finding=error.finding)
        except Rejection as rejection:
            if checker is not None and checker.first_unknown is not None:
                return self._unexplained(rejection, source, checker, checker.first_unknown)
            self.rejection = rejection
            return self._verdict(Outcome.rejected, source, checker, counterexample=rejection.counterexample)
        notes = tuple(f.message for f in checker.undecided) + _context_notes(source)
        preconditions = getattr(source, "preconditions", None)
        if preconditions is not None:
            held = ", ".join(p.value for p, ok in preconditions.items() if ok)
            notes += (f"telemetry_join preconditions hold: {held}",)
        if checker.first_unknown is not None:
            return self._verdict(
                Outcome.inconclusive, source, checker, finding=checker.first_unknown, notes=notes
            )
        if checker.undecided:
            return self._verdict(
                Outcome.inconclusive, source, checker, finding=checker.undecided[0], notes=notes
            )
        if checker.steps == 0:
            finding = Finding(
                ErrorClass.undecidable, "the trace has no step of the model (no claim or request event)"
            )
            return self._verdict(Outcome.inconclusive, source, checker, finding=finding, notes=notes)
        return self._verdict(Outcome.accepted, source, checker, witnesses=checker.witnesses(), notes=notes)

    def _unexplained(
        self, rejection: Rejection, source: Any, checker: Checker, unknown: Finding
    ) -> TraceVerdict:
        """A rejection after an event the format does not define: the unknown event may be
        what the runtime did instead, so the rejection is reported as a note and the verdict
        names the unknown event (inconclusive), not the later line."""
        found = rejection.counterexample
        where = f"line {found.line} ({found.event})" if found.line else "the end of the trace"
        note = (
            f"{where} breaks {found.rule} as read without the unknown event at line "
            f"{unknown.line}: {found.message}"
        )
        return self._verdict(Outcome.inconclusive, source, checker, finding=unknown, notes=(note,))

    def _verdict(self, outcome: Outcome, source: Any, checker: Checker | None, **fields: Any) -> TraceVerdict:
        events = getattr(source, "records", 0)  # counted per decoded run: behind a mid-run stop
        if checker is not None:
            events = max(events, checker.events_reached)
            fields |= {
                "steps": checker.steps_reached,
                "claims": checker.claims_seen,
                "requests": checker.requests_seen,
            }
        return _verdict(self.name, self.format, outcome, events=events, **fields)


def _context_notes(source: Any) -> tuple[str, ...]:
    audit = getattr(source, "audit", None)
    note = audit.note() if audit is not None else None
    return (note,) if note else ()


def end_of_stream(fmt: str, checker: Checker, *, judge_open: bool) -> Finding | None:
    """The end-of-stream rule: a kvclaims-v1 trace is complete only when its writer closed it
    (`trace_closed`, its last line). Without that end the file may be cut (a crash, a kill, a
    tail not yet written), and what the trace still owes at its end cannot be judged: the
    verdict is `inconclusive` with this finding, never `accepted`, unless the caller judges the
    open prefix (`judge_open`). Foreign formats have no close event; their end is their own."""
    if fmt != KVCLAIMS_V1 or judge_open or checker.closed_at is not None:
        return None
    return Finding(
        ErrorClass.undecidable,
        "truncated: the trace does not end with trace_closed (its writer never closed it: "
        "still being written, crashed or killed); judge it as an open prefix with --open",
    )


def _verdict(
    name: str, fmt: str, outcome: Outcome, *, events: int = 0, steps: int = 0, **fields: Any
) -> TraceVerdict:
    finding = fields.get("finding")
    counterexample = fields.get("counterexample")
    if counterexample is not None:
        fields["error_class"] = RULE_ERROR_CLASS[counterexample.rule]
    elif finding is not None:
        fields["error_class"] = finding.error_class
    return TraceVerdict(path=name, format=fmt, outcome=outcome, events=events, steps=steps, **fields)


class _Counting:
    """A read-through stream that reports how far the trace has been read (for progress bars):
    the bytes read through it, or the position a reader that reads the file by position
    (`kvclaims.refinement.read_ahead`) has reached (`reached`). It passes a file's descriptor
    and position through, so that such a reader still recognises the file."""

    def __init__(self, stream: IO[bytes], progress: Progress) -> None:
        self._stream = stream
        self._progress = progress
        self._read = 0
        self._start = _position(stream)

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._read += len(data)
        self._progress(self._read)
        return data

    def fileno(self) -> int:
        return self._stream.fileno()

    def tell(self) -> int:
        return self._stream.tell()

    def reached(self, position: int) -> None:
        """The bytes before file offset `position` are read."""
        self._progress(position - self._start)


def _position(stream: IO[bytes]) -> int:
    try:
        return stream.tell()
    except (AttributeError, OSError, ValueError):
        return 0


# --- minimal counterexample prefix ----------------------------------------------------------


def summarize(event: Any) -> str:
    """A one-line rendering of a step: its type and the fields that identify it."""
    parts = [EVENT_NAME[type(event)]]
    for name in (
        "claim_id",
        "request_id",
        "outcome",
        "reason",
        "blocking_claim_ids",
        "block_id",
        "position",
        "leading_blocks",
        "predicate_satisfied",
    ):
        value = getattr(event, name, None)
        if value is not None:
            parts.append(f"{name}={value.value if hasattr(value, 'value') else value}")
    return " ".join(parts)


def _mentions(event: Any, ids: frozenset[str], blocks: dict[int, str]) -> bool:
    claim_id = getattr(event, "claim_id", None)
    if claim_id in ids or getattr(event, "request_id", None) in ids:
        if claim_id in ids and getattr(event, "block_id", None) is not None:
            blocks[event.block_id] = claim_id
        return True
    if any(c in ids for c in getattr(event, "blocking_claim_ids", ()) or ()):
        return True
    return claim_id is None and getattr(event, "block_id", None) in blocks


class _Past(Exception):
    """The collector has seen the offending event; the rest of the trace is not needed."""


class _Projection:
    """A sink that keeps the steps mentioning the violation's ids, up to the offending event."""

    def __init__(self, target: Counterexample, ids: frozenset[str]) -> None:
        self.target = target
        self.ids = ids
        self.blocks: dict[int, str] = {}
        self.steps: list[tuple[int, int, Any]] = []

    def feed(self, event: Any, line: int, index: int) -> None:
        target = self.target
        if target.event_index >= 0 and index > target.event_index:
            raise _Past
        offending = index == target.event_index and line == target.line
        if offending or _mentions(event, self.ids, self.blocks):
            self.steps.append((line, index, event))

    def feed_run(self, events: list[Any], line: int, index: int) -> None:
        for offset, event in enumerate(events):
            self.feed(event, line + offset, index + offset)

    def unknown(self, name: str, line: int, index: int) -> None:
        if self.target.event_index >= 0 and index > self.target.event_index:
            raise _Past


def _minimal_prefix(
    opener: Opener, fmt: str, registry: Path | None, header: HeaderInfo | None, rejection: Rejection
) -> tuple[PrefixEvent, ...]:
    target = rejection.counterexample
    projection = _Projection(target, rejection.ids)
    try:
        with opener() as stream:
            open_source(stream, fmt, registry=registry).drive(projection)
    except _Past:
        pass
    except (TraceInputError, Undecidable):
        return ()
    steps = projection.steps
    if header is None or not _rejects_alike(steps, header, target):
        return ()
    if len(steps) <= MAX_MINIMIZED_STEPS:
        steps = _shrink(steps, header, target)
    return tuple(PrefixEvent(line, EVENT_NAME[type(event)], summarize(event)) for line, _, event in steps)


def _rejects_alike(steps: Iterable[tuple[int, int, Any]], header: HeaderInfo, target: Counterexample) -> bool:
    checker = Checker(usable_blocks=header.usable_blocks, block_size=header.block_size)
    try:
        for line, index, event in steps:
            checker.feed(event, line, index)
        checker.finish()
    except Rejection as rejection:
        found = rejection.counterexample
        return (
            found.rule is target.rule
            and found.line == target.line
            and found.event_index == target.event_index
            and found.state_before == target.state_before
        )
    except Undecidable:
        return False
    return False


def _shrink(
    steps: list[tuple[int, int, Any]], header: HeaderInfo, target: Counterexample
) -> list[tuple[int, int, Any]]:
    """Drop steps one at a time (never the offending one) while the rejection stays the same."""
    index = 0
    while index < len(steps):
        line, event_index, _ = steps[index]
        if line == target.line and event_index == target.event_index:
            index += 1
            continue
        candidate = steps[:index] + steps[index + 1 :]
        if _rejects_alike(candidate, header, target):
            steps = candidate
        else:
            index += 1
    return steps


def _with_prefix(verdict: TraceVerdict, prefix: tuple[PrefixEvent, ...]) -> TraceVerdict:
    assert verdict.counterexample is not None
    return replace(verdict, counterexample=replace(verdict.counterexample, minimal_prefix=prefix))
