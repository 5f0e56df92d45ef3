"""Reading ahead, attacked: whatever bytes a trace file holds, the verdict read ahead in a child
process (`kvclaims.refinement.read_ahead`) is the verdict read in one process, to the last
field (outcome, located finding or counterexample, counts, notes, minimal prefix), and the check
leaves no child behind, however it ends.

The files are valid generated traces of more than five 64 KiB chunks with one to three hostile
edits, most of them placed at or around a chunk boundary (where a reader that splits the file
into chunks is likeliest to differ from one that does not), after the header has been padded
by a random amount so that every alignment of lines against chunks occurs. The property's
example count is `KVCLAIMS_HOSTILE_EXAMPLES` (default 400; the long profile sets thousands).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import signal
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from kvclaims.refinement import check_trace, read_ahead
from kvclaims.refinement.abstractions import kvclaims_v1
from kvclaims.refinement.decoding import EVENT_STRUCTS, event_decoder
from kvclaims.refinement.read_ahead import ReadAhead
from kvclaims.refinement.reader import CHUNK_BYTES, MAX_LINE_BYTES
from kvclaims.refinement.testing import generate_valid_trace

EXAMPLES = int(os.environ.get("KVCLAIMS_HOSTILE_EXAMPLES", "400"))
"""Examples of the seeded property (the long profile raises it)."""

BASE_EVENTS = 4_000
"""About 360 KB: five and a half chunks."""

BOM = b"\xef\xbb\xbf"


# --- reading both ways -------------------------------------------------------------------------


@contextlib.contextmanager
def _read_ahead_forced() -> Iterator[list[ReadAhead[Any]]]:
    """Read ahead whatever the file's size and the machine; yields every `ReadAhead` started."""
    started: list[ReadAhead[Any]] = []

    class Recorded(ReadAhead[Any]):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            started.append(self)

    saved = kvclaims_v1.READ_AHEAD_BYTES, kvclaims_v1.available, kvclaims_v1.ReadAhead
    kvclaims_v1.READ_AHEAD_BYTES, kvclaims_v1.available, kvclaims_v1.ReadAhead = 0, lambda: True, Recorded
    try:
        yield started
    finally:
        kvclaims_v1.READ_AHEAD_BYTES, kvclaims_v1.available, kvclaims_v1.ReadAhead = saved


@contextlib.contextmanager
def _in_process() -> Iterator[None]:
    saved = os.environ.get(read_ahead.ENVIRONMENT)
    os.environ[read_ahead.ENVIRONMENT] = "0"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[read_ahead.ENVIRONMENT]
        else:
            os.environ[read_ahead.ENVIRONMENT] = saved


def _children() -> set[int]:
    """This process's child processes, running or not yet reaped (zombies)."""
    tasks = Path(f"/proc/{os.getpid()}/task")
    if not (tasks / str(os.getpid()) / "children").exists():  # no procfs list: ask wait()
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return set()
        return {-1}
    return {int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()}


def _both_ways(path: Path, **options: Any) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The verdict in one process, the verdict read ahead (`check_trace` with `options`), and
    how many children were started; asserts that none of them is left (running or unreaped)
    and, with a progress callback, that the progress told never goes back."""
    before = _children()
    told: tuple[list[int], list[int]] = ([], [])
    with _in_process():
        if "progress" in options:
            options["progress"] = told[0].append
        alone = check_trace(path, **options).to_json()
    with _read_ahead_forced() as started:
        if "progress" in options:
            options["progress"] = told[1].append
        ahead = check_trace(path, **options).to_json()
    assert _children() == before, "a read-ahead child was left behind"
    assert all(progress == sorted(progress) for progress in told)
    for reader in started:
        with pytest.raises(ChildProcessError):
            os.waitpid(reader._pid, os.WNOHANG)
    return alone, ahead, len(started)


def _assert_same_verdict(path: Path) -> dict[str, Any]:
    alone, ahead, started = _both_ways(path)
    assert ahead == alone
    assert started, "the trace was not read ahead"
    return alone


# --- the base trace and where its chunks end -------------------------------------------------


_BASES: dict[int, list[bytes]] = {}


def _base(seed: int) -> list[bytes]:
    """A valid generated trace's lines (header first, trace_closed last), without newlines."""
    if seed not in _BASES:
        out = io.BytesIO()
        generate_valid_trace(out, BASE_EVENTS, seed=seed)
        lines = out.getvalue().split(b"\n")
        assert lines.pop() == b""
        assert len(out.getvalue()) > 5 * CHUNK_BYTES
        _BASES[seed] = lines
    return list(_BASES[seed])


def _padded_header(header: bytes, pad: int) -> bytes:
    """The generated header with its `source` `pad` bytes longer: every later line shifts."""
    return header.replace(b" seed=", b" " + b"x" * pad + b" seed=", 1)


def _joined(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def _boundaries(lines: list[bytes]) -> list[int]:
    """Every file offset where a chunk ends, as read in one process (from the file's start) and
    as read ahead from the first event line: both grids."""
    size = sum(len(line) + 1 for line in lines)
    events = len(lines[0]) + 1
    grid = set(range(CHUNK_BYTES, size, CHUNK_BYTES)) | set(range(events + CHUNK_BYTES, size, CHUNK_BYTES))
    return sorted(grid) or [size // 2]


def _line_at(lines: list[bytes], offset: int) -> int:
    """The index of the line holding byte `offset` (an event line: never the header)."""
    end = 0
    for index, line in enumerate(lines):
        end += len(line) + 1
        if offset < end:
            return max(index, 1)
    return len(lines) - 1


def _seq(line: bytes) -> int:
    found = re.search(rb'"seq":(-?\d+)', line)
    return int(found.group(1)) if found else 0


def _with_field(line: bytes, member: bytes) -> bytes:
    return line[:-1] + b"," + member + b"}" if line.endswith(b"}") else line + member


def _closed(seq: int) -> bytes:
    return b'{"seq":%d,"event":"trace_closed","reason":"closed"}' % seq


def _long(line: bytes, length: int) -> bytes:
    """`line` with a string field that makes it exactly `length` bytes."""
    stem = _with_field(line, b'"pad":""')
    return stem[:-2] + b"z" * (length - len(stem)) + stem[-2:]


# --- hostile edits ---------------------------------------------------------------------------

Edit = Callable[[list[bytes], int, int], list[bytes]]
"""`edit(lines, index, choice)`: the lines with line `index` changed; `choice` picks among the
edit's variants."""

_NUMBERS = [0, 1, -1, 2**31, 2**63 - 1, 2**63, 2**64, 10**30]
_NUMBER = re.compile(rb"(?<=[:\[,])-?\d+")
_ID = re.compile(rb'"(claim|req|tenant|prefix|h)-?(\d+)"')
_KEY = re.compile(rb'"([a-z_]+)":')
_STRUCTURE = re.compile(rb"[:,{}\[\]]")


def _picked(pattern: re.Pattern[bytes], line: bytes, choice: int) -> tuple[re.Match[bytes], int] | None:
    """The match of `pattern` in `line` that `choice` picks, and what is left of `choice` to
    pick a variant with; None when nothing matches."""
    found = list(pattern.finditer(line))
    return (found[choice % len(found)], choice // len(found)) if found else None


def _numbered(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    line = lines[index]
    if picked := _picked(_NUMBER, line, choice):
        found, variant = picked
        value = _NUMBERS[variant % len(_NUMBERS)]
        lines[index] = line[: found.start()] + str(value).encode() + line[found.end() :]
    return lines


def _renamed_id(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    line = lines[index]
    if picked := _picked(_ID, line, choice):
        found, variant = picked
        number = int(found.group(2)) + variant % 7 - 3
        renamed = b'"%s%s%d"' % (found.group(1), b"" if found.group(1) == b"h" else b"-", number)
        lines[index] = line[: found.start()] + renamed + line[found.end() :]
    return lines


def _reseq(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    seq = _seq(lines[index])
    new = [seq - 1, seq, seq + 1, seq + 1_000, _seq(lines[index - 1]), 0, -1][choice % 7]
    lines[index] = re.sub(rb'"seq":-?\d+', b'"seq":%d' % new, lines[index], count=1)
    return lines


def _spaced(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    """Whitespace between tokens: as many spaces as it takes to move the line across a chunk
    boundary, sometimes."""
    line = lines[index]
    spots = [m.end() for m in _STRUCTURE.finditer(line)] or [0]
    at = spots[choice % len(spots)]
    count = [1, 2, 40, 300, 4_000][choice // len(spots) % 5]
    lines[index] = line[:at] + b" " * count + line[at:]
    return lines


def _duplicate_key(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    line = lines[index]
    if picked := _picked(_KEY, line, choice):
        found, variant = picked
        value = [b"1", b'"x"', b"null", b'"%s"' % found.group(1)][variant % 4]
        lines[index] = _with_field(line, b'"%s":%s' % (found.group(1), value))
    return lines


def _misspelt(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    line = lines[index]
    if picked := _picked(_KEY, line, choice):
        found, variant = picked
        name = found.group(1)
        typo = [name[:-1], name + b"s", name.replace(b"_", b""), name.upper()][variant % 4]
        lines[index] = line[: found.start(1)] + typo + line[found.end(1) :]
    return lines


def _extra_field(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    member = [
        b'"blok_id":1',
        b'"stop_reason":"length"',
        b'"cache_level":null',
        b'"claim_id":null',
        b'"position":null',
        b'"namespace":""',
        b'"source":null',
    ][choice % 7]
    lines[index] = _with_field(lines[index], member)
    return lines


def _inserted_byte(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    """Invalid UTF-8, a raw control character, a NUL, a byte-order mark, a carriage return."""
    line = lines[index]
    byte = [b"\xff", b"\xc3", b"\x01", b"\x00", b"\x1f", BOM, b"\r", b"\t"][choice % 8]
    at = [0, len(line), len(line) // 2, line.find(b'"', 2) + 1][choice // 8 % 4]
    lines[index] = line[:at] + byte + line[at:]
    return lines


def _long_line(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    length = [
        MAX_LINE_BYTES - 1,
        MAX_LINE_BYTES,
        MAX_LINE_BYTES + 1,
        MAX_LINE_BYTES + CHUNK_BYTES // 2,
        MAX_LINE_BYTES + CHUNK_BYTES + 7,
    ][choice % 5]
    lines[index] = _long(lines[index], length)
    return lines


def _blank(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    lines.insert(index, [b"", b" ", b"\r", b"{}", b"[]", b"null"][choice % 6])
    return lines


def _closed_here(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    """`trace_closed` in the middle: instead of an event (what follows it is after the close),
    or as the new end of the trace."""
    seq = _seq(lines[index])
    if choice % 2:
        return [*lines[:index], _closed(seq)]
    lines[index] = _closed(seq)
    return lines


def _predicate_unit(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    """A leading-prefix predicate in both units, in neither (a rule the Struct runs itself), with
    its threshold twice, or of a kind trace v1 does not define."""
    index = next((i for i in range(index, len(lines)) if b'"predicate"' in lines[i]), index)
    line = lines[index]
    variant = choice % 4
    if variant == 3:
        lines[index] = line.replace(b'"kind":"leading_prefix_at_least"', b'"kind":"leading_prefix"', 1)
        return lines
    ending = [rb'\1,"tokens":16}', b"}", rb'\1,"blocks":1}'][variant]
    lines[index] = re.sub(rb'(,?"blocks":\d+)\}', ending, line, count=1)
    return lines


def _dropped(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    del lines[index : index + 1 + choice % 3]
    return lines


def _duplicated(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    lines.insert(index, lines[index])
    return lines


def _swapped(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    other = min(index + 1 + choice % 3, len(lines) - 1)
    lines[index], lines[other] = lines[other], lines[index]
    return lines


def _cut_line(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    line = lines[index]
    lines[index] = line[: choice % max(len(line), 1)]
    return lines


def _renamed_event(lines: list[bytes], index: int, choice: int) -> list[bytes]:
    name = [b"block_teleported", b"block_store", b"trace_closed", b"request_finished"][choice % 4]
    lines[index] = re.sub(rb'"event":"[a-z_]+"', b'"event":"%s"' % name, lines[index], count=1)
    return lines


EDITS: dict[str, Edit] = {
    "number": _numbered,
    "id or hash": _renamed_id,
    "seq": _reseq,
    "whitespace": _spaced,
    "duplicate key": _duplicate_key,
    "misspelt field": _misspelt,
    "extra field": _extra_field,
    "inserted byte": _inserted_byte,
    "long line": _long_line,
    "blank line": _blank,
    "trace_closed": _closed_here,
    "dropped": _dropped,
    "duplicated": _duplicated,
    "swapped": _swapped,
    "cut line": _cut_line,
    "renamed event": _renamed_event,
    "predicate unit": _predicate_unit,
}


class Hostile:
    """A hostile trace's bytes, the recipe that made them, and `check_trace`'s options (strict,
    open, progress). Not a dataclass: Hypothesis would print the bytes of a failing case; its
    `repr` is the recipe."""

    def __init__(self, data: bytes, recipe: tuple[str, ...], options: dict[str, Any]) -> None:
        self.data = data
        self.recipe = recipe
        self.options = options

    def __repr__(self) -> str:
        return f"Hostile({self.recipe}, options={sorted(self.options)})"


@st.composite
def hostile_traces(draw: st.DrawFn) -> Hostile:
    """A valid trace's bytes with one to three hostile edits, most at a chunk boundary."""
    seed = draw(st.sampled_from([3, 11]))
    lines = _base(seed)
    ends = [CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 2 * CHUNK_BYTES]  # the header line's end
    at_boundary = st.sampled_from(ends).map(lambda end: end - len(lines[0]) - 1)
    shift = draw(st.integers(0, CHUNK_BYTES - 1) | at_boundary | st.integers(0, 3 * CHUNK_BYTES))
    lines[0] = _padded_header(lines[0], shift)
    names = [f"seed {seed}, header {shift} bytes longer"]
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(EDITS)))
        boundaries = _boundaries(lines)
        if draw(st.integers(0, 3)):
            near = boundaries[draw(st.integers(0, len(boundaries) - 1))]
            offset = near + draw(st.integers(-300, 300))
        else:
            offset = draw(st.integers(0, sum(map(len, lines))))
        index = min(_line_at(lines, offset), len(lines) - 1)
        choice = draw(st.integers(0, 1_000))
        lines = EDITS[name](lines, index, choice)
        names.append(f"{name} (variant {choice}) at line {index + 1}")
    data = _joined(lines)
    ending = draw(st.sampled_from(["newline", "newline", "newline", "none", "cut", "bom"]))
    if ending == "none":
        data = data[:-1]
    elif ending == "cut":  # at a random byte, often at a chunk boundary
        boundaries = _boundaries(lines)
        near = boundaries[draw(st.integers(0, len(boundaries) - 1))]
        data = data[: max(len(lines[0]) + 1, near + draw(st.integers(-2, 2)))]
    elif ending == "bom":
        data = BOM + data
    names.append(f"ending {ending}, {len(data)} bytes")
    options = draw(st.fixed_dictionaries({}, optional={"strict": st.just(True), "open": st.just(True)}))
    if draw(st.booleans()):
        options["progress"] = None  # replaced by a recorder
    return Hostile(data, tuple(names), options)


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=hostile_traces())
def test_a_hostile_trace_gets_the_same_verdict_read_ahead_or_not(
    case: Hostile, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.getbasetemp() / "hostile.ndjson"
    path.write_bytes(case.data)
    alone, ahead, started = _both_ways(path, **case.options)
    event(f"{alone['outcome']} ({alone.get('error_class')})")
    assert ahead == alone
    assert started, "the trace was not read ahead"


# --- what crosses the pipe ---------------------------------------------------------------------


def _values(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a trace Struct field's type, within its `Meta` bounds (strings short)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        base, meta = args[0], next(m for m in args[1:] if isinstance(m, msgspec.Meta))
        if base is int:
            return st.integers(meta.ge, meta.le)
        if base is str:
            return st.text(min_size=meta.min_length or 0, max_size=12)
        return st.lists(_values(typing.get_args(base)[0]), max_size=min(meta.max_length or 4, 4))
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_values(arg) for arg in args])
    if origin is list:
        return st.lists(_values(args[0]), max_size=4)
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return _structs(hint).filter(lambda made: made is not None)
    return st.from_type(hint)  # Literal, enums, bool, None, str


def _structs(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """Instances of a trace Struct, every field set; None where a rule of the model (its
    `__post_init__`) refuses the fields."""

    def made(fields: dict[str, Any]) -> Any:
        try:
            return cls(**fields)
        except ValueError:
            return None

    hints = typing.get_type_hints(cls, include_extras=True)
    return st.fixed_dictionaries({name: _values(hint) for name, hint in hints.items()}).map(made)


@settings(max_examples=min(EXAMPLES, 1_000), derandomize=True, deadline=None, database=None)
@given(event=st.sampled_from(sorted(EVENT_STRUCTS)).flatmap(lambda name: _structs(EVENT_STRUCTS[name])))
def test_every_event_the_reader_accepts_crosses_the_pipe_unchanged(event: Any) -> None:
    """The child sends decoded events as msgpack: each of the 24 event types, with every field
    set to any value the JSON reader accepts, arrives as the same Struct."""
    assume(event is not None)
    decoded = event_decoder().decode(msgspec.json.encode(event))
    frame = msgspec.msgpack.encode((12_345, [decoded]))
    arrived = msgspec.msgpack.Decoder(kvclaims_v1._Chunk).decode(frame)
    assert arrived == (12_345, [decoded])
    assert type(arrived[1][0]) is type(decoded)
    assert msgspec.json.encode(arrived[1][0]) == msgspec.json.encode(decoded)


# --- found by the property, pinned -----------------------------------------------------------
# Before the read-ahead read in the stream's own chunks, its chunks started at the first event
# line, the in-process reader's at the file's start: the runs differed, and with them whatever
# depends on where a run starts or where a line ends within a chunk.


def _shifted_header(pad: int) -> bytes:
    return b'{"kvclaims_trace":1,"source":"%s"}' % (b"x" * pad)


def test_an_event_after_trace_closed_counts_the_same_events_read_ahead_or_not(tmp_path: Path) -> None:
    """`trace_closed` mid-run with events after it: the verdict counted the run's events."""
    lines = _base(1)
    index = 1_500
    lines[index] = _closed(_seq(lines[index]))
    path = tmp_path / "closed.ndjson"
    path.write_bytes(_joined(lines))
    verdict = _assert_same_verdict(path)
    assert verdict["outcome"] == "invalid"
    assert verdict["finding"]["line"] == index + 2


def test_a_budget_exhausted_mid_file_is_located_the_same_read_ahead_or_not(tmp_path: Path) -> None:
    """Claims whose prefixes span more blocks than the budget, past the first chunk: the
    finding's line was the start of a run, which differed."""
    lines = [_shifted_header(42)]
    seq = 1
    for block in range(1_500):  # unclaimed blocks: the claims start after the first chunk
        lines.append(
            b'{"seq":%d,"event":"block_stored","block_id":%d,"block_hash":"x%d"}' % (seq, block, block)
        )
        seq += 1
    for claim in range(20):
        lines.append(
            b'{"seq":%d,"event":"resident_claim_accepted","claim_id":"c%d","owner_scope":"t",'
            b'"object_id":"p%d","mode":"offloadable","footprint_blocks":1000000,'
            b'"predicate":{"kind":"leading_prefix_at_least","blocks":1}}' % (seq, claim, claim)
        )
        lines.append(
            b'{"seq":%d,"event":"block_stored","block_id":%d,"block_hash":"h%d","claim_id":"c%d",'
            b'"position":0}' % (seq + 1, 10_000 + claim, claim, claim)
        )
        seq += 2
    path = tmp_path / "budget.ndjson"
    path.write_bytes(_joined(lines))
    verdict = _assert_same_verdict(path)
    assert verdict["outcome"] == "inconclusive"
    assert verdict["error_class"] == "budget_exhausted"


@pytest.mark.parametrize("length", [MAX_LINE_BYTES + 1, MAX_LINE_BYTES + 61_424])
def test_an_over_long_line_is_worded_the_same_read_ahead_or_not(length: int, tmp_path: Path) -> None:
    """Whether the cap was passed inside the line or at its newline depended on where the
    chunks started (the message names the line's length only in the second case)."""
    lines = _base(1)
    lines[1_000] = _long(lines[1_000], length)
    path = tmp_path / "long.ndjson"
    path.write_bytes(_joined(lines))
    verdict = _assert_same_verdict(path)
    assert verdict["outcome"] == "invalid"
    assert verdict["finding"]["line"] == 1_001


# --- targeted shapes -------------------------------------------------------------------------


def test_a_header_only_file_is_judged_the_same_both_ways(tmp_path: Path) -> None:
    for name, data in {
        "header": b'{"kvclaims_trace":1}\n',
        "header unterminated": b'{"kvclaims_trace":1}',
        "header and one event": b'{"kvclaims_trace":1}\n' + _closed(1) + b"\n",
        "header and one unterminated event": b'{"kvclaims_trace":1}\n' + _closed(1),
        "header and a blank line": b'{"kvclaims_trace":1}\n\n',
    }.items():
        path = tmp_path / "small.ndjson"
        path.write_bytes(data)
        alone, ahead, started = _both_ways(path)
        assert ahead == alone, name
        assert started or name.startswith("header unterminated"), name


def _filling(chunks: int, header_pad: int = 0) -> list[bytes]:
    """A valid trace whose event lines end exactly at the end of chunk `chunks` of the file
    (the header padded, then the event lines from the base trace up to the nearest line end
    before that offset, with trace_closed padded to end exactly there)."""
    lines = _base(3)
    lines[0] = _padded_header(lines[0], header_pad)
    target = chunks * CHUNK_BYTES
    kept, size = [lines[0]], len(lines[0]) + 1
    for line in lines[1:-1]:
        if size + len(line) + 1 + 200 > target:
            break
        kept.append(line)
        size += len(line) + 1
    closing = _closed(_seq(kept[-1]) + 1)
    kept.append(closing[:-1] + b" " * (target - size - len(closing) - 1) + b"}")
    assert len(_joined(kept)) == target
    return kept


@pytest.mark.parametrize("header_pad", [0, 1, 5_000])
@pytest.mark.parametrize("chunks", [1, 2, 6])
def test_events_exactly_filling_whole_chunks_are_judged_the_same_both_ways(
    chunks: int, header_pad: int, tmp_path: Path
) -> None:
    lines = _filling(chunks, header_pad)
    path = tmp_path / "filled.ndjson"
    path.write_bytes(_joined(lines))
    assert _assert_same_verdict(path)["outcome"] == "accepted"
    path.write_bytes(_joined(lines)[:-1])  # the last line unterminated, ending at the boundary
    _assert_same_verdict(path)
    path.write_bytes(_joined(lines[:-1]) + lines[-1][:-1])  # and cut inside it
    assert _assert_same_verdict(path)["outcome"] == "invalid"


def test_a_gzip_compressed_large_trace_is_never_read_ahead(tmp_path: Path) -> None:
    plain = _joined(_base(3))
    path = tmp_path / "trace.ndjson.gz"
    path.write_bytes(gzip.compress(plain))
    with _read_ahead_forced() as started:
        verdict = check_trace(path).to_json()
    assert not started
    with _in_process():
        assert check_trace(path).to_json() == verdict
    assert verdict["outcome"] == "accepted"


# --- process hygiene -------------------------------------------------------------------------


def _filler(count: int, first_seq: int) -> bytes:
    """`count` unclaimed block_stored lines (legal events, cheap to write)."""
    return b"".join(
        b'{"seq":%d,"event":"block_stored","block_id":%d,"block_hash":"f%d"}\n' % (seq, seq, seq)
        for seq in range(first_seq, first_seq + count)
    )


def test_an_early_rejection_of_a_large_file_stops_the_child_at_once(tmp_path: Path) -> None:
    """A violation in the first chunk of a 40 MB trace: the check kills the child, which had
    hundreds of chunks still to read, and leaves none behind. The alarm turns a hang into a
    failure."""
    lines = _base(1)
    del lines[1]  # the first claim's acceptance: its first block_stored breaks a rule
    path = tmp_path / "large.ndjson"
    with path.open("wb") as out:
        out.write(_joined(lines[:300]) + _filler(500_000, _seq(lines[299]) + 1))
    assert path.stat().st_size > 500 * CHUNK_BYTES
    delivered: list[int] = []
    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.alarm(60)
    try:
        before = _children()
        with _read_ahead_forced() as started:
            original = ReadAhead.__iter__

            def counted(self: ReadAhead[Any]) -> Iterator[Any]:
                for item in original(self):
                    delivered.append(len(item[1]))
                    yield item

            ReadAhead.__iter__ = counted  # type: ignore[method-assign]
            try:
                verdict = check_trace(path)
            finally:
                ReadAhead.__iter__ = original  # type: ignore[method-assign]
        assert _children() == before
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert verdict.outcome.value == "rejected"
    assert verdict.counterexample is not None and verdict.counterexample.line < 300
    assert started and len(delivered) <= 2 * len(started)  # one frame per read, not 600


def test_a_process_that_ignores_sigchld_still_gets_its_verdict(tmp_path: Path) -> None:
    """With SIGCHLD ignored the kernel reaps children itself, and waiting for one raises
    `ChildProcessError`: the check must neither crash nor leave a child."""
    lines = _base(1)
    del lines[200]  # a rejection: the child is stopped mid-file
    path = tmp_path / "trace.ndjson"
    path.write_bytes(_joined(lines))
    with _in_process():
        expected = check_trace(path).to_json()
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with _read_ahead_forced() as started:
            assert check_trace(path).to_json() == expected
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert started and not _children()


def test_lines_that_are_json_but_not_objects_are_located_the_same_both_ways(tmp_path: Path) -> None:
    """A header followed by lines that decode to other JSON values (not objects): located
    the same way both ways."""
    lines = _base(3)
    for index in (1, 700, 2_000):
        lines[index] = json.dumps([1, 2, 3]).encode()
    path = tmp_path / "arrays.ndjson"
    path.write_bytes(_joined(lines))
    assert _assert_same_verdict(path)["outcome"] == "invalid"


@pytest.mark.parametrize("short", [0, 1])
def test_the_size_gate_forks_exactly_from_its_threshold(short: int, tmp_path: Path) -> None:
    """Event lines of exactly `READ_AHEAD_BYTES` are read ahead, one byte fewer are not (the
    threshold is not forced here, only the machine's eligibility), with the same verdict."""
    header = b'{"kvclaims_trace":1,"usable_blocks":64}\n'
    size = kvclaims_v1.READ_AHEAD_BYTES - short
    body = _filler(size // 80, 1)
    closing = _closed(size // 80 + 1)
    padding = size - len(body) - len(closing) - 1
    path = tmp_path / "gate.ndjson"
    path.write_bytes(header + body + closing[:-1] + b" " * padding + b"}\n")
    assert path.stat().st_size - len(header) == size
    with _in_process():
        expected = check_trace(path).to_json()
    saved = kvclaims_v1.available
    kvclaims_v1.available = lambda: True
    try:
        with _read_ahead_forced() as started:
            kvclaims_v1.READ_AHEAD_BYTES = size + short  # the real threshold, restored on exit
            assert check_trace(path).to_json() == expected
    finally:
        kvclaims_v1.available = saved
    assert bool(started) is (short == 0)
    assert expected["outcome"] == "accepted"


@pytest.mark.parametrize("header_end", [CHUNK_BYTES + 10, 2 * CHUNK_BYTES + 50])
def test_progress_never_goes_back_after_a_header_longer_than_a_chunk(header_end: int, tmp_path: Path) -> None:
    """The header is read in-process, in whole chunks, before the child starts: the progress
    the child's first frame reports is not behind what that read reported (it was, when the
    child's chunks started at the first event line)."""
    lines = _base(3)
    lines[0] = _padded_header(lines[0], header_end - len(lines[0]) - 1)  # its newline ends there
    path = tmp_path / "long-header.ndjson"
    path.write_bytes(_joined(lines))
    told: list[int] = []
    with _read_ahead_forced() as started:
        verdict = check_trace(path, progress=told.append)
    assert started and verdict.outcome.value == "accepted"
    assert told == sorted(told) and told[-1] == path.stat().st_size
