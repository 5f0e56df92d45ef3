"""The fast trace v1 reader against its reference path: the same traces, the same verdicts.

The fast path decodes 64 KiB chunks from bytes in one C call per line, proves whole chunks free
of duplicate and unknown keys by length (`CleanChunk`), feeds runs of events, and may read
ahead in a child process. The reference path (`KVCLAIMS_REFERENCE_READER=1`) reads each line
alone with Python's `json` (every key kept), audits its keys, bounds its integers, validates
the parsed document into its Struct and feeds it alone. Every trace here is checked both ways
and the verdicts (their whole JSON: outcome, finding, counterexample, witnesses, counts, notes)
must be equal: generated traces in every writer's layout and with damage of every kind, the
oracle's corpora (its differential's random histories, its mutants of legal histories) and the
seed artifact's corpus, as trace v1 and as captured.
"""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kvclaims.oracle import differential, mutations
from kvclaims.refinement import check_bytes, check_trace, read_ahead
from kvclaims.refinement.abstractions.kvclaims_v1 import REFERENCE_ENVIRONMENT
from kvclaims.refinement.corpus import CORPUS_ENV, corpus_traces, default_corpus
from kvclaims.refinement.decoding import EVENT_NAME
from kvclaims.refinement.reader import CHUNK_BYTES
from kvclaims.refinement.sources import detect, open_source
from kvclaims.refinement.testing import generate_valid_trace

_PARSERS_WORDS = re.compile(r"(not valid JSON): .*$")
"""Where a finding quotes the JSON parser that refused the line (msgspec's words on the fast
path, Python's `json` on the reference path): the words are left out of the comparison, the
finding, its class, line and field are not."""


def _comparable(verdict: dict[str, Any]) -> dict[str, Any]:
    finding = verdict.get("finding")
    if finding is not None:
        finding = finding | {"message": _PARSERS_WORDS.sub(r"\1", finding["message"])}
    return verdict | {"finding": finding, "reason": _PARSERS_WORDS.sub(r"\1", verdict["reason"])}


def _both(monkeypatch: pytest.MonkeyPatch, check: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """`check()`'s verdict JSON by the fast path (read ahead where it would be) and by the
    reference path, the parser's own words left out (`_PARSERS_WORDS`)."""
    with monkeypatch.context() as patch:
        patch.delenv(REFERENCE_ENVIRONMENT, raising=False)
        fast = check().to_json()
    with monkeypatch.context() as patch:
        patch.setenv(REFERENCE_ENVIRONMENT, "1")
        patch.setenv(read_ahead.ENVIRONMENT, "0")
        reference = check().to_json()
    return _comparable(fast), _comparable(reference)


def _agree(monkeypatch: pytest.MonkeyPatch, data: bytes) -> dict[str, Any]:
    fast, reference = _both(monkeypatch, lambda: check_bytes(data))
    assert fast == reference
    return fast


# --- generated traces: layouts and damage ----------------------------------------------------


@pytest.fixture(scope="module")
def lines() -> list[bytes]:
    out = io.BytesIO()
    generate_valid_trace(out, 6_000, seed=3, usable_blocks=512, live_claims=16)
    found = out.getvalue().split(b"\n")
    assert found.pop() == b""
    assert len(out.getvalue()) > 5 * CHUNK_BYTES
    return found


def _index(lines: list[bytes], event: str, after: int = 3_000) -> int:
    return next(i for i in range(after, len(lines)) if f'"event":"{event}"'.encode() in lines[i])


def _with(line: bytes, extra: bytes) -> bytes:
    return line[:-1] + b"," + extra + b"}"


LAYOUTS = {
    "compact": lambda line: line,
    "json.dumps": lambda line: json.dumps(json.loads(line)).encode(),
    "reordered": lambda line: json.dumps(dict(reversed(json.loads(line).items()))).encode(),
    "explicit nulls": lambda line: _with(line, b'"t_ns":null,"engine_step":null'),
    "escaped strings": lambda line: line.replace(b'"claim-', b'"\\u0063laim-'),
}


def _damaged(lines: list[bytes]) -> dict[str, bytes]:
    def joined(changed: list[bytes], *, newline: bool = True) -> bytes:
        return b"\n".join(changed) + (b"\n" if newline else b"")

    def replaced(index: int, *new: bytes) -> bytes:
        return joined([*lines[:index], *new, *lines[index + 1 :]])

    stored = _index(lines, "block_stored")
    accepted = _index(lines, "resident_claim_accepted")
    seq = json.loads(lines[stored])["seq"]
    line = lines[stored]
    return {
        "duplicate key": replaced(stored, _with(line, b'"seq":%d' % seq)),
        "duplicate key, escaped": replaced(stored, _with(line, b'"\\u0073eq":%d' % seq)),
        "duplicate nested key": replaced(
            accepted, lines[accepted].replace(b'"kind"', b'"kind":"x","kind"', 1)
        ),
        "context field": replaced(stored, _with(line, b'"stop_reason":"length"')),
        "typo field": replaced(stored, _with(line, b'"blok_id":1')),
        "nested unknown field": replaced(accepted, lines[accepted].replace(b'"kind"', b'"knd":1,"kind"', 1)),
        "wrong type": replaced(stored, line.replace(b'"block_id":', b'"block_id":"7","x":', 1)),
        "negative count": replaced(stored, line.replace(b'"position":', b'"position":-', 1)),
        "integer over 64 bits": replaced(stored, _with(line, b'"pad":18446744073709551616')),
        "float": replaced(stored, line.replace(b'"position":', b'"position":1.5,"x":', 1)),
        "NaN": replaced(stored, _with(line, b'"pad":NaN')),
        "not an object": replaced(stored, b"[1,2]"),
        "no event": replaced(stored, b'{"seq":%d}' % seq),
        "no seq": replaced(stored, line.replace(b'"seq":%d,' % seq, b"", 1)),
        "bad utf-8": replaced(stored, _with(line, b'"pad":"\xff"')),
        "bad json": replaced(stored, line[:-1]),
        "two objects on a line": replaced(stored, line + line),
        "blank line": replaced(stored, line, b""),
        "seq swapped": joined([*lines[:stored], lines[stored + 1], line, *lines[stored + 2 :]]),
        "seq repeated": replaced(stored, line, line),
        "unknown event": replaced(stored, b'{"seq":%d,"event":"block_teleported"}' % seq),
        "unknown event out of order": replaced(stored, b'{"seq":1,"event":"block_teleported"}'),
        "claim never accepted": replaced(accepted),
        "not closed": joined(lines[:-1]),
        "last line unterminated": joined(lines, newline=False),
        "cut mid-line": joined(lines)[: -len(lines[-1]) // 2],
        "event after close": joined([*lines, lines[-2]]),
        "long line": replaced(stored, _with(line, b'"pad":"' + b"z" * (1 << 20) + b'"')),
        "bom": b"\xef\xbb\xbf" + joined(lines),
        "crlf": b"".join(line + b"\r\n" for line in lines),
    }


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_gets_one_verdict(
    layout: str, lines: list[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"".join((line if i == 0 else LAYOUTS[layout](line)) + b"\n" for i, line in enumerate(lines))
    assert _agree(monkeypatch, data)["outcome"] == "accepted"
    path = tmp_path / "trace.ndjson"  # a file: read ahead where the machine can
    path.write_bytes(data)
    fast, reference = _both(monkeypatch, lambda: check_trace(path))
    assert fast == reference


DAMAGE_OUTCOMES = {  # what the damage makes of the trace, by the contract
    "context field": "accepted",
    "bom": "accepted",
    "crlf": "accepted",
    "not closed": "inconclusive",
    "cut mid-line": "invalid",
    "last line unterminated": "accepted",
    "unknown event": "inconclusive",
    "claim never accepted": "rejected",
    "event after close": "invalid",
}


DAMAGE = (
    "duplicate key",
    "duplicate key, escaped",
    "duplicate nested key",
    "context field",
    "typo field",
    "nested unknown field",
    "wrong type",
    "negative count",
    "integer over 64 bits",
    "float",
    "NaN",
    "not an object",
    "no event",
    "no seq",
    "bad utf-8",
    "bad json",
    "two objects on a line",
    "blank line",
    "seq swapped",
    "seq repeated",
    "unknown event",
    "unknown event out of order",
    "claim never accepted",
    "not closed",
    "last line unterminated",
    "cut mid-line",
    "event after close",
    "long line",
    "bom",
    "crlf",
)


@pytest.mark.parametrize("damage", DAMAGE)
def test_every_damage_gets_one_verdict(
    damage: str, lines: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    verdict = _agree(monkeypatch, _damaged(lines)[damage])
    assert verdict["outcome"] == DAMAGE_OUTCOMES.get(damage, "invalid"), verdict


# --- the oracle's corpora ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(300))
def test_the_oracle_differential_histories_get_one_verdict(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _agree(monkeypatch, mutations.encode(differential.HEADER, differential.random_trace(seed)))


@pytest.mark.parametrize("kind", mutations.MUTATIONS)
def test_the_oracle_mutants_get_one_verdict(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(kind)
    for header, events in (mutations.generator_history(1), mutations.microruntime_history(1)):
        for _ in range(8):
            mutant = mutations.mutate(events, kind, rng)
            if mutant is not None:
                _agree(monkeypatch, mutations.encode(header, mutant.events))


# --- the seed artifact's corpus ------------------------------------------------------------------

CORPUS = default_corpus()


def _corpus() -> list[Any]:
    if not CORPUS.is_dir():
        pytest.fail(f"the trace corpus is missing at {CORPUS} (set {CORPUS_ENV})")
    return list(corpus_traces(CORPUS))


class _Collect:
    """A sink writing every abstracted step back as a trace v1 event."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def feed(self, event: Any, line: int, index: int) -> None:
        fields = msgspec.to_builtins(event)
        self.events.append({"event": EVENT_NAME[type(event)], **fields})

    def feed_run(self, events: list[Any], line: int, index: int) -> None:
        for offset, event in enumerate(events):
            self.feed(event, line + offset, index + offset)

    def unknown(self, name: str, line: int, index: int) -> None:
        self.events.append({"event": name})


def _as_trace_v1(path: Path) -> bytes:
    opener = lambda: path.open("rb")  # noqa: E731
    fmt, _ = detect(opener)
    sink = _Collect()
    with opener() as raw:
        source = open_source(raw, fmt, registry=None)
        source.drive(sink)
    header = {"kvclaims_trace": 1, "usable_blocks": source.header.usable_blocks}
    if source.header.block_size is not None:
        header["block_size"] = source.header.block_size
    closed = {"event": "trace_closed", "reason": "closed"}
    return mutations.encode(header, [*sink.events, closed])


def test_the_seed_corpus_gets_one_verdict_as_captured_and_as_trace_v1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces = _corpus()
    for trace in traces:
        fast, reference = _both(monkeypatch, lambda file=trace.file: check_trace(file))
        assert fast == reference, trace.path
        _agree(monkeypatch, _as_trace_v1(trace.file))
    assert len(traces) >= 20
