"""kvclaims.spec: the resident-claim contract as typed data, and the lowering judgment.

Depends on nothing else in kvclaims. The vocabulary (`vocabulary`), the tables of facts that
relate it (`tables`), claims (`claims`), evidence and descriptors (`evidence`, `descriptor`),
trace v1 (`trace`), verdicts (`verdict`) and `lower` (`lowering`). The names below are
re-exported lazily, so importing one submodule does not import the others.
"""

import importlib

_EXPORTS: dict[str, str] = {
    "Adapter": "kvclaims.spec.evidence",
    "AdapterDepth": "kvclaims.spec.vocabulary",
    "Anchor": "kvclaims.spec.evidence",
    "ApproximationSignal": "kvclaims.spec.vocabulary",
    "CacheIdentity": "kvclaims.spec.claims",
    "ClaimState": "kvclaims.spec.vocabulary",
    "ConformanceRule": "kvclaims.spec.vocabulary",
    "Descriptor": "kvclaims.spec.descriptor",
    "DescriptorError": "kvclaims.spec.errors",
    "EvidenceItem": "kvclaims.spec.evidence",
    "EvidenceScope": "kvclaims.spec.vocabulary",
    "EvidenceStatus": "kvclaims.spec.vocabulary",
    "HybridTwoKey": "kvclaims.spec.claims",
    "InputError": "kvclaims.spec.errors",
    "Label": "kvclaims.spec.vocabulary",
    "LabelSubtype": "kvclaims.spec.vocabulary",
    "LeadingPrefixAtLeast": "kvclaims.spec.claims",
    "LoweringRow": "kvclaims.spec.evidence",
    "LoweringRule": "kvclaims.spec.verdict",
    "MaterializationPredicate": "kvclaims.spec.claims",
    "Obligation": "kvclaims.spec.vocabulary",
    "Observation": "kvclaims.spec.evidence",
    "Problem": "kvclaims.spec.errors",
    "ProtectionMode": "kvclaims.spec.vocabulary",
    "ResidentClaimDecision": "kvclaims.spec.claims",
    "ResidentClaimInput": "kvclaims.spec.claims",
    "TelemetryJoinPrecondition": "kvclaims.spec.vocabulary",
    "Verdict": "kvclaims.spec.verdict",
    "load_descriptor": "kvclaims.spec.descriptor",
    "load_descriptors": "kvclaims.spec.descriptor",
    "lower": "kvclaims.spec.lowering",
    "lower_row": "kvclaims.spec.lowering",
}
"""Each public name and the module that defines it, imported on first use: `kvclaims check`
imports trace v1 and the vocabulary, never the descriptor, evidence or lowering models."""

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> object:
    """A public name of `_EXPORTS`, its module imported on first use (PEP 562)."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module 'kvclaims.spec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
