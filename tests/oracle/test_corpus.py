"""The oracle on the seed artifact's labelled corpus: every trace, read through refinement's
abstraction functions (translation from the seed lanes to trace v1 steps, no deciding code),
gets the outcome recorded in tests/refinement/data/corpus_expectations.yaml, except where
`DEVIATIONS` says why the oracle's stricter rules answer otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from kvclaims.oracle.interpreter import judge
from kvclaims.refinement.corpus import CORPUS_ENV, corpus_traces, default_corpus
from kvclaims.refinement.decoding import EVENT_NAME
from kvclaims.refinement.sources import detect, open_source

EXPECTATIONS = yaml.safe_load(
    (Path(__file__).parents[1] / "refinement" / "data" / "corpus_expectations.yaml").read_text()
)
CORPUS = default_corpus()


def _traces() -> list[Any]:
    if not CORPUS.is_dir():
        if os.environ.get("KVCLAIMS_ALLOW_MISSING_CORPUS") == "1":
            return []
        pytest.fail(f"the trace corpus is missing at {CORPUS} (set {CORPUS_ENV})")
    return list(corpus_traces(CORPUS))


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


class _Collect:
    """A sink that writes every abstracted step back as a trace v1 line."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def feed(self, event: Any, line: int, index: int) -> None:
        self.lines.append({"event": EVENT_NAME[type(event)], **_strip(msgspec.to_builtins(event))})

    def feed_run(self, events: list[Any], line: int, index: int) -> None:
        for offset, event in enumerate(events):
            self.feed(event, line + offset, index + offset)

    def unknown(self, name: str, line: int, index: int) -> None:
        self.lines.append({"event": name})


def as_trace_v1(path: Path) -> bytes:
    opener = lambda: path.open("rb")  # noqa: E731
    fmt, recognised = detect(opener)
    assert recognised
    sink = _Collect()
    with opener() as raw:
        source = open_source(raw, fmt, registry=None)
        source.drive(sink)
    header = {
        "kvclaims_trace": 1,
        "usable_blocks": source.header.usable_blocks,
        "block_size": source.header.block_size,
    }
    closed = {"event": "trace_closed", "reason": "closed"}  # a seed lane's end is its own
    lines = [header] + [{**event, "seq": seq} for seq, event in enumerate([*sink.lines, closed], 1)]
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


@pytest.mark.parametrize("trace", _traces(), ids=lambda t: t.path.removeprefix("artifacts/"))
def test_oracle_outcome_on_the_corpus(trace: Any) -> None:
    verdict = judge(as_trace_v1(trace.file))
    assert verdict.outcome == EXPECTATIONS[trace.key]["outcome"], verdict
