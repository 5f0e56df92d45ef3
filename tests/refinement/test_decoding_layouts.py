"""Lines in any JSON layout are read alike, and a duplicate key is refused in every layout, at
every depth, however it is spelt (`CleanChunk`'s length proof must never pass it)."""

from __future__ import annotations

import json

import pytest

from kvclaims.refinement import Outcome, check_bytes
from kvclaims.refinement.decoding import CleanChunk
from kvclaims.refinement.testing import TraceBuilder


def _trace() -> list[bytes]:
    trace = TraceBuilder(usable_blocks=80)
    for number in range(500):
        claim, request = f"c{number}", f"r{number}"
        trace.accept(claim, blocks=2).store_prefix(claim, 2).materialize(claim, 2)
        trace.admit(request).reuse(request, claim, 2).finish(request).claim_event("released", claim)
    return trace.ndjson().rstrip(b"\n").split(b"\n")


LINES = _trace()
ACCEPT = 1 + 8 * 300  # a resident_claim_accepted line (of claim c300) deep inside a chunk (0-based)


def _spaced(line: bytes) -> bytes:
    return json.dumps(json.loads(line)).encode()


def _reordered(line: bytes) -> bytes:
    return json.dumps(dict(reversed(json.loads(line).items())), separators=(",", ":")).encode()


def _nulls(line: bytes) -> bytes:
    return line[:-1] + b',"t_ns":null,"engine_step":null}'


DEFAULTS = {  # every field trace v1 gives a default, per event type of the trace, at that default
    "resident_claim_accepted": {
        "t_ns": None,
        "engine_step": None,
        "duration_steps": None,
        "duration_ms": None,
        "refresh_on_hit": False,
    },
    "block_stored": {"t_ns": None, "engine_step": None, "cache_level": None},
    "resident_claim_materialized": {"t_ns": None, "engine_step": None, "checkpoint": None},
    "active_request_admitted": {"t_ns": None, "engine_step": None, "claim_shared_blocks": None},
    "request_reused": {"t_ns": None, "engine_step": None, "checkpoint": None},
    "request_finished": {"t_ns": None, "engine_step": None},
    "resident_claim_released": {"t_ns": None, "engine_step": None, "reason": None},
    "trace_closed": {"t_ns": None, "engine_step": None},
}
PREDICATE_DEFAULTS = {"blocks": None, "tokens": None}


def _every_default(line: bytes, separators: tuple[str, str] = (",", ":")) -> bytes:
    """The line as `json.dumps(event.model_dump())` writes it: every default written out, the
    claim's predicate's too (`"tokens":null`)."""
    document = json.loads(line)
    document = DEFAULTS[document["event"]] | document
    if "predicate" in document:
        document["predicate"] = PREDICATE_DEFAULTS | document["predicate"]
    return json.dumps(document, separators=separators).encode()


LAYOUTS = {
    "compact": lambda line: line,
    "json.dumps": _spaced,
    "reordered": _reordered,
    "explicit nulls": _nulls,
    "every default": _every_default,
    "every default, json.dumps": lambda line: _every_default(line, (", ", ": ")),
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
    "top level": (b'"claim_id":"c300",', b'"claim_id":"c300","claim_id":"c300",', "claim_id"),
    "top level spaced": (b'"claim_id":"c300",', b'"claim_id" : "c300",  "claim_id":"c300",', "claim_id"),
    "escaped key": (b'"claim_id":"c300",', b'"claim_id":"c300","\\u0063laim_id":"c300",', "claim_id"),
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


IN_LAYOUT_DUPLICATES = {  # a pair written again inside a line already in its layout, the key it repeats
    "top level": (b"{", b'{"claim_id":"c300",', "claim_id"),
    "a default written twice": (b"{", b'{"t_ns":null,', "t_ns"),
    "nested": (b'"leading_prefix_at_least"', b'"leading_prefix_at_least","blocks":2', "blocks"),
    "nested default written twice": (
        b'"leading_prefix_at_least"',
        b'"leading_prefix_at_least","tokens":null',
        "tokens",
    ),
}


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("duplicate", sorted(IN_LAYOUT_DUPLICATES))
def test_a_duplicate_key_in_a_line_of_any_layout_is_refused(
    duplicate: str, layout: str, newline: bytes
) -> None:
    """The duplicate is written into the shaped line itself (a writer's own layout, explicit
    nulls included), among lines of that layout: neither comparison may pass it, whichever the
    chunks before it made the reader try first."""
    once, twice, key = IN_LAYOUT_DUPLICATES[duplicate]
    shaped = LAYOUTS[layout](LINES[ACCEPT])
    if key == "t_ns" and b'"t_ns"' not in shaped:
        shaped = shaped.replace(b"{", b'{"t_ns":null,', 1)  # the layout writes no default
    if key == "tokens" and b'"tokens"' not in shaped:
        shaped = shaped.replace(once, once + b',"tokens":null', 1)
    assert once in shaped
    lines = [line if i == 0 else LAYOUTS[layout](line) for i, line in enumerate(LINES)]
    lines[ACCEPT] = shaped.replace(once, twice, 1)
    verdict = check_bytes(b"".join(line + newline for line in lines))
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None, verdict.reason
    assert (verdict.finding.line, verdict.finding.field) == (ACCEPT + 1, key), verdict.reason
    assert "duplicate key" in verdict.finding.message


@pytest.mark.parametrize("first", ["compact", "every default"])
def test_a_writer_changing_layout_midway_is_still_audited(first: str) -> None:
    """Chunks of one layout, then of the other, a duplicate key in the second part (compact or
    with every default written): the comparison the first part made the reader try first must
    not pass it."""
    second = "every default" if first == "compact" else "compact"
    shapes = [LAYOUTS[first] if i < ACCEPT - 200 else LAYOUTS[second] for i in range(len(LINES))]
    lines = [line if i == 0 else shapes[i](line) for i, line in enumerate(LINES)]
    lines[ACCEPT] = lines[ACCEPT].replace(b'"claim_id":"c300",', b'"claim_id":"x","claim_id":"c300",', 1)
    verdict = check_bytes(b"".join(line + b"\n" for line in lines))
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None, verdict.reason
    assert (verdict.finding.line, verdict.finding.field) == (ACCEPT + 1, "claim_id")
    assert check_bytes(b"".join(line + b"\n" for i, line in enumerate(lines) if i != ACCEPT)).outcome is (
        Outcome.rejected
    )


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_is_proven_clean_without_a_re_parse(layout: str, newline: bytes) -> None:
    """A chunk of clean lines in any layout passes `CleanChunk` whole (its events come back),
    so no line of it costs an exact re-parse; twice in a row, so both orders of its two
    comparisons are taken."""
    clean = CleanChunk()
    lines = [LAYOUTS[layout](line) for line in LINES[1:200]]
    for _ in range(2):
        buffer = b"".join(line + newline for line in lines)
        events = clean(buffer.split(b"\n")[:-1], buffer, len(buffer), -1)
        assert events is not None
        assert [event.seq for event in events] == list(range(199))
