"""kvclaims.spec: the resident-claim contract as typed data, and the lowering judgment.

Depends on nothing else in kvclaims. The vocabulary (`vocabulary`), the tables of facts that
relate it (`tables`), claims (`claims`), evidence and descriptors (`evidence`, `descriptor`),
trace v1 (`trace`), verdicts (`verdict`) and `lower` (`lowering`).
"""

from kvclaims.spec.claims import (
    CacheIdentity,
    HybridTwoKey,
    LeadingPrefixAtLeast,
    MaterializationPredicate,
    ResidentClaimDecision,
    ResidentClaimInput,
)
from kvclaims.spec.descriptor import Descriptor, load_descriptor, load_descriptors
from kvclaims.spec.errors import DescriptorError, InputError, Problem
from kvclaims.spec.evidence import Adapter, Anchor, EvidenceItem, LoweringRow, Observation
from kvclaims.spec.lowering import lower, lower_row
from kvclaims.spec.verdict import LoweringRule, Verdict
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    ApproximationSignal,
    ClaimState,
    ConformanceRule,
    EvidenceScope,
    EvidenceStatus,
    Label,
    LabelSubtype,
    Obligation,
    ProtectionMode,
    TelemetryJoinPrecondition,
)

__all__ = [
    "Adapter",
    "AdapterDepth",
    "Anchor",
    "ApproximationSignal",
    "CacheIdentity",
    "ClaimState",
    "ConformanceRule",
    "Descriptor",
    "DescriptorError",
    "EvidenceItem",
    "EvidenceScope",
    "EvidenceStatus",
    "HybridTwoKey",
    "InputError",
    "Label",
    "LabelSubtype",
    "LeadingPrefixAtLeast",
    "LoweringRow",
    "LoweringRule",
    "MaterializationPredicate",
    "Obligation",
    "Observation",
    "Problem",
    "ProtectionMode",
    "ResidentClaimDecision",
    "ResidentClaimInput",
    "TelemetryJoinPrecondition",
    "Verdict",
    "load_descriptor",
    "load_descriptors",
    "lower",
    "lower_row",
]
