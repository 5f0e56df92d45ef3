"""Single mutations of legal histories, judged by the oracle and the checker (issue 12).

Bases are histories both accept: `generate_valid_trace` and the MicroRuntime running a small
generated workload (and, with vLLM installed, the scheduler lane's scenarios). Each example
applies one mutation (drop, duplicate, reorder, change a number, id, hash, mode or owner,
insert an event); the two verdicts must agree.
CI profile: bounded, seeded per commit (kvclaims.lab.fuzz_settings). The long profile is
`bench/oracle_mutations.py`.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvclaims.oracle.exhaustive import classify, refinement_checker_unshrunk
from kvclaims.oracle.interpreter import judge
from kvclaims.oracle.mutations import (
    MUTATIONS,
    SOURCES,
    History,
    PreparedHistory,
    compare,
    decode,
    encode,
    legal_bases,
    mutate,
)

PER_SOURCE = 3

BASES = PER_SOURCE * len(SOURCES)


@functools.cache
def bases() -> list[tuple[str, History]]:
    return legal_bases(PER_SOURCE)


@functools.cache
def prepared(base: int) -> PreparedHistory:
    return PreparedHistory(*bases()[base][1])


def test_every_source_gives_legal_histories_both_accept() -> None:
    assert sorted({name for name, _ in bases()}) == sorted(SOURCES)
    assert len(bases()) == BASES


def _assert_agree(history: PreparedHistory, kind: str, seed: int) -> None:
    mutant = mutate(history.events, kind, random.Random(seed))
    if mutant is None:
        return
    found = compare(history, mutant)
    assert found is None, f"disagreement after {kind} at event {mutant.index}: {classify(found)}"


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.integers(0, BASES - 1), kind=st.sampled_from(MUTATIONS), seed=st.integers(0, 2**32 - 1))
def test_one_mutation_of_a_legal_history_gets_agreeing_verdicts(base: int, kind: str, seed: int) -> None:
    _assert_agree(prepared(base), kind, seed)


@pytest.mark.parametrize("kind", MUTATIONS)
def test_every_mutation_kind_changes_the_history(kind: str) -> None:
    _, (header, events) = bases()[0]
    changed = [mutate(events, kind, random.Random(seed)) for seed in range(20)]
    assert any(m is not None and encode(header, m.events) != encode(header, events) for m in changed)


def test_a_prepared_history_judges_a_mutant_as_the_oracle_judges_its_bytes() -> None:
    rng = random.Random(7)
    for _ in range(300):
        history = prepared(rng.randrange(BASES))
        mutant = mutate(history.events, rng.choice(MUTATIONS), rng)
        if mutant is not None:
            data = history.encode(mutant)
            assert history.judge(mutant) == judge(data) == judge(encode(history.header, mutant.events))


@pytest.fixture(scope="module")
def scheduler_histories(tmp_path_factory: pytest.TempPathFactory) -> list[PreparedHistory]:
    from kvclaims.lab.scheduler_scenarios import run_scenario

    out: Path = tmp_path_factory.mktemp("scheduler")
    histories = []
    for name in ("hard-60-70-80", "live-pressure-40-46", "demote-before-loss", "kv-load-failure-harm"):
        run_scenario(name, out / f"{name}.ndjson")
        data = (out / f"{name}.ndjson").read_bytes()
        assert judge(data).outcome == refinement_checker_unshrunk(data).outcome == "accepted", name
        histories.append(PreparedHistory(*decode(data)))
    return histories


@pytest.mark.vllm
def test_mutations_of_scheduler_lane_histories_get_agreeing_verdicts(
    scheduler_histories: list[History],
) -> None:
    rng = random.Random(2026)
    for _ in range(200):
        history = rng.choice(scheduler_histories)
        _assert_agree(history, rng.choice(MUTATIONS), rng.randrange(2**32))
