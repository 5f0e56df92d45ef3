"""The fleet lane: two vLLM engines with the binding behind vllm-router, the routing hook in
front (`kvclaims.lab.fleet`), and the verdicts the fleet check must give each scenario.

A marked lane (`fleet`): it starts two engines at once (about 2.5 GiB) and restarts one, which
takes minutes on a 2-core machine; `make test` and `make fleet-lane` run it
(KVCLAIMS_FLEET_LANE=1), a bare `pytest` skips it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from kvclaims.refinement.verdict import Outcome

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.fleet]


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if os.environ.get("KVCLAIMS_FLEET_LANE") != "1":
        pytest.skip(
            "the fleet lane runs under `make fleet-lane` (KVCLAIMS_FLEET_LANE=1): two engines, minutes"
        )
    if not Path(sys.executable).with_name("vllm-router").is_file() and shutil.which("vllm-router") is None:
        pytest.fail("vllm-router is not installed (pip install -c constraints.txt '.[fleet]')")
    from conftest import require_vllm

    require_vllm()
    from kvclaims.lab.fleet import run_fleet
    from kvclaims.lab.tiny_model import cached_tiny_model

    run = run_fleet(tmp_path_factory.mktemp("fleet"), cached_tiny_model())
    print(json.dumps(run.timings))
    return run


def result(run, name: str):  # type: ignore[no-untyped-def]
    return next(r for r in run.results if r.name == name)


def test_reuse_routed_to_the_holder_is_delivered_and_accepted(fleet_run) -> None:  # type: ignore[no-untyped-def]
    verdict = result(fleet_run, "routed-to-holder").verdict
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.routes == {"delivered": 1, "missed": 0}
    assert all(e.verdict.outcome is Outcome.accepted for e in verdict.engines)


def test_a_predicted_hit_on_an_engine_without_the_claim_is_a_reported_miss(fleet_run) -> None:  # type: ignore[no-untyped-def]
    found = result(fleet_run, "routed-elsewhere")
    assert found.verdict.outcome is Outcome.accepted, found.verdict.reason
    assert found.verdict.routes == {"delivered": 0, "missed": 1}
    decided = [json.loads(line) for line in found.router.read_text().splitlines()[1:]]
    assert decided[0]["event"] == "route_decided" and decided[0]["predicted_hit_blocks"] > 0


def test_an_engine_restart_fails_closed(fleet_run) -> None:  # type: ignore[no-untyped-def]
    both = result(fleet_run, "engine-restart").verdict
    assert both.outcome is Outcome.inconclusive and "2 streams" in both.reason, both.reason
    only_new = next(
        r for r in fleet_run.results if r.name.startswith("engine-restart-only-new-stream")
    ).verdict
    assert only_new.outcome is Outcome.inconclusive, only_new.reason
    assert "accepted on no engine" in only_new.reason


def test_the_accepted_runs_give_a_fleet_descriptor_whose_routed_reuse_is_approximate(
    fleet_run, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from kvclaims.lab.fleet import fleet_descriptor
    from kvclaims.spec.vocabulary import AdapterDepth, Label, Obligation

    accepted = [r for r in fleet_run.results if r.verdict.outcome is Outcome.accepted]
    assert [r.name for r in accepted] == ["routed-to-holder", "routed-elsewhere"]
    verdicts = fleet_descriptor(accepted, tmp_path / "fleet.yaml")
    print(
        json.dumps(
            {depth.value: [v.label.value, [o.value for o in v.missing]] for depth, v in verdicts.items()}
        )
    )
    patched = verdicts[AdapterDepth.backend_patch]
    assert patched.label is Label.approximate and patched.missing == [Obligation.route_cost_attribution]
