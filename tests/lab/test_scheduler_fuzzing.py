"""Fuzzing vLLM's real scheduler with the binding: the bounded, deterministic CI profile.

`kvclaims vllm fuzz` runs the same machine with a long profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm


def test_ci_profile_holds_every_invariant_and_reaches_every_outcome(tmp_path: Path) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    from kvclaims.lab import scheduler_fuzzing

    scheduler_fuzzing.STATS.__init__()  # type: ignore[misc]
    scheduler_fuzzing.SchedulerFuzz.trace_dir = tmp_path
    try:
        run_state_machine_as_test(scheduler_fuzzing.SchedulerFuzz, settings=scheduler_fuzzing.CI_SETTINGS)
    finally:
        scheduler_fuzzing.SchedulerFuzz.trace_dir = None
    summary = scheduler_fuzzing.STATS.summary()
    print("vllm fuzz CI profile:", summary)
    assert summary["verdicts"].get("accepted", 0) > 0
    assert set(summary["verdicts"]) <= {"accepted", "empty"}
    for outcome in scheduler_fuzzing.COVERED_EVENTS:
        assert summary["events"].get(outcome, 0) > 0, f"the CI profile never reached {outcome}"
    assert summary["accepted_kinds"]["continuum_pin"] > 0
    assert summary["accepted_kinds"]["duration_ms"] > 0
