"""The tables the Z3 models read, gathered into one immutable value.

`Facts.reference()` is exactly `kvclaims.spec.tables`; every model in this package takes a
`Facts` argument instead of importing the tables itself, so that a planted bug (a modified copy,
see `kvclaims.solver.planted`) can be injected into the model and the proofs must catch it.
Nothing here is a fact of its own: every field is read from `kvclaims.spec.tables`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from kvclaims.spec import tables
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    ApproximationSignal,
    EvidenceScope,
    Label,
    Obligation,
    ObservationAtom,
    ProtectionMode,
    TelemetryJoinPrecondition,
)


@dataclass(frozen=True)
class Facts:
    """Every table the lowering judgment reads (field names are the table names, lowercased)."""

    mode_bundles: Mapping[ProtectionMode, frozenset[Obligation]]
    mode_required_atoms: Mapping[ProtectionMode, frozenset[ObservationAtom]]
    depth_supplies: Mapping[AdapterDepth, frozenset[Obligation]]
    enforcement_obligations: frozenset[Obligation]
    observed_scopes: frozenset[EvidenceScope]
    runtime_scopes: frozenset[EvidenceScope]
    telemetry_join_preconditions: frozenset[TelemetryJoinPrecondition]
    enforcement_critical: Mapping[ProtectionMode, frozenset[Obligation]]
    signal_suggests_modes: Mapping[ApproximationSignal, frozenset[ProtectionMode]]
    global_forbidden_lowerings: Mapping[tuple[ProtectionMode, ApproximationSignal], str]
    inference_verdicts: Mapping[tuple[ApproximationSignal, Obligation], tuple[Label, str]]
    legacy_obligation_aliases: Mapping[str, Obligation]

    @classmethod
    def reference(cls) -> Facts:
        """The shipped tables, unchanged."""
        return cls(
            mode_bundles=tables.MODE_BUNDLES,
            mode_required_atoms=tables.MODE_REQUIRED_ATOMS,
            depth_supplies=tables.DEPTH_SUPPLIES,
            enforcement_obligations=tables.ENFORCEMENT_OBLIGATIONS,
            observed_scopes=tables.OBSERVED_SCOPES,
            runtime_scopes=tables.RUNTIME_SCOPES,
            telemetry_join_preconditions=tables.TELEMETRY_JOIN_PRECONDITIONS,
            enforcement_critical=tables.ENFORCEMENT_CRITICAL,
            signal_suggests_modes=tables.SIGNAL_SUGGESTS_MODES,
            global_forbidden_lowerings=tables.GLOBAL_FORBIDDEN_LOWERINGS,
            inference_verdicts=tables.INFERENCE_VERDICTS,
            legacy_obligation_aliases=tables.LEGACY_OBLIGATION_ALIASES,
        )

    def with_depth_supplies(self, depth: AdapterDepth, extra: frozenset[Obligation]) -> Facts:
        """A copy in which `depth` may also supply `extra` (used to plant bugs)."""
        supplies = dict(self.depth_supplies)
        supplies[depth] = supplies[depth] | extra
        return replace(self, depth_supplies=MappingProxyType(supplies))

    def scope_strength(self, scope: EvidenceScope) -> int:
        """How much a scope can discharge, derived from the scope tables: 2 observed the
        runtime, 1 is other runtime evidence, 0 neither (docs, source inspection)."""
        return 2 if scope in self.observed_scopes else 1 if scope in self.runtime_scopes else 0
