"""Bad input never crashes the checker and is never accepted; the reader is fuzzed.

The oracle for the fuzz tests is independent of the fast reader: a trace may be accepted only
if every line parses with the standard-library JSON module, the header and every event validate
against the pydantic models of record, and seq strictly increases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from kvclaims.refinement import ErrorClass, Outcome, check_bytes, check_trace
from kvclaims.refinement.reader import MAX_LINE_BYTES
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.trace import TraceEvent, TraceHeader


def valid_trace() -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("A", blocks=2).store_prefix("A", 2).materialize("A", 2)
    return trace.admit("r1").reuse("r1", "A", 2).finish("r1")


VALID = valid_trace().ndjson()


def test_the_valid_trace_is_accepted() -> None:
    assert check_bytes(VALID).outcome is Outcome.accepted


BAD_INPUTS = {
    "empty file": b"",
    "missing header": VALID.split(b"\n", 1)[1],
    "header is not an object": b"[1, 2]\n" + VALID.split(b"\n", 1)[1],
    "wrong format version": VALID.replace(b'"kvclaims_trace":1', b'"kvclaims_trace":2', 1),
    "truncated last line": VALID[:-12],
    "invalid UTF-8": VALID.replace(b'"tenant-a"', b'"tenant-\xff"'),
    "NaN": VALID.replace(b'"active_live_blocks":1', b'"active_live_blocks":NaN'),
    "NaN in kept context": VALID.replace(b'"status":"finished"', b'"status":"finished","extra":NaN'),
    "2^80 seq": VALID.replace(b'{"seq":5', b'{"seq":1208925819614629174706176'),
    "2^80 in the header": VALID.replace(
        b'"usable_blocks":80', b'"usable_blocks":1208925819614629174706176', 1
    ),
    "repeated seq": VALID.replace(b'{"seq":5', b'{"seq":4'),
    "decreasing seq": VALID.replace(b'{"seq":5', b'{"seq":1'),
    "blank line": VALID.replace(b"\n", b"\n\n", 2),
    "float where an integer belongs": VALID.replace(b'"leading_blocks":2', b'"leading_blocks":2.0'),
    "string where an integer belongs": VALID.replace(b'"block_id":1000', b'"block_id":"1000"'),
    "missing required field": VALID.replace(b',"status":"finished"', b""),
    "event without seq": VALID.replace(b'{"seq":6,', b"{"),
    "not JSON": VALID + b"this is not json\n",
    "nested too deep": VALID + b'{"seq":99,"event":"x","ctx":' + b"[" * 100 + b"]" * 100 + b"}\n",
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_invalid_with_a_located_finding(name: str) -> None:
    verdict = check_bytes(BAD_INPUTS[name])
    assert verdict.outcome is Outcome.invalid, verdict.reason
    assert verdict.finding is not None
    assert verdict.error_class in (ErrorClass.parse, ErrorClass.ordering)
    if name in ("repeated seq", "decreasing seq"):
        assert verdict.error_class is ErrorClass.ordering and verdict.finding.field == "seq"


def test_an_unknown_event_type_is_inconclusive_not_invalid() -> None:
    verdict = check_bytes(valid_trace().add("resident_claim_teleported", claim_id="A").ndjson())
    assert verdict.outcome is Outcome.inconclusive and verdict.error_class is ErrorClass.unknown_event


def test_an_unknown_event_still_needs_an_increasing_seq() -> None:
    assert check_bytes(VALID + b'{"seq":1,"event":"resident_claim_teleported"}\n').outcome is Outcome.invalid


def test_a_complete_last_line_without_newline_is_still_read() -> None:
    assert check_bytes(VALID.rstrip(b"\n")).outcome is Outcome.accepted


def test_a_100_mb_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "huge.ndjson"
    with path.open("wb") as handle:
        handle.write(VALID.split(b"\n", 1)[0] + b"\n")
        handle.write(b'{"seq":1,"event":"request_finished","request_id":"')
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            handle.write(chunk)
        handle.write(b'","status":"ok"}\n')
    verdict = check_trace(path)
    assert verdict.outcome is Outcome.invalid
    assert f"{MAX_LINE_BYTES}" in verdict.reason


# --- fuzzing ------------------------------------------------------------------------------

HEADER = TypeAdapter(TraceHeader)
EVENT = TypeAdapter(TraceEvent)


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("duplicate key")
    return dict(pairs)


def oracle_valid(data: bytes) -> bool:
    """A slow, independent judgement: is this a well-formed trace v1 (a byte-order mark aside,
    no object with a key twice)?"""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        return False
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return False
    try:
        HEADER.validate_python(json.loads(lines[0], object_pairs_hook=_no_duplicates))
        last = -1
        for line in lines[1:]:
            document = json.loads(line, object_pairs_hook=_no_duplicates)
            event = EVENT.validate_python(document)
            if event.seq <= last or event.seq >= 2**63:
                return False
            last = event.seq
    except (ValueError, ValidationError, RecursionError):
        return False
    return True


FUZZ = settings(
    max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@FUZZ
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_never_crash_and_are_accepted_only_if_well_formed(data: bytes) -> None:
    verdict = check_bytes(data)
    if verdict.outcome is Outcome.accepted:
        assert oracle_valid(data)


@st.composite
def mutated_traces(draw: st.DrawFn) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ["truncate", "delete", "insert", "replace", "duplicate_line", "swap_lines", "duplicate_key"]
            )
        )
        lines = bytes(data).split(b"\n")
        if kind == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        elif kind == "delete" and data:
            position = draw(st.integers(0, len(data) - 1))
            del data[position : position + draw(st.integers(1, 8))]
        elif kind == "insert":
            position = draw(st.integers(0, len(data)))
            data[position:position] = draw(
                st.sampled_from(
                    [b"\xff", b"\x00", b"NaN", b"1208925819614629174706176", b"\n", b",", b"{", b"-1"]
                )
            )
        elif kind == "replace" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif kind == "duplicate_line" and len(lines) > 2:
            index = draw(st.integers(1, len(lines) - 2))
            lines.insert(index, lines[index])
            data = bytearray(b"\n".join(lines))
        elif kind == "duplicate_key" and len(lines) > 2:
            index = draw(st.integers(0, len(lines) - 2))
            key = draw(
                st.sampled_from([b'"seq":7,', b'"claim_id":"B",', b'"blocks":1,', b'"usable_blocks":9,'])
            )
            lines[index] = lines[index].replace(b"{", b"{" + key, 1)
            data = bytearray(b"\n".join(lines))
        elif kind == "swap_lines" and len(lines) > 3:
            i = draw(st.integers(1, len(lines) - 3))
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@FUZZ
@given(mutated_traces())
def test_damaged_traces_never_crash_and_are_accepted_only_if_still_well_formed(data: bytes) -> None:
    verdict = check_bytes(data)
    assert verdict.outcome in Outcome
    if verdict.outcome is Outcome.accepted:
        assert oracle_valid(data)


# --- strict input: exact integers, duplicate keys, absurd sizes, unknown fields ----------------
# Each hostile input has a well-formed twin that differs only in the hostile part.

ACCEPT_LINE = VALID.split(b"\n")[1]


@pytest.mark.parametrize("hostile", [b"true", b"1.0"])
def test_the_header_version_is_an_exact_integer(hostile: bytes) -> None:
    verdict = check_bytes(VALID.replace(b'"kvclaims_trace":1', b'"kvclaims_trace":' + hostile, 1))
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (1, "kvclaims_trace")
    assert check_bytes(VALID).outcome is Outcome.accepted


@pytest.mark.parametrize("hostile", [b"true", b"2.0"])
@pytest.mark.parametrize("field", [b"footprint_blocks", b"blocks"])
def test_integer_fields_are_exact_integers(field: bytes, hostile: bytes) -> None:
    line = ACCEPT_LINE.replace(b'"' + field + b'":2', b'"' + field + b'":' + hostile)
    verdict = check_bytes(VALID.replace(ACCEPT_LINE, line))
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert verdict.finding.line == 2 and verdict.finding.field.endswith(field.decode())


DUPLICATES = {
    "event key": (2, "seq", VALID.replace(b'{"seq":0,', b'{"seq":0,"seq":0,', 1)),
    "claim id": (2, "claim_id", VALID.replace(b'"claim_id":"A",', b'"claim_id":"A","claim_id":"B",', 1)),
    "nested key": (2, "blocks", VALID.replace(b'"blocks":2}', b'"blocks":2,"blocks":1}', 1)),
    "header key": (
        1,
        "usable_blocks",
        VALID.replace(b'"usable_blocks":80', b'"usable_blocks":80,"usable_blocks":8', 1),
    ),
}


@pytest.mark.parametrize("name", sorted(DUPLICATES))
def test_a_duplicate_key_is_invalid_with_its_line_and_key(name: str) -> None:
    line, key, data = DUPLICATES[name]
    verdict = check_bytes(data)
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (line, key), verdict.reason
    assert "duplicate key" in verdict.finding.message


def _long_trace(events: int) -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80)
    for number in range(events):
        trace.admit(f"r{number}").finish(f"r{number}")
    return trace


def test_a_duplicate_key_deep_inside_a_fast_chunk_is_found() -> None:
    """The fast reader decodes whole chunks at once; one duplicate among thousands of clean
    lines (whose twin with the key once is accepted) is still found, at its line."""
    data = _long_trace(3000).ndjson()
    lines = data.split(b"\n")
    lines[4001] = lines[4001].replace(b"{", b'{"request_id":"r0",', 1)
    verdict = check_bytes(b"\n".join(lines))
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (4002, "request_id")
    assert check_bytes(data).outcome is Outcome.accepted


def test_lines_written_with_spaces_or_explicit_nulls_are_read_alike() -> None:
    """Lines longer than their shortest form (spaces, `null` defaults) take the exact path and
    get the same verdict as the compact twin."""
    spaced = b"\n".join(
        json.dumps(json.loads(line) | {"t_ns": None}).encode() if i else line
        for i, line in enumerate(VALID.rstrip(b"\n").split(b"\n"))
    )
    assert check_bytes(spaced + b"\n").outcome is Outcome.accepted


@pytest.mark.parametrize("field", [b"footprint_blocks", b"blocks"])
def test_an_absurd_block_count_is_invalid_naming_its_field(field: bytes) -> None:
    absurd = VALID.replace(b'"' + field + b'":2', b'"' + field + b'":' + str(2**62).encode(), 1)
    verdict = check_bytes(absurd)
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert verdict.finding.line == 2 and verdict.finding.field.endswith(field.decode())
    assert "16777216" in verdict.finding.message


def test_an_absurd_block_position_is_invalid_naming_its_field() -> None:
    absurd = VALID.replace(b'"position":1', b'"position":' + str(2**62).encode(), 1)
    verdict = check_bytes(absurd)
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert verdict.finding.field == "position"


def test_a_misspelt_field_is_invalid_with_a_did_you_mean() -> None:
    typo = VALID.replace(b'"footprint_blocks":2,', b'"footprint_blocks":2,"duration_stpes":5,', 1)
    verdict = check_bytes(typo)
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (2, "duration_stpes")
    assert "did you mean 'duration_steps'" in verdict.finding.message
    spelt = VALID.replace(b'"footprint_blocks":2,', b'"footprint_blocks":2,"duration_steps":5,', 1)
    assert check_bytes(spelt).outcome is not Outcome.invalid


def test_a_misspelt_header_field_is_invalid_with_a_did_you_mean() -> None:
    verdict = check_bytes(VALID.replace(b'"usable_blocks":80', b'"usable_blox":80', 1))
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (1, "usable_blox")
    assert "did you mean 'usable_blocks'" in verdict.finding.message


def test_context_fields_are_kept_and_listed_unless_strict() -> None:
    context = VALID.replace(b'"status":"finished"', b'"status":"finished","mono_ns":12', 1)
    kept = check_bytes(context)
    assert kept.outcome is Outcome.accepted
    assert any("mono_ns" in note for note in kept.notes)
    strict = check_trace(context, strict=True)
    assert strict.outcome is Outcome.invalid and strict.finding is not None
    assert strict.finding.field == "mono_ns" and "--strict" in strict.finding.message
    assert check_trace(VALID, strict=True).outcome is Outcome.accepted


def test_invalid_utf8_in_an_unknown_key_is_invalid() -> None:
    """msgspec skips the bytes of a key it does not know; the exact re-parse does not."""
    hostile = VALID.replace(b'"status":"finished"', b'"status":"finished","\x80tx":1', 1)
    assert check_bytes(hostile).outcome is Outcome.invalid


def _reseq(seqs: list[int]) -> bytes:
    """VALID with its events renumbered by `seqs` (header and trace_closed kept as they are)."""
    header, *events = VALID.rstrip(b"\n").split(b"\n")
    lines = [header]
    for seq, line in zip(seqs, events[:-1], strict=True):
        document = json.loads(line)
        document["seq"] = seq
        lines.append(json.dumps(document, separators=(",", ":")).encode())
    closing = json.loads(events[-1])
    closing["seq"] = seqs[-1] + 1
    return b"\n".join([*lines, json.dumps(closing, separators=(",", ":")).encode()]) + b"\n"


def test_seq_may_skip_forward() -> None:
    count = len(VALID.splitlines()) - 2
    assert check_bytes(_reseq([3 * i for i in range(count)])).outcome is Outcome.accepted


def test_two_swapped_seqs_are_out_of_order_even_when_the_run_spans_a_range() -> None:
    """First and last seq of the run are consecutive-range endpoints; the middle is swapped."""
    count = len(VALID.splitlines()) - 2
    seqs = list(range(count))
    seqs[2], seqs[3] = seqs[3], seqs[2]
    verdict = check_bytes(_reseq(seqs))
    assert verdict.outcome is Outcome.invalid
    assert verdict.error_class is ErrorClass.ordering and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (5, "seq")


def test_a_broken_predicate_inside_a_clean_chunk_is_located() -> None:
    """The chunk's validator pass runs the model rule on every accepted event, not only the
    first: a second claim whose predicate gives both blocks and tokens is invalid at its line."""
    clean = valid_trace().accept("B", blocks=2).admit("r2").ndjson()
    good = b'"blocks":2}}\n{"seq":8'
    assert clean.count(good) == 1
    verdict = check_bytes(clean.replace(good, b'"blocks":2,"tokens":32}}\n{"seq":8'))
    assert check_bytes(clean).outcome is Outcome.accepted
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert verdict.error_class is ErrorClass.parse and verdict.finding.line == 9
    assert "exactly one of 'blocks' or 'tokens'" in verdict.finding.message
