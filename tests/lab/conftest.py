"""Fixtures shared by the lab's tests: one run of every scheduler-lane scenario per test session
(the seed-case test reads the same runs as the scheduler lane's own tests, so no scenario runs
twice). The engine lane's engine stays module-scoped in `test_engine_lane.py`, which also checks
the engine's seed cases: one engine at a time."""

from __future__ import annotations

import pytest

from kvclaims.lab.scheduler_scenarios import SCENARIOS, ScenarioResult


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ScenarioResult]:
    from kvclaims.vllm_binding.plugin import installed_vllm_version, unsupported_reason

    if unsupported_reason(installed_vllm_version()) is not None:
        return {}  # the autouse fixture fails or skips each test with the reason
    from kvclaims.lab.scheduler_scenarios import run_scenario

    out = tmp_path_factory.mktemp("scenarios")
    return {name: run_scenario(name, out / f"{name}.ndjson") for name in SCENARIOS}
