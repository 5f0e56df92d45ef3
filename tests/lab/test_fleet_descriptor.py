"""The fleet descriptor from accepted fleets: engine evidence from the binding's streams,
placement and reuse attribution from the router streams, and the routed_reuse label it earns."""

from __future__ import annotations

from pathlib import Path

import yaml

from kvclaims.lab.fleet import ScenarioResult, fleet_descriptor
from kvclaims.refinement.fleet import check_fleet
from kvclaims.refinement.testing import TraceBuilder, write_fleet
from kvclaims.spec.vocabulary import AdapterDepth, Label, Obligation


def accepted_fleet(directory: Path, outcome: str) -> ScenarioResult:
    directory.mkdir()
    holder = TraceBuilder(usable_blocks=8)
    holder.accept("c1", blocks=2).store_prefix("c1", 2).materialize("c1", 2)
    holder.admit("r1").reuse("r1", "c1", 2).finish("r1")
    other = TraceBuilder(usable_blocks=8).admit("r2").finish("r2")
    engine, blocks, request = ("A", 2, "r1") if outcome == "delivered" else ("B", 0, "r2")
    router = TraceBuilder(usable_blocks=None, block_size=None)
    router.route(request, "c1", engine, predicted=2).report_route(request, "c1", engine, blocks, outcome)
    router_path, engines = write_fleet(directory, router, {"A": holder, "B": other})
    verdict = check_fleet(router_path, engines)
    assert verdict.outcome.value == "accepted", verdict.reason
    return ScenarioResult(outcome, router_path, tuple(engines), verdict)


def test_routed_reuse_is_approximate_without_route_cost(tmp_path: Path) -> None:
    results = [accepted_fleet(tmp_path / "hit", "delivered"), accepted_fleet(tmp_path / "miss", "missed")]
    out = tmp_path / "fleet.yaml"
    verdicts = fleet_descriptor(results, out)
    routing, patched = verdicts[AdapterDepth.routing_hook], verdicts[AdapterDepth.backend_patch]
    assert patched.label is Label.approximate and patched.missing == [Obligation.route_cost_attribution]
    assert routing.label is Label.approximate
    assert set(routing.missing) == {
        Obligation.claim_identity,
        Obligation.materialization_predicate,
        Obligation.claim_scoped_telemetry,
        Obligation.route_cost_attribution,
    }
    hook = yaml.safe_load(out.read_text())["adapters"][1]
    cited = [(item["obligation"], Path(item["anchor"]["path"]).parent.name) for item in hook["evidence"]]
    assert cited == [
        ("placement_attribution", "hit"),
        ("reuse_routing_attribution", "hit"),
        ("reuse_routing_attribution", "miss"),
    ]


def test_only_delivered_reuse_does_not_evidence_reuse_attribution(tmp_path: Path) -> None:
    verdicts = fleet_descriptor([accepted_fleet(tmp_path / "hit", "delivered")], tmp_path / "fleet.yaml")
    assert Obligation.reuse_routing_attribution in verdicts[AdapterDepth.backend_patch].missing
