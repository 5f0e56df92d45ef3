"""Bounded-exhaustive comparison of the oracle with `check_bytes` at a CI-sized bound
(`python -m kvclaims.oracle.exhaustive --length 6` for the full run). Stateright style: the
number of distinct oracle states is pinned, so a change to the model or the menu is visible.
The two must agree on every trace; each class they once disagreed on is a pair of twins in
tests/oracle/test_regressions.py."""

from __future__ import annotations

import pytest

from kvclaims.oracle.exhaustive import classify, explore

CI_LENGTH = 4
CI_STATES = 633
CI_TRACES = 5730


@pytest.fixture(scope="module")
def report():
    return explore(CI_LENGTH, "core")


def test_the_explored_space_is_pinned(report) -> None:
    assert (report.states, report.traces) == (CI_STATES, CI_TRACES)
    assert report.outcomes["accepted"] > 1000 and report.outcomes["rejected"] > 1000


def test_the_oracle_and_the_checker_agree_on_every_trace(report) -> None:
    shortest: dict[str, tuple[str, ...]] = {}
    for disagreement in report.disagreements:
        names = tuple(name for name, _ in disagreement.trace)
        signature = classify(disagreement)
        if signature not in shortest or len(names) < len(shortest[signature]):
            shortest[signature] = names
    assert not shortest, "disagreements (fix the side that is wrong, keep the case as twins):\n" + "\n".join(
        f"{signature}\n  {names}" for signature, names in shortest.items()
    )
