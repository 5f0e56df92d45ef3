"""The lowering judgment `lower(descriptor, mode, depth) -> Verdict` (seed 000 section 4).

    Lower(d, a, E, m) iff every obligation o of bundle O[m] is supported by some evidence item
    e in d.native or in an adapter of depth <= a such that e is supported, anchored, of an
    admissible scope, allowed at its depth, and not contradicted at that depth; and every atom
    that m requires is observed and anchored.

Evidence is counted first, by the seven fail-closed rules (each discounting item names the rule
that discounted it); the label is then decided in a fixed order:

    1. an inference that cites an absent primitive or is a category error   -> invalid
    2. Lower holds with native evidence only                                  -> native_sound
    3. Lower holds                                                            -> sound_with_adapter
    4. a forbidden lowering's primitive is present, or a misattributed
       inference is made, or an enforcement-critical obligation is missing    -> rejected
    5. a primitive that suggests the mode is present                          -> approximate
    6. otherwise                                                              -> unknown

Steps 2, 3, 5 and 6 are the ladder the evidence justifies; 1 and 4 override it, and the label
they override is reported as the verdict's `first_refused`.

The function is pure: it reads the descriptor (whose anchor digests the loader verified) and the
tables of `kvclaims.spec.tables`, and nothing else. `kvclaims.solver` encodes the same relation
in Z3 and a differential test keeps the two equal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.evidence import Adapter, Anchor, EvidenceItem, LoweringRow, Observation, TraceReading
from kvclaims.spec.tables import (
    DEPTH_SUPPLIES,
    ENFORCEMENT_CRITICAL,
    ENFORCEMENT_OBLIGATIONS,
    GLOBAL_FORBIDDEN_LOWERINGS,
    INFERENCE_VERDICTS,
    KV_EVENT_FORMATS,
    MODE_BUNDLES,
    MODE_REQUIRED_ATOMS,
    OBLIGATION_CODES,
    OBSERVED_SCOPES,
    RUNTIME_SCOPES,
    SIGNAL_SUGGESTS_MODES,
)
from kvclaims.spec.verdict import (
    DiscountedEvidence,
    LoweringRule,
    ObligationFinding,
    RefusedLabel,
    Verdict,
)
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    ApproximationSignal,
    EvidenceScope,
    EvidenceStatus,
    Label,
    LabelSubtype,
    Obligation,
    ObservationAtom,
    ProtectionMode,
)

NATIVE = AdapterDepth.none
Rule = LoweringRule
_SCOPE_RANK = {scope: rank for rank, scope in enumerate(EvidenceScope)}


@dataclass(frozen=True)
class _Candidate:
    """An evidence item admitted at the selected depth, with where it was listed."""

    item: EvidenceItem
    slot: AdapterDepth
    source: str
    adapter: Adapter | None


def lower(
    descriptor: Descriptor,
    mode: ProtectionMode,
    depth: AdapterDepth,
    *,
    inferred_from: Mapping[Obligation, ApproximationSignal] | None = None,
) -> Verdict:
    """Judge whether `descriptor` lowers `mode` at adapter depth `depth`."""
    row = LoweringRow(mode=mode, depth=depth, inferred_from=dict(inferred_from or {}))
    return lower_row(descriptor, row)


def lower_row(descriptor: Descriptor, row: LoweringRow) -> Verdict:
    """Judge one lowering row of `descriptor` (see the module docstring for the order)."""
    candidates = _admitted_candidates(descriptor, row.depth)
    findings = [
        _finding(obligation, candidates.get(obligation, []), row.mode)
        for obligation in Obligation
        if obligation in MODE_BUNDLES[row.mode]
    ]
    missing = [f.obligation for f in findings if not f.supplied]
    atom_discounts, missing_atoms = _atom_findings(descriptor.observations, row.mode)
    ladder = _ladder(descriptor, row, findings, missing, missing_atoms)
    override = _override(descriptor, row, ladder, missing)
    decision = override or ladder
    if override is not None:
        refused = RefusedLabel(label=ladder.label, rule=override.rule, reason=override.reason)
    else:
        refused = _refused_above(ladder, row.depth, findings, missing, missing_atoms)
    return Verdict(
        runtime=descriptor.runtime,
        surface=descriptor.surface,
        mode=row.mode,
        depth=row.depth,
        label=decision.label,
        subtype=decision.subtype,
        missing=missing,
        missing_atoms=missing_atoms,
        decided_by=decision.rule,
        reasons=[decision.reason, *_missing_reasons(findings, atom_discounts, missing_atoms)],
        findings=findings,
        first_refused=refused,
    )


# --- counting evidence -------------------------------------------------------------------------


def _admitted_candidates(descriptor: Descriptor, depth: AdapterDepth) -> dict[Obligation, list[_Candidate]]:
    """Native items and the items of adapters no deeper than `depth`, by obligation."""
    found: dict[Obligation, list[_Candidate]] = defaultdict(list)
    for index, item in enumerate(descriptor.native):
        found[item.obligation].append(_Candidate(item, NATIVE, f"native[{index}]", None))
    for adapter in descriptor.adapters:
        if adapter.depth > depth:
            continue
        for index, item in enumerate(adapter.evidence):
            source = f"adapter {adapter.name} ({adapter.depth}) evidence[{index}]"
            found[item.obligation].append(_Candidate(item, adapter.depth, source, adapter))
    return found


def _finding(obligation: Obligation, candidates: list[_Candidate], mode: ProtectionMode) -> ObligationFinding:
    """Count the candidates for one obligation; the shallowest counting one supplies it."""
    statuses_by_slot: dict[AdapterDepth, set[EvidenceStatus]] = defaultdict(set)
    for candidate in candidates:
        statuses_by_slot[candidate.slot].add(candidate.item.status)
    counting: list[_Candidate] = []
    discounted: list[DiscountedEvidence] = []
    for candidate in candidates:
        contradicted = len(statuses_by_slot[candidate.slot]) > 1
        problems = _discounts(candidate, obligation, contradicted, mode)
        if problems:
            discounted.extend(problems)
        else:
            counting.append(candidate)
    # The shallowest slot, then the first scope in declaration order: the verdict (its
    # supplied_scope, hence its subtype) must not depend on the order items are listed in.
    supplier = min(counting, key=lambda c: (c.slot.rank, _SCOPE_RANK[c.item.scope]), default=None)
    return ObligationFinding(
        obligation=obligation,
        code=OBLIGATION_CODES[obligation],
        supplied=supplier is not None,
        supplied_by=supplier.source if supplier else None,
        supplied_at=supplier.slot if supplier else None,
        supplied_scope=supplier.item.scope if supplier else None,
        discounted=discounted,
    )


def _discounts(
    candidate: _Candidate, obligation: Obligation, contradicted: bool, mode: ProtectionMode
) -> list[DiscountedEvidence]:
    """Every fail-closed rule that keeps this item from counting, in seed order."""
    item, slot, source = candidate.item, candidate.slot, candidate.source
    problems: list[tuple[Rule, str]] = []
    if item.status is not EvidenceStatus.supported:
        problems.append((Rule.obligations_are_evidence_gated, f"status is {item.status}"))
    if item.anchor is None:
        problems.append((Rule.obligations_are_evidence_gated, "no anchor"))
    else:
        problems.extend((Rule.obligations_are_evidence_gated, p) for p in item.anchor.problems())
        if item.anchor.reading is not None and not item.anchor.problems():
            problems.extend(_recheck_problems(item.anchor, obligation, mode))
    if slot is not NATIVE and item.scope not in RUNTIME_SCOPES:
        problems.append(
            (
                Rule.evidence_scope_matters,
                f"adapter evidence of scope {item.scope} is not runtime evidence",
            )
        )
    if obligation in ENFORCEMENT_OBLIGATIONS and item.scope not in OBSERVED_SCOPES:
        problems.append(
            (
                Rule.evidence_scope_matters,
                f"enforcement needs observed evidence, scope is {item.scope}",
            )
        )
    if obligation not in DEPTH_SUPPLIES[slot]:
        rule = (
            Rule.telemetry_cannot_create_enforcement
            if slot is AdapterDepth.telemetry_join and obligation in ENFORCEMENT_OBLIGATIONS
            else Rule.adapter_depth_constrains_obligations
        )
        problems.append((rule, f"a {slot} adapter may not supply {obligation}"))
    if slot is AdapterDepth.telemetry_join and candidate.adapter is not None:
        absent = candidate.adapter.missing_preconditions()
        if absent:
            names = ", ".join(absent)
            problems.append((Rule.ambiguity_fails_closed, f"telemetry-join preconditions not met: {names}"))
    if contradicted:
        problems.append(
            (
                Rule.ambiguity_fails_closed,
                f"contradictory statuses for {obligation} at depth {slot}",
            )
        )
    return [DiscountedEvidence(source=source, rule=rule, reason=reason) for rule, reason in problems]


def _recheck_problems(anchor: Anchor, obligation: Obligation, mode: ProtectionMode) -> list[tuple[Rule, str]]:
    """Why the re-checked trace of `anchor` does not show `obligation` for a `mode` claim: it
    was not accepted (or not closed); it is a KV-event capture, which shows only what a
    telemetry join can; its export does not witness the obligation for the claims the anchor
    names, or for none of them of `mode`; or `event_range` leaves out events of those claims."""
    reading = anchor.reading
    assert reading is not None
    gated = Rule.obligations_are_evidence_gated
    if not reading.accepted:
        return [(gated, _not_accepted(reading))]
    if reading.format in KV_EVENT_FORMATS and obligation not in DEPTH_SUPPLIES[AdapterDepth.telemetry_join]:
        rule = (
            Rule.telemetry_cannot_create_enforcement
            if obligation in ENFORCEMENT_OBLIGATIONS
            else Rule.adapter_depth_constrains_obligations
        )
        return [
            (rule, f"a {reading.format} capture shows only what a telemetry join can show, not {obligation}")
        ]
    witnessed = reading.witnessed.get(obligation, frozenset())
    if not witnessed:
        return [(gated, f"the cited trace's evidence export does not witness {obligation}")]
    if not anchor.claim_ids:
        return [(gated, "the anchor names no claim of the cited trace")]
    problems: list[tuple[Rule, str]] = []
    unwitnessed = [c for c in anchor.claim_ids if c not in witnessed]
    if unwitnessed:
        problems.append(
            (gated, f"the cited trace does not witness {obligation} for {', '.join(unwitnessed)}")
        )
    if not any(reading.modes.get(c) == {mode} for c in anchor.claim_ids if c in witnessed):
        held = sorted({str(m) for c in anchor.claim_ids for m in reading.modes.get(c, ())})
        problems.append(
            (
                gated,
                f"the cited trace witnesses {obligation} for no {mode} claim (the anchor's claims "
                f"are {', '.join(held) or 'of no mode'})",
            )
        )
    if anchor.event_range is not None:
        first, last = anchor.event_range
        for claim in anchor.claim_ids:
            span = reading.spans.get(claim)
            if span is not None and not first <= span[0] <= span[1] <= last:
                problems.append(
                    (
                        gated,
                        f"event_range [{first}, {last}] leaves out events of {claim} (lines "
                        f"{span[0]}-{span[1]}, its outcome included)",
                    )
                )
    return problems


def _not_accepted(reading: TraceReading) -> str:
    return f"the cited trace, re-checked, is {reading.outcome} ({reading.reason}): it evidences nothing"


def _atom_findings(
    observations: Iterable[Observation], mode: ProtectionMode
) -> tuple[list[DiscountedEvidence], list[ObservationAtom]]:
    """Which required atoms are observed and anchored, and why listed ones were discounted."""
    discounted: list[DiscountedEvidence] = []
    observed: set[ObservationAtom] = set()
    required = MODE_REQUIRED_ATOMS[mode]
    for index, observation in enumerate(observations):
        if observation.atom not in required:
            continue
        anchor = observation.anchor
        problems = ["no anchor"] if anchor is None else anchor.problems()
        if anchor is not None and not problems and anchor.reading is not None and not anchor.reading.accepted:
            problems.append(_not_accepted(anchor.reading))
        if observation.scope not in OBSERVED_SCOPES:
            problems.append(f"scope {observation.scope} did not observe the runtime")
        if problems:
            discounted.extend(
                DiscountedEvidence(
                    source=f"observations[{index}] {observation.atom}",
                    rule=Rule.observed_atoms_must_be_anchored,
                    reason=problem,
                )
                for problem in problems
            )
        else:
            observed.add(observation.atom)
    missing = [atom for atom in ObservationAtom if atom in required and atom not in observed]
    return discounted, missing


# --- deciding the label ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Decision:
    label: Label
    rule: Rule
    reason: str
    subtype: LabelSubtype | None = None


def _ladder(
    descriptor: Descriptor,
    row: LoweringRow,
    findings: list[ObligationFinding],
    missing: list[Obligation],
    missing_atoms: list[ObservationAtom],
) -> _Decision:
    """The label the evidence alone justifies: native_sound > sound_with_adapter >
    approximate > unknown."""
    if not missing and not missing_atoms:
        if all(f.supplied_at is NATIVE for f in findings):
            return _Decision(
                Label.native_sound,
                Rule.lower_holds_natively,
                "every obligation and atom is supplied by native evidence",
            )
        subtype = _subtype(row.mode, findings)
        return _Decision(
            Label.sound_with_adapter,
            Rule.lower_holds_with_adapter,
            f"every obligation and atom is supplied; adapters are trusted ({subtype})",
            subtype,
        )
    suggesting = sorted(s for s in descriptor.approximation_signals if row.mode in SIGNAL_SUGGESTS_MODES[s])
    if suggesting:
        return _Decision(
            Label.approximate,
            Rule.approximation_signals_never_satisfy,
            f"related primitives present ({', '.join(suggesting)}), but they do not supply "
            "everything this mode needs",
        )
    return _Decision(
        Label.unknown,
        Rule.no_approximation_signal,
        "not everything this mode needs is supplied, and no primitive related to it is present",
    )


def _override(
    descriptor: Descriptor, row: LoweringRow, ladder: _Decision, missing: list[Obligation]
) -> _Decision | None:
    """An invalid row (always) or a rejected mapping (only where the bundle is not supplied)."""
    signals = set(descriptor.approximation_signals)
    invalid = _invalid_inference(row, signals)
    if invalid is not None:
        return _Decision(Label.invalid, *invalid)
    if ladder.label.is_sound:
        return None
    rejection = _rejection(descriptor, row, signals, missing)
    if rejection is not None:
        return _Decision(Label.rejected, *rejection)
    return None


def _invalid_inference(row: LoweringRow, signals: set[ApproximationSignal]) -> tuple[Rule, str] | None:
    for obligation, signal in row.inferred_from.items():
        if signal not in signals:
            return Rule.inference_cites_absent_primitive, (
                f"the row infers {obligation} from {signal}, which this runtime does not expose"
            )
        verdict = INFERENCE_VERDICTS.get((signal, obligation))
        if verdict is not None and verdict[0] is Label.invalid:
            return Rule.impossible_inference, verdict[1]
    return None


def _rejection(
    descriptor: Descriptor,
    row: LoweringRow,
    signals: set[ApproximationSignal],
    missing: list[Obligation],
) -> tuple[Rule, str] | None:
    forbidden = {
        via: reason for (mode, via), reason in GLOBAL_FORBIDDEN_LOWERINGS.items() if mode is row.mode
    } | {f.via: f.reason for f in descriptor.forbidden_lowerings if f.mode is row.mode}
    for via in sorted(forbidden):
        if via in signals:
            return Rule.forbidden_lowering, f"{row.mode} via {via} is forbidden: {forbidden[via]}"
    for obligation, signal in row.inferred_from.items():
        verdict = INFERENCE_VERDICTS.get((signal, obligation))
        if verdict is not None and verdict[0] is Label.rejected:
            return Rule.misattributed_inference, f"{obligation} from {signal}: {verdict[1]}"
    critical = [o for o in missing if o in ENFORCEMENT_CRITICAL[row.mode]]
    if critical:
        codes = ", ".join(OBLIGATION_CODES[o] for o in critical)
        return Rule.enforcement_critical_missing, (
            f"{row.mode} without {codes} would misrepresent the contract"
        )
    return None


def _subtype(mode: ProtectionMode, findings: list[ObligationFinding]) -> LabelSubtype:
    adapter_findings = [f for f in findings if f.supplied_at is not NATIVE]
    if any(f.supplied_at is AdapterDepth.backend_patch for f in adapter_findings):
        return LabelSubtype.backend_patch_witness
    if any(f.obligation in ENFORCEMENT_OBLIGATIONS for f in adapter_findings):
        return LabelSubtype.adapter_enforcement
    under_pressure = MODE_REQUIRED_ATOMS[mode] or any(
        f.supplied_scope is EvidenceScope.controlled_pressure for f in findings
    )
    if under_pressure:
        return LabelSubtype.adapter_policy_under_pressure
    return LabelSubtype.adapter_observational


def _refused_above(
    ladder: _Decision,
    depth: AdapterDepth,
    findings: list[ObligationFinding],
    missing: list[Obligation],
    missing_atoms: list[ObservationAtom],
) -> RefusedLabel | None:
    """The sound label this depth could reach above the ladder's, and what it lacked."""
    if ladder.label is Label.native_sound:
        return None
    if ladder.label is Label.sound_with_adapter:
        by_adapter = [f.code for f in findings if f.supplied_at is not NATIVE]
        return RefusedLabel(
            label=Label.native_sound,
            rule=Rule.lower_holds_with_adapter,
            reason=f"supplied only through adapters: {', '.join(by_adapter)}",
        )
    sound = Label.native_sound if depth is NATIVE else Label.sound_with_adapter
    gaps = [OBLIGATION_CODES[o] for o in missing] + [str(a) for a in missing_atoms]
    return RefusedLabel(label=sound, rule=ladder.rule, reason=f"missing: {', '.join(gaps)}")


def _missing_reasons(
    findings: list[ObligationFinding],
    atom_discounts: list[DiscountedEvidence],
    missing_atoms: list[ObservationAtom],
) -> list[str]:
    lines = []
    for finding in findings:
        if finding.supplied:
            continue
        if not finding.discounted:
            lines.append(f"{finding.code} {finding.obligation}: no evidence at this depth")
            continue
        why = "; ".join(f"{d.source}: {d.reason} ({d.rule})" for d in finding.discounted)
        lines.append(f"{finding.code} {finding.obligation}: {why}")
    for atom in missing_atoms:
        why = "; ".join(f"{d.source}: {d.reason}" for d in atom_discounts if str(atom) in d.source)
        lines.append(f"atom {atom}: {why or 'not observed'} ({Rule.observed_atoms_must_be_anchored})")
    return lines
