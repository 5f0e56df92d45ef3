"""Every trace of the seed artifact's corpus gets a verdict, checked against recorded
expectations; where the verdict differs from the source repository's own label, the
expectation says why (tests/refinement/data/corpus_expectations.yaml)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kvclaims.refinement.api import check_trace
from kvclaims.refinement.corpus import CORPUS_ENV, corpus_traces, default_corpus
from kvclaims.spec.vocabulary import TraceWitness

EXPECTATIONS = yaml.safe_load((Path(__file__).parent / "data" / "corpus_expectations.yaml").read_text())
CORPUS = default_corpus()


def traces() -> list:
    if not CORPUS.is_dir():
        if os.environ.get("KVCLAIMS_ALLOW_MISSING_CORPUS") == "1":
            return []
        pytest.fail(f"the trace corpus is missing at {CORPUS} (set {CORPUS_ENV})")
    return list(corpus_traces(CORPUS))


TRACES = traces()


def test_every_corpus_trace_has_an_expectation_and_every_expectation_a_trace() -> None:
    assert {t.key for t in TRACES} == set(EXPECTATIONS)
    assert len(TRACES) == 32


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t.path.removeprefix("artifacts/"))
def test_corpus_verdict(trace) -> None:
    expected = EXPECTATIONS[trace.key]
    verdict = check_trace(trace.file)
    assert verdict.outcome.value == expected["outcome"], verdict.reason
    assert (verdict.rule.value if verdict.rule else None) == expected.get("rule"), verdict.reason
    exercised = {w.kind for w in verdict.witnesses}
    assert {TraceWitness(w) for w in expected.get("witnesses", [])} <= exercised
    source_says_pass = trace.gate_verdict == "pass" or "failure_outcome=pass" in trace.gate_verdict
    assert (expected["agrees"] is None) == (trace.gate_verdict == "unclear")
    if expected["agrees"] is not True:
        assert expected.get("reason"), "a verdict that differs from the source label needs its reason"
    if expected["agrees"]:
        accepted = verdict.outcome.value == "accepted"
        observation_pass = "observation=pass" in trace.gate_verdict
        assert accepted == (source_says_pass or (observation_pass and "negative" not in trace.role))
