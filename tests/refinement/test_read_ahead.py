"""Reading ahead in a child process: the mechanics (`kvclaims.refinement.read_ahead`), and the
one property that matters for verdicts: a trace read ahead gets exactly the verdict it gets read
in-process, whatever is wrong with it and wherever, and whenever the child stops."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kvclaims.refinement import check_trace, read_ahead
from kvclaims.refinement.abstractions import kvclaims_v1
from kvclaims.refinement.read_ahead import ReadAhead
from kvclaims.refinement.reader import CHUNK_BYTES
from kvclaims.refinement.testing import generate_valid_trace

# --- the mechanics ---------------------------------------------------------------------------


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_items_arrive_in_order_decoded_into_their_type() -> None:
    items = [(i, [f"line {i}", f"more {i}"]) for i in range(500)]
    with ReadAhead(lambda: iter(items), tuple[int, list[str]]) as ahead:
        received = list(ahead)
    assert received == items
    assert _reaped(ahead._pid)


def test_a_producer_that_raises_ends_the_items_where_it_raised() -> None:
    def produce() -> Iterator[int]:
        yield from range(3)
        raise RuntimeError("the child's own failure")

    with ReadAhead(produce, int) as ahead:
        assert list(ahead) == [0, 1, 2]


def test_a_child_killed_mid_way_ends_the_items_with_the_last_whole_frame() -> None:
    def produce() -> Iterator[bytes]:
        yield b"x" * 100_000
        yield b"y" * 100_000
        os.kill(os.getpid(), signal.SIGKILL)
        yield b"never"

    with ReadAhead(produce, bytes) as ahead:
        assert [len(item) for item in ahead] == [100_000, 100_000]


def test_close_stops_an_endless_child_and_reaps_it() -> None:
    def produce() -> Iterator[int]:
        n = 0
        while True:
            n += 1
            yield n

    ahead = ReadAhead(produce, int)
    first = next(iter(ahead))
    ahead.close()
    ahead.close()  # idempotent
    assert first == 1
    assert _reaped(ahead._pid)


def test_reading_ahead_is_off_when_asked_or_when_another_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.delenv(read_ahead.ENVIRONMENT, raising=False)
    assert read_ahead.available() is (threading.active_count() == 1)
    monkeypatch.setenv(read_ahead.ENVIRONMENT, "0")
    assert not read_ahead.available()
    monkeypatch.delenv(read_ahead.ENVIRONMENT)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not read_ahead.available()
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    assert not read_ahead.available()
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")  # fork without exec: Linux only
    assert not read_ahead.available()


# --- verdicts: read ahead or not, the same ---------------------------------------------------


@pytest.fixture(scope="module")
def valid_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """A valid trace of about 6 chunks, as lines (header first, trace_closed last)."""
    out = io.BytesIO()
    generate_valid_trace(out, 4_000, seed=7)
    lines = out.getvalue().split(b"\n")
    assert lines.pop() == b""
    assert len(out.getvalue()) > 5 * CHUNK_BYTES
    return lines


def _middle(lines: list[bytes], event: str, after: int = 2_000) -> int:
    return next(i for i in range(after, len(lines)) if f'"event":"{event}"'.encode() in lines[i])


def _with_field(line: bytes, extra: str) -> bytes:
    return line[:-1] + b"," + extra.encode() + b"}"


def _mutations(lines: list[bytes]) -> dict[str, bytes]:
    def joined(changed: list[bytes], *, newline: bool = True) -> bytes:
        return b"\n".join(changed) + (b"\n" if newline else b"")

    def replaced(index: int, *new: bytes) -> bytes:
        return joined([*lines[:index], *new, *lines[index + 1 :]])

    stored = _middle(lines, "block_stored")
    accepted = _middle(lines, "resident_claim_accepted")
    seq_of = json.loads(lines[stored])["seq"]
    return {
        "clean": joined(lines),
        "bom": b"\xef\xbb\xbf" + joined(lines),
        "duplicate key": replaced(stored, _with_field(lines[stored], f'"seq":{seq_of}')),
        "context field": replaced(stored, _with_field(lines[stored], '"stop_reason":"length"')),
        "typo field": replaced(stored, _with_field(lines[stored], '"blok_id":1')),
        "whitespace": replaced(stored, lines[stored].replace(b":", b": ", 1)),
        "seq swapped": joined([*lines[:stored], lines[stored + 1], lines[stored], *lines[stored + 2 :]]),
        "bad json": replaced(stored, lines[stored][:-1]),
        "blank line": replaced(stored, lines[stored], b""),
        "unknown event": replaced(stored, b'{"seq":%d,"event":"block_teleported"}' % seq_of),
        "claim never accepted": replaced(accepted),
        "not closed": joined(lines[:-1]),
        "last line unterminated": joined(lines, newline=False),
        "cut mid-line": joined(lines)[: -len(lines[-1]) // 2],
        "event after close": joined([*lines, lines[-2]]),
        "long line": replaced(stored, _with_field(lines[stored], '"pad":"' + "z" * (1 << 20) + '"')),
    }


def _verdict(path: Path) -> dict[str, object]:
    return check_trace(path).to_json()


def _frames_counted(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Force reading ahead whatever the size and machine; the events of each frame delivered,
    one list per read ahead (a rejection's minimal prefix reads the trace again)."""
    frames: list[list[int]] = []

    class Counted(ReadAhead[Any]):
        def __iter__(self) -> Iterator[Any]:
            frames.append([])
            for item in super().__iter__():
                frames[-1].append(len(item[1]))
                yield item

    monkeypatch.setattr(kvclaims_v1, "READ_AHEAD_BYTES", 0)
    monkeypatch.setattr(kvclaims_v1, "available", lambda: True)
    monkeypatch.setattr(kvclaims_v1, "ReadAhead", Counted)
    return frames


def _in_process(monkeypatch: pytest.MonkeyPatch, path: Path) -> dict[str, object]:
    with monkeypatch.context() as patch:
        patch.setenv(read_ahead.ENVIRONMENT, "0")
        return _verdict(path)


@pytest.mark.parametrize(
    "name",
    [
        "clean",
        "bom",
        "duplicate key",
        "context field",
        "typo field",
        "whitespace",
        "seq swapped",
        "bad json",
        "blank line",
        "unknown event",
        "claim never accepted",
        "not closed",
        "last line unterminated",
        "cut mid-line",
        "event after close",
        "long line",
    ],
)
def test_a_trace_read_ahead_gets_the_verdict_it_gets_in_process(
    name: str, valid_lines: list[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "trace.ndjson"
    path.write_bytes(_mutations(valid_lines)[name])
    expected = _in_process(monkeypatch, path)
    frames = _frames_counted(monkeypatch)
    assert _verdict(path) == expected
    assert frames and frames[0], "the trace was not read ahead"
    if name in ("clean", "bom", "context field", "whitespace", "not closed", "last line unterminated"):
        assert expected["outcome"] in ("accepted", "inconclusive")
    else:
        assert expected["outcome"] in ("invalid", "rejected", "inconclusive")


@pytest.mark.parametrize("chunks_before_death", [0, 1, 3])
@pytest.mark.parametrize("how", ["killed", "raises"])
def test_the_parent_goes_on_wherever_the_child_stops(
    chunks_before_death: int,
    how: str,
    valid_lines: list[bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "trace.ndjson"
    path.write_bytes(_mutations(valid_lines)["claim never accepted"])
    expected = _in_process(monkeypatch, path)
    frames = _frames_counted(monkeypatch)
    clean_chunks: Callable[..., Iterator[Any]] = kvclaims_v1._clean_chunks

    def dying(*args: Any) -> Iterator[Any]:
        for count, item in enumerate(clean_chunks(*args)):
            if count == chunks_before_death:
                if how == "killed":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise MemoryError("the child ran out")
            yield item

    monkeypatch.setattr(kvclaims_v1, "_clean_chunks", dying)
    assert _verdict(path) == expected
    assert frames and all(len(delivered) == chunks_before_death for delivered in frames)


def test_a_rejection_stops_the_child_without_waiting_for_it(
    valid_lines: list[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker stops at the first violation and the child is killed and reaped there: here
    the child, once it has sent every chunk, never ends by itself, so waiting for it would hang."""
    path = tmp_path / "trace.ndjson"
    path.write_bytes(_mutations(valid_lines)["claim never accepted"])
    frames = _frames_counted(monkeypatch)
    clean_chunks: Callable[..., Iterator[Any]] = kvclaims_v1._clean_chunks

    def endless(*args: Any) -> Iterator[Any]:
        yield from clean_chunks(*args)
        signal.pause()  # the child sleeps until it is killed

    monkeypatch.setattr(kvclaims_v1, "_clean_chunks", endless)
    verdict = check_trace(path)
    assert verdict.outcome.value == "rejected"
    assert frames


def test_only_a_regular_uncompressed_file_is_offered_for_reading_by_position(tmp_path: Path) -> None:
    import gzip

    from kvclaims.refinement.reader import TraceStream

    plain, marked, packed = tmp_path / "plain", tmp_path / "bom", tmp_path / "packed.gz"
    plain.write_bytes(b'{"kvclaims_trace":1}\n')
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    with TraceStream(plain.open("rb")) as stream:
        assert stream.plain_file is not None and stream.plain_file[1] == 0
    with TraceStream(marked.open("rb")) as stream:
        assert stream.plain_file is not None and stream.plain_file[1] == 3
    with TraceStream(packed.open("rb")) as stream:
        assert stream.plain_file is None
    with TraceStream(io.BytesIO(plain.read_bytes())) as stream:
        assert stream.plain_file is None


@pytest.mark.parametrize("ahead", [True, False])
def test_progress_reaches_the_end_of_the_file_read_ahead_or_not(
    ahead: bool, valid_lines: list[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress bar (the CLI's, on a terminal) is told how far the check has read, by the
    bytes read in-process or by the position the read-ahead reached, up to the file's end."""
    path = tmp_path / "trace.ndjson"
    path.write_bytes(_mutations(valid_lines)["whitespace"])  # the child stops mid-file
    if ahead:
        frames = _frames_counted(monkeypatch)
    else:
        monkeypatch.setenv(read_ahead.ENVIRONMENT, "0")
    told: list[int] = []
    verdict = check_trace(path, progress=told.append)
    assert verdict.outcome.value == "accepted"
    assert told == sorted(told) and told[-1] == path.stat().st_size
    if ahead:
        assert frames and frames[0]


def test_a_child_that_cannot_be_started_gives_no_items_and_the_check_reads_itself(
    valid_lines: list[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "trace.ndjson"
    path.write_bytes(_mutations(valid_lines)["claim never accepted"])
    expected = _in_process(monkeypatch, path)
    frames = _frames_counted(monkeypatch)

    def no_fork() -> int:
        raise BlockingIOError("fork: resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    assert _verdict(path) == expected
    assert frames and not any(frames)
