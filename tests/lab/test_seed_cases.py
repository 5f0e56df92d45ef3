"""One catalogue of seed cases: every case runs on every lane it names and gives the numbers
the catalogue states (the seeds' arithmetic, written there once). The MicroRuntime runs each of
its cases here; the scheduler lane's numbers come from the session's one run of every
scheduler scenario (`tests/lab/conftest.py`); the engine lane's part is
`test_engine_lane.py::test_every_engine_seed_case_gives_the_catalogue_numbers`, over that
module's engine."""

from __future__ import annotations

import dataclasses

import pytest

from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS
from kvclaims.lab.micro_scenarios import seed_case_numbers
from kvclaims.lab.scheduler_scenarios import SCENARIOS, ScenarioResult
from kvclaims.lab.seed_cases import BY_NAME, CASES, NUMBERS, Lane, SeedCase, cases_on, mismatches, on_lane


def test_every_case_is_named_once_expects_known_numbers_and_names_a_lane() -> None:
    assert len(BY_NAME) == len(CASES)
    for case in CASES:
        assert case.lanes, case.name
        assert case.expect and set(case.expect) <= set(NUMBERS), case.name
        assert case.seed, case.name


def test_every_lane_names_a_case_and_the_vllm_lanes_have_each_scenario() -> None:
    assert all(cases_on(lane) for lane in Lane)
    registries = {Lane.scheduler: SCENARIOS, Lane.engine: ENGINE_SCENARIOS}
    for lane, registry in registries.items():
        for case in cases_on(lane):
            assert case.scenario(lane) in registry, (case.name, lane)
            assert on_lane(lane, case.scenario(lane)) is case


@pytest.mark.parametrize("case", cases_on(Lane.micro), ids=lambda c: c.name)
def test_the_micro_runtime_gives_each_case_its_numbers(case: SeedCase) -> None:
    assert mismatches(case, seed_case_numbers(case)) == {}


@pytest.mark.vllm
@pytest.mark.parametrize("case", cases_on(Lane.scheduler), ids=lambda c: c.name)
def test_the_scheduler_lane_gives_each_case_its_numbers(
    results: dict[str, ScenarioResult], case: object
) -> None:
    measured = results[case.scenario(Lane.scheduler)].numbers["seed_case"]  # type: ignore[attr-defined]
    assert mismatches(case, measured) == {}  # type: ignore[arg-type]


def test_a_lane_that_gives_other_numbers_is_caught() -> None:
    """The comparison itself: a wrong proof number, a missing number and a different outcome
    each show as a mismatch."""
    case = BY_NAME["hard-60-70-80"]
    honest = seed_case_numbers(case)
    assert mismatches(case, honest) == {}
    assert mismatches(case, honest | {"capacity_shortfall_blocks": 49}) == {
        "capacity_shortfall_blocks": (50, 49)
    }
    missing = {k: v for k, v in honest.items() if k != "harm_events"}
    assert mismatches(case, missing) == {"harm_events": (0, "<not measured>")}
    native = seed_case_numbers(BY_NAME["native-60-70-80"])
    assert mismatches(case, native)["active_outcome"] == ("refused", "admitted")


def test_the_micro_runtime_measures_a_changed_input() -> None:
    """The numbers come from running the inputs: a larger pool shrinks the shortfall."""
    case = dataclasses.replace(BY_NAME["hard-60-70-80"], usable_blocks=100)
    assert seed_case_numbers(case)["capacity_shortfall_blocks"] == 30
