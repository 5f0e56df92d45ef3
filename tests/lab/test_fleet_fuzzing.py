"""The several-pool machine (`FleetMachine`): claims kept on one engine, reuses routed to any,
the router stream judged by the routing model after every step."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.errors import FailedHealthCheck
from hypothesis.stateful import run_state_machine_as_test

from kvclaims.lab.fuzz_settings import bounded
from kvclaims.lab.micro_fuzzing import FleetMachine, InvariantBroken, MisattributingFleetMachine

FLEET_CI = bounded(max_examples=200, stateful_step_count=30)
FIND_ONLY = settings(FLEET_CI, phases=(Phase.explicit, Phase.generate))
"""For the planted bug: finding it is the test; shrinking it on 2 shared cores takes minutes."""


class CountingFleetMachine(FleetMachine):
    """Counts what the examples reached, so the test shows the routing rules were exercised."""

    outcomes: dict[str, int] = {"delivered": 0, "missed": 0, "no_claim_reuse_on_chosen": 0}

    def report(self, predicted, answer):  # type: ignore[no-untyped-def]
        delivered, outcome = super().report(predicted, answer)
        self.outcomes[outcome.value] += 1
        self.outcomes["no_claim_reuse_on_chosen"] += answer is None
        return delivered, outcome


def test_routed_reuse_is_attributed_and_every_miss_reported_across_pools() -> None:
    run_state_machine_as_test(CountingFleetMachine, settings=FLEET_CI)
    reached = CountingFleetMachine.outcomes
    assert reached["delivered"] > 0 and reached["missed"] > 0 and reached["no_claim_reuse_on_chosen"] > 0, (
        reached
    )


def test_the_ci_profile_finds_a_hook_that_reports_predictions_as_deliveries() -> None:
    with pytest.raises((InvariantBroken, FailedHealthCheck)) as found:
        run_state_machine_as_test(MisattributingFleetMachine, settings=FIND_ONLY)
    assert "routed_reuse_attributed_to_holder" in str(found.value)
