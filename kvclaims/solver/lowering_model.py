"""`kvclaims.spec.lower` as Z3 terms over a symbolic descriptor.

`judge(d, facts)` builds, for the row of `d`, the terms of the judgment of
`kvclaims.spec.lowering` in the same order:

1. count evidence: an item counts iff it is present, admitted at the row's depth, supported,
   anchored, of a scope its slot and obligation allow, allowed by `depth_supplies` at its slot,
   (telemetry_join) under all join preconditions, and not contradicted by another status of the
   same obligation at the same slot; the supplier is a counting item at the shallowest slot
   with the first scope in declaration order, whose scope decides the policy-under-pressure
   subtype;
2. the ladder native_sound > sound_with_adapter > approximate > unknown;
3. the overrides: invalid (any inference citing an absent primitive or a category error), then,
   only where the ladder is not sound, rejected (forbidden lowering, misattributed inference,
   missing enforcement-critical obligation).

Every set membership is computed from `Facts` by iteration; the model restates no fact.
Labels, subtypes and deciding rules are indices into `LABELS`, `SUBTYPES` and `RULES`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import z3

from kvclaims.solver.facts import Facts
from kvclaims.solver.symbolic import (
    DEFECTS,
    DEPTHS,
    LABELS,
    MODES,
    NATIVE,
    NO_INFERENCE,
    NO_SUBTYPE,
    OBLIGATIONS,
    RULES,
    SCOPES,
    SIGNALS,
    STATUSES,
    SUBTYPES,
    AnchorDefect,
    SymbolicDescriptor,
    obligation_of,
)
from kvclaims.solver.terms import Ast, Terms
from kvclaims.spec.verdict import LoweringRule
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    EvidenceScope,
    EvidenceStatus,
    Label,
    LabelSubtype,
    Obligation,
    ObservationAtom,
    ProtectionMode,
)

Rule = LoweringRule


@dataclass
class SymbolicVerdict:
    """The judgment of one symbolic row, as Z3 terms. `counting[i]`: evidence site i counts;
    `admissible[i]`: it passes every rule except its slot's `depth_supplies`."""

    label: z3.ArithRef
    subtype: z3.ArithRef
    rule: z3.ArithRef
    missing: dict[Obligation, z3.BoolRef]
    missing_atoms: dict[ObservationAtom, z3.BoolRef]
    supplied: dict[Obligation, z3.BoolRef]
    supplied_rank: dict[Obligation, z3.ArithRef]
    counting: list[z3.BoolRef]
    admissible: list[z3.BoolRef]
    in_bundle: dict[Obligation, z3.BoolRef]
    lower_holds: z3.BoolRef
    invalid: z3.BoolRef
    packed_term: z3.ArithRef | None = None

    def label_is(self, label: Label) -> z3.BoolRef:
        return self.label == LABELS.index(label)

    def sound(self) -> z3.BoolRef:
        return z3.Or(self.label_is(Label.native_sound), self.label_is(Label.sound_with_adapter))

    def read(self, model: z3.ModelRef) -> ConcreteVerdict:
        """The verdict these terms take in `model` (one evaluation of `packed()`)."""
        return self.unpack(model.eval(self.packed(), model_completion=True).as_long())

    def packed(self) -> z3.ArithRef:
        """Label, subtype, rule, missing obligations and missing atoms as one integer."""
        if self.packed_term is None:
            fields = [
                self.label,
                self.subtype + 1,
                self.rule,
                z3.Sum([z3.If(flag, 1 << k, 0) for k, flag in enumerate(self.missing.values())]),
                z3.Sum([z3.If(flag, 1 << k, 0) for k, flag in enumerate(self.missing_atoms.values())]),
            ]
            term: z3.ArithRef = fields[0]
            for shift, value in zip(_SHIFTS[1:], fields[1:], strict=True):
                term = term + value * (1 << shift)
            self.packed_term = term
        return self.packed_term

    def unpack(self, packed: int) -> ConcreteVerdict:
        label, subtype, rule, missing, atoms = (
            (packed >> shift) & ((1 << width) - 1) for shift, width in zip(_SHIFTS, _WIDTHS, strict=True)
        )
        return ConcreteVerdict(
            label=LABELS[label],
            subtype=None if subtype == 0 else SUBTYPES[subtype - 1],
            decided_by=RULES[rule],
            missing=frozenset(o for k, o in enumerate(self.missing) if missing >> k & 1),
            missing_atoms=frozenset(a for k, a in enumerate(self.missing_atoms) if atoms >> k & 1),
        )


_WIDTHS = (4, 4, 5, len(Obligation), len(ObservationAtom))
_SHIFTS = tuple(sum(_WIDTHS[:k]) for k in range(len(_WIDTHS)))


@dataclass(frozen=True)
class ConcreteVerdict:
    """The part of a `kvclaims.spec.verdict.Verdict` the model decides (compared exactly)."""

    label: Label
    subtype: LabelSubtype | None
    decided_by: LoweringRule
    missing: frozenset[Obligation]
    missing_atoms: frozenset[ObservationAtom]

    @classmethod
    def of(cls, verdict: object) -> ConcreteVerdict:
        """The same projection of a Python `Verdict`."""
        return cls(
            label=verdict.label,  # type: ignore[attr-defined]
            subtype=verdict.subtype,  # type: ignore[attr-defined]
            decided_by=verdict.decided_by,  # type: ignore[attr-defined]
            missing=frozenset(verdict.missing),  # type: ignore[attr-defined]
            missing_atoms=frozenset(verdict.missing_atoms),  # type: ignore[attr-defined]
        )


def judge(d: SymbolicDescriptor, facts: Facts) -> SymbolicVerdict:
    """The lowering judgment of the row of `d` under `facts` (see the module docstring).

    Built with `Terms` (direct C calls: the terms z3py's operators would build, in the same
    order), since building it was most of the time of a lowering proof."""
    t = Terms(d.job.ctx)
    try:
        return _judge(t, d, facts)
    finally:
        t.release()


def _judge(t: Terms, d: SymbolicDescriptor, facts: Facts) -> SymbolicVerdict:
    layout = d.layout
    mode, depth = d.mode.as_ast(), d.depth.as_ast()
    evidence = [
        (ev.present.as_ast(), ev.status.as_ast(), ev.scope.as_ast(), ev.defect.as_ast()) for ev in d.evidence
    ]
    signals = {s: var.as_ast() for s, var in d.signals.items()}
    inferred = {o: var.as_ast() for o, var in d.inferred.items()}

    def mode_in(modes: Iterable[ProtectionMode]) -> Ast:
        chosen = set(modes)  # iterate in MODES order: set order varies between processes
        return t.any_of([t.eq(mode, index) for index, m in enumerate(MODES) if m in chosen])

    def scope_in(var: Ast, scopes: Iterable[EvidenceScope]) -> Ast:
        return t.any_of([t.eq(var, SCOPES.index(s)) for s in sorted(scopes)])

    supported = STATUSES.index(EvidenceStatus.supported)
    anchored = DEFECTS.index(AnchorDefect.ok)
    telemetry = AdapterDepth.telemetry_join

    joins_hold = [
        t.all_of([d.preconditions[index][p].as_ast() for p in sorted(facts.telemetry_join_preconditions)])
        for index in range(len(layout.adapters))
    ]
    obligations = [obligation_of(site.name, facts) for site in layout.evidence]
    slots = [layout.slot(site) for site in layout.evidence]
    groups: dict[tuple[Obligation, AdapterDepth], list[int]] = defaultdict(list)
    for index in range(len(layout.evidence)):
        groups[(obligations[index], slots[index])].append(index)

    contradicted: dict[tuple[Obligation, AdapterDepth], Ast] = {}
    for key, members in groups.items():
        pairs = []
        for n, i in enumerate(members):
            for j in members[n + 1 :]:
                differ = t.ne(evidence[i][1], evidence[j][1])
                pairs.append(t.and_([evidence[i][0], evidence[j][0], differ]))
        contradicted[key] = t.any_of(pairs)

    admissible: list[Ast] = []
    counting: list[Ast] = []
    for index, site in enumerate(layout.evidence):
        (present, status, scope, defect), obligation, slot = evidence[index], obligations[index], slots[index]
        conditions = [present, t.eq(status, supported), t.eq(defect, anchored)]
        conditions.append(t.not_(contradicted[(obligation, slot)]))
        if slot is not NATIVE:
            conditions.append(t.ge(depth, DEPTHS.index(slot)))
            conditions.append(scope_in(scope, facts.runtime_scopes))
        if obligation in facts.enforcement_obligations:
            conditions.append(scope_in(scope, facts.observed_scopes))
        if slot is telemetry:
            assert site.adapter is not None
            conditions.append(joins_hold[site.adapter])
        admissible.append(t.all_of(conditions))
        allowed_here = obligation in facts.depth_supplies[slot]
        counting.append(admissible[-1] if allowed_here else t.false())

    in_bundle = {o: mode_in(m for m in MODES if o in facts.mode_bundles[m]) for o in OBLIGATIONS}
    supplied: dict[Obligation, Ast] = {}
    supplied_rank: dict[Obligation, Ast] = {}
    supplied_scope: dict[Obligation, Ast] = {}
    for obligation in OBLIGATIONS:
        sites = [i for i in range(len(layout.evidence)) if obligations[i] == obligation]
        supplied[obligation] = t.any_of([counting[i] for i in sites])
        rank = t.num(-1)
        for depth_value in reversed(DEPTHS):
            at_depth = [i for i in sites if slots[i] is depth_value]
            if at_depth:
                rank = t.ite(
                    t.any_of([counting[i] for i in at_depth]), t.num(DEPTHS.index(depth_value)), rank
                )
        supplied_rank[obligation] = rank
        chosen_scope = t.num(-1)  # the shallowest slot, then the first scope in SCOPES order
        for depth_value in reversed(DEPTHS):
            at_depth = [i for i in sites if slots[i] is depth_value]
            for k in reversed(range(len(SCOPES))) if at_depth else ():
                found = t.any_of([t.and_([counting[i], t.eq(evidence[i][2], k)]) for i in at_depth])
                chosen_scope = t.ite(found, t.num(k), chosen_scope)
        supplied_scope[obligation] = chosen_scope

    missing = {o: t.and_([in_bundle[o], t.not_(supplied[o])]) for o in OBLIGATIONS}
    missing_atoms: dict[ObservationAtom, Ast] = {}
    for atom in sorted({a for atoms in facts.mode_required_atoms.values() for a in atoms}):
        observed = t.any_of(
            [
                t.and_(
                    [
                        ob.present.as_ast(),
                        t.eq(ob.defect.as_ast(), anchored),
                        scope_in(ob.scope.as_ast(), facts.observed_scopes),
                    ]
                )
                for site, ob in zip(layout.observations, d.observations, strict=True)
                if site.atom is atom
            ]
        )
        required = mode_in(m for m in MODES if atom in facts.mode_required_atoms[m])
        missing_atoms[atom] = t.and_([required, t.not_(observed)])
    for atom in ObservationAtom:
        missing_atoms.setdefault(atom, t.false())

    lower_holds = t.not_(t.any_of([*missing.values(), *missing_atoms.values()]))
    all_native = t.all_of([t.implies(in_bundle[o], t.eq(supplied_rank[o], 0)) for o in OBLIGATIONS])
    suggested = t.any_of([t.and_([signals[s], mode_in(facts.signal_suggests_modes[s])]) for s in SIGNALS])

    # numerals are made where z3py made them (as arguments, before the term that uses them)
    def label(value: Label) -> Ast:
        return t.num(LABELS.index(value))

    def rule(value: Rule) -> Ast:
        return t.num(RULES.index(value))

    def subtype(value: LabelSubtype) -> Ast:
        return t.num(SUBTYPES.index(value))

    ladder_label = t.ite(
        lower_holds,
        t.ite(all_native, label(Label.native_sound), label(Label.sound_with_adapter)),
        t.ite(suggested, label(Label.approximate), label(Label.unknown)),
    )
    ladder_rule = t.ite(
        lower_holds,
        t.ite(all_native, rule(Rule.lower_holds_natively), rule(Rule.lower_holds_with_adapter)),
        t.ite(suggested, rule(Rule.approximation_signals_never_satisfy), rule(Rule.no_approximation_signal)),
    )
    ladder_sound = lower_holds

    backend_patch = DEPTHS.index(AdapterDepth.backend_patch)
    pressured = SCOPES.index(EvidenceScope.controlled_pressure)
    by_backend_patch = t.any_of(
        [t.and_([in_bundle[o], t.eq(supplied_rank[o], backend_patch)]) for o in OBLIGATIONS]
    )
    enforcement_by_adapter = t.any_of(
        [
            t.and_([in_bundle[o], t.gt(supplied_rank[o], 0)])
            for o in OBLIGATIONS
            if o in facts.enforcement_obligations
        ]
    )
    under_pressure = t.or_(
        [
            mode_in(m for m in MODES if facts.mode_required_atoms[m]),
            t.any_of([t.and_([in_bundle[o], t.eq(supplied_scope[o], pressured)]) for o in OBLIGATIONS]),
        ]
    )
    adapter_subtype = t.ite(
        by_backend_patch,
        subtype(LabelSubtype.backend_patch_witness),
        t.ite(
            enforcement_by_adapter,
            subtype(LabelSubtype.adapter_enforcement),
            t.ite(
                under_pressure,
                subtype(LabelSubtype.adapter_policy_under_pressure),
                subtype(LabelSubtype.adapter_observational),
            ),
        ),
    )

    def signal_present(var: Ast) -> Ast:
        return t.any_of([t.and_([t.eq(var, k), signals[s]]) for k, s in enumerate(SIGNALS)])

    def inference_is(obligation: Obligation, verdict: Label) -> Ast:
        return t.any_of(
            [
                t.eq(inferred[obligation], SIGNALS.index(s))
                for (s, o), (found, _) in sorted(facts.inference_verdicts.items())
                if o == obligation and found is verdict
            ]
        )

    invalid = t.false()
    invalid_rule = t.num(-1)
    for obligation in reversed(OBLIGATIONS):
        var = inferred[obligation]
        inferring = t.ne(var, NO_INFERENCE)
        cites_absent = t.and_([inferring, t.not_(signal_present(var))])
        impossible = inference_is(obligation, Label.invalid)
        this = t.or_([cites_absent, impossible])
        invalid = t.or_([this, invalid])
        invalid_rule = t.ite(
            this,
            t.ite(cites_absent, rule(Rule.inference_cites_absent_primitive), rule(Rule.impossible_inference)),
            invalid_rule,
        )

    forbidden = t.any_of(
        [
            t.and_([t.eq(mode, MODES.index(m)), signals[s]])
            for (m, s) in sorted(facts.global_forbidden_lowerings)
        ]
        + [
            t.and_([var.as_ast(), t.eq(mode, MODES.index(m)), signals[s]])
            for (m, s), var in d.forbidden.items()
        ]
    )
    misattributed = t.any_of([inference_is(o, Label.rejected) for o in OBLIGATIONS])
    critical = t.any_of(
        [
            t.and_([missing[o], mode_in(m for m in MODES if o in facts.enforcement_critical[m])])
            for o in OBLIGATIONS
        ]
    )
    rejected = t.or_([forbidden, misattributed, critical])
    rejection_rule = t.ite(
        forbidden,
        rule(Rule.forbidden_lowering),
        t.ite(misattributed, rule(Rule.misattributed_inference), rule(Rule.enforcement_critical_missing)),
    )

    final_label = t.ite(
        invalid,
        label(Label.invalid),
        t.ite(t.and_([t.not_(ladder_sound), rejected]), label(Label.rejected), ladder_label),
    )
    final_rule = t.ite(
        invalid, invalid_rule, t.ite(t.and_([t.not_(ladder_sound), rejected]), rejection_rule, ladder_rule)
    )
    # z3py compared `label == final_label`: Python tries the reflected `==` of a subclass first
    final_subtype = t.ite(
        t.eq(label(Label.sound_with_adapter), final_label), adapter_subtype, t.num(NO_SUBTYPE)
    )
    return SymbolicVerdict(
        label=t.int_ref(final_label),
        subtype=t.int_ref(final_subtype),
        rule=t.int_ref(final_rule),
        missing={o: t.bool_ref(term) for o, term in missing.items()},
        missing_atoms={a: t.bool_ref(term) for a, term in missing_atoms.items()},
        supplied={o: t.bool_ref(term) for o, term in supplied.items()},
        supplied_rank={o: t.int_ref(term) for o, term in supplied_rank.items()},
        counting=[t.bool_ref(term) for term in counting],
        admissible=[t.bool_ref(term) for term in admissible],
        in_bundle={o: t.bool_ref(term) for o, term in in_bundle.items()},
        lower_holds=t.bool_ref(lower_holds),
        invalid=t.bool_ref(invalid),
    )
