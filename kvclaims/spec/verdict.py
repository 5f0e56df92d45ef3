"""Lowering verdicts: the label of one (descriptor, mode, depth) row and why.

A verdict is self-explaining: which obligations and atoms are missing, which rule decided the
label, why each discounted evidence item did not count, and which stronger label was refused
first. Its JSON form (`kvclaims lower --json`) is a public interface.
"""

from __future__ import annotations

from enum import StrEnum

from kvclaims.spec._types import SpecModel, Text
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    EvidenceScope,
    Label,
    LabelSubtype,
    Obligation,
    ObservationAtom,
    ProtectionMode,
)


class LoweringRule(StrEnum):
    """Named rules of the lowering judgment.

    The first seven are seed 000's fail-closed rules (table 2), in its order; they discount
    evidence. The rest decide the label once the evidence is counted.
    """

    approximation_signals_never_satisfy = "approximation_signals_never_satisfy"
    obligations_are_evidence_gated = "obligations_are_evidence_gated"
    observed_atoms_must_be_anchored = "observed_atoms_must_be_anchored"
    evidence_scope_matters = "evidence_scope_matters"
    adapter_depth_constrains_obligations = "adapter_depth_constrains_obligations"
    telemetry_cannot_create_enforcement = "telemetry_cannot_create_enforcement"
    ambiguity_fails_closed = "ambiguity_fails_closed"
    inference_cites_absent_primitive = "inference_cites_absent_primitive"
    impossible_inference = "impossible_inference"
    forbidden_lowering = "forbidden_lowering"
    misattributed_inference = "misattributed_inference"
    enforcement_critical_missing = "enforcement_critical_missing"
    no_approximation_signal = "no_approximation_signal"
    lower_holds_with_adapter = "lower_holds_with_adapter"
    lower_holds_natively = "lower_holds_natively"


FAIL_CLOSED_RULES: tuple[LoweringRule, ...] = tuple(LoweringRule)[:7]
"""Seed 000 table 2, one named rule each."""


class DiscountedEvidence(SpecModel):
    """An evidence item (or atom) that was listed but does not count, and the rule why."""

    source: Text
    rule: LoweringRule
    reason: Text


class ObligationFinding(SpecModel):
    """How one obligation of the bundle fared: who supplied it, or why nothing did."""

    obligation: Obligation
    code: Text
    supplied: bool
    supplied_by: Text | None = None
    supplied_at: AdapterDepth | None = None
    supplied_scope: EvidenceScope | None = None
    discounted: list[DiscountedEvidence] = []


class RefusedLabel(SpecModel):
    """The weakest label above the verdict's that the judgment refused, and why."""

    label: Label
    rule: LoweringRule
    reason: Text


class Verdict(SpecModel):
    """The judgment for one row. `label` is also the strongest label still justified."""

    runtime: Text
    surface: Text
    mode: ProtectionMode
    depth: AdapterDepth
    label: Label
    subtype: LabelSubtype | None = None
    missing: list[Obligation] = []
    missing_atoms: list[ObservationAtom] = []
    decided_by: LoweringRule
    reasons: list[Text] = []
    findings: list[ObligationFinding] = []
    first_refused: RefusedLabel | None = None

    @property
    def strongest_justified(self) -> Label:
        return self.label

    def summary(self) -> dict[str, object]:
        """The compact public JSON row of DESIGN 2.4 plus the deciding rule and refusal."""
        return {
            "runtime": self.runtime,
            "surface": self.surface,
            "mode": self.mode.value,
            "depth": self.depth.value,
            "label": self.label.value,
            "subtype": self.subtype.value if self.subtype else None,
            "missing": [o.value for o in self.missing],
            "missing_atoms": [a.value for a in self.missing_atoms],
            "decided_by": self.decided_by.value,
            "strongest_justified": self.label.value,
            "first_refused": self.first_refused.model_dump(mode="json") if self.first_refused else None,
            "reasons": list(self.reasons),
        }
