"""Differential search: Z3 looks for descriptors on which the model and `kvclaims.spec.lower`
disagree.

Z3 cannot run Python, so the search is target-driven: each *target* is a set of constraints on
the symbolic descriptor (a label at a mode and depth; an obligation whose only candidate looks
good at one slot, on either side of the counting boundary). For each target Z3 finds a
descriptor, the descriptor is decoded, judged by the Python lowering, and the two verdicts
(label, subtype, deciding rule, missing obligations and atoms) are compared. The targets sit on
the decision boundaries of the judgment, where a divergent rule shows first.

The bound is `Layout.regular(bound)`. Zero disagreements means the two agree on every target
descriptor, not on every descriptor of the bound; the proofs and the concrete check of every
shipped row complement it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import z3

from kvclaims.solver.facts import Facts
from kvclaims.solver.lowering_model import ConcreteVerdict, SymbolicVerdict, judge
from kvclaims.solver.lowering_proofs import python_verdict, verdict_json
from kvclaims.solver.symbolic import (
    DEPTHS,
    LABELS,
    MODES,
    NO_INFERENCE,
    Layout,
    SymbolicDescriptor,
    obligation_of,
)
from kvclaims.solver.z3env import DEFAULT_SEED, Job, any_of, decided
from kvclaims.spec.vocabulary import EvidenceStatus, Obligation

PythonJudge = Callable[[dict[str, Any]], ConcreteVerdict]


@dataclass(frozen=True)
class Disagreement:
    """A descriptor the two judgments answer differently: a bug in one of them."""

    target: str
    descriptor: dict[str, Any]
    model: ConcreteVerdict
    python: ConcreteVerdict

    def summary(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "model": verdict_json(self.model),
            "python": verdict_json(self.python),
            "descriptor": self.descriptor,
        }


@dataclass
class DifferentialReport:
    targets: int = 0
    unsatisfiable_targets: int = 0
    distinct_descriptors: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    name: str
    constraints: list[z3.BoolRef]


def targets(d: SymbolicDescriptor, v: SymbolicVerdict, facts: Facts) -> Iterator[Target]:
    """The decision-boundary targets, in a fixed order."""
    for mode_index, mode in enumerate(MODES):
        for label_index, label in enumerate(LABELS):
            yield Target(f"{mode} is {label}", [d.mode == mode_index, v.label == label_index])
    for depth_index, depth in enumerate(DEPTHS):
        for label_index, label in enumerate(LABELS):
            yield Target(f"depth {depth} is {label}", [d.depth == depth_index, v.label == label_index])
    yield from _sole_candidate_targets(d, v, facts)


def _sole_candidate_targets(d: SymbolicDescriptor, v: SymbolicVerdict, facts: Facts) -> Iterator[Target]:
    """For each (obligation, slot): the row's mode needs the obligation and makes no inference,
    every other obligation of its bundle is supplied, and the obligation's only present items
    sit at that slot. Then
    (a) one item there passes every rule except, possibly, what the slot may supply; (b) one
    item is supported and anchored yet the row is not sound. Both sit on the counting boundary
    of that one item."""
    layout, ctx = d.layout, d.job.ctx
    supported = list(EvidenceStatus).index(EvidenceStatus.supported)
    for obligation in Obligation:
        modes = [i for i, m in enumerate(MODES) if obligation in facts.mode_bundles[m]]
        if not modes:
            continue
        sites = [i for i, s in enumerate(layout.evidence) if obligation_of(s.name, facts) is obligation]
        for depth_index, slot in enumerate(DEPTHS):
            here = [i for i in sites if layout.slot(layout.evidence[i]) is slot]
            common = [
                any_of(ctx, [d.mode == m for m in modes]),
                *[z3.Not(d.evidence[i].present) for i in sites if i not in here],
                *[z3.Implies(v.in_bundle[o], v.supplied[o]) for o in Obligation if o is not obligation],
                d.depth >= depth_index,
                *[var == NO_INFERENCE for var in d.inferred.values()],
            ]
            passes = any_of(ctx, [v.admissible[i] for i in here])
            looks_good = any_of(
                ctx,
                [
                    z3.And(
                        d.evidence[i].present, d.evidence[i].status == supported, d.evidence[i].defect == 0
                    )
                    for i in here
                ],
            )
            yield Target(f"{obligation} only at {slot}, admissible", [*common, passes])
            yield Target(
                f"{obligation} only at {slot}, looks good, not sound",
                [*common, looks_good, z3.Not(v.sound())],
            )


def search(
    facts: Facts | None = None,
    python_judge: PythonJudge = python_verdict,
    *,
    bound: int = 2,
    seed: int = DEFAULT_SEED,
) -> DifferentialReport:
    """Run every target once; collect each descriptor the two judgments disagree on."""
    facts = facts or Facts.reference()
    job = Job(seed=seed)
    d = SymbolicDescriptor(job, Layout.regular(bound), "d")
    v = judge(d, facts)
    solver = job.solver()
    solver.add(d.well_formed())
    report = DifferentialReport()
    seen: set[str] = set()
    for target in targets(d, v, facts):
        report.targets += 1
        if not decided(solver.check(*target.constraints), solver):
            report.unsatisfiable_targets += 1
            continue
        model = solver.model()
        document = d.decode(model)
        digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        modelled, python = v.read(model), python_judge(document)
        if modelled != python:
            report.disagreements.append(Disagreement(target.name, document, modelled, python))
    report.distinct_descriptors = len(seen)
    return report


def concrete_agreement(
    loaded: list[tuple[Any, Any]], facts: Facts | None = None
) -> Iterator[tuple[str, Any, ConcreteVerdict, ConcreteVerdict]]:
    """For every row of every loaded descriptor: (file, row, model verdict, Python verdict),
    with the model instantiated on the descriptor's exact layout (no bound)."""
    from kvclaims.spec.lowering import lower_row

    facts = facts or Facts.reference()
    for path, descriptor in loaded:
        job = Job()
        d = SymbolicDescriptor(job, Layout.of(descriptor), "d")
        v = judge(d, facts)
        solver = job.solver()
        solver.add(d.well_formed())
        for row in descriptor.rows():
            if not decided(solver.check(d.fix(descriptor, row)), solver):
                raise AssertionError(f"{path}: the model has no assignment for row {row}")
            yield str(path), row, v.read(solver.model()), ConcreteVerdict.of(lower_row(descriptor, row))
