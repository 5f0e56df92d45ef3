"""The shipped descriptors meet the seeds' expectations (seed 000 sections 6-9, seed 001 5.4).

Expected labels live in `data/seed_expectations.yaml`, written from the seeds' facts (each entry
cites its section); they are never produced by running the checker. Everything here runs over the
real files in `descriptors/` through `load_descriptor` and `lower`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvclaims.spec.descriptor import Descriptor, descriptor_paths, load_descriptor
from kvclaims.spec.lowering import lower
from kvclaims.spec.verdict import LoweringRule, Verdict
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    EvidenceStatus,
    Label,
    LabelSubtype,
    Obligation,
    ProtectionMode,
)

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTORS = ROOT / "descriptors"
EXPECTED = yaml.safe_load((Path(__file__).parent / "data" / "seed_expectations.yaml").read_text())
SHIPPED = sorted(p.name for p in descriptor_paths([DESCRIPTORS]))

# DESIGN 2.4: the rows every shipped set must cover (seed 000 6-8, seed 001 4-5).
REQUIRED_SURFACES = {
    "tensorrt_llm_source_06cff70502.yaml",
    "tensorrt_llm_1_3_0rc14_container.yaml",
    "tensorrt_llm_1_3_0rc15_container.yaml",
    "sglang_hicache_bbe9c7e.yaml",
    "dynamo_kv_router_docs.yaml",
    "vllm_upstream_0_32_0.yaml",
    "vllm_patched_arbiter.yaml",
    "vllm_continuum_ttl_pin_fork.yaml",
    "mooncake_store.yaml",
    "lmcache_controller.yaml",
}

_LOADED: dict[str, Descriptor] = {}


def shipped(name: str) -> Descriptor:
    if name not in _LOADED:
        _LOADED[name] = load_descriptor(DESCRIPTORS / name)
    return _LOADED[name]


def judge(name: str, mode: str, depth: str) -> Verdict:
    return lower(shipped(name), ProtectionMode(mode), AdapterDepth(depth))


def positive_rows() -> Iterator[tuple[str, ProtectionMode, AdapterDepth, LabelSubtype]]:
    for row in EXPECTED["positive_rows"]:
        start = AdapterDepth(row["from_depth"])
        for depth in AdapterDepth:
            if depth >= start:
                yield row["descriptor"], ProtectionMode(row["mode"]), depth, LabelSubtype(row["subtype"])


def expectation_cases() -> Iterator[Any]:
    for entry in EXPECTED["expectations"]:
        for name in entry["descriptors"]:
            for mode in entry["modes"]:
                for depth in entry["depths"]:
                    yield pytest.param(entry, name, mode, depth, id=f"{entry['id']}-{name}-{mode}-{depth}")


def test_required_surfaces_are_shipped() -> None:
    assert REQUIRED_SURFACES <= set(SHIPPED)


def test_no_hand_written_vllm_binding_row() -> None:
    """DESIGN 2.4: the vllm_binding row is generated from checked traces, never hand-written."""
    assert not [name for name in SHIPPED if "binding" in name]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_descriptor_loads_and_is_pinned(name: str) -> None:
    descriptor = shipped(name)
    assert descriptor.descriptor == 1
    assert descriptor.version.strip() or descriptor.commit.strip()
    assert descriptor.lowerings is None, "shipped descriptors are judged at every mode and depth"


def test_no_row_anywhere_is_native_sound() -> None:
    """Seed 000 8.1 and table 3: no current descriptor has native_sound, at any depth."""
    native = [
        (name, mode, depth)
        for name in SHIPPED
        for mode in ProtectionMode
        for depth in AdapterDepth
        if judge(name, mode, depth).label is Label.native_sound
    ]
    assert native == []


def test_the_sound_rows_are_exactly_the_seed_positives() -> None:
    """Seed 000 6-8: the only positives are the adapter rows of TRT rc14 and SGLang and the
    patched vLLM backend_patch witnesses; every other row of every descriptor is not sound."""
    expected = {(name, mode, depth) for name, mode, depth, _ in positive_rows()}
    sound = {
        (name, mode, depth)
        for name in SHIPPED
        for mode in ProtectionMode
        for depth in AdapterDepth
        if judge(name, mode, depth).label.is_sound
    }
    assert sound == expected


@pytest.mark.parametrize(
    ("name", "mode", "depth", "subtype"),
    [pytest.param(*row, id=f"{row[0]}-{row[1]}-{row[2]}") for row in positive_rows()],
)
def test_positive_rows_have_the_seed_subtype(
    name: str, mode: ProtectionMode, depth: AdapterDepth, subtype: LabelSubtype
) -> None:
    """Seed 000 table 3 and 8.1: adapter-observational, adapter-policy under controlled pressure,
    or backend-patch witness, never native."""
    verdict = judge(name, mode, depth)
    assert verdict.label is Label.sound_with_adapter
    assert verdict.subtype is subtype
    assert verdict.missing == [] and verdict.missing_atoms == []
    assert verdict.first_refused is not None and verdict.first_refused.label is Label.native_sound


def test_patched_vllm_positives_rest_on_the_patch_alone() -> None:
    """Seed 000 7: native vLLM supplies substrate only; every obligation of a witness row is
    supplied at backend_patch."""
    for name, mode, depth, subtype in positive_rows():
        if subtype is not LabelSubtype.backend_patch_witness:
            continue
        verdict = judge(name, mode, depth)
        assert {f.supplied_at for f in verdict.findings} == {AdapterDepth.backend_patch}, mode


@pytest.mark.parametrize(("entry", "name", "mode", "depth"), list(expectation_cases()))
def test_seed_expectation(entry: dict[str, Any], name: str, mode: str, depth: str) -> None:
    verdict = judge(name, mode, depth)
    if "label" in entry:
        assert verdict.label is Label(entry["label"]), verdict.reasons
    if "label_in" in entry:
        assert verdict.label in {Label(label) for label in entry["label_in"]}, verdict.reasons
    if "decided_by" in entry:
        assert verdict.decided_by is LoweringRule(entry["decided_by"]), verdict.reasons
    if "missing_includes" in entry:
        assert {Obligation(o) for o in entry["missing_includes"]} <= set(verdict.missing)
    if "missing_exactly" in entry:
        assert set(verdict.missing) == {Obligation(o) for o in entry["missing_exactly"]}
        assert verdict.missing_atoms == []


def _items(descriptor: Descriptor) -> Iterator[tuple[str, Any]]:
    for item in descriptor.native:
        yield "native", item
    for adapter in descriptor.adapters:
        for item in adapter.evidence:
            yield adapter.name, item
    for observation in descriptor.observations:
        yield "observations", observation


@pytest.mark.parametrize("name", SHIPPED)
def test_every_anchor_counts_or_is_deliberately_unanchored(name: str) -> None:
    """Seed 000 4 (anchored(e)): every listed anchor must count; the only anchorless items are
    the deliberate `unknown` ones listed in the data file, and they claim nothing."""
    deliberate = {
        (entry["location"], entry["obligation"])
        for entry in EXPECTED["deliberately_unanchored"]
        if entry["descriptor"] == name
    }
    unanchored = set()
    for location, item in _items(shipped(name)):
        if item.anchor is None:
            key = (location, str(getattr(item, "obligation", getattr(item, "atom", ""))))
            unanchored.add(key)
            assert item.status is EvidenceStatus.unknown, key
        else:
            assert item.anchor.problems() == [], (location, item)
    assert unanchored == deliberate


def test_every_listed_deliberately_unanchored_item_names_a_shipped_file() -> None:
    assert {entry["descriptor"] for entry in EXPECTED["deliberately_unanchored"]} <= set(SHIPPED)


def test_deliberately_negative_rows_are_refused_for_their_reason() -> None:
    """A refused row names what it lacks: the rejected TRT row names the active no-evict
    primitive (seed 000 6.1), the Dynamo row the routing obligations (seed 000 6.3)."""
    trt = judge("tensorrt_llm_1_3_0rc14_container.yaml", "hard_protected", "telemetry_join")
    assert "active_no_evict" in trt.reasons[0]
    assert trt.first_refused is not None and trt.first_refused.rule is LoweringRule.forbidden_lowering
    dynamo = judge("dynamo_kv_router_docs.yaml", "routed_reuse", "routing_hook")
    assert "kv_aware_routing" in dynamo.reasons[0]
