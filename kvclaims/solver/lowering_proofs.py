"""Proof obligations about the lowering judgment, over the symbolic descriptor.

Every obligation quantifies over all descriptors of the bound `Layout.regular(LAYOUT_BOUND)`
(one adapter per depth, two evidence sites per obligation per slot, two observation sites per
atom), every mode, every depth and every `inferred_from`, unless its statement narrows it.
Relational properties use two symbolic descriptors in one context. Every witness is decoded
into a real descriptor and judged again by `kvclaims.spec.lower`; a witness on which the Python
judgment disagrees fails the obligation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import z3

from kvclaims.solver.facts import Facts
from kvclaims.solver.lowering_model import ConcreteVerdict, SymbolicVerdict, judge
from kvclaims.solver.proofs import Method, Outcome, ProofObligation
from kvclaims.solver.symbolic import (
    LABELS,
    MODES,
    NO_INFERENCE,
    RULES,
    SCOPES,
    SUBTYPES,
    EvidenceSite,
    Layout,
    SymbolicDescriptor,
    obligation_of,
)
from kvclaims.solver.terms import Ast, Terms
from kvclaims.solver.z3env import Job, all_of, any_of, decided, sparse_model
from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.lowering import lower_row
from kvclaims.spec.verdict import FAIL_CLOSED_RULES, LoweringRule
from kvclaims.spec.vocabulary import AdapterDepth, EvidenceStatus, Label, Obligation, ProtectionMode

LAYOUT_BOUND = 2
"""Evidence sites per (obligation, slot) and observation sites per atom in every proof."""

BOUND_TEXT = (
    "descriptors with one adapter per adapter depth, at most 2 evidence items per (obligation, "
    "native or adapter) and at most 2 observations per atom; every mode, depth and inferred_from"
)

DECIDING_RULES: tuple[LoweringRule, ...] = tuple(
    r for r in RULES if r not in FAIL_CLOSED_RULES or r is LoweringRule.approximation_signals_never_satisfy
)
"""Rules that decide a label: the label rules, plus seed rule 1, which also names `approximate`."""


# --- helpers ---------------------------------------------------------------------------------


def _symbolic(job: Job, facts: Facts, prefix: str = "d", layout: Layout | None = None):
    d = SymbolicDescriptor(job, layout or Layout.regular(LAYOUT_BOUND), prefix)
    return d, judge(d, facts)


def python_verdict(document: dict[str, Any]) -> ConcreteVerdict:
    """What `kvclaims.spec.lower` says of the one row of a decoded document."""
    descriptor = Descriptor.model_validate(document)
    return ConcreteVerdict.of(lower_row(descriptor, descriptor.rows()[0]))


def verdict_json(verdict: ConcreteVerdict) -> dict[str, Any]:
    return {
        "label": verdict.label.value,
        "subtype": verdict.subtype.value if verdict.subtype else None,
        "decided_by": verdict.decided_by.value,
        "missing": sorted(o.value for o in verdict.missing),
        "missing_atoms": sorted(a.value for a in verdict.missing_atoms),
    }


def _witness(
    solver: z3.Solver, d: SymbolicDescriptor, v: SymbolicVerdict, target: Sequence[z3.BoolRef], name: str
) -> dict[str, Any]:
    """Find a descriptor satisfying `target`, decode it and judge it again in Python."""
    model = sparse_model(solver, list(target), d.sparse_literals())
    if model is None:
        return {"target": name, "found": False}
    document = d.decode(model)
    modelled, python = v.read(model), python_verdict(document)
    return {
        "target": name,
        "found": True,
        "model_verdict": verdict_json(modelled),
        "python_agrees": modelled == python,
        "descriptor": document,
    }


def _found_all(witnesses: list[dict[str, Any]]) -> bool:
    return all(w["found"] and w["python_agrees"] for w in witnesses)


def _counterexample(
    model: z3.ModelRef, *pairs: tuple[str, SymbolicDescriptor, SymbolicVerdict]
) -> dict[str, Any]:
    found = {}
    for name, d, v in pairs:
        document = d.decode(model)
        found[name] = {
            "model_verdict": verdict_json(v.read(model)),
            "python_verdict": verdict_json(python_verdict(document)),
            "descriptor": document,
        }
    return found


def _prove(
    job: Job,
    claim: z3.BoolRef,
    assumptions: Sequence[z3.BoolRef],
    pairs: Sequence[tuple[str, SymbolicDescriptor, SymbolicVerdict]],
    detail: dict[str, Any],
    *,
    finite_domain: bool = False,
) -> Outcome:
    """`claim` holds under `assumptions`, or a decoded counterexample (`finite_domain`: decided
    by `Job.finite_domain_solver`, for a claim where that is much faster)."""
    solver = job.finite_domain_solver() if finite_domain else job.solver()
    solver.add(*assumptions)
    solver.add(z3.Not(claim))
    if decided(solver.check(), solver):
        return Outcome(False, detail | {"counterexample": _counterexample(solver.model(), *pairs)})
    return Outcome(True, detail | {"bound": BOUND_TEXT, "negation": "unsat"})


def _same_row(a: SymbolicDescriptor, b: SymbolicDescriptor) -> list[z3.BoolRef]:
    return [a.mode == b.mode, a.depth == b.depth] + [a.inferred[o] == b.inferred[o] for o in a.inferred]


def _same_descriptor_signals(a: SymbolicDescriptor, b: SymbolicDescriptor) -> list[z3.BoolRef]:
    return [a.signals[s] == b.signals[s] for s in a.signals] + [
        a.forbidden[k] == b.forbidden[k] for k in a.forbidden
    ]


def _same_evidence(
    a: SymbolicDescriptor, b: SymbolicDescriptor, sites: Callable[[int], bool] = lambda i: True
):
    terms = []
    for i, (x, y) in enumerate(zip(a.evidence, b.evidence, strict=True)):
        if sites(i):
            terms += [x.present == y.present, x.status == y.status, x.scope == y.scope, x.defect == y.defect]
    for x, y in zip(a.observations, b.observations, strict=True):
        terms += [x.present == y.present, x.scope == y.scope, x.defect == y.defect]
    for pa, pb in zip(a.preconditions, b.preconditions, strict=True):
        terms += [pa[p] == pb[p] for p in pa]
    return terms


def _same_verdict(a: SymbolicVerdict, b: SymbolicVerdict) -> z3.BoolRef:
    return z3.And(
        a.label == b.label,
        a.subtype == b.subtype,
        a.rule == b.rule,
        *[a.missing[o] == b.missing[o] for o in a.missing],
        *[a.missing_atoms[x] == b.missing_atoms[x] for x in a.missing_atoms],
    )


def _mode(d: SymbolicDescriptor, mode: ProtectionMode) -> z3.BoolRef:
    return d.mode == MODES.index(mode)


# --- vacuity: every mode, label, subtype and deciding rule is reachable -----------------------


def _every_mode_reachable(job: Job, facts: Facts) -> Outcome:
    d, v = _symbolic(job, facts)
    solver = job.solver()
    solver.add(d.well_formed())
    no_native = all_of(
        job.ctx,
        [
            z3.Not(ev.present)
            for site, ev in zip(d.layout.evidence, d.evidence, strict=True)
            if site.adapter is None
        ],
    )
    witnesses = []
    for mode in MODES:
        witnesses.append(
            _witness(solver, d, v, [_mode(d, mode), v.label_is(Label.native_sound)], f"{mode} native_sound")
        )
        witnesses.append(
            _witness(
                solver,
                d,
                v,
                [_mode(d, mode), v.label_is(Label.sound_with_adapter), no_native],
                f"{mode} sound_with_adapter without native evidence",
            )
        )
    return Outcome(_found_all(witnesses), {"bound": BOUND_TEXT, "witnesses": witnesses})


def _every_label_reachable(job: Job, facts: Facts) -> Outcome:
    d, v = _symbolic(job, facts)
    solver = job.solver()
    solver.add(d.well_formed())
    witnesses = [_witness(solver, d, v, [v.label_is(label)], label.value) for label in LABELS]
    return Outcome(_found_all(witnesses), {"bound": BOUND_TEXT, "witnesses": witnesses})


def _every_subtype_and_rule_reachable(job: Job, facts: Facts) -> Outcome:
    d, v = _symbolic(job, facts)
    solver = job.solver()
    solver.add(d.well_formed())
    witnesses = [
        _witness(solver, d, v, [v.subtype == SUBTYPES.index(s)], f"subtype {s}") for s in SUBTYPES
    ] + [_witness(solver, d, v, [v.rule == RULES.index(r)], f"decided_by {r}") for r in DECIDING_RULES]
    discount_only = [r for r in RULES if r not in DECIDING_RULES]
    never = any_of(job.ctx, [v.rule == RULES.index(r) for r in discount_only])
    decides_never = not decided(solver.check(never), solver)
    return Outcome(
        _found_all(witnesses) and decides_never,
        {
            "bound": BOUND_TEXT,
            "witnesses": witnesses,
            "discount_only_rules": [r.value for r in discount_only],
            "discount_only_rules_never_decide": decides_never,
        },
    )


# --- fail-closed laws --------------------------------------------------------------------------


def _signals_alone_never_sound(job: Job, facts: Facts) -> Outcome:
    d, v = _symbolic(job, facts)
    nothing_observed = [z3.Not(ev.present) for ev in d.evidence] + [
        z3.Not(ob.present) for ob in d.observations
    ]
    return _prove(job, z3.Not(v.sound()), [d.well_formed(), *nothing_observed], [("descriptor", d, v)], {})


def _signals_never_decide_soundness(job: Job, facts: Facts) -> Outcome:
    a, va = _symbolic(job, facts, "a")
    b, vb = _symbolic(job, facts, "b")
    no_inference = [x == NO_INFERENCE for x in a.inferred.values()]
    assumptions = [
        a.well_formed(),
        b.well_formed(),
        *_same_row(a, b),
        *_same_evidence(a, b),
        *no_inference,
    ]
    return _prove(job, va.sound() == vb.sound(), assumptions, [("a", a, va), ("b", b, vb)], {})


def _telemetry_cannot_create_enforcement(job: Job, facts: Facts) -> Outcome:
    a, va = _symbolic(job, facts, "a")
    b, vb = _symbolic(job, facts, "b")
    layout = a.layout

    def telemetry_enforcement(i: int) -> bool:
        site = layout.evidence[i]
        return (
            layout.slot(site) is AdapterDepth.telemetry_join
            and obligation_of(site.name, facts) in facts.enforcement_obligations
        )

    removed = [z3.Not(b.evidence[i].present) for i in range(len(layout.evidence)) if telemetry_enforcement(i)]
    assumptions = [
        a.well_formed(),
        b.well_formed(),
        *_same_row(a, b),
        *_same_descriptor_signals(a, b),
        *_same_evidence(a, b, lambda i: not telemetry_enforcement(i)),
        *removed,
    ]
    never_counts = z3.Not(
        any_of(job.ctx, [va.counting[i] for i in range(len(layout.evidence)) if telemetry_enforcement(i)])
    )
    claim = z3.And(never_counts, _same_verdict(va, vb))
    return _prove(job, claim, assumptions, [("with_telemetry", a, va), ("without_telemetry", b, vb)], {})


def _weakening(facts: Facts, a: SymbolicDescriptor, b: SymbolicDescriptor) -> list[z3.BoolRef]:
    """`b` is `a` with evidence removed or weakened (see the obligation's statement). Built by
    `Terms`: a thousand implications over every site pair, most of this obligation's build."""
    t = Terms(a.job.ctx)
    try:
        return [t.bool_ref(term) for term in _weakening_terms(t, facts, a, b)]
    finally:
        t.release()


def _weakening_terms(t: Terms, facts: Facts, a: SymbolicDescriptor, b: SymbolicDescriptor) -> list[Ast]:
    supported = list(EvidenceStatus).index(EvidenceStatus.supported)
    ok = 0

    def strength(var: z3.ArithRef) -> Ast:
        term = t.num(0)
        for index, scope in enumerate(SCOPES):
            term = t.ite(t.eq(var.as_ast(), index), t.num(facts.scope_strength(scope)), term)
        return term

    def kept_or_not(y: z3.ArithRef, x: z3.ArithRef, strong: int) -> Ast:
        """`y` equals `x`, or `y` is not the strong value."""
        return t.or_([t.eq(y.as_ast(), x.as_ast()), t.ne(y.as_ast(), strong)])

    terms = []
    for x, y in zip(a.evidence, b.evidence, strict=True):
        xp, yp = x.present.as_ast(), y.present.as_ast()
        terms.append(t.implies(t.and_([yp, t.not_(xp)]), t.ne(y.status.as_ast(), supported)))
        terms.append(t.implies(t.and_([xp, t.not_(yp)]), t.eq(x.status.as_ast(), supported)))
        status, defect = kept_or_not(y.status, x.status, supported), kept_or_not(y.defect, x.defect, ok)
        weaker = t.and_([status, defect, t.le(strength(y.scope), strength(x.scope))])
        terms.append(t.implies(t.and_([xp, yp]), weaker))
    for x, y in zip(a.observations, b.observations, strict=True):
        yp = y.present.as_ast()
        terms.append(t.implies(yp, x.present.as_ast()))
        defect = kept_or_not(y.defect, x.defect, ok)
        terms.append(t.implies(yp, t.and_([defect, t.le(strength(y.scope), strength(x.scope))])))
    for pa, pb in zip(a.preconditions, b.preconditions, strict=True):
        terms += [t.implies(pb[p].as_ast(), pa[p].as_ast()) for p in pa]
    return terms


def _fail_closed_monotonicity(job: Job, facts: Facts) -> Outcome:
    a, va = _symbolic(job, facts, "a")
    b, vb = _symbolic(job, facts, "b")
    assumptions = [
        a.well_formed(),
        b.well_formed(),
        *_same_row(a, b),
        *_same_descriptor_signals(a, b),
        *_weakening(facts, a, b),
    ]
    claim = z3.And(va.invalid == vb.invalid, z3.Implies(z3.Not(va.invalid), vb.label <= va.label))
    # bit-blasted: a third of the SMT core's time on this two-descriptor claim
    return _prove(job, claim, assumptions, [("original", a, va), ("weakened", b, vb)], {}, finite_domain=True)


def _deeper_depth_never_downgrades(job: Job, facts: Facts) -> Outcome:
    a, va = _symbolic(job, facts, "a")
    b, vb = _symbolic(job, facts, "b")
    assumptions = [
        a.well_formed(),
        b.well_formed(),
        a.mode == b.mode,
        b.depth >= a.depth,
        *[a.inferred[o] == b.inferred[o] for o in a.inferred],
        *_same_descriptor_signals(a, b),
        *_same_evidence(a, b),
    ]
    return _prove(job, vb.label >= va.label, assumptions, [("shallow", a, va), ("deep", b, vb)], {})


def _side_absent(
    d: SymbolicDescriptor, facts: Facts, obligation: Obligation, side: AdapterDepth
) -> z3.BoolRef:
    """No item for `obligation` is listed natively, at `side`, or at backend_patch."""
    allowed = {AdapterDepth.none, side, AdapterDepth.backend_patch}
    return all_of(
        d.job.ctx,
        [
            z3.Not(ev.present)
            for site, ev in zip(d.layout.evidence, d.evidence, strict=True)
            if obligation_of(site.name, facts) is obligation and d.layout.slot(site) in allowed
        ],
    )


def _hard_protected_needs_both_sides(job: Job, facts: Facts) -> Outcome:
    d, v = _symbolic(job, facts)
    scheduler_only = _side_absent(
        d, facts, Obligation.victim_exclusion_before_violation, AdapterDepth.allocator_hook
    )
    allocator_only = z3.Or(
        _side_absent(d, facts, Obligation.explicit_conflict_action, AdapterDepth.scheduler_hook),
        _side_absent(d, facts, Obligation.blocking_claim_ids, AdapterDepth.scheduler_hook),
    )
    fails_closed = z3.Or(v.label_is(Label.rejected), v.label_is(Label.invalid))
    detail: dict[str, Any] = {}
    for name, premise in (("scheduler_only", scheduler_only), ("allocator_only", allocator_only)):
        outcome = _prove(
            job,
            fails_closed,
            [d.well_formed(), _mode(d, ProtectionMode.hard_protected), premise],
            [("descriptor", d, v)],
            {},
        )
        detail[name] = outcome.detail
        if not outcome.proved:
            return Outcome(False, detail)
    return Outcome(True, detail | {"bound": BOUND_TEXT})


def _legacy_alias_equivalent(job: Job, facts: Facts) -> Outcome:
    canonical_layout = Layout.regular(LAYOUT_BOUND)
    detail: dict[str, Any] = {"aliases": {}}
    proved = True
    for alias, target in sorted(facts.legacy_obligation_aliases.items()):
        spelled = Layout(
            canonical_layout.adapters,
            tuple(
                EvidenceSite(alias if site.name == target.value else site.name, site.adapter)
                for site in canonical_layout.evidence
            ),
            canonical_layout.observations,
        )
        d, v = _symbolic(job, facts, "d", canonical_layout)
        d_alias, v_alias = _symbolic(job, facts, "d", spelled)  # same prefix: the same variables
        outcome = _prove(
            job,
            _same_verdict(v, v_alias),
            [d.well_formed()],
            [("canonical", d, v), ("alias", d_alias, v_alias)],
            {},
        )
        loader = _loader_normalises(job, d, d_alias, alias, target)
        detail["aliases"][alias] = {"target": target.value, "model": outcome.detail, "loader": loader}
        proved = proved and outcome.proved and loader["same_descriptor"]
    return Outcome(proved, detail)


def _loader_normalises(
    job: Job, d: SymbolicDescriptor, d_alias: SymbolicDescriptor, alias: str, target: Obligation
) -> dict[str, Any]:
    """Load one descriptor spelled both ways (evidence and inferred_from keys): same result."""
    solver = job.solver()
    solver.add(d.well_formed())
    uses_target = [
        ev.present
        for site, ev in zip(d.layout.evidence, d.evidence, strict=True)
        if site.name == target.value
    ]
    solver.add(any_of(job.ctx, uses_target), d.inferred[target] != NO_INFERENCE)
    if not decided(solver.check(), solver):
        return {"same_descriptor": False, "reason": "no descriptor mentions the obligation"}
    model = solver.model()
    canonical, spelled = d.decode(model), d_alias.decode(model)
    row = spelled["lowerings"][0]
    row["inferred_from"] = {(alias if k == target.value else k): s for k, s in row["inferred_from"].items()}
    same = Descriptor.model_validate(canonical) == Descriptor.model_validate(spelled)
    return {"same_descriptor": same, "spelled_in": ["evidence items", "inferred_from keys"]}


OBLIGATIONS: tuple[ProofObligation, ...] = (
    ProofObligation(
        "lowering.every_mode_reachable",
        "No mode is vacuous: for every mode there is a descriptor whose row is native_sound, and "
        "one with no native evidence at all whose row is sound_with_adapter at some depth.",
        Method.witness,
        _every_mode_reachable,
    ),
    ProofObligation(
        "lowering.every_label_reachable",
        "Every label (invalid, rejected, unknown, approximate, sound_with_adapter, native_sound) "
        "is the verdict of some descriptor row.",
        Method.witness,
        _every_label_reachable,
    ),
    ProofObligation(
        "lowering.every_subtype_and_deciding_rule_reachable",
        "Every sound_with_adapter subtype and every rule that decides a label occurs on some "
        "row, and the evidence-discount rules never decide a label.",
        Method.witness,
        _every_subtype_and_rule_reachable,
    ),
    ProofObligation(
        "lowering.approximation_signals_alone_never_sound",
        "A descriptor with approximation signals (and forbidden lowerings and inferences) but no "
        "evidence item and no observation is never sound, at any mode and depth.",
        Method.validity,
        _signals_alone_never_sound,
    ),
    ProofObligation(
        "lowering.signals_never_decide_soundness",
        "For rows without inferences, adding or removing approximation signals and the "
        "forbidden lowerings that name them never changes whether the row is sound.",
        Method.validity,
        _signals_never_decide_soundness,
    ),
    ProofObligation(
        "lowering.telemetry_cannot_create_enforcement",
        "No telemetry_join evidence item for an enforcement obligation (V X B H D E R RF) ever "
        "counts, and removing all such items never changes the verdict (label, subtype, "
        "deciding rule, missing obligations and atoms) of any row.",
        Method.validity,
        _telemetry_cannot_create_enforcement,
    ),
    ProofObligation(
        "lowering.fail_closed_monotonicity",
        "Removing or weakening evidence never upgrades a label. Weakening: remove a supported "
        "item; change a supported status to any other; add an item that is not supported; "
        "break an anchor; narrow a scope (observed > other runtime > docs or source); set a "
        "telemetry-join precondition false; remove or weaken an observation. Signals, forbidden "
        "lowerings, mode, depth and inferences stay. Then the row is invalid before iff after, "
        "and when not invalid the label rank after is at most the rank before. (Removing an "
        "item that is not supported may resolve a contradiction, so it is not a weakening.)",
        Method.validity,
        _fail_closed_monotonicity,
    ),
    ProofObligation(
        "lowering.deeper_depth_never_downgrades",
        "For the same descriptor, mode and inferences, selecting a deeper adapter depth never "
        "lowers the label rank.",
        Method.validity,
        _deeper_depth_never_downgrades,
    ),
    ProofObligation(
        "lowering.hard_protected_needs_scheduler_and_allocator",
        "Scheduler-only or allocator-only never lowers hard_protected: without victim-exclusion "
        "evidence listed natively, at allocator_hook or at backend_patch, or without "
        "conflict-action or blocking-ids evidence listed natively, at scheduler_hook or at "
        "backend_patch, every hard_protected row is rejected or invalid, at every depth.",
        Method.validity,
        _hard_protected_needs_both_sides,
    ),
    ProofObligation(
        "lowering.legacy_alias_equivalent",
        "Spelling explicit_conflict_action as the legacy alias active_refusal_or_defer changes "
        "nothing: the model's verdict is the same for every descriptor and row, and the loader "
        "reads both spellings (evidence items and inferred_from keys) to the same descriptor.",
        Method.validity,
        _legacy_alias_equivalent,
    ),
)
