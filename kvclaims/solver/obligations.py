"""Every proof obligation `kvclaims prove` runs, in report order.

The registry sits above `proofs` (which defines what an obligation is) and the four modules
that define obligations, so none of them imports another in a cycle.
"""

from __future__ import annotations

from kvclaims.solver import capacity_proofs, lifecycle_proofs, lowering_proofs, routing_proofs, rule_proofs
from kvclaims.solver.proofs import ProofObligation, ProofResult, run_obligation


def all_obligations() -> tuple[ProofObligation, ...]:
    """Every obligation `kvclaims prove` runs, in report order."""
    return (
        *lowering_proofs.OBLIGATIONS,
        *lifecycle_proofs.OBLIGATIONS,
        *capacity_proofs.OBLIGATIONS,
        *rule_proofs.OBLIGATIONS,
        *routing_proofs.OBLIGATIONS,
    )


def run_named_obligation(name: str) -> ProofResult:
    """Run the obligation called `name` (a task for a worker process)."""
    (obligation,) = (o for o in all_obligations() if o.name == name)
    return run_obligation(obligation)
