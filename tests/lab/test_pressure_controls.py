"""Seed 000's priority pressure controls on vLLM's scheduler: the committed artifacts are what
the controls produce, and the descriptors say what the artifacts show (nothing more)."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvclaims.lab.pressure_controls import ARTIFACT_NAME, CONTROLS, descriptor_entries
from kvclaims.spec.descriptor import load_descriptor
from kvclaims.spec.lowering import lower
from kvclaims.spec.vocabulary import AdapterDepth, Label, ProtectionMode

DESCRIPTORS = Path(__file__).resolve().parents[2] / "descriptors"
STOCK = DESCRIPTORS / "evidence" / "vllm_upstream_0_32_0" / ARTIFACT_NAME
BINDING = DESCRIPTORS / "evidence" / "kvclaims-vllm" / ARTIFACT_NAME


def artifact(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def entries(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    relative = str(path.relative_to(DESCRIPTORS))
    return descriptor_entries(json.loads(data), relative, hashlib.sha256(data).hexdigest())


@pytest.mark.vllm
@pytest.mark.parametrize(("runtime", "committed"), [("stock", STOCK), ("binding", BINDING)])
def test_the_committed_artifacts_are_what_the_controls_produce(runtime: str, committed: Path) -> None:
    from kvclaims.lab.pressure_controls import run_controls

    assert run_controls(runtime)["controls"] == artifact(committed)["controls"]  # type: ignore[arg-type]


def test_stock_priority_never_reaches_retention_recency_decides() -> None:
    """The finding: under scheduling_policy=priority the prompt cached first loses a block first
    in every trial, in both warm-up orders, whatever the priorities; so original and swapped
    each match soft priority in exactly one of two trials, and equal never loses both at once."""
    controls = artifact(STOCK)["controls"]
    for control in controls.values():
        for trial in control["trials"]:
            assert trial["first_lost"] == trial["warm_order"][0]
            assert trial["cached_blocks_before_pressure"] == {"A": 6, "B": 6}
    assert {n: c["passes"] for n, c in controls.items()} == {"original": 1, "swapped": 1, "equal": 0}
    assert not any(c["observed"] for c in controls.values())


def test_the_binding_accepts_soft_priority_claims_and_priority_orders_the_loss() -> None:
    """With the binding the lower-priority prompt loses first whichever was cached first, and
    equal priorities lose a block each in the same filler."""
    controls = artifact(BINDING)["controls"]
    for control in controls.values():
        for trial in control["trials"]:
            assert set(trial["claim_outcomes"].values()) == {
                "kvclaims:claim_accepted:claim-A",
                "kvclaims:claim_accepted:claim-B",
            }
            assert trial["cached_blocks_before_pressure"] == {"A": 6, "B": 6}
    assert {n: c["passes"] for n, c in controls.items()} == {"original": 2, "swapped": 2, "equal": 2}


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("control", "order"), [(CONTROLS[0], "AB"), (CONTROLS[1], "BA"), (CONTROLS[2], "AB")]
)
def test_a_binding_trial_goes_against_recency_and_its_trace_is_accepted(
    control: Any, order: str, tmp_path: Path
) -> None:
    """Warm-up orders in which vLLM's LRU alone would evict the other prompt (or one alone)
    first; the claims' trace (accepted, lost) is accepted by refinement."""
    from kvclaims.lab.pressure_controls import run_trial
    from kvclaims.refinement import check_trace

    trace = tmp_path / "trace.ndjson"
    trial = run_trial("binding", control, order, trace)
    assert trial["first_lost"] == control.expected_first_loss
    verdict = check_trace(trace)
    assert verdict.outcome == "accepted", verdict.reason
    events = [json.loads(line).get("event") for line in trace.read_text(encoding="utf-8").splitlines()]
    assert events.count("resident_claim_accepted") == 2
    assert "resident_claim_harmed" not in events  # soft: lost, never harm


def test_the_stock_descriptor_says_what_its_artifact_shows() -> None:
    document = yaml.safe_load((DESCRIPTORS / "vllm_upstream_0_32_0.yaml").read_text(encoding="utf-8"))
    observed = [i for i in document["native"] if i["scope"] == "controlled_pressure"]
    derived = entries(STOCK)
    assert observed == [derived["evidence"]]
    assert document.get("observations", []) == derived["observations"] == []
    assert "priority_value" in document["approximation_signals"]


def test_a_passing_artifact_yields_all_three_atoms_and_supported_influence() -> None:
    """The other branch, on a copy whose trials all went as soft priority predicts."""
    passing = copy.deepcopy(artifact(STOCK))
    for control in CONTROLS:
        entry = passing["controls"][control.name]
        for trial in entry["trials"]:
            trial["first_lost"] = control.expected_first_loss
        entry["passes"], entry["observed"] = entry["runs"], True
    derived = descriptor_entries(passing, "x.json", "0" * 64)
    assert [o["atom"] for o in derived["observations"]] == [c.atom for c in CONTROLS]
    assert derived["evidence"]["status"] == "supported"
    one_failing = copy.deepcopy(passing)
    one_failing["controls"]["equal"]["observed"] = False
    assert descriptor_entries(one_failing, "x.json", "0" * 64)["evidence"]["status"] == "missing"


def test_the_soft_priority_rows_are_labelled_from_the_observations() -> None:
    stock = lower(
        load_descriptor(DESCRIPTORS / "vllm_upstream_0_32_0.yaml"),
        ProtectionMode.soft_priority,
        AdapterDepth.none,
    )
    binding = lower(
        load_descriptor(DESCRIPTORS / "kvclaims-vllm.yaml"),
        ProtectionMode.soft_priority,
        AdapterDepth.backend_patch,
    )
    assert stock.label is Label.approximate  # a priority value exists; it does not reach retention
    assert len(stock.missing_atoms) == 3
    assert any("status is missing" in r for r in stock.reasons)
    assert binding.label is Label.sound_with_adapter
    assert binding.missing_atoms == []


def test_the_binding_descriptor_carries_the_observed_atoms_and_influence() -> None:
    document = yaml.safe_load((DESCRIPTORS / "kvclaims-vllm.yaml").read_text(encoding="utf-8"))
    derived = entries(BINDING)
    assert document["observations"] == derived["observations"]
    assert [o["atom"] for o in derived["observations"]] == [c.atom for c in CONTROLS]
    items = [i for a in document["adapters"] for i in a["evidence"]]
    assert [i for i in items if i["obligation"] == "priority_influence"] == [derived["evidence"]]
