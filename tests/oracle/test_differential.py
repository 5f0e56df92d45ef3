"""The randomized differential over the whole vocabulary (kvclaims.oracle.differential): the
oracle and the checker agree on generated histories, legal and mutated, but the known checker
bugs; its generator reaches every event type and all four outcomes. Seeded per commit
(kvclaims.lab.fuzz_settings); `python -m kvclaims.oracle.differential --cases N` is the long run."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvclaims.oracle.differential import EVENT_TYPES, compare, random_trace
from kvclaims.oracle.exhaustive import classify
from kvclaims.oracle.known_disagreements import KNOWN_CHECKER_DISAGREEMENTS, known

CASES = 1500


@settings(max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**63 - 1))
def test_the_oracle_and_the_checker_agree_on_generated_histories(seed: int) -> None:
    _, found = compare(seed)
    if found is not None:
        signature = classify(found)
        assert known(signature) is not None, (
            f"new disagreement (python -m kvclaims.oracle.differential --cases 1 --seed {seed}):\n{signature}"
        )


def test_the_generator_reaches_every_event_type_and_every_outcome() -> None:
    names: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    for seed in range(400):
        names.update(event["event"] for event in random_trace(seed))
        outcomes[compare(seed, checker=lambda data: _same)[0].outcome] += 1
    assert set(EVENT_TYPES) <= set(names)
    assert {"accepted", "rejected", "inconclusive"} <= set(outcomes)  # lines are well-formed
    assert outcomes["accepted"] > 100 and outcomes["rejected"] > 100


@pytest.mark.parametrize(
    "entry",
    [k for k in KNOWN_CHECKER_DISAGREEMENTS if k.differential_seed is not None],
    ids=lambda k: k.finding,
)
def test_each_known_differential_disagreement_is_still_there(entry) -> None:  # type: ignore[no-untyped-def]
    _, found = compare(entry.differential_seed)
    assert found is not None and known(classify(found)) == entry, "fixed: delete it from the known list"


class _Same:
    outcome, rule, message = "accepted", None, ""


_same = _Same()
