"""Lines in any JSON layout are read alike, and a duplicate key is refused in every layout, at
every depth, however it is spelt (`CleanChunk`'s length proof must never pass it)."""

from __future__ import annotations

import json

import pytest

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.testing import TraceBuilder


def _trace() -> list[bytes]:
    trace = TraceBuilder(usable_blocks=80)
    for number in range(1500):
        trace.accept(f"c{number}", blocks=2).admit(f"r{number}").finish(f"r{number}")
    return trace.ndjson().rstrip(b"\n").split(b"\n")


LINES = _trace()
ACCEPT = 1 + 3 * 1000  # a resident_claim_accepted line deep inside a chunk (0-based index)


def _spaced(line: bytes) -> bytes:
    return json.dumps(json.loads(line)).encode()


def _reordered(line: bytes) -> bytes:
    return json.dumps(dict(reversed(json.loads(line).items())), separators=(",", ":")).encode()


def _nulls(line: bytes) -> bytes:
    return line[:-1] + b',"t_ns":null,"engine_step":null}'


LAYOUTS = {
    "compact": lambda line: line,
    "json.dumps": _spaced,
    "reordered": _reordered,
    "explicit nulls": _nulls,
    "tabs": lambda line: line.replace(b",", b",\t"),
}


def _file(lines: list[bytes], layout: str, newline: bytes = b"\n") -> bytes:
    shape = LAYOUTS[layout]
    return lines[0] + newline + b"".join(shape(line) + newline for line in lines[1:])


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_is_accepted(layout: str, newline: bytes) -> None:
    assert check_bytes(_file(LINES, layout, newline)).outcome is Outcome.accepted


DUPLICATES = {  # how the duplicate is spelt, in a compact line, and the key it repeats
    "top level": (b'"claim_id":"c1000",', b'"claim_id":"c1000","claim_id":"c1000",', "claim_id"),
    "top level spaced": (b'"claim_id":"c1000",', b'"claim_id" : "c1000",  "claim_id":"c1000",', "claim_id"),
    "escaped key": (b'"claim_id":"c1000",', b'"claim_id":"c1000","\\u0063laim_id":"c1000",', "claim_id"),
    "nested": (b'"blocks":2}', b'"blocks":2,"blocks":2}', "blocks"),
    "nested escaped": (b'"blocks":2}', b'"blocks":2,"\\u0062locks":2}', "blocks"),
    "tag": (b'"event":"resident_claim_accepted",', b'"event":"resident_claim_accepted",' * 2, "event"),
}


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("duplicate", sorted(DUPLICATES))
def test_a_duplicate_key_is_refused_in_every_layout(duplicate: str, layout: str, newline: bytes) -> None:
    once, twice, key = DUPLICATES[duplicate]
    lines = list(LINES)
    assert once in lines[ACCEPT]
    lines[ACCEPT] = lines[ACCEPT].replace(once, twice, 1)
    shape = LAYOUTS[layout]
    data = b"".join((line if i in (0, ACCEPT) else shape(line)) + newline for i, line in enumerate(lines))
    verdict = check_bytes(data)
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None, verdict.reason
    assert (verdict.finding.line, verdict.finding.field) == (ACCEPT + 1, key), verdict.reason
    assert "duplicate key" in verdict.finding.message


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_an_unknown_field_in_any_layout_is_still_audited(layout: str) -> None:
    lines = list(LINES)
    lines[ACCEPT] = lines[ACCEPT].replace(b'"claim_id"', b'"claim_idd":"x","claim_id"', 1)
    verdict = check_bytes(_file(lines, layout))
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (ACCEPT + 1, "claim_idd")
