"""What a trace exercised (DESIGN 4 gates: paths A-C, L1-L7), recorded for the evidence export; no
rule, no verdict.
"""

from __future__ import annotations

from kvclaims.spec.vocabulary import (
    TraceWitness,
)
from kvclaims.statemachine.system.records import (
    _MAX_WITNESS_CLAIMS,
)


class WitnessModel:
    """Witness recording, as `SystemState` methods."""

    def _witness(self, kind: TraceWitness, lines: tuple[int, ...], *claim_ids: str) -> None:
        """Record that `kind` was exercised: the first positions that show it, and (up to a
        bound) every claim it was shown for."""
        found = self.witnessed.get(kind)
        if found is None:
            found = self.witnessed[kind] = (tuple(sorted({line for line in lines if line})), set(claim_ids))
        elif len(found[1]) < _MAX_WITNESS_CLAIMS:
            found[1].update(claim_ids)
        if not claim_ids or len(found[1]) >= _MAX_WITNESS_CLAIMS:
            self._complete.add(kind)

    def _settle_witnesses(self) -> None:
        for claim in self.claims.values():
            if claim.blocked_while_full and not claim.broken_while_responsible:
                self._witness(
                    TraceWitness.protected_under_pressure,
                    (claim.accepted_at, claim.blocked_while_full),
                    claim.claim_id,
                )
        failed = self.witnessed.get(TraceWitness.restoration_failure_fail_closed)
        restored = self.witnessed.get(TraceWitness.restore_before_reuse)
        if failed is not None and restored is not None:
            clean = [c for c in restored[1] if c not in self._failure_named]
            if clean:
                self._witness(
                    TraceWitness.multi_claim_attribution,
                    (*failed[0], *restored[0]),
                    *sorted(failed[1]),
                    *clean,
                )
