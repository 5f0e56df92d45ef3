"""Proof obligations about the capacity arithmetic of refusals (`kvclaims.solver.capacity_model`)."""

from __future__ import annotations

from typing import Any

import z3

from kvclaims.solver.capacity_model import CAPACITY_FIELDS, CapacityTerms, capacity_checks, violated_checks
from kvclaims.solver.engines import prove_valid
from kvclaims.solver.facts import Facts
from kvclaims.solver.proofs import Method, Outcome, ProofObligation
from kvclaims.solver.z3env import Job

ANCHOR_LIVE_TRACE: dict[str, int] = {
    "protected_resident_blocks": 40,
    "active_live_blocks_required": 46,
    "resident_plus_active_blocks": 86,
    "usable_blocks": 68,
    "capacity_shortfall_blocks": 19,
}
"""The seed artifact's live-scheduler refusal (DESIGN 2.2): 86 - 68 is 18, not 19."""


def _counterexample(model: z3.ModelRef, terms: CapacityTerms) -> dict[str, Any]:
    values = terms.values()
    found = {
        name: model.eval(v, model_completion=True).as_long()
        for name, v in zip(CAPACITY_FIELDS, values, strict=True)
    }
    return found | {"capacity_reason": z3.is_true(model.eval(terms.capacity_reason, model_completion=True))}


def _refusal_only_over_capacity(job: Job, facts: Facts) -> Outcome:
    terms = CapacityTerms.fresh(job, "r", with_header=True)
    consistent = z3.And(list(capacity_checks(terms).values()))
    over = terms.protected + terms.active > terms.header_usable  # type: ignore[operator]
    exact = terms.shortfall == terms.protected + terms.active - terms.header_usable  # type: ignore[operator]
    claim = z3.Implies(z3.And(consistent, terms.capacity_reason), z3.And(over, exact))
    result = prove_valid(job, claim, [terms.non_negative()])
    detail: dict[str, Any] = {
        "domain": "non-negative unbounded integers",
        "checks": sorted(capacity_checks(terms)),
    }
    if result.counterexample is not None:
        detail["counterexample"] = _counterexample(result.counterexample, terms)
    return Outcome(result.holds, detail)


def _anchor_live_trace_rejected(job: Job, facts: Facts) -> Outcome:
    terms = CapacityTerms.of(job, ANCHOR_LIVE_TRACE, capacity_reason=True, header_usable=68)
    consistent = z3.And(list(capacity_checks(terms).values()))
    result = prove_valid(job, z3.Not(consistent))
    violated = violated_checks(ANCHOR_LIVE_TRACE, capacity_reason=True, header_usable=68)
    return Outcome(
        result.holds and violated == ["shortfall"],
        {"numbers": ANCHOR_LIVE_TRACE, "header_usable": 68, "violated_checks": violated},
    )


OBLIGATIONS: tuple[ProofObligation, ...] = (
    ProofObligation(
        "capacity.refusal_only_when_over_capacity",
        "A capacity refusal or deferral whose proof passes every check (sum, shortfall = "
        "max(0, sum - usable), usable equal to the header's, positive shortfall) has "
        "protected + active > usable, and its shortfall is exactly protected + active - usable.",
        Method.validity,
        _refusal_only_over_capacity,
    ),
    ProofObligation(
        "capacity.anchor_live_trace_numbers_rejected",
        "The seed artifact's live refusal (40 + 46 = 86 with usable 68 and shortfall 19) fails "
        "the capacity checks, and only the shortfall check.",
        Method.validity,
        _anchor_live_trace_rejected,
    ),
)
