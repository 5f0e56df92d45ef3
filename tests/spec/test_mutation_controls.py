"""Seed 000 section 8.2: descriptor/evidence mutation controls fail closed, 16 kinds.

Every kind in `data/mutation_controls.yaml` is a small transformation of a loaded descriptor
(pydantic `model_copy`, re-validated as a `descriptor: 1` document), applied to every shipped
positive row it applies to. A mutated row must lose its sound label for the reason the mutation
targets; the same row unmutated must stay sound, so a checker that refuses everything fails too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvclaims.spec.descriptor import Descriptor, load_descriptor
from kvclaims.spec.evidence import Anchor, EvidenceItem
from kvclaims.spec.lowering import lower
from kvclaims.spec.tables import MODE_BUNDLES, MODE_REQUIRED_ATOMS
from kvclaims.spec.verdict import LoweringRule, Verdict
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    AnchorKind,
    ApproximationSignal,
    EvidenceScope,
    EvidenceStatus,
    Label,
    LabelSubtype,
    Obligation,
    ObservationAtom,
    ProtectionMode,
    TelemetryJoinPrecondition,
)

DATA = Path(__file__).parent / "data"
DESCRIPTORS = Path(__file__).resolve().parents[2] / "descriptors"
KINDS: list[dict[str, Any]] = yaml.safe_load((DATA / "mutation_controls.yaml").read_text())["kinds"]
SEED_POSITIVES = yaml.safe_load((DATA / "seed_expectations.yaml").read_text())["positive_rows"]

NATIVE = AdapterDepth.none


@dataclass(frozen=True)
class Row:
    """One shipped positive row (seed_expectations.yaml) at one depth where it is sound."""

    descriptor_file: str
    mode: ProtectionMode
    depth: AdapterDepth
    subtype: LabelSubtype

    @property
    def descriptor(self) -> Descriptor:
        return _load(self.descriptor_file)

    def verdict(self) -> Verdict:
        return lower(self.descriptor, self.mode, self.depth)

    def __str__(self) -> str:
        return f"{self.descriptor_file}:{self.mode}@{self.depth}"


_CACHE: dict[str, Descriptor] = {}


def _load(name: str) -> Descriptor:
    if name not in _CACHE:
        _CACHE[name] = load_descriptor(DESCRIPTORS / name)
    return _CACHE[name]


def positive_rows() -> list[Row]:
    return [
        Row(entry["descriptor"], ProtectionMode(entry["mode"]), depth, LabelSubtype(entry["subtype"]))
        for entry in SEED_POSITIVES
        for depth in AdapterDepth
        if depth >= AdapterDepth(entry["from_depth"])
    ]


# --- small transformations of the model ---------------------------------------------------------

Mutation = tuple[Descriptor, dict[Obligation, ApproximationSignal], AdapterDepth]
ItemFn = Callable[[EvidenceItem], EvidenceItem]


def _supported(obligation: Obligation) -> Callable[[EvidenceItem], bool]:
    return lambda item: item.obligation is obligation and item.status is EvidenceStatus.supported


def map_evidence(
    descriptor: Descriptor,
    depth: AdapterDepth,
    select: Callable[[EvidenceItem], bool],
    change: ItemFn | None,
    *,
    native: bool = True,
) -> Descriptor:
    """Apply `change` to (or, with None, drop) the selected items admitted at `depth`."""

    def edit(items: list[EvidenceItem]) -> list[EvidenceItem]:
        if change is None:
            return [item for item in items if not select(item)]
        return [change(item) if select(item) else item for item in items]

    adapters = [
        adapter.model_copy(update={"evidence": edit(adapter.evidence)}) if adapter.depth <= depth else adapter
        for adapter in descriptor.adapters
    ]
    return descriptor.model_copy(
        update={"native": edit(descriptor.native) if native else descriptor.native, "adapters": adapters}
    )


def revalidated(descriptor: Descriptor) -> Descriptor:
    """A mutation must still be a valid `descriptor: 1` document, as if written in YAML, and is
    loaded like one: digests are verified against the files next to the shipped descriptors
    (otherwise every sha256-anchored item would fail closed for that reason alone, and the
    mutation under test would prove nothing)."""
    copy = Descriptor.model_validate(descriptor.model_dump())
    for anchor in copy.anchors():
        anchor.verify(DESCRIPTORS)
    return copy


def delete_anchor(row: Row, target: Obligation, params: dict[str, Any]) -> Mutation:
    changed = map_evidence(
        row.descriptor, row.depth, _supported(target), lambda i: i.model_copy(update={"anchor": None})
    )
    return changed, {}, row.depth


def empty_anchor(row: Row, target: Obligation, params: dict[str, Any]) -> Mutation:
    def empty(item: EvidenceItem) -> EvidenceItem:
        assert item.anchor is not None
        blank = item.anchor.model_copy(update={"path": "", "url": "", "note": ""})
        return item.model_copy(update={"anchor": blank})

    return map_evidence(row.descriptor, row.depth, _supported(target), empty), {}, row.depth


def set_status(row: Row, target: Obligation, params: dict[str, Any]) -> Mutation:
    status = EvidenceStatus(params["status"])
    changed = map_evidence(
        row.descriptor, row.depth, _supported(target), lambda i: i.model_copy(update={"status": status})
    )
    return changed, {}, row.depth


def set_adapter_scope(row: Row, target: Obligation, params: dict[str, Any]) -> Mutation:
    scope = EvidenceScope(params["scope"])
    changed = map_evidence(
        row.descriptor,
        row.depth,
        _supported(target),
        lambda i: i.model_copy(update={"scope": scope}),
        native=False,
    )
    return changed, {}, row.depth


def unanchor_atom(row: Row, target: ObservationAtom, params: dict[str, Any]) -> Mutation:
    observations = [
        o.model_copy(update={"anchor": None}) if o.atom is target else o for o in row.descriptor.observations
    ]
    return row.descriptor.model_copy(update={"observations": observations}), {}, row.depth


def without_precondition(descriptor: Descriptor, dropped: TelemetryJoinPrecondition) -> Descriptor:
    """Every telemetry-join adapter loses one precondition (absent means false)."""
    adapters = [
        a.model_copy(update={"preconditions": {p: v for p, v in a.preconditions.items() if p is not dropped}})
        if a.depth is AdapterDepth.telemetry_join
        else a
        for a in descriptor.adapters
    ]
    return descriptor.model_copy(update={"adapters": adapters})


def drop_precondition(row: Row, target: TelemetryJoinPrecondition, params: dict[str, Any]) -> Mutation:
    return without_precondition(row.descriptor, target), {}, row.depth


def adapters_as_routing_hook(row: Row, target: None, params: dict[str, Any]) -> Mutation:
    adapters = [
        a.model_copy(update={"depth": AdapterDepth.routing_hook}) if a.depth <= row.depth else a
        for a in row.descriptor.adapters
    ]
    depth = max(row.depth, AdapterDepth.routing_hook)
    return row.descriptor.model_copy(update={"adapters": adapters}), {}, depth


def _repointed(row: Row, params: dict[str, Any]) -> Descriptor:
    anchor = Anchor.model_validate(params["anchor"])
    return map_evidence(
        row.descriptor,
        row.depth,
        _supported(Obligation(params["obligation"])),
        lambda i: i.model_copy(update={"anchor": anchor}),
        native=False,
    )


def repoint_anchor(row: Row, target: None, params: dict[str, Any]) -> Mutation:
    return _repointed(row, params), {}, row.depth


def repoint_and_infer(row: Row, target: None, params: dict[str, Any]) -> Mutation:
    inferred = {Obligation(params["obligation"]): ApproximationSignal(params["signal"])}
    return _repointed(row, params), inferred, row.depth


def replace_with_inference(row: Row, target: None, params: dict[str, Any]) -> Mutation:
    obligation = Obligation(params["obligation"])
    changed = map_evidence(row.descriptor, row.depth, _supported(obligation), None, native=False)
    return changed, {obligation: ApproximationSignal(params["signal"])}, row.depth


def storage_only(row: Row, target: None, params: dict[str, Any]) -> Mutation:
    assert ApproximationSignal(params["signal"]) in row.descriptor.approximation_signals
    obligations = {Obligation(o) for o in params["obligations"]}
    changed = map_evidence(
        row.descriptor,
        row.depth,
        lambda i: i.obligation in obligations and i.status is EvidenceStatus.supported,
        None,
        native=False,
    )
    return changed, {}, row.depth


def post_hoc_naming(row: Row, target: None, params: dict[str, Any]) -> Mutation:
    def no_claim_scope(item: EvidenceItem) -> EvidenceItem:
        assert item.anchor is not None
        if item.anchor.kind is not AnchorKind.trace:
            return item
        return item.model_copy(update={"anchor": item.anchor.model_copy(update={"claim_scope": ""})})

    unscoped = map_evidence(row.descriptor, row.depth, _supported(Obligation.claim_identity), no_claim_scope)
    return without_precondition(unscoped, TelemetryJoinPrecondition.external_claim_registry), {}, row.depth


TRANSFORMS: dict[str, Callable[[Row, Any, dict[str, Any]], Mutation]] = {
    fn.__name__: fn
    for fn in (
        delete_anchor,
        empty_anchor,
        set_status,
        set_adapter_scope,
        unanchor_atom,
        drop_precondition,
        adapters_as_routing_hook,
        repoint_anchor,
        repoint_and_infer,
        replace_with_inference,
        storage_only,
        post_hoc_naming,
    )
}


# --- which parts of a row a kind mutates ----------------------------------------------------------


def _adapter_supplied(row: Row) -> dict[Obligation, AdapterDepth]:
    return {
        f.obligation: f.supplied_at
        for f in row.verdict().findings
        if f.supplied_at is not None and f.supplied_at is not NATIVE
    }


def targets(kind: dict[str, Any], row: Row) -> list[Any]:
    """The cases one row yields for one kind; empty when the kind does not apply to the row."""
    per = kind["per"]
    params = kind.get("params", {})
    by_adapter = _adapter_supplied(row)
    if per == "obligation":
        return [o for o in Obligation if o in MODE_BUNDLES[row.mode]]
    if per == "adapter_obligation":
        return [o for o in Obligation if o in by_adapter]
    if per == "atom":
        return [a for a in ObservationAtom if a in MODE_REQUIRED_ATOMS[row.mode]]
    if per == "precondition":
        return list(TelemetryJoinPrecondition) if AdapterDepth.telemetry_join in by_adapter.values() else []
    named = params.get("obligations", [params["obligation"]] if "obligation" in params else [])
    needed = {Obligation(o) for o in kind.get("requires", named)}
    return [None] if by_adapter and needed <= set(by_adapter) else []


def cases() -> Iterator[Any]:
    for kind in KINDS:
        for row in positive_rows():
            if targets(kind, row):
                yield pytest.param(kind, row, id=f"{kind['id']}-{row}")


# --- the checks ---------------------------------------------------------------------------------


def _rules(verdict: Verdict, obligation: Obligation | None = None) -> set[LoweringRule]:
    return {
        d.rule
        for f in verdict.findings
        if obligation is None or f.obligation is obligation
        for d in f.discounted
    }


def failures_of(kind: dict[str, Any], row: Row, target: Any, verdict: Verdict) -> list[str]:
    """Why the mutated verdict is not the fail-closed answer the kind should trigger."""
    expect = kind["expect"]
    found = []
    if verdict.label.is_sound:
        found.append(f"still {verdict.label}")
    if "label" in expect and verdict.label is not Label(expect["label"]):
        found.append(f"label {verdict.label}, expected {expect['label']}")
    if "decided_by" in expect and verdict.decided_by is not LoweringRule(expect["decided_by"]):
        found.append(f"decided by {verdict.decided_by}, expected {expect['decided_by']}")
    for obligation in expect.get("missing_includes", []):
        if Obligation(obligation) not in verdict.missing:
            found.append(f"{obligation} not missing")
    rule = expect.get("discount_rule")
    if isinstance(rule, dict):
        wanted = {LoweringRule(rule[str(depth)]) for depth in _adapter_supplied(row).values()}
        if not wanted <= _rules(verdict):
            found.append(f"discount rules {_rules(verdict)} lack {wanted}")
    elif rule is not None:
        at = target if isinstance(target, Obligation) else None
        if at is not None and at not in verdict.missing:
            found.append(f"{at} still supplied")
        if LoweringRule(rule) not in _rules(verdict, at):
            found.append(f"{rule} did not discount {at or 'any evidence'}: {_rules(verdict, at)}")
    if "atom_rule" in expect:
        if target not in verdict.missing_atoms:
            found.append(f"atom {target} not missing")
        if not any(str(target) in r and f"({expect['atom_rule']})" in r for r in verdict.reasons):
            found.append(f"no {expect['atom_rule']} reason for {target}")
    return found


def test_sixteen_distinct_kinds_from_the_seed_list() -> None:
    assert len(KINDS) == 16
    assert len({k["id"] for k in KINDS}) == 16
    assert len({k["seed_wording"] for k in KINDS}) == 16
    assert {k["transform"] for k in KINDS} <= set(TRANSFORMS)


def test_every_kind_applies_to_some_positive_row() -> None:
    """No vacuous control: each kind mutates at least one shipped positive row."""
    unused = [k["id"] for k in KINDS if not any(targets(k, row) for row in positive_rows())]
    assert unused == []


@pytest.mark.parametrize("row", positive_rows(), ids=str)
def test_unmutated_positive_row_stays_sound(row: Row) -> None:
    verdict = row.verdict()
    assert verdict.label is Label.sound_with_adapter, verdict.reasons
    assert verdict.subtype is row.subtype


@pytest.mark.parametrize(("kind", "row"), list(cases()))
def test_mutated_positive_row_fails_closed(kind: dict[str, Any], row: Row) -> None:
    transform = TRANSFORMS[kind["transform"]]
    problems = {}
    for target in targets(kind, row):
        descriptor, inferred, depth = transform(row, target, kind.get("params", {}))
        verdict = lower(revalidated(descriptor), row.mode, depth, inferred_from=inferred)
        found = failures_of(kind, row, target, verdict)
        if found:
            problems[str(target)] = found
    assert problems == {}
