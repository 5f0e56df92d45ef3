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
from kvclaims.solver.z3env import all_of, any_of
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
    """The lowering judgment of the row of `d` under `facts` (see the module docstring)."""
    ctx = d.job.ctx
    layout = d.layout

    def num(value: int) -> z3.IntNumRef:
        return z3.IntVal(value, ctx)

    def mode_in(modes: Iterable[ProtectionMode]) -> z3.BoolRef:
        chosen = set(modes)  # iterate in MODES order: set order varies between processes
        return any_of(ctx, [d.mode == index for index, m in enumerate(MODES) if m in chosen])

    def scope_in(var: z3.ArithRef, scopes: Iterable[EvidenceScope]) -> z3.BoolRef:
        return any_of(ctx, [var == SCOPES.index(s) for s in sorted(scopes)])

    supported = STATUSES.index(EvidenceStatus.supported)
    anchored = DEFECTS.index(AnchorDefect.ok)
    telemetry = AdapterDepth.telemetry_join

    joins_hold = [
        all_of(ctx, [d.preconditions[index][p] for p in sorted(facts.telemetry_join_preconditions)])
        for index in range(len(layout.adapters))
    ]
    obligations = [obligation_of(site.name, facts) for site in layout.evidence]
    groups: dict[tuple[Obligation, AdapterDepth], list[int]] = defaultdict(list)
    for index, site in enumerate(layout.evidence):
        groups[(obligations[index], layout.slot(site))].append(index)

    contradicted: dict[tuple[Obligation, AdapterDepth], z3.BoolRef] = {}
    for key, members in groups.items():
        pairs = [
            z3.And(d.evidence[i].present, d.evidence[j].present, d.evidence[i].status != d.evidence[j].status)
            for n, i in enumerate(members)
            for j in members[n + 1 :]
        ]
        contradicted[key] = any_of(ctx, pairs)

    admissible: list[z3.BoolRef] = []
    counting: list[z3.BoolRef] = []
    for index, site in enumerate(layout.evidence):
        ev, obligation, slot = d.evidence[index], obligations[index], layout.slot(site)
        conditions = [
            ev.present,
            ev.status == supported,
            ev.defect == anchored,
            z3.Not(contradicted[(obligation, slot)]),
        ]
        if slot is not NATIVE:
            conditions.append(d.depth >= DEPTHS.index(slot))
            conditions.append(scope_in(ev.scope, facts.runtime_scopes))
        if obligation in facts.enforcement_obligations:
            conditions.append(scope_in(ev.scope, facts.observed_scopes))
        if slot is telemetry:
            assert site.adapter is not None
            conditions.append(joins_hold[site.adapter])
        admissible.append(all_of(ctx, conditions))
        allowed_here = obligation in facts.depth_supplies[slot]
        counting.append(admissible[-1] if allowed_here else z3.BoolVal(False, ctx))

    in_bundle = {o: mode_in(m for m in MODES if o in facts.mode_bundles[m]) for o in OBLIGATIONS}
    supplied: dict[Obligation, z3.BoolRef] = {}
    supplied_rank: dict[Obligation, z3.ArithRef] = {}
    supplied_scope: dict[Obligation, z3.ArithRef] = {}
    for obligation in OBLIGATIONS:
        sites = [i for i in range(len(layout.evidence)) if obligations[i] == obligation]
        supplied[obligation] = any_of(ctx, [counting[i] for i in sites])
        rank: z3.ArithRef = num(-1)
        for depth in reversed(DEPTHS):
            at_depth = [i for i in sites if layout.slot(layout.evidence[i]) is depth]
            if at_depth:
                rank = z3.If(any_of(ctx, [counting[i] for i in at_depth]), num(DEPTHS.index(depth)), rank)
        supplied_rank[obligation] = rank
        scope: z3.ArithRef = num(-1)  # the shallowest slot, then the first scope in SCOPES order
        for depth in reversed(DEPTHS):
            at_depth = [i for i in sites if layout.slot(layout.evidence[i]) is depth]
            for k in reversed(range(len(SCOPES))) if at_depth else ():
                found = any_of(ctx, [z3.And(counting[i], d.evidence[i].scope == k) for i in at_depth])
                scope = z3.If(found, num(k), scope)
        supplied_scope[obligation] = scope

    missing = {o: z3.And(in_bundle[o], z3.Not(supplied[o])) for o in OBLIGATIONS}
    missing_atoms: dict[ObservationAtom, z3.BoolRef] = {}
    for atom in sorted({a for atoms in facts.mode_required_atoms.values() for a in atoms}):
        observed = any_of(
            ctx,
            [
                z3.And(ob.present, ob.defect == anchored, scope_in(ob.scope, facts.observed_scopes))
                for site, ob in zip(layout.observations, d.observations, strict=True)
                if site.atom is atom
            ],
        )
        required = mode_in(m for m in MODES if atom in facts.mode_required_atoms[m])
        missing_atoms[atom] = z3.And(required, z3.Not(observed))
    for atom in ObservationAtom:
        missing_atoms.setdefault(atom, z3.BoolVal(False, ctx))

    lower_holds = z3.Not(any_of(ctx, [*missing.values(), *missing_atoms.values()]))
    all_native = all_of(ctx, [z3.Implies(in_bundle[o], supplied_rank[o] == 0) for o in OBLIGATIONS])
    suggested = any_of(ctx, [z3.And(d.signals[s], mode_in(facts.signal_suggests_modes[s])) for s in SIGNALS])

    def label(value: Label) -> z3.IntNumRef:
        return num(LABELS.index(value))

    def rule(value: Rule) -> z3.IntNumRef:
        return num(RULES.index(value))

    ladder_label = z3.If(
        lower_holds,
        z3.If(all_native, label(Label.native_sound), label(Label.sound_with_adapter)),
        z3.If(suggested, label(Label.approximate), label(Label.unknown)),
    )
    ladder_rule = z3.If(
        lower_holds,
        z3.If(all_native, rule(Rule.lower_holds_natively), rule(Rule.lower_holds_with_adapter)),
        z3.If(suggested, rule(Rule.approximation_signals_never_satisfy), rule(Rule.no_approximation_signal)),
    )
    ladder_sound = lower_holds

    backend_patch = DEPTHS.index(AdapterDepth.backend_patch)
    pressured = SCOPES.index(EvidenceScope.controlled_pressure)
    by_backend_patch = any_of(
        ctx, [z3.And(in_bundle[o], supplied_rank[o] == backend_patch) for o in OBLIGATIONS]
    )
    enforcement_by_adapter = any_of(
        ctx,
        [
            z3.And(in_bundle[o], supplied_rank[o] > 0)
            for o in OBLIGATIONS
            if o in facts.enforcement_obligations
        ],
    )
    under_pressure = z3.Or(
        mode_in(m for m in MODES if facts.mode_required_atoms[m]),
        any_of(ctx, [z3.And(in_bundle[o], supplied_scope[o] == pressured) for o in OBLIGATIONS]),
    )

    def subtype(value: LabelSubtype) -> z3.IntNumRef:
        return num(SUBTYPES.index(value))

    adapter_subtype = z3.If(
        by_backend_patch,
        subtype(LabelSubtype.backend_patch_witness),
        z3.If(
            enforcement_by_adapter,
            subtype(LabelSubtype.adapter_enforcement),
            z3.If(
                under_pressure,
                subtype(LabelSubtype.adapter_policy_under_pressure),
                subtype(LabelSubtype.adapter_observational),
            ),
        ),
    )

    def signal_present(var: z3.ArithRef) -> z3.BoolRef:
        return any_of(ctx, [z3.And(var == k, d.signals[s]) for k, s in enumerate(SIGNALS)])

    def inference_is(obligation: Obligation, verdict: Label) -> z3.BoolRef:
        return any_of(
            ctx,
            [
                d.inferred[obligation] == SIGNALS.index(s)
                for (s, o), (found, _) in sorted(facts.inference_verdicts.items())
                if o == obligation and found is verdict
            ],
        )

    invalid = z3.BoolVal(False, ctx)
    invalid_rule: z3.ArithRef = num(-1)
    for obligation in reversed(OBLIGATIONS):
        var = d.inferred[obligation]
        cites_absent = z3.And(var != NO_INFERENCE, z3.Not(signal_present(var)))
        impossible = inference_is(obligation, Label.invalid)
        this = z3.Or(cites_absent, impossible)
        invalid = z3.Or(this, invalid)
        invalid_rule = z3.If(
            this,
            z3.If(cites_absent, rule(Rule.inference_cites_absent_primitive), rule(Rule.impossible_inference)),
            invalid_rule,
        )

    forbidden = any_of(
        ctx,
        [
            z3.And(d.mode == MODES.index(m), d.signals[s])
            for (m, s) in sorted(facts.global_forbidden_lowerings)
        ]
        + [z3.And(var, d.mode == MODES.index(m), d.signals[s]) for (m, s), var in d.forbidden.items()],
    )
    misattributed = any_of(ctx, [inference_is(o, Label.rejected) for o in OBLIGATIONS])
    critical = any_of(
        ctx,
        [
            z3.And(missing[o], mode_in(m for m in MODES if o in facts.enforcement_critical[m]))
            for o in OBLIGATIONS
        ],
    )
    rejected = z3.Or(forbidden, misattributed, critical)
    rejection_rule = z3.If(
        forbidden,
        rule(Rule.forbidden_lowering),
        z3.If(misattributed, rule(Rule.misattributed_inference), rule(Rule.enforcement_critical_missing)),
    )

    final_label = z3.If(
        invalid,
        label(Label.invalid),
        z3.If(z3.And(z3.Not(ladder_sound), rejected), label(Label.rejected), ladder_label),
    )
    final_rule = z3.If(
        invalid, invalid_rule, z3.If(z3.And(z3.Not(ladder_sound), rejected), rejection_rule, ladder_rule)
    )
    final_subtype = z3.If(final_label == label(Label.sound_with_adapter), adapter_subtype, num(NO_SUBTYPE))
    return SymbolicVerdict(
        label=final_label,
        subtype=final_subtype,
        rule=final_rule,
        missing=missing,
        missing_atoms=missing_atoms,
        supplied=supplied,
        supplied_rank=supplied_rank,
        counting=counting,
        admissible=admissible,
        in_bundle=in_bundle,
        lower_holds=lower_holds,
        invalid=invalid,
    )
