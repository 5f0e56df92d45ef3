"""Trace sources: one per format, all yielding trace v1 steps, and `--format auto` detection.

A source has `format`, `header` (`HeaderInfo`) and `events()`, an iterator of
`(line, event_index, Struct | UnknownEvent)`. Trace v1 is read directly; the NDJSON foreign
vocabularies go through `ForeignSource`, which decodes each record, asks the format's
abstraction for the v1 steps it stands for and validates every step into its Struct; runtimes'
KV block events (vLLM, SGLang, TensorRT-LLM) are joined with a claim registry by
`kvclaims.refinement.abstractions.kv_event_join`. SGLang's msgpack frames have vLLM's wire
form, so `auto` reads them as vLLM's: name `sglang-kv-events` for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import msgspec

from kvclaims.refinement.abstractions import (
    blockpool,
    kvclaims_v1,
    offload_hook,
    pydev_connector,
    sglang_kv_events,
    trtllm_kv_events,
    vllm_kv_events,
)
from kvclaims.refinement.abstractions.kv_event_join import KvEventStream
from kvclaims.refinement.decoding import convert_event
from kvclaims.refinement.reader import (
    HeaderInfo,
    Sink,
    TraceInputError,
    UnknownEvent,
    decode_json,
    exact_document,
    ordering_error,
    parse_error,
    push,
    read_lines,
)
from kvclaims.refinement.verdict import ErrorClass, Finding

Opener = Callable[[], IO[bytes]]
"""Opens the trace afresh (the checker may read it twice: detection, minimal prefix)."""

AUTO = "auto"


class Source(Protocol):
    """A trace in one format: its header, then `drive(sink)` pushes every step to the sink;
    `records` counts the source's own records (lines, frames) read so far."""

    format: str
    header: HeaderInfo
    records: int

    def drive(self, sink: Sink) -> None: ...


class Abstraction(Protocol):
    """An NDJSON foreign vocabulary (see `kvclaims.refinement.abstractions`)."""

    FORMAT: str
    VOCABULARY: frozenset[str]
    header: HeaderInfo

    def abstract(self, record: dict[str, Any], line: int) -> list[dict[str, Any]]: ...

    def finish(self) -> list[dict[str, Any]]: ...


_FOREIGN: dict[str, Any] = {
    blockpool.FORMAT: blockpool.BlockPoolAbstraction,
    offload_hook.FORMAT: offload_hook.OffloadHookAbstraction,
    pydev_connector.FORMAT: pydev_connector.PydevConnectorAbstraction,
}

_KV_EVENTS: dict[str, type[KvEventStream]] = {
    vllm_kv_events.FORMAT: vllm_kv_events.KvEventsSource,
    sglang_kv_events.FORMAT: sglang_kv_events.SglangKvEventsSource,
    trtllm_kv_events.FORMAT: trtllm_kv_events.TrtllmKvEventsSource,
}
"""Runtimes' block-event captures, each joined with a claim registry (`--registry`)."""

FORMATS: tuple[str, ...] = (kvclaims_v1.FORMAT, *_FOREIGN, *_KV_EVENTS)
"""Every `--format` name, `auto` aside."""

ROUTER_FORMAT = "kvclaims-v1-router"
DYNAMO_ROUTER_FORMAT = "dynamo-active-sequences"
ROUTER_FORMATS: tuple[str, ...] = (ROUTER_FORMAT, DYNAMO_ROUTER_FORMAT)
"""`check --fleet`'s router streams: the routing hook's trace v1 stream, or NVIDIA Dynamo's KV
router decisions (`kvclaims.refinement.abstractions.dynamo_router`). Named here, with the other
format names, so that the command line needs no fleet code (and no pydantic)."""


class ForeignSource:
    """An NDJSON trace in a foreign vocabulary, abstracted record by record.

    Records must be JSON objects with a string `event`; when the vocabulary numbers its events
    (`event_sequence`), the numbers must strictly increase. Steps are numbered by their own
    running `seq` (the checker's order is the file's order).
    """

    def __init__(self, stream: IO[bytes], abstraction_class: Any) -> None:
        self._lines = read_lines(stream)
        first = next(self._lines, None)
        if first is None:
            raise parse_error("empty file: no event to read", None)
        self._first = first
        record = self._record(*first)
        self._abstraction: Abstraction = abstraction_class(record)
        self.format: str = abstraction_class.FORMAT
        self.header = self._abstraction.header

    @staticmethod
    def _record(number: int, content: bytes, terminated: bool) -> dict[str, Any]:
        decode_json(content, number, terminated)
        record = exact_document(content, number)
        if not isinstance(record, dict) or not isinstance(record.get("event"), str):
            raise parse_error("a record must be a JSON object with a string 'event'", number, "event")
        return record

    records = 0
    """Records read so far."""

    def drive(self, sink: Sink) -> None:
        push(self.events(), sink)

    def events(self) -> Iterator[tuple[int, int, Any]]:
        abstraction = self._abstraction
        vocabulary = abstraction.VOCABULARY
        seq = 0
        last_sequence = -1
        index = 0
        lines = self._lines

        def records() -> Iterator[tuple[int, bytes, bool]]:
            yield self._first
            yield from lines

        for number, content, terminated in records():
            self.records = index + 1
            record = self._record(number, content, terminated)
            sequence = record.get("event_sequence")
            if sequence is not None:
                if type(sequence) is not int or sequence <= last_sequence:
                    raise ordering_error(sequence, last_sequence, number)
                last_sequence = sequence
            name = record["event"]
            if name not in vocabulary:
                yield number, index, UnknownEvent(name)
                index += 1
                continue
            for step in abstraction.abstract(record, number):
                yield number, index, _validated(step, seq, number)
                seq += 1
            index += 1
        for step in abstraction.finish():
            yield 0, index, _validated(step, seq, 0)
            seq += 1


def _validated(step: dict[str, Any], seq: int, line: int) -> Any:
    try:
        return convert_event({**step, "seq": seq})
    except msgspec.ValidationError as error:
        raise parse_error(
            f"the record does not abstract to a valid {step.get('event')} step: {error}", line
        ) from None


def detect(opener: Opener) -> tuple[str, bool]:
    """The format of a trace from its first record, and whether a format recognised it. When
    none does, the answer is trace v1, the nearest format, whose own reader then names what is
    wrong (an empty file, a missing header, bad JSON or an over-long line 1). Two formats that
    both recognise it are a `TraceInputError` of class `undecidable` (the trace is then
    `inconclusive`: the file may be either). msgpack frames are vLLM's by choice, although
    SGLang's have the same wire form: a frame with SGLang's own fields is then inconclusive
    (`vllm_kv_events`), and one with only the shared fields abstracts to the same steps under
    either reader; a descriptor's trace anchor names the format its capture is re-checked in."""
    with opener() as stream:
        head = stream.read(1 << 16)
    if vllm_kv_events.detect_msgpack(head):
        return vllm_kv_events.FORMAT, True
    first_line = head.split(b"\n", 1)[0]
    try:
        record = msgspec.json.decode(first_line)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return kvclaims_v1.FORMAT, False
    matches = [
        name
        for name, test in (
            (kvclaims_v1.FORMAT, kvclaims_v1.detect),
            (vllm_kv_events.FORMAT, vllm_kv_events.detect_json),
            (trtllm_kv_events.FORMAT, trtllm_kv_events.detect),
            *((name, cls.detect) for name, cls in _FOREIGN.items()),
        )
        if test(record)
    ]
    if len(matches) > 1:  # undecided, not malformed: the file may be either
        message = f"line 1 fits several formats ({', '.join(matches)}): name one with --format"
        raise TraceInputError(Finding(ErrorClass.undecidable, message, line=1))
    return (matches[0], True) if matches else (kvclaims_v1.FORMAT, False)


def open_source(stream: IO[bytes], fmt: str, *, registry: Path | None, strict: bool = False) -> Source:
    """The source for `fmt` (a concrete format name) over an open `stream`; `strict` refuses
    fields outside trace v1 (other formats' abstractions decide their own fields)."""
    if fmt == kvclaims_v1.FORMAT:
        return kvclaims_v1.KvclaimsV1Source(stream, strict=strict)
    if fmt in _FOREIGN:
        return ForeignSource(stream, _FOREIGN[fmt])
    if fmt in _KV_EVENTS:
        return _KV_EVENTS[fmt](stream, registry=registry)
    raise ValueError(f"unknown trace format {fmt!r}")
