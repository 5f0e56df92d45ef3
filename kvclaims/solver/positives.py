"""Positive rows: the sound (descriptor, mode, depth) rows the adversary mutates.

The shipped descriptors (`descriptors/*.yaml`) come first: every (descriptor, mode) that is
sound at some depth contributes its shallowest sound depth. The shipped set has no positive
for some mode/depth shapes the seed names (routed_reuse at routing_hook; hard_protected from a
scheduler_hook plus an allocator_hook; demotable and expiring at claim_registry; offloadable at
storage_restorability: seed 000 section 3, "allowed adapter/patch depth"). For those, small
*fixtures* stand in, built here and labelled `fixture:`; they are not runtime evidence and are
never written to `descriptors/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvclaims.spec.descriptor import Descriptor, load_descriptors
from kvclaims.spec.evidence import LoweringRow
from kvclaims.spec.lowering import lower_row
from kvclaims.spec.tables import TELEMETRY_JOIN_PRECONDITIONS
from kvclaims.spec.vocabulary import AdapterDepth, ProtectionMode


@dataclass(frozen=True)
class PositiveRow:
    """A sound row to mutate: where it comes from, the descriptor, and the row."""

    source: str
    descriptor: Descriptor
    mode: ProtectionMode
    depth: AdapterDepth

    @property
    def ident(self) -> str:
        return f"{self.source.removesuffix('.yaml')}.{self.mode}.{self.depth}"


def shipped_positive_rows(directory: Path) -> list[PositiveRow]:
    """The shallowest sound depth of every (shipped descriptor, mode) that is sound somewhere."""
    if not directory.is_dir() or not any(directory.glob("*.yaml")):
        return []
    found = []
    for path, descriptor in load_descriptors([directory]):
        for mode in ProtectionMode:
            for depth in AdapterDepth:
                if lower_row(descriptor, LoweringRow(mode=mode, depth=depth)).label.is_sound:
                    found.append(PositiveRow(path.name, descriptor, mode, depth))
                    break
    return found


_TRACE = {
    "kind": "trace",
    "ordering": "seq strictly increasing",
    "claim_scope": "claim_id on every claim event",
}


def _item(obligation: str, scope: str, run: str) -> dict[str, Any]:
    anchor = _TRACE | {"path": f"fixtures/{run}.jsonl", "note": f"fixture run {run} (not runtime evidence)"}
    return {"obligation": obligation, "status": "supported", "scope": scope, "anchor": anchor}


def _adapter(name: str, depth: AdapterDepth, items: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "depth": depth.value, "evidence": items, **extra}


def _fixture(name: str, signals: list[str], adapters: list[dict[str, Any]]) -> Descriptor:
    return Descriptor.model_validate(
        {
            "descriptor": 1,
            "runtime": f"fixture-{name}",
            "surface": f"solver fixture: {name} (seed 000 section 3 allowed depths)",
            "version": "fixture",
            "approximation_signals": signals,
            "adapters": adapters,
        }
    )


def fixture_positive_rows() -> list[PositiveRow]:
    """Positive shapes the shipped descriptors lack, one small descriptor each."""
    D = AdapterDepth
    all_preconditions = {p.value: True for p in sorted(TELEMETRY_JOIN_PRECONDITIONS)}
    registry = _adapter(
        "claim-registry",
        D.claim_registry,
        [
            _item(o, "conformance_trace", "registry")
            for o in (
                "claim_identity",
                "explicit_acceptance",
                "materialization_predicate",
                "ordered_lifecycle_events",
            )
        ],
    )
    routing = _fixture(
        "routing-hook",
        ["kv_aware_routing"],
        [
            _adapter(
                "registry-join",
                D.telemetry_join,
                [
                    _item(o, "litmus_trace", "join")
                    for o in ("claim_identity", "materialization_predicate", "claim_scoped_telemetry")
                ],
                preconditions=all_preconditions,
            ),
            _adapter(
                "claim-router",
                D.routing_hook,
                [
                    _item(o, "conformance_trace", "router")
                    for o in ("route_cost_attribution", "placement_attribution", "reuse_routing_attribution")
                ],
            ),
        ],
    )
    split = _fixture(
        "scheduler-and-allocator-hooks",
        ["active_no_evict", "priority_value", "block_pinning"],
        [
            registry,
            _adapter(
                "conflict-scheduler",
                D.scheduler_hook,
                [
                    _item(o, "controlled_pressure", "scheduler")
                    for o in ("explicit_conflict_action", "blocking_claim_ids", "claim_harm_attribution")
                ],
            ),
            _adapter(
                "victim-allocator",
                D.allocator_hook,
                [
                    _item(o, "controlled_pressure", "allocator")
                    for o in ("victim_exclusion_before_violation", "footprint_accounting")
                ],
            ),
        ],
    )
    lifecycle = _fixture(
        "claim-registry-lifecycle",
        ["priority_value", "duration_field"],
        [
            _adapter(
                "claim-registry",
                D.claim_registry,
                [
                    _item(o, "conformance_trace", "registry")
                    for o in ("claim_identity", "explicit_acceptance", "ordered_lifecycle_events")
                ]
                + [
                    _item(o, "litmus_trace", "boundaries")
                    for o in ("claim_demoted_before_loss", "claim_expired_boundary")
                ],
            )
        ],
    )
    storage = _fixture(
        "storage-restorability",
        ["storage_tier", "fallback_recompute", "generic_counters"],
        [
            registry,
            _adapter(
                "restore-hook",
                D.storage_restorability,
                [
                    _item(o, "failure_injection", "restore")
                    for o in (
                        "offload_restorability",
                        "restoration_failure_outcome",
                        "claim_harm_attribution",
                    )
                ],
            ),
        ],
    )
    M = ProtectionMode
    return [
        PositiveRow("fixture:routing-hook", routing, M.routed_reuse, D.routing_hook),
        PositiveRow("fixture:scheduler-and-allocator-hooks", split, M.hard_protected, D.allocator_hook),
        PositiveRow("fixture:claim-registry-lifecycle", lifecycle, M.demotable, D.claim_registry),
        PositiveRow("fixture:claim-registry-lifecycle", lifecycle, M.expiring, D.claim_registry),
        PositiveRow("fixture:storage-restorability", storage, M.offloadable, D.storage_restorability),
    ]


def positive_rows(directory: Path) -> list[PositiveRow]:
    """Shipped positives, then the fixtures (each must itself be sound)."""
    rows = shipped_positive_rows(directory) + fixture_positive_rows()
    for row in rows:
        verdict = lower_row(row.descriptor, LoweringRow(mode=row.mode, depth=row.depth))
        if not verdict.label.is_sound:
            raise ValueError(f"positive row {row.ident} is {verdict.label}, not sound")
    return rows
