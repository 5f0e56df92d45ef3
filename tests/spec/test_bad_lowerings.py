"""Seed 000 table 9: the ten naive feature-table inferences fail closed on real descriptors.

Each case in `data/bad_lowerings.yaml` takes a shipped descriptor, applies the naive reading as
data (the obligation it infers from a primitive, and the evidence it would add, with the scope
that evidence really has) and expects table 9's label: approximate, rejected ("rejected by
connector gate" included) or invalid.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvclaims.spec.descriptor import Descriptor, load_descriptor
from kvclaims.spec.lowering import lower
from kvclaims.spec.verdict import LoweringRule
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    ApproximationSignal,
    Label,
    Obligation,
    ProtectionMode,
)

DESCRIPTORS = Path(__file__).resolve().parents[2] / "descriptors"
CASES = yaml.safe_load((Path(__file__).parent / "data" / "bad_lowerings.yaml").read_text())["cases"]

TABLE9_LABELS = {"approximate", "rejected", "invalid"}


def applications() -> Iterator[Any]:
    for case in CASES:
        for application in case["applications"]:
            for depth in application["depths"]:
                yield pytest.param(
                    case,
                    application,
                    depth,
                    id=f"{case['id']}-{application['descriptor']}-{application['mode']}-{depth}",
                )


def with_naive_evidence(descriptor: Descriptor, naive: list[dict[str, Any]]) -> Descriptor:
    """The descriptor as a naive reading would write it: its evidence plus (or instead of) the
    naive items. Re-validated, so the naive descriptor is itself a valid `descriptor: 1`."""
    document = descriptor.model_dump(mode="json")
    for entry in naive:
        item, location = entry["item"], entry["location"]
        if isinstance(location, dict):
            document["adapters"].append({**location, "evidence": [item]})
            continue
        if location == "native":
            holder = document
            key = "native"
        else:
            (holder,) = [a for a in document["adapters"] if a["name"] == location]
            key = "evidence"
        if entry.get("replace"):
            holder[key] = [i for i in holder[key] if i["obligation"] != item["obligation"]]
        holder[key].append(item)
    return Descriptor.model_validate(document)


def test_all_ten_table9_inferences_are_covered() -> None:
    assert len(CASES) == 10
    assert len({case["table9"] for case in CASES}) == 10
    assert {case["label"] for case in CASES} == TABLE9_LABELS
    assert all(case["applications"] for case in CASES)


@pytest.mark.parametrize(("case", "application", "depth"), list(applications()))
def test_naive_inference_gets_table9_label(
    case: dict[str, Any], application: dict[str, Any], depth: str
) -> None:
    shipped = load_descriptor(DESCRIPTORS / application["descriptor"])
    naive = with_naive_evidence(shipped, application.get("naive_evidence", []))
    inferred = {
        Obligation(o): ApproximationSignal(s) for o, s in application.get("inferred_from", {}).items()
    }
    verdict = lower(naive, ProtectionMode(application["mode"]), AdapterDepth(depth), inferred_from=inferred)

    assert verdict.label is Label(case["label"]), verdict.reasons
    assert verdict.decided_by is LoweringRule(application["decided_by"]), verdict.reasons
    findings = {f.obligation: f for f in verdict.findings}
    for entry in application.get("naive_evidence", []):
        finding = findings[Obligation(entry["item"]["obligation"])]
        if entry.get("counts"):
            assert finding.supplied, "the naive item is genuine runtime evidence and counts"
        else:
            assert not finding.supplied
            assert LoweringRule(entry["discounted_by"]) in {d.rule for d in finding.discounted}


@pytest.mark.parametrize(("case", "application", "depth"), list(applications()))
def test_the_naive_reading_never_upgrades_the_shipped_row(
    case: dict[str, Any], application: dict[str, Any], depth: str
) -> None:
    """Fail-closed monotonicity on the seed's own counterexamples: the naive row is never
    labelled above the shipped row it was derived from."""
    shipped = load_descriptor(DESCRIPTORS / application["descriptor"])
    naive = with_naive_evidence(shipped, application.get("naive_evidence", []))
    inferred = {
        Obligation(o): ApproximationSignal(s) for o, s in application.get("inferred_from", {}).items()
    }
    mode, at = ProtectionMode(application["mode"]), AdapterDepth(depth)
    assert lower(naive, mode, at, inferred_from=inferred).label <= lower(shipped, mode, at).label
