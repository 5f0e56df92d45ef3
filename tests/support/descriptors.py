"""Builders for small descriptors, so each lowering test states only what it is about."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.tables import MODE_BUNDLES, TELEMETRY_JOIN_PRECONDITIONS
from kvclaims.spec.vocabulary import EvidenceScope, Obligation, ObservationAtom, ProtectionMode

TRACE_ANCHOR = {
    "kind": "trace",
    "path": "runs/trace.ndjson",
    "note": "observed in a controlled run",
    "ordering": "seq field, strictly increasing",
    "claim_scope": "claim_id on every claim event",
}


def item(
    obligation: Obligation | str,
    *,
    status: str = "supported",
    scope: str = EvidenceScope.conformance_trace,
    anchor: dict[str, Any] | None = TRACE_ANCHOR,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"obligation": str(obligation), "status": status, "scope": str(scope)}
    if anchor is not None:
        entry["anchor"] = dict(anchor)
    return entry


def items(obligations: Iterable[Obligation], **kwargs: Any) -> list[dict[str, Any]]:
    return [item(o, **kwargs) for o in sorted(obligations)]


def bundle(mode: ProtectionMode) -> list[Obligation]:
    return sorted(MODE_BUNDLES[mode])


def adapter(name: str, depth: str, evidence: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "depth": depth, "evidence": evidence, **extra}


ALL_PRECONDITIONS = {str(p): True for p in TELEMETRY_JOIN_PRECONDITIONS}

PRESSURE_ATOMS = [
    {"atom": str(atom), "scope": "controlled_pressure", "anchor": dict(TRACE_ANCHOR)}
    for atom in ObservationAtom
]


def descriptor(**fields: Any) -> Descriptor:
    document: dict[str, Any] = {
        "descriptor": 1,
        "runtime": "example",
        "surface": "Example runtime 1.0",
        "version": "1.0",
    }
    document.update(fields)
    return Descriptor.model_validate(document)
