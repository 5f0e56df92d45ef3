"""Bounded-exhaustive comparison of the oracle with `check_bytes` at a CI-sized bound
(`python -m kvclaims.oracle.exhaustive --length 6` for the full run). Stateright style: the
number of distinct oracle states is pinned, so a change to the model or the menu is visible."""

from __future__ import annotations

import pytest
from oracle.known import example_bytes, load_known, unexplained

from kvclaims.oracle.exhaustive import HEADER, explore, refinement_checker
from kvclaims.oracle.interpreter import judge

CI_LENGTH = 4
CI_STATES = 655
CI_TRACES = 5626


@pytest.fixture(scope="module")
def report():
    return explore(CI_LENGTH, "core")


def test_the_explored_space_is_pinned(report) -> None:
    assert (report.states, report.traces) == (CI_STATES, CI_TRACES)
    assert report.outcomes["accepted"] > 1000 and report.outcomes["rejected"] > 1000


def test_every_disagreement_is_a_known_judged_one(report) -> None:
    found = unexplained(report.disagreements, load_known())
    assert not found, "new disagreements (judge each, fix the oracle or record it):\n" + "\n".join(
        f"{signature}\n  {[name for name, _ in d.trace]}" for signature, d in found.items()
    )


@pytest.mark.parametrize("entry", load_known(), ids=lambda entry: entry["id"])
def test_each_known_disagreement_still_disagrees_as_recorded(entry) -> None:
    data = example_bytes(entry, HEADER)
    oracle = judge(data)
    checker = refinement_checker(data)
    assert (oracle.outcome, oracle.rule) == (entry["oracle"]["outcome"], entry["oracle"]["rule"])
    assert (checker.outcome, checker.rule) == (entry["checker"]["outcome"], entry["checker"]["rule"]), (
        f"{entry['id']}: the checker now answers {checker}; if the {entry['wrong']} side was fixed, "
        "delete this entry"
    )
    assert entry["wrong"] in ("checker", "oracle") and entry["why"].strip()
