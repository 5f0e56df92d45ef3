"""The capacity arithmetic of refusals and deferrals (DESIGN 2.2, refinement rule 3), in Z3.

An `active_request_refused` / `_deferred` event carries a capacity proof. It is consistent iff
every check of `capacity_checks` holds:

- `sum`: `resident_plus_active_blocks == protected_resident_blocks + active_live_blocks_required`
- `shortfall`: `capacity_shortfall_blocks == max(0, resident_plus_active_blocks - usable_blocks)`
- `header_usable`: `usable_blocks` equals the trace header's, when the header states one
- `capacity_needs_shortfall`: a refusal or deferral for reason `capacity` has a positive shortfall

The checks are Z3 terms over integers (unbounded, non-negative), so the same terms prove the
properties (`kvclaims.solver.obligations`) and judge concrete numbers (`violated_checks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import z3

from kvclaims.solver.z3env import Job
from kvclaims.spec.tables import CAPACITY_PROOF_FIELDS

CAPACITY_FIELDS = CAPACITY_PROOF_FIELDS
"""The refusal numbers the model reasons about, in trace v1's order."""


@dataclass(frozen=True)
class CapacityTerms:
    """One refusal's numbers as Z3 integers, and whether its reason is `capacity`."""

    protected: z3.ArithRef
    active: z3.ArithRef
    resident_plus_active: z3.ArithRef
    usable: z3.ArithRef
    shortfall: z3.ArithRef
    capacity_reason: z3.BoolRef
    header_usable: z3.ArithRef | None

    @classmethod
    def fresh(cls, job: Job, prefix: str, *, with_header: bool) -> CapacityTerms:
        return cls(
            protected=job.int(f"{prefix}.protected"),
            active=job.int(f"{prefix}.active"),
            resident_plus_active=job.int(f"{prefix}.resident_plus_active"),
            usable=job.int(f"{prefix}.usable"),
            shortfall=job.int(f"{prefix}.shortfall"),
            capacity_reason=job.bool(f"{prefix}.capacity_reason"),
            header_usable=job.int(f"{prefix}.header_usable") if with_header else None,
        )

    @classmethod
    def of(
        cls, job: Job, numbers: Mapping[str, int], *, capacity_reason: bool, header_usable: int | None
    ) -> CapacityTerms:
        """Concrete numbers (keys: `CAPACITY_FIELDS`) as constant terms."""
        values = [job.val(numbers[name]) for name in CAPACITY_FIELDS]
        return cls(
            *values,
            capacity_reason=z3.BoolVal(capacity_reason, job.ctx),
            header_usable=None if header_usable is None else job.val(header_usable),
        )

    def values(self) -> list[z3.ArithRef]:
        """The refusal's numbers in `CAPACITY_FIELDS` order."""
        return [self.protected, self.active, self.resident_plus_active, self.usable, self.shortfall]

    def non_negative(self) -> z3.BoolRef:
        numbers = self.values()
        if self.header_usable is not None:
            numbers.append(self.header_usable)
        return z3.And([n >= 0 for n in numbers])


def capacity_checks(terms: CapacityTerms) -> dict[str, z3.BoolRef]:
    """The named checks of a refusal's capacity proof (see the module docstring)."""
    excess = terms.resident_plus_active - terms.usable
    checks = {
        "sum": terms.resident_plus_active == terms.protected + terms.active,
        "shortfall": terms.shortfall == z3.If(excess > 0, excess, 0),
        "capacity_needs_shortfall": z3.Implies(terms.capacity_reason, terms.shortfall > 0),
    }
    if terms.header_usable is not None:
        checks["header_usable"] = terms.usable == terms.header_usable
    return checks


def violated_checks(
    numbers: Mapping[str, int], *, capacity_reason: bool, header_usable: int | None
) -> list[str]:
    """The names of the checks these concrete numbers violate (empty when consistent)."""
    job = Job()
    checks = capacity_checks(
        CapacityTerms.of(job, numbers, capacity_reason=capacity_reason, header_usable=header_usable)
    )
    return [name for name, term in checks.items() if not z3.is_true(z3.simplify(term))]
